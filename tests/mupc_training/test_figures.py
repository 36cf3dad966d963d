"""Each figure family's extract computes its headline numbers and its render draws its figures from synthetic
train units at the lrs the extract selected; headline numbers, the metrics the extract returns, the selection
rules and the errors are checked by content."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

# skips, rather than breaks, collection where plotly is absent (a bare GPU machine's `pytest -m gpu`): the
# project's plotting module draws the μPC figures with it
pytest.importorskip("plotly")

import plotly.graph_objects as go
from plotly.colors import sample_colorscale

from pipeline.config import load_section, read_tree
from pipeline.contract import Context
from pipeline.plotting import plt
from pipeline.studies.mupc.training import figures
from pipeline.studies.mupc.training import notebook_stats as ag
from pipeline.studies.mupc.training.config import TrainingParams
from pipeline.studies.mupc.training.extract import extract, extract_family
from pipeline.studies.mupc.training.families import FAMILIES, family
from pipeline.studies.mupc.training.figures import render, render_family
from pipeline.studies.mupc.training.headlines import transfer
from pipeline.studies.mupc.training.sweep_reader import RenderError, Sweeps, from_reader
from tests.conftest import ROOT
from tests.mupc_training.figures_synth import arrays_for, grids, reader, write_sweeps

SECTION = "mupc_training"


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweeps")
    g = grids()
    write_sweeps(root, g)
    return root, g


def raw_section() -> dict:
    return read_tree(ROOT)[SECTION]


def training_cfg(raw: dict | None = None, clean: bool = False) -> TrainingParams:
    """The repository's params (smoke); clean variants off unless asked (rendering is the cost)."""
    raw = copy.deepcopy(raw or raw_section())
    raw["figures"]["clean_variants"] = clean
    return load_section(TrainingParams, {SECTION: raw}, SECTION, "smoke")


def sweeps(g: dict, root) -> Sweeps:
    """The grids ``g`` (edited by some tests) with the arrays of the synthetic units under ``root``."""
    return Sweeps(expand=lambda s: g[s], load=from_reader(reader(root)).load)


def draw(family: str, synth, raw: dict | None = None, clean: bool = False, g: dict | None = None):
    """(figures, metrics) of ``family``: its extract, then its render at the lrs the extract selected."""
    root, grid = synth
    cfg, sw = training_cfg(raw, clean).figures, sweeps(g or grid, root)
    head = extract_family(cfg, "smoke", family, sw)
    return render_family(cfg, family, sw, head.get("selected_lrs", {})), head


def panels(fig: go.Figure) -> dict[str, list]:
    """The traces of each visible subplot, by x axis ("x", "x2", …)."""
    out: dict[str, list] = {}
    for t in fig.data:
        out.setdefault(t.xaxis or "x", []).append(t)
    return out


def curves(traces) -> list:
    """The mean lines (not the filled bands, not the contour marks) among ``traces``."""
    return [t for t in traces if t.type == "scatter" and t.fill is None and t.mode != "text"]


def drawn(traces) -> list[np.ndarray]:
    """The y data of every mean line with at least one point."""
    return [np.asarray(t.y, dtype=float) for t in curves(traces) if t.y is not None and len(t.y)]


def axis(fig: go.Figure, anchor: str, xy: str = "x"):
    """The layout axis a trace's ``xaxis``/``yaxis`` anchor ("x2") names."""
    return fig.layout[f"{xy}axis{anchor[1:]}"]


def subplot_titles(fig: go.Figure) -> list[str]:
    return [a.text for a in fig.layout.annotations if a.yanchor == "bottom" and a.text]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_draws_its_figures(family, synth):
    clean = family in ("F7", "F18", "F23")
    figs, head = draw(family, synth, clean=clean)
    assert figs, family
    assert len({f.id for f in figs}) == len(figs)
    for f in figs:
        assert f.family == family and f.id.startswith(family) and f.seed_figure and f.caption
        assert f.sources and {s for _, s in f.sources} <= set(FAMILIES[family].reads())
        assert all(kind == "train" for kind, _ in f.sources)
        fig = f.plotly
        assert isinstance(fig, go.Figure) and f.mpl is None and not fig.frames  # kaleido writes its PNG/PDF
        assert fig.layout.title.text and fig.layout.width and fig.layout.height
        for anchor, traces in panels(fig).items():
            assert axis(fig, anchor).title.text and axis(fig, "y" + anchor[1:], "y").title.text, (f.id, anchor)
            if family in ("F23", "F24", "F25", "F28"):  # contours: each panel has one with finite cells
                (z,) = [np.asarray(t.z, dtype=float) for t in traces if t.type in ("contour", "heatmap")]
                assert np.isfinite(z).any(), (f.id, anchor)
            else:  # curves: every panel draws at least one series with finite values
                ys = drawn(traces)
                assert ys and any(np.isfinite(y).any() for y in ys), (f.id, anchor)
    assert any("clean" in f.id for f in figs) == (clean and family != "F22")
    assert head["family"] == family and head["profile"] == "smoke" and head["selection"] == "computed"


