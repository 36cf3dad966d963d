"""Calibration probes of mupc_analysis: one Hessian cell's eigen-solve, one forward-pass BP step, the
spectral norms, one theory iteration, each at its shape (scaled down above ``budget``: fewer layers, the
width kept), timed with the study's own functions."""

from __future__ import annotations

from collections.abc import Callable

import torch

from pipeline.device import cpu_threads
from pipeline.studies.mupc.analysis import fwdpass, newton, theory
from pipeline.studies.mupc.analysis.cost import (
    D_Y,
    NEWTON_TOL,
    D,
    ffwd_flops,
    init_flops,
    spectral_flops,
    theory_flops,
)
from pipeline.studies.mupc.analysis.layout import FWD_VARIANTS
from pipeline.studies.mupc.analysis.train import hessian_spec, theory_run, theory_spec
from pipeline.studies.mupc.engine import hessian as hz
from pipeline.studies.mupc.engine.cost import blocks_flops, eig_flops
from pipeline.studies.mupc.engine.energy import errors, weight_grads
from pipeline.studies.mupc.engine.model import NetSpec, feedforward, init_weights

Step = tuple[Callable[[], None], float]
SUBNORMAL_WIDTH = 256  # the width at which fwd_subnormals compares a deep cell without skips with one with skips
EQ_PROBE_STEPS = 200  # GD steps of a probed equilibrium (their rate is what the estimate needs)
CONFIG = {"act": "tanh", "skips": True, "init": "standard_gauss", "param": "mupc"}


def _threads(threads: int, device: str) -> None:
    if device.startswith("cpu"):
        torch.set_num_threads(cpu_threads(threads))


