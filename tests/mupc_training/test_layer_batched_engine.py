"""The layer-batched PC engine (``energy.PCEngine``) and the trainer built on it against a
straightforward per-layer, per-run reference of the formulas (spec §1.5–1.8), on fixed seeds."""

import itertools

import numpy as np
import pytest
import torch

import pipeline.studies.mupc.training.group_training as tr
from pipeline.studies.mupc.engine.energy import (
    Adam,
    InferenceConfig,
    InPlaceAdam,
    PCEngine,
    errors,
    infer,
    sqrt_floor,
    weight_grads,
)
from pipeline.studies.mupc.engine.model import NetSpec, Weights, dphi, feedforward, init_weights, multipliers, phi
from pipeline.studies.mupc.engine.runs import RunConfig

F64 = torch.float64


# ----------------------------------------------------------------------------- per-layer reference


def ref_feedforward(spec, w, x, r):
    m = multipliers(spec)
    z = [m.a_in * x[r] @ w.w_in[r].T]
    for ell in range(spec.H - 1):
        z.append(m.a_hid * phi(spec.act, z[-1]) @ w.w_hid[r, ell].T + m.s * z[-1])
    return z


def ref_errors(spec, w, x, y, z, r):
    """Per layer: ε_1 = z_1 − a_1 W_1 x, ε_ℓ = z_ℓ − a W_ℓ φ(z_{ℓ−1}) − s z_{ℓ−1}, ε_L = y − a_L W_L φ(z_H)."""
    m = multipliers(spec)
    eps = [z[0] - m.a_in * x[r] @ w.w_in[r].T]
    for ell in range(1, spec.H):
        eps.append(z[ell] - (m.a_hid * phi(spec.act, z[ell - 1]) @ w.w_hid[r, ell - 1].T + m.s * z[ell - 1]))
    return eps, y[r] - m.a_out * phi(spec.act, z[-1]) @ w.w_out[r].T


def ref_activity_grad(spec, w, z, eps, eps_out, r, B, decay=0.0):
    """(ε_ℓ − J_ℓᵀ ε_{ℓ+1} + c z_ℓ) / B, layer by layer."""
    m = multipliers(spec)
    g = []
    for ell in range(spec.H):
        if ell < spec.H - 1:
            back = m.a_hid * dphi(spec.act, z[ell]) * (eps[ell + 1] @ w.w_hid[r, ell]) + m.s * eps[ell + 1]
        else:
            back = m.a_out * dphi(spec.act, z[ell]) * (eps_out @ w.w_out[r])
        g.append((eps[ell] - back + decay * z[ell]) / B)
    return g


def ref_infer(spec, w, x, y, z0, lr, steps, optim, r, decay=0.0):
    z = [t.clone() for t in z0]
    B = x.shape[1]
    m1 = [torch.zeros_like(t) for t in z]
    v1 = [torch.zeros_like(t) for t in z]
    for t in range(1, steps + 1):
        eps, eps_out = ref_errors(spec, w, x, y, z, r)
        g = ref_activity_grad(spec, w, z, eps, eps_out, r, B, decay)
        for ell in range(spec.H):
            if optim == "gd":
                z[ell] = z[ell] - lr * g[ell]
            else:
                m1[ell] = 0.9 * m1[ell] + 0.1 * g[ell]
                v1[ell] = 0.999 * v1[ell] + 0.001 * g[ell] ** 2
                z[ell] = z[ell] - lr * (m1[ell] / (1 - 0.9**t)) / ((v1[ell] / (1 - 0.999**t)).sqrt() + 1e-8)
    return z


def ref_weight_grads(spec, w, x, y, z, r):
    m = multipliers(spec)
    B = x.shape[1]
    eps, eps_out = ref_errors(spec, w, x, y, z, r)
    g_in = -(m.a_in / B) * eps[0].T @ x[r]
    g_hid = [-(m.a_hid / B) * eps[ell].T @ phi(spec.act, z[ell - 1]) for ell in range(1, spec.H)]
    g_out = -(m.a_out / B) * eps_out.T @ phi(spec.act, z[-1])
    return g_in, g_hid, g_out


# ----------------------------------------------------------------------------- set-up


