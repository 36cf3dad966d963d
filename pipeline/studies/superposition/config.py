"""Schema of ``params/superposition.yaml`` (seed 002), resolved for the active profile."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pipeline.config import bounded, check

SUMMARY = "summary"  # the extract/render unit over all variants (loss curves, plateaus)


@dataclass(frozen=True)
class Variant:
    tied: bool  # W_U = W_Eᵀ (the seed's tied=True) or independent W_U (the seed's default here)


@dataclass(frozen=True)
class Plateau:
    """Plateau-then-drop detector (see ``plateau.py``): flat within ``tol`` for ≥ ``window`` epochs,
    then a fall of ≥ ``min_drop`` within ``drop_window`` epochs after the flat stretch."""

    tol: float = bounded(0.0, 1.0, lo_open=True)  # relative: max/min of the loss over the stretch ≤ 1 + tol
    window: int = bounded(2, None)  # minimum plateau length in epochs
    min_drop: float = bounded(0.0, 1.0, lo_open=True)  # relative fall below the plateau's lowest loss
    drop_window: int = bounded(1, None)  # epochs after the plateau in which the fall must happen


@dataclass(frozen=True)
class TrainSettings:
    """What the train stages read (changing it retrains)."""

    epochs: int = bounded(1, None)
    snapshot_every: int = bounded(1, None)  # weights stored every this many epochs (and at epoch 0)
    seeds: list[int] = bounded(0, None)  # trained together, batched along a leading seed axis

    def check(self, path: str) -> None:
        check(len(self.seeds) > 0, f"{path}.seeds", self.seeds, "a non-empty list")
        check(len(set(self.seeds)) == len(self.seeds), f"{path}.seeds", self.seeds, "distinct seeds")
        check(self.epochs % self.snapshot_every == 0, f"{path}.snapshot_every", self.snapshot_every,
              f"a divisor of epochs ({self.epochs})")


@dataclass(frozen=True)
class RenderSettings:
    """What only the render stages read."""

    figure_seeds: list[int] = bounded(0, None)  # seeds whose geometry / heat-map figures are drawn
    panel_epochs: list[int] = bounded(0, None)  # epochs of the static small multiples
    html_frames: int = bounded(2, 200)  # slider frames of the interactive HTML (subsampled snapshots)
    # [from, to] of the loss curve's zoomed panel for a variant without a detected plateau (a variant
    # with one zooms on its longest plateau)
    zoom_epochs: list[int] = bounded(0, None)


@dataclass(frozen=True)
class Superposition:
    f: int = bounded(2, None)  # features (input/output dimension)
    n: int = bounded(1, None)  # hidden dimensions
    lr: float = bounded(0.0, None, lo_open=True)
    lr_schedule: Literal["constant", "intended"]  # constant: the seed as it runs
    lr_decay_total: float = bounded(1.0, None)  # intended schedule: total decay factor over the run
    lr_decay_steps: int = bounded(1, None)  # intended schedule: number of StepLR steps over the run
    device: Literal["cpu", "cuda", "auto"]  # auto: the pipeline's device (CUDA if present)
    dtype: Literal["float32", "float64"]
    threads: int = bounded(1, 64)  # torch CPU threads
    variants: dict[str, Variant]  # the train units; extract/render units are these plus "summary"
    plateau: Plateau
    train: TrainSettings
    render: RenderSettings

    def check(self, path: str) -> None:
        check(len(self.variants) > 0, f"{path}.variants", self.variants, "at least one variant")
        check(SUMMARY not in self.variants, f"{path}.variants", SUMMARY, f"any name but {SUMMARY!r}")
        t, r = self.train, self.render
        for s in r.figure_seeds:
            check(s in t.seeds, f"{path}.render.figure_seeds", s, f"seeds of train.seeds {t.seeds}")
        check(len(r.panel_epochs) > 0, f"{path}.render.panel_epochs", r.panel_epochs, "a non-empty list")
        for e in r.panel_epochs:
            check(e <= t.epochs and e % t.snapshot_every == 0, f"{path}.render.panel_epochs", e,
                  f"multiples of train.snapshot_every ({t.snapshot_every}) up to train.epochs ({t.epochs})")
        z = r.zoom_epochs
        check(len(z) == 2 and z[0] < z[1] <= t.epochs, f"{path}.render.zoom_epochs", z,
              f"[from, to] with from < to <= train.epochs ({t.epochs})")

    def units(self) -> list[str]:
        """The extract and render units: every variant, then the summary over all of them."""
        return [*self.variants, SUMMARY]

