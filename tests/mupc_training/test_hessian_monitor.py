"""The batched Krylov extremes of the Hessian monitor against dense eigvalsh, run by run; its small eigen-solves on
the host; its dense crossover per device type (params, stage, cost)."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import torch

from pipeline.config import ConfigError, load_section, read_tree
from pipeline.contract import Context
from pipeline.studies.mupc.engine.model import NetSpec, feedforward, init_weights
from pipeline.studies.mupc.training import cost as mupc_cost
from pipeline.studies.mupc.training import hessian_monitor as hm
from pipeline.studies.mupc.training import train as train_mod
from pipeline.studies.mupc.training.config import DEVICE_TYPES, DenseMaxN, TrainingParams
from pipeline.studies.mupc.training.sweep_expansion import expand

F64 = torch.float64
ROOT = Path(__file__).resolve().parents[2]


def _state(act: str, skips: bool, param: str, N: int = 24, H: int = 6, seeds=(0, 1, 2), pert: float = 0.0,
           dtype: torch.dtype = F64):
    """Stacked runs (different weights per seed) and one sample each, optionally off the feed-forward point."""
    spec = NetSpec(D=10, N=N, H=H, d_y=3, act=act, skips=skips, param=param,
                   init="standard_gauss" if param == "mupc" else "standard")
    w = init_weights(spec, list(seeds), dtype=dtype)
    g = torch.Generator().manual_seed(7)
    R = len(seeds)
    x = torch.rand(R, 1, 10, generator=g, dtype=F64).to(dtype)
    y = torch.randn(R, 1, 3, generator=g, dtype=F64).to(dtype)
    z, _ = feedforward(spec, w, x)
    z = z + pert * torch.randn(z.shape, generator=g, dtype=F64).to(dtype)
    return spec, w, x, y, z


def _dense(spec, w, x, y, z, decay=0.0):
    return hm.dense_extremes(spec, w, x[:, 0], y[:, 0], z[:, :, 0], decay)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(((a - b).abs() / b.abs()).max())


@pytest.mark.parametrize("N", [24, 64])  # n = 144: Lanczos keeps its basis (n ≤ steps); n = 384: no basis
@pytest.mark.parametrize("act,skips,param,pert,decay", [
    ("linear", True, "mupc", 0.0, 0.0), ("linear", False, "sp", 0.0, 0.5), ("relu", True, "mupc", 0.3, 0.0),
    ("relu", False, "sp", 0.3, 0.0), ("tanh", True, "mupc", 0.0, 0.0), ("tanh", False, "sp", 0.3, 0.1)])
def test_structured_extremes_match_dense_per_run(act, skips, param, pert, decay, N):
    spec, w, x, y, z = _state(act, skips, param, N=N, pert=pert)
    n = N * spec.H
    assert (n <= hm.LANCZOS_STEPS.max) == (N == 24) and n > hm.SHIFT_INVERT_STEPS.max
    f = hm.factors(spec, w, x[:, 0], y[:, 0], z[:, :, 0], decay)
    lo, hi, err, method = hm.structured_extremes(f, act == "tanh")
    dlo, dhi = _dense(spec, w, x, y, z, decay)
    assert _rel(lo, dlo) <= 1e-6 and _rel(hi, dhi) <= 1e-6, (lo, dlo, hi, dhi)
    assert float(err.max()) <= hm.TOL
    assert ("lobpcg" in method) == (act == "tanh")


@pytest.mark.parametrize("act", ["linear", "tanh", "relu"])
def test_a_runs_extremes_do_not_depend_on_its_stack_and_reruns_are_identical(act):
    """Each run settles at its own check, so alone it gets its stacked numbers (to round-off); a rerun the
    same bits."""
    spec, w, x, y, z = _state(act, True, "mupc", N=64, pert=0.2)
    stacked = hm.monitor(spec, w, x, y, z, 0.0, dense_max_n=0)
    again = hm.monitor(spec, w, x, y, z, 0.0, dense_max_n=0)
    assert all(torch.equal(a, b) for a, b in zip(stacked[:3], again[:3])) and stacked[3] == again[3]
    one = torch.tensor([1])
    alone = hm.monitor(spec, type(w)(*(t[one] for t in w.tensors())), x[one], y[one], z[one], 0.0, dense_max_n=0)
    for a, b in zip(alone[:3], stacked[:3]):
        assert _rel(a, b[one]) <= 1e-9  # batched products round differently


def test_the_error_estimate_bounds_a_geometric_tail():
    """Values converging geometrically (ratio ρ per HISTORY steps, ρ ≤ 0.9): the estimate is at least the error."""
    lam = torch.tensor([2.0, 2.0, 2.0], dtype=F64)
    rho = torch.tensor([0.05, 0.5, 0.9], dtype=F64)
    for m in range(2, 6):
        v = [lam - 1e-3 * rho ** k for k in (m - 2, m - 1, m)]  # earlier, before, now
        est = hm._estimate(v[2], v[1], v[0])
        assert bool((est * v[2].abs() >= (lam - v[2]).abs()).all()), (m, est)
    same = hm._estimate(lam, lam, lam)
    assert bool((same == 0).all())


def test_matvec_and_gram_inverse_are_the_block_formulas():
    spec, w, x, y, z = _state("tanh", True, "mupc", pert=0.3)
    f = hm.factors(spec, w, x[:, 0], y[:, 0], z[:, :, 0], 0.2)
    dense = hm.activity_hessian(spec, w, x[:, 0], y[:, 0], z[:, :, 0], 0.2)
    R, H, N = f.shape
    v = torch.randn(R, H, 2, N, dtype=F64)
    flat = v.permute(0, 2, 1, 3).reshape(R, 2, H * N)
    got = hm.matvec(f, v).permute(0, 2, 1, 3).reshape(R, 2, H * N)
    assert torch.allclose(got, flat @ dense.mT, atol=1e-11)
    gram = dense - torch.diag_embed(f.delta.reshape(R, -1))  # AᵀA
    sol = hm.GramInverse(f)(v).permute(0, 2, 1, 3).reshape(R, 2, H * N)
    assert torch.allclose(sol @ gram.mT, flat, atol=1e-9)


def test_indefinite_hessian_keeps_signed_extremes():
    spec, w, x, y, z = _state("tanh", False, "sp", pert=1.0)
    dlo, dhi = _dense(spec, w, x, y, z)
    assert bool((dlo < 0).all()), dlo  # the case is indefinite
    lo, hi, kap, method = hm.monitor(spec, w, x, y, z, 0.0, dense_max_n=0)
    assert "lobpcg" in method and "dense" not in method
    assert _rel(lo, dlo) <= 1e-6 and _rel(hi, dhi) <= 1e-6
    assert torch.allclose(kap, dhi.abs() / dlo.abs(), rtol=1e-6)


def test_monitor_routes_and_float32_runs():
    spec, w, x, y, z = _state("relu", True, "mupc", pert=0.2, dtype=torch.float32)
    lo, hi, kap, method = hm.monitor(spec, w, x, y, z)
    assert method == "dense_eigvalsh" and lo.dtype == F64
    lo2, hi2, kap2, method2 = hm.monitor(spec, w, x, y, z, 0.0, dense_max_n=0)
    assert method2 == "lanczos_LA+shift_invert_woodbury"
    assert _rel(lo2, lo) <= 1e-6 and _rel(hi2, hi) <= 1e-6 and _rel(kap2, kap) <= 2e-6


def test_a_non_finite_run_gets_nan_and_the_others_their_numbers():
    spec, w, x, y, z = _state("linear", True, "mupc")
    w.w_hid[1, 0, 0, 0] = float("nan")
    lo, hi, kap, method = hm.monitor(spec, w, x, y, z, 0.0, dense_max_n=0)
    assert torch.isnan(lo[1]) and torch.isnan(hi[1]) and torch.isnan(kap[1])
    keep = torch.tensor([0, 2])
    dlo, dhi = hm.dense_extremes(spec, type(w)(*(t[keep] for t in w.tensors())), x[keep, 0], y[keep, 0],
                                 z[keep][:, :, 0])
    assert _rel(lo[keep], dlo) <= 1e-6 and _rel(hi[keep], dhi) <= 1e-6


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_monitor_on_cuda_equals_the_cpu():
    for act in ("linear", "tanh"):
        spec, w, x, y, z = _state(act, True, "mupc", N=64, H=8, pert=0.2)
        cpu = hm.monitor(spec, w, x, y, z, 0.0, dense_max_n=0)
        wc = type(w)(*(t.cuda() for t in w.tensors()))
        gpu = hm.monitor(spec, wc, x.cuda(), y.cuda(), z.cuda(), 0.0, dense_max_n=0)
        assert gpu[3] == cpu[3]
        for a, b in zip(gpu[:3], cpu[:3]):
            assert a.device.type == "cpu" and _rel(a, b) <= 2e-6  # a run may settle one check apart


def test_a_run_whose_estimate_is_above_the_tolerance_is_redone(monkeypatch):
    spec, w, x, y, z = _state("linear", True, "mupc")
    monkeypatch.setattr(hm, "TOL", -1.0)  # every estimate fails
    lo, hi, kap, method = hm.monitor(spec, w, x, y, z, 0.0, dense_max_n=0)
    assert method == "lanczos_LA+shift_invert_woodbury/dense+dense"
    dlo, dhi = _dense(spec, w, x, y, z)
    assert _rel(lo, dlo) <= 1e-10 and _rel(hi, dhi) <= 1e-10


# ----------------------------------------------------------------------------- the small solves on the host


class _Elsewhere(torch.Tensor):
    """A CPU tensor standing for one on an accelerator (a CPU build has none): whatever is computed from it
    stays ``_Elsewhere``, and only ``.cpu()`` (the transfer to the host) gives a plain tensor."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs)
        return out.as_subclass(torch.Tensor) if func is torch.Tensor.cpu else out


