"""μPC training sweeps: params (profiles, validation), sweep expansion, Hessian monitor, stacked
trainers, early stopping, resumption of a sweep unit, and a μPC run that learns MNIST."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline.config import ConfigError, load_section, read_tree
from pipeline.contract import Context, Output
from pipeline.studies.mupc.engine.energy import energy
from pipeline.studies.mupc.engine.model import NetSpec, feedforward, init_weights
from pipeline.studies.mupc.engine.runs import RunConfig
from pipeline.studies.mupc.training import group_training as tr
from pipeline.studies.mupc.training import hessian_monitor
from pipeline.studies.mupc.training import train as train_mod
from pipeline.studies.mupc.training.config import TrainingParams
from pipeline.studies.mupc.training.group_training import DataSet, RunResult, load_dataset, train_group
from pipeline.studies.mupc.training.sweep_expansion import expand, precision, stack_groups, sweep_dtype
from pipeline.writer import read_file, write_files

ROOT = Path(__file__).resolve().parents[2]
SECTION = "mupc_training"


def raw_section() -> dict:
    return read_tree(ROOT)[SECTION]


def training_cfg(raw: dict | None = None, profile: str = "smoke") -> TrainingParams:
    return load_section(TrainingParams, {SECTION: raw or raw_section()}, SECTION, profile)


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


def test_every_profile_resolves_with_its_values():
    smoke, medium, paper = (training_cfg(profile=p) for p in ("smoke", "gpu_medium", "paper"))
    assert smoke.data.n_train == 2048 and smoke.data.n_test == 1024 and smoke.train_loss_log_every == 1
    assert medium.data.n_train is None and medium.train_loss_log_every == 10 and paper.data.n_test is None
    assert smoke.sweeps["S1"].grids[0].N == [16] and smoke.sweeps["S1"].grids[0].T == [20]
    assert medium.sweeps["S1"].grids[0].T == [200] and paper.sweeps["S1"].grids[0].T == [500]
    assert medium.sweeps["S11"].grids[0].epochs == 3 and paper.sweeps["S11"].grids[0].epochs == 15
    assert all(c.sweeps["S9"].method == "pc" and c.sweeps["S9"].metrics == "hessian" for c in (smoke, medium, paper))
    assert (smoke.figures.selection, medium.figures.selection, paper.figures.selection) == (
        "computed", "computed", "table")
    assert smoke.figures.chance_cells == {}
    assert medium.figures.chance_cells == paper.figures.chance_cells == {}  # every deep SP cell is trained
    assert smoke.figures.best_lrs.mupc.act_lr["relu"] == 0.5 and paper.figures.max_seeds_128 == 3
    assert {s: c.sweeps[s].datasets() for c in (smoke,) for s in ("S1", "S5", "S8")} == {
        "S1": ["fashion_mnist", "mnist"], "S5": ["mnist"], "S8": ["fashion_mnist"]}


def test_paper_grids_match_spec_counts():
    cfg = training_cfg(profile="paper")
    n = {s: len(expand(cfg, s)) for s in cfg.sweep_ids}
    assert n["S1"] + n["S2"] + n["S3"] == 486 and n["S4"] == 234 and n["S5"] == 54
    assert n["S6"] == 1980 and n["S7"] == 1980 and n["S8"] == 396 and n["S9"] == 27
    # S12: the 30 cells of table 5.3 and the 15 deep ones the notebook drew as chance, trained
    assert n["S10"] == 5 and n["S11"] == 3 and n["S12"] == 45 and n["B1"] == 135 and n["B2"] == 15
    # S13: standard PC at H = 128 over 4 param lrs × 4 activity lrs, one seed, per act
    s13 = expand(cfg, "S13")
    assert n["S13"] == 48 and {(rc.H, rc.T, rc.N, rc.param, rc.skips, rc.seed) for rc in s13} == {
        (128, 128, 512, "sp", True, 0)}
    s6 = expand(cfg, "S6")
    assert {rc.T for rc in s6 if rc.H == 64} == {64}  # T = "H"
    s4 = expand(cfg, "S4")
    assert max(rc.H for rc in s4 if rc.act == "relu") == 32 and max(rc.H for rc in s4 if rc.act == "tanh") == 128
    assert all(rc.method == "bp" and rc.skips for rc in expand(cfg, "B1"))


def test_s13_per_profile():
    """S13 (the lr grid of standard PC at the deepest depth): smoke 2 × 2 lrs at H = 8, gpu_medium 3 × 3 at H = 128."""
    smoke, medium = (expand(training_cfg(profile=p), "S13") for p in ("smoke", "gpu_medium"))
    assert len(smoke) == 12 and {(rc.N, rc.H, rc.T) for rc in smoke} == {(16, 8, 8)}
    assert len(medium) == 27 and {rc.H for rc in medium} == {128}
    assert {rc.act for rc in smoke} == {rc.act for rc in medium} == {"linear", "tanh", "relu"}


def test_stack_groups_share_shapes():
    runs = expand(training_cfg(), "S6")
    groups = stack_groups(runs, max_stack=5)
    assert sum(len(g) for g in groups) == len(runs) and max(len(g) for g in groups) <= 5
    for g in groups:
        assert len({(rc.N, rc.H, rc.act, rc.T) for rc in g}) == 1


@pytest.mark.parametrize("profile,path,value,msg", [
    ("smoke", ("profiles", "smoke", "sweeps", "S1", "grids", 0, "acts"), ["softplus"],
     "mupc_training.sweeps.S1.grids[0].acts[0] = 'softplus'"),
    ("smoke", ("profiles", "smoke", "sweeps", "S6", "grids", 0, "T"), ["deep"], "T"),
    ("smoke", ("profiles", "smoke", "sweeps", "S6", "grids", 0, "act_lrs"), [], "act_lrs"),
    ("paper", ("sweeps", "B1", "metrics"), "hessian", "mupc_training.sweeps.B1.metrics = 'hessian'"),
    ("smoke", ("profiles", "smoke", "sweeps", "S2", "grids", 0, "param_lrs"), [0], "param_lrs"),
    ("gpu_medium", ("sweep_ids",), ["S1", "S99"], "sweep_ids"),
    ("smoke", ("profiles", "smoke", "data", "n_train"), 10, "mupc_training.data.n_train = 10"),
    ("paper", ("dtype",), "float16", "'float32', 'float64'"),
    ("smoke", ("figures", "restrict", "F30"), {"acts": ["relu"]}, "F30"),
    ("smoke", ("figures", "restrict", "F18", "acts"), ["gelu"], "gelu"),
    ("smoke", ("figures", "restrict", "F18", "sweeps"), ["S2"], "sweeps"),  # a family's sweeps are its table entry
    ("paper", ("profiles", "paper", "figures", "selection"), "best", "mupc_training.figures.selection = 'best'"),
    ("smoke", ("figures", "best_lrs", "S12", "relu", 8), [0.1], "param lr, activity lr"),
    ("smoke", ("figures", "chance"), 120.0, "120"),
    ("gpu_medium", ("profiles", "gpu_medium", "figures", "chance_cells"), {"swish": [8]}, "swish"),
])
def test_params_validation_errors(profile, path, value, msg):
    raw = copy.deepcopy(raw_section())
    node = raw
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    with pytest.raises(ConfigError, match=re.escape(msg)):
        training_cfg(raw, profile)


def test_a_sweep_written_with_kind_is_told_its_new_name_and_a_run_keeps_its_hash():
    """``kind`` (pc | bp) is ``method`` now: the old spelling is named with the key to write; a run's hash
    (its folder, resumption) is over the old field name, so runs recorded before resume and keep their folders."""
    raw = copy.deepcopy(raw_section())
    raw["sweeps"]["S1"]["kind"] = raw["sweeps"]["S1"].pop("method")
    with pytest.raises(ConfigError, match=re.escape(
            "mupc_training.sweeps.S1.kind = 'pc' is not allowed; allowed: the same value under its new name, "
            "method (mupc_training.sweeps.S1.method)")):
        training_cfg(raw)
    rc = expand(training_cfg(raw_section()), "S1")[0]
    old = dataclasses.asdict(rc)
    old["kind"] = old.pop("method")
    assert rc.hash() == hashlib.sha256(json.dumps(old, sort_keys=True).encode()).hexdigest()[:16]
    assert RunConfig.from_record(old) == RunConfig.from_record(rc.as_params()) == rc


def test_sweeps_must_match_sweep_ids_and_families_their_sweeps():
    raw = copy.deepcopy(raw_section())
    del raw["sweeps"]["S7"]  # the smoke override alone has no method
    with pytest.raises(ConfigError, match=re.escape("mupc_training.sweeps.S7.method is missing")):
        training_cfg(raw)
    raw = copy.deepcopy(raw_section())
    raw["sweep_ids"].remove("S7")
    with pytest.raises(ConfigError, match="exactly the sweep_ids"):
        training_cfg(raw, "paper")
    raw["sweeps"].pop("S7")
    for prof in raw["profiles"].values():
        prof.get("sweeps", {}).pop("S7", None)
    with pytest.raises(ConfigError, match=re.escape("including S7, which figure family F14 reads (families.py)")):
        training_cfg(raw, "paper")


# ----------------------------------------------------------------------------- Hessian monitor


@pytest.mark.parametrize("act,skips,param,decay", [("tanh", True, "mupc", 0.0), ("relu", False, "sp", 0.0),
                                                     ("linear", True, "sp", 0.5), ("tanh", False, "sp", 0.0)])
def test_hessian_blocks_match_autodiff(act, skips, param, decay):
    from pipeline.studies.mupc.engine.energy import EnergyTerms

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
    assert "finished" in status and "no_learning" in status  # the stack sheds a stopped run and goes on
    fin = stacked[status.index("finished")].arrays
    assert len(fin["test_accs"]) == 4 and len(fin["cond_nums"]) == 5 and len(fin["batch_train_losses"]) == 8
    # the seed decides the data order and the weights, the lrs the trajectory
    assert not np.allclose(stacked[1].arrays["batch_train_losses"][:2], stacked[5].arrays["batch_train_losses"][:2])


def test_stacked_bp_and_adam_inference_reproduce_runs_one_by_one():
    data = synthetic()
    bp = [RunConfig(dataset="mnist", N=8, H=3, act="relu", param="depth_mup", init="standard_gauss", skips=True,
                    seed=s, epochs=1, test_every=2, param_lr=lr, method="bp") for s in (0, 1) for lr in (1e-3, 1e-2)]
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


def shedding_group() -> list[RunConfig]:
    """A stack whose runs stop at different evaluations (test_every 4, 16 iterations on ``synthetic(1024)``):
    one diverges at iteration 3 (Adam at a huge param lr), two stop learning at 4 and 8, two finish."""
    lin = dict(act="linear", skips=True, test_every=4)
    return [pc_run(seed=0, act_lr=3, param_lr=0.05, **lin), pc_run(seed=1, act_lr=3, param_lr=1e20, **lin),
            pc_run(seed=2, act_lr=3, param_lr=0.3, **lin), pc_run(seed=0, act_lr=3, param_lr=3.0, **lin),
            pc_run(seed=1, act_lr=10, param_lr=0.05, **lin)]


def float64(data: DataSet) -> DataSet:
    return DataSet(*(t.double() for t in (data.x_train, data.y_train, data.x_test, data.y_test)), data.subset)


def _stack_sizes(monkeypatch) -> list[int]:
    """R of every iteration a PC group trains (GroupIteration.load), or of every BP forward pass (predict)."""
    sizes: list[int] = []
    load, predict = tr.GroupIteration.load, tr.predict

    def counted_load(self, idx):
        sizes.append(self.R)
        return load(self, idx)

    def counted_predict(spec, w, x):
        sizes.append(w.runs)
        return predict(spec, w, x)

    monkeypatch.setattr(tr.GroupIteration, "load", counted_load)
    monkeypatch.setattr(tr, "predict", counted_predict)
    return sizes


def _equal_to_alone(stacked: RunResult, alone: RunResult) -> None:
    """Status, stop iteration and every array (non-finite entries in the same places) to rtol 1e-10."""
    assert (stacked.status, stacked.stop_iter) == (alone.status, alone.stop_iter)
    assert stacked.arrays.keys() == alone.arrays.keys()
    for k, a in stacked.arrays.items():
        np.testing.assert_allclose(a, alone.arrays[k], rtol=1e-10, atol=0, err_msg=k)


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")  # the diverging run's float32 record
def test_a_stack_sheds_stopped_runs_and_each_run_equals_it_alone(monkeypatch):
    """float64: runs stopped at iterations 3 (diverged), 4 and 8 (no learning) leave the stack at the
    evaluation that finds them; every run's arrays, status and stop iteration equal it trained alone."""
    data = float64(synthetic(n_train=1024))
    runs = shedding_group()
    sizes = _stack_sizes(monkeypatch)
    stacked = train_group(runs, data, "cpu", torch.float64, layout="stacked")
    assert [(r.status, r.stop_iter) for r in stacked] == [("finished", 16), ("diverged", 3), ("no_learning", 8),
                                                          ("no_learning", 4), ("finished", 16)]
    assert sizes == [5] * 4 + [3] * 4 + [2] * 8  # 48 run-iterations where a masked stack computed 80
    assert not np.isfinite(stacked[1].arrays["batch_train_losses"][-1])
    assert len(stacked[2].arrays["cond_nums"]) == 3  # rows at 0, 4 and 8: the Hessian follows the shed stack
    for rc, res in zip(runs, stacked):
        (alone,) = train_group([rc], data, "cpu", torch.float64)
        _equal_to_alone(res, alone)
        assert res.extra["group_size"] == 5 and res.extra["cuda_graphs"] is False


