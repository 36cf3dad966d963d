"""Schema of the ``imprint`` section (``params/imprint.yaml``), resolved for the active profile."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pipeline.config import bounded, check


@dataclass(frozen=True)
class RunSpec:
    """One training configuration: which init, which optimiser, which data order."""

    init: Literal["glyph", "random"]
    optimizer: Literal["adam", "muon"]
    data_seed: int  # seeds the shuffling generator of this run


@dataclass(frozen=True)
class FigureSpec:
    """One composite figure: W2 grid (Adam row, Muon row) + test-accuracy and spectral-norm panels."""

    adam: str  # run key drawn in the Adam row
    muon: str  # run key drawn in the Muon row
    vmin: float  # colour limits of the W2 panels (seed: [-0.05, 0.45] glyph, [-0.1, 0.1] random)
    vmax: float
    cbar_ticks: int = bounded(2, 21)
    glyph_panels: bool  # also draw the single panels (bitmap, W2 at init, trained W2)

    def check(self, path: str) -> None:
        check(self.vmax > self.vmin, f"{path}.vmax", self.vmax, f"a number above vmin = {self.vmin}")


@dataclass(frozen=True)
class SummarySpec:
    runs: list[str]  # runs whose final numbers go to reports/metrics/imprint.json


SPREAD = "seed_spread"  # the train/extract/render unit of the init-seed spread


@dataclass(frozen=True)
class SpreadSpec:
    """Epoch-1 test accuracy of one init with Adam and with Muon over several init seeds: whether the
    gap between the optimisers is the seed's or the precision's (unit ``seed_spread``)."""

    init: Literal["glyph", "random"]
    init_seeds: list[int] = bounded(0, None)  # one init per seed, each trained with Adam and with Muon; [] = off
    epochs: int = bounded(1, 1000)  # epochs per run (1: the epoch-1 gap)
    data_seed: int = bounded(0, None)  # the data order of every run (the main runs' is 1)

    def check(self, path: str) -> None:
        check(len(set(self.init_seeds)) == len(self.init_seeds), f"{path}.init_seeds", self.init_seeds,
              "distinct seeds")


@dataclass(frozen=True)
class ImprintParams:
    # auto (default): Droid Sans Fallback where installed (the seed's font), else the font-free rectangles;
    # droid: the font or an error; rectangles: font-free, bit-exact anywhere. Stages record which was used.
    glyph: Literal["auto", "droid", "rectangles"]
    glyph_scale: float  # 0.4 x bitmap is added to W2
    init_seed: int  # one random init shared by all runs
    compile: bool  # torch.compile the model (seed: yes; needs a C++ toolchain on CPU)
    # torch.compile Muon's Newton-Schulz step (the seed's @torch.compile). Changes each update by ~2.5 %
    # (fused bf16 rounding); falls back to eager, recorded, when compiling is impossible.
    ns_compile: bool
    lr: float = bounded(0.0, 1.0, lo_open=True)  # Adam lr and Muon lr (seed: 1e-3 both)
    momentum: float = bounded(0.0, 1.0)  # Muon heavy-ball momentum
    ns_steps: int = bounded(1, 50)  # Newton-Schulz iterations
    batch_size: int = bounded(1, 60000)
    test_batch_size: int = bounded(1, 100000)
    mean: float  # MNIST normalisation (seed: 0.1307, 0.3081)
    std: float = bounded(0.0, None, lo_open=True)
    # bf16 = parameters, grads and optimiser state in bf16, as the seed; fp32 where bf16 matmuls are
    # slow (CPUs without AVX512-BF16 or AMX).
    precision: Literal["bf16", "fp32"]
    ns_precision: Literal["bf16", "fp32"]  # dtype of Muon's Newton-Schulz iteration (seed: bf16)
    epochs: int = bounded(1, 1000)
    n_train: int | None = bounded(1, 60000)  # null = all 60,000 (first n images otherwise)
    n_test: int | None = bounded(1, 10000)  # null = all 10,000
    torch_threads: int | None = bounded(1, 256)  # null = torch's default
    runs: dict[str, RunSpec]
    figures: dict[str, FigureSpec]  # render units
    summary: dict[str, SummarySpec]  # extract units
    spread: SpreadSpec  # the init-seed spread (train, extract and render unit "seed_spread")

    def spread_units(self) -> list[str]:
        return [SPREAD] if self.spread.init_seeds else []

    def check(self, path: str) -> None:
        check(len(self.runs) > 0, f"{path}.runs", self.runs, "at least one run")
        for name, keys in (("runs", self.runs), ("figures", self.figures), ("summary", self.summary)):
            check(SPREAD not in keys, f"{path}.{name}", SPREAD, f"any key but {SPREAD!r} (the spread unit)")
        runs = sorted(self.runs)
        for name, fig in self.figures.items():
            for opt in ("adam", "muon"):
                key = getattr(fig, opt)
                check(key in self.runs, f"{path}.figures.{name}.{opt}", key, f"a run key: {runs}")
                check(self.runs[key].optimizer == opt, f"{path}.figures.{name}.{opt}", key,
                      f"a run whose optimizer is {opt!r}")
            check(self.runs[fig.adam].init == self.runs[fig.muon].init, f"{path}.figures.{name}.muon",
                  fig.muon, f"a run with the same init as {fig.adam!r}")
            if fig.glyph_panels:
                check(self.runs[fig.adam].init == "glyph", f"{path}.figures.{name}.glyph_panels", True,
                      "true only for a figure of glyph-init runs")
        for name, summ in self.summary.items():
            for i, key in enumerate(summ.runs):
                check(key in self.runs, f"{path}.summary.{name}.runs[{i}]", key, f"a run key: {runs}")

