"""The batched Krylov extremes of the Hessian monitor against dense eigvalsh, run by run."""

from __future__ import annotations

import pytest
import torch

from pipeline.studies.mupc.model import NetSpec, feedforward, init_weights
from pipeline.studies.mupc.training import hessian_monitor as hm

F64 = torch.float64


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
