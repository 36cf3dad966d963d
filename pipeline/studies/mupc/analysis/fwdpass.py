"""Forward-pass study (spec §4): activity and weight norms of BP-trained residual MLPs across N and L.

The layer maps of §1.2 used as an ordinary network; ``L`` = number of weight layers (H = L − 1 hidden
layers). BP on ``mean((y − ŷ)²)``; at steps t = 0 … checks−1 (before the update at t) record, at the
weight-layer indices ℓ ∈ {1, L/4, L/2, 3L/4, L} (1-based), mean |z_ℓ|, RMS z_ℓ (layer L: the output
ŷ), the Frobenius norm and the spectral norm of the raw W_ℓ. The optimisers (sgd, adam) of one
(variant, act, N, L) cell share their initial weights and run stacked on the engine's run axis.
Non-finite values (SP with skips overflows at depth) are stored as they are.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np
import scipy.linalg as sla
import torch
from scipy.linalg.blas import dsyrk

from pipeline.studies.mupc.analysis.layout import FWD_VARIANTS, fwd_gain
from pipeline.studies.mupc.engine.energy import Adam
from pipeline.studies.mupc.engine.model import NetSpec, Weights, feedforward, init_weights, orthogonal_q

if TYPE_CHECKING:
    from threadpoolctl import ThreadpoolController


def layer_indices(L: int) -> list[int]:
    """0-based weight-layer indices [0, L/4−1, L/2−1, 3L/4−1, L−1] (the reference's)."""
    return [0, L // 4 - 1, L // 2 - 1, 3 * L // 4 - 1, L - 1]


def net_spec(variant: str, act: str, N: int, L: int, D: int = 784, d_y: int = 10) -> NetSpec:
    param, init, skips = FWD_VARIANTS[variant]
    return NetSpec(D=D, N=N, H=L - 1, d_y=d_y, act=act, skips=skips, param=param, init=init,
                   orth_gain=fwd_gain(init, act))


def initial_weights(spec: NetSpec, seed: int) -> Weights:
    """One run's initial weights (float32, on the CPU), which every cell of the same init, gain and shape
    starts from (:func:`.layout.fwd_draws`)."""
    return init_weights(spec, [seed], dtype=torch.float32)


class OrthogonalDraws:
    """One seed's orthogonal initial weights at one width, for every depth and gain from one stream of QRs.

    :func:`initial_weights` draws W_1, the hidden layers, then W_L from one generator, and a gain scales a layer
    after its QR: a net of depth L starts with the hidden layers of every shallower one, and nets that differ in
    gain alone share every QR. Here each hidden layer's QR is made once and kept per gain (float32; its pages
    touched as layers are drawn), and a depth's read-out is drawn from the generator where its hidden layers
    end. The numbers are :func:`initial_weights`'s for each (depth, gain), bit for bit, for the QRs of the
    deepest net alone: the paper's orthogonal cells at N = 1,024 took 1,992 QRs of N×N, now 510
    (``benchmarks/fwd_pass_draws.py --orthogonal``)."""

    def __init__(self, N: int, seed: int, gains: list[float], max_hidden: int, D: int = 784, d_y: int = 10):
        self.N, self.d_y, self.gains = N, d_y, sorted(set(gains))
        self.gen = torch.Generator().manual_seed(int(seed))
        q_in = orthogonal_q(N, D, self.gen)
        self.w_in = {g: (g * q_in).to(torch.float32) for g in self.gains}
        self.hidden = {g: torch.empty(max_hidden, N, N) for g in self.gains}
        self.drawn = 0
        self.ends = {0: self.gen.get_state()}  # the generator's state where the first k hidden layers end

    def weights(self, spec: NetSpec) -> Weights:
        """The initial weights of ``spec`` (an orthogonal net of this width, one of the gains)."""
        if spec.init != "orthogonal" or spec.N != self.N or spec.orth_gain not in self.hidden:
            raise ValueError(f"OrthogonalDraws of N = {self.N}, gains {self.gains}: not for init {spec.init!r}, "
                             f"N = {spec.N}, gain {spec.orth_gain}")
        k = max(spec.H - 1, 0)
        while self.drawn < k:
            q = orthogonal_q(self.N, self.N, self.gen)
            for g, layers in self.hidden.items():
                layers[self.drawn] = (g * q).to(torch.float32)
            self.drawn += 1
            self.ends[self.drawn] = self.gen.get_state()
        gen = torch.Generator()
        gen.set_state(self.ends[k])
        w_out = (spec.orth_gain * orthogonal_q(self.d_y, self.N, gen)).to(torch.float32)
        g = spec.orth_gain
        return Weights(self.w_in[g].unsqueeze(0), self.hidden[g][:k].unsqueeze(0), w_out.unsqueeze(0))


def spectral_norm(w: torch.Tensor) -> torch.Tensor:
    """Largest singular value, batched over leading axes: √λ_max of the smaller Gram matrix in float64.

    The SVD's σ_max (``torch.linalg.matrix_norm(ord=2)``, float32 before) to float32's rounding, in under half its
    time at N = 1,024 (``benchmarks/spectral_norm.py``): on the CPU a symmetric rank-k product (BLAS ``dsyrk``,
    half a matrix product) and the top eigenvalue alone (LAPACK ``dsyevr``) on one thread (on two, scipy's BLAS
    threads and torch's spinning OpenMP threads contend for a 2-core CPU's cores: 3–4× slower at N ≤ 256,
    and one thread was the fastest at every width measured); on a GPU torch's product and eigen-solve. A matrix
    with a non-finite entry (a net that diverged) has σ_max NaN, as the notebook's norm gives it; LAPACK's
    eigen-solver refuses such a matrix, and the unit stopped there."""
    w = w.double()
    finite = torch.isfinite(w).all(dim=-1).all(dim=-1)
    w = torch.where(finite[..., None, None], w, torch.zeros((), dtype=w.dtype, device=w.device))
    if w.device.type == "cpu":
        with _blas().limit(limits=1, user_api="blas"):
            top = [_top_gram_eigenvalue(m) for m in w.reshape(-1, *w.shape[-2:]).numpy()]
        lam = torch.tensor(top, dtype=torch.float64).reshape(w.shape[:-2])
    else:
        gram = w @ w.mT if w.shape[-2] < w.shape[-1] else w.mT @ w
        lam = torch.linalg.eigvalsh(gram)[..., -1]
    sigma = lam.clamp_min(0.0).sqrt()
    return torch.where(finite, sigma, torch.full_like(sigma, float("nan")))


@functools.cache
def _blas() -> ThreadpoolController:
    """scipy's BLAS, found once (a search of the loaded libraries costs 1.7 ms, a limit then 0.04 ms); imported
    here, for the CPU route alone (a GPU machine's Python may lack threadpoolctl)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def _top_gram_eigenvalue(m: np.ndarray) -> float:
    """λ_max of the smaller Gram matrix of a C-ordered float64 ``m`` (whose transpose is Fortran-ordered)."""
    k = min(m.shape)
    gram = dsyrk(1.0, m.T, trans=int(m.shape[0] < m.shape[1]), lower=0)  # upper triangle of mᵀm or m mᵀ
    return float(sla.eigh(gram, lower=False, eigvals_only=True, subset_by_index=[k - 1, k - 1], driver="evr",
                          overwrite_a=True, check_finite=False)[-1])


def record(spec: NetSpec, w: Weights, z: torch.Tensor, y_hat: torch.Tensor, idx: list[int]) -> torch.Tensor:
    """[4 metrics (in :data:`.layout.FWD_METRICS` order), R, 5 layers] at the current weights/activities."""
    L = spec.L
    out = torch.empty(4, w.runs, len(idx), dtype=torch.float64)
    for k, ell in enumerate(idx):
        act = y_hat if ell == L - 1 else z[:, ell]  # [R, B, n]
        mat = w.w_in if ell == 0 else (w.w_out if ell == L - 1 else w.w_hid[:, ell - 1])
        out[0, :, k] = act.abs().mean(dim=(1, 2)).double().cpu()
        out[1, :, k] = act.pow(2).mean(dim=(1, 2)).sqrt().double().cpu()
        out[2, :, k] = torch.linalg.matrix_norm(mat).double().cpu()
        out[3, :, k] = spectral_norm(mat).double().cpu()
    return out


def trainable(w: Weights, optims: list[str], lr: float) -> tuple[Weights, list[torch.Tensor], Adam | None]:
    """The weights as ``run_cell`` trains them: every weight matrix a leaf of its own (a hidden layer: a view of
    the stack), so that the backward pass hands each layer a gradient of its own (through the stack, each step
    allocated, and the kernel zeroed, a gradient the size of every hidden layer: N = 1,024, L = 512, 6.4 M page
    faults over 4 steps); and Adam's moments for its runs alone."""
    params = [w.w_in, *w.w_hid.unbind(1), w.w_out]
    for p in params:
        p.requires_grad_(True)
    adam_runs = [r for r, o in enumerate(optims) if o == "adam"]
    adam = Adam([p.detach()[_runs(adam_runs)] for p in params], lr) if adam_runs else None
    return Weights(params[0], w.w_hid, params[-1]), params, adam


def update(params: list[torch.Tensor], y: torch.Tensor, y_hat: torch.Tensor, optims: list[str], lr: float,
           adam: Adam | None) -> None:
    """One BP step on ``mean((y − ŷ)²)`` (runs are independent: their losses summed), each run's update in place.

    Each weight is stepped as soon as the backward pass has its gradient, which is then let go: a step holds a
    layer's gradient or two, not one for every weight (at N = 1,024, L = 512, two runs: 4 GiB), and the heap
    hands the same blocks from layer to layer instead of taking fresh pages from the kernel each step (there the
    cells' peak fell 18.09 → 15.55 GiB and they ran 1.24–1.28× faster, ``benchmarks/fwd_pass_memory.py``). A
    layer's weight is not read again by the rest of the backward pass (each is used once, in its own layer's
    product), so it is written in place through ``.data``: the hidden layers are views of one stack, whose shared
    version counter would otherwise stop the layers below at their saved weights. The same numbers, bit for bit,
    as stepping every weight after the whole backward pass (``tests/mupc_analysis/test_fwdpass_step.py``)."""
    loss = (y.unsqueeze(0) - y_hat).pow(2).mean(dim=(1, 2)).sum()
    c1, c2 = adam.moments([]) if adam is not None else (1.0, 1.0)  # the step counted; each weight's moments below

    def step(i: int, p: torch.Tensor) -> None:
        g, p.grad = p.grad, None
        with torch.no_grad():
            step_weight(i, p.data, g, optims, lr, adam, c1, c2)

    hooks = [p.register_post_accumulate_grad_hook(functools.partial(step, i)) for i, p in enumerate(params)]
    try:
        loss.backward(inputs=params)
    finally:
        for hook in hooks:
            hook.remove()


def run_cell(spec: NetSpec, optims: list[str], batches: list[tuple[torch.Tensor, torch.Tensor]], lr: float,
             initial: Weights, device: str) -> torch.Tensor:
    """Train one (variant, act, N, L) cell from ``initial`` (:func:`initial_weights`, left as it is), every
    optimiser stacked on a copy of it: returns [4, R, 5, checks]."""
    R = len(optims)
    stacked = Weights(*(t.repeat(R, *[1] * (t.dim() - 1)).to(device) for t in initial.tensors()))  # copies
    w, params, adam = trainable(stacked, optims, lr)
    idx = layer_indices(spec.L)
    rows = []
    for t, (x, y) in enumerate(batches):
        z, y_hat = feedforward(spec, w, x, params[1:-1])
        with torch.no_grad():
            rows.append(record(spec, w, z, y_hat, idx))
        if t < len(batches) - 1:  # the last record needs no update
            update(params, y, y_hat, optims, lr, adam)
    return torch.stack(rows, dim=-1)


BLOCK_BYTES = 64 << 20


def _runs(runs: list[int]) -> slice | list[int]:
    """Index of the run axis: a slice (a view, no copy of gigabytes) where the runs are consecutive."""
    return slice(runs[0], runs[-1] + 1) if runs == list(range(runs[0], runs[-1] + 1)) else runs


def step_weight(i: int, p: torch.Tensor, g: torch.Tensor, optims: list[str], lr: float, adam: Adam | None,
                c1: float, c2: float) -> None:
    """Weight ``i``'s step, each run's with its optimiser (SGD p − lr·g, or Adam with its bias corrections
    ``c1, c2``), written into ``p`` a block of layers at a time. The same element-wise operations as stepping
    every run both ways and keeping its own (the same numbers, bit for bit), without the whole-stack copies that
    took, and with Adam's moments kept for its runs alone: at the paper's largest cell (N = 1,024, L = 512, two
    runs, float32: 4.3 GB of hidden weights) those copies and temporaries passed the 24 GB of a 2-core build
    machine."""
    adam_runs = [r for r, o in enumerate(optims) if o == "adam"]
    if adam is not None:  # Adam.moments' update, for this weight alone
        ga = g[_runs(adam_runs)]
        adam.m[i].mul_(adam.b1).add_(ga, alpha=1 - adam.b1)
        adam.v[i].mul_(adam.b2).addcmul_(ga, ga, value=1 - adam.b2)
    for r, optim in enumerate(optims):
        layers = p.shape[1] if p.dim() > 2 else 1
        per_layer = p[r].numel() // layers * p.element_size()
        size = max(1, BLOCK_BYTES // per_layer)
        for start in range(0, layers, size):
            block = slice(start, start + size) if p.dim() > 2 else slice(None)
            if optim == "adam":
                assert adam is not None
                a = adam_runs.index(r)
                p[r, block] -= lr * adam.direction(adam.m[i][a, block], adam.v[i][a, block], c1, c2)
            else:
                p[r, block] -= lr * g[r, block]
