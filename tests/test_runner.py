"""The runner's cheap paths: device without torch, one git call, progress lines, timings, a full disk."""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pipeline import progress, stage
from pipeline.config import load_params
from pipeline.contract import Context, Output, Stage, Study
from pipeline.paths import repo_root, study_dir
from pipeline.provenance import git_state
from pipeline.writer import unit_reader
from tests.conftest import ROOT


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
    bar = progress.bars("s_train@u")
    assert list(bar(range(4), total=4, desc="epochs", unit="epoch")) == [0, 1, 2, 3]
    lines = err.getvalue().splitlines()
    assert "\r" not in err.getvalue() and lines[0].startswith("[s_train@u] epochs:   0%")
    assert "4/4" in lines[-1] and "epoch/s" in lines[-1]


@pytest.mark.parametrize("value", ["off", "0"])
def test_progress_off_is_silent(monkeypatch, value):
    monkeypatch.setenv("TRAINSCAPE_PROGRESS", value)
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    assert list(progress.bars("s")(iter("ab"), total=2)) == ["a", "b"] and err.getvalue() == ""


def test_timings_record_is_appended_only_when_asked(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("TRAINSCAPE_TIMINGS", raising=False)
    progress.finished("x", 0.0, 1.0, 2.0, 1.0)
    assert "[x] done in" in capsys.readouterr().out
    path = tmp_path / "t.jsonl"
    monkeypatch.setenv("TRAINSCAPE_TIMINGS", str(path))
    progress.finished("x", 0.0, 1.0, 2.5, 1.5)
    progress.finished("y", 0.0, 1.0, 3.0, 2.0)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["stage"], r["study_seconds"], r["last_line"]) for r in rows] == [("x", 1.5, 2.5), ("y", 2.0, 3.0)]


def test_a_missing_upstream_output_names_the_dvc_target_that_builds_it(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINSCAPE_ROOT", str(tmp_path))
    target = "graph/imprint/train/nope/dvc.yaml:imprint_train@nope"
    with pytest.raises(FileNotFoundError, match=f"run `dvc repro {target}`"):
        unit_reader("imprint")("train", "nope", "metrics.json")


# ----------------------------------------------------------------------------- a full disk

PARTS = ("a", "b", "c")


def _sweep(ctx: Context, unit: str) -> Iterator[Output]:
    """A resumable toy unit: one part per run, skipping the runs a previous execution finished."""
    for name in PARTS:
        if ctx.own(f"runs/{name}/meta.json") is None:
            yield Output(part=f"runs/{name}", json={"run.json": {"run": name}})
    return Output(json={"index.json": list(PARTS)})


def _whole(ctx: Context, unit: str) -> Output:
    """A toy unit written whole."""
    return Output(json={f"{name}.json": {"run": name} for name in PARTS})


def _prepared(resumable: bool) -> stage.Prepared:
    family = Stage("train", entry="tests.test_runner", units=lambda cfg: ["u"], resumable=resumable)
    return stage.Prepared(load_params(), Study("toy", dict, (family,)), family, {}, "u",
                          _sweep if resumable else _whole, study_dir("toy", "train", "u"))


def _disk_full_in(folder: str) -> Callable[[Path, bytes], int]:
    """``Path.write_bytes`` that raises ENOSPC for every file written inside a temporary ``folder``: the
    disk fills while that part is written."""
    real = Path.write_bytes

    def write_bytes(self: Path, data: bytes) -> int:
        if self.parent.name.startswith(f".{folder}."):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, data)

    return write_bytes


