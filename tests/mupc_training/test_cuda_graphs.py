"""The training iteration replayed from a CUDA graph (``iteration.GroupIteration``, ``trainer.train_pc_group``).

On the CPU: the graph path's plumbing (static outputs, Adam's step counted outside the graph, the saved
and restored state, Hessian row 0 eager) through a stand-in capture that replays the same Python, the
self-check catching a replay that freezes a value, the fallback to eager when capture fails (also when it is
a shed stack's capture that fails), that the CPU never captures, the params key, and that an iteration needs
no host synchronisation (eager or replayed). Marked ``gpu`` (skipped without CUDA): graphs against eager
(also for a stack that sheds stopped runs and is captured again), stacked against one by one, a tiny
sweep's arrays against the CPU's, and no synchronisation in the steady-state iterations.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

import pipeline.studies.mupc.training.group_training as tr
from pipeline.config import ConfigError
from pipeline.studies.mupc.engine.energy import EnergyTerms, InferenceConfig
from pipeline.studies.mupc.engine.iteration import GroupIteration, Outputs, compare
from pipeline.studies.mupc.engine.model import init_weights
from pipeline.studies.mupc.engine.runs import RunConfig
from pipeline.studies.mupc.training import train as train_mod
from pipeline.studies.mupc.training import train_keys
from pipeline.studies.mupc.training.sweep_expansion import expand, stack_groups
from tests.host_reads import count_host_reads
from tests.mupc_training.test_training import (
    context,
    drive,
    pc_run,
    raw_section,
    shedding_group,
    synthetic,
    tiny_raw,
    training_cfg,
)

F64 = torch.float64
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def replaying_capture(fn: Callable[[], Outputs]) -> tuple[Callable[[], None], Outputs]:
    """A stand-in for ``cuda_capture`` on the CPU with a graph's contract: one warm-up call, then a replay
    that reruns the iteration and writes its outputs into the tensors the capture returned."""
    out = fn()

    def replay() -> None:
        loss, n_conv = fn()
        out[0].copy_(loss)
        out[1].copy_(n_conv)

    return replay, out


def frozen(what: str) -> Callable:
    """A stand-in capture whose replay uses a value frozen at capture, as a graph would bake a host value:
    Adam's step count (the first step's) or the batch."""
    def capture(fn: Callable[[], Outputs]) -> tuple[Callable[[], None], Outputs]:
        it: GroupIteration = fn.__self__
        replay, out = replaying_capture(fn)
        x0, y0 = it.x_buf.clone(), it.y_buf.clone()

        def stale() -> None:
            if what == "adam step":
                it.opt._step.fill_(1)
            else:
                it.x_buf.copy_(x0)
                it.y_buf.copy_(y0)
            replay()

        return stale, out
    return capture


def failing_capture(fn: Callable[[], Outputs]) -> tuple[Callable[[], None], Outputs]:
    raise RuntimeError("operation not permitted when stream is capturing\nmore detail")


def groups() -> list[list[RunConfig]]:
    """Groups that take every path of the iteration: GD and Adam inference, Hessian rows (row 0 eager),
    activity and weight decay, runs that stop early (shed from the stack, which is captured again)."""
    return [
        [pc_run(seed=s, act_lr=a, param_lr=p) for s in (0, 1) for a, p in ((0.05, 1e-3), (0.5, 5e-2))],
        [pc_run(seed=s, act="relu", skips=True, param="mupc", init="standard_gauss", act_optim="adam", act_lr=0.1,
                param_lr=1e-2, metrics="basic") for s in (0, 1)],
        [pc_run(seed=0, act="linear", activity_decay=0.1, weight_decay=0.01, metrics="basic", param_lr=1e-2)],
    ]


def _same(a: list[tr.RunResult], b: list[tr.RunResult]) -> None:
    for ra, rb in zip(a, b, strict=True):
        assert (ra.status, ra.stop_iter) == (rb.status, rb.stop_iter)
        assert ra.arrays.keys() == rb.arrays.keys()
        for k in ra.arrays:
            np.testing.assert_array_equal(ra.arrays[k], rb.arrays[k], err_msg=k)


def _force_graphs(monkeypatch: pytest.MonkeyPatch, capture: Callable) -> list[int]:
    """Let the trainer take its graph path on the CPU, capturing with ``capture``; lists the captures' stack sizes
    (``fn`` is the bound ``GroupIteration.device_work``)."""
    calls: list[int] = []

    def counted(fn: Callable[[], Outputs]) -> tuple[Callable[[], None], Outputs]:
        calls.append(fn.__self__.R)
        return capture(fn)

    monkeypatch.setattr(tr, "graphs_available", lambda device: True)
    monkeypatch.setattr(tr, "capture_iteration", counted)
    return calls


# ----------------------------------------------------------------------------- CPU


def test_the_cpu_never_captures(monkeypatch):
    def never(fn):
        raise AssertionError("captured on the CPU")

    monkeypatch.setattr(tr, "capture_iteration", never)
    res = tr.train_group(groups()[1], synthetic(), "cpu", cuda_graphs=True)
    assert all(r.extra["cuda_graphs"] is False and "cuda_graphs_off" not in r.extra for r in res)


def test_the_graph_path_reproduces_eager_bit_for_bit(monkeypatch):
    """Static outputs, the Adam step counted outside the replay, the state restored after the check, the
    Hessian's row 0 taken eagerly: the same arrays as eager, to the last bit."""
    data = synthetic()
    eager = [tr.train_group(g, data, "cpu", cuda_graphs=False) for g in groups()]
    calls = _force_graphs(monkeypatch, replaying_capture)
    for g, ref in zip(groups(), eager):
        got = tr.train_group(g, data, "cpu")
        _same(got, ref)
        assert all(r.extra["cuda_graphs"] is True and "cuda_graphs_off" not in r.extra for r in got)
    assert calls == [4, 3, 2, 1, 1]  # each group's capture, and again where a group shed a stopped run
    assert {r.status for r in eager[0]} == {"finished", "no_learning"}


