"""Activity-Hessian extremes during training (spec §2.1, §2.5): λmin, λmax, κ = |λmax| / |λmin|.

H_z of one sample (batch of one, no 1/B) over the hidden activities, float64 on the runs' device, for
every stacked run in one batched computation. Up to ``dense_max_n`` = N·H all runs are diagonalised
densely in one batched ``eigvalsh``; above it the extremes come from Krylov methods on H_z's factored
form, batched over the runs, in torch:

    H_z = AᵀA + Δ,   A = [A_h; V],   Δ = diag(c_z − φ''(z) ⊙ a W ε)

with A_h unit lower block-bidiagonal (sub-diagonal −J_ℓ, the hidden Jacobians J_ℓ = a W diag(φ') + s I),
V = [0 … 0, −J_L] the read-out row (d_y × N) and Δ diagonal (the curvature term of spec §2.2 and the
activity decay). This is the block formula of :func:`pipeline.studies.mupc.engine.hessian.hessian_blocks`
written as residual Jacobians, so the N×N blocks (and their N³ products) are never formed:

* **mat-vec** H_z v = Aᵀ(A v) + Δ v: two batched products with the hidden weights (2·N²·(H−1) per run);
* **λmax**: Lanczos (three-term recurrence, no reorthogonalisation; ``STARTS`` starts that must agree;
  ``LANCZOS_STEPS``);
* **λmin** where φ'' ≡ 0 (linear, ReLU): H_z = AᵀA + c_z I, so λmin = c_z + 1 / λmax((AᵀA)⁻¹) by
  shift-invert Lanczos; (AᵀA)⁻¹ is exact and cheap: A_h⁻¹ and A_h⁻ᵀ are block substitutions with the
  J_ℓ (O(N²H) each) and V adds a rank-d_y Woodbury correction (``SHIFT_INVERT_STEPS``);
* **λmin** for tanh (Δ varies, H_z may be indefinite): LOBPCG on H_z preconditioned with (AᵀA)⁻¹
  (``LOBPCG_STEPS``): exact where the curvature term vanishes, and a Rayleigh–Ritz minimum over
  a subspace, hence an upper bound of λmin that converges to it, elsewhere.

Each iteration is checked every ``CHECK`` steps from its minimum on: an extreme's error estimate is its move
over the last ``HISTORY`` steps plus the geometric tail that move implies (the iterations converge
monotonically; for Lanczos also the spread of its starts), and each run keeps its value at the first check
where the estimate is at most ``TOL`` = 1e-6 (the goal against dense), so its number does not depend on its
stack-mates; the iteration ends when every run is settled (one host synchronisation per check on CUDA). The
iterations' small eigen-problems (Lanczos' tridiagonals at each check, LOBPCG's 3×3 Rayleigh–Ritz each step)
are solved batched on the host copy and only their results go back to the device (:func:`_on_host`): one
synchronisation per Lanczos check (which synchronises anyway) and per LOBPCG step, where cuSOLVER's eigh
synchronised per matrix. A run still above ``TOL`` at the maximum is redone by the previous route on the CPU
(dense up to n = 4,096, else SciPy Lanczos and a banded-Cholesky shift-invert; the method string then says
so). The Krylov start vectors are drawn on the CPU from a fixed seed, so a rerun gives the same numbers and
CPU and CUDA runs agree to the tolerance.

The cost is memory-bound: every step reads the hidden weights twice (N²·(H−1) float64 per run per read) at
the core's streaming bandwidth, and λmax needs 85–210 steps (the training README and
``benchmarks/hessian_monitor.py`` have the timings and what else was tried).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch

from pipeline.studies.mupc.engine.energy import errors
from pipeline.studies.mupc.engine.hessian import Blocks, hessian_blocks, to_dense
from pipeline.studies.mupc.engine.hessian import extremes as scipy_extremes
from pipeline.studies.mupc.engine.model import NetSpec, Weights, ddphi, dphi, multipliers


class Steps(NamedTuple):
    """Step bounds of one Krylov iteration: no convergence check before ``min``, none after ``max``."""

    min: int
    max: int


# Step counts (measured against dense eigvalsh and the old route on μPC nets, N = 512, linear/tanh/ReLU, 3 seeds;
# `benchmarks/hessian_monitor.py`). Each Krylov iteration stops per run at the first check (every ``CHECK``
# steps, not before ``min``) whose error estimate is at most ``TOL``; a run that reaches ``max`` without it is
# redone by the previous route. λmax needs ≈ 85 Lanczos steps for 1e-6 at H = 8 and ≈ 140 at H = 32 (the top
# of H_z's spectrum is clustered); shift-invert reaches 1e-6 in 25–40 steps, LOBPCG in 30–40, but the linear
# nets' shift-invert sits on a plateau (1e-2 off) up to step 25–30, hence its minimum of 40.
LANCZOS_STEPS = Steps(60, 300)
SHIFT_INVERT_STEPS = Steps(40, 120)
LOBPCG_STEPS = Steps(30, 120)
STARTS = 2  # independent Lanczos starts per run, which must agree (see :func:`lanczos`)
CHECK = 5  # steps between convergence checks (one host synchronisation each on CUDA)
HISTORY = 10  # the error estimate compares an extreme with its values HISTORY and 2·HISTORY steps earlier
TOL = 1e-6  # error estimate (relative) at which an extreme is accepted: the goal against dense
# Batched eigvalsh is cheaper than the Krylov route only for small n: at n = 2,048 (N = 128, H = 16, one loaded
# core) dense took 2.1–2.8 s per run and the Krylov route 0.16–0.56 s; at n = 4,096 (N = 512, H = 8) dense 4 s
# and more. The monitor's default (the CPU's: the params' ``hessian_dense_max_n`` has a value per device type).
DENSE_CROSSOVER_N = 1024
FALLBACK_DENSE_MAX_N = 4096  # a run redone: dense up to here, else SciPy Lanczos + banded Cholesky (CPU)
_SEED = 20_240_611


@dataclass
class Factors:
    """H_z = AᵀA + Δ of R runs (float64): hidden weights ``w [R, H-1, N, N]`` with ``dp [R, H, N]`` = φ'(z),
    multipliers ``a``, ``s``, read-out Jacobian ``j_out [R, d_y, N]`` and the diagonal ``delta [R, H, N]``."""

    w: torch.Tensor
    dp: torch.Tensor
    a: float
    s: float
    j_out: torch.Tensor
    delta: torch.Tensor

    @property
    def shape(self) -> tuple[int, int, int]:
        R, H, N = self.dp.shape
        return R, H, N

    def jac(self, v: torch.Tensor) -> torch.Tensor:
        """J_ℓ v_ℓ for ℓ = 1…H-1 in row form: v [R, H-1, k, N] → [R, H-1, k, N]."""
        out = torch.matmul(v * self.dp[:, :-1, None], self.w.mT)
        return out.mul_(self.a).add_(v, alpha=self.s) if self.s else out.mul_(self.a)

    def jac_t(self, u: torch.Tensor) -> torch.Tensor:
        """J_ℓᵀ u_{ℓ+1} for ℓ = 1…H-1 in row form: u [R, H-1, k, N] → [R, H-1, k, N]."""
        out = torch.matmul(u, self.w).mul_(self.dp[:, :-1, None]).mul_(self.a)
        return out.add_(u, alpha=self.s) if self.s else out


def factors(spec: NetSpec, w: Weights, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor,
            activity_decay: float = 0.0) -> Factors:
    """The factored H_z of one sample per run (float64): x [R, D], y [R, d_y], z [R, H, N]."""
    f64 = torch.float64
    m = multipliers(spec)
    w64 = Weights(*(t.to(f64) for t in w.tensors()))
    z64 = z.to(f64)
    eps, eps_out = errors(spec, w64, x.to(f64).unsqueeze(1), y.to(f64).unsqueeze(1), z64.unsqueeze(2), m)
    eps, eps_out = eps[:, :, 0], eps_out[:, 0]  # [R, H, N], [R, d_y]
    dp = dphi(spec.act, z64)
    # curvature term φ''(z_ℓ) ⊙ a_{ℓ+1} W_{ℓ+1}ᵀ ε_{ℓ+1} (row form: ε W)
    back = torch.cat([m.a_hid * torch.matmul(eps[:, 1:].unsqueeze(-2), w64.w_hid).squeeze(-2),
                      m.a_out * torch.matmul(eps_out.unsqueeze(-2), w64.w_out)], dim=1)
    delta = activity_decay - ddphi(spec.act, z64) * back
    j_out = m.a_out * w64.w_out * dp[:, -1].unsqueeze(1)
    return Factors(w64.w_hid, dp, m.a_hid, m.s, j_out, delta)


def matvec(f: Factors, v: torch.Tensor) -> torch.Tensor:
    """H_z v for v [R, H, k, N] (k vectors per run in row form): Aᵀ(A v) + Δ v."""
    u = v.clone()
    u[:, 1:] -= f.jac(v[:, :-1])
    u_out = -torch.matmul(v[:, -1], f.j_out.mT)  # [R, k, d_y]: the read-out residual −J_L v_H
    out = u.clone()
    out[:, :-1] -= f.jac_t(u[:, 1:])
    out[:, -1] -= torch.matmul(u_out, f.j_out)
    return out.addcmul_(f.delta.unsqueeze(2), v)


def _m_inv(f: Factors, b: torch.Tensor) -> torch.Tensor:
    """(A_hᵀ A_h)⁻¹ b by block substitution: y = A_h⁻ᵀ b (last layer first), then A_h⁻¹ y."""
    H = f.shape[1]
    y = b.clone()
    for ell in range(H - 2, -1, -1):  # y_ℓ = b_ℓ + J_ℓᵀ y_{ℓ+1}
        t = torch.matmul(y[:, ell + 1], f.w[:, ell]).mul_(f.dp[:, ell, None]).mul_(f.a)
        y[:, ell] += t.add_(y[:, ell + 1], alpha=f.s) if f.s else t
    for ell in range(H - 1):  # x_{ℓ+1} = y_{ℓ+1} + J_ℓ x_ℓ
        x = y[:, ell]
        t = torch.matmul(x * f.dp[:, ell, None], f.w[:, ell].mT).mul_(f.a)
        y[:, ell + 1] += t.add_(x, alpha=f.s) if f.s else t
    return y


class GramInverse:
    """(AᵀA)⁻¹ = (A_hᵀA_h + VᵀV)⁻¹ by Woodbury: M⁻¹ b − P S⁻¹ V M⁻¹ b with P = M⁻¹Vᵀ, S = I + V P."""

    def __init__(self, f: Factors):
        R, H, N = f.shape
        self.f = f
        vt = torch.zeros(R, H, f.j_out.shape[1], N, dtype=f.w.dtype, device=f.w.device)
        vt[:, -1] = -f.j_out  # the columns of Vᵀ as rows
        self.p = _m_inv(f, vt)  # [R, H, d_y, N]
        s = torch.eye(f.j_out.shape[1], dtype=f.w.dtype, device=f.w.device) - torch.matmul(f.j_out, self.p[:, -1].mT)
        self.chol = torch.linalg.cholesky_ex(s)[0]  # S is SPD (I + V M⁻¹ Vᵀ)

    def __call__(self, b: torch.Tensor) -> torch.Tensor:
        """(AᵀA)⁻¹ b for b [R, H, k, N]."""
        x = _m_inv(self.f, b)
        vx = -torch.matmul(self.f.j_out, x[:, -1].mT)  # [R, d_y, k]
        c = torch.cholesky_solve(vx, self.chol)  # [R, d_y, k]
        return x - torch.einsum("rjk,rhjn->rhkn", c, self.p)


def _start(R: int, H: int, N: int, k: int, like: torch.Tensor, salt: int) -> torch.Tensor:
    """Deterministic start vectors [R, H, k, N], drawn on the CPU (the same on every device)."""
    g = torch.Generator().manual_seed(_SEED + salt)
    v = torch.randn(R, H, k, N, generator=g, dtype=torch.float64).to(like)  # like's device and dtype
    return v / _norm(v)


def _on_host(solve: Callable[[torch.Tensor], torch.Tensor], a: torch.Tensor) -> torch.Tensor:
    """``solve(a)`` computed on the host copy of the small ``a``, returned on ``a``'s device.

    The Krylov iterations' eigen-problems are tiny (tridiagonals up to ``LANCZOS_STEPS.max``, LOBPCG's 3×3
    Gram matrices) and batched over the runs: cuSOLVER would solve them one matrix at a time with a host
    synchronisation each, while the host solves them at once after one transfer each way (the iteration
    synchronises at its checks anyway). On the CPU both transfers are no-ops: the same solver, the same bits."""
    return solve(a.cpu()).to(a.device)


def _top_ritz(entries: torch.Tensor) -> torch.Tensor:
    """The largest eigenvalue of each tridiagonal given as ``entries`` [..., 2m-1] (its diagonal, then its
    off-diagonal); NaN where the diagonal is not finite (a non-finite run)."""
    m = (entries.shape[-1] + 1) // 2
    a, b = entries[..., :m], entries[..., m:]
    t = torch.diag_embed(a) + torch.diag_embed(b, 1) + torch.diag_embed(b, -1)
    t = torch.where(torch.isfinite(t), t, 0.0)
    top = torch.linalg.eigvalsh(t)[..., -1]
    return torch.where(torch.isfinite(a).all(-1), top, float("nan"))


def _smallest_ritz_vector(g: torch.Tensor) -> torch.Tensor:
    """The coefficients [R, d] of the smallest eigenpair of each symmetric g [R, d, d]."""
    return torch.linalg.eigh(g)[1][:, :, 0]


def _norm(v: torch.Tensor) -> torch.Tensor:
    """Per run and column 2-norm over (H, N): [R, 1, k, 1]."""
    return v.pow(2).sum(dim=(1, 3), keepdim=True).sqrt()


def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per run and column inner product over (H, N): [R, 1, k, 1]."""
    return (a * b).sum(dim=(1, 3), keepdim=True)


