"""What a superposition variant computes, counted from its shapes (``make plan``; light: no torch).

Every seed of a variant trains in one batch (one group); an epoch is one full-batch SGD step of three
``bmm``s per seed, M = W_U W_E, ∂/∂W_E and ∂/∂W_U, each 2·f·n·f FLOPs: 6·S·f²·n per epoch. At these sizes
an epoch is bound by per-call overhead, not by FLOPs: the probe times whole epochs at the real shape, so
the estimate is epochs × measured seconds per epoch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pipeline.contract import Cost, Work
from pipeline.studies.superposition.config import Superposition


def epoch_flops(seeds: int, f: int, n: int) -> float:
    return 6 * seeds * f * f * n


def train_cost(cfg: Superposition, unit: str, device: str, previous: Callable[[str], Any] | None = None) -> Cost:
    tp, S = cfg.train, len(cfg.train.seeds)
    on = device if cfg.device == "auto" else cfg.device
    shape = {"seeds": S, "f": cfg.f, "n": cfg.n, "tied": cfg.variants[unit].tied, "dtype": cfg.dtype,
             "threads": cfg.threads, "device": on}
    work = Work(f"{tp.epochs:,} epochs of {S} seeds (f={cfg.f}, n={cfg.n}, {cfg.dtype}, {on})", "epoch", shape,
                tp.epochs * epoch_flops(S, cfg.f, cfg.n))
    return Cost(runs=S, groups=1, work=(work,), note=f"{S} seeds batched, {tp.epochs:,} epochs")