def test_a_bp_stack_sheds_stopped_runs_and_each_run_equals_it_alone(monkeypatch):
    data = float64(synthetic(n_train=1024))
    runs = [RunConfig(dataset="mnist", N=8, H=3, act="relu", param="depth_mup", init="standard_gauss", skips=True,
                      seed=s, epochs=2, test_every=2, param_lr=lr, method="bp") for s in (0, 1) for lr in (3e-2, 1e3)]
    sizes = _stack_sizes(monkeypatch)
    stacked = train_group(runs, data, "cpu", torch.float64)
    assert [(r.status, r.stop_iter) for r in stacked] == [("finished", 32)] + [("no_learning", 2)] * 3
    assert sizes == [4] * 2 + [1] * 30
    for rc, res in zip(runs, stacked):
        (alone,) = train_group([rc], data, "cpu", torch.float64)
        _equal_to_alone(res, alone)


# ----------------------------------------------------------------------------- stage, resumption


def context(out: Path, cfg: TrainingParams, unit: str) -> Context:
    """The runner's context for a train unit whose folder is ``out`` (nothing else is read)."""

    def own(name: str):
        return read_file(out / name) if (out / name).exists() else None

    def reader(kind: str, u: str, name: str):
        raise AssertionError("a train unit reads no other unit")

    return Context(study=SECTION, kind="train", unit=unit, profile="smoke", cfg=cfg, device="cpu",
                   stage=f"{SECTION}_train@{unit}", provenance={"git_commit": "test", "data_sha256": {}},
                   reader=reader, own=own, log=lambda _m: None)