def _estimate(now: torch.Tensor, before: torch.Tensor, earlier: torch.Tensor) -> torch.Tensor:
    """Relative error estimate of an extreme converging monotonically, from its values now, ``HISTORY`` and
    2·``HISTORY`` steps earlier: the last move d₁ over 1 − ρ with ρ = d₁/d₂ the ratio of the last two moves
    (clamped to 0.9), i.e. the geometric tail left after the last move, plus that move."""
    d1, d2 = (now - before).abs(), (before - earlier).abs()
    rho = torch.where(d2 > 0, d1 / d2, (d1 > 0).to(d1.dtype)).clamp(max=0.9)
    return d1 / (1 - rho) / now.abs()


class _Checks:
    """Per-run acceptance of an extreme: each run keeps its value at the first check whose estimate is at most
    ``TOL`` (so a run's number does not depend on how long its stack-mates iterate). A non-finite run is
    settled with its NaN at once; runs still open at the last check keep their last value and estimate."""

    def __init__(self, like: torch.Tensor, steps: Steps):
        self.steps = steps
        self.hist: dict[int, torch.Tensor] = {}
        self.value = torch.full_like(like, float("nan"))
        self.err = torch.full_like(like, float("inf"))
        self.done = torch.zeros_like(like, dtype=torch.bool)
        self.last = 0

    def due(self, m: int) -> bool:
        """Whether step count m is a check (or feeds one: the estimate needs the two checks before)."""
        return m == self.steps.max or (m % CHECK == 0 and m >= self.steps.min - 2 * HISTORY)

    def add(self, m: int, x: torch.Tensor, exact: bool = False) -> bool:
        """Record the extreme after m steps, [R] or [R, k] (k independent starts: the largest counts, and
        the starts' spread joins the estimate); ``exact``: the Krylov space is the whole space. True when
        every run is settled (one host synchronisation)."""
        self.hist[m], self.last = x, m
        final = exact or m == self.steps.max
        if not final and (m < self.steps.min or m - 2 * HISTORY not in self.hist):
            return False
        if exact:
            err = torch.zeros_like(x)
        elif m - 2 * HISTORY in self.hist:
            err = _estimate(x, self.hist[m - HISTORY], self.hist[m - 2 * HISTORY])
        else:
            err = torch.full_like(x, float("inf"))
        if x.dim() == 2:
            top = x.amax(-1)
            err = torch.maximum(err.amax(-1), (top - x.amin(-1)) / top.abs())
            x = top
        err = torch.where(torch.isfinite(x), err, float("inf"))
        take = ~self.done & ((err <= TOL) | ~torch.isfinite(x))
        self.value = torch.where(take, x, self.value)
        self.err = torch.where(take, err, self.err)
        self.done |= take
        if final:
            open_ = ~self.done
            self.value = torch.where(open_, x, self.value)
            self.err = torch.where(open_, err, self.err)
        return bool(self.done.all())


