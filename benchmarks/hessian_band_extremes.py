"""hessian_init's extremes below the paper's slices: Lanczos (and shift-invert) against every eigenvalue of the
narrowed band, side by side in one run, cell by cell, one thread.

    taskset -c 1 .venv/bin/python benchmarks/hessian_band_extremes.py            # seed 0 of each paper config
    taskset -c 1 .venv/bin/python benchmarks/hessian_band_extremes.py --acts relu --seeds 0 1 2

Why: the paper's hessian_init ran about 1.4× its plan on this CPU, and its slow cells were the ones whose
extremes Lanczos took (its plan probes one well-conditioned cell): the time of ARPACK's iterations goes with
the cell's conditioning, up to giving up on a near-singular ReLU cell (then the band's eigenvalues anyway). The
cells here are the paper grid's with dense_max_n < n = N·H ≤ band_max_n that are not on its full-spectrum
slices (N = 128 row, H = 128 column), built as the unit builds them (``train.hessian_cell``'s blocks); each
route's seconds, and the largest difference of its λ_max and λ_min from the band's relative to |λ_max|.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline import registry
from pipeline.config import load_params
from pipeline.studies.mupc.analysis.layout import hessian_configs, is_slice
from pipeline.studies.mupc.analysis.train import hessian_spec
from pipeline.studies.mupc.engine import hessian as hz
from pipeline.studies.mupc.engine.model import feedforward, init_weights


def blocks(c: dict, N: int, H: int) -> hz.Blocks:
    spec = hessian_spec(c, N, H, False)
    w = init_weights(spec, [c["seed"]], dtype=torch.float64)
    x = hz.hessian_input(N, c["seed"])
    z = feedforward(spec, w, x.view(1, -1))[0][0, :, 0]
    return hz.hessian_blocks(spec, w, x, x.clone(), z, c["activity_decay"])


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--acts", nargs="+", default=["linear", "tanh", "relu"])
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    study = registry.load("mupc_analysis")
    hp = registry.config(study, load_params(), "paper").hessian
    configs = [c for c in hessian_configs(hp) if c["seed"] in a.seeds and c["act"] in a.acts]
    print(f"torch {torch.__version__}, one thread; {len(configs)} paper configs; Lanczos tol {hp.lanczos_tol}")
    print("| config | cells | Lanczos | band | slowest Lanczos cell | its band | Lanczos methods | max difference |")
    print("|---|---|---|---|---|---|---|---|")
    total = {"lanczos": 0.0, "band": 0.0}
    for c in configs:
        cells = [(N, H) for N in hp.widths for H in hp.depths
                 if hp.dense_max_n < N * H <= hp.band_max_n and not is_slice(N, H, hp)]
        t_l = t_b = 0.0
        slowest, diff, methods = (0.0, 0.0, ""), 0.0, set()
        for N, H in cells:
            b = blocks(c, N, H)
            ex, s_l = timed(lambda b=b: hz.extremes(b, tol=hp.lanczos_tol, dense_max_n=hp.dense_max_n))
            band, s_b = timed(lambda b=b: hz.extremes(b, dense_max_n=hp.dense_max_n, band_max_n=b.n))
            t_l, t_b = t_l + s_l, t_b + s_b
            methods.add(f"{ex.method_max}/{ex.method_min}")
            if s_l > slowest[0]:
                slowest = (s_l, s_b, f"N={N} H={H}")
            scale = max(abs(band.lambda_max), 1e-300)
            diff = max(diff, abs(ex.lambda_max - band.lambda_max) / scale, abs(ex.lambda_min - band.lambda_min) / scale)
        total["lanczos"] += t_l
        total["band"] += t_b
        name = f"{c['act']} {'skips' if c['skips'] else 'no skips'} {c['init']} {c['param']} seed {c['seed']}"
        print(f"| {name} | {len(cells)} | {t_l:.2f} s | {t_b:.2f} s | {slowest[2]}: {slowest[0]:.2f} s | "
              f"{slowest[1]:.2f} s | {', '.join(sorted(methods))} | {diff:.1e} |", flush=True)
    print(f"total: Lanczos {total['lanczos']:.1f} s, band {total['band']:.1f} s, "
          f"ratio {total['lanczos'] / max(total['band'], 1e-9):.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
