"""The Hessian monitor per run per evaluation, three routes side by side in one run, pinned to one core (the
script re-executes itself under ``taskset -c 1``):

* ``ref``: dense ``eigvalsh`` up to n = ``--dense-max-n`` (4,096: H = 8 at N = 512), else SciPy Lanczos +
  banded-Cholesky shift-invert run by run (1e-10-accurate; the route before the batched monitor);
* ``before``: the batched Krylov monitor as of commit ``BEFORE`` (fixed 200 Lanczos steps with full
  reorthogonalisation, 50 shift-invert / 60 LOBPCG steps), loaded from git;
* ``new``: the monitor now (convergence checks, no reorthogonalisation), with its step counts.

    .venv/bin/python benchmarks/hessian_monitor.py                      # N = 512, H ∈ {8, 16, 32}, 3 runs
    .venv/bin/python benchmarks/hessian_monitor.py --acts linear --H 8

μPC with skips (S9's nets: standard_gauss, MNIST shapes D = 784, d_y = 10), float64, 3 stacked runs
(seeds 0–2), activities after T = H inference steps (GD, lr 0.5) from the feed-forward point, so the
curvature term of tanh is on. Times are per run (the group's time / 3), both Krylov routes called with
``dense_max_n`` = ``DENSE_CROSSOVER_N`` (the trainer's ``hessian_dense_max_n``). The error columns are the
largest relative error of λmin and λmax over the runs against ``ref`` (dense where n ≤ --dense-max-n).

Measured (2026-11-25, AMD EPYC, 2 cores shared with other work: load average 4–9, so absolute times are
inflated up to 2× and the ratios are from one run; ``taskset -c 1``):

    act     H  ref s  before s  new s  new/before  err before  err new  ref    steps new (λmax, λmin)
    linear  8  19.80      1.56   0.84        0.54     3.7e-13  1.4e-08  dense  95, 40
    tanh    8  10.10      2.24   1.14        0.51     1.1e-10  1.9e-08  dense  85, 50
    relu    8  10.49      1.93   1.14        0.59     1.9e-13  3.0e-09  dense  90, 40
    linear 16   6.16      4.26   3.10        0.73     8.1e-12  5.2e-08  scipy  135, 45
    tanh   16   5.97      4.64   2.49        0.54     1.6e-11  4.1e-08  scipy  125, 45
    relu   16   5.64      3.92   2.49        0.64     9.0e-12  7.0e-08  scipy  110, 50
    linear 32  17.09     13.26   7.25        0.55     7.2e-12  2.1e-07  scipy  195, 50 (before: 1 run redone by SciPy)
    tanh   32  15.39      8.51   6.26        0.74     6.4e-11  3.4e-07  scipy  150, 45
    relu   32  13.77      7.57   5.93        0.78     1.0e-10  3.3e-08  scipy  205, 40

The callers' route before: dense at H = 8 (``hessian_dense_max_n`` was 4,096: the ``ref`` column), the
``before`` Krylov route above. Where the time goes now (instrumented run, same machine): products with H_z
60–75 %, applications of (AᵀA)⁻¹ 20–30 %, the rest (Lanczos vector updates, the 3×3 LOBPCG problems) about
10 %, the convergence checks' small ``eigvalsh`` under 1 %. A product reads the hidden weights twice, and the
batched gemv streams them at 5.6 GB/s against 6.1 GB/s for a plain ``sum`` over the same bytes on the loaded
core (12 GB/s unloaded): every step is at the memory floor, 2·N²·(H−1)·8 bytes per run (2 MB per layer and
read), so the time is steps × layers. Steps for 1e-6 against converged values: λmax 86 (H = 8) to 138 (H = 32,
ReLU), shift-invert λmin 25–40, LOBPCG 30–40; the checks stop 5–70 steps later (the estimate needs the move
to shrink, and both starts must agree). At H = 32 λmax's 138 steps alone read ≈ 18 GB per run, 1.5 s at
12 GB/s; 0.3 s buys ≈ 28 steps there (≈ 120 at H = 8). What was tried:

* no reorthogonalisation: the same top Ritz values (within 1e-15 at H = 8, the same step counts at H = 32),
  25–35 % less time (the projections against the whole basis read it at every step);
* convergence checks instead of 200/50/60 fixed steps: 10–45 % fewer steps; with one start the check
  accepted a Ritz value 4.3e-4 below λmax (ReLU, H = 16: the second eigenvalue of the clustered top, on
  which the value sat from step 50 to 100), hence two starts that must agree (the second column's cost: below);
* block Lanczos (one pass over the weights for k vectors; ReLU, H = 16, 3 runs): at equal time the error is
  far larger: k = 4 × 50 steps 1.2e-5, k = 8 × 30 1.6e-4, k = 16 × 20 1.1e-3, k = 32 × 12 3.9e-3, against
  one vector × 99 steps 1e-6: the clustered top needs a polynomial of degree ≈ 100, which a block does not
  lower, and a block step costs 2–5× a single one (mat-mats with k ≤ 32 rows are not much faster per row);
* float32 products: MKL's sgemv streams 7 GB/s against dgemv's 12 GB/s on this CPU, so a step is only 0–27 %
  faster, and float32 Lanczos stalls 2e-7–6e-7 from λmax (round-off), too close to 1e-6 without float64
  refinement steps, which read float64 weights again;
* warm starts from the previous evaluation's eigenvectors (H = 8, one seed): linear nets with weights moved
  by 1e-2 reach 1e-6 in ≈ 10 steps for λmax and 5–10 for λmin (cold: 60 and 25), but the monitor's sample
  changes at every evaluation, and for ReLU/tanh a new sample leaves 10–15 steps of gain (ReLU λmin none).
  Not built: it needs per-run state in the trainer and lower minimum step counts, which the plateaus above
  make unsafe; for linear nets it is the one idea that could approach the goal;
* exact λmin by a banded Cholesky shift-invert: the exact (AᵀA)⁻¹ by block substitution is already what
  linear/ReLU use (one pass per application). Not built for tanh: factorising H_z needs its N×N blocks
  (2N³ per layer to form, ≈ 4N³ more for a block LDLᵀ), ≈ 26 GFLOP per run at H = 32, 3.5 s at the loaded
  core's measured 7.4 GFLOP/s (batched 512² dgemm), more than the LOBPCG it would replace;
* reusing each W_ℓ from cache across several Krylov degrees (H_z is block-tridiagonal, so s products can run as
  a wavefront over the layers; 2026-11-25, one pinned core, N = 512, ms per degree per run, min of 5): in torch
  1.0–1.5× (H = 32, 3 runs: 13.6 now, 12.2 with both reads of W_ℓ in one pass per layer, 12.8–14.1 for s = 2–8
  degrees per pass), most of it from the single pass, not the reuse: a 2-row product with a 512² matrix takes
  137 µs from cache against 255 µs from memory, and only ≈ 8 MiB of the L3 is usable before the time rises. A
  hand-written C wavefront (one run) reached 6.3 ms per degree at H = 32 (2.2× the module), still 0.9–1.3 s for
  λmax's 140–200 steps. Not built: ≤ 1.3× in torch, and compiled code for the rest. Chebyshev moments from such
  a wavefront (the modified Chebyshev algorithm, then the Jacobi matrix's top eigenvalue) break down by degree
  80–120 unless the interval's top is within ≈ 0.1 % of λmax, which is what is being computed;
* the second Lanczos start is not nearly free, as first thought: a product ``matvec`` with k = 2 columns takes
  1.48–1.91× one with k = 1 (ReLU, 1 and 3 stacked runs, H = 8/16/32: 3.4 vs 1.8 ms per run at H = 8, 14.8 vs
  9.1 ms at H = 32); MKL's products with 2 rows stream the weights at 8 GB/s against 12 GB/s for one row, and
  the other layouts (W @ vᵀ, a transposed copy of W) are no faster. It stays: it is what catches the plateau;
* linear H = 32, which needed the SciPy fallback before (one run): no run falls back now;
* SP nets N = 128 (S1–S3, dense before): Krylov 0.16–0.8 s per run against dense 2.1–17.6 s at H = 16/32,
  error ≤ 3.8e-7; one case, tanh with skips at H = 32 (indefinite, λmin ≈ −0.013), needs ≈ 400 LOBPCG steps
  and falls back to dense (as before, plus the Krylov try).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.studies.mupc.engine.energy import InferenceConfig, infer
from pipeline.studies.mupc.engine.hessian import extremes as old_structured
from pipeline.studies.mupc.engine.model import NetSpec, Weights, feedforward, init_weights
from pipeline.studies.mupc.training import hessian_monitor as hm

BEFORE = "bfdf408"  # the last commit with the fixed-step monitor
ROOT = Path(__file__).resolve().parent.parent

def pin() -> None:
    """Re-execute under ``taskset -c 1`` once (one core, as the monitor's goal is stated)."""
    if os.environ.get("HESSIAN_MONITOR_PINNED") or not shutil.which("taskset"):
        return
    os.environ["HESSIAN_MONITOR_PINNED"] = "1"
    os.execvp("taskset", ["taskset", "-c", "1", sys.executable, *sys.argv])


def state(N: int, H: int, act: str, runs: int) -> tuple[NetSpec, Weights, torch.Tensor, torch.Tensor, torch.Tensor]:
    spec = NetSpec(D=784, N=N, H=H, d_y=10, act=act, skips=True, param="mupc", init="standard_gauss")
    w = init_weights(spec, list(range(runs)), dtype=torch.float64)
    g = torch.Generator().manual_seed(1)
    x = torch.rand(runs, 1, 784, generator=g, dtype=torch.float64)
    y = torch.zeros(runs, 1, 10, dtype=torch.float64)
    y[..., 3] = 1.0
    z0, _ = feedforward(spec, w, x)
    z = infer(spec, w, x, y, z0, 0.5, InferenceConfig(steps=H)).z
    return spec, w, x, y, z


def old_monitor(spec: NetSpec, w: Weights, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor,
                dense_max_n: int) -> tuple[torch.Tensor, torch.Tensor, str]:
    """The route the monitor took before: dense eigvalsh up to dense_max_n, else SciPy run by run."""
    x1, y1, z1 = x[:, 0], y[:, 0], z[:, :, 0]
    if dense_max_n >= spec.N * spec.H:
        lo, hi = hm.dense_extremes(spec, w, x1, y1, z1)
        return lo, hi, "dense_eigvalsh"
    lo, hi, methods = [], [], set()
    for b in hm.run_blocks(spec, w, x1, y1, z1):
        e = old_structured(b)
        lo.append(e.lambda_min)
        hi.append(e.lambda_max)
        methods.add(f"{e.method_max}+{e.method_min}")
    return torch.tensor(lo, dtype=torch.float64), torch.tensor(hi, dtype=torch.float64), "/".join(sorted(methods))


def before_module() -> ModuleType:
    """``hessian_monitor`` as of ``BEFORE`` (from git), as a module of its own."""
    path = "pipeline/studies/mupc/training/hessian_monitor.py"
    src = subprocess.run(["git", "show", f"{BEFORE}:{path}"], cwd=ROOT, check=True, capture_output=True,
                         text=True).stdout
    spec = importlib.util.spec_from_loader("hessian_monitor_before", loader=None)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[mod.__name__] = mod  # dataclasses resolve their module by name
    exec(compile(src, f"{BEFORE}:{path}", "exec"), mod.__dict__)
    return mod


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(((a - b).abs() / b.abs()).max())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--N", type=int, default=512)
    ap.add_argument("--H", type=int, nargs="+", default=[8, 16, 32])
    ap.add_argument("--acts", nargs="+", default=["linear", "tanh", "relu"])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dense-max-n", type=int, default=4096, help="the old route's dense limit")
    a = ap.parse_args()
    pin()
    torch.set_num_threads(1)
    old = before_module()
    print(f"Hessian monitor, μPC N = {a.N} with skips, {a.runs} stacked runs, float64, 1 thread"
          f"{' (taskset -c 1)' if os.environ.get('HESSIAN_MONITOR_PINNED') else ''}; seconds per run per evaluation;"
          f" ref = dense eigvalsh to n = {a.dense_max_n}, else SciPy; before = {BEFORE}")
    print(f"{'act':>6} {'H':>3} {'n':>6} {'ref s':>7} {'before s':>8} {'new s':>7} {'new/bef':>7} {'λmin':>10} "
          f"{'λmax':>7} {'err before':>10} {'err new':>8} {'ref':>6}  new steps (λmax, λmin)")
    for H in a.H:
        for act in a.acts:
            spec, w, x, y, z = state(a.N, H, act, a.runs)
            t = time.perf_counter()
            rlo, rhi, _ = old_monitor(spec, w, x, y, z, a.dense_max_n)
            t_ref = (time.perf_counter() - t) / a.runs
            t = time.perf_counter()
            blo, bhi, _, bmethod = old.monitor(spec, w, x, y, z, 0.0, dense_max_n=hm.DENSE_CROSSOVER_N)
            t_before = (time.perf_counter() - t) / a.runs
            stats: dict[str, int] = {}
            t = time.perf_counter()
            lo, hi, _, method = hm.monitor(spec, w, x, y, z, 0.0, dense_max_n=hm.DENSE_CROSSOVER_N, stats=stats)
            t_new = (time.perf_counter() - t) / a.runs
            err_b = max(rel(blo, rlo), rel(bhi, rhi))
            err_n = max(rel(lo, rlo), rel(hi, rhi))
            ref = "dense" if a.dense_max_n >= a.N * H else "scipy"
            redo = "" if "/" not in method else " redone: " + method.split("/", 1)[1]
            redo += "" if "/" not in bmethod else f" (before redone: {bmethod.split('/', 1)[1]})"
            print(f"{act:>6} {H:>3} {a.N * H:>6} {t_ref:>7.2f} {t_before:>8.2f} {t_new:>7.2f} "
                  f"{t_new / t_before:>7.2f} {float(lo.min()):>10.4g} {float(hi.max()):>7.4g} {err_b:>10.1e} "
                  f"{err_n:>8.1e} {ref:>6}  {', '.join(str(v) for v in stats.values())}{redo}", flush=True)


if __name__ == "__main__":
    main()
