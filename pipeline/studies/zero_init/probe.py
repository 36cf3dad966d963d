"""Calibration probes of zero_init: one SGD step of the MLP, and the rank measurement's SVD, timed."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.nn import functional as F  # noqa: N812

from pipeline.device import cpu_threads
from pipeline.studies.zero_init.cost import svd_flops, weights
from pipeline.studies.zero_init.model import MLP, rank_abs
from pipeline.studies.zero_init.train import sgd_step as _sgd

Step = tuple[Callable[[], None], float]


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def sgd_step(*, n_h: int, bias: bool, batch: int, threads: int, device: str, budget: float) -> Step:
    """Forward, NLL loss, backward and the SGD update on a random batch (the training loop's body)."""
    if device.startswith("cpu"):
        torch.set_num_threads(cpu_threads(threads))
    model = MLP(n_h, "random", bias=0.01 if bias else None, seed=0).to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    g = torch.Generator().manual_seed(0)
    x = torch.rand(batch, 784, generator=g).to(device)
    y = torch.randint(0, 10, (batch,), generator=g).to(device)

    def step() -> None:
        for p in params:
            p.grad = None
        F.nll_loss(model(x), y).backward()
        _sgd(params, 0.01)
        _sync(device)

    return step, 6 * weights(n_h) * batch


def svdvals(*, n: int, threads: int, device: str, budget: float) -> Step:
    """One rank measurement's SVD (``rank_abs``: singular values only), n halved until within ``budget``."""
    if device.startswith("cpu"):
        torch.set_num_threads(cpu_threads(threads))
    while n > 64 and svd_flops(n) > budget:
        n //= 2
    w = torch.randn(n, n, generator=torch.Generator().manual_seed(0)).to(device)

    def step() -> None:
        rank_abs(w, 1e-4)
        _sync(device)

    return step, svd_flops(n)
