"""Equilibrium-energy theory (spec §3): exact z* and F* for linear nets, numerical equilibria otherwise.

Linear network (φ = id): H_z does not depend on x, y or z, and the stationarity condition is
``H_z z = b`` with ``b = (a_1 W_1 x, 0, …, 0, a_L W_Lᵀ y)``. ``z*`` comes from a block-tridiagonal
Cholesky (block Thomas) solve — never a dense NH×NH inverse — and the equilibrium energy has the closed
form ``F* = ½ rᵀ S⁻¹ r`` with ``r = y − M_{L:1} x`` and ``S = I + Σ_{k=2}^{L} M_{L:k} M_{L:k}ᵀ`` (a
d_y×d_y system). Both routes are computed and must agree (invariant 4).

Nonlinear networks (tanh, relu): gradient descent on the *per-sample* energy in float64 with a step
below 1/λ_max(H_z) (λ_max per sample by power iteration on the analytic block mat-vec, re-estimated
periodically, halved for a sample whose energy rises), until the RMS gradient is below ``tol`` or a
step cap; the achieved residual is returned ("numerical equilibrium").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pipeline.studies.mupc.engine.energy import activity_grad, errors
from pipeline.studies.mupc.engine.hessian import Blocks, theory_blocks
from pipeline.studies.mupc.engine.model import (
    Multipliers,
    NetSpec,
    Weights,
    _runs,
    ddphi,
    dphi,
    input_prediction,
    multipliers,
)

# ----------------------------------------------------------------------------- linear, exact


def block_cholesky(b: Blocks) -> tuple[torch.Tensor, torch.Tensor]:
    """Block LLᵀ of an SPD block-tridiagonal matrix: diagonal factors L_ℓ [H,N,N] and sub-blocks C_ℓ [H-1,N,N]
    with ``A_ℓℓ = L_ℓ L_ℓᵀ + C_{ℓ-1} C_{ℓ-1}ᵀ`` and ``A_{ℓ+1,ℓ} = C_ℓ L_ℓᵀ``."""
    H = b.H
    Ls, Cs, infos = [], [], []
    prev_c = None
    for ell in range(H):
        a = b.diag[ell] if prev_c is None else b.diag[ell] - prev_c @ prev_c.T
        lo, info = torch.linalg.cholesky_ex(a)  # checked once below: one host read a factorisation, not H
        Ls.append(lo)
        infos.append(info)
        if ell < H - 1:
            # C_ℓ = A_{ℓ+1,ℓ} L_ℓ^{-T}  ⇔  L_ℓ C_ℓᵀ = A_{ℓ,ℓ+1}
            prev_c = torch.linalg.solve_triangular(lo, b.upper[ell], upper=False).T
            Cs.append(prev_c)
    C = torch.stack(Cs) if Cs else b.upper.new_zeros((0, b.N, b.N))
    failed = torch.stack(infos)
    if bool(failed.any()):
        ell = int(torch.nonzero(failed)[0, 0])
        raise torch.linalg.LinAlgError(f"block Cholesky: the Schur complement of layer {ell + 1} of {H} is not "
                                       f"positive-definite (leading minor {int(failed[ell])})")
    return torch.stack(Ls), C


def block_solve(b: Blocks, rhs: torch.Tensor, factor: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """Solve ``A z = rhs`` for SPD block-tridiagonal A; ``rhs [H, N, k]`` → ``[H, N, k]``."""
    Ls, Cs = factor or block_cholesky(b)
    H = b.H
    u = []
    for ell in range(H):  # forward: L u = rhs
        r = rhs[ell] if ell == 0 else rhs[ell] - Cs[ell - 1] @ u[-1]
        u.append(torch.linalg.solve_triangular(Ls[ell], r, upper=False))
    z = [None] * H
    for ell in reversed(range(H)):  # backward: Lᵀ z = u
        r = u[ell] if ell == H - 1 else u[ell] - Cs[ell].T @ z[ell + 1]
        z[ell] = torch.linalg.solve_triangular(Ls[ell].T, r, upper=True)
    return torch.stack(z)


def linear_rhs(spec: NetSpec, w: Weights, x: torch.Tensor, y: torch.Tensor, r: int = 0) -> torch.Tensor:
    """b of the stationarity condition for a batch: ``x [B, D]``, ``y [B, d_y]`` → ``[H, N, B]``."""
    m = multipliers(spec)
    b = torch.zeros(spec.H, spec.N, x.shape[0], dtype=x.dtype, device=x.device)
    b[0] += m.a_in * w.w_in[r] @ x.T
    b[-1] += m.a_out * w.w_out[r].T @ y.T
    return b


def linear_equilibrium(spec: NetSpec, w: Weights, x: torch.Tensor, y: torch.Tensor,
                       activity_decay: float = 0.0) -> torch.Tensor:
    """z* = H_z⁻¹ b for every sample and run: ``z [R, H, B, N]`` (block Cholesky, linear nets only)."""
    if spec.act != "linear":
        raise ValueError("the exact equilibrium is for linear networks; use numerical_equilibrium")
    out = []
    for r in range(w.runs):
        xr = x[r] if x.dim() == 3 else x
        yr = y[r] if y.dim() == 3 else y
        blocks = theory_blocks(spec, w, activity_decay, r)
        out.append(block_solve(blocks, linear_rhs(spec, w, xr, yr, r)).permute(0, 2, 1))
    return torch.stack(out)


def effective_maps(spec: NetSpec, w: Weights, r: int = 0) -> list[torch.Tensor]:
    """M_1 = a_1 W_1, M_ℓ = a_ℓ W_ℓ + s I, M_L = a_L W_L (§3.1)."""
    m = multipliers(spec)
    eye = torch.eye(spec.N, dtype=w.w_in.dtype, device=w.w_in.device)
    return [m.a_in * w.w_in[r], *(m.a_hid * wh + m.s * eye for wh in w.w_hid[r].unbind(0)), m.a_out * w.w_out[r]]


def closed_form_energy(spec: NetSpec, w: Weights, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-sample F* = ½ rᵀ S⁻¹ r for linear nets without activity decay: ``[R, B]``.

    Differentiable in the weights (used for the envelope-theorem check, invariant 7)."""
    out = []
    for r in range(w.runs):
        xr = x[r] if x.dim() == 3 else x
        yr = y[r] if y.dim() == 3 else y
        maps = effective_maps(spec, w, r)
        prods = [maps[-1]]  # M_{L:k} for k = L, L-1, …, 1
        for mk in reversed(maps[:-1]):
            prods.append(prods[-1] @ mk)
        full = prods[-1]  # M_{L:1}
        S = torch.eye(spec.d_y, dtype=x.dtype, device=x.device)
        for p in prods[:-1]:  # k = L … 2
            S = S + p @ p.T
        res = yr - xr @ full.T  # [B, d_y]
        sol = torch.linalg.solve_ex(S, res.T)[0]  # [d_y, B]; S ⪰ I is never singular: nothing to check
        out.append(0.5 * (res.T * sol).sum(0))
    return torch.stack(out)


