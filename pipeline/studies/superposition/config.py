"""Params schema of the ``superposition`` section (seed 002: untied toy model of superposition)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pipeline.config import bounded, check, profiles_of


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
class TrainProfile:
    epochs: int = bounded(1, None)
    snapshot_every: int = bounded(1, None)  # weights stored every this many epochs (and at epoch 0)
    seeds: list[int] = bounded(0, None)  # trained together, batched along a leading seed axis

    def check(self, path: str) -> None:
        check(len(self.seeds) > 0, f"{path}.seeds", self.seeds, "a non-empty list")
        check(len(set(self.seeds)) == len(self.seeds), f"{path}.seeds", self.seeds, "distinct seeds")
        check(self.epochs % self.snapshot_every == 0, f"{path}.snapshot_every", self.snapshot_every,
              f"a divisor of epochs ({self.epochs})")


@dataclass(frozen=True)
class RenderProfile:
    figure_seeds: list[int] = bounded(0, None)  # seeds whose geometry / heat-map figures are drawn
    panel_epochs: list[int] = bounded(0, None)  # epochs of the static small multiples
    html_frames: int = bounded(2, 200)  # slider frames of the interactive HTML (subsampled snapshots)
    zoom_epochs: list[int] = bounded(0, None)  # [from, to] of the loss curve's zoomed panel


@dataclass(frozen=True)
class Profile:
    train: TrainProfile  # what the train stages read (changing it retrains)
    render: RenderProfile  # what only the render stages read

    def check(self, path: str) -> None:
        t, r = self.train, self.render
        for s in r.figure_seeds:
            check(s in t.seeds, f"{path}.render.figure_seeds", s, f"seeds of this profile {t.seeds}")
        check(len(r.panel_epochs) > 0, f"{path}.render.panel_epochs", r.panel_epochs, "a non-empty list")
        for e in r.panel_epochs:
            check(e <= t.epochs and e % t.snapshot_every == 0, f"{path}.render.panel_epochs", e,
                  f"multiples of snapshot_every ({t.snapshot_every}) up to epochs ({t.epochs})")
        z = r.zoom_epochs
        check(len(z) == 2 and z[0] < z[1] <= t.epochs, f"{path}.render.zoom_epochs", z,
              f"[from, to] with from < to <= epochs ({t.epochs})")


Profiles = profiles_of(Profile)


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
    variants: dict[str, Variant]  # the train/render foreach keys
    render_units: dict[str, str]  # render foreach keys -> metrics file name (for dvc.yaml), see check
    plateau: Plateau
    profiles: Profiles

    def check(self, path: str) -> None:
        check(len(self.variants) > 0, f"{path}.variants", self.variants, "at least one variant")
        check("summary" not in self.variants, f"{path}.variants", "summary", "any name but 'summary'")
        want = {**{v: f"superposition_{v}.json" for v in self.variants}, "summary": "superposition.json"}
        check(self.render_units == want, f"{path}.render_units", self.render_units,
              f"each variant plus summary with its metrics file name: {want}")

    def active(self, profile: str) -> Profile:
        return getattr(self.profiles, profile)


SCHEMA = Superposition
