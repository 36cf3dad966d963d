"""Pure functions of the ZerO study: initialisations, MLP, rank, the training loop's bookkeeping."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.linalg import hadamard

from pipeline.studies.zero_init.model import (
    MLP,
    hadamard_scale,
    one_matrix,
    partial_identity,
    rank_abs,
    residual_ranks,
    spray_matrix,
    zero_matrix,
)
from pipeline.studies.zero_init.train import RunConfig, RunResult, lr_at_epoch, train_run


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """The test machine is shared: one intra-op thread avoids oversubscription."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


# ------------------------------------------------------------------------------------------ ZerO


def test_zero_square_is_identity():
    assert torch.equal(zero_matrix(784, 784), torch.eye(784))


def test_zero_wide_is_partial_identity():
    w = zero_matrix(10, 256)
    assert w.shape == (10, 256)
    assert torch.equal(w[:, :10], torch.eye(10)) and torch.count_nonzero(w[:, 10:]) == 0


def test_zero_8x5_has_orthonormal_columns():
    w = zero_matrix(8, 5).double()
    assert w.shape == (8, 5)
    assert torch.allclose(w.T @ w, torch.eye(5, dtype=torch.float64), atol=1e-7)
    assert torch.allclose(w.abs(), torch.full((8, 5), 1 / math.sqrt(8), dtype=torch.float64))


def test_zero_6x4_is_truncated_h8():
    w = zero_matrix(6, 4)
    expected = torch.tensor(hadamard(8)[:6, :4] / math.sqrt(8), dtype=torch.float32)
    assert torch.equal(w, expected)
    # not a power of two: columns are orthogonal only approximately, each of squared norm 6/8
    g = w.double().T @ w.double()
    assert torch.allclose(torch.diagonal(g), torch.full((4,), 6 / 8, dtype=torch.float64), atol=1e-7)


def test_zero_tall_not_power_of_two_1000x784():
    w = zero_matrix(1000, 784).double()
    assert w.shape == (1000, 784)
    p = 1024
    h = torch.tensor(hadamard(p), dtype=torch.float64) * hadamard_scale(p, "code")
    # the Hadamard part is orthogonal (scale 1/sqrt(p)); W is its top-left block (I_mp H I_pn)
    assert torch.allclose(h.T @ h, torch.eye(p, dtype=torch.float64), atol=1e-9)
    assert torch.allclose(w, (torch.eye(1000, p, dtype=torch.float64) @ h @ torch.eye(p, 784,
                                                                                       dtype=torch.float64)),
                          atol=1e-7)
    assert torch.allclose(torch.diagonal(w.T @ w), torch.full((784,), 1000 / 1024, dtype=torch.float64))


def test_zero_tall_power_of_two_layer_of_the_mlp():
    w = zero_matrix(1024, 784).double()  # l2 at n_h = 1024
    assert torch.allclose(w.T @ w, torch.eye(784, dtype=torch.float64), atol=1e-6)


@pytest.mark.parametrize(("m", "n"), [(8, 5), (1024, 784), (2048, 784)])
def test_zero_paper_scale_gives_two_identity(m, n):
    w = zero_matrix(m, n, "paper").double()
    assert torch.allclose(w.T @ w, 2 * torch.eye(n, dtype=torch.float64), atol=1e-5)
    assert torch.allclose(w, math.sqrt(2) * zero_matrix(m, n, "code").double(), atol=1e-7)


def test_hadamard_scale_rejects_bad_input():
    with pytest.raises(ValueError):
        hadamard_scale(12, "code")
    with pytest.raises(ValueError):
        hadamard_scale(8, "both")


# ------------------------------------------------------------------------------------ OnE, Spray


def test_one_under_seeded_rng():
    w = one_matrix(7, 4, np.random.default_rng(3))
    rng = np.random.default_rng(3)
    cols = [int(rng.integers(low=0, high=3, endpoint=True)) for _ in range(4, 7)]
    assert torch.equal(w[:4], torch.eye(4))
    for r, c in zip(range(4, 7), cols):
        row = torch.zeros(4)
        row[c] = 1
        assert torch.equal(w[r], row)
    assert torch.equal(w, one_matrix(7, 4, np.random.default_rng(3)))
    draws = {tuple(one_matrix(40, 8, np.random.default_rng(s)).argmax(1)[8:].tolist()) for s in range(3)}
    assert len(draws) == 3  # other seeds, other columns


