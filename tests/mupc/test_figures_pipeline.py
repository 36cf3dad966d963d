"""Smoke slice through the real pipeline: one sweep (S5, shrunk) + its figure family (F22)."""

from __future__ import annotations

import json

import pytest


@pytest.mark.pipeline
def test_smoke_slice_render_after_training(repo_copy):
    # keep the slice small: S5 with one seed
    sweeps = repo_copy.params()["mupc"]["training"]["profiles"]["smoke"]["sweeps"]
    s5 = sweeps["S5"]
    s5["grids"][0]["seeds"] = [0]
    repo_copy.set_params({"mupc": {"training": {"profiles": {"smoke": {"sweeps": {"S5": s5}}}}}})
    repo_copy.run("git", "commit", "-qam", "shrink")

    out = repo_copy.dvc("repro", "mupc_figures_render@F22")
    assert "mupc_figures_render@F22" in out.stdout
    fam = repo_copy.path / "reports" / "figures" / "mupc" / "F22"
    assert (fam / "F22_activity_decay_mnist.png").stat().st_size > 0
    assert (fam / "F22_activity_decay_mnist.pdf").stat().st_size > 0
    head = json.loads((fam / "headline.json").read_text())
    assert set(head["max_test_acc_per_decay"]["act_lr=0.5"]) == {"0.1", "0"}
    side = json.loads((repo_copy.path / "reports" / "figures" / "mupc" / "F22.figures.json").read_text())
    [entry] = side["figures"]
    assert entry["family"] == "F22" and entry["sources"][0]["stage"] == "mupc_training_train@S5"

    again = repo_copy.dvc("repro", "mupc_figures_render@F22")
    assert "didn't change" in again.stdout or "up to date" in again.stdout
    assert "Running stage" not in again.stdout

    # a bad figures param fails before compute and deletes nothing
    repo_copy.set_params({"mupc": {"figures": {"profiles": {"smoke": {"selection": "best"}}}}})
    bad = repo_copy.dvc("repro", "mupc_figures_render@F22", check=False)
    assert bad.returncode != 0
    assert "mupc.figures.profiles.smoke.selection" in bad.stdout + bad.stderr
    assert (fam / "F22_activity_decay_mnist.png").exists()
