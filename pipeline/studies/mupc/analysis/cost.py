"""What a mupc_analysis train unit computes, counted from its grids (``make plan``; light: no torch).

* ``hessian_init``: per (config, N, H) cell, in float64 with D = d_y = N: the blocks of H_z and its
  eigen-solve (full spectra on the slices N = max or H = max, else the extremes), by the route the cell
  takes (dense up to ``dense_max_n``, else ``spectrum_backend`` on the device or the structured extremes); linear
  networks add the theory blocks, the block-diagonal spectra (H eigvalsh of N×N) and the off-diagonal
  part's spectrum or extremes. The counts are ``pipeline/studies/mupc/engine/cost.py``'s.
* ``fwd_pass``: per (act, variant, N, L) cell, every optimiser stacked (R runs): its initial weights, drawn
  once for the cells that share them (:func:`.layout.fwd_draws`; :func:`init_flops`: float64 draws, a QR per
  layer for ``orthogonal``, whose layers every depth and gain of a width share: ``fwdpass.OrthogonalDraws``),
  ``checks`` feed-forwards of a batch, ``checks − 1`` backward passes (2 feed-forwards each) with each run's
  update, and at each check the exact spectral norm (:func:`spectral_flops`) of 5 weights per run.
* ``theory_grid`` / ``theory_width``: ``iters`` iterations per network: linear nets the exact
  equilibrium (theory blocks 2HN³, block Cholesky 10HN³/3, solves 6HN²B), tanh/relu the numerical one —
  by Newton (``eq_solver: newton``) :data:`NEWTON_STEPS` steps of :func:`newton_step_flops`, by gradient
  descent :data:`EQ_STEPS` steps (three products each), capped by ``eq_max_steps``; plus ≈ 5 feed-forwards
  (loss, errors, energy, weight gradients).

Cells are probed per distinct shape (small cells are bound by per-call overhead, which a FLOP rate taken
at another shape would miss).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from pipeline.contract import Cost, Work
from pipeline.studies.mupc.analysis.config import MupcAnalysisParams, theory_device, theory_threads
from pipeline.studies.mupc.analysis.layout import FWD_VARIANTS, fwd_draws, hessian_configs, is_slice, spectrum_routes
from pipeline.studies.mupc.engine.cost import blocks_flops, dense_flops, eig_flops, off_diagonal_flops

# GD steps a tanh/relu equilibrium takes to tol 1e-8: the order of the median measured at initialisation on
# an MNIST batch of 64 (628–5,454 steps for N = 4–128, H = 4, SP and μPC, most 1,000–1,800; the smoke
# networks, H = 2, took 50–550 while training). A typical count, not a bound (the cap is eq_max_steps): the
# estimate is off by the ratio of the real count to it.
EQ_STEPS = 1000
# Full-batch Newton steps an equilibrium costs to tol 1e-8 (analysis/newton.py; a step computes only the samples
# not yet converged, so this is the samples computed over the batch size), per width: the mean over whole paper
# runs of theory_width's nets (937 iterations, H = 4, B = 64, MNIST), of SP and μPC, measured by
# ``benchmarks/equilibrium.py --parts 4`` (benchmarks/README.md), at the paper's eq_tol (:data:`NEWTON_TOL`, which
# the probe solves to as well). A width between two takes the nearer one's.
NEWTON_TOL = 1e-8
NEWTON_STEPS: dict[str, dict[int, float]] = {
    "tanh": {1: 3.06, 2: 4.06, 4: 4.13, 8: 4.26, 16: 3.88, 32: 3.52, 64: 3.19, 128: 2.71, 256: 2.54, 512: 2.36},
    "relu": {1: 0.04, 2: 0.07, 4: 0.48, 8: 1.46, 16: 1.96, 32: 2.19, 64: 2.45, 128: 2.5, 256: 2.5, 512: 2.34},
}
# newton.STEP_SIZES tried a step (tanh: Newton's 4 + Gauss–Newton's 7), all evaluated on a GPU; the CPU tries them
# in turn and mostly evaluates one or two, which its probes' rates (seconds per counted FLOP) take in
LINE_SEARCH_TRIES = {"tanh": 11, "relu": 7}
# nets without skips this deep compute on float32 subnormals on a CPU: measured from L = 128 (an Intel Xeon's
# cells ran up to 7x slower at L = 128–256; benchmarks/README.md)
SUBNORMAL_FROM_DEPTH = 128
D, D_Y, RECORDED = 784, 10, 5  # MNIST input, classes; weights whose norms fwd_pass records per check


def ffwd_flops(N: int, H: int, B: int, D: int = D, d_y: int = D_Y) -> float:
    return 2 * B * (D * N + (H - 1) * N * N + d_y * N)


def init_flops(init: str, N: int, L: int) -> float:
    """A cell's initial weights, counted per hidden layer: N² draws (one unit each), and for ``orthogonal``
    the QR of an N×N draw and its Q (8N³/3). The input and read-out layers are left out."""
    return (L - 1) * (N * N + (8 * N**3 / 3 if init == "orthogonal" else 0))


def fwd_cell_bytes(N: int, L: int, optims: list[str], B: int, draws: int = 1) -> float:
    """The memory a forward-pass cell holds at once, float32: the initial weights its group shares
    (:func:`.layout.fwd_draws`; ``draws``: the sets of them kept, one per orthogonal gain where a width's
    orthogonal stream keeps every gain's layers, ``fwdpass.OrthogonalDraws``), its stacked weights, Adam's two
    moments for its Adam runs, what the backward pass keeps (about three [R, B, N] tensors a layer), and two
    weights' gradients (each weight is stepped and its gradient let go as the backward pass reaches it,
    ``fwdpass.update``). N = 1,024, L = 512, SGD and Adam, both orthogonal gains kept: 12.7 GiB; the process
    beside them: :func:`fwd_peak_bytes`."""
    R, adam = len(optims), sum(o == "adam" for o in optims)
    per_run = (L - 2) * N * N + N * D + D_Y * N
    return 4 * ((draws + R + 2 * adam) * per_run + 3 * R * B * (L - 1) * N + 2 * R * max(N * N, N * D))


# A forward-pass cell's process on the CPU holds more than its tensors (``benchmarks/fwd_pass_memory.py``): the
# process itself (torch, MNIST: 0.32 GiB) and what glibc's heap keeps of the blocks freed between layers and
# steps (a fixed mmap threshold returns them, at 4.6× the page faults and twice the time). Its peaks at L = 512,
# 4.30–4.43 GiB at N = 512 and 15.55 GiB at N = 1,024, lie on about 1.19 × the tensors + 0.4 GiB; the line below
# stays above each (by 3–5 %).
CPU_HEAP_SLACK = 0.21
CPU_PROCESS_BYTES = 0.55 * 2**30


def fwd_peak_bytes(N: int, L: int, optims: list[str], B: int, device: str, draws: int = 1) -> float:
    """The most a forward-pass cell's process holds (the plan's memory line): :func:`fwd_cell_bytes`, and on the
    CPU the heap's slack and the process beside them (on a GPU the tensors alone: the device's memory)."""
    tensors = fwd_cell_bytes(N, L, optims, B, draws)
    return tensors * (1 + CPU_HEAP_SLACK) + CPU_PROCESS_BYTES if device.startswith("cpu") else tensors


def spectral_flops(m: int, n: int) -> float:
    """The spectral norm of an m×n matrix (``fwdpass.spectral_norm``): the smaller Gram product, then its
    symmetric eigen-solve (tridiagonalisation)."""
    big, small = max(m, n), min(m, n)
    return 2 * big * small**2 + 4 * small**3 / 3


def hessian_method(full: bool, n: int, hp: Any, route: str) -> str:
    """A cell's eigen-solve: dense up to ``dense_max_n``, else its full spectra's ``route``, or its extremes from
    the band (up to ``band_max_n``) or by Lanczos."""
    if n <= hp.dense_max_n or (not full and n <= 3):
        return "dense"
    if full:
        return route
    return "banded" if n <= hp.band_max_n else "structured"


def cell_flops(act: str, N: int, H: int, method: str, full: bool, hp: Any) -> float:
    """One Hessian cell: blocks and eigen-solve; linear nets also the theory's D and O parts."""
    out = blocks_flops(N, H) + eig_flops(method, N, H)
    if act == "linear":
        out += blocks_flops(N, H) + H * dense_flops(N)
        if H > 1:
            o_method = method if full else hessian_method(False, N * H, hp, "")
            out += off_diagonal_flops(o_method, N, H)
    return out