def lanczos(op, v0: torch.Tensor, steps: Steps) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Largest eigenvalue per run of the batched symmetric ``op`` by Lanczos from the k columns of v0
    [R, H, k, N], one independent recurrence each (the columns share every product): (value [R], relative error
    estimate [R], steps taken).

    The top of H_z's spectrum is clustered: from one start the Ritz value can sit on the second eigenvalue for
    50 steps before the first emerges (measured: 4.3e-4 below λmax at N = 512, H = 16, ReLU), and no
    convergence test sees that. Two starts whose values must agree catch it (the largest counts); the second
    column shares every read of the weights but still costs 50–90 % of a product on one CPU core (MKL streams
    2-row products slower than 1-row ones; ``benchmarks/hessian_monitor.py``).
    No reorthogonalisation: in floating point the lost orthogonality only duplicates converged Ritz values,
    the largest still converges to λmax (Paige); measured at N = 512, H = 8/32 it matches full
    reorthogonalisation to 1e-15 with the same step counts, and saves the O(steps²·n) projections (a third of
    the time at H = 32). Where steps could exhaust the space (n ≤ steps.max) the basis is kept and fully
    reorthogonalised (classical Gram–Schmidt, twice), so small problems stay exact. The extreme Ritz values
    are checked every ``CHECK`` steps (see :class:`_Checks`); the residual bound ‖op y − θ y‖ does not help
    here: the edges of H_z's spectrum are clustered, so it stays far above the eigenvalue's error."""
    R, H, k, N = v0.shape
    n = H * N
    reorth = n <= steps.max
    steps = Steps(min(steps.min, n), min(steps.max, n)) if reorth else steps
    dims = (1, 3)  # a vector per run and column: [R, H, k, N]
    basis = v0.new_empty(steps.max + 1, *v0.shape) if reorth else None
    q, q_prev = v0, torch.zeros_like(v0)
    if basis is not None:
        basis[0] = q
    alpha = v0.new_empty(R, k, steps.max)
    beta = v0.new_zeros(R, k, steps.max)
    tiny = torch.finfo(v0.dtype).tiny ** 0.5
    lost = 1e3 * torch.finfo(v0.dtype).eps
    checks = _Checks(alpha[:, 0, 0], steps)
    for j in range(steps.max):
        w = op(q)
        alpha[..., j] = (q * w).sum(dims)
        size = w.pow(2).sum(dims).sqrt()
        if basis is not None:
            for _ in range(2):
                c = torch.einsum("jrhkn,rhkn->jrk", basis[:j + 1], w)
                w = w - torch.einsum("jrk,jrhkn->rhkn", c, basis[:j + 1])
        else:
            w = w - alpha[:, None, :, j, None] * q - (beta[:, None, :, j - 1, None] * q_prev if j else 0.0)
        b = w.pow(2).sum(dims).sqrt()
        # an invariant subspace is found (what is left is round-off): stop this recurrence there
        b = torch.where(b > lost * size, b, torch.zeros_like(b))
        beta[..., j] = b
        q, q_prev = w * ((b > 0).to(w.dtype) / b.clamp_min(tiny))[:, None, :, None], q
        if basis is not None:
            basis[j + 1] = q
        m = j + 1
        if checks.due(m):  # the tridiagonal's entries to the host, its top Ritz values [R, k] back
            top = _on_host(_top_ritz, torch.cat([alpha[..., :m], beta[..., :m - 1]], -1))
            if checks.add(m, top, exact=basis is not None and m == n):
                break
    return checks.value, checks.err, checks.last


def lobpcg_min(f: Factors, prec, x0: torch.Tensor, steps: Steps) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Smallest eigenvalue of H_z per run by single-vector LOBPCG with the preconditioner ``prec``:
    Rayleigh–Ritz on span{x, prec(r), p} each step (orthonormalised, so the 3×3 problem stays well
    conditioned). The Rayleigh quotient decreases monotonically to λmin and is checked every ``CHECK`` steps
    (see :class:`_Checks`). Returns (value [R], relative error estimate [R], steps taken)."""
    tiny = torch.finfo(x0.dtype).tiny ** 0.5
    lost = 1e3 * torch.finfo(x0.dtype).eps
    x = x0 / _norm(x0)
    hx = matvec(f, x)
    p = hp = None
    checks = _Checks(x0[:, 0, 0, 0], steps)
    for i in range(steps.max + 1):
        lam = _dot(x, hx)
        if checks.due(i) and i and checks.add(i, lam.view(-1)) or i == steps.max:
            break
        r = hx - lam * x
        wv = prec(r)
        basis, hbasis, dead = [x], [hx], [torch.zeros_like(lam.view(-1))]
        for v in (wv, p) if p is not None else (wv,):
            hv = matvec(f, v) if v is wv else hp
            size = _norm(v)
            for _ in range(2):  # orthonormalise against the basis so far (H v follows linearly)
                for b_, hb in zip(basis, hbasis):
                    c = _dot(b_, v)
                    v, hv = v - c * b_, hv - c * hb
            nv = _norm(v)
            ok = nv > lost * size  # else only round-off is left (converged): the direction is dropped
            scale = ok.to(v.dtype) / nv.clamp_min(tiny)
            basis.append(v * scale)
            hbasis.append(hv * scale)
            dead.append((~ok).to(v.dtype).view(-1))
        g = torch.stack([torch.stack([_dot(a, hb)[:, 0, 0, 0] for hb in hbasis], -1) for a in basis], -2)
        g = torch.where(torch.isfinite(g), 0.5 * (g + g.mT), 0.0)  # a non-finite run: NaN later
        big = 1e6 * (g.abs().amax(dim=(1, 2)) + 1.0)  # a dropped direction is never the smallest
        g = g + torch.diag_embed(torch.stack(dead, -1) * big.unsqueeze(-1))
        c0 = _on_host(_smallest_ritz_vector, g)  # the smallest Ritz pair's coefficients [R, d]
        coef = [c0[:, i].view(-1, 1, 1, 1) for i in range(len(basis))]
        p = sum(ci * b_ for ci, b_ in zip(coef[1:], basis[1:]))
        hp = sum(ci * hb for ci, hb in zip(coef[1:], hbasis[1:]))
        x = coef[0] * basis[0] + p
        hx = coef[0] * hbasis[0] + hp
        nx = _norm(x).clamp_min(tiny)
        x, hx = x / nx, hx / nx
    return checks.value, checks.err, checks.last


