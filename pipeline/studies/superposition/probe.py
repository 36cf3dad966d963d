"""Calibration probe of superposition: epochs of the batched model at the variant's real shape, timed."""

from __future__ import annotations

from collections.abc import Callable

import torch

from pipeline.device import cpu_threads
from pipeline.studies.superposition.cost import epoch_flops
from pipeline.studies.superposition.model import init_batch, loss_and_grads


def epoch(*, seeds: int, f: int, n: int, tied: bool, dtype: str, threads: int, device: str,
          budget: float) -> tuple[Callable[[], None], float]:
    """One full-batch SGD epoch of every seed (``train_batched``'s loop body; no snapshot)."""
    if device.startswith("cpu"):
        torch.set_num_threads(cpu_threads(threads))
    w_e0, w_u0 = init_batch(list(range(seeds)), f, n)
    w_e = w_e0.to(device=device, dtype=getattr(torch, dtype))
    w_u = w_e.transpose(1, 2).clone() if tied else w_u0.to(device=device, dtype=getattr(torch, dtype))
    eye = torch.eye(f, device=device, dtype=w_e.dtype)
    losses = torch.empty(1, seeds, device=device, dtype=w_e.dtype)

    @torch.no_grad()
    def step() -> None:
        loss, g_e, g_u = loss_and_grads(w_e, w_u, eye, tied)
        losses[0] = loss
        w_e.sub_(g_e, alpha=1e-3)
        if g_u is not None:
            w_u.sub_(g_u, alpha=1e-3)
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    return step, epoch_flops(seeds, f, n)
