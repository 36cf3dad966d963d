"""Smoke slice of mupc_training through the real pipeline (`dvc repro` on a repo copy): two sweeps
(S5, B1, shrunk) and the family drawn from S5 (F22); MLflow children, metrics, resumption, no-op rerun,
a bad value failing before any compute."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from pipeline.graph import target
from pipeline.studies.mupc.engine.runs import RunConfig

# skips, rather than breaks, collection where MLflow is absent (a bare GPU machine's `pytest -m gpu`)
MlflowClient = pytest.importorskip("mlflow.tracking").MlflowClient

S5, B1, F22 = "mupc_training_train@S5", "mupc_training_train@B1", "mupc_training_render@F22"
F22_EXTRACT = "mupc_training_extract@F22"
TRAIN = (target(S5), target(B1))
RENDER = target(F22)


def shrink(copy) -> None:
    sm = copy.params()["mupc_training"]["profiles"]["smoke"]
    s5 = {**sm["sweeps"]["S5"]["grids"][0], "seeds": [0], "test_every": 4}
    b1 = {**sm["sweeps"]["B1"]["grids"][0], "acts": ["relu"], "param_lrs": [0.01], "seeds": [0], "test_every": 4}
    copy.set_params({"mupc_training": {"profiles": {"smoke": {
        "data": {"n_train": 256, "n_test": 128},
        "sweeps": {"S5": {"grids": [s5]}, "B1": {"grids": [b1]}}}}}})


@pytest.mark.pipeline
def test_training_slice_render_resume_and_bad_param(repo_copy, mlflow_uri):
    shrink(repo_copy)  # and rewrites dvc.yaml
    trace = repo_copy.path.parent / "modules.jsonl"
    repo_copy.env["TRAINSCAPE_TRACE_MODULES"] = str(trace)
    repo_copy.dvc("repro", *TRAIN, RENDER)
    # every stage process loaded exactly the project modules dvc.yaml lists as its code deps
    checked = repo_copy.run(sys.executable, "-m", "pipeline.graph", "--trace", str(trace))
    assert "loaded exactly its code deps" in checked.stdout
    traced = [json.loads(line)["argv"][1:3] for line in trace.read_text().splitlines()]
    assert sorted(t for t in traced if t[0] == "mupc_training") == [
        ["mupc_training", "B1"], ["mupc_training", "F22"], ["mupc_training", "F22"], ["mupc_training", "S5"]]
    del repo_copy.env["TRAINSCAPE_TRACE_MODULES"]
    root = repo_copy.path
    s5 = root / "artifacts/mupc_training/train/S5"
    index = json.loads((s5 / "index.json").read_text())
    assert index["profile"] == "smoke" and len(index["runs"]) == 2
    assert {e["run"]["activity_decay"] for e in index["runs"]} == {0.1, 0.0}
    assert all(e["status"] in ("finished", "diverged", "no_learning") for e in index["runs"])
    meta = json.loads((s5 / "meta.json").read_text())
    rec = repo_copy.run_record(S5, "artifacts/mupc_training/train/S5/meta.json")
    assert len(rec["execution"]["trained"]) == 2 and rec["run_key"] and meta["stage"] == S5
    rc = RunConfig.from_record(index["runs"][0]["run"])
    run = s5 / "runs" / rc.hash()
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["hash"] == rc.hash() and cfg["data"] == {"n_train": 256, "n_test": 128}
    assert (run / "arrays.npz").stat().st_size > 0
    b1 = json.loads((root / "artifacts/mupc_training/train/B1/index.json").read_text())
    assert len(b1["runs"]) == 1 and b1["runs"][0]["key"].startswith("bp_results/MNIST/width_16/2_n_hidden/relu")

    # one MLflow child per run under the sweep's run, with its series and arrays
    ids = repo_copy.sync()  # the slice stops before the gallery stage, which syncs the journals
    client = MlflowClient(tracking_uri=mlflow_uri)
    exp = client.get_experiment_by_name("mupc_training")
    children = client.search_runs([exp.experiment_id],
                                  f"tags.mlflow.parentRunId = '{ids[rec['run_key']]}'")
    assert sorted(c.info.run_name for c in children) == sorted(f"S5/{e['hash']}" for e in index["runs"])
    child = next(c for c in children if c.info.run_name == f"S5/{rc.hash()}")
    assert child.data.params["hash"] == rc.hash() and child.data.tags["run_key"] == rc.key()
    history = client.get_metric_history(child.info.run_id, "train_loss")
    assert len(history) == cfg["stop_iter"] == child.data.metrics["iterations"]  # smoke logs every loss
    assert [a.path for a in client.list_artifacts(child.info.run_id)] == ["arrays.npz"]

    # the extract: the family's metrics (the render, which it feeds, publishes none); the render: one figure
    # and its sidecar
    fam = root / "reports/figures/mupc_training/F22"
    assert (fam / "F22_activity_decay_mnist.png").stat().st_size > 0
    assert not (fam / "F22_activity_decay_mnist.pdf").exists()  # smoke's figures.formats: PNG (+ plotly's HTML)
    metrics = json.loads((root / f"reports/metrics/{F22_EXTRACT}.json").read_text())
    assert metrics["family"] == "F22" and metrics["selection"] == "computed"
    assert json.loads((root / "artifacts/mupc_training/extract/F22/headline.json").read_text()) == metrics
    assert not (root / f"reports/metrics/{F22}.json").exists()
    assert set(metrics["max_test_acc_per_decay"]["act_lr=0.5"]) == {"0.1", "0"}
    side = json.loads((root / "reports/figures/mupc_training/F22.figures.json").read_text())
    [entry] = side["figures"]
    assert entry["id"] == "mupc_training/F22_activity_decay_mnist" and entry["family"] == "F22"
    assert entry["sources"][0]["stage"] == S5
    stem = "F22_activity_decay_mnist"
    assert [Path(f).name for f in entry["files"]] == [f"{stem}.{ext}" for ext in ("png", "html")]

    second = repo_copy.dvc("repro", *TRAIN, RENDER)
    assert "Running stage" not in second.stdout, second.stdout
    # edits of another profile, another sweep or another family's options rerun nothing here
    gm = repo_copy.params()["mupc_training"]["profiles"]["gpu_medium"]["sweeps"]["S5"]["grids"][0]
    repo_copy.set_params({"mupc_training": {
        "sweeps": {"S6": {"grids": [{**repo_copy.params()["mupc_training"]["sweeps"]["S6"]["grids"][0],
                                     "seeds": [0]}]}},
        "figures": {"best_lrs": {"S1": {"mnist": {"relu": {8: 0.1}}}}},
        "profiles": {"gpu_medium": {"sweeps": {"S5": {"grids": [{**gm, "seeds": [1]}]}}},
                     "paper": {"figures": {"chance_cells": {"relu": [128]}}}}}})
    third = repo_copy.dvc("repro", *TRAIN, RENDER)
    assert "Running stage" not in third.stdout, third.stdout

    # persist + per-run resumption: delete one run, repro recomputes only that run
    shutil.rmtree(run)
    repo_copy.dvc("repro", TRAIN[0])
    rec = repo_copy.run_record(S5, "artifacts/mupc_training/train/S5/meta.json")
    assert rec["execution"]["trained"] == [rc.hash()] and rec["execution"]["n_skipped"] == 1
    assert (run / "config.json").exists()

    # a bad value fails before any compute and deletes nothing
    bad = repo_copy.params()["mupc_training"]["profiles"]["smoke"]["sweeps"]["S5"]["grids"][0]
    repo_copy.set_params({"mupc_training": {"profiles": {"smoke": {"sweeps": {"S5": {
        "grids": [{**bad, "acts": ["softplus"]}]}}}}}}, regenerate=False)
    proc = repo_copy.dvc("repro", TRAIN[0], check=False)
    assert proc.returncode != 0
    assert "mupc_training.sweeps.S5.grids[0].acts[0] = 'softplus'" in proc.stdout + proc.stderr
    assert (s5 / "index.json").exists() and (run / "arrays.npz").exists()
