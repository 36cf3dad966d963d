"""A stacked group's PC training iteration on static buffers, run eagerly or replayed from a CUDA graph.

The trainer (``training/trainer.py``) and ``benchmarks/pc_gpu.py`` share it; it needs torch alone.

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
from typing import Any

import torch

from pipeline.studies.mupc.energy import EnergyTerms, InferenceConfig, InPlaceAdam, PCEngine, add_regularisers
from pipeline.studies.mupc.model import NetSpec, Weights

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


def cuda_capture(fn: Callable[[], Outputs], warmup: int = 2) -> tuple[Callable[[], None], Outputs]:
    """Capture ``fn`` in a CUDA graph (after ``warmup`` eager calls on the capture stream, which torch
    needs for lazy initialisation); returns its replay and the static outputs a replay rewrites.

    The warm-up calls run the iteration: the caller restores its state afterwards."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        out = fn()
    torch.cuda.current_stream().wait_stream(stream)
    return graph.replay, out


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


def _stash(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Copies of ``tensors``: on their device while it has room (with a margin), else in host memory."""
    if not tensors:
        return []
    dev = tensors[0].device
    size = sum(t.numel() * t.element_size() for t in tensors)
    if dev.type == "cuda" and torch.cuda.mem_get_info(dev)[0] < 1.25 * size + (1 << 30):
        return [t.to("cpu", copy=True) for t in tensors]
    return [t.clone() for t in tensors]


class GroupIteration:
    """The training iteration of R stacked runs (spec §1.7–1.8) on buffers allocated once.

    The weights live in ``store`` (hidden layers layer-major, ``[H-1, R, N, N]``; run axis ``run_dims``)
    and are updated in place; ``w`` is the run-major view the other functions take. ``x``/``y`` are the
    static input buffers (views [R, B, ·]) that :meth:`load` fills."""

    def __init__(self, spec: NetSpec, w0: Weights, batch_size: int, inf_cfg: InferenceConfig, terms: EnergyTerms,
                 act_lrs: Sequence[float], param_lrs: Sequence[float], x_train: torch.Tensor, y_train: torch.Tensor,
                 device: str | torch.device, dtype: torch.dtype):
        R, B = w0.runs, batch_size
        self.R, self.B, self.x_train, self.y_train = R, B, x_train, y_train
        self.store = [w0.w_in.contiguous(), w0.w_hid.transpose(0, 1).contiguous(), w0.w_out.contiguous()]
        self.run_dims = (0, 1, 0)
        self.w = Weights(self.store[0], self.store[1].transpose(0, 1), self.store[2])
        self.act_lr = torch.tensor(list(act_lrs), dtype=dtype, device=device)
        self.opt = InPlaceAdam(self.store, list(param_lrs), self.run_dims)
        self.grads = [torch.empty_like(t) for t in self.store]
        self.terms = terms
        self.regularised = bool(terms.weight_decay or terms.spectral_penalty)
        self.x_buf = torch.empty(R * B, x_train.shape[1], dtype=x_train.dtype, device=device)
        self.y_buf = torch.empty(R * B, y_train.shape[1], dtype=y_train.dtype, device=device)
        self.x, self.y = self.x_buf.view(R, B, -1), self.y_buf.view(R, B, -1)
        self.engine = PCEngine(spec, R, B, inf_cfg, dtype=dtype, device=device)
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

    # -- state

    def _state(self) -> list[torch.Tensor]:
        opt = self.opt
        steps = [opt._step] if opt.fused else []
        return [*self.store, *opt.m, *opt.v, *steps, *self.engine.buffers()]

    def save(self) -> tuple[list[torch.Tensor], tuple[Any, ...]]:
        """The iteration's whole state (device tensors and the host-side counters)."""
        e = self.engine
        return _stash(self._state()), (self.opt.t, e.at_feedforward, e.reached)

    def restore(self, saved: tuple[list[torch.Tensor], tuple[Any, ...]]) -> None:
        """Back to a :meth:`save`d state, in place (a captured graph keeps reading the same addresses)."""
        tensors, (t, at_ff, reached) = saved
        for dst, src in zip(self._state(), tensors):
            dst.copy_(src)
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

    def enable_graph(self, batches: Sequence[torch.Tensor], capture: Capture = cuda_capture) -> str | None:
        """Capture :meth:`device_work` and check it: from the current state, the iterations on ``batches``
        (indices [R, B] each; two, so a value frozen at capture shows) replayed must equal them run eagerly.
        The state is restored afterwards either way. None when the graph is in use, else why not."""
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
