"""``sync --follow`` for real: a slow stage-like process journals child runs one after another while a
follow process replays its journal into a temporary sqlite store; the test watches MLflow through
its client. Then a plain sync finishes the job: every run once, no metric twice. And the rule that
gives each step of a series its own timestamp."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeline.tracking import RUN_KEY_TAG, pending, resolve, run_map, step_timestamps, sync

ROOT = Path(__file__).resolve().parent.parent
CHILDREN = 4
STEPS = list(range(0, 50, 5))

# a stage: the parent, then (once the test says go) a child run every ~1 s; the last child only once
# the test releases it. Child 1 gives its series' wall times, the others leave them to the tracker.
STAGE = f"""
import sys, time
from pathlib import Path
from pipeline.tracking import Tracker

go, release, art = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])

def wait(flag):
    while not flag.exists():
        time.sleep(0.02)

with Tracker("follow", "follow_train@a", {{"study": "follow"}}, params={{"lr": 0.1}}) as tr:
    print("parent", tr.parent.run_key, flush=True)
    wait(go)
    for i in range({CHILDREN}):
        if i == {CHILDREN} - 1:
            wait(release)
        t0 = time.time()
        with tr.child(f"c{{i}}", {{"i": i}}) as run:
            time.sleep(0.4)
            series = {{"loss": ({STEPS}, [1.0 / (1 + s + i) for s in {STEPS}])}}
            if i == 1:
                series["acc"] = ({STEPS}, [s / 50 for s in {STEPS}], [t0 + 0.03 * k for k in range({len(STEPS)})])
            run.log_many({{"final": float(i)}}, series)
            if i == 0:
                run.log_artifact(art)
        print("child", i, run.run_key, repr(time.time()), flush=True)
        time.sleep(0.6)
    tr.parent.log_metrics({{"stage_seconds": 1.0}})
"""


def _lines(proc: subprocess.Popen) -> queue.Queue:
    """The process's stdout lines, read on a thread (so waiting for one never blocks the test)."""
    out: queue.Queue = queue.Queue()

    def read() -> None:
        for line in proc.stdout:
            out.put(line.split())

    threading.Thread(target=read, daemon=True).start()
    return out


def _until(what: Callable[[], Any], timeout: float = 30.0, every: float = 0.05) -> Any:
    end = time.time() + timeout
    while time.time() < end:
        got = what()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"not within {timeout} s: {what}")