@pytest.mark.parametrize("family,ids", [
    ("F7", ["F7_sp_gd_lr_sweep_fashion_mnist", "F7_sp_gd_lr_sweep_mnist"]),
    ("F9", ["F9_sp_adam_best_mnist", "F9_sp_adam_lr_sweep_mnist"]),
    ("F16", ["F16_mupc_deep_mnist"]),
    ("F19", ["F19_deep_mupc_vs_pc_vs_bp"]),
    ("F21", ["F21_bp_lr_sweep_fashion_mnist_2ep", "F21_bp_lr_sweep_mnist_1ep", "F21_bp_lr_sweep_mnist_2ep"]),
    ("F22", ["F22_activity_decay_mnist"]),
])
def test_figure_ids_and_panels(family, ids, synth):
    figs, _ = draw(family, synth)
    assert sorted(f.id for f in figs) == ids
    if family == "F7":  # rows = acts, columns = H of the synthetic S1 grid; one band per activity lr
        fig = next(f.plotly for f in figs if f.id.endswith("_mnist") and "fashion" not in f.id)
        assert len(panels(fig)) == 3 * 2
        assert set(subplot_titles(fig)) == {f"{a}, H={h}" for a in ("linear", "tanh", "relu") for h in (2, 4)}
        assert all(len(drawn(t)) == 2 for t in panels(fig).values())
    if family == "F19":  # BP, PC (chance), μPC per dataset
        (fig,) = [f.plotly for f in figs]
        assert len(panels(fig)) == 2 and all(len(drawn(t)) == 3 for t in panels(fig).values())
        assert all(np.allclose(drawn(t)[1], 10.0) for t in panels(fig).values())


def test_activity_decay_headline_matches_hand_computation(synth):
    _, g = synth
    _, head = draw("F22", synth)
    for d in (0.1, 0.0):
        runs = [rc for rc in g["S5"] if rc.activity_decay == d]
        maxes = [max(arrays_for(rc)[0]["test_accs"]) for rc in sorted(runs, key=lambda r: r.seed)]
        key = "0.1" if d == 0.1 else "0"
        assert head["max_test_acc_per_decay"]["act_lr=0.5"][key] == pytest.approx(sum(maxes) / len(maxes))
        # the same cells keyed by coordinates, as the activity-decay claim reads them
        assert head["max_test_acc_by_decay"][f"act_lr=0.5/decay={key}"] == head["max_test_acc_per_decay"][
            "act_lr=0.5"][key]


def test_best_lr_is_computed_from_final_accuracy(synth):
    _, g = synth
    _, head = draw("F8", synth)
    sel = head["selected_lrs"]["mnist/relu/H=4"]
    cell = [rc for rc in g["S1"] if rc.dataset == "mnist" and rc.act == "relu" and rc.H == 4]
    score = {lr: ag.final_acc_score([arrays_for(rc)[0]["test_accs"] for rc in cell if rc.act_lr == lr])
             for lr in (0.5, 0.05)}
    assert sel["act_lr"] == max(score, key=score.get) and sel["rule"] == "computed"
    assert sel["table"] is None  # the notebook table has no H = 4


def test_sp_sweep_records_its_pick_against_the_notebook_table(synth):
    """F7's headline: per cell the activity lr with the best final accuracy, the table's value and how many
    grid steps apart they are (None where table 5.3 has no value for the cell)."""
    _, g = synth
    raw = raw_section()
    raw["figures"]["best_lrs"]["S1"]["mnist"]["relu"][4] = 0.05
    _, head = draw("F7", synth, raw=raw)
    cell = [rc for rc in g["S1"] if rc.dataset == "mnist" and rc.act == "relu" and rc.H == 4]
    score = {lr: ag.final_acc_score([arrays_for(rc)[0]["test_accs"] for rc in cell if rc.act_lr == lr])
             for lr in (0.5, 0.05)}
    rec = head["best_act_lr"]["mnist/relu/H=4"]
    assert rec["computed"] == max(score, key=score.get) and rec["table"] == 0.05 and rec["grid"] == [0.05, 0.5]
    assert rec["steps"] == (0 if rec["computed"] == 0.05 else 1)
    assert rec["final_acc"] == {"0.05": pytest.approx(score[0.05]), "0.5": pytest.approx(score[0.5])}
    assert head["best_act_lr"]["mnist/relu/H=2"]["steps"] is None  # no table value at H = 2
    assert len(head["best_act_lr"]) == len({(rc.dataset, rc.act, rc.H) for rc in g["S1"]})


