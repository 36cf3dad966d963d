"""fwd_pass's initial weights: each cell drawing its own (before) against one draw per group of cells that share
them (``layout.fwd_draws``, now), side by side in one run; with ``--orthogonal``, the orthogonal draws of one
width per (depth, gain) (before) against one stream of QRs for all of them (``fwdpass.OrthogonalDraws``, now).

    .venv/bin/python benchmarks/fwd_pass_draws.py                   # N = 1,024, L = 64 (≈ 5 min here)
    .venv/bin/python benchmarks/fwd_pass_draws.py --width 256 --depth 32
    .venv/bin/python benchmarks/fwd_pass_draws.py --orthogonal      # N = 1,024, the paper's depths (≈ 8 min)

Why: every fwd_pass cell draws the unit's one seed, so the cells of one weight init, gain and shape start from
the same weights; drawing them per cell was a third of the paper unit's plan at N = 1,024 (an orthogonal draw
is a QR per layer). For one (N, L) of the paper's grid, every group in turn: its cells each way (each cell
trained on the paper's 5 checks of MNIST, SGD and Adam stacked, as the unit runs it, two torch threads), the
seconds each way, the draws each way, the ratio, and whether the cells' numbers agree bit for bit.

``--orthogonal``: a deeper net's draws begin with a shallower one's hidden layers and the gain scales a layer
after its QR, so the width's orthogonal draws (every paper depth, gains 1 and 1.05) need the deepest net's QRs
alone. Printed: seconds each way (two torch threads), the N×N QRs each way, and whether every weight agrees bit
for bit.
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
from pipeline.studies.mupc.analysis.config import FwdPassParams
from pipeline.studies.mupc.analysis.layout import fwd_draws, fwd_gain
from pipeline.studies.mupc.analysis.train import mnist_batches


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--depth", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--orthogonal", action="store_true", help="the orthogonal draws of --width at the paper's depths")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    paper = registry.config(registry.load("mupc_analysis"), load_params(), "paper")
    if args.orthogonal:
        return orthogonal(args.width, dataclasses.replace(paper.fwd_pass, widths=[args.width]))
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


def orthogonal(N: int, fp: FwdPassParams) -> int:
    """Every (depth, gain) of the orthogonal cells at width N: drawn each (before), from one stream (now)."""
    keys = [(L, gain) for (init, gain, n, L), _ in fwd_draws(fp) if init == "orthogonal" and n == N]
    if not keys:
        raise SystemExit(f"no orthogonal cells at N = {N}")
    act = {fwd_gain("orthogonal", a): a for a in fp.acts}  # an act of each gain
    specs = {(L, gain): fwdpass.net_spec("orthogonal", act[gain], N, L) for L, gain in keys}
    print(f"fwd_pass's orthogonal draws at N = {N}: depths {sorted({L for L, _ in keys})}, gains "
          f"{sorted({g for _, g in keys})}, {torch.get_num_threads()} torch threads")
    t0 = time.perf_counter()
    now = fwdpass.OrthogonalDraws(N, fp.seed, [g for _, g in keys], max(L for L, _ in keys) - 2)
    drawn = {k: now.weights(spec) for k, spec in specs.items()}
    t1 = time.perf_counter()
    same, qr_before = True, 0
    for k, spec in specs.items():  # one at a time, as the unit drew them (a draw is GBs at N = 1,024)
        before = fwdpass.initial_weights(spec, fp.seed)
        qr_before += spec.H - 1
        same &= all(torch.equal(a, b) for a, b in zip(before.tensors(), drawn[k].tensors(), strict=True))
    t2 = time.perf_counter()
    print(f"{'draws':<8} | {'each (before)':>13} | {'one stream (now)':>16} | {'ratio':>5} | same weights")
    print(f"{len(keys):<8} | {t2 - t1:>11.1f} s | {t1 - t0:>14.1f} s | {(t2 - t1) / (t1 - t0):>4.2f}x | "
          f"{'yes' if same else 'NO'}")
    print(f"{'N×N QRs':<8} | {qr_before:>13,} | {now.drawn:>16,} |")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
