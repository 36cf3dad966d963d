"""The seed's training loop on device-resident tensors (no DataLoader, no per-sample transforms)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from pipeline.studies.imprint.glyph import spectral_norm
from pipeline.studies.imprint.model import make_optimizers, w2
from pipeline.studies.imprint.muon import NewtonSchulz


@dataclass
class Data:
    x_train: torch.Tensor  # [N, 784], normalised, on the device, in the model dtype
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


@dataclass
class History:
    """Per record (epoch 0 = before training, then after each epoch)."""

    train_acc: list[float] = field(default_factory=list)
    test_acc: list[float] = field(default_factory=list)
    spectral_norm_w2: list[float] = field(default_factory=list)
    w2: list[np.ndarray] = field(default_factory=list)  # fp32 snapshots, 128x128
    train_loss: list[float] = field(default_factory=list)  # mean batch loss of each epoch (1..E)
    first_batch_loss: list[float] = field(default_factory=list)  # loss at batch 0 of each epoch
    epoch_seconds: list[float] = field(default_factory=list)


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int) -> float:
    """Eval-mode accuracy (fraction) in the model's dtype, batch by batch (the seed: bf16)."""
    model.eval()
    correct = 0
    for i in range(0, x.shape[0], batch_size):
        correct += int((model(x[i : i + batch_size]).argmax(1) == y[i : i + batch_size]).sum())
    return correct / x.shape[0]


def record(model: nn.Module, data: Data, hist: History, batch_size: int, test_batch_size: int,
           train_acc: bool = True) -> None:
    """Accuracies and W2 after an epoch; ``train_acc=False`` skips the pass over the training set (nan)."""
    hist.train_acc.append(accuracy(model, data.x_train, data.y_train, batch_size) if train_acc else float("nan"))
    hist.test_acc.append(accuracy(model, data.x_test, data.y_test, test_batch_size))
    snap = w2(model).detach().to("cpu", torch.float32).numpy().copy()
    hist.w2.append(snap)
    hist.spectral_norm_w2.append(spectral_norm(snap))


def train(model: nn.Module, data: Data, *, optimizer: str, epochs: int, lr: float, momentum: float,
          ns_steps: int, ns_dtype: torch.dtype, batch_size: int, test_batch_size: int, data_seed: int,
          ns: NewtonSchulz | None = None, train_acc: bool = True, log=None,
          track=lambda iterable, **_: iterable) -> History:
    """Fresh optimisers, record, then ``epochs`` epochs of shuffled batches, recording after each."""
    opts = make_optimizers(model, optimizer, lr, momentum, ns_steps, ns_dtype, ns)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(data_seed)  # CPU generator: same order on any device
    n = data.x_train.shape[0]
    hist = History()
    record(model, data, hist, batch_size, test_batch_size, train_acc)
    for epoch in track(range(1, epochs + 1), total=epochs, desc="epochs", unit="epoch"):
        t0 = time.perf_counter()
        model.train()
        perm = torch.randperm(n, generator=gen).to(data.x_train.device)
        losses = []
        for i in range(0, n, batch_size):
            idx = perm[i : i + batch_size]
            model.zero_grad()
            loss = loss_fn(model(data.x_train[idx]), data.y_train[idx])
            loss.backward()
            for opt in opts:
                opt.step()
            losses.append(loss.detach())
        losses_t = torch.stack(losses).float().cpu()
        hist.first_batch_loss.append(float(losses_t[0]))
        hist.train_loss.append(float(losses_t.mean()))
        record(model, data, hist, batch_size, test_batch_size, train_acc)
        hist.epoch_seconds.append(time.perf_counter() - t0)
        if log:
            log(f"epoch {epoch}/{epochs}: loss {hist.train_loss[-1]:.4f}, train acc "
                f"{hist.train_acc[-1]:.4f}, test acc {hist.test_acc[-1]:.4f}, "
                f"||W2||_2 {hist.spectral_norm_w2[-1]:.3f} ({hist.epoch_seconds[-1]:.1f} s)")
    return hist
