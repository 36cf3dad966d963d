"""The Hessian monitor per run per evaluation: the previous route (dense ``eigvalsh`` up to n = 4,096, else
SciPy Lanczos + banded-Cholesky shift-invert run by run) against the batched Krylov extremes in torch,
side by side in one run, pinned to one core (the script re-executes itself under ``taskset -c 1``):

    .venv/bin/python benchmarks/hessian_monitor.py                      # N = 512, H ∈ {8, 16, 32}, 3 runs
    .venv/bin/python benchmarks/hessian_monitor.py --acts linear --H 8

μPC with skips (S9's nets: standard_gauss, MNIST shapes D = 784, d_y = 10), float64, 3 stacked runs
(seeds 0–2), activities after T = H inference steps (GD, lr 0.5) from the feed-forward point, so the
curvature term of tanh is on. Times are per run (the group's time / 3). The relative error columns
compare the new extremes with the old route's; where that route is dense ``eigvalsh`` (n ≤ 4,096:
H = 8) the error is also printed as the error against dense.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.studies.mupc.energy import InferenceConfig, infer
from pipeline.studies.mupc.hessian import extremes as old_structured
from pipeline.studies.mupc.model import NetSpec, Weights, feedforward, init_weights
from pipeline.studies.mupc.training import hessian_monitor as hm


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
    print(f"Hessian monitor, μPC N = {a.N} with skips, {a.runs} stacked runs, float64, 1 thread"
          f"{' (taskset -c 1)' if os.environ.get('HESSIAN_MONITOR_PINNED') else ''}; seconds per run per evaluation")
    print(f"{'act':>6} {'H':>3} {'n':>6} {'old s':>7} {'new s':>7} {'speed-up':>8} {'λmin':>11} {'λmax':>8} "
          f"{'κ':>9} {'rel err vs old':>14} {'vs dense':>9}  new method")
    for H in a.H:
        for act in a.acts:
            spec, w, x, y, z = state(a.N, H, act, a.runs)
            t = time.perf_counter()
            olo, ohi, _ = old_monitor(spec, w, x, y, z, a.dense_max_n)
            t_old = (time.perf_counter() - t) / a.runs
            t = time.perf_counter()
            lo, hi, kap, method = hm.monitor(spec, w, x, y, z, 0.0, dense_max_n=hm.DENSE_CROSSOVER_N)
            t_new = (time.perf_counter() - t) / a.runs
            err_old = max(rel(lo, olo), rel(hi, ohi))
            dense = f"{err_old:.1e}" if a.dense_max_n >= a.N * H else "—"  # the old route was dense there
            print(f"{act:>6} {H:>3} {a.N * H:>6} {t_old:>7.2f} {t_new:>7.2f} {t_old / t_new:>7.1f}x "
                  f"{float(lo.min()):>11.4g} {float(hi.max()):>8.4g} {float(kap.max()):>9.4g} {err_old:>14.1e} "
                  f"{dense:>9}  {method}", flush=True)


if __name__ == "__main__":
    main()
