"""The superposition section: every profile resolves through the schema; bad values name key and value."""

from __future__ import annotations

import copy

import pytest

from pipeline.config import PROFILES, ConfigError, load_section, read_tree
from pipeline.studies.superposition import STUDY
from pipeline.studies.superposition.config import Superposition
from tests.conftest import ROOT

RAW = read_tree(ROOT)


def resolved(profile: str, mutate=None) -> Superposition:
    raw = copy.deepcopy(RAW)
    if mutate:
        mutate(raw["superposition"])
    return load_section(Superposition, raw, "superposition", profile)


@pytest.mark.parametrize("profile", PROFILES)
def test_every_profile_resolves(profile: str) -> None:
    cfg = resolved(profile)
    assert cfg.lr_schedule == "constant" and cfg.device == "cpu" and cfg.lr == 5.0
    assert (cfg.f, cfg.n) == (50, 2)
    assert 42 in cfg.train.seeds and 42 in cfg.render.figure_seeds
    assert cfg.plateau.window == 1000 and cfg.plateau.drop_window == 3000
    for kind in ("train", "extract", "render"):
        units = STUDY.stage(kind).units(cfg)
        assert units == (["untied", "tied"] if kind == "train" else ["untied", "tied", "summary"])


def test_profile_values() -> None:
    smoke, medium, paper = (resolved(p) for p in ("smoke", "gpu_medium", "paper"))
    assert (smoke.train.epochs, smoke.train.snapshot_every, smoke.train.seeds) == (2000, 20, [0, 1, 2, 3, 42])
    assert (smoke.render.html_frames, smoke.render.zoom_epochs, smoke.render.figure_seeds) == (51, [200, 2000], [42])
    assert (medium.train.epochs, medium.train.snapshot_every, len(medium.train.seeds)) == (20000, 50, 9)
    assert medium.render.panel_epochs == [0, 1000, 5000, 8500, 12000, 20000]
    assert (medium.render.figure_seeds, medium.render.html_frames) == ([42, 3], 101)
    assert (paper.train.epochs, paper.train.snapshot_every, paper.train.seeds) == (50000, 50, [*range(32), 42])
    assert paper.render.panel_epochs == [0, 1000, 5000, 8500, 20000, 50000]
    assert paper.render.zoom_epochs == medium.render.zoom_epochs == [100, 3000]  # tied: no plateau detected


def test_declared_params_exist_and_track_the_profile() -> None:
    cfg = resolved("smoke")
    for stage in STUDY.stages:
        for unit in stage.units(cfg):
            for key in stage.keys(cfg, unit):
                node = cfg
                for part in key.split("."):
                    node = node[part] if isinstance(node, dict) else getattr(node, part)
    keys = STUDY.stage("render").keys(cfg, "summary")
    # the detector is extract@summary's: re-tuning it redraws no weights (train.* name the smoke stand-in)
    assert keys == ["render.zoom_epochs", "train.epochs", "train.seeds"]
    assert "plateau" in STUDY.stage("extract").keys(cfg, "summary")
    assert STUDY.stage("extract").reads(cfg, "summary") == [("train", "untied"), ("train", "tied")]
    assert ("extract", "summary") in STUDY.stage("render").reads(cfg, "summary")


def test_an_added_variant_is_a_unit_everywhere() -> None:
    cfg = resolved("smoke", lambda s: s["variants"].update(wide={"tied": False}))
    assert STUDY.stage("render").units(cfg) == ["untied", "tied", "wide", "summary"]


@pytest.mark.parametrize(("profile", "mutate", "needle"), [
    ("smoke", lambda s: s.update(lr_schedule="literal"), "superposition.lr_schedule = 'literal'"),
    ("smoke", lambda s: s.update(lr=0), "superposition.lr = 0"),
    ("smoke", lambda s: s.update(device="tpu"), "superposition.device"),
    ("smoke", lambda s: s.update(bogus=1), "superposition.bogus is not a known key"),
    ("smoke", lambda s: s.pop("plateau"), "superposition.plateau is missing"),
    ("smoke", lambda s: s["plateau"].update(tol=0.0), "superposition.plateau.tol = 0.0"),
    ("smoke", lambda s: s["plateau"].update(window=1), "superposition.plateau.window = 1"),
    ("smoke", lambda s: s["plateau"].update(min_drop=1.5), "superposition.plateau.min_drop"),
    ("smoke", lambda s: s["variants"]["untied"].update(tied="no"), "superposition.variants.untied.tied"),
    ("smoke", lambda s: s["variants"].update(summary={"tied": False}), "superposition.variants = 'summary'"),
    ("smoke", lambda s: s["profiles"]["smoke"]["train"].update(seeds=[1, 1]), "superposition.train.seeds"),
    ("smoke", lambda s: s["profiles"]["smoke"]["train"].update(seeds=[]), "superposition.train.seeds"),
    ("smoke", lambda s: s["profiles"]["smoke"]["train"].update(snapshot_every=300),
     "superposition.train.snapshot_every = 300"),
    ("paper", lambda s: s["render"].update(figure_seeds=[99]), "superposition.render.figure_seeds = 99"),
    ("gpu_medium", lambda s: s["profiles"]["gpu_medium"]["train"].update(epochs=1000),
     "superposition.render.panel_epochs = 5000"),  # an override checked against the base's panels
    ("smoke", lambda s: s["profiles"]["smoke"]["render"].update(panel_epochs=[0, 210]),
     "render.panel_epochs = 210"),
    ("smoke", lambda s: s["profiles"]["smoke"]["render"].update(html_frames=500), "render.html_frames = 500"),
    ("smoke", lambda s: s["profiles"]["smoke"]["render"].update(zoom_epochs=[500, 100]), "render.zoom_epochs"),
    ("smoke", lambda s: s["profiles"].update(papr={}), "superposition.profiles = 'papr'"),
])
def test_bad_params_name_key_and_value(profile: str, mutate, needle: str) -> None:
    resolved(profile)  # the committed section is valid for this profile
    with pytest.raises(ConfigError) as err:
        resolved(profile, mutate)
    assert needle in str(err.value), str(err.value)
    assert "allowed" in str(err.value) or "missing" in str(err.value)
