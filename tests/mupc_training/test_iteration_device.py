"""Where ``iteration.GroupIteration`` keeps a saved state, what it saves, and on which device it captures.

On the CPU: the stash decision from given allocator numbers (cached-but-free memory counts), the pinned host
copies and the wait before they are read (spies), that the saved state leaves out the engine buffers every
iteration rewrites (and that an iteration after a restore, with those buffers poisoned, gives the numbers it
gave from the saved state), that a run kept when a stack sheds the others goes on as it would have there, and that a
capture for cuda:1 runs wholly on cuda:1 (fakes of torch.cuda).
Marked ``gpu`` (skipped without CUDA): the decision against the real allocator, pinned stashes, and the graph
in use on a tiny net.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

import pipeline.studies.mupc.engine.iteration as itm
from pipeline.studies.mupc.engine.energy import EnergyTerms, InferenceConfig
from pipeline.studies.mupc.engine.iteration import GroupIteration, Outputs, cuda_capture, stash_fits
from pipeline.studies.mupc.engine.model import NetSpec, init_weights
from tests.mupc_training.test_cuda_graphs import replaying_capture

F64 = torch.float64
GiB = 1 << 30
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="fewer than two CUDA devices")


# ----------------------------------------------------------------------------- tiny groups


@dataclass(frozen=True)
class Case:
    """A tiny stacked group (2 runs) taking one path of the iteration."""

    act: str = "tanh"
    H: int = 3
    T: int = 2
    optim: str = "gd"
    skips: bool = False
    param: str = "sp"
    init: str = "standard"
    activity_decay: float = 0.0
    weight_decay: float = 0.0

    def __str__(self) -> str:
        return f"{self.act}-H{self.H}-T{self.T}-{self.optim}" + ("-decay" if self.activity_decay else "")


CASES = [
    Case(),  # GD following the front, T < H
    Case(act="relu", H=4, T=6, optim="adam", skips=True, param="mupc", init="standard_gauss"),  # T > H, Adam
    Case(act="linear", T=3, activity_decay=0.1, weight_decay=0.01),  # no front, P is z, regularised
    Case(H=1, T=3),  # no hidden products
    Case(act="relu", H=2, T=0),  # no inference steps
]


def make(case: Case, device: str | torch.device = "cpu", dtype: torch.dtype = F64, B: int = 16,
         n: int = 256) -> tuple[GroupIteration, torch.Tensor]:
    """The group's iteration and 6 batches of indices [6, R, B]."""
    spec = NetSpec(D=12, N=8, H=case.H, d_y=10, act=case.act, skips=case.skips, param=case.param, init=case.init)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 12, generator=g, dtype=F64)
    y = torch.nn.functional.one_hot(torch.randint(0, 10, (n,), generator=g), 10).to(F64)
    w0 = init_weights(spec, [0, 1], dtype=dtype, device=device)
    cfg = InferenceConfig(steps=case.T, optim=case.optim, activity_decay=case.activity_decay)
    terms = EnergyTerms(case.activity_decay, case.weight_decay)
    it = GroupIteration(spec, w0, B, cfg, terms, [0.1, 0.05], [1e-2, 5e-3], x.to(device, dtype), y.to(device, dtype),
                        device, dtype)
    orders = torch.randint(0, n, (6, 2, B), generator=g).to(device)
    return it, orders


def run(it: GroupIteration, idx: torch.Tensor) -> dict[str, torch.Tensor]:
    """One iteration on batch ``idx``; copies of everything it produced (outputs, weights, Adam's moments,
    activities, weight gradients)."""
    it.load(idx)
    got = it._observed([it.step()])
    got.update({f"grad[{j}]": g for j, g in enumerate(it.grads)})
    return {k: v.clone() for k, v in got.items()}


def poison(it: GroupIteration, how: str) -> None:
    """Overwrite every buffer the saved state leaves out: with NaN (any read spreads it) or with large finite
    values (a read through a comparison shows too)."""
    g = torch.Generator().manual_seed(1)
    for t in itm._rewritten(it.engine):
        if how == "nan":
            t.fill_(float("nan"))
        else:
            t.copy_(1e6 * torch.randn(t.shape, generator=g, dtype=F64).to(t.dtype))