def _hessian(cfg: MupcAnalysisParams, device: str) -> Cost:
    hp = cfg.hessian
    configs = hessian_configs(hp)
    work: dict[tuple[str, int, int], float] = {}
    tasks: dict[tuple[str, int, int], int] = {}
    routes = spectrum_routes(hp, device)
    for (i, c), N, H in itertools.product(enumerate(configs), hp.widths, hp.depths):
        full = is_slice(N, H, hp)
        method = hessian_method(full, N * H, hp, routes.get((i, N, H), hp.backend_on(device)))
        work[(method, N, H)] = work.get((method, N, H), 0.0) + cell_flops(c["act"], N, H, method, full, hp)
        tasks[(method, N, H)] = tasks.get((method, N, H), 0) + 1
    items = tuple(Work(f"{m} N={N} H={H} (n={N * H})", "hessian_cell",
                       {"method": m, "N": N, "H": H, "threads": cfg.threads}, f, tasks[(m, N, H)],
                       host=m != "dense_torch")  # numpy and LAPACK on the host; dense_torch on the device
                  for (m, N, H), f in work.items())
    cells = len(configs) * len(hp.widths) * len(hp.depths)
    return Cost(runs=cells, groups=len(configs), work=items, parallel=True,
                note=f"{len(configs)} configs × {len(hp.widths) * len(hp.depths)} cells (runs: cells), float64")


