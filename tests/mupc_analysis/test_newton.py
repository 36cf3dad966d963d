"""Equilibria by Newton (analysis/newton.py) against gradient descent, the dense Hessian and the linear closed
form; F27's metrics either way; host reads of the solves."""

import itertools

import numpy as np
import pytest
import torch

from pipeline.studies.mupc.analysis import cost, newton, theory
from pipeline.studies.mupc.analysis.train import theory_run
from pipeline.studies.mupc.engine import hessian as hz
from pipeline.studies.mupc.engine.energy import errors
from pipeline.studies.mupc.engine.model import (
    NetSpec,
    Weights,
    feedforward,
    init_weights,
    input_prediction,
    multipliers,
)
from tests.host_reads import count_host_reads

F64 = torch.float64


def _net(act, param, skips, H, N=6, D=7, d_y=3, B=5, seed=0):
    init = "standard_gauss" if param == "mupc" else "standard"
    spec = NetSpec(D=D, N=N, H=H, d_y=d_y, act=act, skips=skips, param=param, init=init)
    w = init_weights(spec, [seed + 1, seed + 2], dtype=F64)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, D, generator=g, dtype=F64)
    y = torch.randn(B, d_y, generator=g, dtype=F64)
    return spec, w, x, y, feedforward(spec, w, x)[0]


def _both(spec, w, x, y, z0):
    gd = theory.numerical_equilibrium(spec, w, x, y, z0, tol=1e-12, max_steps=400_000)
    nt = newton.newton_equilibrium(spec, w, x, y, z0, tol=1e-12)
    assert gd.converged and nt.converged and nt.fallback_steps == 0
    return gd, nt


def _rel(a, b):
    return float((a - b).abs().max() / b.abs().max())


SMOOTH = list(itertools.product(["linear", "tanh"], ["sp", "mupc"], [True, False], [1, 3]))


@pytest.mark.parametrize("act,param,skips,H", SMOOTH)
def test_smooth_equilibria_equal_gradient_descent(act, param, skips, H):
    spec, w, x, y, z0 = _net(act, param, skips, H, N=12 if H == 3 else 6)
    gd, nt = _both(spec, w, x, y, z0)
    assert _rel(nt.z, gd.z) < 1e-10
    assert nt.steps < gd.steps / 4


@pytest.mark.parametrize("skips", [True, False])
@pytest.mark.parametrize("param", ["sp", "mupc"])
def test_linear_newton_is_the_closed_form_in_one_step(param, skips):
    spec, w, x, y, z0 = _net("linear", param, skips, 4, N=16)
    nt = newton.newton_equilibrium(spec, w, x, y, z0, tol=1e-12)
    assert nt.steps == 1
    assert _rel(nt.z, theory.linear_equilibrium(spec, w, x, y)) < 1e-12


@pytest.mark.parametrize("act", ["tanh", "relu"])
def test_converged_samples_leave_the_batch_with_their_equilibria(act):
    """A step computes only the samples some run has not converged on: the answers are those of the whole
    batch computed at every step, and the samples computed are fewer than steps × batch."""
    spec, w, x, y, z0 = _net(act, "sp", True, 3, N=6, B=8, seed=1)
    kept = newton.newton_equilibrium(spec, w, x, y, z0, tol=1e-12, drop_converged=False)
    dropped = newton.newton_equilibrium(spec, w, x, y, z0, tol=1e-12)
    assert kept.converged and dropped.converged and dropped.fallback_steps == 0
    assert dropped.steps == kept.steps and kept.sample_steps == kept.steps * 8
    assert dropped.sample_steps < kept.sample_steps
    assert _rel(dropped.z, kept.z) < 1e-12 and torch.equal(dropped.residual < 1e-12, kept.residual < 1e-12)
    one_run = newton.newton_equilibrium(spec, Weights(*(t[1:] for t in w.tensors())), x, y, z0[1:], tol=1e-12)
    assert _rel(dropped.z[1:], one_run.z) < 1e-12  # a sample stays while a run has not converged on it
    assert one_run.sample_steps <= dropped.sample_steps


# ReLU nets whose samples have one stationary point within reach of both solvers: one hidden layer (with
# several units on a kink), and three layers where the seeds give one basin (other seeds of these nets have
# samples where Newton and gradient descent stop in different local minima: see test_relu_newton_stops_...)
RELU_ONE_BASIN = [("sp", True, 1, 0), ("sp", False, 1, 0), ("mupc", True, 1, 0), ("mupc", False, 1, 0),
                  ("mupc", True, 3, 3), ("mupc", False, 3, 1), ("sp", True, 3, 2)]


