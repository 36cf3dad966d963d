"""Initialisations, the 4-layer MLP and the rank measurement of the ZerO study (pure functions)."""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.linalg import hadamard
from torch import nn
from torch.nn import functional as F  # noqa: N812

INPUT_DIM = 784


def partial_identity(m: int, n: int) -> torch.Tensor:
    """I* (Definition 1): ones on (i, i) for i < min(m, n), zeros elsewhere; shape (m, n)."""
    return torch.eye(m, n)


def hadamard_scale(p: int, mode: str) -> float:
    """Scale of the order-p Sylvester-Hadamard matrix (p = 2^c).

    ``code`` (the official notebook and the seed): 2^(-c/2), so H·scale is orthonormal.
    ``paper`` (Algorithm 1 as printed): 2^(-(c-1)/2), √2 larger, so (H·scale)ᵀ(H·scale) = 2I.
    """
    c = int(round(math.log2(p)))
    if 2**c != p:
        raise ValueError(f"Hadamard order {p} is not a power of two")
    if mode == "code":
        return 2.0 ** (-c / 2)
    if mode == "paper":
        return 2.0 ** (-(c - 1) / 2)
    raise ValueError(f"zero_scale {mode!r}: allowed 'code', 'paper'")


def zero_matrix(m: int, n: int, scale: str = "code") -> torch.Tensor:
    """ZerO (Algorithm 1) for a weight of shape (m, n) = (out, in).

    m ≤ n: the partial identity I*. m > n: I_{m×p} · (H_p · scale) · I_{p×n} with p = 2^⌈log2 m⌉,
    i.e. the top-left m×n block of the scaled Sylvester-Hadamard matrix of order p
    (``scipy.linalg.hadamard``).
    """
    if m <= n:
        return partial_identity(m, n)
    p = 2 ** math.ceil(math.log2(m))
    h = torch.from_numpy(hadamard(p).astype(np.float64) * hadamard_scale(p, scale))
    return h[:m, :n].to(torch.float32).contiguous()


def one_matrix(m: int, n: int, rng: np.random.Generator) -> torch.Tensor:
    """OnE (seed extra): I*, and when m > n each extra row r ≥ n gets one 1 in a column drawn
    uniformly from [0, n-1] by ``rng``."""
    w = partial_identity(m, n)
    if m > n:
        for row in range(n, m):
            w[row, int(rng.integers(low=0, high=n - 1, endpoint=True))] = 1.0
    return w


def spray_matrix(m: int, n: int, rng: np.random.Generator) -> torch.Tensor:
    """Spray (seed extra): the OnE matrix M inverted, (J − M) / (n − 1) with J all ones."""
    if n < 2:
        raise ValueError("Spray needs at least two inputs (it divides by n - 1)")
    return (torch.ones(m, n) - one_matrix(m, n, rng)) / (n - 1)


def init_matrix(init: str, m: int, n: int, *, zero_scale: str = "code",
                rng: np.random.Generator | None = None, gen: torch.Generator | None = None) -> torch.Tensor:
    """The initial weight of one Linear layer of shape (m, n) for ``init``."""
    if init == "zero":
        return zero_matrix(m, n, zero_scale)
    if init == "partial_identity":
        return partial_identity(m, n)
    if init == "random":
        w = torch.empty(m, n)
        torch.nn.init.kaiming_normal_(w, generator=gen)  # fan_in, gain √2: std √(2/n)
        return w
    if init == "one":
        return one_matrix(m, n, rng if rng is not None else np.random.default_rng(0))
    if init == "spray":
        return spray_matrix(m, n, rng if rng is not None else np.random.default_rng(0))
    raise ValueError(f"unknown init {init!r}")


class MLP(nn.Module):
    """784 → 784 → n_h → n_h → 10, ReLU between layers, log-softmax over classes (dim 1)."""

    def __init__(self, n_h: int, init: str, *, bias: float | None, zero_scale: str = "code",
                 seed: int = 0):
        super().__init__()
        self.l1 = nn.Linear(INPUT_DIM, INPUT_DIM, bias=bias is not None)
        self.l2 = nn.Linear(INPUT_DIM, n_h, bias=bias is not None)
        self.l3 = nn.Linear(n_h, n_h, bias=bias is not None)
        self.l4 = nn.Linear(n_h, 10, bias=bias is not None)
        rng = np.random.default_rng(seed)  # OnE / Spray column draws
        gen = torch.Generator().manual_seed(seed)  # Kaiming normal draws
        with torch.no_grad():
            for layer in (self.l1, self.l2, self.l3, self.l4):
                m, n = layer.weight.shape
                layer.weight.copy_(init_matrix(init, m, n, zero_scale=zero_scale, rng=rng, gen=gen))
                if layer.bias is not None:
                    layer.bias.fill_(bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.view(-1, INPUT_DIM)
        x = F.relu(self.l1(x))
        x = F.relu(self.l2(x))
        x = F.relu(self.l3(x))
        return F.log_softmax(self.l4(x), dim=1)


def rank_abs(matrix: torch.Tensor | np.ndarray, tol: float) -> int:
    """Number of singular values strictly above the absolute tolerance ``tol``.

    The definition of ``numpy.linalg.matrix_rank(matrix, tol=tol)``, computed with
    ``torch.linalg.svdvals`` in the dtype and on the device given (the study passes a float32 CPU
    copy, as the seed does). torch's LAPACK is used instead of numpy's: on this kind of shared CPU,
    numpy's OpenBLAS SVD of a 1024² matrix took ~8 s against 0.7 s, with the same values to 1e-6.
    """
    a = matrix.detach() if isinstance(matrix, torch.Tensor) else torch.from_numpy(np.asarray(matrix))
    if a.numel() == 0:
        return 0
    return int((torch.linalg.svdvals(a) > tol).sum())


def residual_rank(w3: torch.Tensor, tol: float, on: str = "cpu") -> int:
    """rank(W3 − I) alone (one SVD), in the same precision as :func:`residual_ranks`."""
    w = w3.detach().to("cpu", torch.float32) if on == "cpu" else w3.detach()
    return rank_abs(w - torch.eye(w.shape[0], w.shape[1], device=w.device, dtype=w.dtype), tol)


def residual_ranks(w3: torch.Tensor, w3_0: torch.Tensor, tol: float, on: str = "cpu") -> tuple[int, int]:
    """rank(W3 − I) and rank(W3 − W3₀) of the square l3 weight (the bias is not included)."""
    w = w3.detach()
    w0 = w3_0.detach()
    if on == "cpu":
        w, w0 = w.to("cpu", torch.float32), w0.to("cpu", torch.float32)
        eye = torch.eye(w.shape[0], w.shape[1])
        return rank_abs(w - eye, tol), rank_abs(w - w0, tol)
    eye = torch.eye(w.shape[0], w.shape[1], device=w.device, dtype=w.dtype)
    return rank_abs(w - eye, tol), rank_abs(w - w0, tol)
