"""MLflow as a researcher browses it: the real server, the real UI in headless Chromium."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from pipeline.provenance import run_tags
from pipeline.tracking import EXPERIMENT_TAGS, Tracker, dataset_inputs, run_map, sync

BIN = Path(sys.executable).parent
SUMS = {"mnist/train-images-idx3-ubyte": "a" * 64, "mnist/train-labels-idx1-ubyte": "b" * 64}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    tags = run_tags(study="demo", stage="demo_train@a", profile="smoke", params_hash="p" * 8,
                           data_sha256=SUMS)
    with Tracker("demo", "demo_train@a", tags, params={"lr": 0.1}, datasets=dataset_inputs(SUMS)) as tr:
        with tr.child("seed-0", {"seed": 0}) as run:
            run.log_many({"final_acc": 0.93}, {"test_acc": ([0, 1], [0.5, 0.93])})
        tr.parent.log_metrics({"final.acc": 0.93})
    sync(on_error="fail")  # what the gallery stage and `make ui` do first
    experiment = run_map()[tr.parent.run_key]["experiment_id"]
    port = _free_port()
    proc = subprocess.Popen([str(BIN / "mlflow"), "server", "--backend-store-uri", uri, "--host", "127.0.0.1",
                             "--port", str(port), "--workers", "1"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL,
                            env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):  # a loaded 2-core machine (the suite runs on every core) needs minutes
            try:
                urllib.request.urlopen(f"{url}/health", timeout=2)
                break
            except OSError:
                assert proc.poll() is None, f"the MLflow server exited with {proc.returncode}"
                time.sleep(0.5)
        else:
            raise AssertionError("the MLflow server did not answer /health within 5 minutes")
        yield url, experiment
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _api(url: str, path: str, body: dict | None = None) -> dict:
    """MLflow's REST API, as the UI calls it (GET without a body, POST with one)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"{url}/api/2.0/mlflow/{path}", data=data,
                                 headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=30).read())


@pytest.mark.browser
def test_runs_table_is_the_landing_view_with_dataset_source_and_metrics(server, tmp_path):
    url, experiment = server
    exp = _api(url, "experiments/get-by-name?experiment_name=demo")["experiment"]
    assert {t["key"]: t["value"] for t in exp["tags"]}.items() >= EXPERIMENT_TAGS.items()
    runs = {r["info"]["run_name"]: r for r in _api(url, "runs/search", {"experiment_ids": [experiment]})["runs"]}
    parent = runs["demo_train@a"]
    assert {m["key"]: m["value"] for m in parent["data"]["metrics"]}["final.acc"] == 0.93
    assert [d["dataset"]["name"] for d in parent["inputs"]["dataset_inputs"]] == ["mnist"]
    assert {t["key"]: t["value"] for t in parent["data"]["tags"]}["mlflow.source.name"] == "demo_train@a"

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "chromium is missing: `make setup` installs it (Debian package chromium)"

    def render(page: str, profile: str) -> str:
        return subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                               "--no-first-run", "--disable-background-networking", "--disable-component-update",
                               "--disable-sync", f"--user-data-dir={tmp_path / profile}", "--virtual-time-budget=30000",
                               "--window-size=1600,1000", "--dump-dom", f"{url}/#/experiments/{experiment}{page}"],
                              capture_output=True, text=True, timeout=180).stdout

    dom = render("?workflowType=machine_learning", "table")
    digest = dataset_inputs(SUMS)["mnist"]["digest"]
    assert "matching runs" in dom and "demo_train@a" in dom, dom[-2000:]  # the runs table, not the GenAI overview
    assert f"mnist ({digest})" in dom  # the Dataset column, with the digest of the data checksums
    # a click on the run: its page lists the headline metric with its value
    dom = render(f"/runs/{parent['info']['run_id']}?workflowType=machine_learning", "run")
    assert "final.acc" in dom and "0.93" in dom and "mnist" in dom, dom[-2000:]
