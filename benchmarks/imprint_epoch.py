"""One training epoch of the imprint MLP, three comparisons, each side by side in one run.

``--mode loader`` (default): device-resident tensors vs the seed's DataLoader loop. Both variants
train the same model (same init, Adam, batch 512, one epoch over the MNIST training set) one after
the other; the seed's variant reads samples through torchvision's MNIST dataset with per-sample
ToTensor + Normalize and a shuffling DataLoader.

``--mode precision``: what bf16 costs on this machine against fp32: the 512x784 @ 784x128 product
(forward of the first layer), one Newton-Schulz call on the 128x784 update, and one epoch with Adam
and with Muon (the study's loop, device-resident), in fp32 and in bf16.

``--mode compile``: the Newton-Schulz step eager vs ``torch.compile``-d (the seed's
``@torch.compile``): compile time, time per call and the relative difference of the outputs.

Prints the times and their ratios.

    python benchmarks/imprint_epoch.py [--mode loader|precision|compile] [--precision fp32|bf16]
                                       [--n-train N] [--threads T]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.data import dataset_info, load_split, normalised
from pipeline.paths import data_dir
from pipeline.studies.imprint.model import DTYPES, build_mlp, make_optimizers
from pipeline.studies.imprint.muon import NewtonSchulz, newton_schulz5
from pipeline.tvcompat import import_torchvision

MEAN, STD, BATCH = 0.1307, 0.3081, 512


def epoch_resident(model: nn.Module, x: torch.Tensor, y: torch.Tensor, seed: int) -> float:
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed)).to(x.device)
    t0 = time.perf_counter()
    model.train()
    for i in range(0, len(y), BATCH):
        idx = perm[i : i + BATCH]
        model.zero_grad()
        loss_fn(model(x[idx]), y[idx]).backward()
        opt.step()
    if x.is_cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def epoch_dataloader(model: nn.Module, root: Path, n: int, device: str, dtype: torch.dtype,
                     seed: int) -> float:
    tv = import_torchvision()
    from torch.utils.data import DataLoader, Subset

    transform = tv.transforms.Compose([tv.transforms.ToTensor(), tv.transforms.Normalize((MEAN,), (STD,))])
    ds = tv.datasets.MNIST(root=str(root), train=True, download=False, transform=transform)
    if n < len(ds):
        ds = Subset(ds, range(n))
    loader = DataLoader(ds, batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(seed))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    t0 = time.perf_counter()
    model.train()
    for data, target in loader:
        data, target = data.to(device, dtype), target.to(device)
        model.zero_grad()
        loss_fn(model(data.flatten(1)), target).backward()
        opt.step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def per_call(fn, reps: int) -> float:
    """Seconds per call of ``fn()``, after one warm-up call."""
    fn()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def epoch_study(optimizer: str, dtype: torch.dtype, x: torch.Tensor, y: torch.Tensor, device: str,
                ns_dtype: torch.dtype | None = None) -> float:
    """One epoch of the study's set-up (Muon: NS in ``ns_dtype``, by default the parameter dtype)."""
    model = build_mlp(0, dtype).to(device)
    opts = make_optimizers(model, optimizer, 1e-3, 0.95, 5, ns_dtype or dtype)
    loss_fn = nn.CrossEntropyLoss()
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(1)).to(device)
    xd = x.to(dtype)
    t0 = time.perf_counter()
    for i in range(0, len(y), BATCH):
        idx = perm[i : i + BATCH]
        model.zero_grad()
        loss_fn(model(xd[idx]), y[idx]).backward()
        for opt in opts:
            opt.step()
    return time.perf_counter() - t0


