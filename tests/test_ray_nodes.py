"""A sweep across two Ray nodes (network namespaces joined by a veth pair, cluster/ray-2node), through
the real DVC stage: tasks land on both nodes and each group's node is recorded; a worker lost mid-sweep
is retried on the head and the sweep ends whole; a lost head stops the stage with one clear line, and a
fresh cluster resumes it without retraining what finished. Every run bit for bit the local executor's."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from pipeline.graph import target
from tests.conftest import BIN
from tests.ray_nodes import HEAD_IP, WORKER_IP, RayNodes

# skips, rather than breaks, collection where MLflow is absent (a bare GPU machine's `pytest -m gpu`)
MlflowClient = pytest.importorskip("mlflow.tracking").MlflowClient

S9 = "mupc_training_train@S9"
TRAIN = target(S9)
OUT = "artifacts/mupc_training/train/S9"
TASK = "located_task"  # the Ray task's process title: ray::located_task (pipeline.executor)
N_RUNS = 12  # 2 depths x 3 activations = 6 stacked groups of 2 seeds


def sweep(copy) -> None:
    """S9 on the smoke profile: 6 groups of 2 runs, small enough for a test, long enough per group that
    a node can be killed while one runs."""
    grid = copy.params()["mupc_training"]["profiles"]["smoke"]["sweeps"]["S9"]["grids"][0]
    copy.set_params({"mupc_training": {"profiles": {"smoke": {"sweeps": {"S9": {"grids": [
        {**grid, "H": [2, 4], "acts": ["linear", "tanh", "relu"], "seeds": [0, 1]}]}}}}}},
        regenerate=False)  # the stage reads the same keys: dvc.yaml stays as it is


def on_cluster(copy, nodes: RayNodes) -> dict[str, str]:
    return {**copy.env, **nodes.head_env(), "TRAINSCAPE_EXECUTOR": "ray"}


def repro(copy, nodes: RayNodes) -> subprocess.Popen:
    """``dvc repro`` of the sweep from the head's namespace, on the cluster."""
    return subprocess.Popen(nodes.on_head(str(BIN / "dvc"), "repro", TRAIN), cwd=copy.path,
                            env=on_cluster(copy, nodes), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, timeout: float = 600) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def outputs(copy) -> dict[str, bytes]:
    """Every file of the sweep's output folder (relative path -> bytes)."""
    root = copy.path / OUT
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def same_runs(copy, reference: dict[str, Path]) -> None:
    """Every run's arrays.npz bit for bit the reference's, and exactly the reference's runs on disk."""
    runs = sorted(p.name for p in (copy.path / OUT / "runs").iterdir())
    assert runs == sorted(reference), runs
    for run, ref in reference.items():
        got, want = np.load(copy.path / OUT / "runs" / run / "arrays.npz"), np.load(ref)
        assert sorted(got.files) == sorted(want.files) and "test_accs" in want.files
        for key in want.files:
            assert np.array_equal(got[key], want[key], equal_nan=True), (run, key)


def mlflow_children(copy, mlflow_uri: str) -> list:
    """The sweep's child runs of this copy in MLflow after the sync (its journal's runs only)."""
    ids = set(copy.sync().values())
    client = MlflowClient(tracking_uri=mlflow_uri)
    exp = client.get_experiment_by_name("mupc_training")
    runs = client.search_runs([exp.experiment_id], max_results=5000)
    return [r for r in runs if r.info.run_id in ids and r.info.run_name.startswith("S9/")]


