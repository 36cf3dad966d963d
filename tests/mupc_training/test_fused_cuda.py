"""The engine's ``fused`` route compiled for CUDA (Triton's own compiler, not its interpreter) against the standard
route on the same device: the CPU tests (``test_fused_engine.py``) run the kernels interpreted; these run what
a GPU trains with. float64 to 1e-10, float32 with TF32 off to float32's round-off. ``gpu``-marked: skipped
without CUDA."""

from __future__ import annotations

import pytest
import torch

# First: it sets TRITON_INTERPRET where torch sees no CUDA before Triton is imported (and skips without Triton)
from tests.mupc_training.test_fused_engine import CASES, _same
from tests.mupc_training.test_layer_batched_engine import engine_iterations

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def _both(act, skips, param, R, H, T, optim, dtype):
    torch.backends.cuda.matmul.allow_tf32 = False
    runs = [engine_iterations(act, skips, param, R, H, T, optim, 0.0, dtype, iters=2, route=route, device="cuda")
            for route in ("standard", "fused")]
    return runs[1], runs[0]


@pytest.mark.parametrize("act,skips,param,R", CASES)
def test_fused_equals_standard_on_cuda_in_float64(act, skips, param, R):
    new, std = _both(act, skips, param, R, 4, 6, "adam", torch.float64)
    for a, b in zip(new, std):
        _same([t.cpu() for t in a], [t.cpu() for t in b], 1e-10)
    assert float(std[-1][2].abs().max()) > 0


@pytest.mark.parametrize("act", ["linear", "tanh", "relu"])
def test_fused_equals_standard_on_cuda_in_float32(act):
    new, std = _both(act, True, "mupc", 3, 5, 7, "gd", torch.float32)
    for a, b in zip(new, std):
        _same([t.cpu() for t in a], [t.cpu() for t in b], 2e-4)


def test_fused_equals_standard_on_cuda_over_several_tiles():
    """N = 70, B = 66: two tiles of each, launched as CUDA runs them (a row's tiles side by side)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    args = ("relu", True, "mupc", 2, 3, 3, "adam", 0.0, torch.float64)
    std, new = (engine_iterations(*args, iters=1, route=route, device="cuda", N=70, B=66)
                for route in ("standard", "fused"))
    for a, b in zip(new, std):
        _same([t.cpu() for t in a], [t.cpu() for t in b], 1e-10)


@pytest.mark.parametrize("text", ["128:64:8:4", "256:32:8:3"])
def test_other_tiles_on_cuda(monkeypatch, text):
    """Settings that ``benchmarks/fused_tiles.py`` sweeps, compiled for CUDA: wider tiles, K tiles of 32 and 64,
    eight warps, deeper pipelines; float32 (TF32 off) to its round-off, float64 to 1e-10, against the standard
    route."""
    from pipeline.studies.mupc.engine import fused

    torch.backends.cuda.matmul.allow_tf32 = False
    for dtype, B, tol in ((torch.float32, 10, 2e-4), (torch.float64, 66, 1e-10)):
        args = ("relu", True, "mupc", 2, 4, 5, "adam", 0.0, dtype)
        std = engine_iterations(*args, iters=1, route="standard", device="cuda", N=70, B=B)
        monkeypatch.setattr(fused, "TILES", fused.Tiles.parse(text))
        new = engine_iterations(*args, iters=1, route="fused", device="cuda", N=70, B=B)
        monkeypatch.undo()
        for a, b in zip(new, std):
            _same([t.cpu() for t in a], [t.cpu() for t in b], tol)
