"""The team MLflow: real PostgreSQL + real MLflow server, fed by a queue of DVC experiments (-j 2)."""

from __future__ import annotations

import json
import shutil
import socket
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from pipeline.graph import target

TINY = {"imprint": {"profiles": {"smoke": {"epochs": 1, "n_train": 2048, "n_test": 512}}}}
STAGE = "imprint_train@glyph-adam"
TARGET = target(STAGE)
LRS = ("0.002", "0.0005")  # as many as the queue runs at once (-j 2): one round


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url: str, path: str, body: dict) -> dict:
    req = urllib.request.Request(f"{url}/api/2.0/mlflow/{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=30).read())


def _get(url: str, path: str) -> dict:
    return json.loads(urllib.request.urlopen(f"{url}/api/2.0/mlflow/{path}", timeout=30).read())


def _state_dir() -> Path:
    """The cluster's state outside pytest's private temp tree: PostgreSQL runs as the postgres user when
    the tests run as root and must walk every folder above its data (pytest takes back any permission
    added to its tree the next time a process asks it for a temp folder)."""
    state = Path(tempfile.mkdtemp(prefix="trainscape-cluster-", dir="/tmp"))
    state.chmod(0o711)
    return state


@pytest.mark.cluster
def test_queue_of_experiments_logs_every_run_once_to_the_team_server(repo_copy):
    repo_copy.set_params(TINY)
    state = _state_dir()
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = repo_copy.env
    env.update(MLFLOW_PORT=str(port), PY=sys.executable, MLFLOW_TRACKING_URI=url, TRAINSCAPE_CLUSTER_STATE=str(state))
    repo_copy.run("cluster/mlflow-server", "start", timeout=300)
    try:
        repo_copy.dvc("repro", "download@mnist")
        repo_copy.run("git", "add", "-A")
        repo_copy.run("git", "commit", "-q", "-m", "tiny imprint profile, data in the cache")
        for lr in LRS:
            repo_copy.dvc("exp", "run", "--queue", TARGET, "-S", f"params/imprint.yaml:imprint.lr={lr}")
        repo_copy.dvc("queue", "start", "-j", "2")
        deadline = time.time() + 900
        while time.time() < deadline:
            status = repo_copy.dvc("queue", "status").stdout
            if "Queued" not in status and "Running" not in status:
                break
            time.sleep(3)  # each look is a dvc process
        repo_copy.dvc("queue", "stop", "--kill", check=False)
        assert status.count("Success") == len(LRS), status
        repo_copy.sync()  # the queued stages journaled into the repository; their runs reach the server now

        experiment = _get(url, "experiments/get-by-name?experiment_name=imprint")["experiment"]["experiment_id"]
        runs = _post(url, "runs/search", {"experiment_ids": [experiment], "max_results": 1000})["runs"]
        tags = [{t["key"]: t["value"] for t in r["data"]["tags"]} for r in runs]
        parents = [(r, t) for r, t in zip(runs, tags) if t.get("mlflow.runName") == STAGE]
        children = [(r, t) for r, t in zip(runs, tags) if "mlflow.parentRunId" in t]
        # one stage run per experiment, each with exactly one child, all finished
        assert len(parents) == len(LRS) and len({t["dvc.exp_name"] for _, t in parents}) == len(LRS)
        assert sorted(t["mlflow.parentRunId"] for _, t in children) == sorted(r["info"]["run_id"] for r, _ in parents)
        assert {r["info"]["status"] for r in runs} == {"FINISHED"}
        assert {p["value"] for r, _ in parents for p in r["data"]["params"] if p["key"] == "lr"} == set(LRS)
        for run, _ in children:  # no lost metric: the whole test-accuracy curve of every run
            hist = _get(url, f"metrics/get-history?run_id={run['info']['run_id']}&metric_key=test_acc")
            assert len(hist["metrics"]) == TINY["imprint"]["profiles"]["smoke"]["epochs"] + 1
        log = (state / "mlflow.log").read_text()
        assert "database is locked" not in log and "Traceback" not in log, log[-3000:]
    finally:
        repo_copy.run("cluster/mlflow-server", "stop", check=False)
        shutil.rmtree(state, ignore_errors=True)