def setup(act, skips, param, R, H=4, B=5, dtype=F64, N=6):
    init = "standard_gauss" if param == "mupc" else "standard"
    spec = NetSpec(D=7, N=N, H=H, d_y=3, act=act, skips=skips, param=param, init=init)
    w0 = init_weights(spec, list(range(R)), dtype=dtype)
    # the trainer's storage: hidden layers layer-major [H-1, R, N, N]; w is its run-major view
    store = [w0.w_in.contiguous(), w0.w_hid.transpose(0, 1).contiguous(), w0.w_out.contiguous()]
    w = Weights(store[0], store[1].transpose(0, 1), store[2])
    g = torch.Generator().manual_seed(11)
    x = torch.randn(R, B, spec.D, generator=g, dtype=dtype)
    y = torch.randn(R, B, spec.d_y, generator=g, dtype=dtype)
    return spec, w, store, x, y


CASES = list(itertools.product(["linear", "tanh", "relu"], [False, True], ["sp", "mupc"], [1, 3]))


def close(a, b, tol=1e-12):
    return torch.allclose(a, b, rtol=tol, atol=tol * max(1.0, float(b.abs().max())))


@pytest.mark.parametrize("act,skips,param,R", CASES)
@pytest.mark.parametrize("optim", ["gd", "adam"])
def test_engine_iteration_matches_per_layer_reference(act, skips, param, R, optim):
    """Feed-forward, T inference steps from the feed-forward point, final errors and weight gradients."""
    spec, w, store, x, y = setup(act, skips, param, R)
    lr = torch.tensor([0.3, 0.05, 0.7][:R], dtype=F64) * (0.1 if optim == "adam" else 5.0)
    T = 6
    eng = PCEngine(spec, R, x.shape[1], InferenceConfig(steps=T, optim=optim), dtype=F64)
    eng.bind(w)
    loss = eng.feedforward(x, y)
    z_ff = eng.runs_view(eng.z).clone()
    eng.infer(lr)
    z_eng = eng.runs_view(eng.z)
    eng.errors()
    grads = [torch.empty_like(t) for t in store]
    eng.weight_grads(x, grads)
    g_hid_runs = grads[1].transpose(0, 1)
    for r in range(R):
        z0 = ref_feedforward(spec, w, x, r)
        assert close(z_ff[r], torch.stack(z0))
        _, eps_out0 = ref_errors(spec, w, x, y, z0, r)
        assert float(loss[r]) == pytest.approx(0.5 * float(eps_out0.pow(2).mean()), rel=1e-12)
        z = ref_infer(spec, w, x, y, z0, float(lr[r]), T, optim, r)
        assert close(z_eng[r], torch.stack(z), 1e-10 if optim == "adam" else 1e-12)
        g_in, g_hid, g_out = ref_weight_grads(spec, w, x, y, z, r)
        assert close(grads[0][r], g_in, 1e-9) and close(grads[2][r], g_out, 1e-9)
        for ell, gh in enumerate(g_hid):
            assert close(g_hid_runs[r, ell], gh, 1e-9)


@pytest.mark.parametrize("act,skips,param,R", CASES[::3])
def test_engine_from_given_activities_with_decay(act, skips, param, R):
    """Inference from activities off the feed-forward point (every error recomputed), activity decay."""
    spec, w, _, x, y = setup(act, skips, param, R)
    z0, _ = feedforward(spec, w, x)
    z0 = z0 + 0.2 * torch.randn(z0.shape, generator=torch.Generator().manual_seed(3), dtype=F64)
    eng = PCEngine(spec, R, x.shape[1], InferenceConfig(steps=5, activity_decay=0.4), dtype=F64)
    eng.bind(w)
    eng.set_activities(z0, x, y)
    eng.infer(0.5)
    for r in range(R):
        z = ref_infer(spec, w, x, y, list(z0[r].unbind(0)), 0.5, 5, "gd", r, decay=0.4)
        assert close(eng.runs_view(eng.z)[r], torch.stack(z))


@pytest.mark.parametrize("act,optim", [("relu", "gd"), ("tanh", "adam"), ("linear", "gd")])
def test_engine_equals_the_formula_functions_and_convergence_count(act, optim):
    """Same activities and n_converged as ``infer`` (the whole-tensor formulas), stacked runs, one hidden layer too."""
    for H in (1, 5):
        spec, w, _, x, y = setup(act, True, "mupc", 3, H=H)
        lr = torch.tensor([0.02, 0.2, 1.0], dtype=F64)
        cfg = InferenceConfig(steps=12, optim=optim, conv_threshold=2e-3)
        z0, _ = feedforward(spec, w, x)
        ref = infer(spec, w, x, y, z0, lr, cfg)
        eng = PCEngine(spec, 3, x.shape[1], cfg, dtype=F64)
        eng.bind(w)
        eng.feedforward(x, y)
        n = eng.infer(lr)
        assert close(eng.runs_view(eng.z), ref.z, 1e-10)
        assert torch.equal(n, ref.n_converged)