@pytest.mark.parametrize("param,skips,H,seed", RELU_ONE_BASIN)
def test_relu_equilibria_equal_gradient_descent_on_kinks_too(param, skips, H, seed):
    spec, w, x, y, z0 = _net("relu", param, skips, H, N=6, seed=seed)
    gd, nt = _both(spec, w, x, y, z0)
    assert _rel(nt.z, gd.z) < 1e-10
    assert torch.equal(nt.z == 0, gd.z == 0)


def test_a_relu_equilibrium_on_a_kink_is_held_there():
    """Units whose one-sided gradients straddle 0 sit exactly at 0 in both solvers' answers."""
    spec, w, x, y, z0 = _net("relu", "sp", True, 1, N=6, B=16)
    gd, nt = _both(spec, w, x, y, z0)
    assert int((gd.z == 0).sum()) >= 3
    assert _rel(nt.z, gd.z) < 1e-10 and torch.equal(nt.z == 0, gd.z == 0)
    m = multipliers(spec)
    eps, eps_out = errors(spec, w, x, y, nt.z)
    left, right = theory.one_sided(spec, w, nt.z, eps, eps_out, m)
    at0 = nt.z == 0
    assert bool((left[at0] <= 1e-12).all() and (right[at0] >= -1e-12).all())


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("param", ["sp", "mupc"])
def test_relu_newton_stops_at_local_minima(param, seed):
    """Where the two solvers part (the energy of a ReLU net is not convex), Newton's point is still a local
    minimum: stationary, every unit at 0 on a convex kink, and no nearby point has a lower energy."""
    spec, w, x, y, z0 = _net("relu", param, False, 3, N=6, seed=seed)
    nt = newton.newton_equilibrium(spec, w, x, y, z0, tol=1e-12)
    assert nt.converged
    m = multipliers(spec)
    eps, eps_out = errors(spec, w, x, y, nt.z)
    left, right = theory.one_sided(spec, w, nt.z, eps, eps_out, m)
    at0 = nt.z == 0
    assert bool((left[at0] <= 1e-12).all() and (right[at0] >= -1e-12).all())
    f = theory.per_sample_energy(spec, w, x, y, nt.z)
    g = torch.Generator().manual_seed(seed)
    for _ in range(20):
        bumped = nt.z + 1e-4 * torch.randn(nt.z.shape, generator=g, dtype=F64)
        assert bool((theory.per_sample_energy(spec, w, x, y, bumped) >= f - 1e-14).all())


def test_hessian_products_and_gauss_newton_solve_equal_the_dense_matrices():
    spec, w, x, y, z0 = _net("tanh", "sp", True, 3, N=5, B=2)
    z = theory.numerical_equilibrium(spec, w, x, y, z0, tol=1e-10, max_steps=100_000).z  # H_z ≻ 0 there
    m = multipliers(spec)
    st = newton.state_at(spec, w, x, y, z, m, input_prediction(w, m, x))
    lin = newton.Linearisation(st.dp.unsqueeze(3), torch.ones_like(st.dp).unsqueeze(3), st.curv.unsqueeze(3))
    model = newton.Model(spec, w, m, lin)
    gn = newton.GaussNewton(model)
    v = torch.randn(z.shape, generator=torch.Generator().manual_seed(1), dtype=F64).unsqueeze(3)
    hv, p_inv_v = model.hv(v), gn.solve(v)
    for r, b in itertools.product(range(2), range(2)):
        dense = hz.to_dense(hz.hessian_blocks(spec, w, x[b], y[b], z[r, :, b], r=r))
        vec = v[r, :, b, 0].reshape(-1)
        assert torch.allclose(hv[r, :, b, 0].reshape(-1), dense @ vec, atol=1e-12)
        assert float(torch.linalg.eigvalsh(dense)[0]) > 0 and st.curv[r, :, b].abs().max() > 1e-3
        gauss_newton = dense - torch.diag(st.curv[r, :, b].reshape(-1))
        assert torch.allclose(gauss_newton @ p_inv_v[r, :, b, 0].reshape(-1), vec, atol=1e-10)
    np.testing.assert_allclose(newton.pcg(model, gn, v, 40)[0].squeeze(3).numpy(),
                               -_dense_solve(spec, w, x, y, z, v.squeeze(3)).numpy(), atol=1e-9)


