"""PC energy, layer-parallel analytic gradients, inference and the weight step (spec §1.6–1.8, §1.11).

Conventions (kept from the reference so the notebook's learning rates mean the same thing):
errors ``ε_ℓ = z_ℓ − μ_ℓ(z_{ℓ−1})`` for ℓ ≤ H and ``ε_L = y − ŷ``; the optimiser sees the gradient of
the *batch-mean* energy, so plain GD with rate η moves each sample by η/B·g. All functions take the
run axis R first; per-run learning rates are tensors of shape [R].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from pipeline.studies.mupc.model import (
    Multipliers,
    NetSpec,
    Weights,
    _runs,
    dphi,
    input_prediction,
    multipliers,
    output_prediction,
    phi,
)


@dataclass(frozen=True)
class EnergyTerms:
    """Regularisers of §1.6 (all zero in the paper's experiments)."""

    activity_decay: float = 0.0
    weight_decay: float = 0.0
    spectral_penalty: float = 0.0


def errors(spec: NetSpec, w: Weights, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor,
           m: Multipliers | None = None, mu_in: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Hidden errors ε [R, H, B, N] and output error ε_L = y − ŷ [R, B, d_y]."""
    m = m or multipliers(spec)
    mu1 = input_prediction(w, m, x) if mu_in is None else mu_in
    if spec.H > 1:
        mu_h = m.a_hid * torch.matmul(phi(spec.act, z[:, :-1]), w.w_hid.transpose(-1, -2)) + m.s * z[:, :-1]
        eps = torch.cat([(z[:, 0] - mu1).unsqueeze(1), z[:, 1:] - mu_h], dim=1)
    else:
        eps = (z[:, 0] - mu1).unsqueeze(1)
    eps_out = _runs(y, w.runs) - output_prediction(spec, w, m, z[:, -1])
    return eps, eps_out


def energy(spec: NetSpec, w: Weights, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor,
           terms: EnergyTerms = EnergyTerms()) -> torch.Tensor:
    """Batch energy F per run [R] (§1.6): mean over the batch of the summed squared errors / 2."""
    eps, eps_out = errors(spec, w, x, y, z)
    B = z.shape[2]
    f = 0.5 * (eps.pow(2).sum(dim=(1, 2, 3)) + eps_out.pow(2).sum(dim=(1, 2))) / B
    if terms.activity_decay:
        f = f + 0.5 * terms.activity_decay * z.pow(2).sum(dim=(1, 2, 3)) / B
    if terms.weight_decay:
        f = f + 0.5 * terms.weight_decay * sum(t.pow(2).flatten(1).sum(1) for t in w.tensors())
    if terms.spectral_penalty:
        f = f + 0.5 * terms.spectral_penalty * _spectral_penalty(w)
    return f


def _gram_minus_identity(t: torch.Tensor) -> torch.Tensor:
    g = torch.matmul(t.transpose(-1, -2), t)
    return g - torch.eye(g.shape[-1], dtype=t.dtype, device=t.device)


def _spectral_penalty(w: Weights) -> torch.Tensor:
    total = _gram_minus_identity(w.w_in).pow(2).sum(dim=(1, 2))
    total = total + _gram_minus_identity(w.w_hid).pow(2).sum(dim=(1, 2, 3))
    return total + _gram_minus_identity(w.w_out).pow(2).sum(dim=(1, 2))


def layer_losses(eps: torch.Tensor, eps_out: torch.Tensor) -> torch.Tensor:
    """Recorded layer energies Σ_b ½‖ε_ℓ,b‖² / B per run: [R, L]."""
    B = eps.shape[2]
    hid = 0.5 * eps.pow(2).sum(dim=(2, 3)) / B
    return torch.cat([hid, (0.5 * eps_out.pow(2).sum(dim=(1, 2)) / B).unsqueeze(1)], dim=1)


def activity_grad(spec: NetSpec, w: Weights, z: torch.Tensor, eps: torch.Tensor, eps_out: torch.Tensor,
                  m: Multipliers | None = None, activity_decay: float = 0.0) -> torch.Tensor:
    """∂F/∂z for the batch-mean energy, all layers at once: (ε_ℓ − J_ℓᵀ ε_{ℓ+1} + c_z z_ℓ) / B."""
    m = m or multipliers(spec)
    B = z.shape[2]
    back = torch.empty_like(z)
    if spec.H > 1:
        nxt = eps[:, 1:]
        back[:, :-1] = m.a_hid * dphi(spec.act, z[:, :-1]) * torch.matmul(nxt, w.w_hid) + m.s * nxt
    back[:, -1] = m.a_out * dphi(spec.act, z[:, -1]) * torch.matmul(eps_out, w.w_out)
    g = eps - back
    if activity_decay:
        g = g + activity_decay * z
    return g / B


def weight_grads(spec: NetSpec, w: Weights, x: torch.Tensor, z: torch.Tensor, eps: torch.Tensor,
                 eps_out: torch.Tensor, terms: EnergyTerms = EnergyTerms(),
                 m: Multipliers | None = None) -> Weights:
    """∂F/∂W at the given activities (§1.8), batch-mean, plus regulariser gradients."""
    m = m or multipliers(spec)
    B = z.shape[2]
    xr = _runs(x, w.runs)
    g_in = -(m.a_in / B) * torch.matmul(eps[:, 0].transpose(-1, -2), xr)
    if spec.H > 1:
        g_hid = -(m.a_hid / B) * torch.matmul(eps[:, 1:].transpose(-1, -2), phi(spec.act, z[:, :-1]))
    else:
        g_hid = torch.zeros_like(w.w_hid)
    g_out = -(m.a_out / B) * torch.matmul(eps_out.transpose(-1, -2), phi(spec.act, z[:, -1]))
    grads = Weights(g_in, g_hid, g_out)
    if terms.weight_decay:
        grads = Weights(*(g + terms.weight_decay * t for g, t in zip(grads.tensors(), w.tensors())))
    if terms.spectral_penalty:
        grads = Weights(*(g + 2.0 * terms.spectral_penalty * torch.matmul(t, _gram_minus_identity(t))
                          for g, t in zip(grads.tensors(), w.tensors())))
    return grads


# ----------------------------------------------------------------------------- optimisers


def _lr(lr: torch.Tensor | float, like: torch.Tensor) -> torch.Tensor | float:
    """Broadcast a per-run learning rate [R] against a tensor with the run axis first."""
    if isinstance(lr, torch.Tensor):
        return lr.to(like.dtype).reshape(-1, *([1] * (like.dim() - 1)))
    return lr


class Adam:
    """Element-wise Adam (β 0.9/0.999, ε 1e-8, as optax/torch) with a per-run learning rate [R]."""

    def __init__(self, params: list[torch.Tensor], lr: torch.Tensor | float, betas=(0.9, 0.999), eps=1e-8):
        self.lr, self.b1, self.b2, self.eps = lr, betas[0], betas[1], eps
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]
        self.t = 0

    def step(self, params: list[torch.Tensor], grads: list[torch.Tensor]) -> list[torch.Tensor]:
        self.t += 1
        c1, c2 = 1 - self.b1**self.t, 1 - self.b2**self.t
        out = []
        for i, (p, g) in enumerate(zip(params, grads)):
            self.m[i].mul_(self.b1).add_(g, alpha=1 - self.b1)
            self.v[i].mul_(self.b2).addcmul_(g, g, value=1 - self.b2)
            upd = (self.m[i] / c1) / ((self.v[i] / c2).sqrt() + self.eps)
            out.append(p - _lr(self.lr, p) * upd)
        return out


@dataclass(frozen=True)
class InferenceConfig:
    steps: int  # T = max_infer_iters, no early stopping
    optim: Literal["gd", "adam"] = "gd"
    activity_decay: float = 0.0
    conv_threshold: float = 1e-3  # for the n_infer_iters log (RMS of the activity gradient)


@dataclass
class InferenceResult:
    z: torch.Tensor  # [R, H, B, N] final activities
    n_converged: torch.Tensor  # [R] last step index with grad RMS below the threshold, else T


def infer(spec: NetSpec, w: Weights, x: torch.Tensor, y: torch.Tensor, z0: torch.Tensor,
          lr: torch.Tensor | float, cfg: InferenceConfig) -> InferenceResult:
    """Synchronous inference: T steps of GD or Adam (fresh state per batch) on the batch-mean energy."""
    m = multipliers(spec)
    mu1 = input_prediction(w, m, x)
    z = z0.clone()
    opt = Adam([z], lr) if cfg.optim == "adam" else None
    R = z.shape[0]
    n_conv = torch.full((R,), cfg.steps, dtype=torch.long, device=z.device)
    for t in range(cfg.steps):
        eps, eps_out = errors(spec, w, x, y, z, m, mu1)
        g = activity_grad(spec, w, z, eps, eps_out, m, cfg.activity_decay)
        if opt is None:
            z = z - _lr(lr, z) * g
        else:
            (z,) = opt.step([z], [g])
        rms = g.pow(2).flatten(1).mean(1).sqrt()
        n_conv = torch.where(rms < cfg.conv_threshold, torch.full_like(n_conv, t), n_conv)
    return InferenceResult(z, n_conv)


def train_loss(y_hat: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Logged PC loss per run: ½ · mean over (B × d_y) of (y − ŷ)² (§1.9)."""
    return 0.5 * (_runs(y, y_hat.shape[0]) - y_hat).pow(2).mean(dim=(1, 2))
