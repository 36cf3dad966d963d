"""The runner's cheap paths: device without torch, one git call, progress lines, timings."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from pipeline import stage
from pipeline.paths import repo_root
from pipeline.provenance import git_state


def test_git_state_is_the_head_commit_and_dirty_flag_of_one_call():
    git_state.cache_clear()
    commit, dirty = git_state()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo_root(), capture_output=True, text=True,
                          check=True).stdout.strip()
    changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                              ":(exclude)dvc.lock", ":(exclude,glob)graph/**/dvc.lock"], cwd=repo_root(),
                             capture_output=True, text=True, check=True).stdout.strip()
    assert commit == head and dirty == bool(changed)


def test_lock_files_rewritten_by_dvc_do_not_make_the_workspace_dirty(tmp_path, monkeypatch):
    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True)

    for name in ("dvc.lock", "graph/s/k/u/dvc.lock", "graph/s/k/u/dvc.yaml", "code.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("a\n")
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "c")
    monkeypatch.setenv("TRAINSCAPE_ROOT", str(tmp_path))
    for name, dirty in (("dvc.lock", False), ("graph/s/k/u/dvc.lock", False), ("graph/s/k/u/dvc.yaml", True),
                        ("code.py", True)):
        git("checkout", "-q", "--", ".")
        (tmp_path / name).write_text("b\n")
        git_state.cache_clear()
        assert git_state()[1] is dirty, name
    git_state.cache_clear()


def test_progress_without_a_terminal_is_one_line_per_update(monkeypatch):
    monkeypatch.delenv("TRAINSCAPE_PROGRESS", raising=False)
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    bar = stage._progress("s_train@u")
    assert list(bar(range(4), total=4, desc="epochs", unit="epoch")) == [0, 1, 2, 3]
    lines = err.getvalue().splitlines()
    assert "\r" not in err.getvalue() and lines[0].startswith("[s_train@u] epochs:   0%")
    assert "4/4" in lines[-1] and "epoch/s" in lines[-1]


@pytest.mark.parametrize("value", ["off", "0"])
def test_progress_off_is_silent(monkeypatch, value):
    monkeypatch.setenv("TRAINSCAPE_PROGRESS", value)
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    assert list(stage._progress("s")(iter("ab"), total=2)) == ["a", "b"] and err.getvalue() == ""


def test_timings_record_is_appended_only_when_asked(monkeypatch, tmp_path):
    monkeypatch.delenv("TRAINSCAPE_TIMINGS", raising=False)
    stage._record_timing({"stage": "x"})
    path = tmp_path / "t.jsonl"
    monkeypatch.setenv("TRAINSCAPE_TIMINGS", str(path))
    stage._record_timing({"stage": "x", "study_seconds": 1.5})
    stage._record_timing({"stage": "y", "study_seconds": 2.0})
    assert [line.split('"stage": ')[1][1] for line in path.read_text().splitlines()] == ["x", "y"]


def test_a_missing_upstream_output_names_the_dvc_target_that_builds_it(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINSCAPE_ROOT", str(tmp_path))
    target = "graph/imprint/train/nope/dvc.yaml:imprint_train@nope"
    with pytest.raises(FileNotFoundError, match=f"run `dvc repro {target}`"):
        stage._reader("imprint")("train", "nope", "metrics.json")