@pytest.mark.parametrize("what", ["adam step", "batch"])
def test_a_replay_that_freezes_a_value_fails_the_check_and_trains_eager(monkeypatch, what):
    data = synthetic()
    runs = groups()[0]
    eager = tr.train_group(runs, data, "cpu", cuda_graphs=False)
    _force_graphs(monkeypatch, frozen(what))
    got = tr.train_group(runs, data, "cpu")
    _same(got, eager)
    for r in got:
        assert r.extra["cuda_graphs"] is False
        assert r.extra["cuda_graphs_off"].startswith("replay differs from eager: "), r.extra


def test_a_capture_that_fails_trains_eager_and_says_why(monkeypatch):
    data = synthetic()
    runs = groups()[1]
    eager = tr.train_group(runs, data, "cpu", cuda_graphs=False)
    _force_graphs(monkeypatch, failing_capture)
    got = tr.train_group(runs, data, "cpu")
    _same(got, eager)
    assert {r.extra["cuda_graphs_off"] for r in got} == {
        "capture failed: RuntimeError: operation not permitted when stream is capturing"}
    assert {r.extra["cuda_graphs"] for r in got} == {False}


def test_a_recapture_that_fails_after_shedding_trains_eager_from_there(monkeypatch):
    """The group's first capture passes, the one for its shed stack fails: the same arrays as eager; the run
    that stopped before trained on graphs throughout, the others say why not."""
    data = synthetic()
    runs = groups()[0]
    eager = tr.train_group(runs, data, "cpu", cuda_graphs=False)

    captures = iter([replaying_capture, failing_capture])
    calls = _force_graphs(monkeypatch, lambda fn: next(captures)(fn))
    got = tr.train_group(runs, data, "cpu")
    _same(got, eager)
    assert calls == [4, 3]  # no further capture once one failed
    assert [r.status for r in got] == ["no_learning", "finished", "finished", "finished"]
    assert got[0].extra["cuda_graphs"] is True and "cuda_graphs_off" not in got[0].extra
    why = "capture failed: RuntimeError: operation not permitted when stream is capturing"
    assert all(r.extra["cuda_graphs"] is False and r.extra["cuda_graphs_off"] == why for r in got[1:])


def test_the_stage_says_why_once(tmp_path, monkeypatch):
    """Two groups fall back for the same reason: one log line; every run's config.json has the reason."""
    cfg = training_cfg(tiny_raw())  # S9: 3 runs, 2 groups
    why = "capture failed: RuntimeError: no"
    seen: list[bool] = []

    def fallback(group, data, device, dtype, hessian_dense_max_n, cuda_graphs=True, **kw):
        seen.append(cuda_graphs)
        arrays = {"batch_train_losses": np.zeros(2, np.float32), "test_accs": np.zeros(0), "test_losses": np.zeros(0)}
        return [tr.RunResult(rc, "finished", dict(arrays), 2, {"cuda_graphs": False, "cuda_graphs_off": why})
                for rc in group]

    monkeypatch.setattr(train_mod, "train_group", fallback)
    monkeypatch.setattr(train_mod, "load_dataset", lambda *a: None)
    lines: list[str] = []
    ctx = dataclasses.replace(context(tmp_path, cfg, "S9"), log=lines.append)
    parts, _ = drive(ctx, tmp_path)
    assert seen == [True, True]  # the params value reaches the trainer
    said = [line for line in lines if "without CUDA graphs" in line]
    assert len(said) == 1 and said[0].endswith(why), lines
    assert [p.json["config.json"]["cuda_graphs_off"] for p in parts] == [why] * 3
    assert {p.json["config.json"]["cuda_graphs"] for p in parts} == {False}


