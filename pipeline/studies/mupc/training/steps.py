"""Stage functions of the μPC training part: same contract as pipeline.stage, with the part's config.

`units(cfg, kind)`, `datasets(cfg)`, `train(ctx, cfg, unit)`, `extract(ctx, cfg, unit)`,
`render(ctx, cfg, unit) -> list[Figure]`; `ctx.cfg` is the whole mupc config.
"""

from __future__ import annotations

from typing import Any


def datasets(cfg: Any) -> tuple[str, ...]:
    return ()


def units(cfg: Any, kind: str) -> list[str]:
    return []
