"""Smoke slice of the superposition study through the real `dvc repro`."""

from __future__ import annotations

import json

import pytest

STAGES = ["superposition_train@untied", "superposition_train@tied", "superposition_render@untied",
          "superposition_render@tied", "superposition_render@summary"]


@pytest.mark.pipeline
def test_smoke_repro(repo_copy) -> None:
    proc = repo_copy.dvc("repro", *STAGES)
    root = repo_copy.path
    for v in ("untied", "tied"):
        assert (root / f"artifacts/superposition/train/{v}/history.npz").is_file()
        meta = json.loads((root / f"artifacts/superposition/train/{v}/meta.json").read_text())
        assert meta["data_sha256"] == {} and meta["profile"] == "smoke"
        figs = json.loads((root / f"reports/figures/superposition/{v}.figures.json").read_text())["figures"]
        assert {f["id"] for f in figs} == {f"superposition/{v}_seed42_{k}" for k in
                                          ("geometry", "heatmaps", "slider")}
        for f in figs:
            for path in f["files"]:
                assert (root / path).stat().st_size > 1000
    html = root / "reports/figures/superposition/untied/untied_seed42_slider.html"
    assert html.read_text().count('"label":"') >= 51 or html.stat().st_size > 10**6
    metrics = json.loads((root / "reports/metrics/superposition.json").read_text())
    s42 = metrics["variants"]["untied"]["seeds"]["42"]
    assert 0.018 < s42["final_loss"] < 0.0204 and s42["plateau"] is False
    per = json.loads((root / "reports/metrics/superposition_untied.json").read_text())
    assert abs(per["loss_epoch1"]["42"] - 0.0204067) <= 1e-7
    assert (root / "reports/figures/superposition/summary/loss_curves.png").is_file()

    again = repo_copy.dvc("repro", *STAGES)
    assert "up to date" in again.stdout or "didn't change" in again.stdout, again.stdout
    assert "Running stage" not in again.stdout, proc.stdout

    # a bad param fails before compute, names key and value, and deletes nothing
    repo_copy.set_params({"superposition": {"lr_schedule": "literal"}})
    fail = repo_copy.run("python", "-m", "stages.train", "superposition", "untied", check=False)
    assert fail.returncode == 2
    assert "superposition.lr_schedule = 'literal'" in fail.stderr and "allowed" in fail.stderr
    assert (root / "artifacts/superposition/train/untied/history.npz").is_file()
    repro = repo_copy.dvc("repro", "superposition_train@untied", check=False)
    assert repro.returncode != 0
    assert (root / "artifacts/superposition/train/tied/history.npz").is_file()
