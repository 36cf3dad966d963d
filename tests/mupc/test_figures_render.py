"""Each figure family renders its files from synthetic run folders; params errors are clear."""

from __future__ import annotations

import copy

import pytest
import yaml

from pipeline.config import ConfigError, parse_params
from pipeline.io import read_json
from pipeline.studies.mupc.figures import aggregate as ag
from pipeline.studies.mupc.figures.render import RENDERERS
from pipeline.studies.mupc.figures.source import RenderError, from_folders
from pipeline.studies.mupc.figures.steps import render_family
from tests.conftest import ROOT
from tests.mupc.figures_synth import arrays_for, grids, write_sweeps


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweeps")
    g = grids()
    write_sweeps(root, g)
    return root, g


def raw_params() -> dict:
    return yaml.safe_load((ROOT / "params.yaml").read_text())


def figures_cfg(raw: dict | None = None, clean: bool = False):
    """The repository's figures params; clean variants off unless asked (rendering is the cost)."""
    raw = copy.deepcopy(raw or raw_params())
    raw["mupc"]["figures"]["clean_variants"] = clean
    return parse_params(raw).study("mupc").figures


@pytest.mark.parametrize("family", sorted(RENDERERS, key=lambda f: int(f[1:])))
def test_family_renders_files(family, synth, tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINSCAPE_DPI", "40")
    root, g = synth
    cfg = figures_cfg(clean=family in ("F7", "F18", "F23"))
    figs, head = render_family(cfg, "smoke", family, from_folders(g, root), tmp_path / family)
    assert figs, family
    for f in figs:
        assert f.family == family
        assert all(p.exists() and p.stat().st_size > 0 for p in f.files)
        assert {p.suffix for p in f.files} == {".png", ".pdf"}
        assert f.seed_figure and f.sources
    assert (tmp_path / family / "headline.json").exists()
    if cfg.clean_variants:
        assert any("clean" in f.id for f in figs)
    assert head["selection"] == "computed"


def test_activity_decay_headline_matches_hand_computation(synth, tmp_path):
    root, g = synth
    _, head = render_family(figures_cfg(), "smoke", "F22", from_folders(g, root), tmp_path / "F22")
    for d in (0.1, 0.0):
        runs = [rc for rc in g["S5"] if rc.activity_decay == d]
        maxes = [max(arrays_for(rc)[0]["test_accs"]) for rc in sorted(runs, key=lambda r: r.seed)]
        key = "0.1" if d == 0.1 else "0"
        assert head["max_test_acc_per_decay"]["act_lr=0.5"][key] == pytest.approx(sum(maxes) / len(maxes))


def test_best_lr_is_computed_from_final_accuracy(synth, tmp_path):
    root, g = synth
    _, head = render_family(figures_cfg(), "smoke", "F8", from_folders(g, root), tmp_path / "F8")
    sel = head["selected_lrs"]["mnist/relu/H=4"]
    cell = [rc for rc in g["S1"] if rc.dataset == "mnist" and rc.act == "relu" and rc.H == 4]
    score = {lr: ag.final_acc_score([arrays_for(rc)[0]["test_accs"] for rc in cell if rc.act_lr == lr])
             for lr in (0.5, 0.05)}
    assert sel["act_lr"] == max(score, key=score.get) and sel["rule"] == "computed"
    assert sel["table"] is None  # the notebook table has no H = 4


def test_contour_optimum_recorded(synth, tmp_path):
    root, g = synth
    _, head = render_family(figures_cfg(), "smoke", "F24", from_folders(g, root), tmp_path / "F24")
    opt = head["contour_optimum"]
    assert set(opt) >= {f"notebook/{a}/loss/H={h}" for a in ("linear", "tanh", "relu") for h in (2, 4, 8)}
    assert all(v is None or set(v) == {"act_lr", "param_lr"} for v in opt.values())


def test_table_selection_fails_clearly_on_smoke_grid(synth, tmp_path):
    root, g = synth
    raw = raw_params()
    raw["mupc"]["figures"]["profiles"]["smoke"]["selection"] = "table"
    with pytest.raises(RenderError, match="not in the S1 grid|no table lr"):
        render_family(figures_cfg(raw), "smoke", "F8", from_folders(g, root), tmp_path / "x")


def test_missing_sp_cell_names_chance_cells(synth, tmp_path):
    root, g = synth
    g2 = dict(g)
    g2["S12"] = [rc for rc in g["S12"] if not (rc.act == "relu" and rc.H == 8)]
    with pytest.raises(RenderError, match="chance_cells"):  # F18: μPC has H=8, the SP baseline not
        render_family(figures_cfg(), "smoke", "F18", from_folders(g2, root), tmp_path / "x")
    raw = raw_params()
    raw["mupc"]["figures"]["profiles"]["smoke"]["chance_cells"] = {"relu": [8]}
    _, head = render_family(figures_cfg(raw), "smoke", "F20", from_folders(g2, root), tmp_path / "y")
    assert head["final_acc"]["relu/H=8"]["mean_test_accs"] == [10.0, 10.0, 10.0]


def test_run_missing_on_disk_is_an_error(synth, tmp_path):
    root, g = synth
    g2 = dict(g)
    g2["S10"] = [g["S10"][0].__class__(**{**g["S10"][0].as_params(), "seed": 7})]
    with pytest.raises(RenderError, match="missing"):
        render_family(figures_cfg(), "smoke", "F16", from_folders(g2, root), tmp_path / "x")


@pytest.mark.parametrize("path,value,match", [
    (("families", "F7", "sweeps"), ["S1", "S1"], "exactly 3"),
    (("families", "F7", "sweeps"), ["S2", "S2", "S2"], "reads exactly"),
    (("families", "F30"), {"sweeps": ["S1", "S1", "S1"]}, "F30"),
    (("families", "F18", "acts"), ["gelu"], "gelu"),
    (("profiles", "paper", "selection"), "best", "best"),
    (("best_lrs", "S12", "relu", 8), [0.1], "param lr, activity lr"),
    (("chance",), 120.0, "120"),
    (("profiles", "smoke", "chance_cells"), {"swish": [8]}, "swish"),
])
def test_params_validation_errors(path, value, match):
    raw = copy.deepcopy(raw_params())
    node = raw["mupc"]["figures"]
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    with pytest.raises(ConfigError, match=match):
        figures_cfg(raw)


def test_headline_json_is_valid(synth, tmp_path):
    root, g = synth
    render_family(figures_cfg(), "smoke", "F18", from_folders(g, root), tmp_path / "F18")
    head = read_json(tmp_path / "F18" / "headline.json")
    rec = head["final_acc"]["relu/H=8"]
    assert set(rec) >= {"mupc", "pc", "bp"}