def drive(ctx: Context, out: Path) -> tuple[list[Output], Output]:
    """What the runner does with a resumable unit: write each yielded part at once, then the final output."""
    gen = train_mod.train(ctx, ctx.unit)
    parts = []
    while True:
        try:
            part = next(gen)
        except StopIteration as stop:
            write_files(out, stop.value)
            return parts, stop.value
        assert part.part is not None
        (out / part.part).mkdir(parents=True, exist_ok=True)
        write_files(out / part.part, part)
        parts.append(part)


def tiny_raw() -> dict:
    raw = copy.deepcopy(raw_section())
    sm = raw["profiles"]["smoke"]
    sm["data"] = {"n_train": 256, "n_test": 128}
    sm["max_stack"] = 2
    grid = {**sm["sweeps"]["S9"]["grids"][0], "acts": ["relu"], "H": [2], "seeds": [0, 1, 2], "test_every": 2}
    sm["sweeps"]["S9"]["grids"] = [grid]
    return raw


def test_resumption_recomputes_only_missing_runs(tmp_path, monkeypatch):
    cfg = training_cfg(tiny_raw())
    data = synthetic(n_train=256, n_test=128, D=784)
    calls: list[list[str]] = []

    def counting(group, *a, **kw):
        calls.append([rc.hash() for rc in group])
        return train_group(group, *a, **kw)

    monkeypatch.setattr(train_mod, "train_group", counting)
    monkeypatch.setattr(train_mod, "load_dataset", lambda name, n_train, n_test, device, dtype: DataSet(
        data.x_train.to(dtype), data.y_train.to(dtype), data.x_test.to(dtype), data.y_test.to(dtype), data.subset))
    out = tmp_path / "S9"
    out.mkdir()
    runs = expand(cfg, "S9")
    assert len(runs) == 3
    parts, final = drive(context(out, cfg, "S9"), out)
    s1 = final.execution
    assert s1["n_trained"] == 3 and sum(len(c) for c in calls) == 3 and len(calls) == 2  # max_stack 2
    assert [p.part for p in parts] == [f"runs/{rc.hash()}" for rc in runs]
    for p, rc in zip(parts, runs):  # one MLflow child per run: params, series, final numbers, arrays
        (child,) = p.runs
        assert child.name == f"S9/{rc.hash()}" and child.params["hash"] == rc.hash()
        assert child.artifacts == ["arrays.npz"] and child.tags["run_key"] == rc.key()
        assert {"test_acc", "test_loss", "train_loss", "kappa"} <= set(child.series)
        steps, vals, times = child.series["kappa"]
        assert len(times) == len(steps) and list(times) == sorted(times)  # each step its own time, in order
        assert list(steps[:2]) == [0, 2] and len(vals) == len(steps)
        assert child.metrics["iterations"] == len(p.arrays["arrays.npz"]["batch_train_losses"])
        assert (child.failed is None) == (p.json["config.json"]["status"] == "finished")
    first = {rc.hash(): read_file(out / "runs" / rc.hash() / "arrays.npz") for rc in runs}
    index = read_file(out / "index.json")
    assert [e["hash"] for e in index["runs"]] == [rc.hash() for rc in runs]
    assert [RunConfig.from_record(e["run"]) for e in index["runs"]] == runs
    assert all(e["status"] in ("finished", "diverged", "no_learning") for e in index["runs"])
    record = read_file(out / "runs" / runs[0].hash() / "config.json")
    assert record["hash"] == runs[0].hash() and record["data"] == {"n_train": 256, "n_test": 128}
    assert record["dtype"] == "float32" and record["run"] == runs[0].as_params()
    assert record["precision"] == "float32" and all(p.runs[0].params["precision"] == "float32" for p in parts)

    calls.clear()
    parts, final = drive(context(out, cfg, "S9"), out)
    assert calls == [] and parts == [] and final.execution["n_skipped"] == 3
    assert final.execution["n_trained"] == 0
    # what an execution did stays out of the outputs: a rerun that trained nothing returns the same meta
    assert "trained" not in final.meta and "seconds" not in final.meta["summary"]
    table = final.tables["runs.csv"]  # one row per run of the sweep: settings, status, final numbers
    assert list(table["hash"]) == [rc.hash() for rc in runs] and len(table) == 3
    assert {"N", "H", "act_lr", "param_lr", "seed", "status", "precision", "stop_iter", "final_test_acc",
            "max_test_acc"} <= set(table.columns)
    assert list(table["status"]) == [e["status"] for e in index["runs"]]

    victim = runs[1]
    shutil.rmtree(out / "runs" / victim.hash())
    parts, final = drive(context(out, cfg, "S9"), out)
    assert calls == [[victim.hash()]] and final.execution["trained"] == [victim.hash()]
    _compare(read_file(out / "runs" / victim.hash() / "arrays.npz"), first[victim.hash()])  # same numbers alone
    # a run without config.json, or recorded with other settings, counts as unfinished
    (out / "runs" / runs[0].hash() / "config.json").unlink()
    calls.clear()
    drive(context(out, cfg, "S9"), out)
    assert calls == [[runs[0].hash()]]
    # a sweep never mixes precisions: a run recorded in another one is trained again
    rec_path = out / "runs" / runs[2].hash() / "config.json"
    rec = read_file(rec_path)
    rec_path.write_text(json.dumps({**rec, "precision": "tf32"}))
    calls.clear()
    drive(context(out, cfg, "S9"), out)
    assert calls == [[runs[2].hash()]]
    assert read_file(rec_path)["precision"] == "float32"
    raw = tiny_raw()
    raw["profiles"]["smoke"]["sweeps"]["S9"]["dtype"] = "float64"  # the sweep's own dtype wins
    calls.clear()
    drive(context(out, training_cfg(raw), "S9"), out)
    assert sorted(h for c in calls for h in c) == sorted(rc.hash() for rc in runs)
    assert read_file(out / "runs" / runs[0].hash() / "config.json")["precision"] == "float64"


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


