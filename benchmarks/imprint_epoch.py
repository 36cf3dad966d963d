"""One training epoch of the imprint MLP: device-resident tensors vs the seed's DataLoader loop.

Both variants train the same model (same init, Adam, batch 512, one epoch over the MNIST training
set) in the same process, one after the other; the seed's variant reads samples through
torchvision's MNIST dataset with per-sample ToTensor + Normalize and a shuffling DataLoader.
Prints both times and their ratio.

    python benchmarks/imprint_epoch.py [--precision fp32|bf16] [--n-train N] [--threads T]
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
from pipeline.studies.imprint.model import DTYPES, build_mlp
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precision", choices=sorted(DTYPES), default="fp32")
    ap.add_argument("--n-train", type=int, default=60000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dtype = DTYPES[args.precision]
    split = load_split("mnist", train=True)
    n = min(args.n_train, len(split.labels))
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
