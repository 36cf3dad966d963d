"""The PC engine against autodiff of the energy (spec §8.2 items 6, 8, 9)."""

import itertools

import pytest
import torch

from pipeline.studies.mupc.engine.energy import (
    EnergyTerms,
    InferenceConfig,
    activity_grad,
    energy,
    errors,
    infer,
    train_loss,
    weight_grads,
)
from pipeline.studies.mupc.engine.model import NetSpec, Weights, feedforward, init_weights, multipliers


def _setup(act: str, skips: bool, param: str, H: int = 4, R: int = 2, B: int = 3):
    init = "standard_gauss" if param in ("mupc", "depth_mup", "ntp") else "standard"
    spec = NetSpec(D=5, N=6, H=H, d_y=4, act=act, skips=skips, param=param, init=init)
    w = init_weights(spec, list(range(R)), dtype=torch.float64)
    g = torch.Generator().manual_seed(7)
    x = torch.randn(B, spec.D, generator=g, dtype=torch.float64)
    y = torch.randn(B, spec.d_y, generator=g, dtype=torch.float64)
    z, _ = feedforward(spec, w, x)
    z = z + 0.3 * torch.randn(z.shape, generator=g, dtype=torch.float64)  # off the feed-forward point
    return spec, w, x, y, z


CASES = list(itertools.product(["linear", "tanh", "relu"], [False, True], ["sp", "mupc"]))


@pytest.mark.parametrize("act,skips,param", CASES)
def test_activity_grad_matches_autodiff(act, skips, param):
    spec, w, x, y, z = _setup(act, skips, param)
    decay = 0.3
    terms = EnergyTerms(activity_decay=decay)
    auto = torch.func.grad(lambda zz: energy(spec, w, x, y, zz, terms).sum())(z)
    eps, eps_out = errors(spec, w, x, y, z)
    ana = activity_grad(spec, w, z, eps, eps_out, activity_decay=decay)
    assert torch.allclose(ana, auto, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("act,skips,param", CASES)
def test_weight_grads_match_autodiff(act, skips, param):
    spec, w, x, y, z = _setup(act, skips, param)
    terms = EnergyTerms(weight_decay=0.1, spectral_penalty=0.05)

    def f(a, b, c):
        return energy(spec, Weights(a, b, c), x, y, z, terms).sum()

    auto = torch.func.grad(f, argnums=(0, 1, 2))(*w.tensors())
    eps, eps_out = errors(spec, w, x, y, z)
    ana = weight_grads(spec, w, x, z, eps, eps_out, terms)
    for a, b in zip(ana.tensors(), auto):
        assert torch.allclose(a, b, atol=1e-11, rtol=1e-9)


@pytest.mark.parametrize("act,skips,param", CASES)
def test_feedforward_init_has_zero_hidden_errors(act, skips, param):
    spec, w, x, y, _ = _setup(act, skips, param)
    z, y_hat = feedforward(spec, w, x)
    eps, eps_out = errors(spec, w, x, y, z)
    assert eps.abs().max().item() < 1e-12
    # F = d_y × batch_train_loss at the feed-forward point
    assert torch.allclose(energy(spec, w, x, y, z), spec.d_y * train_loss(y_hat, y))
    grads = weight_grads(spec, w, x, z, eps, eps_out)
    assert grads.w_in.abs().max() == 0 and grads.w_hid.abs().max() == 0
    assert grads.w_out.abs().max() > 0


def test_runs_are_independent_along_run_axis():
    spec, w, x, y, z = _setup("tanh", True, "mupc", R=3)
    lr = torch.tensor([0.1, 0.5, 1.0])
    cfg = InferenceConfig(steps=5)
    stacked = infer(spec, w, x, y, z, lr, cfg).z
    for r in range(3):
        single = Weights(*(t[r : r + 1] for t in w.tensors()))
        alone = infer(spec, single, x, y, z[r : r + 1], float(lr[r]), cfg).z
        assert torch.allclose(stacked[r : r + 1], alone, atol=1e-13)


@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (5, 5)])
def test_orthogonal_init(shape):
    out_dim, in_dim = shape
    spec = NetSpec(D=in_dim, N=out_dim, H=2, d_y=out_dim, init="orthogonal", orth_gain=1.05)
    w = init_weights(spec, [3]).layers(0)[0].double()
    gram = w @ w.T if out_dim <= in_dim else w.T @ w
    assert torch.allclose(gram, 1.05**2 * torch.eye(min(shape), dtype=torch.float64), atol=1e-6)


def test_mupc_multipliers():
    m = multipliers(NetSpec(D=784, N=512, H=8, d_y=10, skips=True, param="mupc"))
    assert m.a_in == pytest.approx(784**-0.5) and m.a_out == pytest.approx(1 / 512)
    assert m.a_hid == pytest.approx((512 * 9) ** -0.5) and m.s == 1.0
    no_skip = multipliers(NetSpec(D=784, N=512, H=8, d_y=10, skips=False, param="mupc"))
    assert no_skip.a_hid == pytest.approx(512**-0.5)
    legacy = multipliers(NetSpec(D=784, N=512, H=8, d_y=10, skips=False, param="mupc",
                                 legacy_noskip_branch_scale=True))
    assert legacy.a_hid == pytest.approx((512 * 9) ** -0.5)


def test_stacked_weights_are_the_same_drawn_in_parallel_or_one_seed_after_another(monkeypatch):
    """init_weights draws its seeds in threads: each from its own generator, so the numbers are the serial ones."""
    from pipeline.studies.mupc.engine.model import NetSpec, init_weights

    for init in ("standard_gauss", "orthogonal", "standard"):
        spec = NetSpec(D=20, N=8, H=4, d_y=3, act="tanh", skips=True, param="mupc", init=init)
        monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
        serial = init_weights(spec, [3, 1, 4, 1, 5])
        monkeypatch.setattr(torch, "get_num_threads", lambda: 4)
        parallel = init_weights(spec, [3, 1, 4, 1, 5])
        assert all(torch.equal(a, b) for a, b in zip(serial.tensors(), parallel.tensors())), init
        one = init_weights(spec, [4])
        assert all(torch.equal(a[2], b[0]) for a, b in zip(parallel.tensors(), one.tensors()))
