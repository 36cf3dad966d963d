"""Params validation of the zero_init section: errors name the key path, the value, what is allowed."""

from __future__ import annotations

import copy

import pytest
import yaml

from pipeline.config import ConfigError, parse_params
from pipeline.paths import repo_root
from pipeline.studies.zero_init import steps


@pytest.fixture(scope="module")
def raw() -> dict:
    return yaml.safe_load((repo_root() / "params.yaml").read_text())


def edit(raw: dict, fn) -> dict:
    new = copy.deepcopy(raw)
    fn(new["zero_init"])
    return new


def test_repo_params_validate_and_units(raw):
    cfg = parse_params(raw).study("zero_init")
    assert steps.units(cfg, "train") == list(raw["zero_init"]["runs"])
    assert steps.units(cfg, "render") == list(raw["zero_init"]["figures"])
    assert steps.units(cfg, "extract") == ["summary"]
    smoke = steps.active_runs(cfg, "smoke")
    assert all(cfg.runs[k].n_h <= 1024 for k in smoke)  # no 2048 SVDs in smoke
    paper = steps.active_runs(cfg, "paper")
    assert "off_zero_2048" in paper and "seed_pi_2048" in paper and "off_zero_1024" not in paper
    assert steps.skip_reason(cfg, "paper", "off_zero_1024") is not None
    assert steps.skip_reason(cfg, "smoke", "seed_pi_256") is None


@pytest.mark.parametrize(("fn", "path", "hint"), [
    (lambda z: z.update(zero_scale="both"), "zero_init.zero_scale", "'code', 'paper'"),
    (lambda z: z["runs"]["seed_pi_256"].update(init="orthogonal"), "zero_init.runs.seed_pi_256.init", "'zero'"),
    (lambda z: z["runs"]["seed_pi_256"].update(setting="long"), "zero_init.runs.seed_pi_256.setting",
     "settings"),
    (lambda z: z["runs"]["seed_pi_256"].update(n_h=0), "zero_init.runs.seed_pi_256.n_h", "[1, 65536]"),
    (lambda z: z.update(rank_tol=0.0), "zero_init.rank_tol", "(0.0, 1.0]"),
    (lambda z: z["figures"]["fig3_left"]["runs"].update(smoke=["nope"]), "zero_init.figures.fig3_left.runs.smoke",
     "run keys"),
    (lambda z: z["figures"]["fig3_left"]["runs"].pop("paper"), "zero_init.figures.fig3_left.runs",
     "one run list per profile"),
    (lambda z: z["profiles"]["smoke"]["settings"].pop("official"), "zero_init.profiles.smoke.settings",
     "exactly the settings"),
    (lambda z: z["profiles"]["smoke"]["settings"]["seed"].update(log_interval=0),
     "zero_init.profiles.smoke.settings.seed.log_interval", "[1, None]"),
    (lambda z: z["style"]["titles"].pop("fig3_right"), "zero_init.style.titles", "fig3_right"),
    (lambda z: z.update(extra=1), "zero_init.extra", "allowed keys"),
])
def test_bad_values_name_key_value_and_allowed(raw, fn, path, hint):
    with pytest.raises(ConfigError) as err:
        parse_params(edit(raw, fn))
    msg = str(err.value)
    assert path in msg and hint in msg, msg