def _spy_eigen(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, type, str]]:
    """Record (solver, argument's type, argument's device type) of every eigvalsh / eigh call."""
    seen: list[tuple[str, type, str]] = []
    for name in ("eigvalsh", "eigh"):
        real = getattr(torch.linalg, name)

        def spy(a, *args, _real=real, _name=name, **kw):
            seen.append((_name, type(a), a.device.type))
            return _real(a, *args, **kw)

        monkeypatch.setattr(torch.linalg, name, spy)
    return seen


@pytest.mark.parametrize("act,N", [("linear", 24), ("tanh", 24), ("relu", 64), ("tanh", 64)])
def test_the_krylov_iterations_solve_their_small_eigen_problems_on_the_host(monkeypatch, act, N):
    """With the runs' tensors on a device, every tridiagonal (Lanczos) and 3×3 Rayleigh–Ritz problem (LOBPCG)
    reaches the solver as a host copy, while the iterations themselves stay on the device; on the CPU the
    numbers are the solver's own, bit for bit."""
    spec, w, x, y, z = _state(act, True, "mupc", N=N, pert=0.2)
    args = (x[:, 0], y[:, 0], z[:, :, 0], 0.1)
    lo, hi, err, method = hm.structured_extremes(hm.factors(spec, w, *args), act == "tanh")
    seen = _spy_eigen(monkeypatch)
    we = type(w)(*(t.as_subclass(_Elsewhere) for t in w.tensors()))
    f = hm.factors(spec, we, *(a.as_subclass(_Elsewhere) if torch.is_tensor(a) else a for a in args))
    elo, ehi, eerr, emethod = hm.structured_extremes(f, act == "tanh")
    solvers = {name for name, _, _ in seen}
    assert solvers == ({"eigvalsh", "eigh"} if act == "tanh" else {"eigvalsh"}), seen
    on_device = [(name, tp.__name__) for name, tp, _ in seen if tp is not torch.Tensor]
    assert not on_device, f"{len(on_device)} of {len(seen)} small solves on the device: {on_device[:3]}"
    assert type(elo) is _Elsewhere and type(ehi) is _Elsewhere  # the iterations' own tensors: on the device
    assert emethod == method
    for a, b in zip((elo, ehi, eerr), (lo, hi, err)):
        assert torch.equal(a.as_subclass(torch.Tensor), b)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_the_small_solves_run_on_the_host_and_give_the_cpus_extremes(monkeypatch):
    """The monitor on CUDA with its small eigen-problems solved on the host: every solve gets a CPU tensor,
    its result goes back to CUDA, and the extremes are the CPU's within test_monitor_on_cuda_equals_the_cpu's
    tolerance."""
    seen = _spy_eigen(monkeypatch)
    trips: list[tuple[str, str]] = []
    real = hm._on_host

    def on_host(solve, a):
        out = real(solve, a)
        trips.append((a.device.type, out.device.type))
        return out

    monkeypatch.setattr(hm, "_on_host", on_host)
    for act in ("linear", "tanh", "relu"):
        spec, w, x, y, z = _state(act, True, "mupc", N=64, H=8, pert=0.2)
        cpu = hm.monitor(spec, w, x, y, z, 0.0, dense_max_n=0)
        seen.clear()
        trips.clear()
        wc = type(w)(*(t.cuda() for t in w.tensors()))
        gpu = hm.monitor(spec, wc, x.cuda(), y.cuda(), z.cuda(), 0.0, dense_max_n=0)
        assert seen and {dev for _, _, dev in seen} == {"cpu"}, seen[:3]
        assert len(trips) == len(seen) and set(trips) == {("cuda", "cuda")}, trips[:3]
        assert gpu[3] == cpu[3]
        for a, b in zip(gpu[:3], cpu[:3]):
            assert a.device.type == "cpu" and _rel(a, b) <= 2e-6  # a run may settle one check apart


