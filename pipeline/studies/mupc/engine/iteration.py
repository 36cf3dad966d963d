"""A stacked group's PC training iteration on static buffers, run eagerly or replayed from a CUDA graph.

The trainer (``training/group_training.py``) and ``benchmarks/pc_gpu.py`` share it; it needs torch alone.

One iteration: gather each run's batch into the static input buffers (:meth:`GroupIteration.load`), then
feed-forward, T inference steps, the final errors, the weight gradients and one Adam step
(:meth:`GroupIteration.step`). Every tensor the iteration reads or writes is allocated once, so on CUDA the
device work after the gather can be captured once in a ``torch.cuda.CUDAGraph`` and replayed: one launch
instead of hundreds of small kernels. What changes from one iteration to the next is kept out of the
graph or read from device memory: the batch (copied into the static buffers before the replay) and
Adam's step count (:meth:`InPlaceAdam.advance`, a device tensor the fused kernel reads). Everything that
reads values on the host (early stopping, evaluation, the Hessian monitor) runs between replays.

Before a group uses a graph, :meth:`GroupIteration.enable_graph` checks it: two iterations replayed from
a saved state must give the numbers two eager iterations give from the same state (see
:func:`compare`); otherwise, or when the capture fails, the group trains eagerly and the reason is
returned.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch

from pipeline.studies.mupc.engine.energy import EnergyTerms, InferenceConfig, InPlaceAdam, PCEngine, add_regularisers
from pipeline.studies.mupc.engine.model import NetSpec, Weights

Outputs = tuple[torch.Tensor, torch.Tensor]  # (train loss [R], n_converged [R]) of one iteration
Capture = Callable[[Callable[[], Outputs]], tuple[Callable[[], None], Outputs]]

# Per-tensor tolerance of the self-check, in units of the dtype's machine epsilon times the tensor's largest
# magnitude. A replay launches the kernels eager launches, on the same buffers, so equal bits are expected;
# the margin admits a reduction summed in another order (a K-term sum moves by ≲ log2(K) ulps, K ≤ B·N =
# 32,768 here) and stays far below what a value frozen at capture would do (a stale Adam step count changes
# the second update by ≈ 34 %, a stale batch everything).
CHECK_ULPS = 64


def graphs_available(device: str | torch.device) -> bool:
    """CUDA graphs exist on CUDA devices only (the CPU never captures)."""
    return torch.device(device).type == "cuda"


def _cuda_device(device: str | torch.device | None) -> torch.device:
    """``device`` as a CUDA device with its index (None: the current device)."""
    dev = torch.device("cuda") if device is None else torch.device(device)
    if dev.type != "cuda":
        raise ValueError(f"CUDA graphs need a CUDA device, not {dev}")
    return dev if dev.index is not None else torch.device("cuda", torch.cuda.current_device())


def cuda_capture(fn: Callable[[], Outputs], warmup: int = 2,
                 device: str | torch.device | None = None) -> tuple[Callable[[], None], Outputs]:
    """Capture ``fn`` in a CUDA graph on ``device`` (default: the current device), after ``warmup`` eager calls
    on the capture stream, which torch needs for lazy initialisation; returns its replay and the static outputs
    a replay rewrites.

    The capture stream, the streams it waits on and the graph belong to ``device``, and all of it runs with
    ``device`` current (``torch.cuda.graph`` and the graph take the current device): with the buffers on
    cuda:1 and cuda:0 current, a stream of cuda:0 would capture nothing of the iteration's kernels. The replay
    makes ``device`` current too. The warm-up calls run the iteration: the caller restores its state
    afterwards."""
    dev = _cuda_device(device)
    with torch.cuda.device(dev):
        stream = torch.cuda.Stream(device=dev)
        stream.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(stream):
            for _ in range(warmup):
                fn()
        torch.cuda.current_stream(dev).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            out = fn()
        torch.cuda.current_stream(dev).wait_stream(stream)

    def replay() -> None:
        with torch.cuda.device(dev):
            graph.replay()

    return replay, out


def compare(ref: dict[str, torch.Tensor], got: dict[str, torch.Tensor]) -> str | None:
    """None when every tensor of ``got`` equals ``ref``'s within :data:`CHECK_ULPS` (integers exactly,
    non-finite entries in the same places), else what differs first."""
    for name, a in ref.items():
        b = got[name]
        if not a.is_floating_point():
            if not torch.equal(a, b):
                return f"{name} differs"
            continue
        fa, fb = a.isfinite(), b.isfinite()
        if not torch.equal(fa, fb):
            return f"{name}: non-finite entries differ"
        zero = torch.zeros((), dtype=a.dtype, device=a.device)
        diff = float(torch.where(fa, (a - b).abs(), zero).max()) if a.numel() else 0.0
        scale = float(torch.where(fa, a.abs(), zero).max()) if a.numel() else 0.0
        tol = CHECK_ULPS * torch.finfo(a.dtype).eps * scale
        if diff > tol:
            return f"{name} differs by {diff:.3g} (tolerance {tol:.3g})"
    return None


# A stash stays on its device only with room to spare: STASH_SLACK × its size plus STASH_RESERVE bytes (the
# iteration's temporaries, and cached memory the allocator cannot hand out in one piece).
STASH_SLACK = 1.25
STASH_RESERVE = 1 << 30


def stash_fits(size: int, driver_free: int, reserved: int, allocated: int) -> bool:
    """Whether copies of ``size`` bytes stay on their CUDA device (else they go to host memory).

    Free to torch is what the driver has free (``torch.cuda.mem_get_info``, ``driver_free``) plus what torch's
    caching allocator holds ``reserved`` but has not ``allocated``: the driver counts that as used, but torch
    hands it out (and releases it to retry an allocation the driver refuses). Part of it may be split pieces
    too small for one copy; the margin and :func:`_stash`'s fallback to the host cover that."""
    free = driver_free + max(reserved - allocated, 0)
    return free >= STASH_SLACK * size + STASH_RESERVE


