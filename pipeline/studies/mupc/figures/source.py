"""Access to the training sweeps' runs: the grids come from the training params of the active
profile (``training.sweeps.expand``), the arrays from the sweep stage's run folders
(``training.sweeps.load_run``). Nothing is globbed: a renderer reads exactly the runs it selects
from the expanded grid. Both callables are injectable (tests use synthetic run folders)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.io import read_npz
from pipeline.paths import study_dir
from pipeline.studies.mupc.runs import RunConfig


class RenderError(RuntimeError):
    """A figure cannot be drawn from the selected runs (missing run, lr not in the grid...)."""


def sweep_dir(sweep: str) -> Path:
    """The training stage's output folder of a sweep (``artifacts/mupc/train/<sweep>``)."""
    return study_dir("mupc", "train", sweep)


def read_run_arrays(folder: Path, rc: RunConfig) -> dict[str, np.ndarray]:
    """Documented run format (``pipeline/studies/mupc/runs.py``): ``runs/<hash>/arrays.npz``."""
    path = folder / "runs" / rc.hash() / "arrays.npz"
    if not path.exists():
        raise RenderError(f"run {rc.key()} (hash {rc.hash()}) is missing under {folder}; "
                          "run the sweep's training stage first")
    return read_npz(path)


@dataclass
class Sweeps:
    expand: Callable[[str], list[RunConfig]]
    load: Callable[[str, RunConfig], dict[str, np.ndarray]]
    _runs: dict[str, list[RunConfig]] = field(default_factory=dict)
    _arrays: dict[tuple[str, str], dict[str, np.ndarray]] = field(default_factory=dict)

    def runs(self, sweep: str) -> list[RunConfig]:
        if sweep not in self._runs:
            self._runs[sweep] = list(self.expand(sweep))
        return self._runs[sweep]

    def arrays(self, sweep: str, rc: RunConfig) -> dict[str, np.ndarray]:
        k = (sweep, rc.hash())
        if k not in self._arrays:
            self._arrays[k] = {n: np.asarray(v) for n, v in self.load(sweep, rc).items()}
        return self._arrays[k]

    def series(self, sweep: str, rc: RunConfig, name: str) -> np.ndarray:
        a = self.arrays(sweep, rc)
        return np.asarray(a[name], dtype=float).ravel() if name in a else np.zeros(0)


def from_training(training_cfg: Any, profile: str) -> Sweeps:
    """Sweeps of the training part (``pipeline.studies.mupc.training.sweeps``)."""
    from pipeline.studies.mupc.training import sweeps as tr  # the training part's module

    def load(sweep: str, rc: RunConfig) -> dict[str, np.ndarray]:
        _config, arrays = tr.load_run(sweep_dir(sweep), rc)
        return arrays

    return Sweeps(expand=lambda s: tr.expand(training_cfg, s, profile), load=load)


def from_folders(grids: dict[str, list[RunConfig]], root: Path) -> Sweeps:
    """Sweeps given explicitly, arrays read from ``root/<sweep>/runs/<hash>/arrays.npz``."""
    return Sweeps(expand=lambda s: grids[s], load=lambda s, rc: read_run_arrays(root / s, rc))