# ----------------------------------------------------------------------------- the dense crossover per device


def _training_cfg(dense_max_n=None, override=None, profile: str = "smoke"):
    """The params' mupc_training section for ``profile``, with hessian_dense_max_n replaced (base and/or the
    profile's override) where given."""
    raw = copy.deepcopy(read_tree(ROOT)["mupc_training"])
    if dense_max_n is not None:
        raw["hessian_dense_max_n"] = dense_max_n
    if override is not None:
        raw["profiles"][profile]["hessian_dense_max_n"] = override
    return load_section(TrainingParams, {"mupc_training": raw}, "mupc_training", profile)


KEY = "mupc_training.hessian_dense_max_n"


@pytest.mark.parametrize("value,override,msg", [
    (1024, None, f"{KEY} = 1024 is not allowed; allowed: a mapping with keys ['cpu', 'cuda']"),
    ({"cpu": 1024}, None, f"{KEY}.cuda is missing; expected an integer"),
    ({"cuda": 1024}, None, f"{KEY}.cpu is missing; expected an integer"),
    ({"cpu": 0, "cuda": 1024}, None, f"{KEY}.cpu = 0 is not allowed; allowed: a value in [1, None]"),
    ({"cpu": 1024, "cuda": -512}, None, f"{KEY}.cuda = -512 is not allowed; allowed: a value in [1, None]"),
    (None, {"cuda": 0}, f"{KEY}.cuda = 0 is not allowed; allowed: a value in [1, None]"),  # a profile's override
    ({"cpu": 1024, "cuda": 1024, "tpu": 64}, None, f"{KEY}.tpu is not a known key; allowed keys: ['cpu', 'cuda']"),
    ({"cpu": 1024, "cuda:0": 512}, None, f"{KEY}.cuda:0 is not a known key; allowed keys: ['cpu', 'cuda']"),
    ({"cpu": 1024.5, "cuda": 1024}, None, f"{KEY}.cpu = 1024.5 is not allowed; allowed: an integer"),
    ({"cpu": True, "cuda": 1024}, None, f"{KEY}.cpu = True is not allowed; allowed: an integer"),
])
def test_the_dense_crossover_is_refused_on_load_unless_a_positive_integer_per_device_type(value, override, msg):
    with pytest.raises(ConfigError, match=re.escape(f"params/mupc_training.yaml: {msg}")):
        _training_cfg(value, override)


