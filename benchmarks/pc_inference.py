"""PC inference throughput: R runs stacked on the run axis vs the same R runs one after another.

    python benchmarks/pc_inference.py [--runs 9 --N 128 --H 8 --B 64 --T 50 --threads 1 --device auto]

Prints inference steps per second (summed over runs) for both and their ratio (stacked / sequential).
"""

from __future__ import annotations

import argparse
import time

import torch

from pipeline.studies.mupc.energy import InferenceConfig, infer
from pipeline.studies.mupc.model import NetSpec, feedforward, init_weights


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
        singles = [(type(w)(*(t[r:r + 1] for t in w.tensors())), x[r:r + 1], y[r:r + 1], z0[r:r + 1], lr[r:r + 1])
                   for r in range(R)]

        def stacked() -> None:
            infer(spec, w, x, y, z0, lr, cfg)

        def sequential() -> None:
            for wr, xr, yr, zr, lrr in singles:
                infer(spec, wr, xr, yr, zr, lrr, cfg)

        times = {}
        for name, fn in (("stacked", stacked), ("sequential", sequential)):
            fn()  # warm-up
            sync(device)
            best = float("inf")
            for _ in range(a.repeats):
                t = time.perf_counter()
                fn()
                sync(device)
                best = min(best, time.perf_counter() - t)
            times[name] = best
    steps = R * a.T
    print(f"device={device} threads={a.threads} R={R} N={a.N} H={a.H} B={a.B} T={a.T}")
    for name, t in times.items():
        print(f"{name:>10}: {steps / t:10.1f} inference steps/s ({t * 1e3 / a.T:.3f} ms per stacked step)")
    print(f"ratio stacked/sequential: {times['sequential'] / times['stacked']:.2f}x")


if __name__ == "__main__":
    main()