def on_subnormals(variant: str, L: int, device: str) -> bool:
    """Whether a forward-pass cell computes on float32 subnormals as far as the plan counts: on a CPU, a net
    without skips at least :data:`SUBNORMAL_FROM_DEPTH` deep (its slowdown then measured by the probe
    ``fwd_subnormals``; on a GPU subnormals cost nothing extra)."""
    return device.startswith("cpu") and not FWD_VARIANTS[variant][2] and L >= SUBNORMAL_FROM_DEPTH


def _fwd(cfg: MupcAnalysisParams, device: str) -> Cost:
    fp = cfg.fwd_pass
    R, B, n_cells = len(fp.optims), fp.batch_size, len(fp.acts) * len(fp.variants)
    draws: dict[tuple[int, int], dict[str, int]] = {}  # per shape and init: the draws its cells share (one a gain)
    orthogonal: dict[int, set[float]] = {}  # per width: the orthogonal gains, whose draws one stream of QRs makes
    for (init, gain, N, L), _ in fwd_draws(fp):
        if init == "orthogonal":
            orthogonal.setdefault(N, set()).add(gain)
            continue
        per_init = draws.setdefault((N, L), {})
        per_init[init] = per_init.get(init, 0) + 1
    work = []
    for N, L in itertools.product(fp.widths, fp.depths):
        f = ffwd_flops(N, L - 1, B)
        cell = R * (fp.checks * f + (fp.checks - 1) * 2 * f)
        shape = {"N": N, "L": L, "optims": list(fp.optims), "threads": cfg.threads}
        slowed = [(v, a) for v in fp.variants if on_subnormals(v, L, device) for a in fp.acts]
        if n_cells > len(slowed):
            work.append(Work(f"BP N={N} L={L}, {R} optimisers stacked", "fwd_step", shape,
                             (n_cells - len(slowed)) * cell))
        work += [Work(f"BP N={N} L={L} {v} {a}, on subnormals", "fwd_step", shape, cell,
                      slowdown=("fwd_subnormals", {"variant": v, "act": a, "L": L, "optims": list(fp.optims),
                                                   "threads": cfg.threads}))
                 for v, a in slowed]
        for init, count in draws.get((N, L), {}).items():
            work.append(Work(f"{init} init N={N} L={L}, {count} draw{'s' * (count > 1)}", "fwd_init",
                             {"init": init, "N": N, "L": L, "threads": cfg.threads}, count * init_flops(init, N, L)))
    L = max(fp.depths)
    for N, gains in orthogonal.items():
        depths = len(fp.depths)
        label = (f"orthogonal init N={N}, {L - 2} hidden layers for {depths} depth{'s' * (depths > 1)} and "
                 f"{len(gains)} gain{'s' * (len(gains) > 1)}")
        work.append(Work(label, "fwd_init", {"init": "orthogonal", "N": N, "L": L, "threads": cfg.threads},
                         init_flops("orthogonal", N, L)))
    for N in fp.widths:
        per_check = spectral_flops(N, D) + (RECORDED - 2) * spectral_flops(N, N) + spectral_flops(D_Y, N)
        work.append(Work(f"spectral norms N={N}", "spectral_norms", {"N": N, "threads": cfg.threads},
                         n_cells * len(fp.depths) * R * fp.checks * per_check))
    cells = n_cells * len(fp.widths) * len(fp.depths)
    N, L = max(fp.widths), max(fp.depths)
    return Cost(runs=cells * R, groups=cells, work=tuple(work), note=f"{cells} cells × {R} optimisers, float32",
                peak_bytes=fwd_peak_bytes(N, L, list(fp.optims), B, device, max(1, len(orthogonal.get(N, ())))),
                peak_what=f"a cell of N={N}, L={L}")