def _dense_solve(spec, w, x, y, z, v):
    out = torch.empty_like(v)
    for r, b in itertools.product(range(z.shape[0]), range(z.shape[2])):
        dense = hz.to_dense(hz.hessian_blocks(spec, w, x[b], y[b], z[r, :, b], r=r))
        out[r, :, b] = torch.linalg.solve(dense, v[r, :, b].reshape(-1)).reshape(spec.H, spec.N)
    return out


def test_held_units_make_the_face_newton_step():
    """With units held at 0, the Gauss–Newton solve with their rows added is the Hessian restricted to the
    free units (ReLU: the exact Newton step on that face)."""
    spec, w, x, y, z0 = _net("relu", "sp", True, 3, N=5, B=3)
    z = z0.clone()
    held = torch.zeros_like(z, dtype=torch.bool)
    held[0, 1, 0, 2] = held[0, 2, 0, 4] = held[1, 1, 2, 0] = held[0, 0, 1, 3] = True
    z[held] = 0.0
    m = multipliers(spec)
    dp = (z > 0).to(F64)
    st = newton.State(z, torch.zeros(2, 3, dtype=F64), torch.zeros_like(z), torch.zeros(2, 3, dtype=F64), dp,
                      held, None)
    free = (~held).to(F64)
    lin = newton.Linearisation(dp.unsqueeze(3), free.unsqueeze(3), None)
    model = newton.Model(spec, w, m, lin)
    per_sample = newton.held_counts(st).tolist()
    # layer 2 holds a unit of sample 0 (run 0) and of sample 2 (run 1), layer 3 one of sample 0; layer 1's need
    # no row: a unit there has an error that depends on no other activity
    assert per_sample == [[1, 0, 1], [1, 0, 0]]
    counts = [max(row) for row in per_sample]
    gn = newton.GaussNewton(model, newton.held_rows(spec, w, m, st, counts))
    r = torch.randn(z.shape, generator=torch.Generator().manual_seed(2), dtype=F64) * free
    d = gn.solve(r.unsqueeze(3)).squeeze(3)
    assert bool((d[held] == 0).all())
    for rr, b in itertools.product(range(2), range(3)):
        dense = hz.to_dense(hz.hessian_blocks(spec, w, x[b], y[b], z[rr, :, b], r=rr))
        keep = ~held[rr, :, b].reshape(-1)
        sol = torch.linalg.solve(dense[keep][:, keep], r[rr, :, b].reshape(-1)[keep])
        assert torch.allclose(d[rr, :, b].reshape(-1)[keep], sol, atol=1e-10)


@pytest.mark.parametrize("act,param", [("tanh", "sp"), ("tanh", "mupc"), ("relu", "mupc")])
def test_f27_metrics_equal_either_way(act, param):
    """A few training iterations of the theory unit (ℒ, F*, ℒ/F*) by Newton and by gradient descent."""
    spec = NetSpec(D=12, N=8, H=3, d_y=4, act=act, skips=True, param=param,
                   init="standard_gauss" if param == "mupc" else "standard")
    g = torch.Generator().manual_seed(3)
    batches = [(torch.randn(6, 12, generator=g, dtype=F64),
                torch.nn.functional.one_hot(torch.randint(0, 4, (6,), generator=g), 4).to(F64)) for _ in range(3)]
    gd = theory_run(spec, batches, 1e-2, 0, 1e-12, 400_000, "gd")
    nt = theory_run(spec, batches, 1e-2, 0, 1e-12, 400_000, "newton")
    assert nt["eq_fallback_steps"].sum() == 0 and nt["eq_steps"].max() < gd["eq_steps"].min()
    for key in ("train_losses", "train_energies", "loss_energy_ratios"):
        np.testing.assert_allclose(nt[key], gd[key], rtol=1e-8, err_msg=key)


@pytest.mark.parametrize("act", ["tanh", "relu"])
def test_a_line_search_in_turn_takes_the_tries_it_takes_at_once(act, monkeypatch):
    """The CPU tries the step sizes in turn and stops once every sample has one; a GPU evaluates them all at
    once. Every step takes the same try either way: the same equilibria, bit for bit."""
    spec, w, x, y, z0 = _net(act, "sp", True, 3, N=6, B=8, seed=2)
    evaluated = []
    original = newton.errors
    monkeypatch.setattr(newton, "errors", lambda *a: evaluated.append(1) or original(*a))
    in_turn = newton.newton_equilibrium(spec, w, x, y, z0, tol=1e-12)
    turns = len(evaluated)
    monkeypatch.setattr(newton, "TRIES_IN_TURN", ())
    evaluated.clear()
    at_once = newton.newton_equilibrium(spec, w, x, y, z0, tol=1e-12)
    assert in_turn.converged and torch.equal(in_turn.z, at_once.z) and in_turn.steps == at_once.steps
    tries = len(newton.STEP_SIZES) + (newton.NEWTON_TRIES if act == "tanh" else 0)
    assert len(evaluated) == at_once.steps * (tries + 1) + 1  # each step's tries and its new state, the start
    assert turns - 1 - at_once.steps <= 2 * at_once.steps  # in turn: one or two tries a step