@pytest.mark.parametrize("resumable", [True, False])
def test_a_full_disk_ends_the_stage_with_one_line_and_a_rerun_resumes(tmp_path, monkeypatch, capsys, resumable):
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    shutil.copytree(ROOT / "params", tmp_path / "params")
    monkeypatch.setenv("TRAINSCAPE_ROOT", str(tmp_path))
    monkeypatch.setenv("TRAINSCAPE_PROGRESS", "off")
    prepared = _prepared(resumable)
    monkeypatch.setattr(stage, "prepare", lambda *args, **kwargs: prepared)
    out = tmp_path / "artifacts/toy/train/u"
    monkeypatch.setattr(Path, "write_bytes", _disk_full_in("c" if resumable else "u"))

    assert stage.main("train", ["toy", "u"]) == progress.WRITE_FAILED
    err = capsys.readouterr().err
    target = "`dvc repro graph/toy/train/u/dvc.yaml:toy_train@u`"
    if resumable:
        assert err == (f"error: toy_train@u: no space left on device writing artifacts/toy/train/u/runs/c/run.json; "
                       f"the 2 finished parts in artifacts/toy/train/u are kept and nothing is half-written: "
                       f"free space and rerun {target} to resume\n")
        assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
            "runs/a/meta.json", "runs/a/run.json", "runs/b/meta.json", "runs/b/run.json"]  # no temp file, no c
    else:
        assert err == (f"error: toy_train@u: no space left on device writing artifacts/toy/train/u/a.json; "
                       f"nothing is half-written and earlier outputs stay as they were: free space and rerun "
                       f"{target}\n")
        assert not out.exists() and not list(out.parent.iterdir())  # no temporary folder either
    finished = {p: p.stat().st_mtime_ns for p in out.rglob("*.json")}

    monkeypatch.undo()  # the disk has room again
    monkeypatch.setenv("TRAINSCAPE_ROOT", str(tmp_path))
    monkeypatch.setenv("TRAINSCAPE_PROGRESS", "off")
    monkeypatch.setattr(stage, "prepare", lambda *args, **kwargs: prepared)
    assert stage.main("train", ["toy", "u"]) == 0
    assert {p: p.stat().st_mtime_ns for p in finished} == finished  # the finished runs were not redone
    assert (out / "meta.json").exists() and all(
        (out / (f"runs/{name}/run.json" if resumable else f"{name}.json")).exists() for name in PARTS)


def _disk_full_for(name: str) -> Callable[[Path, bytes], int]:
    """``Path.write_bytes`` that raises ENOSPC for the temporary file of ``name`` (the disk fills there)."""
    real = Path.write_bytes

    def write_bytes(self: Path, data: bytes) -> int:
        if self.name.startswith(f".{name}."):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, data)

    return write_bytes


@pytest.mark.parametrize(("module", "target", "written"), [("claims", "claims", "reports/claims.json"),
                                                           ("gallery", "gallery", "reports/manifest.json")])
def test_a_full_disk_ends_the_claims_and_gallery_stages_with_one_line(tmp_path, monkeypatch, capsys, module,
                                                                       target, written):
    import importlib

    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    shutil.copytree(ROOT / "params", tmp_path / "params")
    monkeypatch.setenv("TRAINSCAPE_ROOT", str(tmp_path))
    monkeypatch.setenv("TRAINSCAPE_TRACKING", "off")
    (tmp_path / "reports").mkdir()
    (tmp_path / written).write_text("{}\n")  # the previous build's output
    monkeypatch.setattr(Path, "write_bytes", _disk_full_for(Path(written).name))
    mod = importlib.import_module(f"stages.{module}")
    if module == "gallery":  # a gallery of no study: nothing to render first, only its two files to write
        monkeypatch.setattr(mod.registry, "names", lambda: [])
    main = mod.main
    assert main([]) == progress.WRITE_FAILED
    assert capsys.readouterr().err == (
        f"error: {target}: no space left on device writing {written}; nothing is half-written and earlier outputs "
        f"stay as they were: free space and rerun `dvc repro dvc.yaml:{target}`\n")
    assert (tmp_path / written).read_text() == "{}\n"
    assert sorted(p.name for p in (tmp_path / "reports").iterdir()) == [Path(written).name]  # no temporary left