def test_untouched_layers_keep_exactly_zero_errors():
    """Predictions are formed as the feed-forward pass forms them: a layer below the inference signal
    has an error of exactly 0 (Adam would turn round-off there into full-size steps)."""
    spec, w, _, x, y = setup("tanh", True, "mupc", 2, H=6)
    eng = PCEngine(spec, 2, x.shape[1], InferenceConfig(steps=2), dtype=torch.float32)
    w32 = Weights(*(t.float() for t in w.tensors()))
    eng.bind(w32)
    eng.feedforward(x.float(), y.float())
    eng.infer(0.1)  # two steps move layers H and H-1 only
    eng.errors()
    assert eng.E[: spec.H - 2].abs().max() == 0
    assert eng.E[-1].abs().max() > 0


def engine_iterations(act, skips, param, R, H, T, optim, decay, dtype, iters=3, front=True, route="standard",
                      start=None, device="cpu", N=6, B=5):
    """``iters`` training iterations (feed-forward or, with ``start``, given activities; inference, final errors,
    weight gradients, a GD weight step) of one engine; every intermediate the trainer reads, per iteration."""
    spec, w, store, x, y = setup(act, skips, param, R, H=H, B=B, dtype=dtype, N=N)
    store = [t.to(device, copy=True) for t in store]
    x, y = x.to(device), y.to(device)
    w = Weights(store[0], store[1].transpose(0, 1), store[2])
    lr = torch.tensor([0.3, 0.05, 0.7][:R], dtype=dtype, device=device) * (0.1 if optim == "adam" else 5.0)
    eng = PCEngine(spec, R, x.shape[1], InferenceConfig(steps=T, optim=optim, activity_decay=decay), dtype=dtype,
                   device=device, front=front, route=route)
    eng.bind(w)
    grads = [torch.empty_like(t) for t in store]
    out = []
    for _ in range(iters):
        if start is None:
            loss = eng.feedforward(x, y)
        else:
            eng.set_activities(start(spec, w, x), x, y)
            loss = torch.zeros(R, dtype=dtype)
        n = eng.infer(lr)
        z = eng.z.clone()
        eng.errors()
        eng.weight_grads(x, grads)
        out.append([loss, n, z, eng.gnorm.clone(), eng.E.clone(), eng.eps_out.clone(), *(g.clone() for g in grads)])
        for t, g in zip(store, grads):
            t.sub_(0.05 * g)
    return out


FRONT_CASES = [("relu", True, "mupc", 1, 8, 3, "gd", 0.0), ("relu", True, "mupc", 3, 8, 3, "adam", 0.0),
               ("tanh", False, "sp", 3, 5, 7, "gd", 0.0), ("linear", True, "mupc", 2, 6, 4, "adam", 0.0),
               ("linear", False, "sp", 1, 3, 9, "gd", 0.0), ("tanh", True, "mupc", 2, 1, 3, "gd", 0.0),
               ("relu", False, "sp", 3, 6, 2, "adam", 0.0), ("tanh", True, "mupc", 2, 6, 3, "gd", 0.3)]


@pytest.mark.parametrize("act,skips,param,R,H,T,optim,decay", FRONT_CASES)
@pytest.mark.parametrize("dtype", [torch.float32, F64], ids=["f32", "f64"])
def test_following_the_inference_front_changes_no_bit(act, skips, param, R, H, T, optim, decay, dtype):
    """Computing only the layers the inference signal has reached gives the whole computation's
    activities, gradient norms, errors, convergence counts and weight gradients bit for bit: T below, at
    and above H, one hidden layer, GD and Adam, stacked runs, float32 and float64. With activity decay
    every layer moves from the first step, so the engine computes them all."""
    full = engine_iterations(act, skips, param, R, H, T, optim, decay, dtype, front=False)
    fast = engine_iterations(act, skips, param, R, H, T, optim, decay, dtype, front=True)
    for a, b in zip(full, fast):
        for u, v in zip(a, b):
            assert torch.equal(u, v)
    assert any(float(g.abs().max()) > 0 for g in full[-1][-3:])  # the weights did learn


