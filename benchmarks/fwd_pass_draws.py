"""fwd_pass's initial weights: each cell drawing its own (before) against one draw per group of cells that share
them (``layout.fwd_draws``, now), side by side in one run.

    .venv/bin/python benchmarks/fwd_pass_draws.py                   # N = 1,024, L = 64 (≈ 5 min here)
    .venv/bin/python benchmarks/fwd_pass_draws.py --width 256 --depth 32

Why: every fwd_pass cell draws the unit's one seed, so the cells of one weight init, gain and shape start from
the same weights; drawing them per cell was a third of the paper unit's plan at N = 1,024 (an orthogonal draw
is a QR per layer). For one (N, L) of the paper's grid, every group in turn: its cells each way (each cell
trained on the paper's 5 checks of MNIST, SGD and Adam stacked, as the unit runs it, two torch threads), the
seconds each way, the draws each way, the ratio, and whether the cells' numbers agree bit for bit.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from pipeline import registry
from pipeline.config import load_params
from pipeline.studies.mupc.analysis import fwdpass
from pipeline.studies.mupc.analysis.layout import fwd_draws
from pipeline.studies.mupc.analysis.train import mnist_batches


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--depth", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    paper = registry.config(registry.load("mupc_analysis"), load_params(), "paper")
    fp = dataclasses.replace(paper.fwd_pass, widths=[args.width], depths=[args.depth])
    batches = mnist_batches(fp.checks, fp.batch_size, fp.seed, fp.train_images, "cpu", torch.float32)
    optims = list(fp.optims)
    print(f"fwd_pass cells at N = {args.width}, L = {args.depth}: {fp.checks} checks, {optims} stacked, "
          f"{args.threads} torch threads")
    print(f"{'init':<15} {'gain':>5} {'cells':>5} | {'a draw per cell':>15} | {'one draw (now)':>14} | "
          f"{'ratio':>5} | same numbers")
    total_before = total_now = 0.0
    for (init, gain, N, L), cells in fwd_draws(fp):
        t0 = time.perf_counter()
        before = []
        for variant, act in cells:
            spec = fwdpass.net_spec(variant, act, N, L)
            before.append(fwdpass.run_cell(spec, optims, batches, fp.lr, fwdpass.initial_weights(spec, fp.seed),
                                           "cpu"))
        t1 = time.perf_counter()
        initial = fwdpass.initial_weights(fwdpass.net_spec(*cells[0], N, L), fp.seed)
        now = [fwdpass.run_cell(fwdpass.net_spec(variant, act, N, L), optims, batches, fp.lr, initial, "cpu")
               for variant, act in cells]
        t2 = time.perf_counter()
        same = all(torch.equal(a.nan_to_num(0.5), b.nan_to_num(0.5)) for a, b in zip(before, now, strict=True))
        total_before, total_now = total_before + t1 - t0, total_now + t2 - t1
        print(f"{init:<15} {gain:>5.2f} {len(cells):>5} | {t1 - t0:>13.1f} s | {t2 - t1:>12.1f} s | "
              f"{(t1 - t0) / (t2 - t1):>4.2f}x | {'yes' if same else 'NO'}")
    print(f"{'all':<27} | {total_before:>13.1f} s | {total_now:>12.1f} s | {total_before / total_now:>4.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