def test_mupc_lr_sweep_records_the_final_accuracy_of_every_activity_lr(synth):
    """F13's headline: at the selected param lr, the final mean accuracy per activity lr and cell."""
    _, g = synth
    _, head = draw("F13", synth)
    p_lr = head["selected_lrs"]["S6/mnist/tanh (all H)"]["param_lr"]
    rec = head["final_acc_per_act_lr"]["mnist/tanh/H=4"]
    assert set(rec) == {"1", "0.1"}
    runs = [rc for rc in g["S6"] if rc.act == "tanh" and rc.H == 4 and rc.param_lr == p_lr and rc.act_lr == 0.1]
    series = [arrays_for(rc)[0]["test_accs"] for rc in sorted(runs, key=lambda r: r.seed)]
    n = min(len(x) for x in series)
    assert rec["0.1"] == pytest.approx(float(np.mean([x[n - 1] for x in series])))


def test_contour_optimum_recorded(synth):
    _, head = draw("F24", synth)
    opt = head["contour_optimum"]
    assert set(opt) >= {f"notebook/{a}/loss/H={h}" for a in ("linear", "tanh", "relu") for h in (2, 4, 8)}
    assert all(v is None or set(v) == {"act_lr", "param_lr"} for v in opt.values())


def test_contour_grid_and_best_values_recorded(synth):
    """F25: the swept grid and, at each optimum, the mean over seeds of the metric (max test acc for the
    accuracy rows), computed by hand from the synthetic runs."""
    _, g = synth
    _, head = draw("F25", synth)
    runs = g["S8"]
    assert head["contour_grid"] == {"dataset": "fashion_mnist", "N": [16], "H": sorted({rc.H for rc in runs}),
                                    "act_lr": sorted({rc.act_lr for rc in runs}),
                                    "param_lr": sorted({rc.param_lr for rc in runs})}
    for act in ("linear", "tanh", "relu"):
        opt = head["contour_optimum"][f"notebook/{act}/acc"]
        cell = [rc for rc in runs if rc.act == act and rc.act_lr == opt["act_lr"] and rc.param_lr == opt["param_lr"]]
        want = np.mean([max(arrays_for(rc)[0]["test_accs"]) for rc in cell])
        assert head["contour_best"][f"notebook/{act}/acc"] == pytest.approx(want)
        every = [np.mean([max(arrays_for(rc)[0]["test_accs"]) for rc in runs if rc.act == act and
                          rc.act_lr == a and rc.param_lr == p]) for a in head["contour_grid"]["act_lr"]
                 for p in head["contour_grid"]["param_lr"]]
        assert want == pytest.approx(max(every))


def test_table_selection_fails_clearly_on_smoke_grid(synth):
    raw = raw_section()
    raw["profiles"]["smoke"]["figures"]["selection"] = "table"
    with pytest.raises(RenderError, match="not in the S1 grid|no table lr"):
        draw("F8", synth, raw)


def test_missing_sp_cell_names_chance_cells(synth):
    _, g = synth
    g2 = dict(g)
    g2["S12"] = [rc for rc in g["S12"] if not (rc.act == "relu" and rc.H == 8)]
    with pytest.raises(RenderError, match="chance_cells"):  # F18: μPC has H=8, the SP baseline not
        draw("F18", synth, g=g2)
    raw = raw_section()
    raw["profiles"]["smoke"]["figures"]["chance_cells"] = {"relu": [8]}
    _, head = draw("F20", synth, raw, g=g2)
    assert head["final_acc"]["relu/H=8"]["mean_test_accs"] == [10.0, 10.0, 10.0]


@pytest.mark.parametrize("family", ["F18", "F20"])
def test_the_notebook_fill_is_marked_not_measured(family, synth):
    """Trained SP cells publish ``pc_measured``; the notebook's 10 % fill (a params choice) is listed under
    ``pc_not_measured`` and named in the caption, and ``pc_measured`` is absent, so the claims on the PC
    cells read as not measured rather than checking the fill."""
    figs, head = draw(family, synth)
    assert head["pc_measured"] is True and head["pc_not_measured"] == []
    assert all("every SP cell trained and measured" in f.caption for f in figs)
    raw = raw_section()
    raw["profiles"]["smoke"]["figures"]["chance_cells"] = {"relu": [8]}
    figs, head = draw(family, synth, raw)
    assert "pc_measured" not in head and head["pc_not_measured"] == ["relu/H=8"]
    assert all("NOT MEASURED" in f.caption and "'relu': [8]" in f.caption for f in figs)
    cell = head["final_acc"]["relu/H=8"]
    assert (cell["pc_lrs"] if family == "F18" else cell["lrs"]).startswith("not measured")


