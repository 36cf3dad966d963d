"""Schema of the ``mupc_training`` section (``params/mupc_training.yaml``), resolved for the active profile.

The training sweeps S1–S12 (PC) and B1–B2 (BP), spec §5.2/§7, the project's S13 (standard PC at the deepest
depth over an lr grid), and the figures F7–F25 (and the project's F28) drawn from them (spec §6, with the
notebook's best-learning-rate tables of §5.3 and the chance cells of §5.4)::

    mupc_training:
      sweep_ids: [S1, ..., S13, B1, B2]       # train units (one resumable stage per sweep)
      threads: 1                              # torch CPU threads per stage (ignored on CUDA)
      data: {n_train: null, n_test: null}     # first n images of each split; null = the full split
      dtype: float32                          # sweeps without a dtype of their own
      allow_tf32: true                        # CUDA: float32 products in TF32 (false: full float32)
      cuda_graphs: true                       # CUDA: replay each group's iteration from a CUDA graph
      engine: standard                        # the PC engine's inference step: standard | fused (CUDA, Triton)
      hessian_dense_max_n: {cpu: 1024, cuda: 1024}   # dense eigvalsh of H_z up to n = N·H, per device type
      sweeps:
        S1:
          method: pc                          # pc | bp
          metrics: hessian                    # basic | hessian
          dtype: float64                      # optional: this sweep's dtype (null: the section's)
          grids:                              # union of cartesian blocks
            - {datasets: [mnist], N: [128], H: [8, 16, 32], acts: [linear], skips: [false],
               init: standard, param: sp, T: [500], act_optim: gd, act_lrs: [0.5],
               param_lrs: [0.001], activity_decays: [0], epochs: 1, test_every: 100, seeds: [0, 1, 2]}
      figures:                                # the choices of the render units F7…F28 (families.py)
        restrict: {F18: {acts: [relu]}}       # optional: the datasets / acts a family draws
      profiles: {smoke: {...}, gpu_medium: {...}, paper: {...}}   # overrides of the values above

A sweep's runs are the union (first occurrence order, duplicates dropped) of the cartesian products
of its blocks; ``T: ["H"]`` means T = H. For BP sweeps ``param_lrs`` are the BP learning rates and
``T``/``act_optim``/``act_lrs`` are not used (leave the defaults). Expansion to
:class:`~pipeline.studies.mupc.engine.runs.RunConfig` lives in :mod:`pipeline.studies.mupc.training.sweep_expansion`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import ClassVar, Literal

from pipeline.config import ConfigError, bounded, check, params_file
from pipeline.studies.mupc.training.families import FAMILIES

SWEEP_IDS = ("S1", "S2", "S3", "S4", "S5", "S6", "S7", "S8", "S9", "S10", "S11", "S12", "S13", "B1", "B2")
ACTS = ("linear", "tanh", "relu")
DATASETS = ("mnist", "fashion_mnist")

Dataset = Literal["mnist", "fashion_mnist"]
Act = Literal["linear", "tanh", "relu"]
Init = Literal["standard", "standard_gauss", "one_over_N", "orthogonal"]
Param = Literal["sp", "mupc", "ntp", "depth_mup"]


# ----------------------------------------------------------------------------- sweeps


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
    RENAMED: ClassVar[dict[str, str]] = {"kind": "method"}  # old spelling -> key (config.validate says so)
    method: Literal["pc", "bp"]
    metrics: Literal["basic", "hessian"]
    grids: list[Grid]
    # the sweep's training dtype (null: the section's ``dtype``); the paper's reference scripts differ:
    # train_pcn.py (Hessian metrics) enables float64, the others train float32 (see ``allow_tf32``)
    dtype: Literal["float32", "float64"] | None = None

    def check(self, path: str) -> None:
        check(len(self.grids) > 0, f"{path}.grids", self.grids, "at least one grid block")
        check(self.method == "pc" or self.metrics == "basic", f"{path}.metrics", self.metrics,
              "'basic' for BP sweeps (the activity Hessian is a PC quantity)")
        for i, g in enumerate(self.grids):
            gp = f"{path}.grids[{i}]"
            if self.method == "pc":
                check(all(t == "H" or t >= 1 for t in g.T), f"{gp}.T", g.T, "integers >= 1 or 'H' for PC sweeps")
                check(bool(g.act_lrs) and all(v > 0 for v in g.act_lrs), f"{gp}.act_lrs", g.act_lrs,
                      "a non-empty list of positive numbers for PC sweeps")
            else:
                check(all(g.skips), f"{gp}.skips", g.skips, "[true] (BP Depth-μP networks always use skips)")

    def datasets(self) -> list[str]:
        return sorted({d for g in self.grids for d in g.datasets})


@dataclass(frozen=True)
class DataSubset:
    n_train: int | None = bounded(64, None)  # first n images of the train split; null = all
    n_test: int | None = bounded(64, None)  # first n images of the test split; null = all


# ----------------------------------------------------------------------------- figures


@dataclass(frozen=True)
class Restriction:
    """What one family draws of its sweeps (its sweeps themselves are its entry in ``families.py``)."""

    datasets: list[str] | None = None  # restrict the datasets drawn (None: all in the sweep)
    acts: list[str] | None = None  # restrict the activations drawn (None: all in the sweep)

    def check(self, path: str) -> None:
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
class FiguresParams:
    restrict: dict[str, Restriction]  # family -> the datasets / acts it draws (absent: all of its sweeps')
    best_lrs: BestLrs
    # "table": the notebook's §5.3 values (must exist in the profile's grids; checked at render);
    # "computed": per cell the lr with the best mean-over-seeds final test accuracy (an empty run
    # counts as chance) among the runs of the active profile — the rule the notebook's authors
    # used to fill their tables, applied to the grids that exist (smoke, gpu_medium).
    selection: Literal["table", "computed"]
    # SP-baseline cells (S12 / F18 / F20) drawn as chance without loading: act -> list of H.
    chance_cells: dict[str, list[int]]
    chance: float = bounded(0.0, 100.0, default=10.0)  # % accuracy substituted for failed runs
    clean_variants: bool = True  # also render the spec's clean aggregation (padding, masking)
    max_seeds_128: int = bounded(1, None, default=3)  # F19 reads the first seeds of S10 (notebook: 3)

    def check(self, path: str) -> None:
        for fam in self.restrict:
            check(fam in FAMILIES, f"{path}.restrict", fam, ", ".join(FAMILIES))
        for act in self.chance_cells:
            check(act in ACTS, f"{path}.chance_cells", act, ", ".join(ACTS))


# ----------------------------------------------------------------------------- the section

DENSE_MAX_N_KEY = "mupc_training.hessian_dense_max_n"


@dataclass(frozen=True)
class DenseMaxN:
    """The Hessian monitor's dense crossover per device type: one batched ``eigvalsh`` of H_z up to n = N·H,
    the Krylov extremes above. Where it lies depends on the device (measured on one CPU core: 1,024), so
    every device type a stage may run on needs its own value."""

    cpu: int = bounded(1, None)
    cuda: int = bounded(1, None)

    def for_device(self, device: str) -> int:
        """The value for ``device`` ('cpu', 'cuda' or 'cuda:<n>': its type counts)."""
        device_type = str(device).partition(":")[0]
        if device_type not in DEVICE_TYPES:
            raise ConfigError(f"{params_file(DENSE_MAX_N_KEY)}: {DENSE_MAX_N_KEY} has no value for device "
                              f"{device!r}; allowed devices: 'cpu', 'cuda' or 'cuda:<n>'")
        return int(getattr(self, device_type))


DEVICE_TYPES = tuple(f.name for f in fields(DenseMaxN))


@dataclass(frozen=True)
class TrainingParams:
    sweep_ids: list[str]  # train units
    data: DataSubset
    sweeps: dict[str, Sweep]
    figures: FiguresParams
    threads: int = bounded(1, None, default=1)
    dtype: Literal["float32", "float64"] = "float32"  # of every sweep that names no dtype of its own
    # CUDA only: float32 products in TF32 (JAX's default on Ampere/Hopper, so the paper's float32 runs);
    # false: full float32. Recorded with the resulting precision in every run's config.json
    allow_tf32: bool = False
    max_stack: int = bounded(0, None, default=64)  # runs per stacked group (0 = no limit)
    # CUDA only: capture each group's training iteration in a CUDA graph and replay it (checked against
    # eager first; eager where the check fails). Each run's config.json records whether its group used one
    cuda_graphs: bool = True
    # the PC engine's inference step (energy.PCEngine's route): ``standard`` (torch kernels, every device) or
    # ``fused`` (Triton kernels, CUDA only: fewer bytes per step, the same numbers to float round-off). Each
    # run's config.json records the route it trained on
    engine: Literal["standard", "fused"] = "standard"
    # dense eigvalsh of H_z up to this n = N·H, per device type (the stage picks its device's: for_device)
    hessian_dense_max_n: DenseMaxN = field(default_factory=lambda: DenseMaxN(cpu=1024, cuda=1024))
    train_loss_log_every: int = bounded(1, None, default=1)  # MLflow subsampling of train_loss

    def check(self, path: str) -> None:
        for sid in self.sweep_ids:
            check(sid in SWEEP_IDS, f"{path}.sweep_ids", sid, f"one of {list(SWEEP_IDS)}")
        check(len(set(self.sweep_ids)) == len(self.sweep_ids), f"{path}.sweep_ids", self.sweep_ids,
              "unique ids")
        check(sorted(self.sweeps) == sorted(self.sweep_ids), f"{path}.sweeps", sorted(self.sweeps),
              f"exactly the sweep_ids {self.sweep_ids}")
        for sid, sw in self.sweeps.items():
            want = "bp" if sid.startswith("B") else "pc"
            check(sw.method == want, f"{path}.sweeps.{sid}.method", sw.method, repr(want))
        for fam, spec in FAMILIES.items():  # every family renders: the sweeps it reads are trained
            for s in spec.reads():
                check(s in self.sweep_ids, f"{path}.sweep_ids", self.sweep_ids,
                      f"sweep ids including {s}, which figure family {fam} reads (families.py)")