def structured_extremes(f: Factors, curvature: bool, stats: dict[str, int] | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, str]:
    """(λmin, λmax, relative error estimate, method) per run [R] from the factored H_z (device tensors);
    ``stats``, where given, receives the steps each iteration took."""
    R, H, N = f.shape
    hi, err_hi, m_hi = lanczos(lambda v: matvec(f, v), _start(R, H, N, STARTS, f.w, 0), LANCZOS_STEPS)
    prec = GramInverse(f)
    if not curvature:  # H_z = AᵀA + c_z I
        th, err_lo, m_lo = lanczos(prec, _start(R, H, N, STARTS, f.w, 1), SHIFT_INVERT_STEPS)
        lo = f.delta[:, 0, 0] + 1.0 / th  # θ's relative error bounds λmin's (c_z ≥ 0)
        method = "lanczos_LA+shift_invert_woodbury"
    else:
        lo, err_lo, m_lo = lobpcg_min(f, prec, _start(R, H, N, 1, f.w, 2), LOBPCG_STEPS)
        method = "lanczos_LA+lobpcg_gram_preconditioned"
    if stats is not None:
        stats.update(lanczos=m_hi, **{method.split("+")[1]: m_lo})
    return lo, hi, torch.maximum(err_hi, err_lo), method


# ----------------------------------------------------------------------------- dense route, blocks


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


