"""mupc_analysis: exact invariants of spec §8.2 items 1–5 and 7, structured eigen-solvers (hessian, theory)."""

import itertools

import numpy as np
import pytest
import torch

from pipeline.studies.mupc.analysis import theory
from pipeline.studies.mupc.engine import hessian as hz
from pipeline.studies.mupc.engine.energy import EnergyTerms, InferenceConfig, energy, errors, infer, weight_grads
from pipeline.studies.mupc.engine.model import NetSpec, Weights, feedforward, init_weights, multipliers

CASES = list(itertools.product([False, True], ["sp", "mupc"]))


def _spec(act, skips, param, N=4, H=3, D=None, d_y=None, legacy=False):
    init = "standard_gauss" if param in ("mupc", "ntp") else "standard"
    return NetSpec(D=D or N, N=N, H=H, d_y=d_y or N, act=act, skips=skips, param=param, init=init,
                   legacy_noskip_branch_scale=legacy)


def _autodiff_hessian(spec, w, x, y, z, decay=0.0):
    H, N = spec.H, spec.N

    def f(v):
        terms = EnergyTerms(activity_decay=decay)
        return energy(spec, w, x.view(1, -1), y.view(1, -1), v.view(1, H, 1, N), terms).sum()

    return torch.func.hessian(f)(z.reshape(-1))


@pytest.mark.parametrize("skips,param", CASES)
@pytest.mark.parametrize("H", [1, 3])
def test_linear_blocks_equal_autodiff(skips, param, H):  # §8.2 item 1 (+ Q2: decay adds c_z I)
    spec = _spec("linear", skips, param, H=H)
    w = init_weights(spec, [1], dtype=torch.float64)
    x = hz.hessian_input(spec.N, 1)
    z = feedforward(spec, w, x.view(1, -1))[0][0, :, 0]
    for decay in (0.0, 1.0):
        auto = _autodiff_hessian(spec, w, x, x, z, decay)
        assert (hz.to_dense(hz.hessian_blocks(spec, w, x, x, z, decay)) - auto).abs().max() <= 1e-10
        assert (hz.to_dense(hz.theory_blocks(spec, w, decay)) - auto).abs().max() <= 1e-10


@pytest.mark.parametrize("act", ["tanh", "relu"])
@pytest.mark.parametrize("skips,param", CASES)
def test_nonlinear_blocks_equal_autodiff(act, skips, param):  # §8.2 item 2
    spec = _spec(act, skips, param)
    w = init_weights(spec, [2], dtype=torch.float64)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(spec.D, generator=g, dtype=torch.float64)
    y = torch.randn(spec.d_y, generator=g, dtype=torch.float64)
    z_ff = feedforward(spec, w, x.view(1, -1))[0][0, :, 0]
    for z in (z_ff, z_ff + 0.3 * torch.randn(z_ff.shape, generator=g, dtype=torch.float64)):
        auto = _autodiff_hessian(spec, w, x, y, z)
        assert (hz.to_dense(hz.hessian_blocks(spec, w, x, y, z)) - auto).abs().max() <= 1e-10


def test_legacy_noskip_branch_scale_flag():  # Q1
    spec = _spec("linear", False, "mupc", N=4, H=3)
    assert multipliers(spec).a_hid == pytest.approx(1 / 2.0)
    assert multipliers(spec.with_(legacy_noskip_branch_scale=True)).a_hid == pytest.approx(1 / np.sqrt(16))


@pytest.mark.parametrize("skips,param", CASES)
def test_theory_spectra_facts(skips, param):  # §8.2 item 3
    spec = _spec("linear", skips, param, N=5, H=4)
    w = init_weights(spec, [0], dtype=torch.float64)
    tb = hz.theory_blocks(spec, w)
    d, o = hz.split(tb)
    d_dense = np.linalg.eigvalsh(hz.to_dense(d).numpy())
    assert np.allclose(hz.block_diag_spectrum(tb), d_dense, atol=1e-12)
    o_mat = hz.to_dense(o).numpy()
    o_ev = np.linalg.eigvalsh(o_mat)
    assert np.allclose(o_ev, -o_ev[::-1], atol=1e-12)
    assert abs(np.trace(o_mat)) == 0.0
    assert np.linalg.eigvalsh(hz.to_dense(tb).numpy())[0] > 0


@pytest.mark.parametrize("skips", [False, True])
def test_relu_hessian_positive_definite(skips):  # §8.2 item 3 (ReLU)
    spec = _spec("relu", skips, "sp", N=6, H=4)
    w = init_weights(spec, [5], dtype=torch.float64)
    x = hz.hessian_input(6, 5)
    z = feedforward(spec, w, x.view(1, -1))[0][0, :, 0] + 0.5
    assert np.linalg.eigvalsh(hz.to_dense(hz.hessian_blocks(spec, w, x, x, z)).numpy())[0] > 0


