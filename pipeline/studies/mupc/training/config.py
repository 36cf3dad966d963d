"""Params schema of ``mupc.training``: the training sweeps S1–S12 (PC) and B1–B2 (BP), spec §5.2/§7.

Layout in ``params.yaml``::

    mupc:
      training:
        sweep_ids: [S1, ..., S12, B1, B2]      # the foreach keys of mupc_training_train
        threads: 1                             # torch CPU threads per stage (ignored on CUDA)
        profiles:
          smoke | gpu_medium | paper:
            data: {n_train: 2048, n_test: 1024}   # null = the full split
            dtype: float32
            allow_tf32: false
            max_stack: 64                         # runs trained together in one group (0 = all)
            hessian_dense_max_n: 4096             # dense eigvalsh up to this n = N·H
            train_loss_log_every: 1               # MLflow subsampling of train_loss
            sweeps:
              S1:
                kind: pc                          # pc | bp
                metrics: hessian                  # basic | hessian
                grids:                            # union of cartesian blocks
                  - {datasets: [mnist], N: [128], H: [8, 16, 32], acts: [linear], skips: [false],
                     init: standard, param: sp, T: [500], act_optim: gd, act_lrs: [0.5],
                     param_lrs: [0.001], activity_decays: [0], epochs: 1, test_every: 100,
                     seeds: [0, 1, 2]}

A sweep's runs are the union (first occurrence order, duplicates dropped) of the cartesian products
of its blocks; ``T: ["H"]`` means T = H. For BP sweeps ``param_lrs`` are the BP learning rates and
``T``/``act_optim``/``act_lrs`` are not used (leave the defaults). Expansion to
:class:`~pipeline.studies.mupc.runs.RunConfig` lives in :mod:`pipeline.studies.mupc.training.sweeps`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pipeline.config import bounded, check, profiles_of

SWEEP_IDS = ("S1", "S2", "S3", "S4", "S5", "S6", "S7", "S8", "S9", "S10", "S11", "S12", "B1", "B2")

Dataset = Literal["mnist", "fashion_mnist"]
Act = Literal["linear", "tanh", "relu"]
Init = Literal["standard", "standard_gauss", "one_over_N", "orthogonal"]
Param = Literal["sp", "mupc", "ntp", "depth_mup"]


@dataclass(frozen=True)
class Grid:
    """One cartesian block of runs."""

    datasets: list[Dataset]
    N: list[int] = bounded(1, None)
    H: list[int] = bounded(1, None)
    acts: list[Act]
    skips: list[bool]
    init: Init
    param: Param
    epochs: int = bounded(1, None)
    test_every: int = bounded(1, None)
    seeds: list[int] = bounded(0, None)
    param_lrs: list[float] = bounded(0, None, lo_open=True)  # Adam lr of the weights (BP: the lr)
    T: list[int | Literal["H"]] = field(default_factory=lambda: [0])  # PC: int >= 1 or "H" (T = H)
    act_optim: Literal["gd", "adam"] = "gd"
    act_lrs: list[float] = bounded(0, None, default=(0.0,))
    activity_decays: list[float] = bounded(0, None, default=(0.0,))

    def check(self, path: str) -> None:
        for name in ("datasets", "N", "H", "acts", "skips", "seeds", "param_lrs", "T", "act_lrs",
                     "activity_decays"):
            check(len(getattr(self, name)) > 0, f"{path}.{name}", getattr(self, name), "a non-empty list")
        for i, t in enumerate(self.T):
            check(t == "H" or (isinstance(t, int) and t >= 0), f"{path}.T[{i}]", t, "an integer >= 0 or 'H'")


@dataclass(frozen=True)
class Sweep:
    kind: Literal["pc", "bp"]
    metrics: Literal["basic", "hessian"]
    grids: list[Grid]

    def check(self, path: str) -> None:
        check(len(self.grids) > 0, f"{path}.grids", self.grids, "at least one grid block")
        check(self.kind == "pc" or self.metrics == "basic", f"{path}.metrics", self.metrics,
              "'basic' for BP sweeps (the activity Hessian is a PC quantity)")
        for i, g in enumerate(self.grids):
            gp = f"{path}.grids[{i}]"
            if self.kind == "pc":
                check(all(t == "H" or t >= 1 for t in g.T), f"{gp}.T", g.T, "integers >= 1 or 'H' for PC sweeps")
                check(bool(g.act_lrs) and all(v > 0 for v in g.act_lrs), f"{gp}.act_lrs", g.act_lrs,
                      "a non-empty list of positive numbers for PC sweeps")
            else:
                check(all(g.skips), f"{gp}.skips", g.skips, "[true] (BP Depth-μP networks always use skips)")


@dataclass(frozen=True)
class DataSubset:
    n_train: int | None = bounded(64, None)  # first n images of the train split; null = all
    n_test: int | None = bounded(64, None)  # first n images of the test split; null = all


@dataclass(frozen=True)
class TrainingProfile:
    data: DataSubset
    sweeps: dict[str, Sweep]
    dtype: Literal["float32", "float64"] = "float32"
    allow_tf32: bool = False  # CUDA only; recorded in every run's config.json
    max_stack: int = bounded(0, None, default=64)  # runs per stacked group (0 = no limit)
    hessian_dense_max_n: int = bounded(1, None, default=4096)
    train_loss_log_every: int = bounded(1, None, default=1)


Profiles = profiles_of(TrainingProfile)


@dataclass(frozen=True)
class TrainingParams:
    sweep_ids: list[str]
    profiles: Profiles
    threads: int = bounded(1, None, default=1)

    def check(self, path: str) -> None:
        for sid in self.sweep_ids:
            check(sid in SWEEP_IDS, f"{path}.sweep_ids", sid, f"one of {list(SWEEP_IDS)}")
        check(len(set(self.sweep_ids)) == len(self.sweep_ids), f"{path}.sweep_ids", self.sweep_ids,
              "unique ids")
        for pname in ("smoke", "gpu_medium", "paper"):
            prof: TrainingProfile = getattr(self.profiles, pname)
            pp = f"{path}.profiles.{pname}.sweeps"
            check(sorted(prof.sweeps) == sorted(self.sweep_ids), pp, sorted(prof.sweeps),
                  f"exactly the sweep_ids {self.sweep_ids}")
            for sid, sw in prof.sweeps.items():
                want = "bp" if sid.startswith("B") else "pc"
                check(sw.kind == want, f"{pp}.{sid}.kind", sw.kind, repr(want))

    def profile(self, name: str) -> TrainingProfile:
        check(name in ("smoke", "gpu_medium", "paper"), "profile", name, "smoke, gpu_medium, paper")
        return getattr(self.profiles, name)
