"""Test evaluation of a stack of μPC runs: buffers made afresh at each call against reused buffers.

    taskset -c 1 .venv/bin/python benchmarks/pc_evaluation.py

One process, one thread, pinned by the caller. ``fresh`` is ``trainer.evaluate`` (an ``Evaluator`` made
for the call, so its buffers are allocated, mapped and page-faulted in at every evaluation, as every
intermediate was before the trainer kept one); ``reused`` is the trainer's way, one ``Evaluator`` per
group called again and again. Both give the same numbers bit for bit (checked here). μPC ReLU with
skips, H = 8, 1,024 MNIST-shaped synthetic test images; best of ``--repeats`` interleaved rounds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pipeline.studies.mupc.training.group_training as tr
from pipeline.studies.mupc.engine.model import init_weights
from pipeline.studies.mupc.engine.runs import RunConfig

D, DY, N_TEST = 784, 10, 1024


def bench(N: int, R: int, data: tr.DataSet, calls: int, repeats: int) -> dict[str, float]:
    """Seconds per evaluation, fresh and reused buffers, best of ``repeats`` interleaved rounds."""
    rc = RunConfig(dataset="mnist", N=N, H=8, act="relu", param="mupc", init="standard_gauss", skips=True,
                   seed=0, epochs=1, test_every=16, param_lr=0.01)
    spec = tr.net_spec(rc, D, DY)
    w = init_weights(spec, list(range(R)))
    ev = tr.Evaluator(spec, R, data, half_mse=True)
    fns = {"fresh": lambda: tr.evaluate(spec, w, data, half_mse=True), "reused": lambda: ev(w)}
    if not all(torch.equal(p, q) for p, q in zip(fns["fresh"](), fns["reused"]())):
        raise SystemExit(f"N={N} runs={R}: the two evaluations differ")
    best: dict[str, float] = {}
    for _ in range(repeats):
        for key, fn in fns.items():
            t = time.perf_counter()
            for _ in range(calls):
                fn()
            best[key] = min(best.get(key, float("inf")), (time.perf_counter() - t) / calls)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=["16:1", "16:9", "128:1", "128:9"], help="N:runs settings")
    ap.add_argument("--calls", type=int, default=10, help="evaluations per timing")
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N_TEST, D, generator=g)
    y = torch.nn.functional.one_hot(torch.randint(0, DY, (N_TEST,), generator=g), DY).float()
    data = tr.DataSet(x[:64], y[:64], x, y)
    print(f"torch {torch.__version__}, 1 thread; μPC ReLU skips, H=8, {N_TEST} test images; "
          f"best of {a.repeats} interleaved rounds of {a.calls} evaluations")
    print(f"{'N':>4} {'runs':>4} | {'fresh ms':>8} {'reused ms':>9} | {'fresh/reused':>12}")
    for size in a.sizes:
        N, R = (int(v) for v in size.split(":"))
        best = bench(N, R, data, a.calls, a.repeats)
        print(f"{N:>4} {R:>4} | {1e3 * best['fresh']:>8.2f} {1e3 * best['reused']:>9.2f} | "
              f"{best['fresh'] / best['reused']:>11.2f}x", flush=True)


if __name__ == "__main__":
    main()