def _nbytes(ts: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in ts)


# ----------------------------------------------------------------------------- the stash decision


def test_the_decision_counts_what_torchs_allocator_holds_free():
    """4 GiB needs 1.25·4 + 1 = 6 GiB free to stay on the device."""
    size = 4 * GiB
    # the driver alone says no room, the allocator's cached-but-unallocated 6 GiB make it
    assert stash_fits(size, driver_free=2 * GiB, reserved=10 * GiB, allocated=4 * GiB)
    # the reverse: as much reserved, but all of it in use: no room
    assert not stash_fits(size, driver_free=2 * GiB, reserved=10 * GiB, allocated=10 * GiB)
    # the driver alone has room
    assert stash_fits(size, driver_free=6 * GiB, reserved=0, allocated=0)
    # just short, and just enough
    assert not stash_fits(size, driver_free=6 * GiB - 1, reserved=0, allocated=0)
    assert stash_fits(size, driver_free=5 * GiB, reserved=3 * GiB, allocated=2 * GiB)


@dataclass
class FakeCudaTensor:
    """Stands in for a CUDA tensor in :func:`_stash`: its device, its size, and where its copy went."""

    device: torch.device
    n: int

    def numel(self) -> int:
        return self.n

    def element_size(self) -> int:
        return 4

    def clone(self) -> tuple[str, FakeCudaTensor]:
        return ("device", self)

    def to(self, *a: Any, **kw: Any) -> tuple[str, FakeCudaTensor]:
        return ("host", self)


