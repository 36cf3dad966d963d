"""What an imprint unit computes, counted from the MLP's shapes (``make plan``; light: no torch).

The MLP 784-128-128-64-10: a forward pass costs 2·P FLOPs per image (P = the weights' multiply-adds),
training 6·P per image (forward and backward), every image of ``n_train`` once per epoch (the last
batch is smaller). Muon adds, per iteration and 2-D weight of m×n (m ≤ n), ``ns_steps`` Newton–Schulz
steps of 6m²n (X Xᵀ, A X and A B). Before training and after each epoch a run measures test accuracy
(a forward pass over ``n_test``) and, outside the seed spread, training accuracy (one over ``n_train``);
W2's spectral norm (a 128×128 SVD) is negligible. ``compile`` and ``ns_compile`` are not modelled
(the probe times eager steps).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from pipeline.contract import Cost, Work
from pipeline.studies.imprint.config import ImprintParams

LAYERS = ((128, 784), (128, 128), (64, 128), (10, 64))  # (out, in) of the four Linear layers
P = sum(o * i for o, i in LAYERS)
SPLIT = {"train": 60_000, "test": 10_000}


def muon_flops(ns_steps: int) -> float:
    """Newton–Schulz FLOPs of one Muon step over every 2-D weight."""
    return ns_steps * sum(6 * min(o, i) ** 2 * max(o, i) for o, i in LAYERS)


def run_flops(cfg: ImprintParams, optimizer: str, epochs: int, train_acc: bool) -> float:
    """One run: training, its optimiser's extra work, and the accuracy passes before and after each epoch."""
    n_train, n_test = cfg.n_train or SPLIT["train"], cfg.n_test or SPLIT["test"]
    iters = epochs * math.ceil(n_train / cfg.batch_size)
    train = epochs * 6 * P * n_train + (iters * muon_flops(cfg.ns_steps) if optimizer == "muon" else 0)
    records = (epochs + 1) * 2 * P * (n_test + (n_train if train_acc else 0))
    return train + records


def _work(cfg: ImprintParams, optimizer: str, flops: float, runs: int) -> Work:
    shape = {"optimizer": optimizer, "batch": cfg.batch_size, "precision": cfg.precision,
             "ns_precision": cfg.ns_precision, "ns_steps": cfg.ns_steps, "threads": cfg.torch_threads}
    return Work(f"{optimizer} {cfg.precision} batch {cfg.batch_size}, {runs} run(s)", "train_step", shape, flops)


def spread_cost(cfg: ImprintParams, unit: str, device: str, previous: Callable[[str], Any] | None = None) -> Cost:
    """Every init seed of the spread (``train@seed_spread``) with Adam and with Muon."""
    k, e = len(cfg.spread.init_seeds), cfg.spread.epochs
    work = tuple(_work(cfg, opt, k * run_flops(cfg, opt, e, False), k) for opt in ("adam", "muon"))
    return Cost(runs=2 * k, groups=2 * k, work=work, note=f"{k} init seeds × Adam, Muon; {e} epoch(s)")


def train_cost(cfg: ImprintParams, unit: str, device: str, previous: Callable[[str], Any] | None = None) -> Cost:
    """One run (``train@<run>``)."""
    opt = cfg.runs[unit].optimizer
    return Cost(runs=1, groups=1, work=(_work(cfg, opt, run_flops(cfg, opt, cfg.epochs, True), 1),),
                note=f"{cfg.epochs} epochs, {cfg.precision}")
