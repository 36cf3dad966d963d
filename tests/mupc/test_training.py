"""μPC training part: sweep expansion, validation, Hessian monitor, stacked trainers, early stopping,
resumption, and a μPC run that learns MNIST."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from pipeline.config import ConfigError, validate
from pipeline.studies.mupc.energy import energy
from pipeline.studies.mupc.model import NetSpec, feedforward, init_weights
from pipeline.studies.mupc.runs import RunConfig
from pipeline.studies.mupc.training import hessian_monitor
from pipeline.studies.mupc.training.config import TrainingParams
from pipeline.studies.mupc.training.runner import run_sweep
from pipeline.studies.mupc.training.sweeps import expand, load_run, stack_groups
from pipeline.studies.mupc.training.trainer import DataSet, load_dataset, train_group
from pipeline.tracking import Tracker

ROOT = Path(__file__).resolve().parents[2]


def raw_training() -> dict:
    return yaml.safe_load((ROOT / "params.yaml").read_text())["mupc"]["training"]


def training_cfg(raw: dict | None = None) -> TrainingParams:
    return validate(TrainingParams, raw or raw_training(), "mupc.training")


def synthetic(n_train=512, n_test=128, D=20, seed=0, random_test_labels=False) -> DataSet:
    """An easy toy problem: the label is written (× 3) into the first ten inputs, plus noise."""
    g = torch.Generator().manual_seed(seed)
    lab = torch.randint(0, 10, (n_train + n_test,), generator=g)
    x = torch.randn(n_train + n_test, D, generator=g) * 0.5
    x[:, :10] += 3 * torch.nn.functional.one_hot(lab, 10)
    if random_test_labels:
        lab[n_train:] = torch.randint(0, 10, (n_test,), generator=g)
    y = torch.nn.functional.one_hot(lab, 10).float()
    return DataSet(x[:n_train], y[:n_train], x[n_train:], y[n_train:], {"n_train": n_train, "n_test": n_test})


def pc_run(**kw) -> RunConfig:
    base = dict(dataset="mnist", N=8, H=3, act="tanh", param="sp", init="standard", skips=False, seed=0,
                epochs=1, test_every=2, param_lr=1e-3, T=5, act_optim="gd", act_lr=0.1, metrics="hessian")
    return RunConfig(**{**base, **kw})


# ----------------------------------------------------------------------------- params


def test_paper_grids_match_spec_counts():
    cfg = training_cfg()
    n = {s: len(expand(cfg, s, "paper")) for s in cfg.sweep_ids}
    assert n["S1"] + n["S2"] + n["S3"] == 486 and n["S4"] == 234 and n["S5"] == 54
    assert n["S6"] == 1980 and n["S7"] == 1980 and n["S8"] == 396 and n["S9"] == 27
    assert n["S10"] == 5 and n["S11"] == 3 and n["S12"] == 30 and n["B1"] == 135 and n["B2"] == 15
    s6 = expand(cfg, "S6", "paper")
    assert {rc.T for rc in s6 if rc.H == 64} == {64}  # T = "H"
    s4 = expand(cfg, "S4", "paper")
    assert max(rc.H for rc in s4 if rc.act == "relu") == 32 and max(rc.H for rc in s4 if rc.act == "tanh") == 128
    assert all(rc.kind == "bp" and rc.skips for rc in expand(cfg, "B1", "paper"))


def test_stack_groups_share_shapes():
    cfg = training_cfg()
    runs = expand(cfg, "S6", "smoke")
    groups = stack_groups(runs, max_stack=5)
    assert sum(len(g) for g in groups) == len(runs) and max(len(g) for g in groups) <= 5
    for g in groups:
        assert len({(rc.N, rc.H, rc.act, rc.T) for rc in g}) == 1


@pytest.mark.parametrize("path,value,msg", [
    (("profiles", "smoke", "sweeps", "S1", "grids", 0, "acts"), ["softplus"], "acts[0]"),
    (("profiles", "smoke", "sweeps", "S6", "grids", 0, "T"), ["deep"], "T"),
    (("profiles", "smoke", "sweeps", "S6", "grids", 0, "act_lrs"), [], "act_lrs"),
    (("profiles", "paper", "sweeps", "B1", "metrics"), "hessian", "metrics"),
    (("profiles", "smoke", "sweeps", "S2", "grids", 0, "param_lrs"), [0], "param_lrs"),
    (("sweep_ids",), ["S1", "S99"], "sweep_ids"),
])
def test_params_validation_errors(path, value, msg):
    raw = copy.deepcopy(raw_training())
    node = raw
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    with pytest.raises(ConfigError, match=re.escape(msg)):
        training_cfg(raw)


def test_missing_sweep_in_a_profile_is_an_error():
    raw = copy.deepcopy(raw_training())
    del raw["profiles"]["gpu_medium"]["sweeps"]["S7"]
    with pytest.raises(ConfigError, match="gpu_medium.sweeps"):
        training_cfg(raw)


# ----------------------------------------------------------------------------- Hessian monitor


@pytest.mark.parametrize("act,skips,param,decay", [("tanh", True, "mupc", 0.0), ("relu", False, "sp", 0.0),
                                                     ("linear", True, "sp", 0.5), ("tanh", False, "sp", 0.0)])
def test_hessian_blocks_match_autodiff(act, skips, param, decay):
    from pipeline.studies.mupc.energy import EnergyTerms

    spec = NetSpec(D=5, N=4, H=3, d_y=3, act=act, skips=skips, param=param,
                   init="standard_gauss" if param == "mupc" else "standard")
    w = init_weights(spec, [3], dtype=torch.float64)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, 1, 5, generator=g, dtype=torch.float64)
    y = torch.randn(1, 1, 3, generator=g, dtype=torch.float64)
    z, _ = feedforward(spec, w, x)
    z = z + 0.3 * torch.randn(z.shape, generator=g, dtype=torch.float64)  # off the feed-forward point

    def f(flat):
        return energy(spec, w, x, y, flat.view_as(z), EnergyTerms(activity_decay=decay))[0]

    ref = torch.func.hessian(f)(z.flatten())
    got = hessian_monitor.activity_hessian(spec, w, x[:, 0], y[:, 0], z[:, :, 0], decay)[0]
    assert torch.allclose(got, ref, atol=1e-10), (got - ref).abs().max()
    lo, hi, kap, method = hessian_monitor.monitor(spec, w, x, y, z, decay)
    ev = torch.linalg.eigvalsh(ref)
    assert method == "dense_eigvalsh"
    assert torch.allclose(lo[0], ev[0]) and torch.allclose(hi[0], ev[-1])
    assert torch.allclose(kap[0], ev[-1].abs() / ev[0].abs())
    # above dense_max_n the structured extremes (Lanczos / shift-invert) give the same numbers
    lo2, hi2, kap2, method2 = hessian_monitor.monitor(spec, w, x, y, z, decay, dense_max_n=1)
    assert method2 != "dense_eigvalsh"
    assert torch.allclose(lo2[0], ev[0], rtol=1e-6, atol=1e-9) and torch.allclose(hi2[0], ev[-1], rtol=1e-6)


# ----------------------------------------------------------------------------- trainers


def _compare(a: dict, b: dict):
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].shape == b[k].shape, k
        np.testing.assert_allclose(a[k], b[k], rtol=2e-4, atol=1e-6, err_msg=k)


def test_stacked_group_reproduces_runs_one_by_one():
    data = synthetic()
    runs = [pc_run(seed=s, act_lr=a, param_lr=p) for s in (0, 1) for a in (0.05, 0.5) for p in (1e-3, 5e-2)]
    assert len(stack_groups(runs)) == 1
    stacked = train_group(runs, data, "cpu")
    for rc, res in zip(runs, stacked):
        (alone,) = train_group([rc], data, "cpu")
        assert res.status == alone.status and res.stop_iter == alone.stop_iter
        _compare(res.arrays, alone.arrays)
    status = [r.status for r in stacked]
    assert "finished" in status and "no_learning" in status  # a stopped run stays masked in the stack
    fin = stacked[status.index("finished")].arrays
    assert len(fin["test_accs"]) == 4 and len(fin["cond_nums"]) == 5 and len(fin["batch_train_losses"]) == 8
    # the seed decides the data order and the weights, the lrs the trajectory
    assert not np.allclose(stacked[1].arrays["batch_train_losses"][:2], stacked[5].arrays["batch_train_losses"][:2])


def test_stacked_bp_and_adam_inference_reproduce_runs_one_by_one():
    data = synthetic()
    bp = [RunConfig(dataset="mnist", N=8, H=3, act="relu", param="depth_mup", init="standard_gauss", skips=True,
                    seed=s, epochs=1, test_every=2, param_lr=lr, kind="bp") for s in (0, 1) for lr in (1e-3, 1e-2)]
    adam = [pc_run(seed=s, act_lr=a, act_optim="adam", metrics="basic") for s in (0, 1) for a in (0.05, 0.5)]
    for runs in (bp, adam):
        stacked = train_group(runs, data, "cpu")
        for rc, res in zip(runs, stacked):
            (alone,) = train_group([rc], data, "cpu")
            _compare(res.arrays, alone.arrays)


def test_early_stop_divergence_and_no_learning():
    data = synthetic()
    good = pc_run(act="linear", skips=True, act_lr=0.1, param_lr=5e-2)
    bad = pc_run(act="linear", skips=True, act_lr=1e9, param_lr=1.0)  # GD far beyond 2/λmax: diverges
    res = train_group([good, bad], data, "cpu")
    ok, div = res[0], res[1]
    assert ok.status == "finished" and len(ok.arrays["batch_train_losses"]) == 8
    assert div.status == "diverged"
    tl = div.arrays["batch_train_losses"]
    assert div.stop_iter == len(tl) < 8 and not np.isfinite(tl[-1]) and np.isfinite(tl[:-1]).all()
    assert len(div.arrays["test_accs"]) == (len(tl) - 1) // 2  # no evaluation at the diverged iteration
    assert len(div.arrays["n_infer_iters"]) == len(tl)
    # stacked with a diverging run, the good run is unchanged
    (alone,) = train_group([good], data, "cpu")
    _compare(ok.arrays, alone.arrays)
    # random test labels: accuracy near chance → stops at the first evaluation
    noisy = synthetic(random_test_labels=True, n_test=640)
    (nl,) = train_group([pc_run(metrics="basic")], noisy, "cpu")
    assert nl.status == "no_learning" and nl.stop_iter == 2
    assert len(nl.arrays["test_accs"]) == 1 and nl.arrays["test_accs"][0] < 15
    assert len(nl.arrays["batch_train_losses"]) == 2


# ----------------------------------------------------------------------------- stage, resumption


class FakeCtx:
    def __init__(self, out: Path, profile: str = "smoke"):
        self.out_dir, self.profile, self.device = out, profile, "cpu"
        self.tracker = Tracker("mupc", "test", {}, enabled=False).__enter__()
        self.meta: dict = {}

    def log(self, msg):
        pass

    def provenance(self):
        return {"git_commit": "test", "data_sha256": {}}

    def write_meta(self, **kw):
        self.meta = kw
        (self.out_dir / "meta.json").write_text(json.dumps(kw, default=str))


def tiny_raw() -> dict:
    raw = copy.deepcopy(raw_training())
    sm = raw["profiles"]["smoke"]
    sm["data"] = {"n_train": 256, "n_test": 128}
    sm["max_stack"] = 2
    grid = {**sm["sweeps"]["S9"]["grids"][0], "acts": ["relu"], "H": [2], "seeds": [0, 1, 2], "test_every": 2}
    sm["sweeps"]["S9"]["grids"] = [grid]
    return raw


def test_resumption_recomputes_only_missing_runs(tmp_path):
    cfg = training_cfg(tiny_raw())
    data = synthetic(n_train=256, n_test=128, D=784)
    calls: list[list[str]] = []

    def counting(group, *a):
        calls.append([rc.hash() for rc in group])
        return train_group(group, *a)

    def loader(*a, **k):
        return data

    out = tmp_path / "S9"
    out.mkdir()
    runs = expand(cfg, "S9", "smoke")
    assert len(runs) == 3
    s1 = run_sweep(FakeCtx(out), cfg, "S9", trainer=counting, loader=loader)
    assert s1["n_trained"] == 3 and sum(len(c) for c in calls) == 3 and len(calls) == 2  # max_stack 2
    first = {rc.hash(): load_run(out, rc) for rc in runs}
    index = json.loads((out / "index.json").read_text())
    assert [e["hash"] for e in index["runs"]] == [rc.hash() for rc in runs]
    assert all(e["status"] in ("finished", "diverged", "no_learning") for e in index["runs"])

    calls.clear()
    s2 = run_sweep(FakeCtx(out), cfg, "S9", trainer=counting, loader=loader)
    assert calls == [] and s2["n_skipped"] == 3 and s2["n_trained"] == 0

    victim = runs[1]
    import shutil

    shutil.rmtree(out / "runs" / victim.hash())
    s3 = run_sweep(FakeCtx(out), cfg, "S9", trainer=counting, loader=loader)
    assert calls == [[victim.hash()]] and s3["n_trained"] == 1
    cfg2, arr2 = load_run(out, victim)
    _compare(arr2, first[victim.hash()][1])  # same numbers when recomputed alone
    # a half-written run (no config.json) counts as unfinished
    (out / "runs" / runs[0].hash() / "config.json").unlink()
    calls.clear()
    run_sweep(FakeCtx(out), cfg, "S9", trainer=counting, loader=loader)
    assert calls == [[runs[0].hash()]]


# ----------------------------------------------------------------------------- real data


def test_mupc_smoke_run_learns_mnist(data_mirror):
    torch.set_num_threads(1)
    data = load_dataset("mnist", 2048, 1024, "cpu", root=data_mirror)
    rc = RunConfig(dataset="mnist", N=64, H=8, act="relu", param="mupc", init="standard_gauss", skips=True, seed=0,
                   epochs=1, test_every=8, param_lr=0.1, T=8, act_lr=0.5)
    (res,) = train_group([rc], data, "cpu")
    accs = res.arrays["test_accs"]
    assert res.status == "finished" and len(accs) == 4
    assert accs[-1] > 50.0, accs
    assert res.arrays["batch_train_losses"][-1] < res.arrays["batch_train_losses"][0]