def test_the_params_key(monkeypatch):
    for profile in ("smoke", "gpu_medium", "paper"):
        assert training_cfg(profile=profile).cuda_graphs is True
    cfg = training_cfg()
    assert "cuda_graphs" in train_keys(cfg, cfg.sweep_ids[0])  # a DVC params dependency of every sweep
    raw = copy.deepcopy(raw_section())
    raw["cuda_graphs"] = "sometimes"
    with pytest.raises(ConfigError, match=re.escape("mupc_training.cuda_graphs = 'sometimes' is not allowed")):
        training_cfg(raw)
    raw["cuda_graphs"] = False
    assert training_cfg(raw).cuda_graphs is False


def test_the_engine_key_and_its_record(monkeypatch):
    """``engine``: standard by default in every profile, a DVC params dependency, checked, passed to the engine
    and recorded by every run."""
    for profile in ("smoke", "gpu_medium", "paper"):
        assert training_cfg(profile=profile).engine == "standard"
    cfg = training_cfg()
    assert "engine" in train_keys(cfg, cfg.sweep_ids[0])
    raw = copy.deepcopy(raw_section())
    raw["engine"] = "turbo"
    with pytest.raises(ConfigError, match=re.escape("mupc_training.engine = 'turbo' is not allowed")):
        training_cfg(raw)
    raw["engine"] = "fused"
    assert training_cfg(raw).engine == "fused"
    routes = []
    real = tr.GroupIteration

    def spy(*a, **kw):
        routes.append(a[-1] if len(a) > 11 else kw.get("route", "standard"))
        return real(*a, **kw)

    monkeypatch.setattr(tr, "GroupIteration", spy)
    rc = RunConfig(dataset="mnist", N=8, H=3, act="tanh", skips=True, init="standard_gauss", param="mupc", T=3,
                   act_optim="gd", act_lr=0.1, param_lr=1e-3, activity_decay=0.0, epochs=1, test_every=2, seed=0)
    data = tr.DataSet(torch.randn(128, 12), torch.eye(10)[torch.arange(128) % 10], torch.randn(64, 12),
                      torch.eye(10)[torch.arange(64) % 10])
    data = tr.DataSet(*(t.double() for t in (data.x_train, data.y_train, data.x_test, data.y_test)))
    res = tr.train_group([rc], data, "cpu", torch.float64, engine="standard")
    assert routes == ["standard"] and res[0].extra["engine"] == "standard"
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # the CPU without Triton's interpreter: refused, clearly
    with pytest.raises(ValueError, match="engine route 'fused'"):
        tr.train_group([rc], data, "cpu", torch.float64, engine="fused")


def test_compare_tolerance():
    a = torch.linspace(-1, 1, 101, dtype=torch.float32)
    assert compare({"w": a}, {"w": a.clone()}) is None
    eps = torch.finfo(torch.float32).eps
    assert compare({"w": a}, {"w": a + 32 * eps}) is None  # reduction order: a few ulps of the largest entry
    assert "w differs by" in compare({"w": a}, {"w": a * (1 + 1e-4)})
    b = a.clone()
    b[3] = float("nan")
    assert "non-finite" in compare({"w": a}, {"w": b})
    assert compare({"n": torch.arange(3)}, {"n": torch.tensor([0, 1, 3])}) == "n differs"


# ----------------------------------------------------------------------------- host synchronisation


