"""Pure functions of the imprint study: glyph, Newton-Schulz, Muon, model init."""

from __future__ import annotations

import numpy as np
import pytest
import torch

# skips, rather than breaks, collection where plotly is absent (a bare GPU machine's `pytest -m gpu`): the
# project's plotting module draws the μPC figures with it
pytest.importorskip("plotly")

from pipeline.config import load_section, read_tree
from pipeline.contract import Context
from pipeline.studies.imprint import STUDY, extract, figures, muon
from pipeline.studies.imprint import glyph as glyphs
from pipeline.studies.imprint.config import SPREAD, ImprintParams
from pipeline.studies.imprint.model import build_mlp, make_optimizers, stamp_glyph, w2
from pipeline.studies.imprint.muon import Muon, NewtonSchulz, newton_schulz5, update_scale
from tests.conftest import ROOT

RECTANGLES_SHA256 = "b1a352702945e6919f74cc0041edfbc6b59b8cf31472c8705e99bd58a24fd94a"


def test_rectangles_glyph_is_pinned():
    a, b = glyphs.rectangles_bitmap(), glyphs.rectangles_bitmap()
    assert np.array_equal(a, b)
    assert a.shape == (128, 128) and set(np.unique(a)) == {0.0, 1.0}
    assert glyphs.bitmap_sha256(a) == RECTANGLES_SHA256
    assert glyphs.spectral_norm(0.4 * a) == pytest.approx(45.862, abs=1e-3)
    stats = glyphs.ink_stats(a)
    assert stats["bbox"] == (24, 116, 24, 103)
    assert int((a < 0.5).sum()) == 2312


@pytest.mark.skipif(not glyphs.DROID_FONT.is_file(), reason="fonts-droid-fallback not installed")
def test_droid_glyph_matches_spec_and_rectangles():
    d = glyphs.droid_bitmap()
    assert glyphs.spectral_norm(0.4 * d) == pytest.approx(45.609, abs=1e-3)
    assert d.sum() == pytest.approx(14004.1, abs=0.1)
    # the font-free construction differs from the rendering in 5 thresholded pixels (spec)
    assert int(((d < 0.5) != (glyphs.rectangles_bitmap() < 0.5)).sum()) == 5


def test_droid_glyph_refuses_missing_or_wrong_font(tmp_path):
    with pytest.raises(glyphs.GlyphError, match="fonts-droid-fallback"):
        glyphs.droid_bitmap(tmp_path / "absent.ttf")
    fake = tmp_path / "DroidSansFallbackFull.ttf"
    fake.write_bytes(b"not a font")
    with pytest.raises(glyphs.GlyphError, match="md5"):
        glyphs.droid_bitmap(fake)


def test_newton_schulz_singular_values_of_wide_gaussian():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(128, 784, generator=g)
    s = torch.linalg.svdvals(newton_schulz5(x).double())
    assert float(s.min()) >= 0.6 and float(s.max()) <= 1.2, (float(s.min()), float(s.max()))
    # tall input is handled by transposing: same singular values as its transpose
    st = torch.linalg.svdvals(newton_schulz5(x.T.contiguous()).double())
    assert torch.allclose(s, st, atol=0.01)  # equal up to bf16 rounding


def test_muon_update_rms_is_lr_times_scale_over_sqrt_size():
    torch.manual_seed(1)
    p = torch.nn.Parameter(torch.randn(128, 784) * 0.03)
    before = p.detach().clone()
    p.grad = torch.randn(128, 784)
    lr = 1e-3
    Muon([p], lr=lr).step()
    delta = (p.detach() - before)
    rms = float(delta.pow(2).mean().sqrt())
    # O has entries of RMS ~ ||O||_F / sqrt(rows*cols) ~ 0.9 / sqrt(max dim); times lr*sqrt(max dim)
    assert rms == pytest.approx(lr, rel=0.2)
    assert update_scale(p.shape) == pytest.approx(28.0)


def test_muon_momentum_is_heavy_ball_with_nesterov():
    torch.manual_seed(2)
    p = torch.nn.Parameter(torch.zeros(64, 128))
    opt = Muon([p], lr=1e-3, momentum=0.95)
    g1, g2 = torch.randn(64, 128), torch.randn(64, 128)
    p.grad = g1
    opt.step()
    p.grad = g2
    opt.step()
    assert torch.allclose(opt.state[p]["momentum_buffer"], 0.95 * g1 + g2)


