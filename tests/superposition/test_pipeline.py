"""Smoke slice of the superposition study through the real `dvc repro`, and its MLflow records."""

from __future__ import annotations

import json
import sys

import pytest

from pipeline.graph import target, targets
from pipeline.studies.superposition.claims import CLAIMS
from tests.claims_slice import strict_ledger

# skips, rather than breaks, collection where MLflow is absent (a bare GPU machine's `pytest -m gpu`)
MlflowClient = pytest.importorskip("mlflow.tracking").MlflowClient

STAGES = targets("superposition_train", "superposition_extract", "superposition_render")


@pytest.mark.pipeline
def test_smoke_repro(repo_copy, mlflow_uri: str) -> None:
    repo_copy.run(sys.executable, "-m", "pipeline.graph")
    proc = repo_copy.dvc("repro", *STAGES)
    root = repo_copy.path
    # the slice is the smoke profile as it stands: every claim of the study that smoke expects holds
    strict_ledger(repo_copy, "superposition", must_check={c.id for c in CLAIMS})
    ids = repo_copy.sync()  # the slice stops before the gallery stage, which syncs the journals
    client = MlflowClient(tracking_uri=mlflow_uri)
    for v in ("untied", "tied"):
        assert (root / f"artifacts/superposition/train/{v}/history.npz").is_file()
        meta = json.loads((root / f"artifacts/superposition/train/{v}/meta.json").read_text())
        assert meta["data_sha256"] == {} and meta["profile"] == "smoke"
        assert meta["stage"] == f"superposition_train@{v}"
        rec = repo_copy.run_record(f"superposition_train@{v}", f"artifacts/superposition/train/{v}/meta.json")
        assert set(rec["children"]) == {f"{v}-seed{s}" for s in (0, 1, 2, 3, 42)}
        child = client.get_run(ids[rec["children"][f"{v}-seed42"]])
        assert child.data.tags["mlflow.parentRunId"] == ids[rec["run_key"]]
        assert child.data.params["seed"] == "42" and child.data.params["tied"] == str(v == "tied")
        assert len(client.get_metric_history(child.info.run_id, "loss")) == 2000 // 20 + 1
        parent = client.get_run(ids[rec["run_key"]])
        assert parent.data.tags["dvc.stage"] == f"superposition_train@{v}" and "train_seconds" in parent.data.metrics
        figs = json.loads((root / f"reports/figures/superposition/{v}.figures.json").read_text())["figures"]
        assert {f["id"] for f in figs} == {f"superposition/{v}_seed42_{k}" for k in
                                          ("geometry", "heatmaps", "slider")}
        for f in figs:
            assert f["sources"][0]["stage"] == f"superposition_train@{v}"
            for path in f["files"]:
                assert (root / path).stat().st_size > 1000
    html = root / "reports/figures/superposition/untied/untied_seed42_slider.html"
    assert html.read_text().count('"label":"') >= 51 or html.stat().st_size > 10**6
    metrics = json.loads((root / "reports/metrics/superposition_extract@summary.json").read_text())
    s42 = metrics["variants"]["untied"]["seeds"]["42"]
    assert 0.018 < s42["final_loss"] < 0.0204 and s42["plateau"] is False
    assert metrics["epochs"] == 2000 and metrics["profile"] == "smoke"
    per = json.loads((root / "reports/metrics/superposition_extract@untied.json").read_text())
    assert abs(per["loss_epoch1"]["42"] - 0.0204067) <= 1e-7 and per["tied"] is False
    summary = json.loads((root / "reports/figures/superposition/summary.figures.json").read_text())["figures"]
    assert [f["id"] for f in summary] == ["superposition/loss_curves"]
    assert {s["stage"] for s in summary[0]["sources"]} == {"superposition_train@untied", "superposition_train@tied",
                                                           "superposition_extract@summary"}
    assert (root / "reports/figures/superposition/summary/loss_curves.png").is_file()

    again = repo_copy.dvc("repro", *STAGES)
    assert "up to date" in again.stdout or "didn't change" in again.stdout, again.stdout
    assert "Running stage" not in again.stdout, proc.stdout

    # re-tuning the detector reruns extract@summary and the loss curves only
    repo_copy.set_params({"superposition": {"plateau": {"tol": 0.002}}})
    tuned = repo_copy.dvc("repro", *STAGES)
    ran = {line.split("'")[1] for line in tuned.stdout.splitlines() if line.startswith("Running stage")}
    assert ran == {target("superposition_extract@summary"), target("superposition_render@summary")}, tuned.stdout

    # a bad param fails before compute, names key and value, and deletes nothing
    repo_copy.set_params({"superposition": {"lr_schedule": "literal"}}, regenerate=False)
    for cmd in (("python", "-m", "pipeline.graph"), ("python", "-m", "stages.train", "superposition", "untied")):
        fail = repo_copy.run(*cmd, check=False)
        assert fail.returncode == 2
        assert "superposition.lr_schedule = 'literal'" in fail.stderr and "allowed" in fail.stderr
    assert (root / "artifacts/superposition/train/untied/history.npz").is_file()
    repro = repo_copy.dvc("repro", target("superposition_train@untied"), check=False)
    assert repro.returncode != 0
    assert (root / "artifacts/superposition/train/tied/history.npz").is_file()
