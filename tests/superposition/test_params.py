"""Validation of the superposition params section."""

from __future__ import annotations

import copy

import pytest
import yaml

from pipeline.config import ConfigError, parse_params
from pipeline.studies.superposition.steps import units
from tests.conftest import ROOT

RAW = yaml.safe_load((ROOT / "params.yaml").read_text())


def parsed(mutate=None):
    raw = copy.deepcopy(RAW)
    if mutate:
        mutate(raw["superposition"])
    return parse_params(raw).study("superposition")


def test_repository_params_are_valid() -> None:
    cfg = parsed()
    assert cfg.lr_schedule == "constant" and cfg.device == "cpu" and cfg.lr == 5.0
    assert (cfg.f, cfg.n) == (50, 2)
    paper = cfg.active("paper").train
    assert paper.epochs == 50000 and paper.snapshot_every == 50 and 42 in paper.seeds
    assert units(cfg, "train") == ["untied", "tied"]
    assert units(cfg, "render") == ["untied", "tied", "summary"]
    assert units(cfg, "extract") == []


@pytest.mark.parametrize(("mutate", "needle"), [
    (lambda s: s.update(lr_schedule="literal"), "superposition.lr_schedule = 'literal'"),
    (lambda s: s.update(lr=0), "superposition.lr = 0"),
    (lambda s: s.update(device="tpu"), "superposition.device"),
    (lambda s: s.update(bogus=1), "superposition.bogus is not a known key"),
    (lambda s: s.pop("plateau"), "superposition.plateau is missing"),
    (lambda s: s["plateau"].update(tol=0.0), "superposition.plateau.tol = 0.0"),
    (lambda s: s["plateau"].update(window=1), "superposition.plateau.window = 1"),
    (lambda s: s["plateau"].update(min_drop=1.5), "superposition.plateau.min_drop"),
    (lambda s: s["variants"]["untied"].update(tied="no"), "superposition.variants.untied.tied"),
    (lambda s: s["variants"].update(wide={"tied": False}), "superposition.render_units"),
    (lambda s: s["profiles"]["smoke"]["train"].update(seeds=[1, 1]), "profiles.smoke.train.seeds"),
    (lambda s: s["profiles"]["smoke"]["train"].update(seeds=[]), "profiles.smoke.train.seeds"),
    (lambda s: s["profiles"]["smoke"]["train"].update(snapshot_every=300),
     "profiles.smoke.train.snapshot_every = 300"),
    (lambda s: s["profiles"]["paper"]["render"].update(figure_seeds=[99]), "render.figure_seeds = 99"),
    (lambda s: s["profiles"]["smoke"]["render"].update(panel_epochs=[0, 210]), "render.panel_epochs = 210"),
    (lambda s: s["profiles"]["smoke"]["render"].update(html_frames=500), "render.html_frames = 500"),
    (lambda s: s["profiles"]["smoke"]["render"].update(zoom_epochs=[500, 100]), "render.zoom_epochs"),
    (lambda s: s["profiles"].pop("gpu_medium"), "superposition.profiles.gpu_medium is missing"),
])
def test_bad_params_name_key_and_value(mutate, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        parsed(mutate)
    assert needle in str(err.value)
    assert "allowed" in str(err.value) or "missing" in str(err.value)