def dense_extremes(spec: NetSpec, w: Weights, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor,
                   activity_decay: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(λmin, λmax) [R] by one batched eigvalsh of the dense H_z (on the runs' device)."""
    hz = activity_hessian(spec, w, x, y, z, activity_decay)
    ev = torch.linalg.eigvalsh(torch.where(torch.isfinite(hz), hz, 0.0))  # a non-finite run: NaN later
    return ev[:, 0], ev[:, -1]


def monitor(spec: NetSpec, w: Weights, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor,
            activity_decay: float = 0.0, dense_max_n: int = DENSE_CROSSOVER_N, stats: dict[str, int] | None = None
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, str]:
    """(λmin, λmax, κ, method) per run (CPU float64 [R]) for the first sample of each run's batch:
    x [R, B, D], y [R, B, d_y], z [R, H, B, N] (post-inference activities, current weights).

    Dense ``eigvalsh`` up to n = N·H = ``dense_max_n``, the batched Krylov extremes above it (``stats``: see
    :func:`structured_extremes`). A run with non-finite weights or activities gets NaN."""
    x1, y1, z1 = x[:, 0], y[:, 0], z[:, :, 0]
    R = w.runs
    if dense_max_n >= spec.N * spec.H:
        lo, hi = dense_extremes(spec, w, x1, y1, z1, activity_decay)
        err, method = torch.zeros_like(lo), "dense_eigvalsh"
    else:
        f = factors(spec, w, x1, y1, z1, activity_decay)
        lo, hi, err, method = structured_extremes(f, spec.act == "tanh", stats)
    finite = torch.stack([torch.isfinite(t).flatten(1).all(1) for t in (*w.tensors(), x1, y1, z1)]).all(0)
    out = torch.stack([lo, hi, err, finite.to(lo.dtype)]).cpu()  # the one transfer
    lo, hi, err, ok = out[0].clone(), out[1].clone(), out[2], out[3].bool()
    redo = [r for r in range(R) if ok[r] and not (bool(torch.isfinite(lo[r]) and torch.isfinite(hi[r]))
                                                  and float(err[r]) <= TOL)]
    if redo and method != "dense_eigvalsh":  # an estimate above the tolerance: the previous route
        idx = torch.tensor(redo, device=w.w_in.device)
        sub = Weights(*(t[idx] for t in w.tensors()))
        blocks = run_blocks(spec, sub, x1[idx], y1[idx], z1[idx], activity_decay)
        again = set()
        for r, b in zip(redo, blocks):
            e = scipy_extremes(b, dense_max_n=FALLBACK_DENSE_MAX_N)
            lo[r], hi[r] = e.lambda_min, e.lambda_max
            again.add(f"{e.method_max}+{e.method_min}")
        method += "/" + "/".join(sorted(again))
    lo[~ok], hi[~ok] = float("nan"), float("nan")
    return lo, hi, hi.abs() / lo.abs(), method
