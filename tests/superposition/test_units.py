"""train -> extract -> render of the superposition study on a tiny config, through their Context only."""

from __future__ import annotations

import dataclasses
import importlib
import json

import numpy as np
import pytest
import torch

# skips, rather than breaks, collection where plotly is absent (a bare GPU machine's `pytest -m gpu`): the
# study draws its heat maps and slider with it
pytest.importorskip("plotly")

import plotly.colors as pcolors

from pipeline.config import load_section, read_tree
from pipeline.contract import Context, Output
from pipeline.plotting import plt
from pipeline.studies.superposition import STUDY, figure_table
from pipeline.studies.superposition.config import Plateau, Superposition, TrainSettings
from pipeline.studies.superposition.extract import detect_all, variant_losses
from pipeline.studies.superposition.figures import (
    frame_indices,
    geometry_panels,
    heatmap_panels,
    loss_curves,
    seed_colors,
    slider_html,
    zoom_window,
)
from pipeline.writer.figures import exports_plotly_images, kaleido_static
from tests.conftest import ROOT
from tests.superposition.test_plateau import KW, step_curve

EPOCHS = 400
PLATEAU = Plateau(**KW)


@pytest.fixture(scope="module")
def cfg() -> Superposition:
    raw = read_tree(ROOT)
    smoke = load_section(Superposition, raw, "superposition", "smoke")
    return dataclasses.replace(smoke, train=TrainSettings(epochs=EPOCHS, snapshot_every=20, seeds=[3, 42]),
                               render=dataclasses.replace(smoke.render, panel_epochs=[0, 200, 400],
                                                          zoom_epochs=[100, 400], html_frames=6))


def context(cfg: Superposition, kind: str, unit: str, store: dict) -> Context:
    def read(k: str, u: str, name: str):
        obj = store[(k, u)][name]
        return json.loads(json.dumps(obj)) if name.endswith(".json") else obj  # as written and read back

    return Context(study="superposition", kind=kind, unit=unit, profile="smoke", cfg=cfg, device="cpu",
                   stage=f"superposition_{kind}@{unit}", provenance={}, reader=read, own=lambda _n: None,
                   log=lambda _m: None)


def run(cfg: Superposition, kind: str, unit: str, store: dict) -> Output:
    family = STUDY.stage(kind)
    fn = getattr(importlib.import_module(family.entry), family.function(cfg, unit))  # as the runner picks it
    out = fn(context(cfg, kind, unit, store), unit)
    store[(kind, unit)] = {**out.json, **out.arrays}
    return out


@pytest.fixture(scope="module")
def units(cfg: Superposition) -> dict:
    old = torch.get_num_threads()
    store: dict = {}
    outs = {(k, u): run(cfg, k, u, store) for k, u in [("train", "untied"), ("train", "tied"),
                                                         ("extract", "untied"), ("extract", "tied"),
                                                         ("extract", "summary")]}
    torch.set_num_threads(old)
    return {"store": store, "outs": outs}