def test_one_square_and_wide_is_partial_identity():
    assert torch.equal(one_matrix(5, 5, np.random.default_rng(0)), torch.eye(5))
    assert torch.equal(one_matrix(3, 5, np.random.default_rng(0)), partial_identity(3, 5))


def test_spray_inverts_one():
    one = one_matrix(9, 4, np.random.default_rng(11))
    spray = spray_matrix(9, 4, np.random.default_rng(11))
    assert torch.allclose(spray, (torch.ones(9, 4) - one) / 3)
    assert torch.allclose(spray.sum(1), torch.ones(9))  # every row of OnE has exactly one 1
    assert torch.allclose(spray_matrix(4, 4, np.random.default_rng(0)), (torch.ones(4, 4) - torch.eye(4)) / 3)


# ------------------------------------------------------------------------------------------- rank


def _known_rank(n: int, svals: list[float], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    u, _ = np.linalg.qr(rng.standard_normal((n, n)))
    v, _ = np.linalg.qr(rng.standard_normal((n, n)))
    s = np.zeros(n)
    s[: len(svals)] = svals
    return (u * s) @ v.T


def test_rank_with_absolute_tolerance():
    a = _known_rank(32, [3.0, 1.0, 0.5, 1e-2, 1e-3, 2e-4, 5e-5, 1e-6])
    assert rank_abs(a, 1e-4) == 6  # 2e-4 counts, 5e-5 does not
    assert rank_abs(a, 1e-2 / 2) == 4
    assert rank_abs(a, 1e-4) == np.linalg.matrix_rank(a, tol=1e-4)
    a32 = torch.tensor(_known_rank(64, [1.0] * 20), dtype=torch.float32)
    assert rank_abs(a32, 1e-4) == 20
    assert rank_abs(np.zeros((5, 5)), 1e-4) == 0
    assert rank_abs(np.eye(5), 1.0) == 0  # strictly above the tolerance


def test_residual_ranks_of_initial_models():
    for init in ("zero", "partial_identity"):
        m = MLP(64, init, bias=None)
        assert residual_ranks(m.l3.weight, m.l3.weight.clone(), 1e-4) == (0, 0)
    r = MLP(64, "random", bias=0.01, seed=5)
    assert residual_ranks(r.l3.weight, r.l3.weight.clone(), 1e-4) == (64, 0)
    w = torch.eye(16)
    w[0, 1] = 0.5
    w[3, 3] = 1.5
    assert residual_ranks(w, torch.eye(16), 1e-4) == (2, 2)
    assert residual_ranks(w, torch.eye(16), 1e-4, on="device") == (2, 2)


# -------------------------------------------------------------------------------------------- MLP


def test_mlp_layers_and_inits():
    m = MLP(1024, "zero", bias=0.01)
    assert torch.equal(m.l1.weight, torch.eye(784))
    assert torch.equal(m.l2.weight, zero_matrix(1024, 784))
    assert torch.equal(m.l3.weight, torch.eye(1024))
    assert torch.equal(m.l4.weight, torch.eye(10, 1024))
    assert torch.all(m.l3.bias == 0.01)
    assert MLP(256, "partial_identity", bias=None).l1.bias is None
    a, b = MLP(128, "random", bias=None, seed=3), MLP(128, "random", bias=None, seed=3)
    assert torch.equal(a.l3.weight, b.l3.weight)
    assert not torch.equal(a.l3.weight, MLP(128, "random", bias=None, seed=4).l3.weight)
    assert abs(float(a.l2.weight.detach().std()) - math.sqrt(2 / 784)) < 0.003
    o = MLP(1024, "one", bias=None, seed=2)
    assert torch.equal(o.l2.weight, one_matrix(1024, 784, np.random.default_rng(2)))


def test_partial_identity_logits_vanish_on_blank_corner():
    # the first 10 pixels (the top row) of MNIST are always 0: without bias the logits are exactly 0
    m = MLP(256, "partial_identity", bias=None)
    x = torch.rand(5, 784)
    x[:, :10] = 0
    out = m(x)
    assert torch.allclose(out, torch.full((5, 10), -math.log(10)))


def test_train_run_iteration_indices():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(320, 784, generator=g)
    y = torch.randint(0, 10, (320,), generator=g)
    cfg = RunConfig(init="zero", n_h=32, bias=0.01, epochs=2, lr=0.1, batch_size=64, test_batch_size=100,
                    log_interval=2, max_iters=None, rank_tol=1e-4, rank_on="cpu", zero_scale="code",
                    init_seed=1, data_seed=1)
    res = train_run(cfg, x, y, x[:100], y[:100], log=lambda _m: None)
    # 5 batches per epoch; logged after the steps of batch_idx 0, 2, 4 -> true iterations
    assert res.iters == [0, 1, 3, 5, 6, 8, 10]
    assert res.loss_iters == [1, 3, 5, 6, 8, 10]
    assert [t["iteration"] for t in res.test] == [5, 10] and res.iterations == 10
    assert res.rank_w3_minus_i[0] == 0 and res.rank_w3_minus_i[-1] > 0
    assert all(0 <= a <= 100 for a in res.running_acc)
    again = train_run(cfg, x, y, x[:100], y[:100], log=lambda _m: None)
    assert again.train_loss == res.train_loss  # seeded init and data order
    capped = train_run(RunConfig(**{**cfg.__dict__, "max_iters": 7}), x, y, x[:100], y[:100],
                       log=lambda _m: None)
    assert capped.iters == [0, 1, 3, 5, 6, 7] and capped.iterations == 7


def test_first_iter_above():
    r = RunResult(iters=[0, 1, 51, 101], rank_w3_minus_i=[0, 700, 784, 790])
    assert r.first_iter_above(784) == 101
    assert r.first_iter_above(800) is None


def test_lr_at_epoch_is_steplr_stepped_after_each_epoch():
    # the notebooks' StepLR(12, 0.7): epochs 1-12 at lr, 13-20 at 0.7 lr
    lrs = [lr_at_epoch(0.1, e, 12, 0.7) for e in range(1, 21)]
    assert lrs[:12] == [0.1] * 12 and lrs[12:] == pytest.approx([0.07] * 8)
    assert lr_at_epoch(0.1, 25, 12, 0.7) == pytest.approx(0.049)
    assert [lr_at_epoch(0.1, e, None, 0.7) for e in (1, 13, 30)] == [0.1, 0.1, 0.1]


def test_train_run_applies_the_lr_decay_from_the_next_step():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(192, 784, generator=g)
    y = torch.randint(0, 10, (192,), generator=g)
    base = RunConfig(init="zero", n_h=32, bias=None, epochs=3, lr=0.1, batch_size=64, test_batch_size=100,
                     log_interval=1, max_iters=None, rank_tol=1e-4, rank_on="cpu", zero_scale="code",
                     init_seed=1, data_seed=1)
    const = train_run(base, x, y, x[:100], y[:100], log=lambda _m: None)
    step = train_run(RunConfig(**{**base.__dict__, "lr_step_size": 2, "lr_gamma": 0.5}), x, y, x[:100], y[:100],
                     log=lambda _m: None)
    assert [t["lr"] for t in const.test] == [0.1, 0.1, 0.1]
    assert [t["lr"] for t in step.test] == [0.1, 0.1, 0.05]
    # 3 steps per epoch: identical through epoch 2, different once the halved lr acts
    assert step.train_loss[:6] == const.train_loss[:6] and step.train_loss[6:] != const.train_loss[6:]
    assert [t["rank_w3_minus_i"] for t in step.test][:2] == [t["rank_w3_minus_i"] for t in const.test][:2]
    assert step.test[-1]["rank_w3_minus_i"] == step.rank_w3_minus_i[-1]