def test_extremes_whose_lanczos_stalls_come_from_the_whole_band(monkeypatch):
    """ARPACK stalled on a paper cell (ArpackNoConvergence stopped the unit): the extremes are then the band's
    exact first and last eigenvalues, recorded as ``banded``."""
    spec = _spec("tanh", False, "sp", N=12, H=6)
    w = init_weights(spec, [0], dtype=torch.float64)
    x = hz.hessian_input(12, 0)
    b = hz.hessian_blocks(spec, w, x, x, feedforward(spec, w, x.view(1, -1))[0][0, :, 0])
    dense = np.linalg.eigvalsh(hz.to_dense(b).numpy())

    def stall(*args, **kw):
        raise hz.spla.ArpackNoConvergence("ARPACK error -1: No convergence", np.array([]), np.array([]))

    monkeypatch.setattr(hz.spla, "eigsh", stall)
    ex = hz.extremes(b)
    assert (ex.method_max, ex.method_min) == ("banded", "banded")
    assert ex.lambda_max == pytest.approx(dense[-1], rel=1e-10) and ex.lambda_min == pytest.approx(dense[0], rel=1e-9)


@pytest.mark.parametrize("act,skips,param", [("tanh", False, "sp"), ("relu", False, "sp"), ("linear", True, "mupc")])
def test_extremes_up_to_band_max_n_are_the_whole_bands_first_and_last_eigenvalues(act, skips, param, monkeypatch):
    """Up to ``band_max_n`` no Lanczos runs (its time swung 0.01–51 s with the cell's conditioning): λ_max and λ_min
    are the band's exact first and last eigenvalues; above it, Lanczos as before."""
    spec = _spec(act, skips, param, N=12, H=6)
    w = init_weights(spec, [0], dtype=torch.float64)
    x = hz.hessian_input(12, 0)
    b = hz.hessian_blocks(spec, w, x, x, feedforward(spec, w, x.view(1, -1))[0][0, :, 0])
    dense = np.linalg.eigvalsh(hz.to_dense(b).numpy())
    lanczos = hz.extremes(b, tol=1e-12, band_max_n=71)  # n = 72
    assert lanczos.method_max == "lanczos_LA"

    def no_lanczos(*args, **kw):
        raise AssertionError("Lanczos ran at n <= band_max_n")

    monkeypatch.setattr(hz.spla, "eigsh", no_lanczos)
    ex = hz.extremes(b, tol=1e-12, band_max_n=72)
    assert (ex.method_max, ex.method_min) == ("banded", "banded")
    assert ex.lambda_max == pytest.approx(dense[-1], rel=1e-12)
    assert ex.lambda_min == pytest.approx(dense[0], rel=1e-10, abs=1e-13)
    assert ex.lambda_max == pytest.approx(lanczos.lambda_max, rel=1e-9)


@pytest.mark.parametrize("act,skips,param", [("linear", True, "sp"), ("tanh", False, "sp"), ("relu", True, "mupc"),
                                             ("linear", False, "mupc")])
def test_structured_extremes_and_spectra_match_dense(act, skips, param):
    spec = _spec(act, skips, param, N=12, H=6)
    w = init_weights(spec, [0], dtype=torch.float64)
    x = hz.hessian_input(12, 0)
    z = feedforward(spec, w, x.view(1, -1))[0][0, :, 0]
    b = hz.hessian_blocks(spec, w, x, x, z)
    dense = np.linalg.eigvalsh(hz.to_dense(b).numpy())
    ex = hz.extremes(b, tol=1e-12)
    assert ex.method_max == "lanczos_LA" and ex.method_min in ("shift_invert_cholesky", "lanczos_SA")
    assert ex.lambda_max == pytest.approx(dense[-1], rel=1e-9)
    assert ex.lambda_min == pytest.approx(dense[0], rel=1e-8, abs=1e-12)
    assert ex.kappa == pytest.approx(abs(dense[-1]) / abs(dense[0]), rel=1e-7)
    ev, method = hz.full_spectrum(b, dense_max_n=0)
    assert method == "banded" and np.allclose(ev, dense, atol=1e-10)


