"""Stage functions of the μPC figures part: same contract as pipeline.stage, with the part's config.

`units(cfg, kind)`, `datasets(cfg)`, `train(ctx, cfg, unit)`, `extract(ctx, cfg, unit)`,
`render(ctx, cfg, unit) -> list[Figure]`; `ctx.cfg` is the whole mupc config (the renderers read
the sweep grids of ``ctx.cfg.training`` for the active profile).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from pipeline.config import active
from pipeline.io import write_json
from pipeline.paths import figures_dir
from pipeline.studies.mupc.figures.render import RENDERERS, Env
from pipeline.studies.mupc.figures.source import Sweeps, from_training


def datasets(cfg: Any) -> tuple[str, ...]:
    return ()


def units(cfg: Any, kind: str) -> list[str]:
    return list(cfg.families) if kind == "render" else []


def family_dir(unit: str) -> Path:
    return figures_dir("mupc") / unit


def render_family(cfg: Any, profile: str, unit: str, sweeps: Sweeps, out: Path) -> tuple[list, dict]:
    """Render one family into ``out``; returns (figures, headline numbers)."""
    prof = active(vars(cfg.profiles), profile, "mupc.figures")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    env = Env(family=unit, spec=cfg.families[unit], cfg=cfg, prof=prof, sweeps=sweeps, out=out)
    figs = RENDERERS[unit](env)
    headline = {"family": unit, "profile": profile, "selection": prof.selection, **env.headline}
    write_json(out / "headline.json", headline)
    return figs, headline


def render(ctx: Any, cfg: Any, unit: str) -> list:
    sweeps = from_training(ctx.cfg.training, ctx.profile)
    figs, _ = render_family(cfg, ctx.profile, unit, sweeps, family_dir(unit))
    ctx.log(f"{len(figs)} figures")
    return figs
