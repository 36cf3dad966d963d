"""What a zero_init run computes, counted from the MLP's shapes (``make plan``; light: no torch).

The MLP 784-784-n_h-n_h-10 trains with SGD, batch 64: 6·P FLOPs per image (forward and backward; P = the
weights' multiply-adds), every image of the budget's subset once per epoch (``max_iters`` caps it), and
a test pass (2·P per test image) after each epoch. The rank points: at initialisation, at every logged
step (``batch_idx % log_interval == 0``) and after the last iteration two singular-value decompositions
of the n_h×n_h l3 weight (W3 − I and W3 − W3₀), and at each epoch's end one; singular values only of an
n×n matrix: 8n³/3 FLOPs (Golub–Kahan bidiagonalisation, 4mn² − 4n³/3, Golub & Van Loan §5.4).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from pipeline.contract import Cost, Work
from pipeline.device import cpu_threads
from pipeline.studies.zero_init.config import ZeroInitParams

IN = 784
SPLIT = {"train": 60_000, "test": 10_000}


def weights(n_h: int) -> int:
    """Multiply-adds of one image's forward pass."""
    return IN * IN + IN * n_h + n_h * n_h + n_h * 10


def svd_flops(n: int) -> float:
    """Singular values of an n×n matrix."""
    return 8 * n**3 / 3


def train_cost(cfg: ZeroInitParams, unit: str, device: str, previous: Callable[[str], Any] | None = None) -> Cost:
    run = cfg.runs[unit]
    b = cfg.budgets[run.setting]
    n, n_test = b.train_subset or SPLIT["train"], b.test_subset or SPLIT["test"]
    batches = math.ceil(n / cfg.batch_size)
    iters = b.epochs * batches if b.max_iters is None else min(b.epochs * batches, b.max_iters)
    epochs = math.ceil(iters / batches)
    train = 6 * weights(run.n_h) * iters * cfg.batch_size + epochs * 2 * weights(run.n_h) * n_test
    logged = epochs * math.ceil(batches / b.log_interval)
    svds = 2 * (1 + logged + 1) + epochs
    threads = cpu_threads(cfg.cpu_threads)
    rank_device = "cpu" if cfg.rank_on == "cpu" else device
    work = (Work(f"SGD n_h={run.n_h}, batch {cfg.batch_size}", "sgd_step",
                 {"n_h": run.n_h, "bias": cfg.settings[run.setting].bias is not None, "batch": cfg.batch_size,
                  "threads": threads}, train),
            Work(f"{svds} SVDs of {run.n_h}×{run.n_h} (float32, {rank_device})", "svdvals",
                 {"n": run.n_h, "device": rank_device, "threads": threads}, svds * svd_flops(run.n_h)))
    return Cost(runs=1, groups=1, work=work, note=f"{iters:,} iterations, {svds} rank SVDs")