@pytest.mark.parametrize("H", [1, 2, 7])
def test_narrowing_keeps_the_spectrum_and_halves_the_band(H):
    """QᵀH_zQ with block-diagonal orthogonal Q: lower-triangular off-diagonal blocks (band N, not 2N − 1), the
    same eigenvalues; the full band of the narrowed matrix and its N-band agree, and so does the original's."""
    g = torch.Generator().manual_seed(H)
    diag = torch.randn(H, 5, 5, generator=g, dtype=torch.float64)
    b = hz.Blocks(diag + diag.transpose(-1, -2), torch.randn(H - 1, 5, 5, generator=g, dtype=torch.float64))
    nb = hz.narrowed(b)
    dense = np.linalg.eigvalsh(hz.to_dense(b).numpy())
    np.testing.assert_allclose(np.linalg.eigvalsh(hz.to_dense(nb).numpy()), dense, atol=1e-12)
    assert all(torch.equal(u, u.tril()) for u in nb.upper)
    for ab in (hz.to_banded(b), hz.to_banded(nb, 5), hz.to_banded(nb)):
        np.testing.assert_allclose(np.sort(hz.sla.eig_banded(ab, eigvals_only=True)), dense, atol=1e-12)
    assert hz.to_banded(nb, 5).shape == (6, 5 * H)
    ev, method = hz.full_spectrum(b, dense_max_n=0)
    assert method == "banded" and np.allclose(ev, dense, atol=1e-12)


@pytest.mark.parametrize("H", [2, 3, 6, 7])
def test_the_off_diagonal_spectrum_is_plus_and_minus_the_singular_values_of_its_bipartite_half(H):
    """O (zero diagonal blocks) couples even layers only to odd ones: on the band route its eigenvalues come as
    ±σ(B), σ² from BᵀB over ⌊H/2⌋ layers, plus N zeros for an odd H's unpaired layer. Well-conditioned blocks: the
    dense spectrum to rounding; the linear SP net's O without skips, nearly singular: the extremes to rounding,
    the smallest |λ| within √ε of ‖O‖ (σ² from the Gram)."""
    g = torch.Generator().manual_seed(H)
    eye = torch.eye(5, dtype=torch.float64)
    o = hz.Blocks(torch.zeros(H, 5, 5, dtype=torch.float64),
                  torch.randn(H - 1, 5, 5, generator=g, dtype=torch.float64) + 3 * eye)
    dense = np.linalg.eigvalsh(hz.to_dense(o).numpy())
    gram = hz.bipartite_gram(o)
    assert gram.H == H // 2 and gram.upper.shape[0] == H // 2 - 1
    ev, method = hz.off_diagonal_spectrum(o, dense_max_n=0)
    assert method == "banded" and ev.shape == dense.shape
    np.testing.assert_allclose(ev, dense, atol=1e-12 * np.abs(dense).max())
    np.testing.assert_array_equal(ev, -ev[::-1])  # exactly symmetric
    assert np.sum(ev == 0.0) == (H % 2) * 5
    spec = _spec("linear", False, "sp", N=16, H=4 * H)
    near = hz.split(hz.theory_blocks(spec, init_weights(spec, [0], dtype=torch.float64)))[1]
    dense = np.linalg.eigvalsh(hz.to_dense(near).numpy())
    ev, _ = hz.off_diagonal_spectrum(near, dense_max_n=0)
    scale = np.abs(dense).max()
    assert abs(ev[-1] - dense[-1]) <= 1e-13 * scale and abs(ev[0] - dense[0]) <= 1e-13 * scale
    np.testing.assert_allclose(ev, dense, atol=1e-7 * scale)
    assert hz.off_diagonal_spectrum(near, dense_max_n=near.n)[1] == "dense"  # below the limit: O's own solve
    with pytest.raises(ValueError, match="diagonal blocks must be zero"):
        hz.off_diagonal_spectrum(hz.Blocks(near.diag + 1.0, near.upper), dense_max_n=0)


def test_indefinite_falls_back_to_lanczos_sa():
    g = torch.Generator().manual_seed(0)
    diag = torch.randn(5, 6, 6, generator=g, dtype=torch.float64)
    b = hz.Blocks(diag + diag.transpose(-1, -2), torch.randn(4, 6, 6, generator=g, dtype=torch.float64))
    dense = np.linalg.eigvalsh(hz.to_dense(b).numpy())
    assert dense[0] < 0
    ex = hz.extremes(b, tol=1e-12)
    assert ex.method_min == "lanczos_SA"
    assert ex.lambda_min == pytest.approx(dense[0], rel=1e-8)


@pytest.mark.parametrize("skips,param", CASES)
@pytest.mark.parametrize("H", [1, 4])
def test_linear_equilibrium_and_closed_form(skips, param, H):  # §8.2 item 4
    spec = _spec("linear", skips, param, N=6, H=H, D=7, d_y=3)
    w = init_weights(spec, [0, 1], dtype=torch.float64)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, 7, generator=g, dtype=torch.float64)
    y = torch.randn(5, 3, generator=g, dtype=torch.float64)
    z = theory.linear_equilibrium(spec, w, x, y)
    grad = torch.func.grad(lambda zz: energy(spec, w, x, y, zz).sum())(z)
    assert grad.abs().max() <= 1e-12
    f_z = theory.per_sample_energy(spec, w, x, y, z)
    f_cf = theory.closed_form_energy(spec, w, x, y)
    assert torch.allclose(f_z, f_cf, rtol=1e-10, atol=1e-12)
    loss = 0.5 * (y - feedforward(spec, w, x)[1]).pow(2).sum(-1)
    assert bool((loss / f_cf >= 1 - 1e-12).all())


