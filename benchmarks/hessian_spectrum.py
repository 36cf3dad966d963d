"""All eigenvalues of the activity Hessian H_z at paper shapes, by four routes side by side in one run.

    taskset -c 1 .venv/bin/python benchmarks/hessian_spectrum.py                   # one core, N = 128
    .venv/bin/python benchmarks/hessian_spectrum.py --threads 2 --shapes 128:64    # both cores

Why: hessian_init's full spectra (the N = 128 row and the H = 128 column of every configuration, 90 of them at
n = N·H = 16,384) were most of the paper unit's plan on the CPU. H_z is block-tridiagonal with N×N blocks, so
its band is 2N − 1 wide; an orthogonal block-diagonal similarity (``hessian.narrowed``) makes the off-diagonal
blocks triangular and the band N wide, with the same eigenvalues. Routes, per shape N:H (H_z of the paper's
ReLU net, SP, standard init, no skips, at its synthetic sample, seed 0):

* ``eig_banded 2N-1``: ``scipy.linalg.eig_banded`` (LAPACK ``dsbevd``) on the full band (the route before);
* ``eig_banded N``: the same on the narrowed band (narrowing included);
* ``2-stage N``: ``hessian.band_eigenvalues`` (LAPACK ``dsbevd_2stage``) on the narrowed band, the route now;
* ``dense``: torch's ``eigvalsh`` (MKL) of the assembled matrix, up to ``--dense-max-n``.

Printed: seconds of each route (one call each, after a warm-up at a small shape), each one's speed-up over the
first, and the largest difference of its eigenvalues from the first's, relative to the largest |λ|.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import scipy.linalg as sla
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from pipeline.studies.mupc import hessian as hz
from pipeline.studies.mupc.analysis.train import hessian_spec
from pipeline.studies.mupc.model import feedforward, init_weights

CONFIG = {"act": "relu", "skips": False, "init": "standard", "param": "sp", "seed": 0}


def blocks(N: int, H: int) -> hz.Blocks:
    spec = hessian_spec(CONFIG, N, H, False)
    w = init_weights(spec, [0], dtype=torch.float64)
    x = hz.hessian_input(N, 0)
    z = feedforward(spec, w, x.view(1, -1))[0][0, :, 0]
    return hz.hessian_blocks(spec, w, x, x, z)


ROUTES = {
    "eig_banded 2N-1": lambda b: sla.eig_banded(hz.to_banded(b), eigvals_only=True, check_finite=False),
    "eig_banded N": lambda b: sla.eig_banded(hz.to_banded(hz.narrowed(b), b.N), eigvals_only=True,
                                             check_finite=False),
    "2-stage N": lambda b: hz.band_eigenvalues(hz.to_banded(hz.narrowed(b), b.N)),
    "dense": lambda b: torch.linalg.eigvalsh(hz.to_dense(b)).numpy(),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", default=["128:32", "128:64", "128:128"], help="N:H settings")
    ap.add_argument("--threads", type=int, default=1, help="torch (MKL) and OpenBLAS threads")
    ap.add_argument("--dense-max-n", type=int, default=8192, help="the dense route only up to this n")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    for route in ROUTES.values():  # warm-up: libraries loaded, threads started
        route(blocks(8, 4))
    print(f"torch {torch.__version__}, {a.threads} thread(s); seconds for all eigenvalues of H_z "
          f"({CONFIG['act']}, {CONFIG['param']}, {CONFIG['init']}, no skips)")
    print(f"{'N':>5} {'H':>5} {'n':>7} | " + " | ".join(f"{r:>20}" for r in ROUTES) + " | max |Δλ| / max |λ|")
    for shape in a.shapes:
        N, H = (int(v) for v in shape.split(":"))
        b = blocks(N, H)
        cells, ref, diffs = [], None, []
        for name, route in ROUTES.items():
            if name == "dense" and a.dense_max_n < N * H:
                cells.append(f"{'-':>20}")
                continue
            t0 = time.perf_counter()
            ev = np.sort(route(b))
            sec = time.perf_counter() - t0
            if ref is None:
                ref, first = ev, sec
            else:
                diffs.append(float(np.abs(ev - ref).max() / np.abs(ref).max()))
            cells.append(f"{sec:>8.2f} s ({first / sec:>5.1f}x)")
        print(f"{N:>5} {H:>5} {N * H:>7} | " + " | ".join(cells) + f" | {max(diffs):.1e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
