"""PC inference throughput: the layer-batched engine vs the whole-tensor formulas, R runs stacked vs one by one.

    taskset -c 1 .venv/bin/python benchmarks/pc_inference.py [--runs 9 --N 128 --H 8 --B 64 --T 50]

Prints inference steps per second (summed over runs; each T-step inference includes its feed-forward
initialisation) for ``PCEngine`` and ``energy.feedforward`` + ``energy.infer``,
stacked and sequential, and their ratios, from one process (best of ``--repeats`` interleaved rounds).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.studies.mupc.engine.energy import InferenceConfig, PCEngine, infer
from pipeline.studies.mupc.engine.model import NetSpec, Weights, feedforward, init_weights


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--N", type=int, default=128)
    ap.add_argument("--H", type=int, default=8)
    ap.add_argument("--B", type=int, default=64)
    ap.add_argument("--T", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="auto")
    a = ap.parse_args()
    device = ("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device
    torch.set_num_threads(a.threads)
    spec = NetSpec(D=784, N=a.N, H=a.H, d_y=10, act="relu", skips=True, param="mupc", init="standard_gauss")
    R = a.runs
    w = init_weights(spec, list(range(R)), device=device)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(R, a.B, 784, generator=g).to(device)
    y = torch.nn.functional.one_hot(torch.randint(0, 10, (R, a.B), generator=g), 10).float().to(device)
    lr = torch.full((R,), 0.5, device=device)
    cfg = InferenceConfig(steps=a.T)
    with torch.no_grad():
        z0, _ = feedforward(spec, w, x)
        singles = [(Weights(*(t[r:r + 1] for t in w.tensors())), x[r:r + 1], y[r:r + 1], z0[r:r + 1], lr[r:r + 1])
                   for r in range(R)]

        def engine(k: int) -> PCEngine:
            return PCEngine(spec, k, a.B, cfg, device=device)

        stacked_engine = engine(R)
        stacked_engine.bind(w)
        single_engines = []
        for wr, *_ in singles:
            e = engine(1)
            e.bind(wr)
            single_engines.append(e)

        fns = {
            "engine stacked": lambda: (stacked_engine.feedforward(x, y), stacked_engine.infer(lr)),
            "engine sequential": lambda: [(e.feedforward(xr, yr), e.infer(lrr))
                                          for e, (_, xr, yr, _, lrr) in zip(single_engines, singles)],
            "formulas stacked": lambda: infer(spec, w, x, y, feedforward(spec, w, x)[0], lr, cfg),
            "formulas sequential": lambda: [infer(spec, wr, xr, yr, feedforward(spec, wr, xr)[0], lrr, cfg)
                                            for wr, xr, yr, _, lrr in singles],
        }
        times = {k: float("inf") for k in fns}
        for fn in fns.values():
            fn()  # warm-up
        for _ in range(a.repeats):
            for name, fn in fns.items():
                sync(device)
                t = time.perf_counter()
                fn()
                sync(device)
                times[name] = min(times[name], time.perf_counter() - t)
    steps = R * a.T
    print(f"device={device} threads={a.threads} R={R} N={a.N} H={a.H} B={a.B} T={a.T}")
    for name, t in times.items():
        print(f"{name:>20}: {steps / t:10.1f} inference steps/s")
    print(f"engine / formulas: stacked {times['formulas stacked'] / times['engine stacked']:.2f}x, sequential "
          f"{times['formulas sequential'] / times['engine sequential']:.2f}x; stacked / sequential: engine "
          f"{times['engine sequential'] / times['engine stacked']:.2f}x, formulas "
          f"{times['formulas sequential'] / times['formulas stacked']:.2f}x")


if __name__ == "__main__":
    main()