def newton_steps(act: str, N: int) -> float:
    """:data:`NEWTON_STEPS` of ``act`` at the measured width nearest ``N`` (on a log scale; a tie: the narrower)."""
    table = NEWTON_STEPS[act]
    return table[min(table, key=lambda n: (abs(math.log2(n / N)), n))]


def newton_step_flops(act: str, N: int, H: int, B: int, cg_iters: int) -> float:
    """One Newton step (analysis/newton.py) in units of a sweep's products, 2B((H−1)N² + d_y N): the state
    (errors and pulls, 2), the Woodbury columns (d_y sweeps) and their d_y × d_y system, the solves (2 sweeps
    each: one for ReLU, cg_iters + 1 for tanh, whose CG adds cg_iters Hessian products of 2 sweeps), and the
    line search's tries (1 each)."""
    sweep = 2 * B * ((H - 1) * N * N + D_Y * N)
    solves, products = (cg_iters + 1, cg_iters) if act == "tanh" else (1, 0)
    woodbury = 4 * B * D_Y * D_Y * H * N
    return sweep * (2 + D_Y + 2 * solves + 2 * products + LINE_SEARCH_TRIES[act]) + woodbury


def theory_flops(act: str, N: int, H: int, B: int, eq_steps: float, solver: str = "gd", cg_iters: int = 3) -> float:
    """One iteration of a theory network (see the module docstring)."""
    rest = 5 * ffwd_flops(N, H, B)
    if act == "linear":
        return rest + 2 * H * N**3 + 10 * H * N**3 / 3 + 6 * H * N * N * B
    if solver == "newton":
        return rest + eq_steps * newton_step_flops(act, N, H, B, cg_iters)
    return rest + eq_steps * 3 * 2 * B * ((H - 1) * N * N + D_Y * N)