def test_a_resumed_sweep_writes_what_an_uninterrupted_one_writes(tmp_path, monkeypatch):
    """How a run was stacked is how it was executed (the run record), not what it is: a run retrained alone
    after an interruption writes the bytes it wrote in a stack of two."""
    cfg = training_cfg(tiny_raw())
    data = synthetic(n_train=256, n_test=128, D=784)
    monkeypatch.setattr(train_mod, "load_dataset", lambda name, n_train, n_test, device, dtype: DataSet(
        data.x_train.to(dtype), data.y_train.to(dtype), data.x_test.to(dtype), data.y_test.to(dtype), data.subset))
    out = tmp_path / "S9"
    out.mkdir()
    runs = expand(cfg, "S9")
    parts, _ = drive(context(out, cfg, "S9"), out)
    assert [p.execution["group_size"] for p in parts] == [2, 2, 1]  # max_stack 2: where the stacking is kept
    before = {f.relative_to(out): f.read_bytes() for f in sorted(out.rglob("*")) if f.is_file()}
    for f in (out / "runs" / runs[0].hash()).iterdir():  # interrupted: the first run of the 2-stack is lost
        f.unlink()
    (out / "runs" / runs[0].hash()).rmdir()
    parts, _ = drive(context(out, cfg, "S9"), out)
    assert [p.part for p in parts] == [f"runs/{runs[0].hash()}"] and parts[0].execution["group_size"] == 1
    after = {f.relative_to(out): f.read_bytes() for f in sorted(out.rglob("*")) if f.is_file()}
    assert after.keys() == before.keys()
    assert [str(k) for k in after if after[k] != before[k]] == []