def _fits_on_device(dev: torch.device, size: int) -> bool:
    """:func:`stash_fits` with the allocator's numbers for CUDA device ``dev``."""
    return stash_fits(size, torch.cuda.mem_get_info(dev)[0], torch.cuda.memory_reserved(dev),
                      torch.cuda.memory_allocated(dev))


def _host_copies(tensors: Sequence[torch.Tensor], dev: torch.device) -> list[torch.Tensor]:
    """Copies of ``tensors`` (on ``dev``) in host memory.

    From a CUDA device into page-locked (pinned) memory: copies from and back to the device at full bus
    speed, queued without waiting for each; then one wait for the device's current stream, on which they were
    queued, so that the host copies are complete before anything reads them (the self-check reads its
    reference on the host). Where page-locked memory runs out, that tensor goes to pageable memory (slower, the
    same numbers). From the CPU: clones (no pinned memory is requested; a CPU-only torch has none)."""
    if dev.type != "cuda":
        return [t.clone() for t in tensors]
    out = []
    for t in tensors:
        try:
            h = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        except RuntimeError:
            h = torch.empty(t.shape, dtype=t.dtype)
        h.copy_(t, non_blocking=True)
        out.append(h)
    torch.cuda.current_stream(dev).synchronize()
    return out


def _stash(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Copies of ``tensors``: on their device while it has room (:func:`stash_fits`), else in host memory
    (:func:`_host_copies`)."""
    if not tensors:
        return []
    dev = tensors[0].device
    if dev.type != "cuda":
        return [t.clone() for t in tensors]
    if _fits_on_device(dev, sum(t.numel() * t.element_size() for t in tensors)):
        try:
            return [t.clone() for t in tensors]
        except torch.cuda.OutOfMemoryError:  # counted as free, but not in pieces large enough
            pass
    return _host_copies(tensors, dev)


def _rewritten(engine: PCEngine) -> list[torch.Tensor]:
    """The engine's buffers that every iteration (:meth:`GroupIteration.device_work`: feed-forward, inference,
    errors, weight gradients) writes before it reads them, so a saved state needs none of them.

    - ``mu1``, ``z``, ``P`` (φ(z); ``z`` itself when linear), ``eps_out``: the feed-forward pass writes every
      layer (``baddbmm`` with β = 0 ignores what was there, NaN included) before it reads any;
    - ``E``: zeroed by the feed-forward pass (the layers below the inference front stay 0 from there);
    - ``D`` (φ'(z)): the feed-forward pass writes the top layer; inference step t first forms φ'(z) on the top
      min(t+1, H) layers (:meth:`PCEngine.errors`), the only ones its gradient reads;
    - ``T``, ``G``: scratch of each inference step, written (``baddbmm`` β = 0, ``bmm``/``div`` into, copies,
      ``zero_``) on every row the step then reads;
    - ``gnorm``: row t written at step t; :meth:`PCEngine.n_converged` reads rows 0…T-1;
    - ``_layer_norms``: zeroed at the start of inference following the front, else written whole each step;
    - the inference Adam moments (``adam_m``/``adam_v``) and the fused route's norm partials: zeroed at the start
      of inference.

    What the next iteration does read is the weights and Adam's state (:meth:`GroupIteration._state`)."""
    bufs = [engine.z, engine.E, engine.T, engine.G, engine.P, engine.mu1, engine.eps_out, engine.gnorm,
            engine._layer_norms]
    return bufs + [t for t in (engine.D, engine.adam_m, engine.adam_v, engine._partials) if t is not None]


class GroupIteration:
    """The training iteration of R stacked runs (spec §1.7–1.8) on buffers allocated once.

    The weights live in ``store`` (hidden layers layer-major, ``[H-1, R, N, N]``; run axis ``run_dims``)
    and are updated in place; ``w`` is the run-major view the other functions take. ``x``/``y`` are the
    static input buffers (views [R, B, ·]) that :meth:`load` fills."""

    def __init__(self, spec: NetSpec, w0: Weights, batch_size: int, inf_cfg: InferenceConfig, terms: EnergyTerms,
                 act_lrs: Sequence[float], param_lrs: Sequence[float], x_train: torch.Tensor, y_train: torch.Tensor,
                 device: str | torch.device, dtype: torch.dtype, route: str = "standard"):
        R, B = w0.runs, batch_size
        self.R, self.B, self.x_train, self.y_train = R, B, x_train, y_train
        self.store = [w0.w_in.contiguous(), w0.w_hid.transpose(0, 1).contiguous(), w0.w_out.contiguous()]
        self.run_dims = (0, 1, 0)
        self.w = Weights(self.store[0], self.store[1].transpose(0, 1), self.store[2])
        self.act_lrs = [float(v) for v in act_lrs]
        self.act_lr = torch.tensor(self.act_lrs, dtype=dtype, device=device)
        self.opt = InPlaceAdam(self.store, list(param_lrs), self.run_dims)
        self.grads = [torch.empty_like(t) for t in self.store]
        self.terms = terms
        self.regularised = bool(terms.weight_decay or terms.spectral_penalty)
        self.x_buf = torch.empty(R * B, x_train.shape[1], dtype=x_train.dtype, device=device)
        self.y_buf = torch.empty(R * B, y_train.shape[1], dtype=y_train.dtype, device=device)
        self.x, self.y = self.x_buf.view(R, B, -1), self.y_buf.view(R, B, -1)
        self.engine = PCEngine(spec, R, B, inf_cfg, dtype=dtype, device=device, route=route)
        self.engine.bind(self.w)
        self.replay: Callable[[], None] | None = None  # set by enable_graph when the check passes
        self.outputs: Outputs | None = None

    # -- one iteration

    def load(self, idx: torch.Tensor) -> None:
        """Gather the runs' batch (indices [R, B]) into the static input buffers (preallocated: no page
        faults, and the addresses a captured graph reads)."""
        torch.index_select(self.x_train, 0, idx.view(-1), out=self.x_buf)
        torch.index_select(self.y_train, 0, idx.view(-1), out=self.y_buf)

    def feedforward(self) -> torch.Tensor:
        """Feed-forward activities for the loaded batch; the train loss per run [R]."""
        return self.engine.feedforward(self.x, self.y)

    def finish(self) -> torch.Tensor:
        """Inference, weight gradients and the Adam step after :meth:`feedforward`; n_converged [R]."""
        n_conv = self._learn()
        self.opt.step(self.grads)
        return n_conv

    def _learn(self) -> torch.Tensor:
        engine = self.engine
        n_conv = engine.infer(self.act_lr)
        engine.errors()
        engine.weight_grads(self.x, self.grads)
        if self.regularised:
            add_regularisers(self.grads, self.store, self.terms)
        return n_conv

    def device_work(self) -> Outputs:
        """The iteration after the gather with Adam's step already counted: the part a graph captures
        (no host synchronisation, no value that changes between iterations is taken from the host)."""
        loss = self.feedforward()
        n_conv = self._learn()
        self.opt.apply(self.grads)
        return loss, n_conv

    def step(self) -> Outputs:
        """One iteration on the loaded batch: the graph's replay where one is enabled, else eager. The
        outputs of a replay are the graph's static tensors (copy them before the next step)."""
        if self.replay is None:
            loss = self.feedforward()
            return loss, self.finish()
        self.opt.advance()
        self.replay()
        assert self.outputs is not None
        return self.outputs

    def shed(self, keep: Sequence[int]) -> GroupIteration:
        """The iteration of runs ``keep`` (positions in this stack) alone, on new buffers for the smaller R: their
        weights, Adam state and learning rates carried over, so they go on as they would have here (the trainer
        sheds stopped runs with it). The engine carries nothing from one iteration to the next (:func:`_rewritten`),
        so it is built afresh; a graph is not taken over (capture again for the new R).

        This iteration is consumed: its graph, engine and gradient buffers are released before the new stack
        is allocated, so the peak is this stack's weights and Adam moments plus the new stack, not two whole
        stacks (64 runs of 512:128:128 in float32 take ≈ 41 GB of an H100's 80)."""
        dev, dtype, spec, cfg = self.device, self.act_lr.dtype, self.engine.spec, self.engine.cfg
        route = self.engine.route
        idx = torch.as_tensor(list(keep), dtype=torch.long, device=dev)
        self.replay = self.outputs = None
        del self.engine, self.grads
        store = [t.index_select(d, idx) for t, d in zip(self.store, self.run_dims)]  # in layout: no copy below
        new = GroupIteration(spec, Weights(store[0], store[1].transpose(0, 1), store[2]), self.B, cfg, self.terms,
                             [self.act_lrs[k] for k in keep], [self.opt.lrs[k] for k in keep], self.x_train,
                             self.y_train, dev, dtype, route)
        new.opt.carry(self.opt, idx)
        return new

    # -- state

    @property
    def device(self) -> torch.device:
        """The device of the iteration's buffers (with its index)."""
        return self.x_buf.device

    def _state(self) -> list[torch.Tensor]:
        """What an iteration reads from the previous ones: the weights, Adam's moments and step count, and
        any engine buffer not in :func:`_rewritten` (none at present: the feed-forward pass starts afresh)."""
        opt = self.opt
        steps = [opt._step] if opt.fused else []
        skip = _rewritten(self.engine)
        carried = [b for b in self.engine.buffers() if not any(b is s for s in skip)]
        return [*self.store, *opt.m, *opt.v, *steps, *carried]

    def save(self) -> tuple[list[torch.Tensor], tuple[Any, ...]]:
        """The state the next iteration starts from (device tensors and the host-side counters). The engine's
        buffers are not in it: every iteration rewrites them before reading them (:func:`_rewritten`)."""
        e = self.engine
        return _stash(self._state()), (self.opt.t, e.at_feedforward, e.reached)

    def restore(self, saved: tuple[list[torch.Tensor], tuple[Any, ...]]) -> None:
        """Back to a :meth:`save`d state, in place (a captured graph keeps reading the same addresses): the next
        iteration gives the numbers it gave from there. The engine's buffers (its activities among them) keep
        what the last iteration left until the next feed-forward pass rewrites them.

        Copies back from pinned host memory are queued on the device's stream without a wait: what follows
        on the device is ordered after them, and nothing writes the saved copies."""
        tensors, (t, at_ff, reached) = saved
        for dst, src in zip(self._state(), tensors, strict=True):
            dst.copy_(src, non_blocking=src.is_pinned())
        self.opt.t, self.engine.at_feedforward, self.engine.reached = t, at_ff, reached

    def _observed(self, outs: list[Outputs]) -> dict[str, torch.Tensor]:
        """What the self-check compares after its iterations: each iteration's outputs, then the weights,
        Adam's moments and the final activities."""
        got: dict[str, torch.Tensor] = {}
        for i, (loss, n_conv) in enumerate(outs):
            got[f"train loss {i + 1}"], got[f"n_converged {i + 1}"] = loss, n_conv
        for name, ts in (("weights", self.store), ("Adam m", self.opt.m), ("Adam v", self.opt.v)):
            for j, t in enumerate(ts):
                got[f"{name}[{j}]"] = t
        got["activities"] = self.engine.z
        return got

    # -- the graph

    def _current_device(self) -> AbstractContextManager[Any]:
        """Makes the buffers' CUDA device current (nothing elsewhere)."""
        dev = self.device
        return torch.cuda.device(dev) if dev.type == "cuda" else nullcontext()

    def enable_graph(self, batches: Sequence[torch.Tensor], capture: Capture = cuda_capture) -> str | None:
        """Capture :meth:`device_work` and check it: from the current state, the iterations on ``batches``
        (indices [R, B] each; two, so a value frozen at capture shows) replayed must equal them run eagerly.
        The state is restored afterwards either way (:meth:`restore`). The capture runs with the buffers'
        device current (``capture`` takes the iteration alone; :func:`cuda_capture` captures on the current
        device). None when the graph is in use, else why not."""
        if not self.opt.fused:
            return "Adam is not the fused kernel (its bias corrections would be captured as constants)"
        saved = self.save()
        try:
            outs = []
            for idx in batches:
                self.load(idx)
                loss, n_conv = self.step()
                outs.append((loss.clone(), n_conv.clone()))
            ref = self._observed(outs)
            ref = dict(zip(ref, _stash(list(ref.values()))))
            self.restore(saved)
            self.opt.advance()  # the warm-up calls then take a real step count (not 0: 1 − β⁰ = 0)
            try:
                with self._current_device():
                    replay, outputs = capture(self.device_work)
            except Exception as exc:  # any failure to capture means: train eagerly
                first = (str(exc).strip().splitlines() or [""])[0]
                return f"capture failed: {type(exc).__name__}: {first}"
            self.restore(saved)  # the capture's warm-up ran iterations
            self.replay, self.outputs = replay, outputs
            outs = []
            for idx in batches:
                self.load(idx)
                loss, n_conv = self.step()
                outs.append((loss.clone(), n_conv.clone()))
            got = self._observed(outs)
            reason = None
            for k, r in ref.items():  # where the reference went to host memory, one tensor at a time
                reason = reason or compare({k: r}, {k: got[k].to(r.device)})
            if reason is not None:
                self.replay, self.outputs = None, None
                return f"replay differs from eager: {reason}"
            return None
        finally:
            self.restore(saved)
