"""Activity-Hessian extremes during training (spec §2.1, §2.5): λmin, λmax, κ = |λmax| / |λmin|.

H_z of one sample (batch of one, no 1/B) over the hidden activities z_1…z_H, assembled densely from
the block formulas of spec §2.2 in float64:

* diagonal ``H_ℓℓ = (1 + c_z) I + J_ℓᵀ J_ℓ − diag(φ''(z_ℓ) ⊙ a_{ℓ+1} W_{ℓ+1}ᵀ ε_{ℓ+1})``,
* off-diagonal ``H_{ℓ,ℓ+1} = −J_ℓᵀ``, ``H_{ℓ+1,ℓ} = −J_ℓ``,

with ``J_ℓ = a_{ℓ+1} W_{ℓ+1} diag(φ'(z_ℓ)) + s I`` (ℓ = H: ``a_L W_L diag(φ'(z_H))``, no skip).

Dense ``torch.linalg.eigvalsh`` is right for the smoke sizes (n = N·H ≤ 128) and fine up to a few
thousand. For large n (paper: N·H up to 16,384) this module should be swapped for the structured
extremes of the analysis part (Lanczos on the block-tridiagonal mat-vec for λmax, shift-invert with a
banded Cholesky for λmin, spec §2.6); until then ``n > dense_max_n`` falls back to ``torch.lobpcg`` on
the dense matrix, and the method used is recorded.
"""

from __future__ import annotations

import torch

from pipeline.studies.mupc.energy import errors
from pipeline.studies.mupc.model import NetSpec, Weights, ddphi, dphi, multipliers


def activity_hessian(spec: NetSpec, w: Weights, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor,
                     activity_decay: float = 0.0) -> torch.Tensor:
    """Dense H_z [R, NH, NH] (float64) of one sample per run: x [R, D], y [R, d_y], z [R, H, N]."""
    f64 = torch.float64
    w64 = Weights(*(t.to(f64) for t in w.tensors()))
    x1, y1, z1 = x.to(f64).unsqueeze(1), y.to(f64).unsqueeze(1), z.to(f64).unsqueeze(2)  # batch of one
    eps, eps_out = errors(spec, w64, x1, y1, z1)  # [R, H, 1, N], [R, 1, d_y]
    m = multipliers(spec)
    R, H, N = z.shape
    zz = z1[:, :, 0]  # [R, H, N]
    dp, ddp = dphi(spec.act, zz), ddphi(spec.act, zz)
    eye = torch.eye(N, dtype=f64, device=z.device)
    hz = torch.zeros(R, H * N, H * N, dtype=f64, device=z.device)
    for ell in range(H):  # 0-based layer index ℓ-1
        if ell < H - 1:
            W, a, s, e_next = w64.w_hid[:, ell], m.a_hid, m.s, eps[:, ell + 1, 0]
        else:
            W, a, s, e_next = w64.w_out, m.a_out, 0.0, eps_out[:, 0]
        J = a * W * dp[:, ell].unsqueeze(-2)  # [R, out, N]: a W diag(φ'(z_ℓ))
        if s:
            J = J + s * eye
        curv = ddp[:, ell] * (a * torch.matmul(e_next.unsqueeze(-2), W)[:, 0])  # φ''(z) ⊙ a Wᵀ ε
        diag = (1.0 + activity_decay) * eye + torch.matmul(J.transpose(-1, -2), J) - torch.diag_embed(curv)
        sl = slice(ell * N, (ell + 1) * N)
        hz[:, sl, sl] = diag
        if ell < H - 1:
            nx = slice((ell + 1) * N, (ell + 2) * N)
            hz[:, sl, nx] = -J.transpose(-1, -2)
            hz[:, nx, sl] = -J
    return hz


def extremes(hz: torch.Tensor, dense_max_n: int = 4096) -> tuple[torch.Tensor, torch.Tensor, str]:
    """Signed (λmin, λmax) per run [R] of symmetric matrices [R, n, n]; and the method used."""
    n = hz.shape[-1]
    lo = torch.full(hz.shape[:1], float("nan"), dtype=hz.dtype, device=hz.device)
    hi = lo.clone()
    ok = torch.isfinite(hz).flatten(1).all(1)  # a run whose weights went non-finite gets NaN
    if not bool(ok.any()):
        return lo, hi, "none"
    sel = torch.nonzero(ok).flatten()
    if n <= dense_max_n:
        ev = torch.linalg.eigvalsh(hz[sel])
        lo[sel], hi[sel] = ev[:, 0], ev[:, -1]
        return lo, hi, "dense_eigvalsh"
    # Large n: replace by the structured extremes of the analysis part (see module docstring).
    for r in sel.tolist():
        hi[r] = torch.lobpcg(hz[r], k=1, largest=True, niter=200)[0][0]
        lo[r] = torch.lobpcg(hz[r], k=1, largest=False, niter=200)[0][0]
    return lo, hi, "lobpcg"


def cond_num(lmin: torch.Tensor, lmax: torch.Tensor) -> torch.Tensor:
    """κ = |λmax| / |λmin| (signed extremes, notebook's compute_cond_num)."""
    return lmax.abs() / lmin.abs()


def monitor(spec: NetSpec, w: Weights, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor,
            activity_decay: float = 0.0, dense_max_n: int = 4096
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, str]:
    """(λmin, λmax, κ, method) per run for the first sample of each run's batch: x [R, B, D], y [R, B, d_y],
    z [R, H, B, N] (post-inference activities, current weights)."""
    hz = activity_hessian(spec, w, x[:, 0], y[:, 0], z[:, :, 0], activity_decay)
    lo, hi, method = extremes(hz, dense_max_n)
    return lo, hi, cond_num(lo, hi), method