def test_follow_shows_a_running_stage_and_a_plain_sync_finishes_it(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "TRAINSCAPE_ROOT": str(tmp_path),
           "TRAINSCAPE_JOURNAL": str(tmp_path / "journal"), "PYTHONPATH": str(ROOT)}
    env.pop("TRAINSCAPE_TRACKING", None)
    for key in ("MLFLOW_TRACKING_URI", "TRAINSCAPE_ROOT", "TRAINSCAPE_JOURNAL"):
        monkeypatch.setenv(key, env[key])
    client = MlflowClient(tracking_uri=uri)
    client.search_experiments()  # the store's tables exist before two processes open it
    go, release, art = tmp_path / "go", tmp_path / "release", tmp_path / "curve.json"
    art.write_text('{"a": 1}')

    follower = subprocess.Popen([sys.executable, "-m", "pipeline.tracking", "sync", "--follow", "--interval", "0.5",
                                 "--on-error", "fail"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
    stage = subprocess.Popen([sys.executable, "-c", STAGE, str(go), str(release), str(art)], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        said = _lines(stage)
        kind, parent_key = said.get(timeout=30)
        assert kind == "parent"

        def run(key: str) -> Any:
            exp = client.get_experiment_by_name("follow")
            found = client.search_runs([exp.experiment_id], f"tags.`{RUN_KEY_TAG}` = '{key}'") if exp else []
            return found[0] if found else None

        # the parent shows before any child has run; MLflow creates a run and logs its params in two calls,
        # so a reader can see it for a moment without them: wait for the params too
        parent = _until(lambda: (r := run(parent_key)) is not None and r.data.params and r)
        assert parent.info.status == "RUNNING" and parent.data.params == {"lr": "0.1"}
        go.touch()
        latencies = []
        for i in range(CHILDREN - 1):
            _, n, key, ended = said.get(timeout=30)
            assert int(n) == i
            child = _until(lambda k=key: (r := run(k)) is not None and r.info.status == "FINISHED" and r, every=0.02)
            latencies.append(time.time() - float(ended))
            assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id and child.data.params == {"i": str(i)}
            assert len(client.get_metric_history(child.info.run_id, "loss")) == len(STEPS)
            assert stage.poll() is None and run(parent_key).info.status == "RUNNING", "the stage still runs"
        print(f"child run end → visible in MLflow: {', '.join(f'{s:.2f}' for s in latencies)} s")
        assert max(latencies) < 30
        # the follower stops; the stage logs its last child and ends; a plain sync finishes the job
        follower.send_signal(signal.SIGTERM)
        assert follower.wait(timeout=30) == 0, follower.stdout.read()
        followed = follower.stdout.read()
        release.touch()
        assert stage.wait(timeout=30) == 0, stage.stderr.read()
    finally:
        for proc in (follower, stage):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert "[tracking] following" in followed and "; 1 still running" in followed, followed
    report = sync(on_error="fail")
    assert (report.journals, report.runs) == (1, 1), report  # only the last child was new
    assert sync(on_error="fail").journals == 0 and pending() == []

    exp = client.get_experiment_by_name("follow")
    runs = client.search_runs([exp.experiment_id], "")
    assert len(runs) == 1 + CHILDREN
    keys = [r.data.tags[RUN_KEY_TAG] for r in runs]
    assert len(set(keys)) == len(keys) and set(keys) == set(run_map())  # every run once, every key mapped
    by_name = {r.info.run_name: r for r in runs}
    parent = by_name["follow_train@a"]
    assert parent.info.status == "FINISHED" and resolve(parent_key) == parent.info.run_id
    assert parent.data.metrics == {"stage_seconds": 1.0} and parent.info.end_time >= max(
        r.info.end_time for r in runs if r is not parent)
    for i in range(CHILDREN):
        child = by_name[f"c{i}"]
        assert child.info.status == "FINISHED" and child.data.metrics["final"] == i
        for metric in ("loss", "acc") if i == 1 else ("loss",):
            hist = sorted(client.get_metric_history(child.info.run_id, metric), key=lambda m: m.step)
            assert [m.step for m in hist] == STEPS, f"c{i} {metric}: each step once"
            stamps = [m.timestamp for m in hist]
            assert all(a < b for a, b in zip(stamps, stamps[1:])), f"c{i} {metric}: {stamps}"
            assert child.info.start_time <= stamps[0] and stamps[-1] <= child.info.end_time
        assert len(client.get_metric_history(child.info.run_id, "final")) == 1
    acc = sorted(client.get_metric_history(by_name["c1"].info.run_id, "acc"), key=lambda m: m.step)
    assert all(29 <= b.timestamp - a.timestamp <= 31 for a, b in zip(acc, acc[1:])), "the study's wall times"
    loss = sorted(client.get_metric_history(by_name["c0"].info.run_id, "loss"), key=lambda m: m.step)
    assert loss[-1].timestamp - loss[0].timestamp >= 300, "spread over the ~0.4 s the child ran"
    assert [a.path for a in client.list_artifacts(by_name["c0"].info.run_id)] == ["curve.json"]


def test_steps_without_times_spread_linearly_over_the_run():
    got = step_timestamps({"a": [0, 5, 10], "b": [5, 10]}, 1000, 2000)
    assert got == {"a": [1000, 1500, 2000], "b": [1500, 2000]}
    assert step_timestamps({"a": [3]}, 1000, 2000) == {"a": [2000]}  # one step: when logged
    # steps closer than a millisecond: still different and increasing, never after the end
    tight = step_timestamps({"a": list(range(100))}, 1000, 1010)["a"]
    assert all(a < b for a, b in zip(tight, tight[1:])) and tight[-1] == 1010
    assert step_timestamps({"a": [1, 1, 2]}, 0, 10) == {"a": [0, 0, 10]}  # equal steps share one
    assert step_timestamps({}, 0, 1) == {} and step_timestamps({"a": []}, 0, 1) == {"a": []}


KILLED_STAGE = """
import time
from pipeline.tracking import Tracker
with Tracker("halted", "halted_train@a", {}) as tr:
    with tr.child("c0") as run:
        run.log_many({}, {"loss": ([0, 1, 2], [3.0, 2.0, 1.0])})
    with tr.child("c1") as run:
        run.log_metrics({"loss": 5.0})
        tr.checkpoint()
        print(tr.parent.run_key, flush=True)
        time.sleep(120)
"""


def test_a_stage_killed_while_followed_ends_killed_once(tmp_path):
    """Live passes create the runs; the stage dies; the next pass ends what it left open as KILLED."""
    from mlflow.tracking import MlflowClient

    stage = subprocess.Popen([sys.executable, "-c", KILLED_STAGE], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        parent_key = _lines(stage).get(timeout=30)[0]
        report = sync(on_error="fail")
        assert (report.journals, report.runs, report.running) == (0, 0, 1), "a plain sync leaves it alone"
        report = sync(on_error="fail", live=True)
        assert (report.journals, report.runs, report.running) == (0, 3, 1)
        client = MlflowClient()
        runs = {r.info.run_name: r for r in client.search_runs(
            [client.get_experiment_by_name("halted").experiment_id], "")}
        assert {k: r.info.status for k, r in runs.items()} == {
            "halted_train@a": "RUNNING", "c0": "FINISHED", "c1": "RUNNING"}
        assert sync(on_error="fail", live=True).runs == 0  # nothing new: nothing again
    finally:
        stage.kill()
        stage.wait()
    assert sync(on_error="fail").journals == 1 and pending() == []
    runs = {r.info.run_name: r for r in client.search_runs([runs["c0"].info.experiment_id], "")}
    assert {k: r.info.status for k, r in runs.items()} == {
        "halted_train@a": "KILLED", "c0": "FINISHED", "c1": "KILLED"}
    assert resolve(parent_key) == runs["halted_train@a"].info.run_id
    assert len(client.get_metric_history(runs["c0"].info.run_id, "loss")) == 3
    assert len(client.get_metric_history(runs["c1"].info.run_id, "loss")) == 1