def test_f19_labels_pc_as_not_measured(synth):
    figs, head = draw("F19", synth)
    assert all("NOT MEASURED" in f.caption for f in figs)
    assert all(set(v) == {"BP", "PC (not measured: 10 % fill)", "μPC"} for v in head["final_acc"].values())
    labels = [t.name for t in figs[0].plotly.data if t.showlegend is not False]
    assert "PC (not measured: 10 % fill)" in labels
    note = figs[0].plotly.layout.annotations[-1]  # the project's note, below the plot and grey
    assert note.text.startswith("trainscape: PC is NOT MEASURED") and note.yanchor == "top" and note.y == 0


def test_run_missing_on_disk_is_an_error(synth):
    _, g = synth
    g2 = dict(g)
    g2["S10"] = [g["S10"][0].__class__(**{**g["S10"][0].as_params(), "seed": 7})]
    with pytest.raises(RenderError, match="missing"):
        draw("F16", synth, g=g2)


def test_headline_of_the_comparison(synth):
    _, head = draw("F18", synth)
    rec = head["final_acc"]["relu/H=8"]
    assert set(rec) >= {"mupc", "pc", "bp"}


def test_transfer_reshapes_the_verdict_optima():
    """Per activation: the optima across N, the distinct pairs, how many grid steps they span on each lr axis
    and how far they sit from the notebook's lrs."""
    head = {"contour_grid": {"act_lr": [0.1, 0.5, 1.0], "param_lr": [0.01, 0.1]},
            "notebook_lrs": {"relu": {"act_lr": 0.5, "param_lr": 0.1}, "tanh": {"act_lr": 2.0, "param_lr": 0.1}},
            "transfer_optimum": {
                "relu/N=8": {"act_lr": 0.1, "param_lr": 0.1},
                "relu/N=16": {"act_lr": 1.0, "param_lr": 0.1},
                "relu/N=32": {"act_lr": 1.0, "param_lr": 0.1},
                "tanh/N=8": {"act_lr": 1.0, "param_lr": 0.01},
                "linear/N=8": None}}
    out = transfer(head)
    assert set(out) == {"relu", "tanh"}
    relu = out["relu"]
    assert relu["optima"] == {"N=8": {"act_lr": 0.1, "param_lr": 0.1}, "N=16": {"act_lr": 1.0, "param_lr": 0.1},
                              "N=32": {"act_lr": 1.0, "param_lr": 0.1}}
    assert relu["distinct"] == [[1.0, 0.1], [0.1, 0.1]]  # sorted keys: N=16 first
    assert relu["span"] == {"act_lr": 2, "param_lr": 0}
    assert relu["from_notebook"] == {"act_lr": 1, "param_lr": 0}
    assert out["tanh"]["span"] == {"act_lr": 0, "param_lr": 0}
    assert out["tanh"]["from_notebook"] == {"act_lr": None, "param_lr": 1}  # 2.0 is off the grid


def _ctx(root, kind: str, family: str, extracted: dict | None = None) -> Context:
    read = reader(root)

    def both(k: str, unit: str, name: str):
        if k == "extract":
            assert (unit, name) == (family, "headline.json") and extracted is not None
            return json.loads(json.dumps(extracted))
        return read(k, unit, name)

    return Context(study=SECTION, kind=kind, unit=family, profile="smoke", cfg=training_cfg(), device="cpu",
                   stage=f"{SECTION}_{kind}@{family}", provenance={}, reader=both, own=lambda _n: None,
                   log=lambda _m: None)


@pytest.mark.parametrize("family,key", [("F23", "transfer_width"), ("F22", None),
                                        ("F15", "mupc_best_final_acc_per_H")])
def test_extract_and_render_entries(family, key, synth):
    """``extract(ctx, unit)``: run lists from each sweep's index.json, arrays through the reader, the headline
    as metrics and as headline.json; ``render(ctx, unit)`` draws at the lrs of that headline.json and
    publishes no metrics."""
    root, _ = synth
    out = extract(_ctx(root, "extract", family), family)
    figs, head = draw(family, synth)
    assert json.dumps(out.metrics, sort_keys=True) == json.dumps(head, sort_keys=True)
    assert out.json == {"headline.json": out.metrics}
    drawn = render(_ctx(root, "render", family, out.metrics), family)
    assert [f.id for f in drawn.figures] == [f.id for f in figs] and drawn.metrics is None
    own = {k for k in head if k not in ("family", "profile", "selection")}
    derived = FAMILIES[family].derived
    if key is None:
        assert derived is None
    else:
        assert derived[0] == key and key in own and head[key]
        want = transfer(head) if key.startswith("transfer") else head["best_final_acc"]
        assert head[key] == want


