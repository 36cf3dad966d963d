"""Params schema of `mupc.analysis` (to be completed)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AnalysisParams:
    pass
