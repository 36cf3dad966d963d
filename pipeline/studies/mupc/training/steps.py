"""Stage functions of the μPC training part: one ``train`` unit per sweep (S1…S12, B1, B2).

`units(cfg, kind)`, `datasets(cfg)`, `train(ctx, cfg, unit)`; `ctx.cfg` is the whole mupc config.
"""

from __future__ import annotations

from typing import Any


def datasets(cfg: Any) -> tuple[str, ...]:
    return ("fashion_mnist", "mnist")


def units(cfg: Any, kind: str) -> list[str]:
    return list(cfg.sweep_ids) if kind == "train" else []


def train(ctx: Any, cfg: Any, unit: str) -> None:
    from pipeline.studies.mupc.training.runner import run_sweep

    run_sweep(ctx, cfg, unit)


def extract(ctx: Any, cfg: Any, unit: str) -> None:
    raise KeyError(unit)


def render(ctx: Any, cfg: Any, unit: str) -> list:
    raise KeyError(unit)
