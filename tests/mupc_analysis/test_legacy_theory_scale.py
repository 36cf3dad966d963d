"""Quirk Q1 under ``legacy_noskip_branch_scale``: the numeric H_z takes the paper-era energy's 1/√(N·L),
the linear theory (D, O, H_theory of F3/F4) keeps the paper-era analytic 1/√N."""

import math

import torch

from pipeline.studies.mupc.engine import hessian
from pipeline.studies.mupc.engine.model import NetSpec, feedforward, init_weights


def _blocks(legacy: bool, skips: bool = False):
    N, H = 5, 3
    spec = NetSpec(D=N, N=N, H=H, d_y=N, act="linear", skips=skips, param="mupc", init="standard_gauss",
                   legacy_noskip_branch_scale=legacy)
    w = init_weights(spec, [0], dtype=torch.float64)
    x = hessian.hessian_input(N, 0)
    z = feedforward(spec, w, x.view(1, -1))[0][0, :, 0]
    return spec, w, hessian.hessian_blocks(spec, w, x, x, z), hessian.theory_blocks(spec, w)


def test_legacy_flag_keeps_the_theory_at_one_over_sqrt_n():
    spec, w, num, theory = _blocks(legacy=True)
    wh = w.w_hid[0]
    assert torch.allclose(theory.upper, -(wh / math.sqrt(spec.N)).transpose(-1, -2), atol=1e-14)
    assert torch.allclose(num.upper, -(wh / math.sqrt(spec.N * spec.L)).transpose(-1, -2), atol=1e-14)
    assert hessian.theory_multipliers(spec).a_hid == 1 / math.sqrt(spec.N)


def test_without_the_flag_theory_equals_numeric():
    for skips in (False, True):
        _, _, num, theory = _blocks(legacy=False, skips=skips)
        assert torch.allclose(num.diag, theory.diag, atol=1e-12) and torch.allclose(num.upper, theory.upper, atol=1e-12)
    _, _, num, theory = _blocks(legacy=True, skips=True)  # with skips the flag changes nothing
    assert torch.allclose(num.upper, theory.upper, atol=1e-12)