def test_train_returns_history_summary_and_one_run_per_seed(units: dict) -> None:
    out = units["outs"][("train", "untied")]
    h = out.arrays["history.npz"]
    assert h["losses"].shape == (EPOCHS, 2) and h["seeds"].tolist() == [3, 42]
    assert h["w_e"].shape == (EPOCHS // 20 + 1, 2, 2, 50) and h["snap_epochs"][-1] == EPOCHS
    assert abs(float(h["losses"][0, 1]) - 0.0204067) <= 1e-7  # the seed's epoch-1 loss of seed 42
    s = out.json["summary.json"]
    assert s["final_loss"]["42"] == float(h["losses"][-1, 1]) and s["tied"] is False
    assert [r.name for r in out.runs] == ["untied-seed3", "untied-seed42"]
    run = out.runs[1]
    steps, values = run.series["loss"]
    assert steps[0] == 1 and steps[-1] == EPOCHS and len(steps) == EPOCHS // 20 + 1
    assert values[0] == pytest.approx(0.0204067, abs=1e-7) and run.failed is None
    assert run.params["seed"] == 42 and run.params["tied"] is False and run.metrics["final_loss"] < 0.0204
    assert "train_seconds" in out.run_metrics
    tied = units["outs"][("train", "tied")].arrays["history.npz"]
    np.testing.assert_array_equal(tied["w_u"], np.transpose(tied["w_e"], (0, 1, 3, 2)))


def test_extract_variant_metrics(units: dict) -> None:
    out = units["outs"][("extract", "untied")]
    m = out.metrics
    losses = units["store"][("train", "untied")]["history.npz"]["losses"]
    assert m == out.json["losses.json"]
    assert m["variant"] == "untied" and m["tied"] is False and m["epochs"] == EPOCHS
    assert m["loss_epoch1"]["42"] == float(losses[0, 1]) and m["final_loss"]["3"] == float(losses[-1, 0])
    assert m["final_loss_min"] == float(losses[-1].min()) <= m["final_loss_median"]
    assert units["outs"][("extract", "tied")].metrics["tied"] is True
    t = out.tables["runs.csv"]  # one row per seed: settings, status, final numbers
    assert list(t["seed"]) == [3, 42] and set(t["status"]) == {"finished"} and set(t["variant"]) == {"untied"}
    assert list(t["final_loss"]) == [m["final_loss"]["3"], m["final_loss"]["42"]]
    assert {"tied", "epochs", "lr", "represented_features", "directions", "loss_epoch1"} <= set(t.columns)


def test_extract_summary_metrics(units: dict, cfg: Superposition) -> None:
    out = units["outs"][("extract", "summary")]
    m = out.metrics
    assert m == out.json["plateaus.json"]
    assert (m["profile"], m["epochs"], m["lr_schedule"]) == ("smoke", EPOCHS, "constant")
    assert m["detector"] == dataclasses.asdict(cfg.plateau)
    for v in ("untied", "tied"):
        r = m["variants"][v]
        assert set(r["seeds"]) == {"3", "42"} and r["plateau_seeds"] == []  # 400 epochs < the 1000-epoch window
        assert "train_seconds" not in r and "train_seconds" not in units["store"][("train", v)]["summary.json"]
        assert out.run_metrics[f"{v}_plateau_seeds"] == 0
    t = out.tables["runs.csv"]  # one row per variant and seed
    assert len(t) == 2 * 2 and list(t["variant"]) == ["untied", "untied", "tied", "tied"]
    assert list(t["plateau"]) == [False] * 4 and set(t["status"]) == {"finished"}


def test_detect_all_flattens_the_first_plateau() -> None:
    losses = np.stack([step_curve(), 0.018 + 0.002 * np.exp(-np.arange(20000) / 2000)], axis=1)
    got = detect_all(PLATEAU, losses, [7, 8])
    assert got["7"]["plateau"] is True and len(got["7"]["plateaus"]) == 1
    first = got["7"]["plateaus"][0]
    assert got["7"]["plateau_start_epoch"] == first["start_epoch"] and got["7"]["plateau_loss"] == first["loss"]
    assert got["7"]["plateau_drop_epoch"] == first["drop_epoch"] > got["7"]["plateau_end_epoch"]
    assert got["8"] == {"final_loss": float(losses[-1, 1]), "plateau": False, "plateau_loss": None,
                        "plateau_start_epoch": None, "plateau_end_epoch": None, "plateau_drop_epoch": None,
                        "plateaus": []}


def test_variant_losses_tiny() -> None:
    losses = np.array([[0.3, 0.2, 0.1], [0.25, 0.15, 0.05]])
    m = variant_losses("x", True, [5, 6, 7], losses)
    assert m["epochs"] == 2 and m["final_loss"] == {"5": 0.25, "6": 0.15, "7": 0.05}
    assert m["loss_epoch1"]["6"] == 0.2 and m["final_loss_min"] == 0.05 and m["final_loss_median"] == 0.15


def test_frame_indices() -> None:
    assert frame_indices(5, 10).tolist() == [0, 1, 2, 3, 4]
    idx = frame_indices(1001, 101)
    assert len(idx) == 101 and idx[0] == 0 and idx[-1] == 1000


def test_render_variant_figures(units: dict, cfg: Superposition) -> None:
    out = run(cfg, "render", "untied", units["store"])
    ids = [f.id for f in out.figures]
    assert ids == ["untied_seed42_geometry", "untied_seed42_heatmaps", "untied_seed42_slider"]
    geo, heat, slider = out.figures
    assert all(f.sources == [("train", "untied")] for f in out.figures)
    # the panels get kaleido's PNG and PDF; the slider is interactive HTML alone
    assert [kaleido_static(f) for f in out.figures] == [True, True, False]
    assert geo.mpl is None and heat.mpl is None and slider.mpl is None
    g = geo.plotly
    assert len(g.data) == 2 * 3
    for t in g.data:
        assert t.mode == "markers+text" and len(t.x) == 50 and np.isfinite(np.asarray(t.x, dtype=float)).all()
    assert [a.text for a in g.layout.annotations] == ["epoch 0", "epoch 200", "epoch 400"] * 2
    assert g.layout.yaxis.title.text == "W_E: hidden 1" and g.layout.yaxis4.title.text == "W_U: hidden 1"
    assert g.data[0].marker.color == "#000000"  # the seed's colour of the loss curves (42: black)
    hm = heat.plotly
    assert len(hm.data) == 2 * 3 and all(t.type == "heatmap" and np.isfinite(t.z).all() for t in hm.data)
    assert [a.text for a in hm.layout.annotations][:3] == ["epoch 0", "epoch 200", "epoch 400"]
    assert "seed 42" in hm.layout.title.text
    assert hm.layout.yaxis.title.text.startswith("W_U·W_E") and hm.layout.yaxis4.title.text.startswith("ReLU")
    assert heat.seed_figure == "visualize_matrices_with_slider (static frames)"
    for f in (geo, heat):  # the smoke profile labels its stand-ins in the title and the caption
        assert f.caption.startswith("SMOKE STAND-IN: 400 epochs, 2 seeds")
    assert "SMOKE STAND-IN" in g.layout.title.text and "SMOKE STAND-IN" in hm.layout.title.text
    assert geo.seed_figure == "plot_weights_interactive (static frames)"
    table = figure_table(cfg)  # the variants' entries say they draw kaleido's images, as they do (above)
    assert table["untied"].plotly_images and table["tied"].plotly_images and not table["summary"].plotly_images
    assert exports_plotly_images("superposition", "untied") and not exports_plotly_images("superposition", "summary")
    frames = len(frame_indices(EPOCHS // 20 + 1, cfg.render.html_frames))
    assert len(slider.plotly.data) == 4 * frames and len(slider.plotly.layout.sliders[0].steps) == frames
    assert "over 6 of the 21 snapshots" in slider.caption and "(6 of 21 snapshots)" in slider.plotly.layout.title.text
    tied = run(cfg, "render", "tied", units["store"]).figures
    assert "both rows agree" in tied[0].caption and [f.id for f in tied][0] == "tied_seed42_geometry"
    plt.close("all")


def test_render_summary_loss_curves(units: dict, cfg: Superposition) -> None:
    (fig,) = run(cfg, "render", "summary", units["store"]).figures
    assert fig.id == "loss_curves" and fig.plotly is None and not figure_table(cfg)["summary"].plotly_images
    assert fig.sources == [("train", "untied"), ("train", "tied"), ("extract", "summary")]
    axes = fig.mpl.axes
    assert len(axes) == 4  # 2 rows (full, zoom) x 2 variants
    for ax in axes:
        assert len(ax.lines) == 2  # one curve per seed, no plateau overlays
        for line in ax.lines:
            y = line.get_ydata()
            assert len(y) == EPOCHS and np.isfinite(y).all()
    assert axes[0].get_title() == "untied: 2 seeds, 0 with a plateau" and axes[0].get_xscale() == "log"
    assert axes[2].get_title() == "zoom (no plateau detected): epochs 100–400" and axes[2].get_xlim() == (100, 400)
    assert axes[2].get_yscale() == "linear" and axes[0].get_yscale() == "log"
    assert fig.caption.startswith("SMOKE STAND-IN") and "SMOKE STAND-IN" in fig.mpl._suptitle.get_text()
    assert_text_at_least_9pt(fig.mpl)
    plt.close("all")


def assert_text_at_least_9pt(fig) -> None:
    """Every title, label, tick label, legend entry and annotation is at least 9 pt (figures are saved at
    their size: the framework never shrinks them)."""
    fig.canvas.draw()
    texts = [t for t in fig.findobj(lambda a: hasattr(a, "get_fontsize") and hasattr(a, "get_text"))
             if t.get_text() and t.get_visible()]
    small = [(t.get_text(), t.get_fontsize()) for t in texts if t.get_fontsize() < 9]
    assert texts and not small, small


def test_seed_colors_are_distinct_and_the_same_in_every_figure() -> None:
    seeds = [*range(32), 42]
    colors = seed_colors(seeds)
    assert colors[42] == "black"
    rgb = [tuple(np.round(colors[s], 4)) for s in range(32)]
    assert len(set(rgb)) == 32, "no two seeds share a colour"
    assert seed_colors(list(reversed(seeds))) == colors


def test_zoom_window_is_the_longest_plateau_with_its_drop() -> None:
    losses = np.stack([step_curve(), step_curve()], axis=1)
    detected = {"3": {"plateaus": [{"start_epoch": 100, "end_epoch": 300, "drop_epoch": 350, "length": 201}]},
                "5": {"plateaus": [{"start_epoch": 1000, "end_epoch": 1800, "drop_epoch": 1900, "length": 801}]}}
    assert zoom_window(losses, [3, 5], detected, [10, 20]) == (5, 600, 2300)
    none = {"3": {"plateaus": []}, "5": {"plateaus": []}}
    assert zoom_window(losses, [3, 5], none, [10, 20]) == (None, 10, 20)


def test_loss_curves_draw_plateaus() -> None:
    losses = np.stack([step_curve(), 0.018 + 0.002 * np.exp(-np.arange(20000) / 2000)], axis=1)
    detected = detect_all(PLATEAU, losses, [3, 42])
    fig = loss_curves({"untied": ([3, 42], losses)}, {"untied": detected}, [2000, 20000])
    top = fig.axes[0]
    assert len(top.lines) == 2 + 2  # two curves, the plateau overlay and its drop dot
    assert top.get_title() == "untied: 2 seeds, 1 with a plateau"
    assert [t.get_text() for t in top.get_legend().get_texts()] == ["seed 3", "seed 42"]
    plt.close(fig)


def test_panels_and_slider_on_random_weights() -> None:
    rng = np.random.default_rng(0)
    w_e, w_u = rng.normal(size=(3, 2, 50)), rng.normal(size=(3, 50, 2))
    ep = np.array([0, 10, 20])
    geo = geometry_panels(w_e, w_u, ep, [0, 20], "t")
    assert len(geo.data) == 4 and geo.layout.xaxis.range[1] == pytest.approx(1.1 * np.abs(w_e).max())
    heat = heatmap_panels(w_e, w_u, ep, [10], "t")
    assert len(heat.data) == 2
    m = np.matmul(w_u, w_e)
    assert heat.data[0].zmin == pytest.approx(m.min()) and heat.data[0].zmax == pytest.approx(m.max())
    fig = slider_html(w_e, w_u, ep, 2, "t")
    assert len(fig.data) == 4 * 2 and [s.label for s in fig.layout.sliders[0].steps] == ["0", "20"]
    plt.close("all")


def test_geometry_panels_draw_the_notebooks_labelled_points() -> None:
    """plot_weights_interactive at the panel epochs: one markers+text scatter per (weight, epoch), every feature
    labelled with its index above its point, marker size 8; W_E's columns and W_U's rows; each row's axes
    ±1.1·max|w| over all snapshots on both axes, so the panels are square."""
    rng = np.random.default_rng(2)
    w_e, w_u = rng.normal(size=(3, 2, 50)), 3 * rng.normal(size=(3, 50, 2))
    ep = np.array([0, 10, 20])
    fig = geometry_panels(w_e, w_u, ep, [0, 20], "lbl", "black")
    assert [t.name for t in fig.data] == ["W_E, epoch 0", "W_E, epoch 20", "W_U, epoch 0", "W_U, epoch 20"]
    for t, (pts, snap) in zip(fig.data, [(np.transpose(w_e, (0, 2, 1)), 0), (np.transpose(w_e, (0, 2, 1)), 2),
                                         (w_u, 0), (w_u, 2)], strict=True):
        assert (t.type, t.mode, t.textposition, t.marker.size) == ("scatter", "markers+text", "top center", 8)
        assert list(t.text) == [str(i) for i in range(50)] and t.textfont.size >= 9
        np.testing.assert_allclose(t.x, pts[snap][:, 0], atol=1e-5)
        np.testing.assert_allclose(t.y, pts[snap][:, 1], atol=1e-5)
        x, y = fig.layout[f"xaxis{t.xaxis[1:]}"], fig.layout[f"yaxis{t.yaxis[1:]}"]
        lim = 1.1 * np.abs(pts).max()
        assert list(x.range) == pytest.approx([-lim, lim]) and list(y.range) == pytest.approx([-lim, lim])
    assert fig.layout.width - 130 == pytest.approx(2 * 300 + 70) and not fig.frames and not fig.layout.sliders


def test_a_slider_figure_is_interactive_html_alone(tmp_path, monkeypatch) -> None:
    """static_plotly's rule: a figure driven by a slider gets no PNG/PDF (an image would show its first step);
    the still steps are the panel epochs of the geometry and heat-map figures."""
    from pipeline import plotting
    from pipeline.contract import Figure
    from pipeline.writer.figures import save_figure

    monkeypatch.setattr(plotting, "plotly_image", lambda *_a, **_k: (_ for _ in ()).throw(AssertionError("kaleido")))
    rng = np.random.default_rng(0)
    fig = slider_html(rng.normal(size=(3, 2, 50)), rng.normal(size=(3, 50, 2)), np.array([0, 10, 20]), 3, "t")
    assert fig.layout.sliders and not fig.frames and not plotting.static_plotly(fig)
    assert [p.name for p in save_figure(Figure("s", "c", "none", plotly=fig), tmp_path)] == ["s.html"]


def test_heatmap_panels_draw_as_the_notebook() -> None:
    """The notebook's ``go.Heatmap(z=matrix[::-1], colorscale='magma', zmin/zmax global)``: one panel per matrix
    kind and epoch, one colour range and one colour bar per row, output feature 0 at the top as in the slider."""
    rng = np.random.default_rng(1)
    w_e, w_u = rng.normal(size=(4, 2, 50)), rng.normal(size=(4, 50, 2))
    ep = np.array([0, 10, 20, 30])
    fig = heatmap_panels(w_e, w_u, ep, [0, 20, 30], "lbl")
    m = np.matmul(w_u, w_e)
    r = np.maximum(m, 0)
    assert len(fig.data) == 2 * 3 and {t.type for t in fig.data} == {"heatmap"}
    magma = pcolors.get_colorscale("magma")
    for row, (a, name) in enumerate(((m, "W_U·W_E"), (r, "ReLU(W_U·W_E)"))):
        traces = fig.data[3 * row : 3 * row + 3]
        for t, snap in zip(traces, (0, 2, 3), strict=True):
            assert [c for _, c in t.colorscale] == [c for _, c in magma]
            assert [v for v, _ in t.colorscale] == pytest.approx([v for v, _ in magma])
            # one range per matrix kind, the global min/max over all snapshots (const_colorbar=True)
            assert t.zmin == pytest.approx(a.min(), rel=1e-6) and t.zmax == pytest.approx(a.max(), rel=1e-6)
            # stored as the notebook stores it (rows reversed), each row at its feature index
            np.testing.assert_allclose(np.asarray(t.z), a[snap][::-1], rtol=1e-6, atol=1e-6)
            assert list(t.y) == list(range(49, -1, -1))
            assert t.name.startswith(name)
        assert [t.showscale for t in traces] == [False, False, True]  # one colour bar per row
        sub = fig.get_subplot(row + 1, 1)
        assert sub.yaxis.autorange == "reversed"  # feature 0 at the top, as the notebook and the slider
        bar = traces[-1].colorbar
        assert sub.yaxis.domain[0] < bar.y < sub.yaxis.domain[1]
        assert bar.len == pytest.approx(sub.yaxis.domain[1] - sub.yaxis.domain[0])
    assert [a.text for a in fig.layout.annotations] == ["epoch 0", "epoch 20", "epoch 30"] * 2
    assert fig.data[3].zmin == pytest.approx(0.0) and fig.data[0].zmin < 0
    assert fig.layout.title.text == "lbl: W_U·W_E (top) and ReLU(W_U·W_E) (bottom)"
    assert fig.layout.xaxis4.title.text == "input feature" and fig.layout.xaxis.title.text is None
    assert not fig.frames  # a static figure: kaleido writes its PNG and PDF