def test_the_render_draws_the_extracts_lrs(synth):
    """The render takes the lrs its extract selected, and refuses a record that is missing or off the grid."""
    root, grid = synth
    cfg, sw = training_cfg().figures, sweeps(grid, root)
    head = extract_family(cfg, "smoke", "F16", sw)
    sel = head["selected_lrs"]
    assert render_family(cfg, "F16", sw, sel)
    with pytest.raises(RenderError, match="selected no lrs"):
        render_family(cfg, "F16", sw, {})
    off = {k: {**v, "act_lr": 123.0} for k, v in sel.items()}
    with pytest.raises(RenderError, match="not in the S10 grid"):
        render_family(cfg, "F16", sw, off)


def test_a_one_point_curve_is_drawn_as_a_marker():
    """A run stopped at its first evaluation has one point: a line style alone would draw nothing. Each curve is
    the notebook's band (filled, opacity 0.3, invisible outline, no legend) under its mean line."""
    from pipeline.studies.mupc.training.plotly_panels import Panels, band

    p = Panels(1, 1)
    band(p, 1, 1, np.array([8]), np.array([12.0]), np.array([0.0]), "black", "BP", marker=False)
    band(p, 1, 1, np.array([8, 16]), np.array([12.0, 14.0]), np.array([1.0, 2.0]), "red", "μPC", marker=False)
    fill1, one, fill2, two = p.done().data
    assert one.mode == "lines+markers" and list(one.y) == [12.0]
    assert two.mode == "lines"  # a real line keeps its style
    assert fill2.fill == "toself" and fill2.opacity == 0.3 and fill2.showlegend is False
    assert list(fill2.y) == [13.0, 16.0, 12.0, 11.0] and fill2.line.color == "rgba(255,255,255,0)"


def test_a_new_figure_is_one_table_entry_plus_the_function_that_draws_it(monkeypatch, synth):
    """F99 (final accuracy per activity lr of S1) added as its entry in families.py, its headlines function and its
    drawing function: the study extracts and renders it, dvc.yaml lists its extract stage with S1 as its only
    data dep and its render stage with S1 and its extract."""
    from pipeline import graph, registry
    from pipeline.config import load_params
    from pipeline.contract import Figure
    from pipeline.studies.mupc.training import headlines

    def finals(env, sweep: str) -> tuple[list[float], list[float]]:
        runs = figures.sweep_runs(env, sweep)
        lrs = figures.values(runs, "act_lr")
        return lrs, [float(np.mean([a[-1] for a in figures.accs(env, sweep, figures.pick(runs, act_lr=lr))]))
                     for lr in lrs]

    def final_acc_per_lr(env, sweep: str) -> None:
        lrs, accs = finals(env, sweep)
        env.headline["final_acc_per_act_lr"] = dict(zip(map(str, lrs), accs))

    def draw_final_acc_per_lr(env, sweep: str) -> list[Figure]:
        fig = go.Figure(go.Scatter(x=finals(env, sweep)[0], y=finals(env, sweep)[1], mode="lines+markers"))
        return [figures.finish(env, fig, "F99_final_acc", "final accuracy per activity lr", "none", [sweep], False)]

    monkeypatch.setitem(FAMILIES, "F99", family("final_acc_per_lr", {"sweep": "S1"}))
    monkeypatch.setattr(figures, "final_acc_per_lr", draw_final_acc_per_lr, raising=False)
    monkeypatch.setattr(headlines, "final_acc_per_lr", final_acc_per_lr, raising=False)

    figs, head = draw("F99", synth)
    assert [f.id for f in figs] == ["F99_final_acc"] and figs[0].sources == [("train", "S1")]
    assert len(head["final_acc_per_act_lr"]) == len(figures.values(synth[1]["S1"], "act_lr")) > 1
    stages = graph.stages(load_params())
    extract_stage, stage = stages["mupc_training_extract@F99"], stages["mupc_training_render@F99"]
    assert [d for d in extract_stage["deps"] if d.startswith("artifacts/")] == ["artifacts/mupc_training/train/S1"]
    assert sorted(d for d in stage["deps"] if d.startswith("artifacts/")) == [
        "artifacts/mupc_training/extract/F99", "artifacts/mupc_training/train/S1"]
    assert stage["cmd"] == "python -m stages.render mupc_training F99 --profile smoke"
    study = registry.load(SECTION)
    for kind in ("extract", "render"):
        assert "F99" in study.stage(kind).units(registry.config(study, load_params()))


