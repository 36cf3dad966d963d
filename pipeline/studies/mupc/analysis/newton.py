"""Equilibria of tanh and ReLU nets by Newton's method (spec §3); ``theory.numerical_equilibrium`` (gradient
descent) stays the reference the tests hold this against.

Why it is cheap. Per sample the hidden errors ε = (ε_1 … ε_H) have the Jacobian T = ∂ε/∂z, unit lower
block-bidiagonal (I on the diagonal, −J_ℓ below it), and the output error ε_L has E = ∂ε_L/∂z =
(0, …, 0, −J_H), d_y rows. So the activity Hessian is ``H_z = TᵀT + EᵀE + Λ`` with Λ = −diag(φ''(z) ⊙
a_{ℓ+1} W_{ℓ+1}ᵀ ε_{ℓ+1}) diagonal, zero for linear and ReLU nets. Its Gauss–Newton part P = TᵀT + EᵀE is
inverted exactly in O(d_y·H·N²) a sample: T and Tᵀ by one sweep over the layers each, the rank-d_y term
by Woodbury on a d_y × d_y system (P = Tᵀ(I + GᵀG)T with G = E T⁻¹) — never the O(H·N³) block Cholesky
of the assembled blocks.

* linear and ReLU nets: one such solve is the exact Newton step (on a fixed ReLU pattern the energy is
  quadratic, so the step lands on that piece's minimiser);
* tanh: preconditioned CG on H_z with P as the preconditioner, a fixed number of iterations, each sample
  stopped at negative curvature (its direction then the Gauss–Newton one, always a descent direction).

On a GPU a step reads the host once: the convergence test (every sample's RMS (sub)gradient < ``tol``; gradient descent
tests each run's RMS over its samples, which this implies) together with each sample's ReLU active set. Its line
search tries fixed step sizes: a GPU evaluates them all at once; the CPU, where a read costs nothing, tries them in
turn until every sample has its step (most take the first). The same read drops converged samples from the
batch: they no longer move, and a batch's last steps are spent on its few slowest samples (at N = 512 on MNIST,
half the samples converge by a ReLU net's ninth step and the last one at its fifteenth), so each step computes
only the samples still moving (``benchmarks/equilibrium.py`` counts these sample-steps). Where Newton has not
converged after ``max_steps`` the reference gradient descent finishes from its iterate, and the steps it took
are recorded (``fallback_steps``).

ReLU kinks: a unit at z = 0 whose one-sided gradients straddle 0 as at a minimum (left ≤ 0 ≤ right) is
stationary, as in today's residual (``theory.relu_residual``). Such units are held at 0 (the active set K)
and the step is a Newton step on the face z_K = 0: there T loses the held units' columns but their errors
still depend on the layer below, so those rows join E in the Woodbury term (rank d_y + |K|, |K| padded to
the batch's largest). A free unit at 0 takes the side its one-sided gradients descend to, and a step that
carries a unit out of its side stops it at 0, as gradient descent does. Any other unit at 0 can still
descend on one side (``state_at``): Newton moves it and counts it unconverged, where today's residual calls
some such kinks stationary.

The ReLU energy is piecewise quadratic and not convex: where a sample has several local minima, Newton and
gradient descent can stop in different ones (``benchmarks/equilibrium.py`` counts them; docs/decisions.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pipeline.studies.mupc.analysis.theory import (
    Equilibrium,
    numerical_equilibrium,
    one_sided,
    pulls,
    relu_residual,
    sample_energies,
)
from pipeline.studies.mupc.engine.energy import errors
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

# Step sizes the line search tries, largest first; the largest that decreases the energy enough (Armijo,
# c = 1e-4) is taken.
STEP_SIZES = (1.0, 0.5, 0.25, 0.125, 1 / 16, 1 / 64, 1 / 256)
NEWTON_TRIES = 4  # tanh: the first sizes along Newton's direction, then all along Gauss–Newton's
ARMIJO = 1e-4
# Devices whose line search evaluates its tries in turn, reading the host after each: on the CPU a read costs
# nothing and most steps take their first try; a GPU evaluates them all at once and waits for no read.
TRIES_IN_TURN = ("cpu",)
# Energy differences below this fraction of F are rounding: near z* a Newton step lowers F by ≈ ½ gᵀH⁻¹g,
# far below float64's resolution of F, and must not be refused for it.
ROUNDING = 1e-13


def _bmm(u: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``u [R, …, n] @ w [R, n, m] → [R, …, m]`` as one batched product over the run axis."""
    R = u.shape[0]
    return torch.bmm(u.reshape(R, -1, u.shape[-1]), w).reshape(*u.shape[:-1], w.shape[-1])