def test_the_front_skips_the_layers_the_signal_has_not_reached():
    """T = 2 steps in an 8-layer net: only the top two layers' errors and weight gradients are formed;
    the six below are exactly 0 without a product computed for them."""
    spec, w, store, x, y = setup("relu", True, "mupc", 2, H=8)
    eng = PCEngine(spec, 2, x.shape[1], InferenceConfig(steps=2))
    w32 = Weights(*(t.float() for t in w.tensors()))
    eng.bind(w32)
    eng.E.fill_(7.0)  # stale values from an earlier batch must not survive the feed-forward
    eng.feedforward(x.float(), y.float())
    eng.infer(0.1)
    eng.errors()
    assert eng.reached == 2
    assert eng.E[:6].abs().max() == 0 and eng.E[6:].abs().amax(dim=(1, 2, 3)).min() > 0
    grads = [torch.full_like(t.float(), 3.0) for t in store]
    eng.weight_grads(x.float(), grads)
    assert grads[0].abs().max() == 0 and grads[1][:5].abs().max() == 0 and grads[1][5:].abs().max() > 0


@pytest.mark.parametrize("lrs", [[0.1, 0.01, 0.001], [0.01, 0.01, 0.01], [0.1, 0.01, 0.1]],
                         ids=["distinct", "shared", "grouped"])
@pytest.mark.parametrize("fused", [False, True])
def test_in_place_adam_equals_adam_and_floor_is_exact(fused, lrs):
    """In place, per-run lrs (distinct, all shared: one call on whole tensors, or two runs sharing one),
    layer-major hidden weights, the √v̂ floor: the numbers of :class:`Adam` (eager: to the last bits;
    fused kernel: to float round-off)."""
    g = torch.Generator().manual_seed(5)
    for dtype in (torch.float32, F64):
        ps = [torch.randn(3, 4, 5, generator=g, dtype=dtype), torch.randn(2, 3, 4, 4, generator=g, dtype=dtype)]
        ref = Adam([ps[0].clone(), ps[1].transpose(0, 1).clone()], torch.tensor(lrs, dtype=dtype))
        new = InPlaceAdam([p.clone() for p in ps], lrs, (0, 1), fused=fused)
        q = [ps[0].clone(), ps[1].transpose(0, 1).clone()]
        for k in range(4):
            grads = [torch.randn(p.shape, generator=g, dtype=dtype) for p in ps]
            grads[0][0] = 0.0  # exact zeros (v = 0) and tiny values go through the floor
            grads[0][1, 0] = 1e-30 if dtype == F64 else 1e-20
            q = ref.step(q, [grads[0], grads[1].transpose(0, 1)])
            new.step([t.clone() for t in grads])
            tol = 8 * torch.finfo(dtype).eps  # p − lr·u vs one fused multiply-add
            assert torch.allclose(new.params[0], q[0], rtol=tol, atol=tol), (dtype, k)
            assert torch.allclose(new.params[1].transpose(0, 1), q[1], rtol=tol, atol=tol), (dtype, k)
            assert torch.equal(new.params[0][0], q[0][0])  # zero gradients: no step in either
        e = torch.tensor(1e-8, dtype=dtype)
        assert torch.tensor(sqrt_floor(dtype, 1e-8), dtype=dtype).sqrt() + e == e


def reference_trainer(runs, data):
    """The trainer's PC loop written with the whole-tensor formula functions (no early stops)."""
    rc0 = runs[0]
    spec = tr.net_spec(rc0, data.x_train.shape[1], data.y_train.shape[1])
    B = rc0.batch_size
    orders = torch.stack([tr.batch_orders(rc.seed, len(data.y_train), B, rc0.epochs) for rc in runs], 1)
    w = init_weights(spec, [rc.seed for rc in runs], dtype=F64)
    opt = Adam(w.tensors(), torch.tensor([rc.param_lr for rc in runs], dtype=F64))
    act_lr = torch.tensor([rc.act_lr for rc in runs], dtype=F64)
    cfg = InferenceConfig(steps=rc0.T, optim=rc0.act_optim)
    losses, accs = [], []
    for i in range(orders.shape[0]):
        x, y = data.x_train[orders[i]], data.y_train[orders[i]]
        z0, y_hat = feedforward(spec, w, x)
        losses.append(0.5 * (y - y_hat).pow(2).mean(dim=(1, 2)))
        z = infer(spec, w, x, y, z0, act_lr, cfg).z
        eps, eps_out = errors(spec, w, x, y, z)
        w = Weights(*opt.step(w.tensors(), weight_grads(spec, w, x, z, eps, eps_out).tensors()))
        if (i + 1) % rc0.test_every == 0:
            accs.append(0.5 * (data.y_test - tr.predict(spec, w, data.x_test)).pow(2).mean(dim=(1, 2)))
    return torch.stack(losses).numpy(), torch.stack(accs).numpy()


