"""λ_min, λ_max and κ of the activity Hessian at init: structured (block mat-vec Lanczos + banded-Cholesky
shift-invert) vs dense ``eigvalsh`` of the same matrix, side by side in one run.

    python benchmarks/hessian_extremes.py                 # N = H = 128 (n = 16384) and smaller sizes
    python benchmarks/hessian_extremes.py --sizes 32 64   # N = H ∈ {32, 64}

The dense reference is the autodiff Hessian (``torch.func.hessian`` of the engine's energy) for
n ≤ --autodiff-max-n; above that the dense matrix is assembled from the same blocks (the autodiff
Hessian of n = 16384 needs 16384 HVPs and a 2 GiB matrix; block = autodiff is tested to 1e-10 in
tests/mupc/test_analysis.py). Dense eigvalsh at n = 16384 takes ~15 min on 2 cores: --dense-max-n.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.studies.mupc import hessian as hz
from pipeline.studies.mupc.energy import energy
from pipeline.studies.mupc.model import NetSpec, feedforward, init_weights


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[32, 64, 128])
    ap.add_argument("--act", default="linear")
    ap.add_argument("--param", default="mupc")
    ap.add_argument("--autodiff-max-n", type=int, default=1024)
    ap.add_argument("--dense-max-n", type=int, default=16384)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    init = "standard_gauss" if args.param == "mupc" else "standard"
    print(f"{'N=H':>5} {'n':>6} {'dense via':>9} {'t_struct s':>10} {'t_dense s':>10} {'ratio':>7} "
          f"{'lmin':>11} {'lmax':>11} {'kappa':>10} {'rel err lmin':>12} {'rel err lmax':>12} {'rel err kappa':>13}")
    for n_side in args.sizes:
        N = H = n_side
        spec = NetSpec(D=N, N=N, H=H, d_y=N, act=args.act, skips=True, param=args.param, init=init)
        w = init_weights(spec, [0], dtype=torch.float64)
        x = hz.hessian_input(N, 0)
        z = feedforward(spec, w, x.view(1, -1))[0][0, :, 0]
        t0 = time.perf_counter()
        blocks = hz.hessian_blocks(spec, w, x, x, z)
        ex = hz.extremes(blocks, tol=1e-10)
        t_struct = time.perf_counter() - t0
        n = N * H
        if n > args.dense_max_n:
            print(f"{N:>5} {n:>6} {'skipped':>9} {t_struct:>10.2f}   lmin {ex.lambda_min:.6g} lmax {ex.lambda_max:.6g} "
                  f"kappa {ex.kappa:.6g} ({ex.method_min}, {ex.method_max})")
            continue
        t0 = time.perf_counter()
        if n <= args.autodiff_max_n:
            def f(v: torch.Tensor, spec=spec, w=w, x=x, H=H, N=N) -> torch.Tensor:
                return energy(spec, w, x.view(1, -1), x.view(1, -1), v.view(1, H, 1, N)).sum()

            mat, via = torch.func.hessian(f)(z.reshape(-1)), "autodiff"
        else:
            mat, via = hz.to_dense(blocks), "blocks"
        ev = torch.linalg.eigvalsh(mat).numpy()
        t_dense = time.perf_counter() - t0
        kd = abs(ev[-1]) / abs(ev[0])
        print(f"{N:>5} {n:>6} {via:>9} {t_struct:>10.2f} {t_dense:>10.2f} {t_dense / t_struct:>7.1f} "
              f"{ex.lambda_min:>11.5g} {ex.lambda_max:>11.5g} {ex.kappa:>10.5g} "
              f"{abs(ex.lambda_min - ev[0]) / abs(ev[0]):>12.1e} {abs(ex.lambda_max - ev[-1]) / abs(ev[-1]):>12.1e} "
              f"{abs(ex.kappa - kd) / kd:>13.1e}", flush=True)
        del mat
        np.asarray(ev)


if __name__ == "__main__":
    main()
