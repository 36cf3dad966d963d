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
* ``dense``: torch's ``eigvalsh`` (MKL) of the assembled matrix, up to ``--dense-max-n``;
* ``dense cuda``: the same on CUDA (the GPU's route, ``spectrum_backend: auto``), where torch sees a GPU;
* ``bipartite N``: with ``--matrix O`` only: ``hessian.off_diagonal_spectrum``, ±σ(B) from the two-stage route
  on BᵀB, half as long (the route of O's spectra now).

``--matrix O`` takes the off-diagonal part O of the linear net's H_z instead (F3's and F4's O, whose diagonal
blocks are zero; hessian_init solves it beside H_z for each linear configuration), the same net with ``linear``.

Printed: seconds of each route in ``--routes`` (one call each, after a warm-up at a small shape), each one's
speed-up over the first, and the largest difference of its eigenvalues from the first's, relative to the largest
|λ|. With ``--workers W``, then ``W`` processes each solve the largest shape by the two-stage route at once, as
``TRAINSCAPE_EXECUTOR=processes`` runs hessian_init's cells: the wall time, and per spectrum.

    python3 benchmarks/hessian_spectrum.py --shapes 128:128 --routes "2-stage N" "dense cuda" --workers 16  # GPU box
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
from pipeline.studies.mupc.analysis.train import hessian_spec
from pipeline.studies.mupc.engine import hessian as hz
from pipeline.studies.mupc.engine.model import feedforward, init_weights

CONFIG = {"act": "relu", "skips": False, "init": "standard", "param": "sp", "seed": 0}
MATRIX = {"name": "H_z"}  # --matrix


def blocks(N: int, H: int) -> hz.Blocks:
    config = {**CONFIG, "act": "linear"} if MATRIX["name"] == "O" else CONFIG
    spec = hessian_spec(config, N, H, False)
    w = init_weights(spec, [0], dtype=torch.float64)
    if MATRIX["name"] == "O":
        return hz.split(hz.theory_blocks(spec, w))[1]
    x = hz.hessian_input(N, 0)
    z = feedforward(spec, w, x.view(1, -1))[0][0, :, 0]
    return hz.hessian_blocks(spec, w, x, x, z)


ROUTES = {
    "eig_banded 2N-1": lambda b: sla.eig_banded(hz.to_banded(b), eigvals_only=True, check_finite=False),
    "eig_banded N": lambda b: sla.eig_banded(hz.to_banded(hz.narrowed(b), b.N), eigvals_only=True,
                                             check_finite=False),
    "2-stage N": lambda b: hz.band_eigenvalues(hz.to_banded(hz.narrowed(b), b.N)),
    "dense": lambda b: torch.linalg.eigvalsh(hz.to_dense(b)).numpy(),
    "dense cuda": lambda b: torch.linalg.eigvalsh(hz.to_dense(hz.Blocks(b.diag.cuda(), b.upper.cuda()))).cpu().numpy(),
    "bipartite N": lambda b: hz.off_diagonal_spectrum(b, dense_max_n=0)[0],
}


def solve_one(shape: tuple[int, int]) -> float:
    """A worker's task: the two-stage route on one spectrum, on one torch thread; its seconds."""
    torch.set_num_threads(1)
    b = blocks(*shape)
    t0 = time.perf_counter()
    hz.band_eigenvalues(hz.to_banded(hz.narrowed(b), b.N))
    return time.perf_counter() - t0


def side_by_side(shape: tuple[int, int], workers: int) -> str:
    import concurrent.futures as cf
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        list(pool.map(solve_one, [(8, 4)] * workers))  # started and warm
        t0 = time.perf_counter()
        each = list(pool.map(solve_one, [shape] * workers))
        wall = time.perf_counter() - t0
    return (f"2-stage N on {workers} processes at once, N:H = {shape[0]}:{shape[1]}: {wall:.1f} s for {workers} "
            f"spectra, {wall / workers:.2f} s a spectrum (each took {min(each):.1f}–{max(each):.1f} s)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", default=["128:32", "128:64", "128:128"], help="N:H settings")
    ap.add_argument("--threads", type=int, default=1, help="torch (MKL) and OpenBLAS threads")
    ap.add_argument("--dense-max-n", type=int, default=8192, help="the dense routes only up to this n")
    ap.add_argument("--routes", nargs="+", choices=list(ROUTES),
                    default=[r for r in ROUTES if r not in ("dense cuda", "bipartite N")])
    ap.add_argument("--matrix", choices=("H_z", "O"), default="H_z", help="H_z, or the linear net's O")
    ap.add_argument("--workers", type=int, default=0, help="then this many two-stage solves side by side")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    MATRIX["name"] = a.matrix
    routes = {}
    for name in a.routes:  # warm-up: libraries loaded, threads started; a route this machine lacks is named
        try:
            ROUTES[name](blocks(8, 4))
            routes[name] = ROUTES[name]
        except (ImportError, RuntimeError, AssertionError, ValueError) as exc:
            print(f"{name}: not run here ({type(exc).__name__}: {exc})")
    act = "linear" if a.matrix == "O" else CONFIG["act"]
    print(f"torch {torch.__version__}, {a.threads} thread(s); seconds for all eigenvalues of {a.matrix} "
          f"({act}, {CONFIG['param']}, {CONFIG['init']}, no skips)")
    print(f"{'N':>5} {'H':>5} {'n':>7} | " + " | ".join(f"{r:>20}" for r in routes) + " | max |Δλ| / max |λ|")
    for shape in a.shapes:
        N, H = (int(v) for v in shape.split(":"))
        b = blocks(N, H)
        cells, ref, diffs = [], None, []
        for name, route in routes.items():
            if name.startswith("dense") and a.dense_max_n < N * H:
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
        print(f"{N:>5} {H:>5} {N * H:>7} | " + " | ".join(cells) + f" | {max(diffs, default=0.0):.1e}", flush=True)
    if a.workers and "2-stage N" in routes:
        print(side_by_side(max((tuple(int(v) for v in s.split(":")) for s in a.shapes), key=lambda t: t[0] * t[1]),
                           a.workers), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
