"""Schema of ``params/zero_init.yaml`` (ZerO initialisation, Figure 3 of arXiv 2110.12661),
resolved for the active profile.

The profile decides how long each *setting* trains (``budgets``) and which runs each figure draws
(``figures.<fig>.runs``); the train units are exactly the runs the figures draw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pipeline.config import bounded, check

Init = Literal["zero", "partial_identity", "random", "one", "spray"]


@dataclass(frozen=True)
class RunSpec:
    """One training configuration (a ``zero_init_train`` unit when a figure draws it)."""

    init: Init
    n_h: int = bounded(1, 65536)
    setting: str = "seed"  # a key of ``zero_init.settings`` (bias) and of ``zero_init.budgets``


@dataclass(frozen=True)
class StepLR:
    """``torch.optim.lr_scheduler.StepLR`` stepped once per epoch: epoch e (1-based) trains with
    lr · gamma^⌊(e − 1) / step_size⌋. The notebooks' StepLR(step_size=12, gamma=0.7) changes the lr
    from epoch 13 on, so it matters only for budgets of more than 12 epochs."""

    step_size: int = bounded(1, 1000)  # epochs between two decays
    gamma: float = bounded(0.0, 1.0, lo_open=True)  # multiplicative decay (1 = constant lr)


@dataclass(frozen=True)
class Setting:
    """What a setting fixes whatever the profile."""

    bias: float | None  # every bias initialised to this constant; null = layers without bias
    label: str  # what the setting is, e.g. "seed notebook: every bias 0.01"
    step_lr: StepLR | None = None  # per-epoch lr decay (the notebooks' StepLR(12, 0.7)); null = constant lr


@dataclass(frozen=True)
class Budget:
    """How long the runs of one setting train."""

    epochs: int = bounded(1, 1000)
    train_subset: int | None = bounded(64, 60000)  # first N training images; null = all 60000
    test_subset: int | None = bounded(100, 10000)  # first N test images; null = all 10000
    max_iters: int | None = bounded(1)  # stop after this many iterations in total; null = no cap
    log_interval: int = bounded(1)  # log rank/loss/accuracy when batch_idx % log_interval == 0


@dataclass(frozen=True)
class FigureSpec:
    seed_figure: str  # which figure of the seed notebook (or the official notebook) it reproduces
    runs: list[str]  # run keys drawn, in legend order


@dataclass(frozen=True)
class Style:
    """Captions and legends only: render params, so editing them never retrains."""

    titles: dict[str, str]  # figure key -> caption title
    labels: dict[str, str]  # run key -> legend label (default: derived from init and n_h)
    profile_note: str  # the caption's last sentence: what the profile ran (stand-ins are labelled here)


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
    cpu_threads: int = bounded(1, 256)  # torch threads of a training run on the CPU
    settings: dict[str, Setting]
    budgets: dict[str, Budget]  # setting key -> training budget
    runs: dict[str, RunSpec]
    figures: dict[str, FigureSpec]  # render units
    style: Style
    summaries: dict[str, str]  # extract unit -> description (one unit, the study's metrics)

    def train_runs(self) -> list[str]:
        """Run keys the figures draw, in first-use order (each trained once): the train units."""
        return list(dict.fromkeys(key for fig in self.figures.values() for key in fig.runs))

    def check(self, path: str) -> None:
        check(len(self.runs) > 0, f"{path}.runs", self.runs, "at least one run")
        check(set(self.budgets) == set(self.settings), f"{path}.budgets", sorted(self.budgets),
              f"exactly the settings {sorted(self.settings)}")
        for key, run in self.runs.items():
            check(run.setting in self.settings, f"{path}.runs.{key}.setting", run.setting,
                  f"a key of {path}.settings: {sorted(self.settings)}")
        for fkey, fig in self.figures.items():
            fpath = f"{path}.figures.{fkey}.runs"
            check(len(fig.runs) > 0, fpath, fig.runs, "at least one run key")
            for i, k in enumerate(fig.runs):
                check(k in self.runs, f"{fpath}[{i}]", k, f"run keys of {path}.runs: {sorted(self.runs)}")
            check(fkey in self.style.titles, f"{path}.style.titles", sorted(self.style.titles),
                  f"a title for every figure, here {fkey!r}")
        for k in self.style.labels:
            check(k in self.runs, f"{path}.style.labels", k, f"run keys of {path}.runs: {sorted(self.runs)}")
        check(self.summaries.keys() == {"summary"}, f"{path}.summaries", sorted(self.summaries),
              "exactly one unit, 'summary'")