def _one_update(opt_factory, grad: torch.Tensor, w0: torch.Tensor) -> torch.Tensor:
    p = torch.nn.Parameter(w0.clone())
    opt = opt_factory([p])
    p.grad = grad.clone()
    opt.step()
    return p.detach() - w0


def test_muon_vs_torch_optim_muon_one_step():
    """Same update up to bf16 rounding: torch's EMA momentum rescales the NS input by (1 - beta),
    which the Frobenius normalisation removes; it normalises after the bf16 cast, the seed before.
    Measured relative difference: a few per cent, the size of the bf16 noise of either against an
    fp64 Newton-Schulz."""
    torch.manual_seed(3)
    w0 = torch.randn(128, 784) * 0.03
    grad = torch.randn(128, 784)
    ours = _one_update(lambda ps: Muon(ps, lr=1e-3), grad, w0)
    theirs = _one_update(lambda ps: torch.optim.Muon(ps, lr=5e-3, weight_decay=0, momentum=0.95,
                                                     nesterov=True, adjust_lr_fn="match_rms_adamw"),
                         grad, w0)
    rel = float((ours - theirs).norm() / ours.norm())
    exact = -1e-3 * 28.0 * newton_schulz5(grad.double() * 1.95, dtype=torch.float64).float()
    rel_ours, rel_theirs = (float((d - exact).norm() / exact.norm()) for d in (ours, theirs))
    print(f"relative difference ours vs torch.optim.Muon: {rel:.4f}; vs fp64 NS: ours {rel_ours:.4f}, "
          f"torch {rel_theirs:.4f}")
    assert 0.002 < rel < 0.06  # not identical (bf16 order of operations), but close
    assert rel_ours < 0.04 and rel_theirs < 0.04  # each is bf16 noise around the same fp64 update
    assert rel < 1.5 * (rel_ours + rel_theirs)  # the gap is explained by the two bf16 errors


def test_model_init_is_seeded_and_glyph_stamped_in_bf16():
    a, b = build_mlp(0, torch.bfloat16), build_mlp(0, torch.bfloat16)
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb) and pa.dtype == torch.bfloat16
    assert not torch.equal(w2(a), w2(build_mlp(1, torch.bfloat16)))
    bound = 1 / np.sqrt(128)
    assert float(w2(a).detach().abs().max()) <= bound + 1e-3
    before = w2(a).float().clone()
    bitmap = glyphs.rectangles_bitmap()
    stamp_glyph(a, bitmap, 0.4)
    expect = (before + 0.4 * torch.as_tensor(bitmap, dtype=torch.float32)).bfloat16()
    assert torch.equal(w2(a), expect)
    # spectral norm at glyph init: the glyph dominates the random part
    assert float(torch.linalg.matrix_norm(w2(a).detach().float(), ord=2)) == pytest.approx(45.86, abs=0.3)


def test_optimizer_groups():
    model = build_mlp(0, torch.float32)
    muon, adam = make_optimizers(model, "muon", 1e-3, 0.95, 5)
    assert [tuple(p.shape) for p in muon.param_groups[0]["params"]] == [(128, 784), (128, 128), (64, 128),
                                                                        (10, 64)]
    assert all(p.ndim == 1 for p in adam.param_groups[0]["params"])
    # the seed's QKV split would fire on rows == 3 * cols: no weight of this model has that shape
    assert all(p.shape[0] != 3 * p.shape[1] for p in muon.param_groups[0]["params"])
    (only,) = make_optimizers(model, "adam", 1e-3, 0.95, 5)
    assert len(only.param_groups[0]["params"]) == 8


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_training_loop_tiny_keeps_dtype_and_records(precision):
    from pipeline.studies.imprint.model import DTYPES
    from pipeline.studies.imprint.training import Data, train

    dtype = DTYPES[precision]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(600, 784, generator=g).to(dtype)
    y = torch.randint(0, 10, (600,), generator=g)
    model = build_mlp(0, dtype)
    stamp_glyph(model, glyphs.rectangles_bitmap(), 0.4)
    hist = train(model, Data(x, y, x[:200], y[:200]), optimizer="muon", epochs=2, lr=1e-3, momentum=0.95,
                 ns_steps=5, ns_dtype=torch.bfloat16, batch_size=512, test_batch_size=1024, data_seed=1)
    assert all(p.dtype == dtype for p in model.parameters())
    assert len(hist.test_acc) == len(hist.train_acc) == len(hist.w2) == 3 and len(hist.train_loss) == 2
    assert hist.w2[0].dtype == np.float32 and hist.w2[0].shape == (128, 128)
    assert hist.spectral_norm_w2[0] == pytest.approx(glyphs.spectral_norm(hist.w2[0]), rel=1e-4)
    assert hist.spectral_norm_w2[-1] < hist.spectral_norm_w2[0]  # Muon pulls the glyph's norm down
    assert all(np.isfinite(hist.train_loss))