def test_gd_inference_step_threshold():  # §8.2 item 5: η/B against 2/λ_max
    spec = _spec("linear", True, "sp", N=5, H=3, D=6, d_y=4)
    w = init_weights(spec, [0], dtype=torch.float64)
    g = torch.Generator().manual_seed(2)
    B = 8
    x = torch.randn(B, 6, generator=g, dtype=torch.float64)
    y = torch.randn(B, 4, generator=g, dtype=torch.float64)
    lmax = float(np.linalg.eigvalsh(hz.to_dense(hz.theory_blocks(spec, w)).numpy())[-1])
    z_star = theory.linear_equilibrium(spec, w, x, y)
    z0 = feedforward(spec, w, x)[0]
    good = infer(spec, w, x, y, z0, 0.9 * 2 / lmax * B, InferenceConfig(steps=3000)).z
    assert (good - z_star).abs().max() <= 1e-8
    bad = infer(spec, w, x, y, z0, 1.1 * 2 / lmax * B, InferenceConfig(steps=400)).z
    assert not torch.isfinite(bad).all() or (bad - z_star).abs().max() > 1e3


@pytest.mark.parametrize("skips,param", CASES)
def test_envelope_theorem(skips, param):  # §8.2 item 7
    spec = _spec("linear", skips, param, N=5, H=3, D=6, d_y=3)
    w = init_weights(spec, [0], dtype=torch.float64)
    g = torch.Generator().manual_seed(4)
    x = torch.randn(4, 6, generator=g, dtype=torch.float64)
    y = torch.randn(4, 3, generator=g, dtype=torch.float64)
    z = theory.linear_equilibrium(spec, w, x, y)
    eps, eps_out = errors(spec, w, x, y, z)
    at_z = weight_grads(spec, w, x, z, eps, eps_out)
    auto = torch.func.grad(lambda a, b, c: theory.closed_form_energy(spec, Weights(a, b, c), x, y).mean(),
                           argnums=(0, 1, 2))(*w.tensors())
    for p, q in zip(at_z.tensors(), auto):
        assert torch.allclose(p, q, atol=1e-10, rtol=1e-8)


@pytest.mark.parametrize("act", ["tanh", "relu"])
def test_numerical_equilibrium_stationary(act):
    spec = _spec(act, True, "mupc", N=5, H=3, D=6, d_y=3)
    w = init_weights(spec, [0], dtype=torch.float64)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(4, 6, generator=g, dtype=torch.float64)
    y = torch.randn(4, 3, generator=g, dtype=torch.float64)
    z0 = feedforward(spec, w, x)[0]
    eq = theory.numerical_equilibrium(spec, w, x, y, z0, tol=1e-9, max_steps=20000)
    assert eq.converged and eq.residual.max() < 1e-9
    f0 = theory.per_sample_energy(spec, w, x, y, z0)
    assert bool((theory.per_sample_energy(spec, w, x, y, eq.z) <= f0).all())


def test_linear_numerical_equilibrium_matches_exact():
    spec = _spec("linear", True, "sp", N=4, H=3, D=5, d_y=3)
    w = init_weights(spec, [0], dtype=torch.float64)
    g = torch.Generator().manual_seed(6)
    x = torch.randn(3, 5, generator=g, dtype=torch.float64)
    y = torch.randn(3, 3, generator=g, dtype=torch.float64)
    eq = theory.numerical_equilibrium(spec, w, x, y, feedforward(spec, w, x)[0], tol=1e-11, max_steps=50000)
    assert (eq.z - theory.linear_equilibrium(spec, w, x, y)).abs().max() < 1e-8


def test_hessian_matvec_matches_blocks():
    spec = _spec("tanh", True, "sp", N=4, H=3, D=5, d_y=2)
    w = init_weights(spec, [0], dtype=torch.float64)
    g = torch.Generator().manual_seed(7)
    x = torch.randn(2, 5, generator=g, dtype=torch.float64)
    y = torch.randn(2, 2, generator=g, dtype=torch.float64)
    z = feedforward(spec, w, x)[0] + 0.2
    v = torch.randn(z.shape, generator=g, dtype=torch.float64)
    hv = theory.hessian_matvec(spec, w, x, y, z, v)
    for b in range(2):
        ref = hz.to_dense(hz.hessian_blocks(spec, w, x[b], y[b], z[0, :, b])) @ v[0, :, b].reshape(-1)
        assert torch.allclose(hv[0, :, b].reshape(-1), ref, atol=1e-12)
