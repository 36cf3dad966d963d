"""The untied toy model of superposition (seed 002), trained for many seeds at once.

Model: h = W_E x (W_E: n×f), ŷ = ReLU(W_U h) (W_U: f×n), no biases; tied variant W_U = W_Eᵀ.
Data: the f one-hot vectors (X = I_f), full batch, so the whole output is ReLU(W_U W_E)ᵀ and the loss
is the MSE mean ‖ReLU(W_U W_E) − I‖²_F / f².

Seeds are batched along a leading axis: W_E is [S, n, f], W_U is [S, f, n]; one epoch is one full-batch
SGD step computed with two ``bmm``s and closed-form gradients (the same ones autograd gives for the
seed's ``nn.Module``; ``tests/superposition`` checks both against a per-seed autograd reference).
The seed's DataLoader shuffles the 50 rows each epoch; with a full batch that only permutes the terms
of the loss and gradient sums, so it changes results by float rounding only and is dropped here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn


def init_weights(seed: int, f: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The seed's init for one seed: ``manual_seed(seed)``, then W_E, then W_U (PyTorch default
    ``nn.Linear`` init, U(±1/√fan_in)), on CPU. The global RNG state is left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        w_e = nn.Linear(f, n, bias=False).weight.detach().clone()
        w_u = nn.Linear(n, f, bias=False).weight.detach().clone()
    return w_e, w_u


def init_batch(seeds: list[int], f: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Stacked inits: W_E [S, n, f], W_U [S, f, n] (CPU, float32)."""
    pairs = [init_weights(s, f, n) for s in seeds]
    return torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])


def lr_at(epoch: int, lr: float, schedule: str, epochs: int, decay_total: float, decay_steps: int) -> float:
    """Learning rate used in (0-based) ``epoch``.

    ``constant``: the seed as it runs (its ``scheduler.step()`` sits after the epoch loop, so the rate
    never changes). ``intended``: StepLR with step ``epochs // decay_steps`` and gamma
    ``decay_total ** (-1 / decay_steps)`` stepped every epoch (lr/decay_total by the end). The literal
    fix (gamma = 3000**(-100) = 0.0) would freeze the model from epoch 500 and is not offered.
    """
    if schedule == "constant":
        return lr
    if schedule == "intended":
        step = max(epochs // decay_steps, 1)
        return lr * (decay_total ** (-1.0 / decay_steps)) ** (epoch // step)
    raise ValueError(f"unknown lr_schedule {schedule!r}")


@dataclass
class History:
    losses: np.ndarray  # [epochs, S]: loss of epoch e (1-based e = index + 1), taken before its update
    snap_epochs: np.ndarray  # [K]: completed epochs at each snapshot (0 = init)
    w_e: np.ndarray  # [K, S, n, f]
    w_u: np.ndarray  # [K, S, f, n]


def loss_and_grads(w_e: torch.Tensor, w_u: torch.Tensor, eye: torch.Tensor, tied: bool
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Per-seed MSE loss [S] and its gradients (dW_E, dW_U); for ``tied`` dW_E is the full gradient
    of the shared matrix and dW_U is None."""
    m = torch.bmm(w_u, w_e)  # [S, f, f]
    r = torch.relu(m)
    diff = r - eye
    numel = eye.shape[-1] * eye.shape[-2]
    loss = diff.square().sum(dim=(1, 2)) / numel
    g = torch.where(m > 0, diff, torch.zeros_like(diff)) * (2.0 / numel)  # dL/dM (ReLU'(0) = 0)
    g_e = torch.bmm(w_u.transpose(1, 2), g)  # [S, n, f]
    g_u = torch.bmm(g, w_e.transpose(1, 2))  # [S, f, n]
    if tied:
        return loss, g_e + g_u.transpose(1, 2), None
    return loss, g_e, g_u


def train_batched(w_e0: torch.Tensor, w_u0: torch.Tensor, *, epochs: int, lr: float, tied: bool,
                  snapshot_every: int, lr_schedule: str = "constant", decay_total: float = 3000.0,
                  decay_steps: int = 100, device: str = "cpu", dtype: torch.dtype = torch.float32,
                  track: Callable[..., Any] = lambda iterable, **_: iterable) -> History:
    """Full-batch SGD for all seeds at once; losses stay on the device until the end (no syncs)."""
    s, n, f = w_e0.shape
    w_e = w_e0.to(device=device, dtype=dtype).clone()
    w_u = (w_e.transpose(1, 2) if tied else w_u0.to(device=device, dtype=dtype)).clone()
    eye = torch.eye(f, device=device, dtype=dtype)
    losses = torch.empty(epochs, s, device=device, dtype=dtype)
    n_snap = epochs // snapshot_every + 1
    snaps_e = torch.empty(n_snap, s, n, f, device=device, dtype=dtype)
    snaps_u = torch.empty(n_snap, s, f, n, device=device, dtype=dtype)
    snaps_e[0], snaps_u[0] = w_e, w_u
    k = 1
    with torch.no_grad():
        for epoch in track(range(epochs), total=epochs, desc="epochs (all seeds)", unit="epoch"):
            rate = lr_at(epoch, lr, lr_schedule, epochs, decay_total, decay_steps)
            loss, g_e, g_u = loss_and_grads(w_e, w_u, eye, tied)
            losses[epoch] = loss
            w_e.sub_(g_e, alpha=rate)
            if tied:
                w_u = w_e.transpose(1, 2)
            else:
                w_u.sub_(g_u, alpha=rate)
            if (epoch + 1) % snapshot_every == 0:
                snaps_e[k], snaps_u[k] = w_e, w_u
                k += 1
    return History(losses=losses.cpu().numpy(), snap_epochs=np.arange(n_snap) * snapshot_every,
                   w_e=snaps_e.cpu().numpy(), w_u=snaps_u.cpu().numpy())


class SeedNet(nn.Module):
    """The seed's ``Net`` (ReLU output, no final bias): a per-seed autograd reference for tests."""

    def __init__(self, f: int, n: int, tied: bool):
        super().__init__()
        self.embedding = nn.Linear(f, n, bias=False)
        self.unembedding = nn.Linear(n, f, bias=False)
        if tied:  # as in the seed: a second Parameter sharing W_E's storage (updates add up)
            self.unembedding.weight = nn.Parameter(self.embedding.weight.transpose(0, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.unembedding(self.embedding(x)))


def seed_reference(seed: int, f: int, n: int, epochs: int, lr: float, tied: bool = False,
                   shuffle: bool = True) -> tuple[list[float], SeedNet]:
    """The seed's loop for one seed (manual_seed, model, SGD, row-shuffled full batch each epoch)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = SeedNet(f, n, tied)
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        data = torch.eye(f)
        crit = nn.MSELoss()
        losses = []
        for _ in range(epochs):
            batch = data[torch.randperm(f)] if shuffle else data
            opt.zero_grad()
            loss = crit(model(batch), batch)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses, model
