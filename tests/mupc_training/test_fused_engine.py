"""The engine's ``fused`` route (``energy.PCEngine(route="fused")``, Triton kernels in ``mupc/engine/fused.py``) against
the standard route, on the CPU under Triton's interpreter: the same activities, gradient norms, convergence
counts, errors and weight gradients over whole training iterations (float64 to 1e-10, float32 to float32's
round-off), linear/tanh/relu, with and without skips, SP and μPC, GD and Adam, the front below, at and above
H, activity decay and activities off the feed-forward point; the route refused where it cannot run; no host
read in its step loop; the learning rate read from the device on every call (a graph replays new values).
Skipped where Triton is not installed (both locks pin it, on Linux)."""

from __future__ import annotations

import os

import pytest
import torch

# Before fused.py is imported (its kernels are decorated then, and INTERPRETED read): the kernels run on the CPU
# under Triton's interpreter, so `make test` runs them with no variable set by hand. Not where torch sees CUDA:
# there the process's other Triton kernels (inductor's) would be interpreted too, and these tests skip.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

pytest.importorskip("triton")

from pipeline.studies.mupc.engine import fused
from pipeline.studies.mupc.engine.energy import InferenceConfig, PCEngine, check_route
from pipeline.studies.mupc.engine.model import Weights
from tests.host_reads import count_host_reads
from tests.mupc_training.test_layer_batched_engine import engine_iterations, setup

F64 = torch.float64
pytestmark = pytest.mark.skipif(not fused.INTERPRETED, reason="TRITON_INTERPRET was not 1 when fused.py loaded")


def _iterations(route, act, skips, param, R, H, T, optim, decay, dtype, iters=2, start=None):
    """:func:`engine_iterations` of one route (two iterations unless told)."""
    return engine_iterations(act, skips, param, R, H, T, optim, decay, dtype, iters, route=route, start=start)


def _same(a, b, tol):
    for u, v in zip(a, b):
        if not u.numel():  # no hidden weights (H = 1)
            assert not v.numel()
        elif u.dtype == torch.long:
            assert torch.equal(u, v)
        else:
            assert torch.allclose(u, v, rtol=tol, atol=tol * max(1.0, float(v.abs().max()))), float((u - v).abs().max())


CASES = [(act, skips, param, R) for act in ("linear", "tanh", "relu") for skips in (False, True)
         for param in ("sp", "mupc") for R in (1, 3) if (R == 3) == (skips == (param == "mupc"))]


@pytest.mark.parametrize("act,skips,param,R", CASES)
@pytest.mark.parametrize("optim", ["gd", "adam"])
def test_fused_equals_standard_in_float64(act, skips, param, R, optim):
    """T = 6 steps in a 4-layer net (the front passes H): every number the trainer reads, to 1e-10."""
    std = _iterations("standard", act, skips, param, R, 4, 6, optim, 0.0, F64)
    new = _iterations("fused", act, skips, param, R, 4, 6, optim, 0.0, F64)
    for a, b in zip(new, std):
        _same(a, b, 1e-10)
    assert float(std[-1][2].abs().max()) > 0


@pytest.mark.parametrize("act,skips,param,R,H,T,optim", [
    ("relu", True, "mupc", 2, 8, 3, "gd"),  # the front below H
    ("tanh", False, "sp", 3, 5, 5, "adam"),  # at H
    ("linear", True, "mupc", 1, 1, 4, "gd"),  # one hidden layer
    ("tanh", True, "mupc", 2, 3, 9, "adam"),  # well above H
])
def test_fused_follows_the_front_in_float64(act, skips, param, R, H, T, optim):
    std = _iterations("standard", act, skips, param, R, H, T, optim, 0.0, F64)
    new = _iterations("fused", act, skips, param, R, H, T, optim, 0.0, F64)
    for a, b in zip(new, std):
        _same(a, b, 1e-10)


@pytest.mark.parametrize("act,optim", [("tanh", "gd"), ("relu", "adam"), ("linear", "gd")])
def test_fused_with_activity_decay_and_given_activities(act, optim):
    """Decay moves every layer from the first step (no front); from activities off the feed-forward point every
    error is formed at every step."""
    std = _iterations("standard", act, True, "mupc", 2, 4, 5, optim, 0.3, F64)
    new = _iterations("fused", act, True, "mupc", 2, 4, 5, optim, 0.3, F64)
    for a, b in zip(new, std):
        _same(a, b, 1e-10)

    def start(spec, w, x):
        g = torch.Generator().manual_seed(3)
        return 0.5 * torch.randn(w.runs, spec.H, x.shape[1], spec.N, generator=g, dtype=F64)

    std = _iterations("standard", act, False, "sp", 3, 4, 5, optim, 0.0, F64, start=start)
    new = _iterations("fused", act, False, "sp", 3, 4, 5, optim, 0.0, F64, start=start)
    for a, b in zip(new, std):
        _same(a, b, 1e-10)


def test_fused_over_several_tiles_of_width_and_batch():
    """N = 70 and B = 66: two tiles of each (64 at most), so a row's tiles, its norm partials and the tiles'
    order in the launch grid are exercised, not one tile per row."""
    args = ("tanh", True, "mupc", 2, 3, 3, "adam", 0.0, F64)
    std = engine_iterations(*args, iters=1, route="standard", N=70, B=66)
    new = engine_iterations(*args, iters=1, route="fused", N=70, B=66)
    for a, b in zip(new, std):
        _same(a, b, 1e-10)


@pytest.mark.parametrize("act,optim", [("tanh", "gd"), ("relu", "adam"), ("linear", "gd")])
def test_fused_in_float32(act, optim):
    std = _iterations("standard", act, True, "mupc", 3, 5, 7, optim, 0.0, torch.float32)
    new = _iterations("fused", act, True, "mupc", 3, 5, 7, optim, 0.0, torch.float32)
    for a, b in zip(new, std):
        _same(a, b, 2e-4)


