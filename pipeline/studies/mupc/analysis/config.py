"""Schema of ``params/mupc_analysis.yaml`` (spec §2–4, §6 F1–F6 and F26–F27, §7),
resolved for the active profile (base values with ``profiles.<profile>`` merged on top)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from pipeline.config import bounded, check

Act = Literal["linear", "tanh", "relu"]
HessParam = Literal["sp", "mupc", "ntp"]
Init = Literal["standard", "standard_gauss", "one_over_N", "orthogonal"]
TrainUnit = Literal["hessian_init", "fwd_pass", "theory_grid", "theory_width"]
Variant = Literal["sp_no_skips", "sp_skips", "depth_mup_no_skips", "depth_mup_skips", "orthogonal"]

# A theory net (theory_grid, theory_width) this wide or narrower trains on the CPU whatever the stage's device:
# its iteration is a chain of tiny kernels, bound by latency. Measured per training iteration of linear nets
# (tests/mupc_analysis/fixtures/h100/plan-calibration.json against this project's 2-core CPU's plan cache):
# an H100 took 6-16 ms at N <= 16, H <= 8 where the CPU took 2-7 ms, 32-96 ms at H = 32-64 where it took
# 7-31 ms, and at N = 64 0.6-1.3x the CPU's time; at N = 512 it took 57 ms against 274.
THEORY_CPU_MAX_WIDTH = 64


def theory_device(N: int, device: str) -> str:
    """Where a theory net of width ``N`` trains in a stage on ``device``."""
    return "cpu" if N <= THEORY_CPU_MAX_WIDTH else device


def theory_threads(N: int, threads: int) -> int:
    """torch threads of a theory net of width ``N`` (the unit's ``threads`` otherwise): one where its work is
    latency-bound. Measured on this project's 2-core CPU, the paper's theory_grid nets of N = 32, 64 and H = 8, 16
    (8 nets, 937 iterations each): 116.9 s with the paper's 4 threads, 37.1 s with one, the same numbers."""
    return 1 if N <= THEORY_CPU_MAX_WIDTH else threads



def _unique(values: list, path: str) -> None:
    check(len(set(values)) == len(values), path, values, "a list without repeated values")


@dataclass(frozen=True)
class HessianGroup:
    """One parameterisation with the weight inits and skip settings it is crossed with."""

    param: HessParam
    inits: list[Init]
    skips: list[bool]


@dataclass(frozen=True)
class HessianParams:
    RENAMED: ClassVar[dict[str, str]] = {"families": "groups"}  # old spelling -> key (config.validate says so)
    acts: list[Act]
    groups: list[HessianGroup]
    activity_decays: list[float] = bounded(0.0)
    widths: list[int] = bounded(1)  # N (D = d_y = N: the 'width' in/out set-up)
    depths: list[int] = bounded(1)  # H
    seeds: list[int] = bounded(0)
    full_spectra: Literal["slices", "all"] = "slices"  # slices: the N = max row and H = max column
    dense_max_n: int = bounded(0, default=64)  # n = N·H at or below: dense eigvalsh for everything
    # above dense_max_n, the extremes of a cell without full spectra: every eigenvalue of the narrowed band at or
    # below this n (exact; on one core ≤ 1.1 s at n = 4,096), Lanczos above (≤ 0.31 s a well-conditioned cell, 115 s
    # a near-singular ReLU cell before falling back to the band: benchmarks/README.md, "hessian_init's extremes")
    band_max_n: int = bounded(0, default=4096)
    autodiff_check_max_n: int = bounded(0, default=64)  # cross-check blocks vs torch.func.hessian
    # full spectra above dense_max_n: auto is dense_torch on a GPU and banded on the CPU (LAPACK dsbevd_2stage on
    # the narrowed band, hessian.full_spectrum): at n = 16,384 on one core 32 s, where MKL's dense eigvalsh took
    # 2 min 6 s (benchmarks/README.md, "The Hessian's full spectra")
    spectrum_backend: Literal["auto", "banded", "dense_torch"] = "auto"
    # on a GPU stage whose route is dense_torch: this share of those full spectra goes to the band route on the
    # host's cores instead, which TRAINSCAPE_EXECUTOR=processes runs beside the GPU's (on an H100 with 16 cores,
    # 3.41 s a spectrum at n = 16,384 on the GPU, 4.16 s on the band route with 16 at once; in one process a
    # band spectrum takes a core 40 s, so 0, the default, keeps them all on the GPU)
    host_share: float = bounded(0.0, 1.0, default=0.0)
    lanczos_tol: float = bounded(0.0, 1e-3, lo_open=True, default=1e-6)
    save_weights: bool = True

    def backend_on(self, device: str) -> str:
        """The full spectra's route on ``device``: ``spectrum_backend``, with auto resolved by the device."""
        if self.spectrum_backend != "auto":
            return self.spectrum_backend
        return "dense_torch" if str(device).startswith("cuda") else "banded"

    def check(self, path: str) -> None:
        for name in ("widths", "depths", "seeds", "activity_decays", "acts"):
            _unique(getattr(self, name), f"{path}.{name}")
        for name in ("widths", "depths", "acts", "groups", "seeds", "activity_decays"):
            check(len(getattr(self, name)) > 0, f"{path}.{name}", getattr(self, name), "a non-empty list")


@dataclass(frozen=True)
class FwdPassParams:
    acts: list[Act]
    optims: list[Literal["sgd", "adam"]]
    variants: list[Variant]
    widths: list[int] = bounded(1)
    depths: list[int] = bounded(4)  # L, the number of weight layers
    checks: int = bounded(1)  # steps t = 0 … checks−1
    lr: float = bounded(0.0, lo_open=True)
    batch_size: int = bounded(1)
    seed: int = bounded(0)
    train_images: int | None = bounded(64)  # first images of the MNIST training set (None: all)
    plot_ts: list[int] = bounded(0)  # steps drawn in the per-N / per-L panels
    slice_depth: int = bounded(4)  # L of the per-N panels (notebook: 16)
    slice_widths: list[int] = bounded(1)  # N of the per-L panels (notebook: 128, 1024)

    def check(self, path: str) -> None:
        for L in self.depths:
            check(L % 4 == 0, f"{path}.depths", L, "multiples of 4 (layer indices L/4, L/2, 3L/4)")
        for name in ("widths", "depths", "acts", "optims", "variants"):
            _unique(getattr(self, name), f"{path}.{name}")
        check(self.slice_depth in self.depths, f"{path}.slice_depth", self.slice_depth, f"one of {self.depths}")
        for n in self.slice_widths:
            check(n in self.widths, f"{path}.slice_widths", n, f"values of widths {self.widths}")
        for t in self.plot_ts:
            check(t < self.checks, f"{path}.plot_ts", t, f"steps below checks = {self.checks}")
        if self.train_images is not None:
            check(self.train_images >= self.checks * self.batch_size, f"{path}.train_images", self.train_images,
                  f"at least checks × batch_size = {self.checks * self.batch_size}")


@dataclass(frozen=True)
class TheoryGridParams:
    """Linear nets with skips, Adam on the weights (exact inference), N × H phase diagrams of ℒ/F*."""

    param_lrs: dict[str, float]  # param ('sp' | 'mupc') -> Adam learning rate
    color_max: dict[str, float]  # param -> upper end of the log colour scale (lower end 1)
    widths: list[int] = bounded(1)
    depths: list[int] = bounded(1)
    iters: int = bounded(1)
    batch_size: int = bounded(1)
    seed: int = bounded(0)
    train_images: int | None = bounded(64)
    plot_iters: list[int] = bounded(0)

    def check(self, path: str) -> None:
        for p in self.param_lrs:
            check(p in ("sp", "mupc"), f"{path}.param_lrs", p, "'sp', 'mupc'")
            check(self.param_lrs[p] > 0, f"{path}.param_lrs.{p}", self.param_lrs[p], "a positive number")
            check(p in self.color_max, f"{path}.color_max", sorted(self.color_max), f"a value for {p}")
        for t in self.plot_iters:
            check(t < self.iters, f"{path}.plot_iters", t, f"iterations below iters = {self.iters}")
        if self.train_images is not None:
            check(self.train_images >= self.iters * self.batch_size, f"{path}.train_images", self.train_images,
                  f"at least iters × batch_size = {self.iters * self.batch_size}")
        _unique(self.widths, f"{path}.widths")
        _unique(self.depths, f"{path}.depths")


@dataclass(frozen=True)
class TheoryWidthParams:
    """Width sweep at fixed depth; linear exact, tanh/relu numerical equilibria."""

    acts: list[Act]
    params: list[Literal["sp", "mupc"]]
    param_lr: float = bounded(0.0, lo_open=True)
    depth: int = bounded(1)
    widths: list[int] = bounded(1)
    plot_widths: list[int] = bounded(1)
    iters: int = bounded(1)
    batch_size: int = bounded(1)
    seed: int = bounded(0)
    train_images: int | None = bounded(64)
    eq_tol: float = bounded(0.0, lo_open=True, default=1e-8)  # RMS per-sample gradient
    # newton: analysis/newton.py (tanh: the z* of gradient descent; ReLU: a local minimum, in some samples
    # another one than gradient descent's, docs/decisions.md); gd: gradient descent, the reference
    eq_solver: Literal["newton", "gd"] = "newton"
    eq_max_steps: int = bounded(1, default=5000)  # gradient-descent steps (eq_solver gd, or Newton's fallback)
    newton_max_steps: int = bounded(1, default=50)
    cg_iters: int = bounded(1, default=3)  # tanh: preconditioned CG iterations a Newton step (3: fastest measured)

    def check(self, path: str) -> None:
        for n in self.plot_widths:
            check(n in self.widths, f"{path}.plot_widths", n, f"values of widths {self.widths}")
        if self.train_images is not None:
            check(self.train_images >= self.iters * self.batch_size, f"{path}.train_images", self.train_images,
                  f"at least iters × batch_size = {self.iters * self.batch_size}")
        _unique(self.widths, f"{path}.widths")


@dataclass(frozen=True)
class MupcAnalysisParams:
    legacy_noskip_branch_scale: bool  # Q1: reproduce the reference's 1/√(N·L) for mupc/ntp without skips
    train_units: list[TrainUnit]
    hessian: HessianParams
    fwd_pass: FwdPassParams
    theory_grid: TheoryGridParams
    theory_width: TheoryWidthParams
    threads: int = bounded(1, default=1)  # torch CPU threads of a train stage

    def check(self, path: str) -> None:
        _unique(self.train_units, f"{path}.train_units")
