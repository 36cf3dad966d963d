"""fwd_pass's in-place step (``fwdpass.update``: each weight stepped from the backward pass, ``step_weight``)
against the stacked functional step it replaced: every run stepped both ways (SGD p − lr·g, ``Adam.step``) and its
own optimiser's result kept. Bit for bit, over several checks, with the weights cut into blocks of layers."""

from __future__ import annotations

import pytest
import torch

from pipeline.studies.mupc.analysis import fwdpass
from pipeline.studies.mupc.analysis.layout import fwd_gain
from pipeline.studies.mupc.engine import model
from pipeline.studies.mupc.engine.energy import Adam
from pipeline.studies.mupc.engine.model import Weights, feedforward, init_weights


def _reference_cell(spec, optims, batches, lr, seed):
    """The step as it was: both optimisers on every run, then a selection (whole-stack copies)."""
    R = len(optims)
    w = init_weights(spec, [seed] * R, dtype=torch.float32)
    params = [t.requires_grad_(True) for t in w.tensors()]
    adam = Adam([p.detach() for p in params], lr)
    is_adam = torch.tensor([o == "adam" for o in optims])
    idx = fwdpass.layer_indices(spec.L)
    rows = []
    for t, (x, y) in enumerate(batches):
        w = Weights(*params)
        z, y_hat = feedforward(spec, w, x)
        with torch.no_grad():
            rows.append(fwdpass.record(spec, w, z, y_hat, idx))
        if t == len(batches) - 1:
            break
        loss = (y.unsqueeze(0) - y_hat).pow(2).mean(dim=(1, 2)).sum()
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            new = [p - lr * g for p, g in zip(params, grads)]
            stepped = adam.step([p.detach() for p in params], list(grads))
            new = [torch.where(is_adam.view(-1, *([1] * (p.dim() - 1))), a, s) for p, a, s in
                   zip(params, stepped, new)]
        params = [p.detach().requires_grad_(True) for p in new]
    return torch.stack(rows, dim=-1)


@pytest.mark.parametrize("variant,act", [("sp_skips", "tanh"), ("depth_mup_no_skips", "relu"),
                                         ("orthogonal", "linear")])
@pytest.mark.parametrize("block_bytes", [1 << 30, 700])
def test_the_in_place_step_is_the_stacked_step_bit_for_bit(variant, act, block_bytes, monkeypatch):
    monkeypatch.setattr(fwdpass, "BLOCK_BYTES", block_bytes)  # 700 bytes: blocks of one or two layers
    spec = fwdpass.net_spec(variant, act, 12, 9, D=20, d_y=5)
    g = torch.Generator().manual_seed(3)
    batches = [(torch.randn(16, 20, generator=g), torch.nn.functional.one_hot(
        torch.randint(0, 5, (16,), generator=g), 5).float()) for _ in range(4)]
    for optims in (["sgd", "adam"], ["adam", "sgd"], ["sgd"], ["adam"]):
        got = fwdpass.run_cell(spec, optims, batches, 1e-2, fwdpass.initial_weights(spec, 7), "cpu")
        want = _reference_cell(spec, optims, batches, 1e-2, 7)
        assert torch.equal(got, want), (optims, (got - want).abs().max())


def test_a_diverged_matrix_has_a_nan_spectral_norm_and_the_others_theirs():
    """LAPACK's eigen-solver refuses a matrix with NaN or inf (the paper's fwd_pass stopped on one); the
    notebook's norm gives NaN there."""
    g = torch.Generator().manual_seed(5)
    w = torch.randn(3, 2, 6, 9, generator=g)
    w[1, 0, 2, 3] = float("nan")
    w[2, 1, 0, 0] = float("inf")
    got = fwdpass.spectral_norm(w)
    assert got[1, 0].isnan() and got[2, 1].isnan()
    # the batched eigen-solve may round differently from a single one (an AMD EPYC did, an Intel Xeon not)
    for r, k in [(0, 0), (0, 1), (1, 1), (2, 0)]:
        torch.testing.assert_close(got[r, k], fwdpass.spectral_norm(w[r, k]), rtol=1e-13, atol=0.0)
        torch.testing.assert_close(got[r, k], torch.linalg.matrix_norm(w[r, k].double(), ord=2))


