"""Params schema of `mupc.figures` (to be completed)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FiguresParams:
    pass
