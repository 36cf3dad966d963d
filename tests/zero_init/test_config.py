"""Params of the zero_init section: every profile resolves; errors name the key path, the value, what is allowed."""

from __future__ import annotations

import copy

import pytest

from pipeline.config import ConfigError, load_section, read_tree
from pipeline.paths import repo_root
from pipeline.studies.zero_init import STUDY
from pipeline.studies.zero_init.config import Budget, StepLR, ZeroInitParams

SMOKE_RUNS = ["seed_pi_256", "seed_pi_1024", "seed_random_1024", "seed_zero_1024", "seed_one_1024",
              "seed_spray_1024", "off_pi_256", "off_pi_1024", "off_zero_1024"]


@pytest.fixture(scope="module")
def raw() -> dict:
    return read_tree(repo_root())


def resolved(raw: dict, profile: str) -> ZeroInitParams:
    return load_section(ZeroInitParams, raw, "zero_init", profile)


def units(cfg: ZeroInitParams, kind: str) -> list[str]:
    return list(STUDY.stage(kind).units(cfg))


def test_every_profile_resolves_with_its_units_and_budgets(raw):
    smoke, gpu, paper = (resolved(raw, p) for p in ("smoke", "gpu_medium", "paper"))
    # the train units are the runs the figures draw, in first-use order: nothing trains to be skipped
    assert units(smoke, "train") == SMOKE_RUNS
    assert all(smoke.runs[k].n_h <= 1024 for k in units(smoke, "train"))  # no 2048 SVDs in smoke
    for cfg in (gpu, paper):
        train = units(cfg, "train")
        assert "off_zero_2048" in train and "seed_pi_2048" in train and "off_zero_1024" not in train
        assert len(train) == 14 and train[:4] == ["seed_pi_256", "seed_pi_512", "seed_pi_1024", "seed_pi_2048"]
    for cfg in (smoke, gpu, paper):
        assert units(cfg, "render") == ["fig3_left", "fig3_right", "fig3_right_one_spray", "fig3_left_official",
                                        "fig3_right_official"]
        assert units(cfg, "extract") == ["summary"]
        assert len(cfg.runs) == 15 and cfg.settings["official"].bias is None and cfg.settings["seed"].bias == 0.01
    assert smoke.budgets == {"seed": Budget(1, 3840, 2000, None, 20), "official": Budget(2, 1600, 2000, None, 20)}
    for cfg in (smoke, gpu, paper):  # the notebooks' StepLR(12, 0.7): acts only on the official 20 epochs
        assert all(s.step_lr == StepLR(12, 0.7) for s in cfg.settings.values())
    assert gpu.budgets["seed"] == paper.budgets["seed"] == Budget(1, None, None, None, 50)
    assert (gpu.budgets["official"].epochs, paper.budgets["official"].epochs) == (3, 20)
    assert smoke.figures["fig3_right_official"].runs == ["off_pi_1024", "off_zero_1024"]
    assert paper.figures["fig3_right_official"].runs == ["off_random_2048", "off_pi_2048", "off_zero_2048"]
    assert smoke.style.profile_note.startswith("SMOKE STAND-IN")
    assert "3 epochs" in gpu.style.profile_note and "20 epochs" in paper.style.profile_note


def test_train_params_are_the_run_its_setting_and_the_shared_keys(raw):
    cfg = resolved(raw, "smoke")
    keys = STUDY.stage("train").keys(cfg, "off_pi_256")
    assert {"runs.off_pi_256", "settings.official.bias", "settings.official.step_lr", "budgets.official",
            "cpu_threads"} <= set(keys)
    assert not any(k.startswith(("figures", "style", "budgets.seed", "settings.seed")) for k in keys)
    render = STUDY.stage("render").keys(cfg, "fig3_right")
    assert {"figures.fig3_right", "runs.seed_zero_1024", "style.profile_note"} <= set(render)
    assert "runs.seed_pi_256" not in render and not any(k.startswith("budgets") for k in render)


@pytest.mark.parametrize(("fn", "path", "hint"), [
    (lambda z: z.update(zero_scale="both"), "zero_init.zero_scale = 'both'", "'code', 'paper'"),
    (lambda z: z["runs"]["seed_pi_256"].update(init="orthogonal"), "zero_init.runs.seed_pi_256.init", "'zero'"),
    (lambda z: z["runs"]["seed_pi_256"].update(setting="long"), "zero_init.runs.seed_pi_256.setting",
     "settings"),
    (lambda z: z["runs"]["seed_pi_256"].update(n_h=0), "zero_init.runs.seed_pi_256.n_h", "[1, 65536]"),
    (lambda z: z.update(rank_tol=0.0), "zero_init.rank_tol", "(0.0, 1.0]"),
    (lambda z: z["profiles"]["smoke"]["figures"]["fig3_left"].update(runs=["seed_pi_256", "nope"]),
     "zero_init.figures.fig3_left.runs[1] = 'nope'", "run keys"),
    (lambda z: z["figures"]["fig3_right"].update(runs=[]), "zero_init.figures.fig3_right.runs",
     "at least one run key"),
    (lambda z: z["settings"].update(long={"bias": 0.0, "label": "no budget"}), "zero_init.budgets",
     "exactly the settings ['long', 'official', 'seed']"),
    (lambda z: z["profiles"]["smoke"]["budgets"]["seed"].update(log_interval=0),
     "zero_init.budgets.seed.log_interval = 0", "[1, None]"),
    (lambda z: z["style"]["titles"].pop("fig3_right"), "zero_init.style.titles", "fig3_right"),
    (lambda z: z["profiles"]["smoke"]["style"].update(profile_note=3), "zero_init.style.profile_note = 3",
     "a string"),
    (lambda z: z["profiles"].update(papr={}), "zero_init.profiles = 'papr'", "'gpu_medium'"),
    (lambda z: z["settings"]["official"]["step_lr"].update(step_size=0),
     "zero_init.settings.official.step_lr.step_size = 0", "[1, 1000]"),
    (lambda z: z["settings"]["official"]["step_lr"].update(gamma=1.5),
     "zero_init.settings.official.step_lr.gamma = 1.5", "(0.0, 1.0]"),
    (lambda z: z["settings"]["official"]["step_lr"].update(gamma=0.0),
     "zero_init.settings.official.step_lr.gamma = 0.0", "(0.0, 1.0]"),
    (lambda z: z["settings"]["seed"].update(step_lr="yes"), "zero_init.settings.seed.step_lr = 'yes'",
     "a mapping with keys ['step_size', 'gamma']"),
    (lambda z: z["settings"]["seed"]["step_lr"].update(every=3), "zero_init.settings.seed.step_lr.every",
     "allowed keys"),
    (lambda z: z.update(extra=1), "zero_init.extra", "allowed keys"),
])
def test_bad_values_name_key_value_and_allowed(raw, fn, path, hint):
    resolved(raw, "smoke")  # the committed params are valid
    new = copy.deepcopy(raw)
    fn(new["zero_init"])
    with pytest.raises(ConfigError) as err:
        resolved(new, "smoke")
    msg = str(err.value)
    assert path in msg and hint in msg, msg