def _layers_mm(u: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``u [R, L, …, n] @ w [R, L, n, m] → [R, L, …, m]``: every layer's product in one call."""
    R, L = u.shape[:2]
    out = torch.bmm(u.reshape(R * L, -1, u.shape[-1]), w.reshape(R * L, *w.shape[-2:]))
    return out.reshape(*u.shape[:-1], w.shape[-1])


def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-sample inner product of ``[R, H, B, 1, N]`` vectors: ``[R, B]``."""
    return (a * b).sum(dim=(1, 3, 4))


@dataclass
class Linearisation:
    """The step's model at z: φ'(z) (ReLU: the side each unit moves on), which units move, and Λ (tanh)."""

    dp: torch.Tensor  # [R, H, B, 1, N]
    free: torch.Tensor  # [R, H, B, 1, N], 1 where a unit moves, 0 where it is held at a kink
    curv: torch.Tensor | None  # Λ's diagonal [R, H, B, 1, N] (tanh), else None


class Model:
    """Products with J_ℓ, the T/Tᵀ sweeps, H_z v and the Gauss–Newton solve at one linearisation."""

    def __init__(self, spec: NetSpec, w: Weights, m: Multipliers, lin: Linearisation):
        self.spec, self.w, self.m, self.lin = spec, w, m, lin
        self.w_hid_t = w.w_hid.transpose(-1, -2)  # [R, H-1, N, N]: rows of μ_{ℓ+1} = a W φ(z_ℓ)
        self.free_dp = lin.free * lin.dp

    # J_ℓ v = a W_{ℓ+1}(φ'(z_ℓ) ⊙ v) + s v (hidden); J_H v = a_L W_L(φ'(z_H) ⊙ v) (read-out)
    def j(self, v: torch.Tensor, ell: int) -> torch.Tensor:
        return self.m.a_hid * _bmm(self.lin.dp[:, ell] * v, self.w_hid_t[:, ell]) + self.m.s * v

    def jt(self, u: torch.Tensor, ell: int) -> torch.Tensor:
        return self.lin.dp[:, ell] * (self.m.a_hid * _bmm(u, self.w.w_hid[:, ell])) + self.m.s * u

    def j_out(self, v: torch.Tensor) -> torch.Tensor:
        return self.m.a_out * _bmm(self.lin.dp[:, -1] * v, self.w.w_out.transpose(-1, -2))

    def jt_out(self, u: torch.Tensor) -> torch.Tensor:
        return self.lin.dp[:, -1] * (self.m.a_out * _bmm(u, self.w.w_out))

    def lower(self, v: torch.Tensor) -> torch.Tensor:
        """Solve T d = v on the free units (forward sweep): d_1 = v_1, d_{ℓ+1} = v_{ℓ+1} + J_ℓ d_ℓ."""
        f = self.lin.free
        d = [f[:, 0] * v[:, 0]]
        for ell in range(self.spec.H - 1):
            d.append(f[:, ell + 1] * (v[:, ell + 1] + self.j(d[-1], ell)))
        return torch.stack(d, dim=1)

    def upper(self, r: torch.Tensor) -> torch.Tensor:
        """Solve Tᵀ u = r on the free units (backward sweep): u_H = r_H, u_ℓ = r_ℓ + J_ℓᵀ u_{ℓ+1}."""
        f, H = self.lin.free, self.spec.H
        u = [f[:, H - 1] * r[:, H - 1]]
        for ell in reversed(range(H - 1)):
            u.append(f[:, ell] * (r[:, ell] + self.jt(u[-1], ell)))
        return torch.stack(u[::-1], dim=1)

    def upper_from(self, r: torch.Tensor, top: int) -> list[torch.Tensor]:
        """Tᵀ⁻¹ of columns ``r [R, B, k, N]`` that are nonzero in layer ``top`` alone: the backward sweep starts
        there and the layers above stay 0, so a held unit's row costs its layers below, not all H. Returns the
        layers ``0 … top``, each ``[R, B, k, N]``."""
        f, a, s = self.lin.free, self.m.a_hid, self.m.s
        u = f[:, top] * r
        out = [u]
        for ell in reversed(range(top)):  # f ⊙ J_ℓᵀ u in place, its factors of 1 and 0 skipped (f is 0 or 1)
            v = _bmm(u, self.w.w_hid[:, ell])
            if a != 1.0:
                v.mul_(a)
            v.mul_(self.free_dp[:, ell])
            if s:
                v.add_(f[:, ell] * (s * u))
            out.append(v)
            u = v
        return out[::-1]

    def hv(self, v: torch.Tensor) -> torch.Tensor:
        """H_z v on the free units: TᵀT v + EᵀE v + Λ v, every layer's products at once."""
        dp, m = self.lin.dp, self.m
        tv = v.clone()
        if self.spec.H > 1:  # (T v)_{ℓ+1} = v_{ℓ+1} − J_ℓ v_ℓ
            tv[:, 1:] -= m.a_hid * _layers_mm(dp[:, :-1] * v[:, :-1], self.w_hid_t) + m.s * v[:, :-1]
        out = tv.clone()
        if self.spec.H > 1:  # (Tᵀ u)_ℓ = u_ℓ − J_ℓᵀ u_{ℓ+1}
            out[:, :-1] -= dp[:, :-1] * (m.a_hid * _layers_mm(tv[:, 1:], self.w.w_hid)) + m.s * tv[:, 1:]
        out[:, -1] += self.jt_out(self.j_out(v[:, -1]))
        if self.lin.curv is not None:
            out = out + self.lin.curv * v
        return out * self.lin.free


class GaussNewton:
    """P⁻¹ = T⁻¹(I − Gᵀ(I + GGᵀ)⁻¹G)T⁻ᵀ with Gᵀ = T⁻ᵀ[E; rows of held units]ᵀ, factored once a step. G is
    kept as blocks, one per layer its rows start in (E's at the top, held units' below), each only on the
    layers its sweep reached: a block is zero above its layer, and neither storing, multiplying nor copying
    those zeros (a third of G in an SP ReLU net at N = 512) is paid for. Every product is a batched matmul
    over (run, sample) of one block on one layer."""

    def __init__(self, model: Model, held: list[tuple[int, torch.Tensor]] | None = None):
        """``held``: per layer below a held unit, its rows ``[R, B, k_ℓ, N]`` (:func:`held_rows`)."""
        lin, m, w = model.lin, model.m, model.w
        R, H, B, _, N = lin.dp.shape
        e_rows = lin.dp[:, -1] * (m.a_out * w.w_out[:, None])  # [R, B, d_y, N]: E's rows, −J_H up to sign
        self.model = model
        # per block: its rows' offset in G and its layers 0 … top, each [R·B, k_b, N]
        self.blocks: list[tuple[int, list[torch.Tensor]]] = []
        k = 0
        for top, rows in [(H - 1, e_rows)] + list(held or []):
            self.blocks.append((k, [u.reshape(R * B, -1, N) for u in model.upper_from(rows, top)]))
            k += rows.shape[2]
        self.k = k
        s = lin.dp.new_zeros(R * B, k, k)
        for i, (ka, ga) in enumerate(self.blocks):
            for kb, gb in self.blocks[i:]:
                block = sum(torch.bmm(a, b.transpose(1, 2)) for a, b in zip(ga, gb, strict=False))
                s[:, ka:ka + block.shape[1], kb:kb + block.shape[2]] = block
                if kb != ka:
                    s[:, kb:kb + block.shape[2], ka:ka + block.shape[1]] = block.transpose(1, 2)
        s.diagonal(dim1=-2, dim2=-1).add_(1.0)
        self.chol = torch.linalg.cholesky_ex(s).L if k else s  # S ⪰ I: no failure to check (no host read)

    def solve(self, r: torch.Tensor) -> torch.Tensor:
        q = self.model.upper(r)  # [R, H, B, 1, N]
        if self.k:
            R, H, B, _, N = q.shape
            q_layers = [q[:, h].reshape(R * B, N, 1) for h in range(H)]
            t = torch.cat([sum(torch.bmm(g, qh) for g, qh in zip(gs, q_layers, strict=False))
                           for _, gs in self.blocks], dim=1)
            lam_t = torch.cholesky_solve(t, self.chol).transpose(1, 2)  # [R·B, 1, k]
            q = q.clone()
            for k0, gs in self.blocks:
                lam_b = lam_t[:, :, k0:k0 + gs[0].shape[1]]
                for h, g in enumerate(gs):
                    q[:, h] -= torch.bmm(lam_b, g).reshape(R, B, 1, N)
        return self.model.lower(q)


def pcg(model: Model, gn: GaussNewton, g: torch.Tensor, iters: int,
        rtol: float = 1e-12) -> tuple[torch.Tensor, torch.Tensor]:
    """Approximately solve H_z d = −g per sample by CG preconditioned with P, ``iters`` iterations without
    reading the host: a sample stops where its residual falls below ``rtol`` (relative, P⁻¹-norm) or at
    negative curvature, keeping its last iterate (the preconditioned gradient if that is the first). Returns
    the Newton direction and the Gauss–Newton one, −P⁻¹g."""
    r = -g
    zt = gauss_newton = gn.solve(r)
    p, rz = zt, _dot(r, zt)
    rz0 = rz
    x = torch.zeros_like(g)
    going = torch.ones_like(rz, dtype=torch.bool)
    for it in range(iters):
        hp = model.hv(p)
        php = _dot(p, hp)
        curved = php > 0
        if it == 0:  # negative curvature at once: the Gauss–Newton direction
            x = torch.where((~curved)[:, None, :, None, None], zt, x)
        step = going & curved
        alpha = torch.where(step, rz / torch.where(curved, php, torch.ones_like(php)), torch.zeros_like(php))
        x = x + alpha[:, None, :, None, None] * p
        r = r - alpha[:, None, :, None, None] * hp
        zt = gn.solve(r)
        rz_new = _dot(r, zt)
        going = step & (rz_new > rtol**2 * rz0)
        beta = torch.where(going, rz_new / torch.where(rz > 0, rz, torch.ones_like(rz)), torch.zeros_like(rz))
        p = zt + beta[:, None, :, None, None] * p
        rz = rz_new
    return x, gauss_newton


@dataclass
class State:
    """Everything a step needs at z: energy, model gradient, residual, the ReLU pattern and held set."""

    z: torch.Tensor
    f: torch.Tensor  # [R, B] per-sample energy
    grad: torch.Tensor  # [R, H, B, N] gradient of the step's model (ReLU: on each unit's side)
    residual: torch.Tensor  # [R, B] per-sample RMS (sub)gradient
    dp: torch.Tensor  # [R, H, B, N]
    held: torch.Tensor | None  # [R, H, B, N] bool (ReLU)
    curv: torch.Tensor | None  # [R, H, B, N] (tanh)

    def take(self, idx: torch.Tensor) -> State:
        """These samples' state alone (``idx``: sample indices on the device)."""
        def on(t: torch.Tensor | None, dim: int) -> torch.Tensor | None:
            return None if t is None else t.index_select(dim, idx)

        return State(on(self.z, 2), on(self.f, 1), on(self.grad, 2), on(self.residual, 1), on(self.dp, 2),
                     on(self.held, 2), on(self.curv, 2))

    def linearisation(self) -> Linearisation:
        """The step's model, with the column axis of :class:`Model`'s vectors."""
        free = torch.ones_like(self.dp) if self.held is None else (~self.held).to(self.dp.dtype)
        return Linearisation(self.dp.unsqueeze(3), free.unsqueeze(3),
                             None if self.curv is None else self.curv.unsqueeze(3))


def state_at(spec: NetSpec, w: Weights, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor, m: Multipliers,
             mu1: torch.Tensor) -> State:
    eps, eps_out = errors(spec, w, x, y, z, m, mu1)
    f = sample_energies(eps, eps_out)
    if spec.act == "relu":
        left, right = one_sided(spec, w, z, eps, eps_out, m)
        at0 = z == 0
        held = at0 & (left <= 0) & (right >= 0)  # a convex kink: a local minimum along the unit
        # Today's residual calls every kink whose one-sided gradients do not share a sign stationary (Clarke),
        # a concave one (left > 0 > right) or one with a zero slope beside a descending one too. Gradient
        # descent never climbs onto those; a Newton step can land there, so Newton leaves them on the steeper
        # descending side and counts them unconverged by that slope.
        descent = torch.maximum(left.clamp_min(0.0), (-right).clamp_min(0.0))
        res = torch.where(at0 & ~held, descent, relu_residual(z, left, right))
        up = (z > 0) | (at0 & ~held & (-right >= left))  # the side a unit moves on: φ' = 1 above 0
        dp = up.to(z.dtype)
        grad = torch.where(up, right, left).masked_fill(held, 0.0)
        return State(z, f, grad, res.pow(2).mean(dim=(1, 3)).sqrt(), dp, held, None)
    pull, skip = pulls(spec, w, eps, eps_out, m)
    dp = dphi(spec.act, z)
    grad = eps - skip - dp * pull
    curv = -ddphi(spec.act, z) * pull if spec.act == "tanh" else None
    return State(z, f, grad, grad.pow(2).mean(dim=(1, 3)).sqrt(), dp, None, curv)


def held_counts(st: State) -> torch.Tensor:
    """Per layer ℓ ≥ 2 (index 1 …) and sample, the most units held in any run: ``[H − 1, B]``; a layer's
    largest over the samples a step computes is the rows that layer adds."""
    return st.held[:, 1:].sum(dim=3).amax(dim=0)


def held_rows(spec: NetSpec, w: Weights, m: Multipliers, st: State,
              counts: list[int]) -> list[tuple[int, torch.Tensor]]:
    """The errors of held units as rows over the layer below (e_iᵀ J_{ℓ−1}), grouped by that layer:
    ``[(ℓ − 1, rows [R, B, k_ℓ, N])]`` for each layer ℓ ≥ 2 with held units, padded with zero rows to the
    batch's most in that layer, ``counts[ℓ − 1]`` (from :func:`held_counts`; a held unit of the first layer has
    no such row: its error depends on no other activity)."""
    R, H, B, N = st.z.shape
    r_idx = torch.arange(R, device=st.z.device)[:, None, None]
    units = torch.arange(N, device=st.z.device)
    out = []
    for ell, k in enumerate(counts, start=1):
        if not k:
            continue
        score, unit = st.held[:, ell].to(st.z.dtype).topk(k, dim=-1)  # [R, B, k]: held units first
        rows = m.a_hid * w.w_hid[:, ell - 1][r_idx, unit]  # [R, B, k, N]: a W_ℓ[i, :]
        rows = rows * st.dp[:, ell - 1].unsqueeze(2)
        if m.s:
            rows = rows + m.s * (unit.unsqueeze(-1) == units).to(rows.dtype)
        out.append((ell - 1, rows * score.unsqueeze(-1)))  # padding rows vanish
    return out


def _bounds(spec: NetSpec, st: State) -> tuple[torch.Tensor, torch.Tensor] | None:
    """ReLU: the box each unit stays in, its side of 0 (a unit that would cross stops at 0), held units at 0;
    one ``clamp`` then projects a trial point."""
    if spec.act != "relu":
        return None
    up, free = st.dp > 0, ~st.held
    lo = torch.zeros_like(st.z).masked_fill_(free & ~up, -torch.inf)
    hi = torch.zeros_like(st.z).masked_fill_(free & up, torch.inf)
    return lo, hi


def line_search(spec: NetSpec, w: Weights, x: torch.Tensor, y: torch.Tensor, st: State,
                tries: list[tuple[torch.Tensor, float]], m: Multipliers, mu1: torch.Tensor,
                moving: torch.Tensor, in_turn: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The (direction, step size) pairs of ``tries``, in order of preference; per sample the first with enough
    decrease (Armijo) is taken. Returns the new z and which samples found none (they stay).

    All at once (no host read), or ``in_turn``: in order, until every moving sample has its step (a host read a
    try; most steps take the first, so the rest are never evaluated). Both take the same tries."""
    z_new, found = st.z, torch.zeros_like(moving)
    noise = ROUNDING * st.f.abs()
    box = _bounds(spec, st)
    # at once, the most preferred accepted try wins by being written last; in turn, by being found first
    for d, a in (tries if in_turn else reversed(tries)):
        za = torch.add(st.z, d, alpha=a)  # the sizes are powers of 2: a·d is exact
        if box is not None:
            za = za.clamp_(*box)
        eps, eps_out = errors(spec, w, x, y, za, m, mu1)
        fa = sample_energies(eps, eps_out)
        decrease = (st.grad * (za - st.z)).sum(dim=(1, 3))
        ok = moving & (fa <= st.f + ARMIJO * decrease + noise)
        if in_turn:
            ok = ok & ~found
        z_new = torch.where(ok[:, None, :, None], za, z_new)
        found = found | ok
        if in_turn and not bool((moving & ~found).any()):
            break
    return z_new, moving & ~found


def newton_equilibrium(spec: NetSpec, w: Weights, x: torch.Tensor, y: torch.Tensor, z0: torch.Tensor, *,
                       tol: float = 1e-8, max_steps: int = 50, cg_iters: int = 3,
                       fallback_max_steps: int = 20000, drop_converged: bool = True) -> Equilibrium:
    """z* per sample by Newton (module docstring), from ``z0 [R, H, B, N]`` (float64). Converged when every
    sample's RMS (sub)gradient is below ``tol``; otherwise gradient descent finishes (at most
    ``fallback_max_steps``; 0: none). A step computes only the samples some run has not converged on;
    ``drop_converged=False`` computes every sample at every step, the reference the tests and
    ``benchmarks/equilibrium.py`` hold this against."""
    if spec.act not in ("linear", "tanh", "relu"):
        raise ValueError(f"activation {spec.act!r} is not one of linear, tanh, relu")
    m = multipliers(spec)
    mu1 = input_prediction(w, m, x)
    y_runs = _runs(y, w.runs)
    st = state_at(spec, w, x, y_runs, z0.clone(), m, mu1)
    z_out, residual_out = st.z.clone(), st.residual.clone()  # every sample's, written back as samples leave
    B = st.f.shape[1]
    samples = list(range(B))  # which of the batch's samples the working tensors hold, in order
    idx = None  # the same on the device; None while they hold all
    xs, ys, mus = x, y_runs, mu1
    failed = torch.zeros((), dtype=torch.long, device=st.z.device)  # samples × steps without a decrease
    steps = sample_steps = 0
    while True:
        done = st.residual < tol
        per_sample = held_counts(st) if st.held is not None and spec.H > 1 else done.new_zeros((0, len(samples)))
        read = torch.cat([done.all().long().view(1), done.all(dim=0).long(), per_sample.long().flatten()])
        all_done, *flags = read.tolist()  # the step's one host read
        sample_done, held = flags[:len(samples)], flags[len(samples):]
        if all_done or steps == max_steps:
            break
        # the samples this step computes: those some run has not converged on (they leave the batch for good)
        working = [i for i, d in enumerate(sample_done) if not d] if drop_converged else range(len(samples))
        counts = [max(row[i] for i in working) for row in _rows(held, len(samples))]
        if len(working) < len(samples):
            _write_back(z_out, residual_out, idx, st)
            keep = torch.tensor(working, device=st.z.device)
            samples = [samples[i] for i in working]
            idx = torch.tensor(samples, device=st.z.device)
            st, done = st.take(keep), done.index_select(1, keep)
            xs, ys, mus = x.index_select(-2, idx), y_runs.index_select(1, idx), mu1.index_select(1, idx)
        steps += 1
        sample_steps += len(samples)
        lin = st.linearisation()
        model = Model(spec, w, m, lin)
        gn = GaussNewton(model, held_rows(spec, w, m, st, counts) if st.held is not None else None)
        g = st.grad.unsqueeze(3)
        if lin.curv is None:  # linear, ReLU: the Gauss–Newton step is the Newton step
            d = gn.solve(-g).squeeze(3)  # one solve, every step size along it
            tries = [(d, a) for a in STEP_SIZES]
        else:  # tanh: Newton first, then the Gauss–Newton direction (always descending) where it fails
            newton_d, gn_d = (d.squeeze(3) for d in pcg(model, gn, g, cg_iters))
            tries = [(newton_d, a) for a in STEP_SIZES[:NEWTON_TRIES]] + [(gn_d, a) for a in STEP_SIZES]
        z, stuck = line_search(spec, w, xs, ys, st, tries, m, mus, ~done, in_turn=st.z.device.type in TRIES_IN_TURN)
        failed += stuck.sum()
        st = state_at(spec, w, xs, ys, z, m, mus)
    _write_back(z_out, residual_out, idx, st)
    residual = residual_out.amax(dim=1)
    if all_done or not fallback_max_steps:
        return Equilibrium(z_out, steps, residual, bool(all_done), fallback_steps=0, failed_steps=int(failed.sum()),
                           sample_steps=sample_steps)
    ref = numerical_equilibrium(spec, w, x, y, z_out, tol=tol, max_steps=fallback_max_steps)
    return Equilibrium(ref.z, steps, ref.residual, ref.converged, fallback_steps=ref.steps,
                       failed_steps=int(failed.sum()), sample_steps=sample_steps)


def _rows(flat: list[int], width: int) -> list[list[int]]:
    """A row-major list back into rows of ``width``."""
    return [flat[i:i + width] for i in range(0, len(flat), width)]


def _write_back(z: torch.Tensor, residual: torch.Tensor, idx: torch.Tensor | None, st: State) -> None:
    """The working samples' activities and residuals into the whole batch's (``idx``: their places; None: all)."""
    if idx is None:
        z.copy_(st.z)
        residual.copy_(st.residual)
    else:
        z.index_copy_(2, idx, st.z)
        residual.index_copy_(1, idx, st.residual)