def test_f28_draws_standard_pc_over_the_lr_grid(synth):
    """F28, the project's addition: one panel per activation (at the sweep's one H), a Greens contour of log10 of
    the verdict final accuracy over (activity lr, weight lr) on log axes, F25's helpers; its seed figure names
    none and its caption and grey note say it is the project's. The extract's cells are each seed's final
    accuracy (a run without evaluations is chance) and their best."""
    _, g = synth
    figs, head = draw("F28", synth)
    (f,) = figs
    assert f.id == "F28_pc_any_lr_mnist" and f.seed_figure.startswith("none") and f.sources == [("train", "S13")]
    assert f.caption.startswith("Project addition (no notebook figure)")
    fig = f.plotly
    assert fig.layout.annotations[-1].text.startswith("trainscape: the project's addition")
    acts = ["linear", "tanh", "relu"]
    assert subplot_titles(fig) == [f"{a}, H=8" for a in acts]
    conts = [t for t in fig.data if t.type == "contour"]
    assert len(conts) == len(panels(fig)) == 3
    for act, t in zip(acts, conts, strict=True):
        assert t.colorscale == go.Contour(colorscale="Greens").colorscale and t.contours.coloring == "heatmap"
        assert t.colorbar.title.text == "Test accuracy (%)"
        assert (t.zauto, t.zmin, t.zmax) == (False, 0.0, 2.0)  # one colour range, 1–100 %, for every panel
        assert list(t.colorbar.ticktext) == ["1", "10", "20", "50", "100"]
        x, y = axis(fig, t.xaxis), axis(fig, t.yaxis, "y")
        assert (x.type, y.type) == ("log", "log") and (x.title.text, y.title.text) == ("Activity lr", "Weight lr")
        assert list(t.x) == [0.1, 1.0] and list(t.y) == [0.01, 0.1]
        want = {}
        for rc in (r for r in g["S13"] if r.act == act):
            want[f"p={rc.param_lr:g}/a={rc.act_lr:g}"] = ag.seed_final(arrays_for(rc)[0]["test_accs"])
        cells = head["final_acc_per_lr"][f"mnist/{act}/H=8"]
        assert cells == pytest.approx(want) and cells["p=0.1/a=1"] == 10.0  # diverged before its first test
        z = 10 ** np.asarray(t.z, dtype=float)  # [param lr asc, act lr asc]
        assert z == pytest.approx(np.array([[want["p=0.01/a=0.1"], want["p=0.01/a=1"]],
                                            [want["p=0.1/a=0.1"], want["p=0.1/a=1"]]]))
        assert head["best_final_acc"][f"mnist/{act}/H=8"] == pytest.approx(max(want.values()))
        best = head["best_lrs"][f"mnist/{act}/H=8"]
        assert cells[f"p={best['param_lr']:g}/a={best['act_lr']:g}"] == max(cells.values())
    stars = [t for t in fig.data if t.type == "scatter" and t.marker.symbol == "star"]
    assert [(s.x[0], s.y[0]) for s in stars] == [(head["best_lrs"][f"mnist/{a}/H=8"]["act_lr"],
                                                  head["best_lrs"][f"mnist/{a}/H=8"]["param_lr"]) for a in acts]


# ----------------------------------------------------------------------------- the notebook's drawing, by content


def lines_by_panel(fig: go.Figure) -> dict[str, list]:
    return {a: curves(t) for a, t in panels(fig).items()}


def test_f7_draws_the_notebooks_lr_sweep(synth):
    """plot_metric_per_iv(iv_id="activity_lr"): Oranges, sample_colorscale(n + 2)[2:], band + lines+markers of
    width 2, linear axes, three x ticks (t+1)·test_every at the first, middle and last evaluation."""
    figs, _ = draw("F7", synth)
    fig = next(f.plotly for f in figs if f.id == "F7_sp_gd_lr_sweep_mnist")
    assert [t.type for t in fig.data] == ["scatter"] * len(fig.data)
    for anchor, traces in panels(fig).items():
        bands = [t for t in traces if t.fill == "toself"]
        lines = curves(traces)
        assert len(bands) == len(lines) == 2
        assert [t.line.color for t in lines] == sample_colorscale("Oranges", 4)[2:]
        assert all(t.mode == "lines+markers" and t.line.width == 2 for t in lines)
        assert [t.name for t in lines] == ["η=5e-1", "η=5e-2"]
        assert all(b.opacity == 0.3 and b.hoverinfo == "skip" for b in bands)
        x = axis(fig, anchor)
        assert x.type in (None, "linear", "-") and x.title.text == "Training iteration"
        n = len(lines[0].x)
        assert list(x.tickvals) == sorted({float(lines[0].x[0]), float(lines[0].x[int((n - 1) / 2)]),
                                           float(lines[0].x[-1])})
    assert fig.layout.title.text == "MNIST: SP PC (sp_gd), test accuracy per activity lr"