def _fake_run(init: str, epochs: int, seed: int) -> tuple[dict, dict]:
    rng = np.random.default_rng(seed)
    w2 = rng.normal(0, 0.05, (epochs + 1, 128, 128)).astype(np.float32)
    acc = np.linspace(0.1, 0.9, epochs + 1)
    arrays = {"w2": w2, "epoch": np.arange(epochs + 1), "test_acc": acc, "spectral_norm_w2": 40 - acc}
    meta = {"init": init, "precision": "fp32", "epochs": epochs, "glyph_scale": 0.4, "glyph": "rectangles",
            "init_seed": 0, "data_seed": 1, "n_train": 600, "glyph_sha256": "ab" * 32}
    if init == "glyph":
        arrays["glyph_bitmap"] = glyphs.rectangles_bitmap().astype(np.float32)
    return arrays, meta


def test_render_returns_the_seed_figures_with_their_content():
    raw = read_tree(ROOT)
    cfg = load_section(ImprintParams, raw, "imprint", "smoke")
    runs = {k: _fake_run(r.init, 3, i) for i, (k, r) in enumerate(cfg.runs.items())}
    read = {("train", k, "arrays.npz"): a for k, (a, _) in runs.items()}
    read.update({("train", k, "metrics.json"): m for k, (_, m) in runs.items()})
    ctx = Context(study="imprint", kind="render", unit="glyph", profile="smoke", cfg=cfg, device="cpu",
                  stage="imprint_render@glyph", provenance={}, reader=lambda *key: read[key], own=lambda _n: None)
    out = figures.render(ctx, "glyph")
    assert [f.id for f in out.figures] == ["glyph", "glyph_panels"]
    comp = out.figures[0]
    images = [ax for ax in comp.mpl.axes if ax.images]
    assert len(images) == 2 * 4, "one W2 panel per epoch (0..3) for Adam and for Muon"
    curves = [ax for ax in comp.mpl.axes if ax.lines]
    assert len(curves) >= 2 and all(np.isfinite(line.get_ydata()).all() for ax in curves for line in ax.lines)
    np.testing.assert_allclose(images[0].images[0].get_array(), runs["glyph-adam"][0]["w2"][0])
    assert len(comp.plotly.frames) == 4 and comp.plotly.data[0].type == "heatmap"
    assert sorted(comp.sources) == [("train", "glyph-adam"), ("train", "glyph-muon")]
    panels = out.figures[1].mpl
    assert len([ax for ax in panels.axes if ax.images]) == 4  # bitmap, W2 at init, Adam, Muon
    assert "3 epochs" in comp.caption and "profile smoke" in comp.caption


# ------------------------------------------------------------------ glyph auto, provenance

def test_auto_glyph_uses_droid_when_installed_else_rectangles(tmp_path):
    missing = glyphs.glyph_info("auto", 0.4, font_path=tmp_path / "absent.ttf")
    assert missing["shape"] == "rectangles" and missing["requested"] == "auto" and missing["font"] is None
    assert "fonts-droid-fallback" in missing["fallback"]
    assert missing["sha256"] == RECTANGLES_SHA256
    fixed = glyphs.glyph_info("rectangles", 0.4)
    assert fixed["shape"] == "rectangles" and fixed["fallback"] is None
    with pytest.raises(glyphs.GlyphError, match="fonts-droid-fallback"):  # droid asked: no silent fallback
        glyphs.glyph_info("droid", 0.4, font_path=tmp_path / "absent.ttf")
    prov = glyphs.provenance(missing)
    assert "bitmap" not in prov and prov["shape"] == "rectangles"
    if glyphs.DROID_FONT.is_file():
        auto = glyphs.glyph_info("auto", 0.4)
        assert auto["shape"] == "droid" and auto["fallback"] is None and auto["font"] == str(glyphs.DROID_FONT)
        assert auto["font_md5"] == glyphs.DROID_FONT_MD5
        assert auto["spectral_norm_scaled"] == pytest.approx(45.609, abs=1e-3)


# ------------------------------------------------------ Muon against the seed's formula, compile option

