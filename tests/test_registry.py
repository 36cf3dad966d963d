"""params.yaml, the study modules and dvc.yaml agree: every unit has its stage, and vice versa."""

import shlex

import pytest
from dvc.repo import Repo

from pipeline.config import load_params
from pipeline.stage import KINDS, study_steps
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def stage_cmds() -> dict[str, list[str]]:
    repo = Repo(str(ROOT))
    try:
        return {s.addressing: shlex.split(s.cmd) for s in repo.index.stages if getattr(s, "cmd", None)}
    finally:
        repo.close()


def test_every_study_unit_has_exactly_one_stage(stage_cmds):
    params = load_params(ROOT / "params.yaml")
    expected = set()
    for study, cfg in params.studies.items():
        steps = study_steps(study)
        for kind in KINDS:
            for unit in steps.units(cfg, kind):
                expected.add((kind, study, unit))
    found = [tuple(cmd[2:5]) for cmd in stage_cmds.values()
             if cmd[:2] == ["python", "-m"] and cmd[2].removeprefix("stages.") in KINDS and len(cmd) == 5]
    found = [(k.removeprefix("stages."), s, u) for k, s, u in found]
    assert len(found) == len(set(found)), "a unit is reached by two stages"
    assert set(found) == expected


def test_download_stage_per_dataset(stage_cmds):
    params = load_params(ROOT / "params.yaml")
    for name in params.data.datasets:
        assert stage_cmds[f"download@{name}"] == ["python", "-m", "stages.download", name]
    assert stage_cmds["report"] == ["python", "-m", "stages.report"]
