"""Muon exactly as seed 000 uses it (modded-nanogpt, October 2024).

Per 2-D parameter with gradient G: heavy-ball buffer ``B <- momentum*B + G`` (not an EMA), Nesterov
``U = G + momentum*B``, orthogonalise U with five quintic Newton-Schulz steps in bf16, and update
``W <- W - lr*sqrt(max(rows, cols))*O``. ``torch.optim.Muon`` differs in the momentum (EMA) and in
normalising *after* the bf16 cast; tests/imprint measure the difference (about 2-3 % per update).
The seed's QKV split (rows == 3*cols) is left out: no layer of this MLP has that shape.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable

import torch

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


def newton_schulz5(G: torch.Tensor, steps: int = 5, eps: float = 1e-7,
                   dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Approximate U V^T of G = U S V^T with the seed's quintic iteration.

    Casts G to ``dtype`` (bf16, as the seed) and divides by (||G||_F + eps), the norm taken in G's own
    dtype; iterates on the wide orientation; returns in G's dtype. Singular values of the result lie
    roughly in [0.6, 1.2], not at 1: the coefficients trade convergence for slope at zero.
    """
    if G.ndim != 2:
        raise ValueError(f"newton_schulz5 needs a matrix, got shape {tuple(G.shape)}")
    a, b, c = NS_COEFFICIENTS
    X = G.to(dtype) / (G.norm() + eps)
    tall = G.size(0) > G.size(1)
    if tall:
        X = X.T
    for _ in range(steps):
        A = X @ X.T
        B = A @ X
        X = a * X + b * B + c * A @ B
    if tall:
        X = X.T
    return X.to(G.dtype)


class NewtonSchulz:
    """The Newton-Schulz function Muon calls: eager, or ``torch.compile``-d as the seed's
    ``@torch.compile`` (``compile=True``).

    Compiling changes the bf16 rounding (inductor fuses ``a*X + b*B + c*A@B`` and keeps the fused
    intermediates in fp32): the update differs from the eager one by about 2.5 % (relative Frobenius
    norm, tests/imprint). It needs a C++ compiler on the CPU; when there is none, or compiling fails,
    the step falls back to eager (``fallback`` says why) instead of failing the run.
    """

    def __init__(self, compile: bool = False) -> None:
        self.requested = compile
        self.fallback: str | None = None
        self._fn: Callable[..., torch.Tensor] = newton_schulz5
        if compile:
            cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
            if cxx is None:
                self.fallback = "no C++ compiler on PATH (torch.compile's CPU backend needs one): eager"
            else:
                self._fn = torch.compile(newton_schulz5)

    @property
    def compiled(self) -> bool:
        """Whether the compiled function is in use (requested and not fallen back)."""
        return self._fn is not newton_schulz5

    def __call__(self, G: torch.Tensor, steps: int, dtype: torch.dtype) -> torch.Tensor:
        if self.compiled:
            try:
                return self._fn(G, steps=steps, dtype=dtype)
            except Exception as exc:  # a backend failure (no toolchain, unsupported op): fall back, say so
                self.fallback = f"torch.compile failed ({type(exc).__name__}: {str(exc)[:200]}): eager"
                self._fn = newton_schulz5
        return newton_schulz5(G, steps=steps, dtype=dtype)


def update_scale(shape: torch.Size) -> float:
    """sqrt(max(rows, cols)): makes the update's entry RMS about 1 before the lr."""
    return math.sqrt(max(shape[0], shape[1]))


class Muon(torch.optim.Optimizer):
    """The seed's Muon for 2-D parameters only (no weight decay). ``ns_dtype``: the seed's bf16, or
    fp32 where bf16 matrix products are slow (CPUs without AVX512-BF16/AMX). ``ns``: the
    Newton-Schulz function (eager by default; :class:`NewtonSchulz` ``(compile=True)`` as the seed)."""

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.95, nesterov: bool = True,
                 ns_steps: int = 5, ns_dtype: torch.dtype = torch.bfloat16, ns: NewtonSchulz | None = None):
        super().__init__(params, dict(lr=lr, momentum=momentum, nesterov=nesterov, ns_steps=ns_steps,
                                      ns_dtype=ns_dtype))
        self.ns = ns or NewtonSchulz(compile=False)
        for group in self.param_groups:
            for p in group["params"]:
                if p.ndim != 2:
                    raise ValueError(f"Muon takes 2-D parameters only, got shape {tuple(p.shape)}")

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            lr, mom = group["lr"], group["momentum"]
            for p in group["params"]:
                g = p.grad
                if g is None:
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(g)
                buf = state["momentum_buffer"]
                buf.mul_(mom).add_(g)
                u = g.add(buf, alpha=mom) if group["nesterov"] else buf
                o = self.ns(u, steps=group["ns_steps"], dtype=group["ns_dtype"])
                p.add_(o.to(p.dtype), alpha=-lr * update_scale(p.shape))
        return loss