@pytest.mark.parametrize("graphs", [False, True])
def test_an_iteration_needs_no_host_synchronisation(monkeypatch, graphs):
    """The host reads device values only where the loop stops to check (every ``test_every`` iterations and
    the last one): 4 and 16 iterations with one check each read the host alike, eager or replayed (the
    graph path's own set-up reads are once per group)."""
    if graphs:
        calls = _force_graphs(monkeypatch, replaying_capture)
    counts = []
    for n in (4, 16):
        data = synthetic(n_train=64 * n)
        runs = [pc_run(seed=s, test_every=n, metrics="basic", act="relu") for s in (0, 1)]
        counts.append(count_host_reads(
            lambda runs=runs, data=data: tr.train_group(runs, data, "cpu", cuda_graphs=graphs)))
    assert counts[0] == counts[1] > 0, counts
    if graphs:
        assert len(calls) == 2


# ----------------------------------------------------------------------------- GPU


def _on(data, device: str, dtype: torch.dtype):
    return tr.DataSet(*(t.to(device, dtype) for t in (data.x_train, data.y_train, data.x_test, data.y_test)),
                      data.subset)


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_graphs_equal_eager_on_cuda(dtype):
    data = _on(synthetic(n_train=1024, D=784), "cuda", dtype)
    for g in groups():
        eager = tr.train_group(g, data, "cuda", dtype, cuda_graphs=False)
        graphs = tr.train_group(g, data, "cuda", dtype, cuda_graphs=True)
        assert all(r.extra["cuda_graphs"] is True for r in graphs), graphs[0].extra
        assert all(r.extra["cuda_graphs"] is False for r in eager)
        _same(graphs, eager)  # the same kernels on the same buffers


@pytest.mark.gpu
@cuda
def test_a_shed_stack_is_captured_again_on_cuda(monkeypatch):
    """Runs stopped at iterations 3, 4 and 8 (float64): the stack is captured for 5, 3 and 2 runs, each capture
    passes its check, and the arrays are eager's to the last bit."""
    data = _on(synthetic(n_train=1024), "cuda", F64)
    runs = shedding_group()
    eager = tr.train_group(runs, data, "cuda", F64, layout="stacked", cuda_graphs=False)
    sizes: list[int] = []
    real = tr.capture_iteration

    def counted(fn: Callable[[], Outputs]) -> tuple[Callable[[], None], Outputs]:
        sizes.append(fn.__self__.R)
        return real(fn)

    monkeypatch.setattr(tr, "capture_iteration", counted)
    got = tr.train_group(runs, data, "cuda", F64, layout="stacked")
    assert sizes == [5, 3, 2]
    assert all(r.extra["cuda_graphs"] is True for r in got), [r.extra for r in got]
    _same(got, eager)


@pytest.mark.gpu
@cuda
def test_stacked_equals_one_by_one_on_cuda():
    """In float64: cuBLAS picks other kernels for a stack of R runs than for one (other reduction orders), and
    in float32 training amplifies those last-bit differences to ≈ 1e-3 of the loss (seen on an H100); in float64
    the same amplification stays far below the tolerance, so a stacking error cannot hide in it."""
    data = _on(synthetic(D=784), "cuda", F64)
    runs = groups()[0]
    stacked = tr.train_group(runs, data, "cuda", F64, layout="stacked")
    assert stacked[0].extra["cuda_graphs"] is True
    for rc, res in zip(runs, stacked):
        (alone,) = tr.train_group([rc], data, "cuda", F64)
        assert (res.status, res.stop_iter) == (alone.status, alone.stop_iter)
        for k in res.arrays:
            np.testing.assert_allclose(res.arrays[k], alone.arrays[k], rtol=1e-8, atol=1e-11, err_msg=k)