def mode_precision(x: torch.Tensor, y: torch.Tensor, device: str) -> None:
    gen = torch.Generator().manual_seed(0)
    a, b, g = (torch.randn(*shape, generator=gen) for shape in ((512, 784), (784, 128), (128, 784)))
    cast = {d: (a.to(d), b.to(d), g.to(d)) for d in (torch.float32, torch.bfloat16)}
    linear = torch.nn.functional.linear
    rows = []
    # the layer's forward is linear(x, W) with W stored 128x784 (B transposed); a plain a @ b takes another path
    for name, fn in (("linear(x 512x784, W 128x784)", lambda d: per_call(lambda: linear(cast[d][0], cast[d][2]), 20)),
                     ("matmul 512x784 @ 784x128", lambda d: per_call(lambda: cast[d][0] @ cast[d][1], 20)),
                     ("Newton-Schulz, 128x784 (5 steps)",
                      lambda d: per_call(lambda: newton_schulz5(cast[d][2], dtype=d), 5))):
        rows.append((name, fn(torch.float32), fn(torch.bfloat16), "ms", 1e3))
    for opt in ("adam", "muon"):
        rows.append((f"epoch, {opt} ({len(y)} images)", epoch_study(opt, torch.float32, x, y, device),
                     epoch_study(opt, torch.bfloat16, x, y, device), "s", 1.0))
    rows.append(("epoch, muon, bf16 params + fp32 NS", rows[-1][1],
                 epoch_study("muon", torch.bfloat16, x, y, device, ns_dtype=torch.float32), "s", 1.0))
    print(f"{'':36s} {'fp32':>10s} {'bf16':>10s}   bf16/fp32")
    for name, t32, t16, unit, k in rows:
        print(f"{name:36s} {t32 * k:8.2f}{unit:>2s} {t16 * k:8.2f}{unit:>2s}   {t16 / t32:6.2f}x")


def mode_compile(dtype: torch.dtype) -> None:
    g = torch.randn(128, 784, generator=torch.Generator().manual_seed(0)).to(dtype)
    eager, comp = NewtonSchulz(compile=False), NewtonSchulz(compile=True)
    t0 = time.perf_counter()
    out_c = comp(g, steps=5, dtype=dtype)
    t_compile = time.perf_counter() - t0
    if not comp.compiled:
        print(f"compiled Newton-Schulz unavailable: {comp.fallback}")
        return
    out_e = eager(g, steps=5, dtype=dtype)
    rel = float((out_c.float() - out_e.float()).norm() / out_e.float().norm())
    t_e = per_call(lambda: eager(g, steps=5, dtype=dtype), 10)
    t_c = per_call(lambda: comp(g, steps=5, dtype=dtype), 10)
    print(f"Newton-Schulz on 128x784, {dtype}: first compiled call (compiles) {t_compile:.1f} s")
    print(f"  eager    : {t_e * 1e3:8.2f} ms per call")
    print(f"  compiled : {t_c * 1e3:8.2f} ms per call   ratio eager / compiled {t_e / t_c:.2f}x")
    print(f"  relative difference of the outputs ||O_c - O_e||_F / ||O_e||_F = {rel:.4f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("loader", "precision", "compile"), default="loader")
    ap.add_argument("--precision", choices=sorted(DTYPES), default="fp32")
    ap.add_argument("--n-train", type=int, default=60000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dtype = DTYPES[args.precision]
    split = load_split("mnist", train=True)
    n = min(args.n_train, len(split.labels))
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.device}, mode {args.mode}")
    if args.mode == "compile":
        mode_compile(dtype)
        return 0
    if args.mode == "precision":
        mode_precision(normalised(split.images[:n], MEAN, STD, args.device, torch.float32),
                       split.labels[:n].to(args.device), args.device)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        # torchvision's MNIST expects <root>/MNIST/raw/<idx files>: link the downloaded ones
        raw = Path(tmp) / "MNIST" / "raw"
        raw.mkdir(parents=True)
        src = data_dir("mnist") / dataset_info("mnist").torchvision_class / "raw"
        for f in src.iterdir():
            (raw / f.name).symlink_to(f)
        t_load = time.perf_counter()
        x = normalised(split.images[:n], MEAN, STD, args.device, dtype)
        y = split.labels[:n].to(args.device)
        t_load = time.perf_counter() - t_load
        t_res = epoch_resident(build_mlp(0, dtype).to(args.device), x, y, seed=1)
        t_dl = epoch_dataloader(build_mlp(0, dtype).to(args.device), Path(tmp), n, args.device, dtype, seed=1)
    print(f"imprint epoch ({n} images, batch {BATCH}, Adam, {args.precision}, {args.device}, "
          f"{args.threads} thread(s))")
    print(f"  device-resident tensors : {t_res:8.2f} s  (+ {t_load:.2f} s one-off normalisation)")
    print(f"  DataLoader + ToTensor   : {t_dl:8.2f} s")
    print(f"  ratio DataLoader / resident: {t_dl / t_res:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