@pytest.mark.parametrize("act", ["tanh", "relu"])
def test_a_newton_step_reads_the_host_once(act, monkeypatch):
    """On a GPU the theory unit's numerical solves read the host at most once a Newton step (its convergence
    test), plus a few reads an iteration for the recorded numbers; gradient descent read it twice a step. (The
    CPU's line search reads once a try it evaluates, a read that costs nothing there.)"""
    monkeypatch.setattr(newton, "TRIES_IN_TURN", ())  # the tries all at once, as on a GPU
    spec = NetSpec(D=12, N=8, H=3, d_y=4, act=act, skips=True, param="sp", init="standard")
    g = torch.Generator().manual_seed(4)
    batches = [(torch.randn(6, 12, generator=g, dtype=F64),
                torch.nn.functional.one_hot(torch.randint(0, 4, (6,), generator=g), 4).to(F64)) for _ in range(2)]
    out = {}

    def run() -> None:
        out.update(theory_run(spec, batches, 1e-2, 0, 1e-10, 400_000))

    reads = count_host_reads(run)
    steps = int(out["eq_steps"].sum())
    assert steps > 0 and out["eq_fallback_steps"].sum() == 0
    assert reads <= steps + 2 + 8 * len(batches), (reads, steps)


@pytest.mark.parametrize("H", [2, 8])
def test_a_linear_theory_iteration_reads_the_host_once(H):
    """The exact (block Cholesky) equilibrium checks its H factorisations at once, and the recorded ℒ, F* and
    closed form are read after the last iteration: one host read an iteration whatever the depth (it was H + 4),
    a latency the GPU paid at every layer."""
    spec = NetSpec(D=12, N=5, H=H, d_y=4, act="linear", skips=True, param="mupc", init="standard_gauss")
    g = torch.Generator().manual_seed(4)
    batches = [(torch.randn(6, 12, generator=g, dtype=F64),
                torch.nn.functional.one_hot(torch.randint(0, 4, (6,), generator=g), 4).to(F64)) for _ in range(3)]
    out = {}
    reads = count_host_reads(lambda: out.update(theory_run(spec, batches, 1e-2, 0)))
    assert reads <= len(batches) + 2, reads  # the copy of the records to the host: .cpu() and .numpy()
    assert np.isfinite(out["loss_energy_ratios"]).all() and out["closed_form_energies"].shape == (3,)


def test_a_block_cholesky_that_fails_says_which_layer():
    spec = NetSpec(D=3, N=3, H=3, d_y=2, act="linear", skips=False, param="sp", init="standard")
    w = init_weights(spec, [0], dtype=F64)
    b = theory.theory_blocks(spec, w, 0.0, 0)
    b.diag[1] = -torch.eye(3, dtype=F64)  # the second layer's block: not positive-definite
    with pytest.raises(torch.linalg.LinAlgError, match="layer 2 of 3 is not positive-definite"):
        theory.block_cholesky(b)


def test_the_cost_model_counts_the_line_search_newton_runs():
    """cost.py stays free of torch, so it names the tries a step makes; they must be newton.py's."""
    sizes = len(newton.STEP_SIZES)
    assert {"relu": sizes, "tanh": newton.NEWTON_TRIES + sizes} == cost.LINE_SEARCH_TRIES


@pytest.mark.parametrize("act,solves_a_step", [("relu", 1), ("tanh", 3 + 1)])
def test_a_newton_step_makes_the_solves_the_cost_model_counts(act, solves_a_step, monkeypatch):
    """A ReLU step solves with P once and tries every step size along that one direction (it solved once a
    size, 7 times the work); tanh's CG solves once an iteration and once to start (cg_iters = 3)."""
    solves = []
    original = newton.GaussNewton.solve
    monkeypatch.setattr(newton.GaussNewton, "solve", lambda self, r: solves.append(1) or original(self, r))
    spec, w, x, y, z0 = _net(act, "sp", True, 3, N=6, B=5, seed=3)
    nt = newton.newton_equilibrium(spec, w, x, y, z0, tol=1e-10, cg_iters=3, fallback_max_steps=0)
    assert nt.converged and nt.steps > 1
    assert len(solves) == solves_a_step * nt.steps
