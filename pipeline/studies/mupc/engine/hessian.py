"""The activity Hessian H_z of one sample (spec §2): block assembly, banded storage, eigenvalues.

H_z = ∂²F/∂z∂z over the hidden activities z_1…z_H (layer-major), per sample (no 1/B). It is
symmetric block-tridiagonal with N×N blocks (§2.2):

* ``H_ℓℓ = (1 + c_z) I + J_ℓᵀ J_ℓ − diag(φ''(z_ℓ) ⊙ a_{ℓ+1} W_{ℓ+1}ᵀ ε_{ℓ+1})``,
* ``H_{ℓ,ℓ+1} = −J_ℓᵀ``, with ``J_ℓ = a_{ℓ+1} W_{ℓ+1} diag(φ'(z_ℓ)) + s_{ℓ+1} I`` (ℓ = H: read-out).

Activity decay adds ``c_z I`` to every diagonal block (the correct form of quirk Q2). Everything is
float64. Eigenvalue routes (each number records which one produced it, see :data:`METHODS`):

* ``dense``: ``numpy.linalg.eigvalsh`` of the assembled matrix (small n);
* ``banded``: LAPACK's ``dsbevd_2stage`` (all eigenvalues, :func:`band_eigenvalues`) on the (N+1)-row upper
  band of an orthogonally similar matrix (:func:`narrowed`); for the off-diagonal part O, on that of BᵀB, half
  as long (:func:`off_diagonal_spectrum`);
* ``lanczos_LA`` / ``lanczos_SA``: ``scipy.sparse.linalg.eigsh`` with the block-tridiagonal mat-vec;
* ``shift_invert_cholesky``: eigsh in shift-invert mode around 0 with a banded Cholesky solve (λ_min
  of a positive-definite H_z); falls back to ``lanczos_SA`` when the Cholesky fails (indefinite H_z).
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
import scipy.sparse.linalg as spla
import torch

from pipeline.studies.mupc.engine.energy import errors
from pipeline.studies.mupc.engine.model import Multipliers, NetSpec, Weights, ddphi, dphi, multipliers

# ARPACK's relative tolerance for the extremes. Measured against dense eigvalsh (N = 128, H = 32/64 and
# N = H = 64; sp-orthogonal linear/tanh without skips, μPC linear/relu with skips, sp relu): 1e-6 keeps the
# extremes within 3.4e-11 relative (Ritz values converge quadratically in the residual); 1e-4 lets λ_max
# drift by up to 8e-6; 1e-10 costs 1.4–2.7× the time of 1e-6 and stalled for minutes on a CUDA run
# (S4, H = 64, linear, orthogonal, no skips) that 1e-6 finished in 0.25 s.
LANCZOS_TOL = 1e-6

METHODS = ("dense", "banded", "dense_torch", "lanczos_LA", "lanczos_SA", "shift_invert_cholesky", "exact_blocks")


@dataclass
class Blocks:
    """Block-tridiagonal symmetric matrix: ``diag [H, N, N]`` and ``upper [H-1, N, N]`` (block ℓ,ℓ+1)."""

    diag: torch.Tensor
    upper: torch.Tensor

    @property
    def H(self) -> int:
        return self.diag.shape[0]

    @property
    def N(self) -> int:
        return self.diag.shape[1]

    @property
    def n(self) -> int:
        return self.H * self.N


def jacobians(spec: NetSpec, w: Weights, z: torch.Tensor, r: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample J_ℓ = ∂μ_{ℓ+1}/∂z_ℓ of run r for activities ``z [H, N]``: hidden [H-1, N, N], read-out [d_y, N]."""
    m = multipliers(spec)
    dp = dphi(spec.act, z)  # [H, N]
    eye = torch.eye(spec.N, dtype=z.dtype, device=z.device)
    j_hid = m.a_hid * w.w_hid[r] * dp[:-1].unsqueeze(1) + m.s * eye  # W diag(φ') = W * φ'[None, :]
    j_out = m.a_out * w.w_out[r] * dp[-1].unsqueeze(0)
    return j_hid, j_out


