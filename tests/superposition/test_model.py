"""The seed's numbers on CPU, batched vs per-seed training, the learning-rate schedules."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pipeline.studies.superposition.model import (
    init_batch,
    init_weights,
    loss_and_grads,
    lr_at,
    seed_reference,
    train_batched,
)

F, N = 50, 2


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: threads only add contention on 2 shared cores
    yield
    torch.set_num_threads(old)


def test_seed42_init_matches_spec() -> None:
    w_e, w_u = init_weights(42, F, N)
    assert w_e.shape == (2, 50) and w_u.shape == (50, 2)
    np.testing.assert_allclose(w_e[0, :4].numpy(), [0.10812, 0.11738, -0.03313, 0.12991], atol=1e-5)
    np.testing.assert_allclose(w_u[0].numpy(), [-0.40494, 0.17664], atol=1e-5)
    assert float(w_e.abs().max()) <= 1 / np.sqrt(50) and float(w_u.abs().max()) <= 1 / np.sqrt(2)


def test_init_leaves_global_rng_alone() -> None:
    torch.manual_seed(7)
    a = torch.rand(3)
    torch.manual_seed(7)
    init_weights(42, F, N)
    assert torch.equal(torch.rand(3), a)


def test_epoch1_loss_seed42_exact() -> None:
    hist = train_batched(*init_batch([42], F, N), epochs=2, lr=5.0, tied=False, snapshot_every=1)
    assert abs(float(hist.losses[0, 0]) - 0.0204067) <= 1e-7
    assert abs(float(hist.losses[1, 0]) - 0.0203657) <= 2e-6  # spec table, epoch 2


def test_epoch1_loss_same_for_seed_loop_and_batched() -> None:
    ref, _ = seed_reference(42, F, N, epochs=1, lr=5.0)
    hist = train_batched(*init_batch([0, 42, 3], F, N), epochs=1, lr=5.0, tied=False, snapshot_every=1)
    assert abs(float(hist.losses[0, 1]) - ref[0]) <= 1e-8


def test_closed_form_gradients_equal_autograd() -> None:
    w_e, w_u = init_batch([1, 2], F, N)
    w_e, w_u = w_e.double().requires_grad_(), w_u.double().requires_grad_()
    eye = torch.eye(F, dtype=torch.float64)
    loss = ((torch.relu(torch.bmm(w_u, w_e)) - eye) ** 2).mean(dim=(1, 2))
    loss.sum().backward()
    ours, g_e, g_u = loss_and_grads(w_e.detach(), w_u.detach(), eye, tied=False)
    torch.testing.assert_close(ours, loss.detach())
    torch.testing.assert_close(g_e, w_e.grad)
    torch.testing.assert_close(g_u, w_u.grad)


@pytest.mark.parametrize("tied", [False, True])
def test_batched_reproduces_seed_loop_per_seed(tied: bool) -> None:
    """The batched closed-form run equals the seed's shuffled DataLoader-style autograd loop per seed,
    up to float rounding (the shuffle only reorders sums)."""
    seeds, epochs = [5, 42], 150
    hist = train_batched(*init_batch(seeds, F, N), epochs=epochs, lr=5.0, tied=tied, snapshot_every=50)
    for i, s in enumerate(seeds):
        ref, model = seed_reference(s, F, N, epochs, lr=5.0, tied=tied)
        np.testing.assert_allclose(hist.losses[:, i], ref, rtol=0, atol=2e-7)
        np.testing.assert_allclose(hist.w_e[-1, i], model.embedding.weight.detach().numpy(), atol=2e-5)
        np.testing.assert_allclose(hist.w_u[-1, i], model.unembedding.weight.detach().numpy(), atol=2e-5)


def test_batched_equals_single_seed_runs() -> None:
    seeds = [3, 11, 42]
    batch = train_batched(*init_batch(seeds, F, N), epochs=200, lr=5.0, tied=False, snapshot_every=50)
    for i, s in enumerate(seeds):
        one = train_batched(*init_batch([s], F, N), epochs=200, lr=5.0, tied=False, snapshot_every=50)
        np.testing.assert_allclose(batch.losses[:, i], one.losses[:, 0], rtol=0, atol=1e-7)
        np.testing.assert_allclose(batch.w_e[:, i], one.w_e[:, 0], atol=1e-6)


def test_snapshots_and_tied_constraint() -> None:
    hist = train_batched(*init_batch([0, 1], F, N), epochs=100, lr=5.0, tied=True, snapshot_every=25)
    assert hist.snap_epochs.tolist() == [0, 25, 50, 75, 100]
    assert hist.w_e.shape == (5, 2, 2, 50) and hist.w_u.shape == (5, 2, 50, 2)
    np.testing.assert_array_equal(hist.w_u, np.transpose(hist.w_e, (0, 1, 3, 2)))
    w_e0, _ = init_batch([0, 1], F, N)
    np.testing.assert_array_equal(hist.w_e[0], w_e0.numpy())
    assert np.all(np.diff(hist.losses, axis=0) <= 1e-6)  # full-batch GD at this rate: no increase


def test_lr_schedules() -> None:
    assert all(lr_at(e, 5.0, "constant", 50000, 3000.0, 100) == 5.0 for e in (0, 499, 500, 49999))
    assert lr_at(499, 5.0, "intended", 50000, 3000.0, 100) == 5.0
    assert lr_at(500, 5.0, "intended", 50000, 3000.0, 100) == pytest.approx(5.0 * 3000 ** -0.01)
    assert lr_at(49999, 5.0, "intended", 50000, 3000.0, 100) == pytest.approx(5.0 * 3000 ** -0.99)
    with pytest.raises(ValueError):
        lr_at(0, 5.0, "literal", 50000, 3000.0, 100)


def test_intended_schedule_slows_learning() -> None:
    w = init_batch([42], F, N)
    const = train_batched(*w, epochs=200, lr=5.0, tied=False, snapshot_every=200)
    decay = train_batched(*w, epochs=200, lr=5.0, tied=False, snapshot_every=200, lr_schedule="intended",
                          decay_total=3000.0, decay_steps=4)
    np.testing.assert_array_equal(const.losses[:51], decay.losses[:51])  # same until the first step
    assert decay.losses[-1, 0] > const.losses[-1, 0]