# ----------------------------------------------------------------------------- precision


def test_each_sweep_trains_in_its_reference_scripts_precision():
    """train_pcn.py (S1–S5, S9) enabled float64; the no-metrics and BP scripts ran float32, which JAX
    computes in TF32 on Ampere/Hopper: so do the paper and gpu_medium profiles; smoke is float32 on the CPU."""
    f64 = {"S1", "S2", "S3", "S4", "S5", "S9"}
    for profile in ("paper", "gpu_medium"):
        cfg = training_cfg(profile=profile)
        assert cfg.allow_tf32 is True
        for sid in cfg.sweep_ids:
            want = "float64" if sid in f64 else "float32"
            assert sweep_dtype(cfg, sid) == want, (profile, sid)
            assert precision(sweep_dtype(cfg, sid), cfg.allow_tf32, "cuda") == ("float64" if sid in f64 else "tf32")
            assert precision(sweep_dtype(cfg, sid), cfg.allow_tf32, "cpu") == want  # no TF32 on a CPU
    smoke = training_cfg()
    assert {sweep_dtype(smoke, s) for s in smoke.sweep_ids} == {"float32"} and smoke.allow_tf32 is False
    # full float32 is one params value away
    raw = copy.deepcopy(raw_section())
    raw["profiles"]["paper"]["allow_tf32"] = False
    full = training_cfg(raw, "paper")
    assert precision(sweep_dtype(full, "S6"), full.allow_tf32, "cuda:0") == "float32"