def test_the_params_give_every_device_type_its_dense_crossover():
    cfg = _training_cfg()
    assert cfg.hessian_dense_max_n == DenseMaxN(cpu=hm.DENSE_CROSSOVER_N, cuda=2048)  # H100-measured
    assert DEVICE_TYPES == ("cpu", "cuda")
    merged = _training_cfg({"cpu": 7, "cuda": 11}, override={"cuda": 13})  # a profile overrides one device's
    assert merged.hessian_dense_max_n == DenseMaxN(cpu=7, cuda=13)


def test_the_stage_and_its_cost_take_the_dense_crossover_of_their_device():
    cfg = _training_cfg({"cpu": 7, "cuda": 11})
    assert [cfg.hessian_dense_max_n.for_device(d) for d in ("cpu", "cuda", "cuda:1")] == [7, 11, 11]
    with pytest.raises(ConfigError, match=re.escape(f"{KEY} has no value for device 'mps'")):
        cfg.hessian_dense_max_n.for_device("mps")
    for device, want in (("cpu", 7), ("cuda", 11), ("cuda:1", 11)):
        for unit, monitored in (("S9", True), ("S6", False)):
            assert cfg.sweeps[unit].metrics == ("hessian" if monitored else "basic")
            tasks = _stage_tasks(cfg, unit, device)
            assert tasks and {t.hessian_dense_max_n for t in tasks} == {want if monitored else 0}, (device, unit)
    # the plan's estimate: dense on the device whose crossover is above n = N·H, Krylov on the other
    cfg = _training_cfg({"cpu": 10**6, "cuda": 1})
    for device, method in (("cpu", "dense"), ("cuda:0", "structured")):
        work = [w for w in mupc_cost.train_cost(cfg, "S9", device).work if w.probe == "hessian"]
        assert work and {w.shape["method"] for w in work} == {method}, device
    rc = expand(cfg, "S9")[0]
    dense, krylov = (mupc_cost.hessian_flops(rc.N, rc.H, m) for m in ("dense", "structured"))
    calls = mupc_cost.run_flops(cfg, rc, "cpu")[1] / dense  # monitor calls per run
    assert calls >= 1 and mupc_cost.run_flops(cfg, rc, "cuda")[1] / krylov == pytest.approx(calls)
    assert mupc_cost.run_flops(cfg, rc) == mupc_cost.run_flops(cfg, rc, "cpu")  # no device: the CPU's


def _stage_tasks(cfg: TrainingParams, unit: str, device: str) -> list:
    """The group tasks ``train()`` hands its executor on ``device`` (none is trained)."""
    tasks: list = []

    def mapper(fn, items, **_):
        tasks.extend(items)
        return iter(())

    ctx = Context(study="mupc_training", kind="train", unit=unit, profile="smoke", cfg=cfg, device=device,
                  stage=f"mupc_training_train@{unit}", provenance={"git_commit": "test", "data_sha256": {}},
                  reader=lambda *a: None, own=lambda name: None, log=lambda m: None, mapper=mapper)
    for _ in train_mod.train(ctx, unit):
        raise AssertionError("no run is trained")
    return tasks
