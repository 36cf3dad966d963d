"""Params schema of ``mupc.figures``: which sweeps each figure family reads, per-family options, the
notebook's best-learning-rate tables (spec §5.3), the chance-cell rules (§5.4) and, per profile,
how best learning rates are chosen (the tables, or computed from the runs)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pipeline.config import bounded, check, profiles_of

FAMILIES = tuple(f"F{i}" for i in range(7, 26))
SWEEPS = tuple(f"S{i}" for i in range(1, 13)) + ("B1", "B2")
ACTS = ("linear", "tanh", "relu")
DATASETS = ("mnist", "fashion_mnist")

# What each family needs (a family must read these sweeps, in this order of roles).
FAMILY_SWEEPS: dict[str, tuple[str, ...]] = {
    "F7": ("S1",), "F8": ("S1",), "F9": ("S2",), "F10": ("S3",), "F11": ("S4",), "F12": ("S9",),
    "F13": ("S6",), "F14": ("S7",), "F15": ("S6",), "F16": ("S10",), "F17": ("S11",),
    "F18": ("S6", "S12", "B2"), "F19": ("S10", "S11", "B2"), "F20": ("S12",), "F21": ("B1",),
    "F22": ("S5",), "F23": ("S7",), "F24": ("S6",), "F25": ("S8",),
}


@dataclass(frozen=True)
class FamilySpec:
    # Exactly three slots because dvc.yaml lists three deps per render stage; repeat a sweep to
    # fill (e.g. [S1, S1, S1]). The renderer reads the distinct ones.
    sweeps: list[str]
    datasets: list[str] | None = None  # restrict the datasets drawn (None: all in the sweep)
    acts: list[str] | None = None  # restrict the activations drawn (None: all in the sweep)

    def check(self, path: str) -> None:
        check(len(self.sweeps) == 3, f"{path}.sweeps", self.sweeps,
              "exactly 3 entries (dvc.yaml lists three deps; repeat a sweep to fill)")
        for s in self.sweeps:
            check(s in SWEEPS, f"{path}.sweeps", s, ", ".join(SWEEPS))
        for d in self.datasets or []:
            check(d in DATASETS, f"{path}.datasets", d, ", ".join(DATASETS))
        for a in self.acts or []:
            check(a in ACTS, f"{path}.acts", a, ", ".join(ACTS))


@dataclass(frozen=True)
class MupcBest:
    param_lr: dict[str, float]  # dataset -> param lr (MNIST 0.1, F-MNIST 0.05)
    act_lr: dict[str, float]  # act -> activity lr (linear, tanh 1; relu 0.5)


@dataclass(frozen=True)
class BestLrs:
    """The notebook's hard-coded choices (spec §5.3). Keys: dataset, act, H (as text)."""

    S1: dict[str, dict[str, dict[str, float]]]  # activity lr, GD, param lr 1e-3
    S2: dict[str, dict[str, dict[str, float]]]  # Adam on activities
    S3: dict[str, dict[str, dict[str, float]]]  # skips
    S4: dict[str, dict[str, dict[str, float]]]  # orthogonal init
    mupc: MupcBest
    S12: dict[str, dict[str, list[float]]]  # act -> H -> [param lr, act lr] (SP, N=512, skips)
    bp: dict[str, dict[str, dict[str, float]]]  # dataset -> epochs -> act -> lr (Depth-μP BP)

    def check(self, path: str) -> None:
        for name in ("S1", "S2", "S3", "S4"):
            table = getattr(self, name)
            for ds, by_act in table.items():
                check(ds in DATASETS, f"{path}.{name}", ds, ", ".join(DATASETS))
                for act, by_h in by_act.items():
                    check(act in ACTS, f"{path}.{name}.{ds}", act, ", ".join(ACTS))
                    for h, lr in by_h.items():
                        check(h.isdigit(), f"{path}.{name}.{ds}.{act}", h, "integer H keys")
                        check(lr > 0, f"{path}.{name}.{ds}.{act}.{h}", lr, "a positive lr")
        for act, by_h in self.S12.items():
            check(act in ACTS, f"{path}.S12", act, ", ".join(ACTS))
            for h, pair in by_h.items():
                check(len(pair) == 2 and all(v > 0 for v in pair), f"{path}.S12.{act}.{h}", pair,
                      "[param lr, activity lr], both positive")
        for ds in self.mupc.param_lr:
            check(ds in DATASETS, f"{path}.mupc.param_lr", ds, ", ".join(DATASETS))
        for act in self.mupc.act_lr:
            check(act in ACTS, f"{path}.mupc.act_lr", act, ", ".join(ACTS))


@dataclass(frozen=True)
class FiguresProfile:
    # "table": the notebook's §5.3 values (must exist in the profile's grids; checked at render);
    # "computed": per cell the lr with the best mean-over-seeds final test accuracy (an empty run
    # counts as chance) among the runs of the active profile — the rule the notebook's authors
    # used to fill their tables, applied to the grids that exist (smoke, gpu_medium).
    selection: Literal["table", "computed"]
    # SP-baseline cells (S12 / F18 / F20) drawn as chance without loading: act -> list of H.
    chance_cells: dict[str, list[int]]
    max_seeds_128: int = bounded(1, None, default=3)  # F19 reads the first seeds of S10 (notebook: 3)

    def check(self, path: str) -> None:
        for act in self.chance_cells:
            check(act in ACTS, f"{path}.chance_cells", act, ", ".join(ACTS))


FiguresProfiles = profiles_of(FiguresProfile)


@dataclass(frozen=True)
class FiguresParams:
    families: dict[str, FamilySpec]
    best_lrs: BestLrs
    profiles: FiguresProfiles
    chance: float = bounded(0.0, 100.0, default=10.0)  # % accuracy substituted for failed runs
    clean_variants: bool = True  # also render the spec's clean aggregation (padding, masking)

    def check(self, path: str) -> None:
        for fam in self.families:
            check(fam in FAMILIES, f"{path}.families", fam, ", ".join(FAMILIES))
        for fam, spec in self.families.items():
            need = FAMILY_SWEEPS[fam]
            check(set(spec.sweeps) == set(need), f"{path}.families.{fam}.sweeps", spec.sweeps,
                  f"the sweeps {list(need)} (this family reads exactly those)")
