"""A BP step through the μPC residual MLP: hidden weights sliced per layer (as before) against one unbind (as
``model.feedforward`` and the BP trainer's ``predict`` now do), side by side in one run.

    taskset -c 1 .venv/bin/python benchmarks/bp_step.py                 # one core, the default shapes
    python3 benchmarks/bp_step.py --device cuda --shapes 1024:512 512:128  # on a GPU

Why: under autograd, the backward of ``w_hid[:, ℓ]`` writes a gradient the size of all of ``w_hid`` for each
layer ℓ and sums them, so one step moved O(H²·N²) bytes where the products are O(H·N²); ``unbind`` hands each
layer its own slice of one gradient. Per shape ``N:H`` (2 stacked runs, batch 64, tanh, Depth-μP with skips, the
forward-pass study's nets): seconds per forward-and-backward step each way (each timed for ``--seconds`` after
one warm-up step), the ratio, and the largest difference between the two ways' gradients (0: the same sums).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from pipeline.studies.mupc.analysis import fwdpass
from pipeline.studies.mupc.engine.model import (
    Weights,
    feedforward,
    init_weights,
    input_prediction,
    multipliers,
    output_prediction,
    phi,
)


def sliced_feedforward(spec, w: Weights, x: torch.Tensor) -> torch.Tensor:
    """The output as ``feedforward`` formed it before: ``w_hid[:, ℓ]`` at each layer."""
    m = multipliers(spec)
    z = [input_prediction(w, m, x)]
    for ell in range(spec.H - 1):
        z.append(m.a_hid * torch.matmul(phi(spec.act, z[-1]), w.w_hid[:, ell].transpose(-1, -2)) + m.s * z[-1])
    return output_prediction(spec, w, m, torch.stack(z, dim=1)[:, -1])


def step_fn(forward, spec, params: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor, device: str):
    def step() -> tuple[torch.Tensor, ...]:
        y_hat = forward(spec, Weights(*params), x)
        grads = torch.autograd.grad((y.unsqueeze(0) - y_hat).pow(2).mean(dim=(1, 2)).sum(), params)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        return grads

    return step


def timed(step, seconds: float) -> tuple[float, tuple[torch.Tensor, ...]]:
    out = step()
    n, t0 = 0, time.perf_counter()
    while n == 0 or time.perf_counter() - t0 < seconds:
        step()
        n += 1
    return (time.perf_counter() - t0) / n, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", default=["128:128", "512:64", "128:512"], help="N:H settings")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seconds", type=float, default=2.0, help="timed per way and shape (after a warm-up step)")
    a = ap.parse_args(argv)
    if a.device == "cpu":
        torch.set_num_threads(1)
    print(f"torch {torch.__version__}, {a.device}; seconds per BP step (2 stacked runs, batch 64, tanh, "
          "Depth-μP with skips)")
    print(f"{'N':>5} {'H':>5} | {'sliced':>10} {'unbind':>10} | {'ratio':>7} | max |Δgrad|")
    for shape in a.shapes:
        N, H = (int(v) for v in shape.split(":"))
        spec = fwdpass.net_spec("depth_mup_skips", "tanh", N, H)
        params = [t.requires_grad_(True) for t in init_weights(spec, [0, 1], device=a.device).tensors()]
        g = torch.Generator().manual_seed(0)
        x = torch.randn(64, 784, generator=g).to(a.device)
        y = torch.randn(64, 10, generator=g).to(a.device)
        before, g0 = timed(step_fn(sliced_feedforward, spec, params, x, y, a.device), a.seconds)
        after, g1 = timed(step_fn(lambda s, w, v: feedforward(s, w, v)[1], spec, params, x, y, a.device), a.seconds)
        diff = max(float((u - v).abs().max()) for u, v in zip(g0, g1) if u.numel())
        print(f"{N:>5} {H:>5} | {before:>9.4f}s {after:>9.4f}s | {before / after:>6.1f}x | {diff:.1e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
