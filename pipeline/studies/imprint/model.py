"""The seed's MLP 784-128-128-64-10 (ReLU), its glyph init, and the two optimiser set-ups."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from pipeline.studies.imprint.muon import Muon, NewtonSchulz

W2_INDEX = 2  # module index of the 128x128 layer in the Sequential ("layer 2" of the seed)
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def build_mlp(init_seed: int, dtype: torch.dtype) -> nn.Sequential:
    """PyTorch default init (U(+-1/sqrt(fan_in))) drawn in fp32 from ``init_seed``, then cast."""
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(init_seed)
    try:
        model = nn.Sequential(
            nn.Linear(28 * 28, 128), nn.ReLU(),
            nn.Linear(128, 128), nn.ReLU(),
            nn.Linear(128, 64), nn.ReLU(),
            nn.Linear(64, 10),
        )
    finally:
        torch.random.set_rng_state(gen_state)
    return model.to(dtype)


def w2(model: nn.Module) -> torch.Tensor:
    return getattr(model, "_orig_mod", model)[W2_INDEX].weight


@torch.no_grad()
def stamp_glyph(model: nn.Module, bitmap: np.ndarray, scale: float) -> None:
    """W2 += scale * bitmap, in place (computed in fp32, rounded to W2's dtype, as the seed)."""
    w = w2(model)
    if tuple(bitmap.shape) != tuple(w.shape):
        raise ValueError(f"bitmap shape {bitmap.shape} does not match W2 {tuple(w.shape)}")
    w.add_(torch.as_tensor(bitmap, dtype=torch.float32, device=w.device) * scale)


def make_optimizers(model: nn.Module, name: str, lr: float, momentum: float, ns_steps: int,
                    ns_dtype: torch.dtype = torch.bfloat16,
                    ns: NewtonSchulz | None = None) -> list[torch.optim.Optimizer]:
    """``adam``: Adam on everything. ``muon``: Muon on every 2-D parameter, Adam on the biases."""
    params = list(model.parameters())
    if name == "adam":
        return [torch.optim.Adam(params, lr=lr)]
    if name == "muon":
        return [Muon([p for p in params if p.ndim == 2], lr=lr, momentum=momentum, ns_steps=ns_steps,
                     ns_dtype=ns_dtype, ns=ns),
                torch.optim.Adam([p for p in params if p.ndim != 2], lr=lr)]
    raise ValueError(f"unknown optimizer {name!r}; allowed: 'adam', 'muon'")