@pytest.mark.parametrize("act,optim", [("relu", "gd"), ("tanh", "adam")])
def test_trainer_matches_the_formula_trainer(act, optim, monkeypatch):
    monkeypatch.setattr(tr, "NO_LEARNING_ACC", -1.0)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(64 * 6 + 128, 20, generator=g, dtype=F64)
    y = torch.nn.functional.one_hot(torch.randint(0, 10, (len(x),), generator=g), 10).to(F64)
    data = tr.DataSet(x[:384], y[:384], x[384:], y[384:])
    runs = [RunConfig(dataset="mnist", N=8, H=4, act=act, param="mupc", init="standard_gauss", skips=True, seed=s,
                      epochs=1, test_every=3, param_lr=plr, T=4, act_optim=optim, act_lr=alr)
            for s, plr, alr in ((0, 0.01, 0.5), (1, 0.003, 0.1), (0, 0.001, 0.05))]
    stacked = tr.train_group(runs, data, "cpu", F64, layout="stacked")
    sequential = tr.train_group(runs, data, "cpu", F64, layout="sequential")
    auto = tr.train_group(runs, data, "cpu", F64)
    measured = tr.train_group(runs, data, "cpu", F64, layout="measure")
    losses, test_losses = reference_trainer(runs, data)
    for res in (stacked, sequential, auto, measured):
        for r, rr in enumerate(res):
            np.testing.assert_allclose(rr.arrays["batch_train_losses"], losses[:, r], rtol=1e-6)  # stored as float32
            np.testing.assert_allclose(rr.arrays["test_losses"], test_losses[:, r], rtol=1e-10)
            np.testing.assert_array_equal(rr.arrays["n_infer_iters"], stacked[r].arrays["n_infer_iters"])
    note = measured[0].extra["stack_layout"]
    assert note["layout"] == "measure" and note["runs_per_stack"] in (1, 3)
    assert set(note["measured_steps_per_s"]) == {"1", "3"}
    # the default is a rule, not a timing: N = 8 stacks on the CPU, and reruns stack alike
    assert auto[0].extra["stack_layout"] == {"runs_per_stack": 3, "layout": "auto", "measured_steps_per_s": {}}
    for a, b in zip(auto, tr.train_group(runs, data, "cpu", F64)):
        for key in a.arrays:
            np.testing.assert_array_equal(a.arrays[key], b.arrays[key])
    assert stacked[0].extra["stack_layout"]["runs_per_stack"] == 3


@pytest.mark.parametrize("act,skips", [("linear", False), ("tanh", True), ("relu", True)])
def test_evaluator_matches_the_formula_forward_pass(act, skips):
    """Accuracy and loss from the evaluator's reused buffers equal those of ``predict`` (one chunk and
    several), and a second call after a weight change sees the new weights."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(256, 20, generator=g, dtype=F64)
    y = torch.nn.functional.one_hot(torch.randint(0, 10, (256,), generator=g), 10).to(F64)
    data = tr.DataSet(x[:64], y[:64], x[64:], y[64:])
    spec = NetSpec(D=20, N=8, H=3, d_y=10, act=act, skips=skips, param="mupc", init="standard_gauss")
    w = init_weights(spec, [0, 1, 2], dtype=F64)

    def formula(w):
        y_hat = tr.predict(spec, w, data.x_test)
        acc = 100.0 * (y_hat.argmax(-1) == data.y_test.argmax(-1)).double().mean(-1)
        return acc, 0.5 * (y_hat - data.y_test).pow(2).mean(dim=(1, 2))

    for max_elems in (2**26, 64 * 3 * 8):  # the whole test set at once; 64 images per chunk
        ev = tr.Evaluator(spec, 3, data, half_mse=True, max_elems=max_elems)
        assert ev.chunk == (192 if max_elems == 2**26 else 64)
        for scale in (1.0, 3.0):
            w_now = Weights(*(scale * t for t in w.tensors()))
            acc, loss = ev(w_now)
            acc_f, loss_f = formula(w_now)
            assert torch.allclose(acc.double(), acc_f, atol=1e-4)
            assert torch.allclose(loss, loss_f, rtol=1e-12)
        assert not torch.equal(formula(w)[1], loss)  # the weights changed the loss
    with pytest.raises(ValueError, match="2 runs, the evaluator 3"):
        ev(init_weights(spec, [0, 1], dtype=F64))
