"""Params schema of `mupc.training` (to be completed)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TrainingParams:
    pass
