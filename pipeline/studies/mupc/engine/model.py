"""The residual MLP of μPC (spec §1.1–1.5): parameterisations, weight inits, feed-forward pass.

Shapes carry a leading *run* axis R so that independent runs (seeds × learning rates) share one set
of kernels: ``w_in [R, N, D]``, ``w_hid [R, H-1, N, N]``, ``w_out [R, d_y, N]``; activities
``z [R, H, B, N]``; inputs ``x [B, D]`` or ``[R, B, D]``; targets ``y [B, d_y]`` or ``[R, B, d_y]``.

Layer maps (pre-activation form, the activation acts on a layer's *input*):
``μ_1 = a_1 W_1 x``, ``μ_ℓ = a_ℓ W_ℓ φ(z_{ℓ-1}) + s z_{ℓ-1}`` (ℓ = 2…H), ``ŷ = a_L W_L φ(z_H)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Literal

import torch

Activation = Literal["linear", "tanh", "relu"]
ParamType = Literal["sp", "mupc", "ntp", "depth_mup", "orthogonal"]
WeightInit = Literal["standard", "standard_gauss", "one_over_N", "orthogonal", "zero"]


@dataclass(frozen=True)
class NetSpec:
    """Architecture and parameterisation of one network (spec §1.3–1.4)."""

    D: int  # input dim
    N: int  # hidden width
    H: int  # hidden layers; L = H + 1 weight matrices
    d_y: int  # output dim
    act: Activation = "linear"
    skips: bool = False
    param: ParamType = "sp"
    init: WeightInit = "standard"
    orth_gain: float = 1.0  # gain of the orthogonal init (1.05 for tanh in training)
    # Q1: the reference code used 1/sqrt(N*L) for mupc/ntp hidden branches even without skips.
    legacy_noskip_branch_scale: bool = False

    @property
    def L(self) -> int:
        return self.H + 1

    def with_(self, **kw: object) -> NetSpec:
        return replace(self, **kw)


@dataclass(frozen=True)
class Multipliers:
    a_in: float
    a_hid: float
    a_out: float
    s: float  # skip indicator for hidden layers 2..H (1.0 or 0.0)


def multipliers(spec: NetSpec) -> Multipliers:
    """Fixed branch multipliers a_ℓ (spec §1.3). μPC: 1/√D, 1/√(N·L) (skips) or 1/√N, 1/N."""
    s = 1.0 if (spec.skips and spec.H > 1) else 0.0
    if spec.param in ("sp", "orthogonal"):
        return Multipliers(1.0, 1.0, 1.0, s)
    branch_l = spec.skips or (spec.legacy_noskip_branch_scale and spec.param in ("mupc", "ntp"))
    a_hid = 1.0 / math.sqrt(spec.N * spec.L) if branch_l else 1.0 / math.sqrt(spec.N)
    a_out = 1.0 / math.sqrt(spec.N) if spec.param == "ntp" else 1.0 / spec.N
    return Multipliers(1.0 / math.sqrt(spec.D), a_hid, a_out, s)


# ----------------------------------------------------------------------------- activations


def phi(act: str, z: torch.Tensor) -> torch.Tensor:
    if act == "linear":
        return z
    if act == "tanh":
        return torch.tanh(z)
    if act == "relu":
        return torch.relu(z)
    raise ValueError(f"activation {act!r} is not one of linear, tanh, relu")


def dphi(act: str, z: torch.Tensor) -> torch.Tensor:
    if act == "linear":
        return torch.ones_like(z)
    if act == "tanh":
        return 1.0 - torch.tanh(z) ** 2
    if act == "relu":
        return (z > 0).to(z.dtype)  # φ'(0) = 0
    raise ValueError(f"activation {act!r} is not one of linear, tanh, relu")


def ddphi(act: str, z: torch.Tensor) -> torch.Tensor:
    if act == "tanh":
        t = torch.tanh(z)
        return -2.0 * t * (1.0 - t**2)
    if act in ("linear", "relu"):
        return torch.zeros_like(z)
    raise ValueError(f"activation {act!r} is not one of linear, tanh, relu")


# ----------------------------------------------------------------------------- weights


@dataclass
class Weights:
    w_in: torch.Tensor  # [R, N, D]
    w_hid: torch.Tensor  # [R, H-1, N, N]
    w_out: torch.Tensor  # [R, d_y, N]

    @property
    def runs(self) -> int:
        return self.w_in.shape[0]

    def tensors(self) -> list[torch.Tensor]:
        return [self.w_in, self.w_hid, self.w_out]

    def layers(self, r: int = 0) -> list[torch.Tensor]:
        """The L weight matrices of run ``r`` in order W_1 … W_L."""
        return [self.w_in[r], *self.w_hid[r].unbind(0), self.w_out[r]]

    def clone(self) -> Weights:
        return Weights(*(t.clone() for t in self.tensors()))


def orthogonal_q(out_dim: int, in_dim: int, gen: torch.Generator) -> torch.Tensor:
    """QR of a Gaussian, sign-corrected by diag(R), float64: Q Qᵀ = I (wide) or QᵀQ = I (tall). The gain and the
    dtype come after (:func:`_orthogonal`), so one draw serves every gain."""
    big, small = max(out_dim, in_dim), min(out_dim, in_dim)
    a = torch.randn(big, small, generator=gen, dtype=torch.float64)
    q, r = torch.linalg.qr(a)
    q = q * torch.sign(torch.diagonal(r)).unsqueeze(0)
    w = q if out_dim >= in_dim else q.T
    return w[:out_dim, :in_dim]


def _orthogonal(out_dim: int, in_dim: int, gain: float, gen: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    """W Wᵀ = gain²·I (wide) or WᵀW = gain²·I (tall)."""
    return (gain * orthogonal_q(out_dim, in_dim, gen)).to(dtype)


def _init_matrix(init: str, out_dim: int, in_dim: int, gain: float, gen: torch.Generator,
                 dtype: torch.dtype) -> torch.Tensor:
    if init == "standard":  # U(±1/√fan_in), as nn.Linear / Equinox Linear
        bound = 1.0 / math.sqrt(in_dim)
        return (torch.rand(out_dim, in_dim, generator=gen, dtype=torch.float64) * 2 - 1).mul(bound).to(dtype)
    if init == "standard_gauss":
        return torch.randn(out_dim, in_dim, generator=gen, dtype=torch.float64).to(dtype)
    if init == "one_over_N":
        return (torch.randn(out_dim, in_dim, generator=gen, dtype=torch.float64) / math.sqrt(in_dim)).to(dtype)
    if init == "orthogonal":
        return _orthogonal(out_dim, in_dim, gain, gen, dtype)
    if init == "zero":
        return torch.zeros(out_dim, in_dim, dtype=dtype)
    raise ValueError(f"weight init {init!r} is unknown")


def init_weights(spec: NetSpec, seeds: list[int], *, dtype: torch.dtype = torch.float32,
                 device: str | torch.device = "cpu") -> Weights:
    """One set of weights per seed, stacked on the run axis. Drawn in float64 on the CPU from a
    per-seed generator (W_1 first, then hidden layers, then W_L), so a run's weights do not depend on
    the device, the dtype or on which other runs share its stack.

    The seeds are drawn in parallel threads, as many as torch's intra-op threads (one generator each, so the
    numbers are those of one seed after another): a 64-run stack of N = 512, H = 32 took 22 s on one thread
    of an H100 machine, which would be paid again by every group of a paper sweep."""

    def draw(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(int(seed))
        w_in = _init_matrix(spec.init, spec.N, spec.D, spec.orth_gain, gen, dtype)
        hid = [_init_matrix(spec.init, spec.N, spec.N, spec.orth_gain, gen, dtype) for _ in range(spec.H - 1)]
        w_hid = torch.stack(hid) if hid else torch.zeros(0, spec.N, spec.N, dtype=dtype)
        return w_in, w_hid, _init_matrix(spec.init, spec.d_y, spec.N, spec.orth_gain, gen, dtype)

    unique = list(dict.fromkeys(int(s) for s in seeds))  # a seed repeated (fwd_pass: one per optimiser) is drawn once
    workers = min(len(unique), torch.get_num_threads())
    if workers > 1:
        with ThreadPoolExecutor(workers) as pool:
            by_seed = dict(zip(unique, pool.map(draw, unique)))
    else:
        by_seed = {seed: draw(seed) for seed in unique}
    w_in, w_hid, w_out = zip(*(by_seed[int(s)] for s in seeds))
    return Weights(torch.stack(w_in).to(device), torch.stack(w_hid).to(device), torch.stack(w_out).to(device))


# ----------------------------------------------------------------------------- forward pass


def _runs(t: torch.Tensor, R: int) -> torch.Tensor:
    """Give a [B, k] tensor the run axis ([R, B, k]) by broadcasting (no copy)."""
    return t.unsqueeze(0).expand(R, *t.shape) if t.dim() == 2 else t


def input_prediction(w: Weights, m: Multipliers, x: torch.Tensor) -> torch.Tensor:
    """μ_1 = a_1 W_1 x → [R, B, N]; constant during inference."""
    return m.a_in * torch.matmul(_runs(x, w.runs), w.w_in.transpose(-1, -2))


def output_prediction(spec: NetSpec, w: Weights, m: Multipliers, z_last: torch.Tensor) -> torch.Tensor:
    """ŷ = a_L W_L φ(z_H) → [R, B, d_y]."""
    return m.a_out * torch.matmul(phi(spec.act, z_last), w.w_out.transpose(-1, -2))


def feedforward(spec: NetSpec, w: Weights, x: torch.Tensor,
                hidden: Sequence[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Feed-forward activities z [R, H, B, N] and output ŷ [R, B, d_y] (activity init, §1.5). ``hidden``: the
    hidden weights layer by layer ([R, N, N] each), where a caller differentiates by layer (default: ``w.w_hid``'s)."""
    m = multipliers(spec)
    z = [input_prediction(w, m, x)]
    # one unbind, not a slice per layer: under autograd each slice's backward writes a gradient the size of all
    # of w_hid, which made a BP step O(H²·N²) (a 512-layer net of width 128: 22 s a step on one core, not 0.2)
    hidden = w.w_hid.unbind(1) if hidden is None else hidden
    for ell in range(spec.H - 1):
        z.append(m.a_hid * torch.matmul(phi(spec.act, z[-1]), hidden[ell].transpose(-1, -2)) + m.s * z[-1])
    zs = torch.stack(z, dim=1)
    return zs, output_prediction(spec, w, m, zs[:, -1])
