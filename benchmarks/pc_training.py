"""PC training throughput (the sweep trainer): R runs trained as one stacked group vs one by one.

    python benchmarks/pc_training.py [--runs 9 --N 128 --H 8 --T 8 --iters 16 --threads 1 --device auto]

Uses synthetic MNIST-shaped data (784 inputs, 10 classes) so it needs no download; evaluation every
``iters`` iterations on 1,024 test images. Prints training iterations per second (summed over runs)
for both and their ratio.
"""

from __future__ import annotations

import argparse
import time

import torch

from pipeline.studies.mupc.runs import RunConfig
from pipeline.studies.mupc.training.trainer import DataSet, train_group


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--N", type=int, default=128)
    ap.add_argument("--H", type=int, default=8)
    ap.add_argument("--T", type=int, default=8)
    ap.add_argument("--iters", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="auto")
    a = ap.parse_args()
    device = ("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device
    torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(0)
    n_train, n_test = 64 * a.iters, 1024
    x = torch.randn(n_train + n_test, 784, generator=g)
    y = torch.nn.functional.one_hot(torch.randint(0, 10, (n_train + n_test,), generator=g), 10).float()
    data = DataSet(x[:n_train].to(device), y[:n_train].to(device), x[n_train:].to(device), y[n_train:].to(device))
    lrs = [1.0, 0.5, 0.1]
    runs = [RunConfig(dataset="mnist", N=a.N, H=a.H, act="relu", param="mupc", init="standard_gauss", skips=True,
                      seed=i // len(lrs), epochs=1, test_every=a.iters, param_lr=0.1, T=a.T, act_lr=lrs[i % len(lrs)])
            for i in range(a.runs)]
    # no-learning stop would end random-label runs early: keep them going by timing raw iterations
    import pipeline.studies.mupc.training.trainer as tr

    tr.NO_LEARNING_ACC = -1.0
    train_group(runs[:1], data, device)  # warm-up
    t = time.perf_counter()
    train_group(runs, data, device)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t_stacked = time.perf_counter() - t
    t = time.perf_counter()
    for rc in runs:
        train_group([rc], data, device)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t_seq = time.perf_counter() - t
    total = a.runs * a.iters
    print(f"device={device} threads={a.threads} R={a.runs} N={a.N} H={a.H} T={a.T} iterations/run={a.iters}")
    print(f"   stacked: {total / t_stacked:8.2f} training iterations/s")
    print(f"sequential: {total / t_seq:8.2f} training iterations/s")
    print(f"ratio stacked/sequential: {t_seq / t_stacked:.2f}x")


if __name__ == "__main__":
    main()
