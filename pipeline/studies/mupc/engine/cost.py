"""FLOP counts of the activity Hessian's eigenvalue routes, shared by the two μPC studies' plans (light: no torch).

n = N·H; eigenvalues only throughout. Dense ``eigvalsh``: 4n³/3 (Householder tridiagonalisation, Golub &
Van Loan §8.3; the tridiagonal eigenvalues are O(n²); with eigenvectors it would be ≈ 9n³). The band route
(LAPACK sbevd without vectors) on the narrowed band (``hessian.narrowed``): the band reduction, 6n²·kd with
kd = N the upper bandwidth (LAPACK's dsbtrd count), and the narrowing's H QR factorisations and products,
6HN³. The structured extremes (above the dense limit): λ_max by Lanczos, :data:`LANCZOS_MATVECS`
block-tridiagonal mat-vecs of 6nN (three N×N blocks per block row), λ_min by shift-invert with a banded
Cholesky, n·kd², and as many banded solves, 4n·kd. The blocks themselves: J_ℓᵀJ_ℓ per layer, 2HN³.
"""

from __future__ import annotations

# Mat-vecs (and shift-invert solves) ARPACK takes per structured extreme: a round number of the order that
# ``hessian._eigsh``'s ncv (20–60) and its restarts give; the calibration times the real calls.
LANCZOS_MATVECS = 100


def blocks_flops(N: int, H: int) -> float:
    """Assembling H_z's blocks: the H products J_ℓᵀJ_ℓ of N×N."""
    return 2 * H * N**3


def dense_flops(n: int) -> float:
    return 4 * n**3 / 3


def banded_flops(N: int, H: int) -> float:
    n = N * H
    return 6 * n * n * N + 6 * H * N**3


def structured_flops(N: int, H: int) -> float:
    n, kd = N * H, 2 * N - 1
    return n * kd * kd + LANCZOS_MATVECS * (6 * n * N + 4 * n * kd)


def eig_flops(method: str, N: int, H: int) -> float:
    """One eigen-solve of H_z (method: dense, dense_torch, banded, structured), blocks excluded."""
    if method in ("dense", "dense_torch"):
        return dense_flops(N * H)
    if method == "banded":
        return banded_flops(N, H)
    return structured_flops(N, H)


def off_diagonal_flops(method: str, N: int, H: int) -> float:
    """All eigenvalues of the off-diagonal part O (``hessian.off_diagonal_spectrum``): on the band route those of
    BᵀB over ⌊H/2⌋ layers and its three N×N products per odd layer (2N³ each); else as H_z's."""
    if method == "banded" and H > 1:
        return banded_flops(N, H // 2) + 6 * (H // 2) * N**3
    return eig_flops(method, N, H)
