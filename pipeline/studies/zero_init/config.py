"""Params schema of the ``zero_init`` section (ZerO initialisation, Figure 3 of arXiv 2110.12661).

Runs and figures are profile-independent keys (the ``foreach`` keys of ``dvc.yaml``). The active
profile decides how long each *setting* trains (epochs, data subset, log interval) and which runs
each figure reads; a run that no figure of the active profile reads is skipped explicitly (logged,
recorded in its ``meta.json`` and in ``reports/metrics/zero_init.json``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pipeline.config import PROFILES, bounded, check

Init = Literal["zero", "partial_identity", "random", "one", "spray"]


@dataclass(frozen=True)
class RunSpec:
    """One training configuration (a ``zero_init_train`` unit)."""

    init: Init
    n_h: int = bounded(1, 65536)
    setting: str = "seed"  # a key of ``zero_init.settings`` (bias) and of each profile's settings


@dataclass(frozen=True)
class Setting:
    """What a setting fixes regardless of the profile."""

    bias: float | None  # every bias initialised to this constant; null = layers without bias
    label: str  # shown in captions, e.g. "seed notebook (bias 0.01)"


@dataclass(frozen=True)
class Budget:
    """How long runs of one setting train under one profile."""

    epochs: int = bounded(1, 1000)
    train_subset: int | None = bounded(64, 60000)  # first N training images; null = all 60000
    test_subset: int | None = bounded(100, 10000)  # first N test images; null = all 10000
    max_iters: int | None = bounded(1)  # stop after this many iterations in total; null = no cap
    log_interval: int = bounded(1)  # log rank/loss/accuracy when batch_idx % log_interval == 0


@dataclass(frozen=True)
class ProfileSpec:
    settings: dict[str, Budget]  # setting key -> training budget under this profile


@dataclass(frozen=True)
class FigureSpec:
    seed_figure: str  # which figure of the seed notebook (or the official notebook) it reproduces
    runs: dict[str, list[str]]  # profile -> run keys drawn, in legend order


@dataclass(frozen=True)
class Style:
    """Captions and legends only: render params, so editing them never retrains."""

    titles: dict[str, str]  # figure key -> caption title
    labels: dict[str, str]  # run key -> legend label (default: derived from init and n_h)
    profile_notes: dict[str, str]  # profile -> caption sentence (stand-ins are labelled here)


@dataclass(frozen=True)
class ZeroInitParams:
    dataset: Literal["mnist"]
    lr: float = bounded(0.0, 10.0, lo_open=True)
    batch_size: int = bounded(1, 60000)
    test_batch_size: int = bounded(1, 10000)
    rank_tol: float = bounded(0.0, 1.0, lo_open=True)  # absolute singular-value cutoff (seed: 1e-4)
    rank_on: Literal["cpu", "device"]  # cpu = float32 CPU copy (faithful to the seed)
    zero_scale: Literal["code", "paper"]  # Hadamard scale 2^(-c/2) (code) or 2^(-(c-1)/2)
    input_dim_line: int = bounded(1)  # the dashed line of Figure 3 (784 = 28 * 28)
    init_seed: int = bounded(0)
    data_seed: int = bounded(0)
    cpu_threads: int = bounded(1, 256)
    runs: dict[str, RunSpec]
    settings: dict[str, Setting]
    figures: dict[str, FigureSpec]
    style: Style
    summaries: dict[str, str]  # extract unit -> description (one unit writes the metrics JSON)
    profiles: dict[str, ProfileSpec]

    def check(self, path: str) -> None:
        check(set(self.profiles) == set(PROFILES), f"{path}.profiles", sorted(self.profiles),
              f"exactly the profiles {list(PROFILES)}")
        check(len(self.runs) > 0, f"{path}.runs", self.runs, "at least one run")
        for key, run in self.runs.items():
            check(run.setting in self.settings, f"{path}.runs.{key}.setting", run.setting,
                  f"a key of {path}.settings: {sorted(self.settings)}")
        for prof, spec in self.profiles.items():
            check(set(spec.settings) == set(self.settings), f"{path}.profiles.{prof}.settings",
                  sorted(spec.settings), f"exactly the settings {sorted(self.settings)}")
        for fkey, fig in self.figures.items():
            fpath = f"{path}.figures.{fkey}"
            check(set(fig.runs) == set(PROFILES), f"{fpath}.runs", sorted(fig.runs),
                  f"one run list per profile {list(PROFILES)}")
            for prof, keys in fig.runs.items():
                check(len(keys) > 0, f"{fpath}.runs.{prof}", keys, "at least one run key")
                for k in keys:
                    check(k in self.runs, f"{fpath}.runs.{prof}", k, f"run keys of {path}.runs: "
                          f"{sorted(self.runs)}")
            check(fkey in self.style.titles, f"{path}.style.titles", sorted(self.style.titles),
                  f"a title for every figure, here {fkey!r}")
        for k in self.style.labels:
            check(k in self.runs, f"{path}.style.labels", k, f"run keys of {path}.runs: {sorted(self.runs)}")
        check(set(self.style.profile_notes) == set(PROFILES), f"{path}.style.profile_notes",
              sorted(self.style.profile_notes), f"exactly the profiles {list(PROFILES)}")
        check(self.summaries.keys() == {"summary"}, f"{path}.summaries", sorted(self.summaries),
              "exactly one unit, 'summary'")


SCHEMA = ZeroInitParams
