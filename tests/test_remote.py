"""Results move between machines through the DVC remote: push on one clone, pull on another."""

from __future__ import annotations

import hashlib
import subprocess

import pytest

from pipeline.graph import target

TINY = {"imprint": {"profiles": {"smoke": {"epochs": 1, "n_train": 2048, "n_test": 512}}}}
TARGETS = (target("imprint_render@glyph"), target("imprint_render@random"))


def _digest(root, rel: str) -> str:
    return hashlib.sha256((root / rel).read_bytes()).hexdigest()


@pytest.mark.cluster
def test_push_then_pull_into_a_fresh_clone_is_up_to_date_without_retraining(repo_copy, tmp_path):
    repo_copy.set_params(TINY)
    repo_copy.dvc("repro", *TARGETS)
    repo_copy.run("git", "add", "-A")
    repo_copy.run("git", "commit", "-q", "-m", "built")
    pushed = repo_copy.dvc("push")
    # the default remote is the folder beside the repository
    assert (repo_copy.path.parent / "trainscape-dvc-remote").is_dir(), pushed.stdout
    figures = sorted(p.relative_to(repo_copy.path).as_posix()
                     for p in (repo_copy.path / "reports/figures/imprint").rglob("*") if p.is_file())
    trained = sorted(p.relative_to(repo_copy.path).as_posix()
                     for p in (repo_copy.path / "artifacts/imprint/train").rglob("*") if p.is_file())
    assert any(f.endswith(".png") for f in figures) and any(f.endswith("arrays.npz") for f in trained)

    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(repo_copy.path), str(clone)], check=True)
    other = type(repo_copy)(clone, repo_copy.env)
    other.dvc("pull", "--with-deps", *TARGETS)
    status = other.dvc("status", *TARGETS).stdout
    assert "up to date" in status, status
    dry = other.dvc("repro", "--dry", *TARGETS)
    assert "Running stage" not in dry.stdout + dry.stderr, dry.stdout
    for rel in figures + trained:
        assert _digest(clone, rel) == _digest(repo_copy.path, rel), rel