def test_f12_draws_kappa_in_viridis(synth):
    """κ curves: sample_colorscale("Viridis", n) (no skip), the notebook's linear y axis, ticks at t·test_every."""
    figs, _ = draw("F12", synth)
    (fig,) = [f.plotly for f in figs]
    for anchor, lines in lines_by_panel(fig).items():
        assert [t.line.color for t in lines] == sample_colorscale("Viridis", len(lines))
        assert axis(fig, "y" + anchor[1:], "y").type in (None, "linear", "-")
        assert axis(fig, anchor).tickvals[0] == 0.0  # row 0 is the initialisation
    assert subplot_titles(fig) == ["linear", "tanh", "relu"]


@pytest.mark.parametrize("family,scale", [("F14", "Reds"), ("F15", "Blues")])
def test_f14_f15_colour_by_width_and_depth(family, scale, synth):
    figs, _ = draw(family, synth)
    for f in figs:
        for lines in lines_by_panel(f.plotly).values():
            assert [t.line.color for t in lines] == sample_colorscale(scale, len(lines) + 2)[2:]


def test_f18_draws_paper_figure_1(synth):
    """plot_mupc_vs_pc_vs_bp_accs: μPC Blues (n + 2)[1:] solid, PC Reds (n + 2)[2:] dashed, BP black dashed width 3
    without markers at the deepest H, the y ticks of the activation."""
    figs, _ = draw("F18", synth)
    fig = figs[0].plotly
    (lines,) = lines_by_panel(fig).values()
    mu = [t for t in lines if t.name.startswith("μPC")]
    pc = [t for t in lines if t.name.startswith("PC")]
    bp = [t for t in lines if t.name.startswith("BP")]
    n = len(mu)
    assert [t.line.color for t in mu] == sample_colorscale("Blues", n + 2)[1:][:n]
    assert [t.line.color for t in pc] == sample_colorscale("Reds", n + 2)[2:]
    assert all(t.line.dash is None and t.mode == "lines+markers" for t in mu)
    assert all(t.line.dash == "dash" for t in pc)
    (b,) = bp
    assert b.line.color == "black" and b.line.dash == "dash" and b.line.width == 3 and b.mode == "lines"
    assert list(fig.layout.yaxis.tickvals) == [10, 50, 90]  # relu
    assert [t.type for t in fig.data] == ["scatter"] * len(fig.data) and len(fig.data) == 2 * (2 * n + 1)


def test_f19_draws_the_128_layer_comparison(synth):
    figs, _ = draw("F19", synth)
    fig = figs[0].plotly
    for lines in lines_by_panel(fig).values():
        bp, pc, mu = lines
        assert (bp.line.color, bp.mode, bp.line.width) == ("#222A2A", "lines", 2)
        assert (pc.line.color, pc.mode, pc.line.dash, pc.line.width) == ("#EF553B", "lines", "dash", 3)
        assert (mu.line.color, mu.mode) == ("#636EFA", "markers")
    assert list(fig.layout.yaxis.tickvals) == [10, 55, 100] and list(fig.layout.yaxis2.tickvals) == [10, 50, 90]


def test_f22_draws_accuracy_per_activity_decay(synth):
    """plot_accs_per_activity_decay: one colour, x = the decays' index with their values as tick text, no legend."""
    figs, _ = draw("F22", synth)
    fig = figs[0].plotly
    assert fig.layout.showlegend is False
    for anchor, lines in lines_by_panel(fig).items():
        (line,) = lines
        assert line.line.color == "#636EFA" and list(line.x) == [0.0, 1.0]
        x = axis(fig, anchor)
        assert list(x.tickvals) == [0, 1] and list(x.ticktext) == ["0.1", "0"] and x.title.text == "Activity decay"


@pytest.mark.parametrize("family,rows", [("F24", [("RdBu_r", "Training loss")]),
                                         ("F25", [("RdBu_r", "Training loss"), ("Greens", "Test accuracy (%)")])])