def hessian_blocks(spec: NetSpec, w: Weights, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor,
                   activity_decay: float = 0.0, r: int = 0) -> Blocks:
    """The analytic blocks of H_z for one sample: ``x [D]``, ``y [d_y]``, ``z [H, N]`` (run r)."""
    m = multipliers(spec)
    wr = Weights(w.w_in[r:r + 1], w.w_hid[r:r + 1], w.w_out[r:r + 1])
    eps, eps_out = errors(spec, wr, x.view(1, -1), y.view(1, -1), z.view(1, spec.H, 1, spec.N))
    eps, eps_out = eps[0, :, 0], eps_out[0, 0]  # [H, N], [d_y]
    j_hid, j_out = jacobians(spec, w, z, r)
    eye = torch.eye(spec.N, dtype=z.dtype, device=z.device)
    gram = torch.cat([j_hid.transpose(-1, -2) @ j_hid, (j_out.T @ j_out).unsqueeze(0)])
    # curvature term: φ''(z_ℓ) ⊙ a_{ℓ+1} W_{ℓ+1}ᵀ ε_{ℓ+1}
    back = torch.cat([m.a_hid * (w.w_hid[r].transpose(-1, -2) @ eps[1:].unsqueeze(-1)).squeeze(-1),
                      (m.a_out * (w.w_out[r].T @ eps_out)).unsqueeze(0)])
    curv = ddphi(spec.act, z) * back  # [H, N]
    diag = (1.0 + activity_decay) * eye + gram - torch.diag_embed(curv)
    upper = -j_hid.transpose(-1, -2)
    return Blocks(diag, upper)


def theory_multipliers(spec: NetSpec) -> Multipliers:
    """The multipliers of the linear theory: always the intended rule (1/√N without skips).

    Quirk Q1: the paper-era energy and forward code used 1/√(N·L) for μPC/NTP hidden branches without
    skips, but its analytic Hessian (D, O, H_theory of F3/F4) used 1/√N. So under
    ``legacy_noskip_branch_scale`` the numeric H_z takes 1/√(N·L) and the theory keeps 1/√N, as then;
    without the flag both are the same matrix."""
    return multipliers(spec.with_(legacy_noskip_branch_scale=False))


def theory_blocks(spec: NetSpec, w: Weights, activity_decay: float = 0.0, r: int = 0) -> Blocks:
    """Linear-network closed forms (§2.2): D_ℓ = (1+c_z+s)I + a²WᵀW + s a (W+Wᵀ); O_{ℓ,ℓ+1} = −(aW + sI)ᵀ,
    with :func:`theory_multipliers`."""
    m = theory_multipliers(spec)
    eye = torch.eye(spec.N, dtype=w.w_hid.dtype, device=w.w_hid.device)
    wh, wo = w.w_hid[r], w.w_out[r]
    d_hid = ((1.0 + activity_decay + m.s) * eye + m.a_hid**2 * wh.transpose(-1, -2) @ wh
             + m.s * m.a_hid * (wh + wh.transpose(-1, -2)))
    d_out = (1.0 + activity_decay) * eye + m.a_out**2 * wo.T @ wo
    return Blocks(torch.cat([d_hid, d_out.unsqueeze(0)]), -(m.a_hid * wh + m.s * eye).transpose(-1, -2))


def to_dense(b: Blocks) -> torch.Tensor:
    H, N = b.H, b.N
    out = torch.zeros(H * N, H * N, dtype=b.diag.dtype, device=b.diag.device)
    for ell in range(H):
        out[ell * N:(ell + 1) * N, ell * N:(ell + 1) * N] = b.diag[ell]
    for ell in range(H - 1):
        out[ell * N:(ell + 1) * N, (ell + 1) * N:(ell + 2) * N] = b.upper[ell]
        out[(ell + 1) * N:(ell + 2) * N, ell * N:(ell + 1) * N] = b.upper[ell].T
    return out


def split(b: Blocks) -> tuple[Blocks, Blocks]:
    """D (block-diagonal part) and O (off-diagonal part) of a block-tridiagonal matrix."""
    return Blocks(b.diag, torch.zeros_like(b.upper)), Blocks(torch.zeros_like(b.diag), b.upper)