def _theory(cfg: MupcAnalysisParams, nets: list[tuple[str, int, int, int]], iters: int, B: int, device: str,
            solver: str = "gd") -> Cost:
    """``nets``: (act, N, H, nets of that shape) trained ``iters`` iterations at batch ``B`` on ``device`` (the
    narrow ones on the CPU, :func:`~pipeline.studies.mupc.analysis.config.theory_device`); tanh/relu
    equilibria by ``solver``."""
    tw = cfg.theory_width

    def steps(act: str, N: int) -> float:
        if act == "linear":
            return 0
        return min(newton_steps(act, N), tw.newton_max_steps) if solver == "newton" else min(EQ_STEPS, tw.eq_max_steps)

    work = tuple(Work(f"{act} N={N} H={H}, {k} nets", "theory_step",
                      {"act": act, "N": N, "H": H, "batch": B, "eq_steps": steps(act, N), "solver": solver,
                       "cg_iters": tw.cg_iters, "threads": theory_threads(N, cfg.threads),
                       **({"device": "cpu"} if theory_device(N, device) == "cpu" != device else {})},
                      k * iters * theory_flops(act, N, H, B, steps(act, N), solver, tw.cg_iters), k)
                 for act, N, H, k in nets)
    n = sum(k for *_, k in nets)
    bound = ""
    if any(act != "linear" for act, *_ in nets):
        widest = max(N for act, N, *_ in nets if act != "linear")
        bound = (f"; tanh/relu by Newton at the full-batch steps per equilibrium measured over whole runs (N={widest}: "
                 f"{newton_steps('tanh', widest):g}/{newton_steps('relu', widest):g})" if solver == "newton" else
                 f"; tanh/relu at {EQ_STEPS:,} GD steps per equilibrium (typical; at most eq_max_steps = "
                 f"{tw.eq_max_steps:,})")
    return Cost(runs=n, groups=n, work=work, parallel=True, note=f"{n} nets × {iters} iterations, float64{bound}")


def hessian_cost(cfg: MupcAnalysisParams, unit: str, device: str,
                 previous: Callable[[str], Any] | None = None) -> Cost:
    """hessian_init: every cell (resumption skips finished ones, not counted here)."""
    return _hessian(cfg, device)


def fwd_cost(cfg: MupcAnalysisParams, unit: str, device: str, previous: Callable[[str], Any] | None = None) -> Cost:
    """On a CPU, cells without skips at depth (:func:`on_subnormals`) are counted at the slowdown the probe
    ``fwd_subnormals`` measures: their activities and gradients fall below float32's normal range, and some CPUs
    compute on such subnormal numbers many times slower (an Intel Xeon: a cell of N = 512, L = 256,
    ``sp_no_skips``, tanh, 20.36 s, 5.23 s with them flushed to zero, which would change the activity norms it
    records; benchmarks/README.md)."""
    cost = _fwd(cfg, device)
    slowed = sum(w.slowdown is not None for w in cost.work)
    if slowed:
        cost = replace(cost, note=f"{cost.note}; {slowed} cells without skips at L >= {SUBNORMAL_FROM_DEPTH} "
                                  "counted at the slowdown of float32 subnormals measured on this CPU")
    return cost


def theory_grid_cost(cfg: MupcAnalysisParams, unit: str, device: str,
                     previous: Callable[[str], Any] | None = None) -> Cost:
    tg = cfg.theory_grid
    nets = [("linear", N, H, len(tg.param_lrs)) for N, H in itertools.product(tg.widths, tg.depths)]
    return _theory(cfg, nets, tg.iters, tg.batch_size, device)


def theory_width_cost(cfg: MupcAnalysisParams, unit: str, device: str,
                      previous: Callable[[str], Any] | None = None) -> Cost:
    tw = cfg.theory_width
    nets = [(a, N, tw.depth, len(tw.params)) for a, N in itertools.product(tw.acts, tw.widths)]
    return _theory(cfg, nets, tw.iters, tw.batch_size, device, tw.eq_solver)