@pytest.mark.cluster
def test_sweep_across_two_nodes_with_the_worker_lost_mid_sweep(repo_copy, ray_nodes, mlflow_uri, tmp_path):
    sweep(repo_copy)
    # the local executor's sweep, the reference, computed while the cluster starts
    local_proc = subprocess.Popen([str(BIN / "dvc"), "repro", TRAIN], cwd=repo_copy.path, env=repo_copy.env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    nodes = ray_nodes()
    code, out, err = finish(local_proc)
    assert code == 0, out[-3000:] + err[-3000:]
    local = outputs(repo_copy)
    reference = tmp_path / "reference"
    shutil.copytree(repo_copy.path / OUT / "runs", reference)
    runs = {p.name: p / "arrays.npz" for p in reference.iterdir()}
    assert len(runs) == N_RUNS
    shutil.rmtree(repo_copy.path / OUT)

    # the sweep on both nodes: each group runs where Ray places it, every run as the local executor's
    code, out, err = finish(repro(repo_copy, nodes))
    assert code == 0, out[-3000:] + err[-3000:]
    rec = repo_copy.run_record(S9, f"{OUT}/meta.json")
    groups = rec["execution"]["groups"]
    print("groups, both nodes:", [(g["group"], g["node_ip"], g["attempt"]) for g in groups])
    assert len(groups) == 6 and {g["node_ip"] for g in groups} == {HEAD_IP, WORKER_IP}
    assert {g["attempt"] for g in groups} == {0}
    assert sorted(h for g in groups for h in g["runs"]) == sorted(runs)
    on_worker = next(g for g in groups if g["node_ip"] == WORKER_IP)
    part = repo_copy.run_record(S9, part=f"runs/{on_worker['runs'][0]}")
    assert part["execution"]["node"]["node_id"] == on_worker["node_id"]
    same_runs(repo_copy, runs)
    assert outputs(repo_copy) == local
    shutil.rmtree(repo_copy.path / OUT)

    # the same sweep again; once the worker's first group has started, the worker dies (SIGKILL of its Ray
    # processes, raylet included) and Ray retries that group on the head. (Waiting for the worker's second
    # group instead races the head on a loaded machine: the head may finish every other group first.)
    proc = repro(repo_copy, nodes)
    nodes.wait_for_task("worker", TASK, timeout=600, alive=lambda: proc.poll() is None)
    killed = nodes.kill("worker")
    code, out, err = finish(proc)
    assert code == 0, out[-3000:] + err[-3000:]
    assert "retries remaining, so the task will be retried" in out + err, (out + err)[-3000:]
    assert [line for line in nodes.nodes() if line.startswith(WORKER_IP)] == [f"{WORKER_IP} dead"]

    # which node ran each group, and the retry, are in the run record (never in an output)
    rec = repo_copy.run_record(S9, f"{OUT}/meta.json")
    groups = rec["execution"]["groups"]
    print(f"groups, worker lost ({killed}):", [(g["group"], g["node_ip"], g["attempt"]) for g in groups])
    retried = [g for g in groups if g["attempt"] > 0]
    assert len(groups) == 6 and {g["node_ip"] for g in groups} == {HEAD_IP}
    assert retried  # the group the worker had started, again on the head
    assert sorted(h for g in groups for h in g["runs"]) == sorted(runs)
    assert rec["execution"]["n_trained"] == N_RUNS and sorted(rec["execution"]["trained"]) == sorted(runs)

    # every run once on disk, bit for bit the local executor's, and every output byte for byte
    same_runs(repo_copy, runs)
    assert outputs(repo_copy) == local

    # MLflow: each of the three executions logged every run exactly once, none left RUNNING, each Ray run
    # tagged with its node and attempt
    children = mlflow_children(repo_copy, mlflow_uri)
    names = sorted(c.info.run_name for c in children)
    assert names == sorted(f"S9/{h}" for h in runs for _ in range(3)), names
    assert "RUNNING" not in {c.info.status for c in children}
    ray_runs = [(c.info.run_name, c.data.tags) for c in children if c.data.tags.get("executor") == "ray"]
    assert sorted(n for n, _ in ray_runs) == sorted(f"S9/{h}" for h in runs for _ in range(2))
    assert {t["executor.node_ip"] for _, t in ray_runs} == {HEAD_IP, WORKER_IP}
    assert sorted(n for n, t in ray_runs if t["executor.attempt"] != "0") == sorted(
        f"S9/{h}" for g in retried for h in g["runs"])
    print(f"MLflow: {len(children)} child runs ({len(ray_runs)} on Ray), {len(set(names))} distinct")


@pytest.mark.cluster
def test_head_lost_mid_sweep_fails_clearly_and_a_fresh_cluster_resumes(repo_copy, ray_nodes, mlflow_uri):
    sweep(repo_copy)
    data = subprocess.Popen([str(BIN / "dvc"), "repro", "download@mnist"], cwd=repo_copy.path, env=repo_copy.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # while the cluster starts
    nodes = ray_nodes()
    code, out, err = finish(data)
    assert code == 0, out[-3000:] + err[-3000:]
    proc = repro(repo_copy, nodes)
    runs = repo_copy.path / OUT / "runs"
    deadline = time.time() + 300
    while len(list(runs.glob("*/config.json"))) < 2 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    nodes.kill("head")
    fresh = ray_nodes()  # its own namespaces: it starts while the stage notices the loss
    code, out, err = finish(proc)
    assert code != 0, out[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    print("head lost:", lines)
    assert lines, err[-3000:]
    assert lines == [f"error: {S9}: the Ray cluster's head at {HEAD_IP}:6379 stopped answering (node lost) "
                     f"with {lines[0].split(' with ')[1].split(' of ')[0]} of 6 tasks unfinished; what finished is "
                     "kept: rerun the stage on a running cluster to resume"], err[-3000:]
    assert "Failed to connect to GCS" not in out + err
    done = {p.parent.name: p.read_bytes() for p in runs.glob("*/arrays.npz")}
    assert 0 < len(done) < N_RUNS, len(done)

    nodes.stop()
    code, out, err = finish(repro(repo_copy, fresh))
    assert code == 0, out[-3000:] + err[-3000:]
    rec = repo_copy.run_record(S9, f"{OUT}/meta.json")
    print(f"resumed: {rec['execution']['n_skipped']} kept, {rec['execution']['n_trained']} trained")
    assert rec["execution"]["n_skipped"] == len(done) and rec["execution"]["n_trained"] == N_RUNS - len(done)
    assert not set(rec["execution"]["trained"]) & set(done)
    assert {name: (runs / name / "arrays.npz").read_bytes() for name in done} == done  # kept as they were
    index = json.loads((repo_copy.path / OUT / "index.json").read_text())
    assert len(index["runs"]) == N_RUNS and len(list(runs.iterdir())) == N_RUNS

    children = mlflow_children(repo_copy, mlflow_uri)
    names = [c.info.run_name for c in children]
    assert sorted(names) == sorted(f"S9/{p.name}" for p in runs.iterdir()), names
    assert "RUNNING" not in {c.info.status for c in children}