def narrowed(b: Blocks) -> Blocks:
    """An orthogonally similar block-tridiagonal matrix whose off-diagonal blocks are triangular.

    With Q = diag(Q_1…Q_H), Q_1 = I, each Q_{ℓ+1} is the Q of a QR factorisation of (Q_ℓᵀ U_ℓ)ᵀ, so that
    Q_ℓᵀ U_ℓ Q_{ℓ+1} = Rᵀ is lower triangular: the band of QᵀH_zQ is N wide instead of 2N − 1, and the same
    eigenvalues cost ``eig_banded`` 1.7× less at n = 16,384 (``benchmarks/hessian_spectrum.py``)."""
    if b.H == 1:
        return b
    diag, upper = [b.diag[0]], []
    q = None
    for ell in range(b.H - 1):
        m = b.upper[ell] if q is None else q.T @ b.upper[ell]
        q, r = torch.linalg.qr(m.T)
        upper.append(r.T)
        diag.append(q.T @ b.diag[ell + 1] @ q)
    return Blocks(torch.stack(diag), torch.stack(upper))


def to_banded(b: Blocks, u: int | None = None) -> np.ndarray:
    """Upper band storage for LAPACK: ``ab[u + i − j, j] = A[i, j]`` (shape [u + 1, n]), by default u = 2N − 1,
    every entry of the off-diagonal blocks; u = N keeps their lower triangles only (:func:`narrowed`)."""
    H, N = b.H, b.N
    n, u = H * N, 2 * N - 1 if u is None else u
    ab = np.zeros((u + 1, n))
    d = b.diag.detach().cpu().numpy()
    up = b.upper.detach().cpu().numpy()
    p, q = np.meshgrid(np.arange(N), np.arange(N), indexing="ij")  # row p, col q within a block
    keep, near = q >= p, N + q - p <= u
    for ell in range(H):
        i, j = ell * N + p[keep], ell * N + q[keep]
        ab[u + i - j, j] = d[ell][keep]
    for ell in range(H - 1):
        i, j = ell * N + p[near], (ell + 1) * N + q[near]
        ab[u + i - j, j] = up[ell][near]
    return ab


def matvec_op(b: Blocks) -> spla.LinearOperator:
    """The block-tridiagonal mat-vec as a scipy LinearOperator (numpy float64)."""
    d = b.diag.detach().cpu().numpy()
    up = b.upper.detach().cpu().numpy()
    H, N = b.H, b.N

    def mv(v: np.ndarray) -> np.ndarray:  # memory-bound (3 reads of N²H doubles); einsum beat np.matmul and torch.bmm
        vb = np.asarray(v, dtype=np.float64).reshape(H, N)
        out = np.einsum("lij,lj->li", d, vb)
        if H > 1:
            out[:-1] += np.einsum("lij,lj->li", up, vb[1:])
            out[1:] += np.einsum("lji,lj->li", up, vb[:-1])
        return out.reshape(-1)

    return spla.LinearOperator((b.n, b.n), matvec=mv, dtype=np.float64)


@dataclass
class Extremes:
    lambda_max: float
    lambda_min: float
    method_max: str
    method_min: str
    seconds: float

    @property
    def kappa(self) -> float:
        return cond_num(self.lambda_max, self.lambda_min)