@pytest.mark.parametrize("driver_free, reserved, allocated, where", [
    (2 * GiB, 10 * GiB, 4 * GiB, "device"),  # mem_get_info alone: host; with the cached 6 GiB: device
    (2 * GiB, 10 * GiB, 10 * GiB, "host"),  # nothing cached: host
    (8 * GiB, 9 * GiB, 9 * GiB, "device"),
])
def test_stash_asks_the_allocator_of_the_tensors_device(monkeypatch, driver_free, reserved, allocated, where):
    asked: list[Any] = []

    def numbers(value: int, name: str) -> Callable[[Any], Any]:
        def fake(dev: Any = None) -> Any:
            asked.append((name, torch.device(dev)))
            return value
        return fake

    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda dev=None: (numbers(driver_free, "free")(dev), 80 * GiB))
    monkeypatch.setattr(torch.cuda, "memory_reserved", numbers(reserved, "reserved"))
    monkeypatch.setattr(torch.cuda, "memory_allocated", numbers(allocated, "allocated"))
    monkeypatch.setattr(itm, "_host_copies", lambda ts, dev: [("host", t) for t in ts], raising=False)
    dev = torch.device("cuda:1")
    ts = [FakeCudaTensor(dev, GiB // 4), FakeCudaTensor(dev, 3 * GiB // 4)]  # 4 GiB in all
    out = itm._stash(ts)
    assert out == [(where, t) for t in ts]
    assert {d for _, d in asked} == {dev}


def test_stash_falls_back_to_the_host_when_the_device_copy_runs_out(monkeypatch):
    """Counted as free is not always in pieces large enough: an out-of-memory error sends the copies to the
    host instead of failing."""
    monkeypatch.setattr(itm, "_fits_on_device", lambda dev, size: True)
    monkeypatch.setattr(itm, "_host_copies", lambda ts, dev: [("host", t) for t in ts])

    class Full(FakeCudaTensor):
        def clone(self) -> tuple[str, FakeCudaTensor]:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    dev = torch.device("cuda:0")
    ts = [FakeCudaTensor(dev, 8), Full(dev, 8)]
    assert itm._stash(ts) == [("host", t) for t in ts]


def test_host_copies_from_cuda_are_pinned_and_complete_before_use(monkeypatch):
    """Page-locked buffers, copies queued without a wait each, then one wait for the device's current stream
    before the copies are returned (a reader on the host must see the data)."""
    events: list[tuple[Any, ...]] = []
    empty, copy = torch.empty, torch.Tensor.copy_

    def fake_empty(*a: Any, pin_memory: bool = False, **kw: Any) -> torch.Tensor:
        events.append(("empty", pin_memory))
        return empty(*a, **kw)

    def fake_copy(self: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
        events.append(("copy", non_blocking))
        return copy(self, src)

    class Stream:
        def __init__(self, device: Any) -> None:
            self.device = torch.device(device)

        def synchronize(self) -> None:
            events.append(("synchronize", self.device))

    monkeypatch.setattr(torch, "empty", fake_empty)
    monkeypatch.setattr(torch.Tensor, "copy_", fake_copy)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream(device))
    src = [torch.arange(6, dtype=F64).view(2, 3), torch.ones(4, dtype=torch.long)]
    out = itm._host_copies(src, torch.device("cuda:1"))
    monkeypatch.undo()
    assert events == [("empty", True), ("copy", True)] * 2 + [("synchronize", torch.device("cuda:1"))]
    for a, b in zip(src, out, strict=True):
        assert torch.equal(a, b) and a.dtype == b.dtype and a.data_ptr() != b.data_ptr()


def test_a_cpu_stash_requests_no_pinned_memory(monkeypatch):
    asked: list[Any] = []
    empty = torch.empty

    def fake_empty(*a: Any, **kw: Any) -> torch.Tensor:
        asked.append(kw.get("pin_memory"))
        return empty(*a, **{k: v for k, v in kw.items() if k != "pin_memory"})

    monkeypatch.setattr(torch, "empty", fake_empty)
    src = [torch.randn(3, 4), torch.zeros(())]
    out = itm._stash(src)
    monkeypatch.undo()
    assert True not in asked
    assert all(torch.equal(a, b) and a.data_ptr() != b.data_ptr() for a, b in zip(src, out))


# ----------------------------------------------------------------------------- what is saved


@pytest.mark.parametrize("case", CASES, ids=str)
def test_the_saved_state_leaves_out_the_buffers_every_iteration_rewrites(case):
    """The weights, Adam's moments and its step count: nothing of the engine (its activities, errors, φ, φ',
    scratch, norms and inference Adam moments are written before they are read in every iteration)."""
    it, orders = make(case)
    state = it._state()
    opt = it.opt
    assert opt.fused
    expected = [*it.store, *opt.m, *opt.v, opt._step]
    assert len(state) == len(expected) and all(a is b for a, b in zip(state, expected))
    engine = it.engine.buffers()
    assert not any(b is s for b in engine for s in state)
    saved, _ = it.save()
    assert len(saved) == len(expected)
    assert _nbytes(saved) == 3 * _nbytes(it.store) + opt._step.element_size()
    # every engine buffer is one the iterations rewrite (before, all of them were saved too)
    assert _nbytes(engine) > 0 and {id(t) for t in itm._rewritten(it.engine)} == {id(t) for t in engine}


@pytest.mark.parametrize("how", ["nan", "large"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_an_iteration_after_a_restore_gives_the_numbers_it_gave_from_the_saved_state(case, how):
    """save → two iterations (the reference) → three other iterations → restore → the buffers left out of the
    save poisoned → the same two iterations: the same numbers, to the last bit."""
    it, orders = make(case)
    run(it, orders[0])  # Adam's moments nonzero, step count 1
    saved = it.save()
    ref = [run(it, orders[1]), run(it, orders[2])]
    for i in (3, 4, 5):
        run(it, orders[i])
    it.restore(saved)
    poison(it, how)
    got = [run(it, orders[1]), run(it, orders[2])]
    for r, g in zip(ref, got, strict=True):
        assert r.keys() == g.keys()
        for k in r:
            assert torch.equal(r[k], g[k]), k
    assert it.opt.t == 3


def test_the_graph_check_restores_what_the_next_iteration_reads():
    """enable_graph (CPU stand-in capture) leaves the iteration where it found it: the next iteration equals
    the one a twin that never checked takes."""
    case = CASES[1]
    it, orders = make(case)
    twin, _ = make(case)
    for t in (it, twin):
        run(t, orders[0])

    assert it.enable_graph([orders[1], orders[2]], replaying_capture) is None
    poison(it, "nan")
    a, b = run(it, orders[3]), run(twin, orders[3])
    assert all(torch.equal(a[k], b[k]) for k in a)


# ----------------------------------------------------------------------------- shedding runs


LAYER_MAJOR = {"weights[1]", "Adam m[1]", "Adam v[1]", "grad[1]", "activities"}  # [H-1 or H, R, …]: runs on axis 1


@pytest.mark.parametrize("case", CASES, ids=str)
def test_a_run_shed_from_a_stack_goes_on_as_in_the_full_stack(case):
    """Two iterations of the 2-run stack, then run 1 alone (``shed``: its weights, Adam state and lrs on new
    buffers for R = 1): its next iterations equal the full stack's for that run, to the last bit."""
    full, orders = make(case)
    twin, _ = make(case)
    for t in (full, twin):
        for i in (0, 1):
            run(t, orders[i])
    one = twin.shed([1])
    assert (one.R, one.act_lrs, one.opt.lrs, one.opt.t) == (1, [0.05], [5e-3], 2)
    assert one.replay is None and one.engine.R == 1
    for i in (2, 3, 4):
        a, b = run(full, orders[i]), run(one, orders[i, 1:])
        for k in a:
            d = 1 if k in LAYER_MAJOR else 0  # the run axis
            assert torch.equal(a[k].narrow(d, 1, 1), b[k]), k


# ----------------------------------------------------------------------------- the capture's device


@dataclass
class FakeCuda:
    """torch.cuda's streams, graphs and device context, recording the device index each was asked for."""

    current: int = 0
    log: list[tuple[str, int]] = field(default_factory=list)

    def install(self, mp: pytest.MonkeyPatch) -> None:
        fake = self

        def index(device: Any) -> int:
            if device is None:
                return fake.current
            d = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
            return fake.current if d.index is None else d.index

        class Stream:
            def __init__(self, device: Any = None, priority: int = 0) -> None:
                self.index = index(device)
                fake.log.append(("Stream", self.index))

            def wait_stream(self, other: Stream) -> None:
                fake.log.append(("wait_stream", self.index))
                fake.log.append(("waited on", other.index))

        class CUDAGraph:
            def __init__(self) -> None:
                fake.log.append(("CUDAGraph", fake.current))

            def replay(self) -> None:
                fake.log.append(("replay", fake.current))

        @contextmanager
        def device(d: Any) -> Iterator[None]:
            before, fake.current = fake.current, index(d)
            fake.log.append(("device", fake.current))
            try:
                yield
            finally:
                fake.current = before

        @contextmanager
        def stream(s: Stream) -> Iterator[None]:
            fake.log.append(("stream", s.index))
            fake.log.append(("stream: current device", fake.current))
            yield

        @contextmanager
        def graph(g: CUDAGraph, stream: Stream | None = None, **kw: Any) -> Iterator[None]:
            assert stream is not None
            fake.log.append(("graph stream", stream.index))
            fake.log.append(("graph: current device", fake.current))
            yield

        def current_stream(device: Any = None) -> Stream:
            fake.log.append(("current_stream", index(device)))
            s = Stream.__new__(Stream)
            s.index = index(device)
            return s

        for name, value in (("Stream", Stream), ("CUDAGraph", CUDAGraph), ("device", device), ("stream", stream),
                            ("graph", graph), ("current_stream", current_stream),
                            ("current_device", lambda: fake.current)):
            mp.setattr(torch.cuda, name, value)


def test_cuda_capture_runs_wholly_on_the_device_asked_for(monkeypatch):
    fake = FakeCuda(current=0)
    fake.install(monkeypatch)
    out = (torch.zeros(2), torch.zeros(2, dtype=torch.long))

    def fn() -> Outputs:
        fake.log.append(("fn: current device", fake.current))
        return out

    replay, got = cuda_capture(fn, device="cuda:1")
    assert got is out and fake.current == 0
    replay()
    assert fake.current == 0
    assert [e for e in fake.log if e[0] == "fn: current device"] == [("fn: current device", 1)] * 3
    assert ("replay", 1) in fake.log and ("Stream", 1) in fake.log and ("CUDAGraph", 1) in fake.log
    assert {i for _, i in fake.log} == {1}, fake.log


def test_enable_graph_captures_with_the_buffers_device_current(monkeypatch):
    """The trainer's seam calls ``cuda_capture(fn)`` without a device: enable_graph makes the buffers' device
    (here posed as cuda:1 while cuda:0 is current) current for it."""
    it, orders = make(CASES[0])
    fake = FakeCuda(current=0)
    fake.install(monkeypatch)
    monkeypatch.setattr(GroupIteration, "device", property(lambda self: torch.device("cuda:1")), raising=False)
    why = it.enable_graph([orders[0], orders[1]], lambda fn: cuda_capture(fn))
    assert why is None or why.startswith("replay differs"), why  # the fake graph replays nothing
    assert fake.log and {i for _, i in fake.log} == {1}, fake.log
    assert fake.current == 0


# ----------------------------------------------------------------------------- GPU


def _free_to_torch(dev: torch.device) -> int:
    return torch.cuda.mem_get_info(dev)[0] + torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev)


@pytest.mark.gpu
@cuda
def test_the_decision_follows_the_real_allocator_on_cuda():
    """Memory torch frees into its cache leaves the driver's free count but not torch's: the computed free bytes
    keep it, and a stash that fits only with it stays on the device."""
    dev = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.empty_cache()
    before, driver_before = _free_to_torch(dev), torch.cuda.mem_get_info(dev)[0]
    n = int(0.6 * driver_before) // 4 * 4
    big = torch.empty(n, dtype=torch.uint8, device=dev)
    del big
    driver_after = torch.cuda.mem_get_info(dev)[0]
    cached = torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev)
    assert cached >= n and driver_before - driver_after >= n - (256 << 20)
    assert abs(_free_to_torch(dev) - before) <= 256 << 20  # the cache still counts as free
    size = int((driver_after + cached // 2 - itm.STASH_RESERVE) / itm.STASH_SLACK)  # fits only with the cache
    assert not stash_fits(size, driver_after, 0, 0)
    assert itm._fits_on_device(dev, size)
    reserved = torch.cuda.memory_reserved(dev)
    again = torch.empty(n, dtype=torch.uint8, device=dev)  # served from the cache: the driver is not asked
    assert torch.cuda.memory_reserved(dev) == reserved
    del again
    torch.cuda.empty_cache()


@pytest.mark.gpu
@cuda
def test_a_host_stash_from_cuda_is_pinned_and_restores(monkeypatch):
    monkeypatch.setattr(itm, "_fits_on_device", lambda dev, size: False)
    it, orders = make(CASES[1], "cuda", torch.float32)
    run(it, orders[0])
    saved = it.save()
    assert all(t.device.type == "cpu" and t.is_pinned() for t in saved[0])
    ref = run(it, orders[1])
    run(it, orders[2])
    it.restore(saved)
    got = run(it, orders[1])
    assert all(torch.equal(ref[k], got[k]) for k in ref)


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("stash", ["device", "host"])
def test_a_tiny_group_uses_its_graph_on_cuda(monkeypatch, stash):
    if stash == "host":
        monkeypatch.setattr(itm, "_fits_on_device", lambda dev, size: False)
    it, orders = make(CASES[1], "cuda", torch.float32)
    twin, _ = make(CASES[1], "cuda", torch.float32)
    with torch.no_grad():
        assert it.enable_graph([orders[0], orders[1]]) is None
        assert it.replay is not None
        for i in (0, 1, 2):
            a, b = run(it, orders[i]), run(twin, orders[i])
            assert itm.compare(b, a) is None


@pytest.mark.gpu
@cuda
@two_gpus
def test_a_group_on_the_second_gpu_uses_its_graph():
    assert torch.cuda.current_device() == 0
    it, orders = make(CASES[1], "cuda:1", torch.float32)
    with torch.no_grad():
        assert it.enable_graph([orders[0], orders[1]]) is None
        run(it, orders[2])
    assert torch.cuda.current_device() == 0