def sample_energies(eps: torch.Tensor, eps_out: torch.Tensor) -> torch.Tensor:
    """F_b from the errors, ½ (Σ_ℓ ‖ε_ℓ,b‖² + ‖ε_L,b‖²), for every run and sample: ``[R, B]``."""
    return 0.5 * (eps.pow(2).sum(dim=(1, 3)) + eps_out.pow(2).sum(dim=2))


def per_sample_energy(spec: NetSpec, w: Weights, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor,
                      activity_decay: float = 0.0) -> torch.Tensor:
    """F_b(z) for every run and sample: ``[R, B]`` (the batch energy is its mean)."""
    eps, eps_out = errors(spec, w, x, y, z)
    f = sample_energies(eps, eps_out)
    if activity_decay:
        f = f + 0.5 * activity_decay * z.pow(2).sum(dim=(1, 3))
    return f


def summed_loss(y_hat: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """ℒ = ½ Σ_dims (y − ŷ)², averaged over the batch (§3.1; sums the outputs): ``[R]``."""
    return 0.5 * (_runs(y, y_hat.shape[0]) - y_hat).pow(2).sum(dim=2).mean(dim=1)


# ----------------------------------------------------------------------------- nonlinear, numerical


def hessian_matvec(spec: NetSpec, w: Weights, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor,
                   v: torch.Tensor, activity_decay: float = 0.0) -> torch.Tensor:
    """Per-sample H_z v for every run and sample at once (analytic blocks, matrix-free): ``[R, H, B, N]``."""
    m = multipliers(spec)
    eps, eps_out = errors(spec, w, x, y, z)
    dp = dphi(spec.act, z)
    H = spec.H
    # J_ℓ v_ℓ for ℓ < H (hidden) and the read-out J_H v_H
    jv_hid = m.a_hid * torch.matmul(dp[:, :-1] * v[:, :-1], w.w_hid.transpose(-1, -2)) + m.s * v[:, :-1]
    jv_out = m.a_out * torch.matmul(dp[:, -1] * v[:, -1], w.w_out.transpose(-1, -2))

    def jt(u_hid: torch.Tensor, u_out: torch.Tensor) -> torch.Tensor:  # J_ℓᵀ u_ℓ for all ℓ
        out = torch.empty_like(v)
        out[:, :-1] = dp[:, :-1] * (m.a_hid * torch.matmul(u_hid, w.w_hid)) + m.s * u_hid
        out[:, -1] = dp[:, -1] * (m.a_out * torch.matmul(u_out, w.w_out))
        return out

    gram = jt(jv_hid, jv_out)
    back = torch.empty_like(v)
    if H > 1:
        back[:, :-1] = m.a_hid * torch.matmul(eps[:, 1:], w.w_hid)
    back[:, -1] = m.a_out * torch.matmul(eps_out, w.w_out)
    hv = (1.0 + activity_decay) * v + gram - ddphi(spec.act, z) * back * v
    if H > 1:  # off-diagonal blocks: −J_ℓᵀ v_{ℓ+1} into row ℓ, −J_ℓ v_ℓ into row ℓ+1
        up = jt(v[:, 1:], torch.zeros_like(jv_out))
        hv[:, :-1] -= up[:, :-1]
        hv[:, 1:] -= jv_hid
    return hv


def power_lambda_max(spec: NetSpec, w: Weights, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor,
                     iters: int = 30, v0: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample λ_max(H_z) estimate by power iteration (H_z ≻ 0 for relu; dominant |λ| for tanh): [R, B]."""
    v = torch.ones_like(z) if v0 is None else v0
    lam = torch.zeros(z.shape[0], z.shape[2], dtype=z.dtype, device=z.device)
    for _ in range(iters):
        v = v / v.pow(2).sum(dim=(1, 3), keepdim=True).sqrt().clamp_min(1e-300)
        hv = hessian_matvec(spec, w, x, y, z, v)
        lam = (v * hv).sum(dim=(1, 3))
        v = hv
    return lam.abs(), v


def pulls(spec: NetSpec, w: Weights, eps: torch.Tensor, eps_out: torch.Tensor,
          m: Multipliers) -> tuple[torch.Tensor, torch.Tensor]:
    """What the layer above asks of each unit: a_{ℓ+1} W_{ℓ+1}ᵀ ε_{ℓ+1} (the read-out's for the last layer)
    and the skip's s ε_{ℓ+1}, ``[R, H, B, N]`` each; ∂F/∂z_ℓ = ε_ℓ − skip − φ'(z_ℓ) ⊙ pull."""
    pull = torch.empty_like(eps)
    skip = torch.zeros_like(eps)
    if spec.H > 1:
        pull[:, :-1] = m.a_hid * torch.matmul(eps[:, 1:], w.w_hid)
        skip[:, :-1] = m.s * eps[:, 1:]
    pull[:, -1] = m.a_out * torch.matmul(eps_out, w.w_out)
    return pull, skip


def one_sided(spec: NetSpec, w: Weights, z: torch.Tensor, eps: torch.Tensor, eps_out: torch.Tensor,
              m: Multipliers) -> tuple[torch.Tensor, torch.Tensor]:
    """One-sided per-sample gradients of a ReLU net's energy: φ'(z_ℓ) taken as 0 (left) and 1 (right)."""
    pull, skip = pulls(spec, w, eps, eps_out, m)
    left = eps - skip
    return left, left - pull


def relu_residual(z: torch.Tensor, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """Minimal-norm (Clarke) subgradient: the one-sided gradient off the kink, at z = 0 the element of
    [left, right] closest to 0 (0 when they straddle it)."""
    at_kink = z == 0
    straddle = (left * right) <= 0
    kink_g = torch.where(straddle, torch.zeros_like(z), torch.where(left.abs() < right.abs(), left, right))
    return torch.where(at_kink, kink_g, torch.where(z > 0, right, left))


@dataclass
class Equilibrium:
    z: torch.Tensor  # [R, H, B, N]
    steps: int
    residual: torch.Tensor  # [R] RMS of the per-sample (sub)gradient at the end
    converged: bool
    fallback_steps: int = 0  # gradient-descent steps that finished where Newton stopped short
    failed_steps: int = 0  # Newton steps whose line search found no decrease (sample × step)
    sample_steps: int = 0  # Newton: the samples each step computed, summed over the steps


def numerical_equilibrium(spec: NetSpec, w: Weights, x: torch.Tensor, y: torch.Tensor, z0: torch.Tensor, *,
                          tol: float = 1e-8, max_steps: int = 5000, safety: float = 1.1,
                          refresh: int = 100, power_iters: int = 20) -> Equilibrium:
    """GD on each sample's energy with step η_b = 1/(safety·λ̂_max,b), until RMS grad < tol or max_steps.

    ReLU: the energy is only piecewise smooth, so a step that would carry a unit across the kink stops at
    z = 0, a unit at 0 leaves it only along a descending one-sided gradient, and the residual is the
    minimal-norm subgradient (otherwise GD chatters across the kink and the gradient never vanishes)."""
    B = z0.shape[2]
    relu = spec.act == "relu"
    m = multipliers(spec)
    mu1 = input_prediction(w, m, x)
    z = z0.clone()
    lam, vec = power_lambda_max(spec, w, x, y, z, power_iters)
    eta = 1.0 / (safety * lam.clamp_min(1e-12))  # [R, B]

    def errs(zz: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        e, eo = errors(spec, w, x, y, zz, m, mu1)
        return e, eo, sample_energies(e, eo)

    eps, eps_out, f_prev = errs(z)
    rms = torch.full((z.shape[0],), float("inf"), dtype=z.dtype, device=z.device)
    step = 0
    for step in range(1, max_steps + 1):
        if relu:
            left, right = one_sided(spec, w, z, eps, eps_out, m)
            g = relu_residual(z, left, right)
        else:
            g = activity_grad(spec, w, z, eps, eps_out, m) * B  # per-sample gradient (no 1/B)
        rms = g.pow(2).flatten(1).mean(1).sqrt()
        if bool((rms < tol).all()):
            step -= 1
            break
        z_new = z - eta[:, None, :, None] * g
        if relu:
            crossed = (z != 0) & (torch.sign(z_new) != torch.sign(z))
            z_new = torch.where(crossed, torch.zeros_like(z_new), z_new)
        eps_n, eps_out_n, f_new = errs(z_new)
        worse = f_new > f_prev + 1e-14 * f_prev.abs()
        if bool(worse.any()):  # reject and halve the step of those samples
            eta = torch.where(worse, eta / 2, eta)
            keep = worse[:, None, :, None]
            z_new = torch.where(keep, z, z_new)
            eps_n = torch.where(keep, eps, eps_n)
            eps_out_n = torch.where(worse[:, :, None], eps_out, eps_out_n)
            f_new = torch.where(worse, f_prev, f_new)
        z, eps, eps_out, f_prev = z_new, eps_n, eps_out_n, f_new
        if step % refresh == 0:  # λ_max moves with the ReLU masks / tanh curvature
            lam, vec = power_lambda_max(spec, w, x, y, z, power_iters // 2, vec)
            eta = 1.0 / (safety * lam.clamp_min(1e-12))
    return Equilibrium(z, step, rms, bool((rms < tol).all()))
