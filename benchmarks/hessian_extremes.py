"""λ_min, λ_max and κ of the activity Hessian at init: structured extremes (block mat-vec Lanczos +
banded-Cholesky shift-invert) vs the dense Hessian + ``eigvalsh``, side by side in one run.

    taskset -c 1 .venv/bin/python benchmarks/hessian_extremes.py            # fit on N = H ∈ {48, 64, 80}, target 128
    taskset -c 1 .venv/bin/python benchmarks/hessian_extremes.py --fit 16 24 32 --target 64 --dense-target

For each fit size both routes run and the relative errors of the structured extremes against dense
``eigvalsh`` are printed. The dense time (assembly from the blocks + ``torch.linalg.eigvalsh``) is
fitted as t = c·n^p on the fit sizes (least squares in log–log, the fit is printed) and extrapolated to
the target N = H = 128 (n = 16,384), where only the structured route runs (dense there is a 2 GiB
matrix and ≈ 10³ times the n = 1,024 time; ``--dense-target`` runs it anyway). At the target the
extremes at the chosen tolerance are checked against a run at tol = 1e-12.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.studies.mupc.engine import hessian as hz
from pipeline.studies.mupc.engine.model import NetSpec, feedforward, init_weights


def blocks_at_init(n_side: int, act: str, param: str) -> hz.Blocks:
    N = H = n_side
    init = "standard_gauss" if param == "mupc" else "standard"
    spec = NetSpec(D=N, N=N, H=H, d_y=N, act=act, skips=True, param=param, init=init)
    w = init_weights(spec, [0], dtype=torch.float64)
    x = hz.hessian_input(N, 0)
    z = feedforward(spec, w, x.view(1, -1))[0][0, :, 0]
    return hz.hessian_blocks(spec, w, x, x, z)


def structured(b: hz.Blocks, tol: float) -> tuple[hz.Extremes, float]:
    t = time.perf_counter()
    ex = hz.extremes(b, tol=tol)
    return ex, time.perf_counter() - t


def dense(b: hz.Blocks) -> tuple[np.ndarray, float]:
    t = time.perf_counter()
    ev = torch.linalg.eigvalsh(hz.to_dense(b)).numpy()
    return ev, time.perf_counter() - t


def rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fit", type=int, nargs=3, default=[48, 64, 80], help="three N = H sizes run both ways")
    ap.add_argument("--target", type=int, default=128)
    ap.add_argument("--dense-target", action="store_true", help="also run dense at the target")
    ap.add_argument("--act", default="linear")
    ap.add_argument("--param", default="mupc")
    ap.add_argument("--tol", type=float, default=hz.LANCZOS_TOL)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(f"activity Hessian at init, {a.act} {a.param} with skips, float64, {a.threads} thread(s), "
          f"Lanczos tol {a.tol:g}")
    print(f"{'N=H':>5} {'n':>6} {'t_struct s':>10} {'t_dense s':>10} {'ratio':>8} {'lmin':>11} {'lmax':>11} "
          f"{'kappa':>10} {'rel err lmin':>12} {'rel err lmax':>12} {'rel err kappa':>13}")
    ns, td = [], []
    for n_side in a.fit:
        b = blocks_at_init(n_side, a.act, a.param)
        ex, ts = structured(b, a.tol)
        ev, t_d = dense(b)
        ns.append(b.n)
        td.append(t_d)
        kd = abs(ev[-1]) / abs(ev[0])
        print(f"{n_side:>5} {b.n:>6} {ts:>10.2f} {t_d:>10.2f} {t_d / ts:>7.1f}x {ex.lambda_min:>11.5g} "
              f"{ex.lambda_max:>11.5g} {ex.kappa:>10.5g} {rel(ex.lambda_min, ev[0]):>12.1e} "
              f"{rel(ex.lambda_max, ev[-1]):>12.1e} {rel(ex.kappa, kd):>13.1e}", flush=True)
    p, logc = np.polyfit(np.log(ns), np.log(td), 1)
    fitted = [float(np.exp(logc) * n**p) for n in ns]
    print(f"dense fit: t = {np.exp(logc):.3e} · n^{p:.2f} s  (fitted {', '.join(f'{f:.2f}' for f in fitted)} s "
          f"vs measured {', '.join(f'{t:.2f}' for t in td)} s)")
    b = blocks_at_init(a.target, a.act, a.param)
    ex, ts = structured(b, a.tol)
    ref, _ = structured(b, 1e-12)
    t_fit = float(np.exp(logc) * b.n**p)
    t_cubic = td[-1] * (b.n / ns[-1]) ** 3
    line = (f"{a.target:>5} {b.n:>6} {ts:>10.2f} ")
    if a.dense_target:
        ev, t_d = dense(b)
        kd = abs(ev[-1]) / abs(ev[0])
        print(line + f"{t_d:>10.2f} {t_d / ts:>7.1f}x {ex.lambda_min:>11.5g} {ex.lambda_max:>11.5g} {ex.kappa:>10.5g} "
              f"{rel(ex.lambda_min, ev[0]):>12.1e} {rel(ex.lambda_max, ev[-1]):>12.1e} {rel(ex.kappa, kd):>13.1e}")
    else:
        print(line + f"{t_fit:>9.0f}* {t_fit / ts:>7.0f}x {ex.lambda_min:>11.5g} {ex.lambda_max:>11.5g} "
              f"{ex.kappa:>10.5g}   (* dense fitted, not run; n³ from the largest fit size: {t_cubic:.0f} s, "
              f"{t_cubic / ts:.0f}x)")
    print(f"target, tol {a.tol:g} vs tol 1e-12: rel diff lmin {rel(ex.lambda_min, ref.lambda_min):.1e}, "
          f"lmax {rel(ex.lambda_max, ref.lambda_max):.1e} ({ex.method_min}, {ex.method_max})")


if __name__ == "__main__":
    main()