@pytest.mark.parametrize("init_variant", ["orthogonal", "sp_skips"])
def test_a_seed_a_stack_repeats_is_drawn_once_with_the_same_weights(init_variant, monkeypatch):
    """fwd_pass stacks its optimisers on one seed: the weights are drawn once (the paper's orthogonal cells
    spent minutes on a second set of identical QRs) and are those each run gets alone."""
    spec = fwdpass.net_spec(init_variant, "tanh", 10, 5, D=12, d_y=3)
    calls = []
    original = model._init_matrix
    monkeypatch.setattr(model, "_init_matrix", lambda *a: calls.append(a[0]) or original(*a))
    init_weights(spec, [7], dtype=torch.float32)
    per_seed = len(calls)
    both = init_weights(spec, [7, 9, 7], dtype=torch.float32)
    assert len(calls) == 3 * per_seed  # one seed's matrices, then two seeds' (not three)
    for r, seed in enumerate([7, 9, 7]):
        alone = init_weights(spec, [seed], dtype=torch.float32)
        assert all(torch.equal(a[0], b[r]) for a, b in zip(alone.tensors(), both.tensors()))


def test_a_widths_orthogonal_draws_are_each_depths_and_gains_own_with_each_qr_made_once(monkeypatch):
    """OrthogonalDraws gives every (depth, gain) the weights initial_weights draws for it, bit for bit, in any
    order of depths, making each hidden layer's QR once for all of them; it refuses a net it does not draw."""
    depths, acts = [8, 3, 5, 2, 8], ["tanh", "relu"]  # gains 1.05 and 1
    own = {(L, a): fwdpass.initial_weights(fwdpass.net_spec("orthogonal", a, 6, L, D=9, d_y=3), 4)
           for L in depths for a in acts}
    calls = []
    original = fwdpass.orthogonal_q
    monkeypatch.setattr(fwdpass, "orthogonal_q", lambda *a: calls.append(a[:2]) or original(*a))
    draws = fwdpass.OrthogonalDraws(6, 4, [fwd_gain("orthogonal", a) for a in acts], max(depths) - 2, D=9, d_y=3)
    for L in depths:
        for a in acts:
            got = draws.weights(fwdpass.net_spec("orthogonal", a, 6, L, D=9, d_y=3))
            assert all(torch.equal(x, y) for x, y in zip(got.tensors(), own[L, a].tensors(), strict=True)), (L, a)
    assert calls.count((6, 6)) == max(depths) - 2  # the hidden layers' QRs, once
    assert calls.count((3, 6)) == len(depths) * len(acts) and calls.count((6, 9)) == 1
    with pytest.raises(ValueError, match="not for init 'standard'"):
        draws.weights(fwdpass.net_spec("sp_skips", "tanh", 6, 4, D=9, d_y=3))
    with pytest.raises(ValueError, match="N = 7"):
        draws.weights(fwdpass.net_spec("orthogonal", "tanh", 7, 4, D=9, d_y=3))


def test_a_step_steps_each_weight_as_the_backward_pass_reaches_it_and_holds_no_gradient(monkeypatch):
    """Each weight is stepped from the backward pass, output layer first, and its gradient let go: no weight
    holds one while another is stepped (a step held one for every weight: 4 GiB at the paper's largest cell)."""
    spec = fwdpass.net_spec("sp_skips", "tanh", 12, 9, D=20, d_y=5)
    optims = ["sgd", "adam"]
    stacked = Weights(*(t.repeat(2, *[1] * (t.dim() - 1)) for t in fwdpass.initial_weights(spec, 7).tensors()))
    w, params, adam = fwdpass.trainable(stacked, optims, 1e-2)
    seen: list[tuple[int, int]] = []
    step = fwdpass.step_weight

    def watched(i, p, g, *args):
        seen.append((i, sum(q.grad is not None for q in params)))
        step(i, p, g, *args)

    monkeypatch.setattr(fwdpass, "step_weight", watched)
    x, y = torch.randn(16, 20, generator=torch.Generator().manual_seed(1)), torch.eye(5)[torch.arange(16) % 5]
    before = [p.detach().clone() for p in params]
    _, y_hat = feedforward(spec, w, x, params[1:-1])
    fwdpass.update(params, y, y_hat, optims, 1e-2, adam)
    assert [i for i, _ in seen] == list(range(len(params)))[::-1]  # W_out, the hidden layers top down, W_in
    assert all(held == 0 for _, held in seen) and all(p.grad is None for p in params)
    assert all(not torch.equal(p, b) for p, b in zip(params, before))  # every weight stepped
