"""The forward-pass study's spectral norms: an SVD (``torch.linalg.matrix_norm(ord=2)``, the first way), √λ_max of
the smaller Gram matrix in float64 by torch's product and ``eigvalsh`` (the second), and on the CPU by BLAS
``dsyrk`` and LAPACK's top eigenvalue alone (``fwdpass.spectral_norm``, now), side by side in one run.

    taskset -c 1 .venv/bin/python benchmarks/spectral_norm.py            # one core, the paper's widths
    .venv/bin/python benchmarks/spectral_norm.py --threads 2             # both cores, as fwd_pass runs
    python3 benchmarks/spectral_norm.py --device cuda                    # on a GPU

Why: fwd_pass records the spectral norm of five weights of each of its 720 nets at every check; with the SVD
these were a third of the paper unit's plan on the CPU. Per width N: seconds per call on a stack of two
float32 N×N weights (the two optimisers of a cell; each way timed for ``--seconds`` after one warm-up call),
the ratio of each earlier way to now, and the largest relative difference of now's norms from the SVD's and from
torch's Gram route.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from pipeline.studies.mupc.analysis import fwdpass


def timed(fn, seconds: float, device: str) -> tuple[float, torch.Tensor]:
    out = fn()
    n, t0 = 0, time.perf_counter()
    while n == 0 or time.perf_counter() - t0 < seconds:
        fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        n += 1
    return (time.perf_counter() - t0) / n, out


def torch_gram(w: torch.Tensor) -> torch.Tensor:
    """The second way: torch's Gram product and full eigen-solve (fwdpass.spectral_norm before, for finite w)."""
    w = w.double()
    gram = w @ w.mT if w.shape[-2] < w.shape[-1] else w.mT @ w
    return torch.linalg.eigvalsh(gram)[..., -1].clamp_min(0.0).sqrt()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--widths", nargs="+", type=int, default=[128, 256, 512, 1024])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seconds", type=float, default=3.0, help="timed per way and width (after a warm-up call)")
    ap.add_argument("--threads", type=int, default=1, help="torch's threads on the CPU (the unit's: 2)")
    a = ap.parse_args(argv)
    if a.device == "cpu":
        torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__}, {a.device}, {torch.get_num_threads()} torch threads; seconds per call on 2 "
          f"stacked float32 N×N weights")
    print(f"{'N':>5} | {'SVD':>10} {'Gram eig':>10} {'now':>10} | {'ratios':>11} | max rel. diff vs SVD, Gram eig")
    for N in a.widths:
        w = torch.randn(2, N, N, generator=torch.Generator().manual_seed(N)).to(a.device)
        svd, s0 = timed(lambda w=w: torch.linalg.matrix_norm(w, ord=2), a.seconds, a.device)
        gram, s1 = timed(lambda w=w: torch_gram(w), a.seconds, a.device)
        now, s2 = timed(lambda w=w: fwdpass.spectral_norm(w), a.seconds, a.device)

        def rel(x: torch.Tensor, ref: torch.Tensor) -> float:
            return float(((x - ref.double()) / ref.double()).abs().max())

        print(f"{N:>5} | {svd:>9.4f}s {gram:>9.4f}s {now:>9.4f}s | {svd / now:>4.1f}x {gram / now:>4.1f}x | "
              f"{rel(s2, s0):.1e}, {rel(s2, s1):.1e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
