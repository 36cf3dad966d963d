"""BP through the residual MLP differentiates one unbind of the hidden weights, not a slice per layer: a slice's
backward writes a gradient the size of all of them, so a step cost O(H²·N²) (benchmarks/bp_step.py: 12-84x on
one core). The graph is checked, so the test fails on the per-layer slice whatever the machine's speed."""

from __future__ import annotations

import pytest
import torch

from pipeline.studies.mupc.engine.model import NetSpec, Weights, feedforward, init_weights
from pipeline.studies.mupc.training.group_training import predict


def _readers(t: torch.Tensor, leaf: torch.Tensor) -> dict[str, int]:
    """The backward nodes that read ``leaf`` directly (its gradient accumulator's parents), by type."""
    seen, stack, counts = set(), [t.grad_fn], {}
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        for f, _ in fn.next_functions:
            if f is not None and getattr(f, "variable", None) is leaf:
                counts[type(fn).__name__] = counts.get(type(fn).__name__, 0) + 1
            stack.append(f)
    return counts


@pytest.mark.parametrize("forward", ["feedforward", "predict"])
def test_bp_differentiates_one_unbind_of_the_hidden_weights(forward):
    H = 9
    spec = NetSpec(D=5, N=4, H=H, d_y=3, act="tanh", skips=True, param="depth_mup", init="standard_gauss")
    params = [t.requires_grad_(True) for t in init_weights(spec, [0, 1]).tensors()]
    x = torch.randn(6, 5, generator=torch.Generator().manual_seed(0))
    w = Weights(*params)
    y_hat = feedforward(spec, w, x)[1] if forward == "feedforward" else predict(spec, w, x)
    assert _readers(y_hat, params[1]) == {"UnbindBackward0": 1}  # w_hid, read once for its H − 1 layers
    grads = torch.autograd.grad(y_hat.sum(), params)
    assert grads[1].shape == params[1].shape and float(grads[1].abs().sum()) > 0