def cond_num(lmax: float, lmin: float) -> float:
    """κ = |λ_max| / |λ_min| with the signed extremes (the notebook's compute_cond_num)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.abs(lmax) / np.abs(lmin))


def _eigsh(op: spla.LinearOperator, which: str, tol: float, **kw) -> float:
    n = op.shape[0]
    ncv = min(n, max(20, kw.pop("ncv", 0) or 20))
    v0 = np.ones(n) / np.sqrt(n)
    vals = spla.eigsh(op, k=1, which=which, tol=tol, ncv=ncv, v0=v0, maxiter=max(1000, 10 * n), **kw)[0]
    return float(vals[0])


def extremes(b: Blocks, *, tol: float = LANCZOS_TOL, dense_max_n: int = 0, band_max_n: int = 0) -> Extremes:
    """λ_max and λ_min (signed) of a block-tridiagonal symmetric matrix: dense up to ``dense_max_n``; every
    eigenvalue of the narrowed band up to ``band_max_n`` (exact, and bounded: at n ≤ 4,096 on one core about 1 s
    at most, where Lanczos took ≤ 0.31 s on a well-conditioned cell and 115 s on a near-singular ReLU cell before
    it gave up: ``benchmarks/hessian_band_extremes.py``); Lanczos above (a stalled Lanczos: the band's, recorded
    as banded)."""
    t0 = time.perf_counter()
    if b.n <= max(dense_max_n, 3):  # ARPACK needs n > k + 1; tiny problems go dense
        ev = np.linalg.eigvalsh(to_dense(b).cpu().numpy())
        return Extremes(float(ev[-1]), float(ev[0]), "dense", "dense", time.perf_counter() - t0)
    if b.n <= band_max_n:
        ev = band_eigenvalues(to_banded(narrowed(b), b.N))
        return Extremes(float(ev[-1]), float(ev[0]), "banded", "banded", time.perf_counter() - t0)
    op = matvec_op(b)
    try:
        lmax = _eigsh(op, "LA", tol)
        ab = to_banded(b)
        try:
            chol = sla.cholesky_banded(ab, lower=False, check_finite=False)
        except np.linalg.LinAlgError:
            chol = None
        if chol is not None:
            inv = spla.LinearOperator(op.shape, matvec=lambda v: sla.cho_solve_banded((chol, False), v),
                                      dtype=np.float64)
            lmin = _eigsh(op, "LM", tol, sigma=0.0, OPinv=inv)
            method_min = "shift_invert_cholesky"
        else:
            lmin = _eigsh(op, "SA", tol, ncv=60)
            method_min = "lanczos_SA"
    except spla.ArpackNoConvergence:  # a paper cell's Lanczos stalled: every eigenvalue of the band, exactly
        ev = band_eigenvalues(to_banded(narrowed(b), b.N))
        return Extremes(float(ev[-1]), float(ev[0]), "banded", "banded", time.perf_counter() - t0)
    return Extremes(lmax, lmin, "lanczos_LA", method_min, time.perf_counter() - t0)


def band_eigenvalues(ab: np.ndarray) -> np.ndarray:
    """All eigenvalues (ascending) of a symmetric band matrix in LAPACK's upper band storage (kd = rows − 1).

    LAPACK's two-stage ``dsbevd_2stage`` (a cache-blocked bulge chase), which scipy does not wrap, from the
    OpenBLAS that the scipy project publishes (``scipy-openblas32``): at n = 16,384, kd = 128 on one core it
    took 32 s where ``scipy.linalg.eig_banded`` (``dsbevd``) took 86 s (``benchmarks/hessian_spectrum.py``).
    On one thread: with two it took 58 s on this project's 2-core CPU; cells run side by side instead
    (``TRAINSCAPE_EXECUTOR=processes``)."""
    import scipy_openblas32

    lib = scipy_openblas32.dll
    kd, n = ab.shape[0] - 1, ab.shape[1]
    a = np.array(ab, dtype=np.float64, order="F")  # overwritten by the reduction
    w, z = np.empty(n), np.empty(1)
    lib.scipy_openblas_set_num_threads(ctypes.c_int(1))
    solve = lib.scipy_LAPACKE_dsbevd_2stage
    solve.restype = ctypes.c_int
    info = solve(ctypes.c_int(102), ctypes.c_char(b"N"), ctypes.c_char(b"U"), ctypes.c_int(n), ctypes.c_int(kd),
                 a.ctypes.data_as(ctypes.c_void_p), ctypes.c_int(kd + 1), w.ctypes.data_as(ctypes.c_void_p),
                 z.ctypes.data_as(ctypes.c_void_p), ctypes.c_int(1))
    if info != 0:
        raise np.linalg.LinAlgError(f"dsbevd_2stage returned info = {info}")
    return w


def full_spectrum(b: Blocks, *, dense_max_n: int = 1024, backend: str = "banded",
                  device: str | torch.device = "cpu") -> tuple[np.ndarray, str]:
    """All eigenvalues (ascending) and the method: dense eigvalsh for n ≤ dense_max_n, else the narrowed band's
    (backend 'banded', :func:`band_eigenvalues`) or torch ``eigvalsh`` on ``device`` (backend 'dense_torch')."""
    if b.n <= dense_max_n:
        return np.linalg.eigvalsh(to_dense(b).cpu().numpy()), "dense"
    if backend == "dense_torch":
        blocks = Blocks(b.diag.to(device), b.upper.to(device))
        return torch.linalg.eigvalsh(to_dense(blocks)).cpu().numpy(), "dense_torch"
    return band_eigenvalues(to_banded(narrowed(b), b.N)), "banded"


def bipartite_gram(o: Blocks) -> Blocks:
    """BᵀB for a block-tridiagonal ``o`` with zero diagonal blocks, O = [[0, B], [Bᵀ, 0]] once its layers are
    ordered even then odd: B (even rows, odd columns) is block-bidiagonal, so BᵀB is block-tridiagonal over the
    ⌊H/2⌋ odd layers, with ``diag_j = U_{2j}ᵀU_{2j} + U_{2j+1}U_{2j+1}ᵀ`` and ``upper_j = U_{2j+1}U_{2j+2}``
    (U_ℓ = ``o.upper[ℓ]``, a term whose layer is past the last left out)."""
    u, m = o.upper, o.H // 2
    diag = u[0:2 * m:2].transpose(-1, -2) @ u[0:2 * m:2]
    tail = u[1:2 * m:2]  # U_{2j+1}, j < m, where 2j + 1 ≤ H − 2
    diag[:len(tail)] += tail @ tail.transpose(-1, -2)
    return Blocks(diag, u[1:2 * m - 1:2] @ u[2:2 * m - 1:2])


def off_diagonal_spectrum(o: Blocks, *, dense_max_n: int = 1024, backend: str = "banded",
                          device: str | torch.device = "cpu") -> tuple[np.ndarray, str]:
    """All eigenvalues (ascending) of a block-tridiagonal ``o`` with zero diagonal blocks (the off-diagonal part O
    of :func:`split`) and the method, as :func:`full_spectrum` gives them, except on the band route: there they are
    ±σ(B) (:func:`bipartite_gram`) and N zeros per unpaired layer, σ² the eigenvalues of BᵀB, a band half as
    long, a quarter of the band solver's n²·kd work (``benchmarks/hessian_spectrum.py``). A σ's absolute error
    is ε‖B‖²/σ there against ε‖B‖ in O's own solve, which only the smallest σ feel."""
    if bool(o.diag.any()):
        raise ValueError("off_diagonal_spectrum: the diagonal blocks must be zero")
    if o.n <= dense_max_n or backend != "banded" or o.H == 1:
        return full_spectrum(o, dense_max_n=dense_max_n, backend=backend, device=device)
    gram = bipartite_gram(o)
    sigma = np.sqrt(np.clip(full_spectrum(gram, dense_max_n=0)[0], 0.0, None))
    unpaired = np.zeros((o.H - 2 * gram.H) * o.N)
    return np.sort(np.concatenate([-sigma, unpaired, sigma])), "banded"


def block_diag_spectrum(b: Blocks) -> np.ndarray:
    """spec(D) = ∪_ℓ spec(D_ℓ): H eigenproblems of size N, sorted ascending."""
    return np.sort(torch.linalg.eigvalsh(b.diag).reshape(-1).cpu().numpy())


def hessian_input(N: int, seed: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The Hessian study's synthetic sample (in_out_dims = 'width'): x = 1 + 0.1 ξ, y = x (§2.1).

    ξ comes from its own generator seeded with ``seed + 10_000`` so it does not shift the weights."""
    g = torch.Generator().manual_seed(int(seed) + 10_000)
    return 1.0 + 0.1 * torch.randn(N, generator=g, dtype=torch.float64).to(dtype)