@pytest.mark.gpu
@cuda
def test_a_tiny_sweep_on_cuda_against_the_cpu():
    """The smoke profile's S6 (μPC, T = H) on toy data in float64: CUDA (graphs on) against the CPU."""
    cfg = training_cfg()
    runs = [rc for rc in expand(cfg, "S6")][:6]
    data = synthetic(n_train=512, n_test=128, D=784)
    for group in stack_groups(runs, cfg.max_stack):
        cpu = tr.train_group(group, _on(data, "cpu", F64), "cpu", F64)
        gpu = tr.train_group(group, _on(data, "cuda", F64), "cuda", F64)
        assert {r.extra["cuda_graphs"] for r in gpu} == {True}
        for a, b in zip(gpu, cpu):
            assert (a.status, a.stop_iter) == (b.status, b.stop_iter)
            for k in a.arrays:
                if a.arrays[k].dtype.kind == "i":
                    np.testing.assert_array_equal(a.arrays[k], b.arrays[k], err_msg=k)
                else:
                    np.testing.assert_allclose(a.arrays[k], b.arrays[k], rtol=1e-6, atol=1e-9, err_msg=k)


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("graphs", [False, True])
def test_steady_state_iterations_do_not_synchronise_on_cuda(graphs):
    """torch's sync debug mode raises on any synchronising call in the iterations (gather, step, copies)."""
    rc = pc_run(N=64, H=4, T=4, act="relu", skips=True, param="mupc", init="standard_gauss", metrics="basic")
    spec = tr.net_spec(rc, 784, 10)
    data = _on(synthetic(n_train=1024, D=784), "cuda", torch.float32)
    w0 = init_weights(spec, [0, 1], device="cuda")
    it = GroupIteration(spec, w0, 64, InferenceConfig(steps=4), EnergyTerms(), [0.1, 0.2], [1e-3, 1e-2],
                        data.x_train, data.y_train, "cuda", torch.float32)
    orders = torch.stack([tr.batch_orders(s, 1024, 64, 1) for s in (0, 1)], 1).cuda()
    if graphs:
        with torch.no_grad():
            assert it.enable_graph([orders[0], orders[1]]) is None
    losses = torch.empty(len(orders), 2, device="cuda")
    n_conv = torch.empty(len(orders), 2, dtype=torch.long, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with torch.no_grad():
            for i in range(len(orders)):
                it.load(orders[i])
                losses[i], n_conv[i] = it.step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.isfinite(losses).all()


# ----------------------------------------------------------------------------- graphs only where they pay

# graph/eager on an H100 (TF32, μPC ReLU, skips, B = 64): benchmarks/README.md's first-contact table (9c2e439)
# and fixtures/headline/pc_gpu.json (512:128:128)
MEASURED_GAIN = {("512:8:8", 1): 4.57, ("512:8:8", 8): 2.15, ("512:8:8", 64): 1.04, ("512:32:32", 1): 4.04,
                 ("512:32:32", 8): 1.20, ("512:32:32", 64): 1.01, ("128:8:500", 1): 7.82, ("128:8:500", 8): 5.97,
                 ("128:8:500", 64): 1.26, ("512:128:128", 1): 1.93, ("512:128:128", 3): 1.13,
                 ("512:128:128", 8): 1.03}


def _rule(shape: str, R: int, dtype: torch.dtype = torch.float32) -> str | None:
    N, H, T = (int(v) for v in shape.split(":"))
    rc = pc_run(N=N, H=H, T=T, act="relu", skips=True, param="mupc", init="standard_gauss")
    return tr.graphs_pay(rc, tr.net_spec(rc, 784, 10), R, dtype)


def test_the_graph_rule_captures_where_the_h100_measured_a_gain_and_not_where_it_did_not():
    fixture = json.loads((Path(__file__).parent / "fixtures" / "headline" / "pc_gpu.json").read_text())
    for r in fixture["rows"]:  # the table's 512:128:128 gains are the fixture's
        if r["graph_ok"]:
            assert MEASURED_GAIN[(f"{r['N']}:{r['H']}:{r['T']}", r["R"])] == round(r["graph_over_eager"], 2)
    for (shape, R), gain in MEASURED_GAIN.items():
        why = _rule(shape, R)
        if gain >= 1.10:
            assert why is None, (shape, R, gain)
        else:
            assert why is not None and why.startswith("bandwidth-bound: "), (shape, R, gain)
    assert _rule("512:128:128", 64) is not None and _rule("512:128:128", 3, torch.float64) is not None


def test_a_stack_above_the_rule_trains_eager_and_a_shed_one_below_it_is_captured(monkeypatch):
    """The rule turns the full stack down (each run records why), and is asked again once the stack sheds."""
    data = synthetic()
    runs = groups()[0]
    eager = tr.train_group(runs, data, "cpu", cuda_graphs=False)
    calls = _force_graphs(monkeypatch, replaying_capture)
    monkeypatch.setattr(tr, "GRAPH_MAX_STEP_BYTES", 1.0)  # every stack is "bandwidth-bound"
    got = tr.train_group(runs, data, "cpu")
    _same(got, eager)
    assert calls == []
    assert all(r.extra["cuda_graphs"] is False and r.extra["cuda_graphs_off"].startswith("bandwidth-bound: ")
               for r in got)
    pays = {4: False, 3: True}  # the 4-run stack is turned down, the 3 runs left after a shed are captured
    monkeypatch.setattr(tr, "graphs_pay", lambda rc, spec, R, dtype: None if pays[R] else "bandwidth-bound: test")
    got = tr.train_group(runs, data, "cpu")
    _same(got, eager)
    assert calls == [3]