def _layers(flops: Callable[[int], float], H: int, budget: float, least: int = 1) -> int:
    while least < H and flops(H) > budget:
        H = max(least, H // 2)
    return H


def _batch(B: int, dtype: torch.dtype, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(B, D, generator=g, dtype=torch.float64).to(device=device, dtype=dtype)
    y = torch.nn.functional.one_hot(torch.randint(0, D_Y, (B,), generator=g), D_Y).to(device=device, dtype=dtype)
    return x, y


def hessian_cell(*, method: str, N: int, H: int, threads: int, device: str, budget: float) -> Step:
    """Blocks of H_z at initialisation and their eigen-solve by ``method`` (the cell's route)."""
    _threads(threads, device)
    budget = budget / 8 if method == "structured" else budget  # ARPACK's Python loop: ≈ 0.1 GFLOP/s here
    if method != "banded":  # band solvers' rates move with n (the one-stage eig_banded ran 2x slower per FLOP at
        # n = 16,384 than at 4,096, and scaled down the plan was 4x short): timed at the cell's own shape, once
        H = _layers(lambda h: blocks_flops(N, h) + eig_flops(method, N, h), H, budget)
    spec = hessian_spec({**CONFIG, "seed": 0}, N, H, False)
    w = init_weights(spec, [0], dtype=torch.float64)
    x = hz.hessian_input(N, 0)
    z, _ = feedforward(spec, w, x.view(1, -1))
    zs = z[0, :, 0]

    def step() -> None:
        b = hz.hessian_blocks(spec, w, x, x, zs)
        if method == "structured":
            hz.extremes(b, dense_max_n=0)
        else:
            hz.full_spectrum(b, dense_max_n=N * H if method == "dense" else 0, backend=method, device=device)

    return step, blocks_flops(N, H) + eig_flops(method, N, H)


def _bp_step(spec: NetSpec, optims: list[str], device: str) -> Callable[[], None]:
    """One training step of a forward-pass cell as ``fwdpass.run_cell`` takes it (its optimisers stacked): the
    feed-forward, the backward pass and each run's update in place, without the norms."""
    w, params, adam = fwdpass.trainable(init_weights(spec, [0] * len(optims), device=device), optims, 1e-9)
    x, y = _batch(64, torch.float32, device)

    def step() -> None:
        _, y_hat = feedforward(spec, w, x, params[1:-1])
        fwdpass.update(params, y, y_hat, optims, 1e-9, adam)
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    return step


def fwd_step(*, N: int, L: int, optims: list[str], threads: int, device: str, budget: float) -> Step:
    """One BP step of a forward-pass cell with skips (depth-μP, tanh: activities of order one)."""
    _threads(threads, device)
    L = _layers(lambda ell: 3 * len(optims) * ffwd_flops(N, ell - 1, 64), L, budget, least=4)
    return _bp_step(fwdpass.net_spec("depth_mup_skips", "tanh", N, L), optims, device), \
        3 * len(optims) * ffwd_flops(N, L - 1, 64)


def fwd_subnormals(*, variant: str, act: str, L: int, optims: list[str], threads: int, device: str,
                   budget: float) -> tuple[Callable[[], None], Callable[[], None]]:
    """A BP step of a cell without skips against :func:`fwd_step`'s net, both at width
    :data:`SUBNORMAL_WIDTH` and the cell's full depth (where its activities and gradients fall below float32's
    normal range; a shallower net would not show it). Their time ratio is the cell's slowdown: how much slower
    this CPU computes on subnormal numbers (benchmarks/README.md: up to 7x a cell on an Intel Xeon, none on an
    AMD EPYC)."""
    _threads(threads, device)
    return (_bp_step(fwdpass.net_spec(variant, act, SUBNORMAL_WIDTH, L), optims, device),
            _bp_step(fwdpass.net_spec("depth_mup_skips", "tanh", SUBNORMAL_WIDTH, L), optims, device))


def fwd_init(*, init: str, N: int, L: int, threads: int, device: str, budget: float) -> Step:
    """One draw of a forward-pass cell's initial weights (``fwdpass.initial_weights``, which the cells of one
    init, gain and shape share): float64 draws, and for ``orthogonal`` a QR per layer (minutes at N = 1,024,
    L = 512 on this CPU). At least 8 layers: one hidden layer's QR ran at 53 ms a layer where 8 and more ran at
    77 ms (N = 1,024, two threads)."""
    _threads(threads, device)
    L = _layers(lambda ell: init_flops(init, N, ell), L, budget, least=8)
    spec = fwdpass.net_spec(next(v for v, (_, i, _) in FWD_VARIANTS.items() if i == init), "tanh", N, L)
    return (lambda: fwdpass.initial_weights(spec, 0)), init_flops(init, N, L)


def spectral_norms(*, N: int, threads: int, device: str, budget: float) -> Step:
    """The spectral norm of an N×N weight (``fwdpass.spectral_norm``)."""
    _threads(threads, device)
    w = torch.randn(N, N, generator=torch.Generator().manual_seed(0)).to(device)

    def step() -> None:
        fwdpass.spectral_norm(w)
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    return step, spectral_flops(N, N)


def theory_step(*, act: str, N: int, H: int, batch: int, eq_steps: float, threads: int, device: str,
                budget: float, solver: str = "gd", cg_iters: int = 3) -> Step:
    """Linear: two iterations of ``theory_run`` (two records, one update). tanh/relu by Newton: one training
    iteration's work (feed-forward, the equilibrium to :data:`~.cost.NEWTON_TOL`, the paper's eq_tol at which the
    cost model's steps were measured, its energy and weight gradients),
    counted with the full-batch steps it took, so the rate is that of the steps a run takes: converged samples
    leave, and on a CPU the line search evaluates the tries it needs (timed at tolerance 0, the steps after
    convergence tried every step size, and the plan counted narrow ReLU nets up to 7.8x over their whole runs;
    benchmarks/README.md). By gradient descent: its steps (tolerance 0, at most :data:`EQ_PROBE_STEPS`)."""
    _threads(threads, device)
    spec = theory_spec(act, "mupc", N, H)
    x, y = _batch(batch, torch.float64, device)
    if act == "linear":
        return (lambda: theory_run(spec, [(x, y), (x, y)], 1e-3, 0)), 2 * theory_flops(act, N, H, batch, 0)
    w = init_weights(spec, [0], dtype=torch.float64, device=device)
    if solver == "newton":
        def iteration() -> float:
            z0, _ = feedforward(spec, w, x)
            eq = newton.newton_equilibrium(spec, w, x, y, z0, tol=NEWTON_TOL, cg_iters=cg_iters,
                                           fallback_max_steps=0)
            theory.per_sample_energy(spec, w, x, y, eq.z)
            eps, eps_out = errors(spec, w, x, y, eq.z)
            weight_grads(spec, w, x, eq.z, eps, eps_out)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            return eq.sample_steps / batch

        full = iteration()  # the warm-up too: the timed calls repeat it exactly
        return iteration, theory_flops(act, N, H, batch, full, solver, cg_iters)
    per_step = (theory_flops(act, N, H, batch, 1, solver, cg_iters)
                - theory_flops(act, N, H, batch, 0, solver, cg_iters))
    steps = max(1, min(int(eq_steps), EQ_PROBE_STEPS, int(budget // per_step)))
    z0, _ = feedforward(spec, w, x)

    def step() -> None:
        theory.numerical_equilibrium(spec, w, x, y, z0, tol=0.0, max_steps=steps)
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    return step, steps * per_step