def test_contours_draw_the_notebooks_phase_diagrams(family, rows, synth):
    """plot_learning_rates_contour: go.Contour of log10 values, heatmap colouring, RdBu_r (loss) / Greens (acc),
    the colour bar titled on the right with six 10^e ticks from floor(min) to ceil(max), log axes (nticks 5 and
    2, power exponents); the optimum star and the note below the plot are the project's."""
    figs, head = draw(family, synth)
    fig = figs[0].plotly
    conts = [t for t in fig.data if t.type == "contour"]
    acts = ["linear", "tanh", "relu"]
    n_iv = 3 if family == "F24" else 1
    assert len(conts) == len(acts) * len(rows) * n_iv
    for k, t in enumerate(conts):
        scale, title = rows[k // len(acts)] if family == "F25" else rows[0]  # F25: loss row, then accuracy
        assert t.colorscale == go.Contour(colorscale=scale).colorscale and t.contours.coloring == "heatmap"
        assert t.colorbar.title.text == title and t.colorbar.title.side == "right"
        z = np.asarray(t.z, dtype=float)
        finite = z[np.isfinite(z)]
        want = np.linspace(np.floor(finite.min()), np.ceil(finite.max()), 6)
        assert np.allclose(t.colorbar.tickvals, want) and t.colorbar.ticktext[0] == f"10<sup>{want[0]:.1f}</sup>"
        x, y = axis(fig, t.xaxis), axis(fig, t.yaxis, "y")
        assert (x.type, x.nticks, x.exponentformat) == ("log", 5, "power")
        assert (y.type, y.nticks, y.exponentformat) == ("log", 2, "power")
        assert list(t.x) == sorted(t.x) and list(t.y) == sorted(t.y)
    stars = [t for t in fig.data if t.type == "scatter" and t.marker.symbol == "star"]
    assert stars and all(t.name == "optimum" for t in stars)
    for t in stars:  # plotly.js culls a marker outside its axes' range: a corner optimum must stay inside
        x, y = axis(fig, t.xaxis), axis(fig, t.yaxis, "y")
        for v, ax in ((t.x[0], x), (t.y[0], y)):
            lv = np.log(v) / np.log(10)  # as JavaScript computes it (0.1 -> -0.9999999999999998)
            assert ax.range[0] < lv < ax.range[1], (v, ax.range)
    assert fig.layout.annotations[-1].text.startswith("trainscape:") and fig.layout.plot_bgcolor == "white"
    if family == "F25":  # the star sits where the extract's optimum is
        opt = head["contour_optimum"]["notebook/linear/acc"]
        (star,) = [t for t in stars if t.xaxis == "x4"]  # row 2 (accuracy), column 1 (linear)
        assert (star.x[0], star.y[0]) == (opt["act_lr"], opt["param_lr"])


def test_f25_lays_out_loss_and_accuracy_rows_by_activation_columns(synth):
    """The notebook's F-MNIST transfer figure: a loss row (RdBu_r) over an accuracy row (Greens), one column per
    activation in its order; the legend of the project's marks sits above the plot, clear of the colour bars."""
    figs, _ = draw("F25", synth)
    fig = figs[0].plotly
    acts = ["linear", "tanh", "relu"]
    assert subplot_titles(fig) == [f"{a} ({m})" for m in ("loss", "acc") for a in acts]
    conts = [t for t in fig.data if t.type == "contour"]
    cols = sorted({tuple(axis(fig, t.xaxis).domain) for t in conts})
    rows = sorted({tuple(axis(fig, t.yaxis, "y").domain) for t in conts}, reverse=True)  # top row first
    assert len(cols) == 3 and len(rows) == 2
    for t in conts:
        r = rows.index(tuple(axis(fig, t.yaxis, "y").domain))
        want = ("RdBu_r", "Training loss") if r == 0 else ("Greens", "Test accuracy (%)")
        assert t.colorscale == go.Contour(colorscale=want[0]).colorscale and t.colorbar.title.text == want[1]
    assert fig.layout.width > fig.layout.height  # a 2 x 3 grid, not one column of six
    legend = fig.layout.legend
    assert (legend.orientation, legend.yref, legend.yanchor) == ("h", "container", "top")
    assert legend.y > 0.9 and legend.xanchor == "right"  # in the title band, above every colour bar


def test_f23_f24_keep_activation_rows_by_grid_columns(synth):
    figs, _ = draw("F24", synth)
    fig = figs[0].plotly
    assert subplot_titles(fig) == [f"{a}, H={h} (loss)" for a in ("linear", "tanh", "relu") for h in (2, 4, 8)]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_activations_run_in_the_notebooks_order(family, synth):
    """act_fns = ["linear", "tanh", "relu"] in every training figure: the activations named in the panel titles
    appear in that order."""
    figs, _ = draw(family, synth)
    for f in figs:
        named = [a for t in subplot_titles(f.plotly) for a in ("linear", "tanh", "relu") if t.startswith(a)]
        order = list(dict.fromkeys(named))
        assert order == [a for a in ("linear", "tanh", "relu") if a in order], (f.id, order)
