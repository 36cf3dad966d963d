"""extract@F<k>: the headline numbers of figure family F<k>, computed from the sweeps it reads (its
metrics function in ``headlines.py``, named in families.py), without drawing.

Writes ``headline.json`` in its folder (the render reads the learning rates it selected there) and the
same numbers as ``reports/metrics/mupc_training_extract@F<k>.json``, which the claims read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pipeline.contract import Context, Output
from pipeline.studies.mupc.training import headlines
from pipeline.studies.mupc.training.cells import Env
from pipeline.studies.mupc.training.config import FiguresParams, Restriction
from pipeline.studies.mupc.training.families import FAMILIES
from pipeline.studies.mupc.training.sweep_reader import Sweeps, from_reader

HEADLINE = "headline.json"


def measurer(family: str) -> Callable[[Env], None]:
    """The function that measures ``family`` with its sweeps and arguments (its entry in families.py)."""
    spec = FAMILIES[family]
    measure = getattr(headlines, spec.measure)
    return lambda env: measure(env, **spec.sources, **spec.args)


def family_metrics(unit: str, headline: dict[str, Any]) -> dict[str, Any]:
    """The family's metrics: its headline, plus the study-level name of its key numbers."""
    derived = FAMILIES[unit].derived
    if derived is None:
        return headline
    key, fn = derived
    return {**headline, key: getattr(headlines, fn)(headline)}


def extract_family(cfg: FiguresParams, profile: str, unit: str, sweeps: Sweeps) -> dict[str, Any]:
    """The metrics of family ``unit``: its headline numbers and their derived study-level names."""
    env = Env(family=unit, spec=cfg.restrict.get(unit, Restriction()), cfg=cfg, sweeps=sweeps)
    measurer(unit)(env)
    return family_metrics(unit, {"family": unit, "profile": profile, "selection": cfg.selection, **env.headline})


def extract(ctx: Context, unit: str) -> Output:
    out = extract_family(ctx.cfg.figures, ctx.profile, unit, from_reader(ctx.read))
    ctx.log(f"{len(out)} headline keys")
    return Output(json={HEADLINE: out}, metrics=out)
