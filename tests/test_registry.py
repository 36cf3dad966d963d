"""Discovery, and every profile of every declared study resolves through its schema."""

import pytest

from pipeline import registry
from pipeline.config import PROFILES, ConfigError, load_params
from pipeline.contract import KINDS
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