def test_the_precision_reaches_torch():
    switches = (torch.backends.cuda.matmul, torch.backends.cudnn.conv)
    before = [s.fp32_precision for s in switches]
    try:
        train_mod.set_precision("cuda:0", "tf32")
        assert [s.fp32_precision for s in switches] == ["tf32", "tf32"]
        train_mod.set_precision("cuda", "float32")
        assert [s.fp32_precision for s in switches] == ["ieee", "ieee"]
        train_mod.set_precision("cpu", "tf32")  # nothing to set on a CPU
        assert torch.backends.cuda.matmul.fp32_precision == "ieee"
    finally:
        for s, v in zip(switches, before):
            s.fp32_precision = v


def test_a_sweep_dtype_that_is_not_a_dtype_is_refused_before_compute():
    raw = copy.deepcopy(raw_section())
    raw["sweeps"]["S6"]["dtype"] = "bfloat16"
    with pytest.raises(ConfigError, match=r"sweeps.S6.dtype = 'bfloat16' is not allowed"):
        training_cfg(raw, "paper")


@pytest.mark.gpu
def test_precisions_on_cuda_against_the_cpu():
    """A tiny group on the GPU: float64 agrees with the CPU to round-off, float32 closely, TF32 loosely."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    rc = RunConfig(dataset="mnist", N=32, H=4, act="tanh", param="mupc", init="standard_gauss", skips=True, seed=0,
                   epochs=1, test_every=4, param_lr=0.1, T=4, act_lr=0.5)
    finals = {}
    for dev, prec in (("cpu", "float64"), ("cuda", "float64"), ("cpu", "float32"), ("cuda", "float32"),
                      ("cuda", "tf32")):
        dtype = torch.float64 if prec == "float64" else torch.float32
        data = synthetic(n_train=512, n_test=128, D=784)
        data = DataSet(*(t.to(dev, dtype) for t in (data.x_train, data.y_train, data.x_test, data.y_test)),
                       data.subset)
        train_mod.set_precision(dev, prec)
        (res,) = train_group([rc], data, dev, dtype)
        finals[dev, prec] = np.asarray(res.arrays["batch_train_losses"], dtype=np.float64)
    train_mod.set_precision("cuda", "float32")
    np.testing.assert_allclose(finals["cuda", "float64"], finals["cpu", "float64"], rtol=1e-7)
    np.testing.assert_allclose(finals["cuda", "float32"], finals["cpu", "float32"], rtol=1e-2)
    np.testing.assert_allclose(finals["cuda", "tf32"], finals["cpu", "float64"], rtol=1e-1)
