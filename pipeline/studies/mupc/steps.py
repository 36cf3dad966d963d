"""Stage contract of the μPC study: dispatches each unit to the analysis or the training part."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from pipeline.studies.mupc.analysis import steps as analysis
from pipeline.studies.mupc.figures import steps as figures
from pipeline.studies.mupc.training import steps as training

PARTS: dict[str, ModuleType] = {"analysis": analysis, "training": training, "figures": figures}


def _part(cfg: Any, kind: str, unit: str) -> tuple[ModuleType, Any]:
    for name, mod in PARTS.items():
        sub = getattr(cfg, name)
        if unit in mod.units(sub, kind):
            return mod, sub
    raise KeyError(unit)


def datasets(cfg: Any) -> tuple[str, ...]:
    return tuple(sorted({d for name, mod in PARTS.items() for d in mod.datasets(getattr(cfg, name))}))


def units(cfg: Any, kind: str) -> list[str]:
    return [u for name, mod in PARTS.items() for u in mod.units(getattr(cfg, name), kind)]


def train(ctx: Any, unit: str) -> None:
    mod, sub = _part(ctx.cfg, "train", unit)
    mod.train(ctx, sub, unit)


def extract(ctx: Any, unit: str) -> None:
    mod, sub = _part(ctx.cfg, "extract", unit)
    mod.extract(ctx, sub, unit)


def render(ctx: Any, unit: str) -> list:
    mod, sub = _part(ctx.cfg, "render", unit)
    return mod.render(ctx, sub, unit)
