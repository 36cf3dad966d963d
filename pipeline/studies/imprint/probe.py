"""Calibration probe of imprint: one training step of the MLP with the study's optimiser set-up, timed."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from pipeline.device import cpu_threads
from pipeline.studies.imprint.cost import P, muon_flops
from pipeline.studies.imprint.model import DTYPES, build_mlp, make_optimizers
from pipeline.studies.imprint.muon import NewtonSchulz


def train_step(*, optimizer: str, batch: int, precision: str, ns_precision: str, ns_steps: int,
               threads: int | None, device: str, budget: float) -> tuple[Callable[[], None], float]:
    """Forward, backward and optimiser step on a random batch (the training loop's body)."""
    if threads and device.startswith("cpu"):
        torch.set_num_threads(cpu_threads(threads))
    dtype = DTYPES[precision]
    model = build_mlp(0, dtype).to(device)
    opts = make_optimizers(model, optimizer, 1e-3, 0.95, ns_steps, DTYPES[ns_precision], NewtonSchulz(False))
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 784, generator=g).to(device=device, dtype=dtype)
    y = torch.randint(0, 10, (batch,), generator=g).to(device)
    loss_fn = nn.CrossEntropyLoss()

    def step() -> None:
        model.zero_grad()
        loss_fn(model(x), y).backward()
        for opt in opts:
            opt.step()
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    return step, 6 * P * batch + (muon_flops(ns_steps) if optimizer == "muon" else 0)