def test_routes_are_checked():
    with pytest.raises(ValueError, match="not one of standard, fused"):
        check_route("fast", "cpu")
    with pytest.raises(ValueError, match="follows the inference front"):
        check_route("fused", "cpu", front=False)
    check_route("standard", "cpu", front=False)


def test_fused_needs_cuda_or_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="runs on CUDA"):
        check_route("fused", "cpu")
    check_route("fused", "cuda:0")


def test_fused_step_loop_reads_nothing_on_the_host(monkeypatch):
    """The step loop around the kernels (slices, the norm reduction, n_converged) makes the host wait for
    nothing: kernels stubbed (the interpreter itself reads its tensors on the host), every host read counted."""
    monkeypatch.setattr(fused, "predict_error", lambda *a, **k: None)
    monkeypatch.setattr(fused, "grad_step", lambda *a, **k: None)
    for optim in ("gd", "adam"):
        spec, w, _, x, y = setup("tanh", True, "mupc", 3, H=5)
        eng = PCEngine(spec, 3, x.shape[1], InferenceConfig(steps=7, optim=optim), dtype=F64, route="fused")
        eng.bind(w)
        lr = torch.tensor([0.1, 0.2, 0.3], dtype=F64)
        eng.feedforward(x, y)
        assert count_host_reads(lambda e=eng, lr=lr: e.infer(lr)) == 0


def test_the_learning_rate_is_read_from_the_device():
    """A graph replays the launches with the addresses they were captured with: a new learning rate written
    into the same tensor must reach the kernels (nothing taken from it on the host)."""
    spec, w, _, x, y = setup("relu", True, "mupc", 2, H=4)
    lr = torch.tensor([0.5, 1.0], dtype=F64)
    engines = {r: PCEngine(spec, 2, x.shape[1], InferenceConfig(steps=5), dtype=F64, route=r)
               for r in ("standard", "fused")}
    for lr_value in ([0.5, 1.0], [2.0, 0.1]):
        lr.copy_(torch.tensor(lr_value, dtype=F64))
        for eng in engines.values():
            eng.bind(w)
            eng.feedforward(x, y)
            eng.infer(lr)
        _same([engines["fused"].z], [engines["standard"].z], 1e-10)


@pytest.mark.parametrize("text", ["128:64:8:4", "256:32:4:2", "16:16:1:1"])
def test_fused_tiles_are_parsed(text):
    t = fused.Tiles.parse(text)
    assert t.rows == 64 and t.label() == text


@pytest.mark.parametrize("text,why", [("128:64:8", "cols:k:warps:stages"), ("64:32:4:3:2", "cols:k:warps:stages"),
                                      ("96:32:4:3", "cols = 96"), ("64:8:4:3", "k = 8"), ("64:32:3:3", "warps = 3"),
                                      ("64:32:4:0", "stages = 0"), ("a:b:c:d", "integers")])
def test_bad_fused_tiles_are_refused(text, why):
    with pytest.raises(ValueError, match=why):
        fused.Tiles.parse(text)


def _with_tiles(monkeypatch, text, *args, **kw):
    monkeypatch.setattr(fused, "TILES", fused.Tiles.parse(text))
    return engine_iterations(*args, route="fused", **kw)


@pytest.mark.parametrize("text", ["16:16:4:3", "128:32:8:4"])
def test_other_tiles_equal_the_standard_route(monkeypatch, text):
    """Tiles other than the default (narrower and wider than N = 40, neither dividing it; a K tile of 16 or 32 in
    float32) give the standard route's numbers, as the default does: float64 to 1e-10, float32 to its round-off.
    (N = 40, not 70: the interpreter's time goes with the tiles a product takes, 5 × 5 at N = 70 with 16.)"""
    args = ("relu", True, "mupc", 2, 3, 4, "adam", 0.0)
    std = engine_iterations(*args, F64, iters=1, route="standard", N=40, B=66)
    for a, b in zip(_with_tiles(monkeypatch, text, *args, F64, iters=1, N=40, B=66), std):
        _same(a, b, 1e-10)
    std = engine_iterations(*args, torch.float32, iters=1, route="standard", N=40, B=10)
    for a, b in zip(_with_tiles(monkeypatch, text, *args, torch.float32, iters=1, N=40, B=10), std):
        _same(a, b, 2e-4)


def test_the_step_reads_the_weights_as_they_are_at_each_inference():
    """The step kernel reads a transposed copy of the hidden weights, taken at each ``infer``: a weight changed in
    place between two inferences (as the trainer's optimiser does, on layer-major storage the engine views)
    reaches it, so the routes stay equal."""
    spec, _, store, x, y = setup("tanh", True, "mupc", 2, H=4)
    w = Weights(store[0], store[1].transpose(0, 1), store[2])  # hidden weights stored layer-major: bound as views
    engines = {r: PCEngine(spec, 2, x.shape[1], InferenceConfig(steps=5), dtype=F64, route=r)
               for r in ("standard", "fused")}
    lr = torch.tensor([0.5, 1.0], dtype=F64)
    for eng in engines.values():
        eng.bind(w)
    before = None
    for scale in (1.0, -2.0):
        store[1].mul_(scale)  # in place, no bind
        for eng in engines.values():
            eng.feedforward(x, y)
            eng.infer(lr)
        _same([engines["fused"].z], [engines["standard"].z], 1e-10)
        assert before is None or not torch.allclose(engines["fused"].z, before)  # the change reached both
        before = engines["fused"].z.clone()
