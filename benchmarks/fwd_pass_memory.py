"""fwd_pass's cells at their deepest: the process's resident memory against the plan's memory line, and its time
and page faults with glibc's heap set up two or three ways, side by side in one run (each way in its own process).

    .venv/bin/python benchmarks/fwd_pass_memory.py                          # N = 512, L = 512 (≈ 3 min here)
    .venv/bin/python benchmarks/fwd_pass_memory.py --width 1024 --ways heap  # the paper's largest (18 GiB)

Why: the plan refuses a unit whose cells would not fit the device's memory (``cost.fwd_peak_bytes``), and a
cell's process holds more than its tensors: the process itself (torch, MNIST) and what glibc's heap keeps of the
per-layer gradients and Adam's temporaries freed between steps. Those frees also cost time: blocks the heap hands
back come again as fresh pages, zeroed at their first touch. Each way runs, as ``train_fwd`` does: a width's
orthogonal stream to half the depth (the shallower cells'), a standard cell at the full depth, the stream to the
full depth, the orthogonal tanh cell (SGD and Adam stacked, the paper's 5 checks, two torch threads). Printed per
phase: the largest VmRSS (sampled every 50 ms) and its seconds; per way the page faults.

* ``heap``: glibc's default, as the stage runs: its mmap threshold grows to the largest block freed, and it hands
  the heap's freed top back to the kernel;
* ``mmap``: ``MALLOC_MMAP_THRESHOLD_=131072``: every large block mapped and unmapped, the tensors' bytes alone;
* ``keep`` (tried, not kept): blocks up to 32 MiB from the heap, never handed back.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

WAYS = {"heap": {}, "mmap": {"MALLOC_MMAP_THRESHOLD_": "131072"},
        "keep": {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 40)}}
GIB = 2**30


def _rss() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) * 1024
    return 0.0


def measure(N: int, L: int) -> dict:
    """The phases in this process: {phase: [peak bytes, seconds]}, page faults, the process before them."""
    import torch

    from pipeline.studies.mupc.analysis import fwdpass
    from pipeline.studies.mupc.analysis.train import mnist_batches

    torch.set_num_threads(2)
    seed, optims = 54638, ["sgd", "adam"]
    batches = mnist_batches(5, 64, seed, None, "cpu", torch.float32)
    phases: dict[str, list[float]] = {}
    current = ["start", time.perf_counter()]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak = phases.setdefault(current[0], [0.0, 0.0])
            peak[0] = max(peak[0], _rss())
            time.sleep(0.05)

    def phase(name: str) -> None:
        now = time.perf_counter()
        phases.setdefault(current[0], [_rss(), 0.0])[1] = now - current[1]
        current[:] = [name, now]

    base = _rss()
    threading.Thread(target=sample, daemon=True).start()
    phase(f"orthogonal stream to L = {L // 2}")
    stream = fwdpass.OrthogonalDraws(N, seed, [1.0, 1.05], L - 2)
    stream.weights(fwdpass.net_spec("orthogonal", "tanh", N, L // 2))
    phase(f"standard draw, L = {L}")
    spec = fwdpass.net_spec("sp_no_skips", "tanh", N, L)
    initial = fwdpass.initial_weights(spec, seed)
    phase(f"standard cell, L = {L}")
    fwdpass.run_cell(spec, optims, batches, 1e-3, initial, "cpu")
    phase(f"orthogonal stream to L = {L}")
    spec = fwdpass.net_spec("orthogonal", "tanh", N, L)
    initial = stream.weights(spec)
    phase(f"orthogonal cell, L = {L}")
    fwdpass.run_cell(spec, optims, batches, 1e-3, initial, "cpu")
    phase("end")
    done.set()
    time.sleep(0.1)
    phases.pop("end", None)
    phases.pop("start", None)
    return {"base": base, "phases": phases, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--depth", type=int, default=512)
    ap.add_argument("--ways", nargs="+", choices=list(WAYS), default=["heap", "mmap"])
    ap.add_argument("--child", choices=list(WAYS), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.width, args.depth)))
        return 0
    from pipeline.studies.mupc.analysis import cost

    N, L, optims = args.width, args.depth, ["sgd", "adam"]
    tensors = cost.fwd_cell_bytes(N, L, optims, 64, draws=2)
    line = cost.fwd_peak_bytes(N, L, optims, 64, "cpu", draws=2)
    print(f"fwd_pass cells at N = {N}, L = {L} (SGD and Adam stacked, 5 checks, two torch threads)")
    print(f"  plan: the tensors {tensors / GIB:.2f} GiB; the process's peak line {line / GIB:.2f} GiB")
    for way in args.ways:
        out = subprocess.run([sys.executable, __file__, "--child", way, "--width", str(N), "--depth", str(L)],
                             env={**os.environ, **WAYS[way]}, capture_output=True, text=True, check=True)
        m = json.loads(out.stdout.strip().splitlines()[-1])
        peak = max(p for p, _ in m["phases"].values())
        print(f"  {way}: process before the cells {m['base'] / GIB:.2f} GiB, peak {peak / GIB:.2f} GiB "
              f"({(peak - m['base']) / tensors - 1:+.1%} over the tensors), {m['faults']:,} page faults")
        for name, (p, s) in m["phases"].items():
            print(f"    {name:32s} {p / GIB:6.2f} GiB {s:7.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
