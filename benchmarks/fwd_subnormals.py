"""fwd_pass cells on the CPU as the unit computes them (float32 subnormals kept) against the same cells with
subnormals flushed to zero, side by side in one run; and which recorded numbers flushing would change.

    .venv/bin/python benchmarks/fwd_subnormals.py                       # the cells of benchmarks/README.md
    .venv/bin/python benchmarks/fwd_subnormals.py --widths 512 --depths 64 256 --variants sp_no_skips --acts tanh

Why: the paper's fwd_pass unit ran well above its plan on this CPU while most single cells ran near theirs. In
deep nets without skips the activities and gradients fall below float32's normal range (1.2e-38), and a CPU
computes on such subnormal numbers through slow microcode. Each cell runs in a fresh process per side (the
flush is set before torch starts its threads), the sides alternating; per cell: seconds each way, the ratio,
and how many of the cell's recorded numbers (``fwdpass.run_cell``: 4 metrics × 2 optimisers × 5 layers ×
5 checks) differ between the sides, by metric. The plan counts the kept side's arithmetic at the normal rate
only (its note says so).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
METRICS = ("mean |z|", "RMS z", "Frobenius", "spectral")

CELL = """
import sys, time, torch
torch.set_flush_denormal(sys.argv[1] == "1")
torch.set_num_threads(int(sys.argv[7]))
from pipeline.studies.mupc.analysis import fwdpass
from pipeline.studies.mupc.analysis.train import mnist_batches
batches = mnist_batches(5, 64, 54638, None, "cpu", torch.float32)
spec = fwdpass.net_spec(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
t0 = time.perf_counter()
out = fwdpass.run_cell(spec, ["sgd", "adam"], batches, 1e-3, 54638, "cpu")
seconds = time.perf_counter() - t0
torch.save({"seconds": seconds, "out": out}, sys.argv[6])
"""


def run_cell(flush: bool, variant: str, act: str, N: int, L: int, threads: int, tmp: Path) -> dict:
    path = tmp / f"{int(flush)}.pt"
    subprocess.run([sys.executable, "-c", CELL, str(int(flush)), variant, act, str(N), str(L), str(path),
                    str(threads)], cwd=ROOT, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    import torch

    return torch.load(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--widths", nargs="+", type=int, default=[256, 512])
    ap.add_argument("--depths", nargs="+", type=int, default=[128, 256])
    ap.add_argument("--variants", nargs="+", default=["sp_no_skips", "depth_mup_no_skips", "orthogonal", "sp_skips"])
    ap.add_argument("--acts", nargs="+", default=["tanh", "relu"])
    ap.add_argument("--threads", type=int, default=2, help="torch threads of each cell (the unit's on 2 cores)")
    a = ap.parse_args(argv)
    import torch

    print(f"torch {torch.__version__}, cpu, {a.threads} threads; one fwd_pass cell (SGD and Adam stacked, 5 checks, "
          "MNIST) per process")
    print("| variant | act | N | L | subnormals kept | flushed | ratio | recorded numbers that differ |")
    print("|---|---|---|---|---|---|---|---|")
    rows = []
    for variant, act, N, L in itertools.product(a.variants, a.acts, a.widths, a.depths):
        with tempfile.TemporaryDirectory() as tmp:
            kept = run_cell(False, variant, act, N, L, a.threads, Path(tmp))
            flushed = run_cell(True, variant, act, N, L, a.threads, Path(tmp))
        x, y = kept["out"].nan_to_num(nan=-1.0), flushed["out"].nan_to_num(nan=-1.0)
        differ = {m: int((x[k] != y[k]).sum()) for k, m in enumerate(METRICS)}
        said = ", ".join(f"{m} {n}" for m, n in differ.items() if n) or "none"
        ratio = kept["seconds"] / flushed["seconds"]
        print(f"| {variant} | {act} | {N} | {L} | {kept['seconds']:.2f} s | {flushed['seconds']:.2f} s | "
              f"{ratio:.1f}x | {said} |", flush=True)
        rows.append({"variant": variant, "act": act, "N": N, "L": L, "kept_s": kept["seconds"],
                     "flushed_s": flushed["seconds"], "differ": differ})
    print(json.dumps({"cells": len(rows), "kept_s": round(sum(r["kept_s"] for r in rows), 2),
                      "flushed_s": round(sum(r["flushed_s"] for r in rows), 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
