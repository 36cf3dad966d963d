"""Access to the training sweeps' runs for the renderers. A sweep's runs are the ones its train unit
lists in ``index.json`` (the grid of the active profile, expanded by the sweep stage); a run's arrays
are its ``runs/<hash>/arrays.npz`` (format in ``pipeline/studies/mupc/engine/runs.py``). Both come through
the stage's reader, so a renderer reads exactly the runs it selects; nothing is globbed. Tests build
:class:`Sweeps` from explicit grids and synthetic run folders."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline.studies.mupc.engine.runs import RunConfig

Reader = Callable[[str, str, str], Any]  # (kind, unit, file name) -> JSON object or npz arrays


class RenderError(RuntimeError):
    """A figure cannot be drawn from the selected runs (missing run, lr not in the grid...)."""


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


def from_reader(read: Reader) -> Sweeps:
    """The sweeps of the train units, through a stage reader (``ctx.read``)."""

    def expand(sweep: str) -> list[RunConfig]:
        return [RunConfig.from_record(entry["run"]) for entry in read("train", sweep, "index.json")["runs"]]

    def load(sweep: str, rc: RunConfig) -> dict[str, np.ndarray]:
        try:
            return read("train", sweep, f"runs/{rc.hash()}/arrays.npz")
        except FileNotFoundError as exc:
            raise RenderError(f"run {rc.key()} (hash {rc.hash()}) of sweep {sweep} is missing; run the "
                              f"sweep's training stage first ({exc})") from exc

    return Sweeps(expand=expand, load=load)