def _seed_newton_schulz(G: torch.Tensor, steps: int = 5, eps: float = 1e-7) -> torch.Tensor:
    """Seed 000's zeropower_via_newtonschulz5, transcribed (always iterates in bf16)."""
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = G.bfloat16() / (G.norm() + eps)
    if G.size(0) > G.size(1):
        X = X.T
    for _ in range(steps):
        A = X @ X.T
        B = A @ X
        X = a * X + b * B + c * A @ B
    if G.size(0) > G.size(1):
        X = X.T
    return X.to(G.dtype)


def _seed_muon_step(params: list[torch.Tensor], bufs: list[torch.Tensor], lr: float, momentum: float) -> None:
    """Seed 000's Muon.step (nesterov, backend newtonschulz5, 5 steps), transcribed, in place."""
    for p, buf in zip(params, bufs):
        g = p.grad
        buf.mul_(momentum).add_(g)
        g = g.add(buf, alpha=momentum)
        g = _seed_newton_schulz(g, steps=5)
        p.data.add_(g, alpha=-lr * max(g.size(0), g.size(1)) ** 0.5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_muon_update_equals_the_seeds_formula(dtype):
    """Bit for bit over three steps (momentum buffer included), wide and tall matrices, in both dtypes."""
    gen = torch.Generator().manual_seed(11)
    shapes = [(128, 784), (128, 128), (64, 128), (10, 64), (200, 50)]
    init = [0.05 * torch.randn(*s, generator=gen) for s in shapes]
    grads = [[torch.randn(*s, generator=gen) for s in shapes] for _ in range(3)]
    ours = [w.clone().to(dtype).requires_grad_(True) for w in init]
    seed = [w.clone().to(dtype) for w in init]
    opt = Muon(ours, lr=1e-3, momentum=0.95, ns_steps=5, ns_dtype=torch.bfloat16)
    bufs = [torch.zeros_like(w) for w in seed]
    for step in grads:
        for p, q, g in zip(ours, seed, step):
            p.grad, q.grad = g.to(dtype), g.to(dtype)
        opt.step()
        _seed_muon_step(seed, bufs, lr=1e-3, momentum=0.95)
    for p, q, w in zip(ours, seed, init):
        assert p.dtype == q.dtype == dtype
        assert torch.equal(p.detach(), q), "the same update as the seed's code"
        assert not torch.equal(p.detach(), w.to(dtype))


def test_newton_schulz_compile_falls_back_to_eager(monkeypatch):
    g = torch.randn(64, 128, generator=torch.Generator().manual_seed(0))
    eager = NewtonSchulz(compile=False)
    assert not eager.requested and not eager.compiled and eager.fallback is None
    assert torch.equal(eager(g, steps=5, dtype=torch.bfloat16), newton_schulz5(g))
    monkeypatch.setattr(muon.shutil, "which", lambda _name: None)  # no C++ compiler on PATH
    none = NewtonSchulz(compile=True)
    assert none.requested and not none.compiled and "no C++ compiler" in none.fallback
    assert torch.equal(none(g, steps=5, dtype=torch.bfloat16), newton_schulz5(g))
    monkeypatch.setattr(muon.shutil, "which", lambda _name: "/usr/bin/c++")

    def broken(_fn):
        def call(*_a, **_k):
            raise RuntimeError("backend exploded")
        return call

    monkeypatch.setattr(muon.torch, "compile", broken)
    failing = NewtonSchulz(compile=True)
    assert failing.compiled  # the failure shows on the first call, not at construction
    assert torch.equal(failing(g, steps=5, dtype=torch.bfloat16), newton_schulz5(g))
    assert not failing.compiled and "backend exploded" in failing.fallback


# ------------------------------------------------------------------------- the init-seed spread

def _fake_spread(adam: list[float], muon_acc: list[float]) -> dict:
    return {"init": "glyph", "init_seeds": list(range(len(adam))), "epochs": 1, "data_seed": 1, "precision": "fp32",
            "ns_precision": "fp32", "n_train": 60000,
            "test_acc": {str(i): {"adam": [0.1, a], "muon": [0.1, m]} for i, (a, m) in enumerate(zip(adam, muon_acc))}}


def test_spread_metrics_range_gap_and_every_seed():
    m = extract.spread_metrics(_fake_spread([0.57, 0.90, 0.81], [0.95, 0.95, 0.93]))
    assert m["init_seeds"] == [0, 1, 2] and m["epoch"] == 1
    assert m["adam"]["min"] == 0.57 and m["adam"]["max"] == 0.90 and m["adam"]["range"] == pytest.approx(0.33)
    assert m["gap"]["min"] == pytest.approx(0.05) and m["gap"]["max"] == pytest.approx(0.38)
    assert m["per_seed"]["2"] == pytest.approx({"adam": 0.81, "muon": 0.93, "gap": 0.12})
    assert m["muon_ahead_on_every_seed"] is True
    assert m["adam_range_over_gap_median"] == pytest.approx(0.33 / 0.12)
    assert extract.spread_metrics(_fake_spread([0.9, 0.8], [0.89, 0.95]))["muon_ahead_on_every_seed"] is False


def test_spread_table_has_one_row_per_seed_and_optimiser():
    t = extract.spread_table(_fake_spread([0.57, 0.90, 0.81], [0.95, 0.95, 0.93]))
    assert len(t) == 3 * 2 and list(t["init_seed"]) == [0, 0, 1, 1, 2, 2] and set(t["status"]) == {"finished"}
    assert list(t.columns) == ["run", "init", "optimizer", "init_seed", "data_seed", "precision", "ns_precision",
                               "epochs", "n_train", "status", "test_acc_epoch1", "final_test_acc"]
    assert t.set_index("run").loc["seed_spread-init2-muon", "test_acc_epoch1"] == 0.93


def test_runs_table_has_settings_status_and_final_numbers():
    settings = {k: 1 for k in extract.TABLE_SETTINGS}
    metrics = {"a": {**settings, "train_loss": [0.5, 0.2]}, "b": {**settings, "train_loss": [0.5, float("nan")]}}
    finals = {"a": {"init": "glyph", "final_test_acc": 0.9}, "b": {"init": "glyph", "final_test_acc": 0.1}}
    t = extract.runs_table(metrics, finals)
    assert list(t["run"]) == ["a", "b"] and list(t["status"]) == ["finished", "failed"]
    assert list(t.columns) == ["run", *extract.TABLE_SETTINGS, "status", "final_test_acc"]


def test_spread_units_and_render():
    raw = read_tree(ROOT)
    for profile in ("smoke", "gpu_medium", "paper"):
        cfg = load_section(ImprintParams, raw, "imprint", profile)
        assert SPREAD in STUDY.stage("train").units(cfg) and SPREAD in STUDY.stage("render").units(cfg)
        assert STUDY.stage("extract").units(cfg) == ["final", SPREAD]
        assert STUDY.stage("train").keys(cfg, SPREAD)[-1] == "spread"
        assert "runs.{unit}" not in STUDY.stage("train").keys(cfg, SPREAD)
    spread = _fake_spread([0.57, 0.90, 0.81], [0.95, 0.95, 0.93])
    ctx = Context(study="imprint", kind="render", unit=SPREAD, profile="smoke", cfg=cfg, device="cpu",
                  stage=f"imprint_render@{SPREAD}", provenance={},
                  reader=lambda *key: {("train", SPREAD, "spread.json"): spread}[key], own=lambda _n: None)
    (fig,) = figures.render_spread(ctx, SPREAD).figures
    assert fig.id == SPREAD and fig.sources == [("train", SPREAD)]
    assert fig.caption.startswith("SMOKE STAND-IN") and "57.0–90.0 %" in fig.caption
    assert "5.0 to 38.0 points" in fig.caption
    acc_ax = fig.mpl.axes[0]
    colors = [tuple(np.round(c.get_facecolor()[0][:3], 3)) for c in acc_ax.collections[1:]]
    assert colors == [tuple(np.round(matplotlib_rgb(figures.COLOR[o]), 3)) for o in figures.OPTS]
    assert "SMOKE STAND-IN" in fig.mpl._suptitle.get_text()


def matplotlib_rgb(color: str) -> tuple[float, float, float]:
    from matplotlib.colors import to_rgb

    return to_rgb(color)


def test_training_loop_can_skip_the_train_accuracy():
    from pipeline.studies.imprint.training import Data, train

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(300, 784, generator=g), torch.randint(0, 10, (300,), generator=g)
    hist = train(build_mlp(0, torch.float32), Data(x, y, x[:100], y[:100]), optimizer="adam", epochs=1, lr=1e-3,
                 momentum=0.95, ns_steps=5, ns_dtype=torch.float32, batch_size=128, test_batch_size=100, data_seed=1,
                 train_acc=False)
    assert np.isnan(hist.train_acc).all() and len(hist.test_acc) == 2 and 0 <= hist.test_acc[1] <= 1
