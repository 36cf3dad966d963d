"""Params schema of the μPC study: ``mupc.analysis`` (spec F1–F6, F26–F27: Hessian at init, forward
pass, energy theory), ``mupc.training`` (sweeps S1–S12, B1–B2) and ``mupc.figures`` (F7–F25 from the
sweeps, with the notebook's best-learning-rate selections)."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.studies.mupc.analysis.config import AnalysisParams
from pipeline.studies.mupc.figures.config import FiguresParams
from pipeline.studies.mupc.training.config import TrainingParams


@dataclass(frozen=True)
class MupcParams:
    analysis: AnalysisParams
    training: TrainingParams
    figures: FiguresParams


SCHEMA = MupcParams
