"""Discovery, and every profile of every declared study resolves through its schema."""

import importlib

import pytest

from pipeline import registry
from pipeline.config import PROFILES, ConfigError, load_params
from pipeline.contract import KINDS, FigureEntry, Stage
from tests.conftest import ROOT

STUDIES = registry.names()


def test_studies_are_discovered_from_their_folders():
    mods = registry.modules()
    assert {"imprint", "zero_init", "superposition", "mupc_analysis", "mupc_training"} <= set(mods)
    assert mods["mupc_analysis"] == "pipeline.studies.mupc.analysis"
    for name in STUDIES:
        study = registry.load(name)
        assert study.name == name
        assert [f.kind for f in study.stages] == [k for k in KINDS if study.stage(k)], "families in flow order"


def test_unknown_study_is_a_clear_error():
    with pytest.raises(ConfigError, match=r"study 'nope' is not declared; known studies: \['imprint'"):
        registry.load("nope")


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("name", STUDIES)
def test_every_profile_of_every_study_resolves(name, profile):
    params = load_params(ROOT)
    study = registry.load(name)
    cfg = registry.config(study, params, profile)
    assert isinstance(cfg, study.schema)
    for stage in study.stages:
        units = list(stage.units(cfg))
        assert len(units) == len(set(units)), f"{name}_{stage.kind}: duplicate units"
        for unit in units:
            stage.keys(cfg, unit)
            for kind, other in stage.reads(cfg, unit):
                upstream = study.stage(kind)
                assert upstream is not None and other in upstream.units(cfg), (
                    f"{name}_{stage.kind}@{unit} reads {kind}@{other}, which profile {profile} does not run")


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("name", STUDIES)
def test_every_render_unit_is_an_entry_of_its_studys_figure_table(name, profile):
    """One figure mechanism: each study's render units, their params and deps, and the function computing each
    are its figure table's entries; the functions an entry names exist in the render module."""
    study = registry.load(name)
    cfg = registry.config(study, load_params(ROOT), profile)
    render = study.stage("render")
    table = render.figure_table(cfg)
    assert render.units(cfg) == list(table)
    module = importlib.import_module(render.entry)
    for unit, entry in table.items():
        assert isinstance(entry, FigureEntry)
        assert render.function(cfg, unit) == entry.function
        assert callable(getattr(module, entry.function)) and callable(getattr(module, entry.draw)), unit
        assert list(render.reads(cfg, unit)) == entry.deps(unit)
        keys = render.keys(cfg, unit)
        assert keys[len(keys) - len(entry.keys):] == [k.replace("{unit}", unit) for k in entry.keys]


def test_a_render_stage_is_declared_by_a_figure_table_and_only_a_render_stage():
    def table(cfg):
        return {"fits": FigureEntry("render", {"lines": ("a", "b")}, ("slopes",), extract=True)}

    stage = Stage("render", entry="x.figures", figure_table=table, params=("style",))
    assert stage.units(None) == ["fits"]
    assert stage.keys(None, "fits") == ["style", "slopes"]
    assert list(stage.reads(None, "fits")) == [("train", "a"), ("train", "b"), ("extract", "fits")]
    assert stage.function(None, "fits") == "render"
    with pytest.raises(TypeError, match="render stage"):
        Stage("render", entry="x.figures", units=lambda cfg: ["fits"])
    with pytest.raises(TypeError, match="render stage"):
        Stage("train", entry="x.train", figure_table=table)
