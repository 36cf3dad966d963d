"""Activity-Hessian extremes during training (spec §2.1, §2.5): λmin, λmax, κ = |λmax| / |λmin|.

H_z of one sample (batch of one, no 1/B) over the hidden activities, in float64, from the analysis
engine's block formulas (:func:`pipeline.studies.mupc.hessian.hessian_blocks`). Up to
``dense_max_n`` = N·H all runs are diagonalised densely in one batched ``eigvalsh``; above it each
run goes through the structured extremes (Lanczos on the block-tridiagonal mat-vec for λmax,
shift-invert with a banded Cholesky for λmin, spec §2.6). The method used is recorded.
"""

from __future__ import annotations

import torch

from pipeline.studies.mupc.hessian import Blocks, hessian_blocks, to_dense
from pipeline.studies.mupc.hessian import extremes as structured_extremes
from pipeline.studies.mupc.model import NetSpec, Weights


def run_blocks(spec: NetSpec, w: Weights, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor,
               activity_decay: float = 0.0) -> list[Blocks]:
    """H_z blocks of one sample per run (float64): x [R, D], y [R, d_y], z [R, H, N]."""
    f64 = torch.float64
    w64 = Weights(*(t.to(f64) for t in w.tensors()))
    return [hessian_blocks(spec, w64, x[r].to(f64), y[r].to(f64), z[r].to(f64), activity_decay, r)
            for r in range(w.runs)]


def activity_hessian(spec: NetSpec, w: Weights, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor,
                     activity_decay: float = 0.0) -> torch.Tensor:
    """Dense H_z [R, NH, NH] (float64) of one sample per run."""
    return torch.stack([to_dense(b) for b in run_blocks(spec, w, x, y, z, activity_decay)])


def extremes(blocks: list[Blocks], dense_max_n: int = 4096) -> tuple[torch.Tensor, torch.Tensor, str]:
    """Signed (λmin, λmax) per run [R] and the method; a run with non-finite entries gets NaN."""
    R = len(blocks)
    lo = torch.full((R,), float("nan"), dtype=torch.float64)
    hi = lo.clone()
    ok = [r for r, b in enumerate(blocks) if bool(torch.isfinite(b.diag).all() and torch.isfinite(b.upper).all())]
    if not ok:
        return lo, hi, "none"
    if blocks[0].n <= dense_max_n:
        ev = torch.linalg.eigvalsh(torch.stack([to_dense(blocks[r]) for r in ok])).cpu()
        lo[ok], hi[ok] = ev[:, 0], ev[:, -1]
        return lo, hi, "dense_eigvalsh"
    methods = set()
    for r in ok:
        e = structured_extremes(blocks[r])
        lo[r], hi[r] = e.lambda_min, e.lambda_max
        methods.add(f"{e.method_max}+{e.method_min}")
    return lo, hi, "/".join(sorted(methods))


def monitor(spec: NetSpec, w: Weights, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor,
            activity_decay: float = 0.0, dense_max_n: int = 4096
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, str]:
    """(λmin, λmax, κ, method) per run for the first sample of each run's batch: x [R, B, D], y [R, B, d_y],
    z [R, H, B, N] (post-inference activities, current weights)."""
    blocks = run_blocks(spec, w, x[:, 0], y[:, 0], z[:, :, 0], activity_decay)
    lo, hi, method = extremes(blocks, dense_max_n)
    return lo, hi, hi.abs() / lo.abs(), method
