"""The tracking module against a temporary MLflow store: layout, tags, params, metrics, status, in
both modes that log (the journal replayed by sync, and direct); the journal's sync: once, under a
lock, for killed stages too; the key → run id map."""

import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from pipeline.config import ConfigError
from pipeline.io import atomic_dir, write_json
from pipeline.provenance import run_tags
from pipeline.stage import main as stage_main
from pipeline.tracking import (
    RUN_KEY_TAG,
    Tracker,
    journal_dir,
    pending,
    resolve,
    run_map,
    sync,
    tracking_mode,
    tracking_uri,
)

# skips, rather than breaks, collection where MLflow is absent (a bare GPU machine's `pytest -m gpu`)
MlflowClient = pytest.importorskip("mlflow.tracking").MlflowClient

ROOT = Path(__file__).resolve().parent.parent


def record(study: str, artifact_dir: Path) -> tuple[str, float]:
    """A stage's calls: a parent with params, a child with a series and a file logged from inside an
    ``atomic_dir`` (swapped in, then rewritten), a child marked failed. Returns (parent run id, time)."""
    tags = run_tags(study=study, stage=f"{study}_train@a", profile="smoke", params_hash="abc",
                           data_sha256={"mnist/x": "f00"})
    with Tracker(study, f"{study}_train@a", tags, params={"profile": "smoke", "lr": 0.1}) as tr:
        with atomic_dir(artifact_dir) as tmp:
            write_json(tmp / "arrays.json", {"as": "logged"})
            with tr.child("good", {"init": "glyph", "optimizer": "muon"}) as run:
                run.log_many({}, {"test_acc": ([0, 1, 2], [0.1, 0.5, 0.9])})
                run.log_artifact(tmp / "arrays.json")
        write_json(artifact_dir / "arrays.json", {"as": "rewritten later"})
        with tr.child("bad", {"init": "random"}) as run:
            run.fail("diverged")
        tr.parent.log_metrics({"stage_seconds": 1.5})
        parent_id = tr.parent.run_key
    return parent_id, time.time()


@pytest.fixture(scope="module", params=["journal", "direct"])
def logged(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(request.param)
    uri = f"sqlite:///{tmp / 'm.db'}"
    mp = pytest.MonkeyPatch()
    mp.setenv("MLFLOW_TRACKING_URI", uri)
    mp.setenv("TRAINSCAPE_ROOT", str(tmp))  # mlartifacts/ goes here
    mp.setenv("TRAINSCAPE_JOURNAL", str(tmp / "journal"))
    mp.setenv("TRAINSCAPE_TRACKING", request.param)
    try:
        parent_id, recorded = record("unitstudy", tmp / "unit")
        if request.param == "journal":
            assert len(parent_id) == 32 and not (tmp / "m.db").exists(), "the stage itself never opens MLflow"
            report = sync(on_error="fail")
            assert (report.journals, report.runs) == (1, 3)
            parent_id = resolve(parent_id)
    finally:
        mp.undo()
    return MlflowClient(tracking_uri=uri), parent_id, recorded


def test_store_defaults_to_repository_sqlite(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    assert tracking_uri().startswith("sqlite:///") and tracking_uri().endswith("/mlflow.db")


def test_parent_run_has_provenance_tags_and_params(logged):
    client, parent_id, recorded = logged
    run = client.get_run(parent_id)
    t = run.data.tags
    assert run.info.run_name == "unitstudy_train@a" and run.info.status == "FINISHED"
    assert t["study"] == "unitstudy" and t["profile"] == "smoke" and t["dvc.stage"] == "unitstudy_train@a"
    assert t["params.hash"] == "abc" and t["data.sha256"] == '{"mnist/x": "f00"}'
    assert len(t["git.commit"]) in (40, 7) and t["git.dirty"] in ("true", "false")
    assert run.data.params == {"profile": "smoke", "lr": "0.1"}
    assert run.data.metrics == {"stage_seconds": 1.5}
    exp = client.get_experiment(run.info.experiment_id)
    assert exp.name == "unitstudy" and exp.artifact_location.endswith("/mlartifacts/unitstudy")
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    # the run keeps the times of the stage, not of the sync
    assert run.info.start_time <= run.info.end_time <= recorded * 1000 + 1


def test_child_runs_nest_and_carry_metric_history(logged):
    client, parent_id, _ = logged
    exp_id = client.get_run(parent_id).info.experiment_id
    children = client.search_runs([exp_id], f"tags.mlflow.parentRunId = '{parent_id}'")
    by_name = {r.info.run_name: r for r in children}
    assert set(by_name) == {"good", "bad"}
    good = by_name["good"]
    assert good.data.params == {"init": "glyph", "optimizer": "muon"} and good.info.status == "FINISHED"
    hist = client.get_metric_history(good.info.run_id, "test_acc")
    assert [(m.step, m.value) for m in sorted(hist, key=lambda m: m.step)] == [(0, 0.1), (1, 0.5), (2, 0.9)]
    assert by_name["bad"].info.status == "FAILED" and by_name["bad"].data.tags["failure_reason"] == "diverged"
    assert good.data.tags["study"] == "unitstudy"  # children inherit the provenance tags
    # the file as it was when logged, from inside the atomic_dir that was swapped in afterwards
    (art,) = client.list_artifacts(good.info.run_id)
    assert art.path == "arrays.json"
    local = client.download_artifacts(good.info.run_id, "arrays.json")
    assert Path(local).read_text().split() == ["{", '"as":', '"logged"', "}"]


def test_journal_mode_never_imports_mlflow(monkeypatch):
    for name in [m for m in sys.modules if m == "mlflow" or m.startswith("mlflow.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "mlflow", None)  # an import would raise (and on_error: warn would warn)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with Tracker("x", "x_train@a", {"t": "1"}) as tr:
            with tr.child("c", {"p": 1}) as run:
                run.log_many({"m": 1.0}, {"s": ([0], [1.0])})
            assert tr.experiment_id is None
    assert len(tr.parent.run_key) == 32 and len(run.run_key) == 32 and tr.parent.run_key != run.run_key
    (folder,) = pending()
    assert folder.name == f"x_train@a-{tr.parent.run_key}"


def test_disabled_tracking_is_a_no_op(monkeypatch):
    monkeypatch.setenv("TRAINSCAPE_TRACKING", "off")
    for name in [m for m in sys.modules if m == "mlflow" or m.startswith("mlflow.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "mlflow", None)  # off means MLflow is not even imported
    with Tracker("x", "x_train@a", {}) as tr:
        with tr.child("c") as run:
            run.log_many({"m": 1.0}, {"s": ([0], [1.0])})
            run.log_params({"p": 1})
            run.fail("reason")
        assert tr.parent.run_key is None and run.run_key is None
    assert not journal_dir().exists()


def test_a_bad_tracking_mode_is_a_config_error(monkeypatch, capsys):
    monkeypatch.setenv("TRAINSCAPE_TRACKING", "journl")
    with pytest.raises(ConfigError, match="TRAINSCAPE_TRACKING = 'journl' is not allowed; allowed: 'journal'"
                       ".*'direct'.*'off'"):
        tracking_mode()
    with pytest.raises(ConfigError, match="TRAINSCAPE_TRACKING"):
        Tracker("x", "x_train@a", {})
    # a stage stops before any compute, with the message and exit code 2
    assert stage_main("train", ["imprint", "glyph-adam"]) == 2
    assert "TRAINSCAPE_TRACKING = 'journl'" in capsys.readouterr().err
    for value, mode in (("", "journal"), ("journal", "journal"), ("Direct", "direct"), ("off", "off"), ("0", "off")):
        monkeypatch.setenv("TRAINSCAPE_TRACKING", value)
        assert tracking_mode() == mode


# ----------------------------------------------------------------------------- sync


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('sync') / 'm.db'}"


@pytest.fixture
def here(store, tmp_path, monkeypatch) -> MlflowClient:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    monkeypatch.setenv("TRAINSCAPE_ROOT", str(tmp_path))
    return MlflowClient(tracking_uri=store)


def runs_with_key(client: MlflowClient, study: str, key: str) -> list:
    exp = client.get_experiment_by_name(study)
    return client.search_runs([exp.experiment_id], f"tags.`{RUN_KEY_TAG}` = '{key}'") if exp else []


def test_sync_twice_logs_once_and_a_replayed_journal_reuses_its_runs(here, tmp_path):
    parent, _ = record("twice", tmp_path / "unit")
    first = sync(on_error="fail")
    assert (first.journals, first.runs) == (1, 3) and pending() == []
    assert (sync(on_error="fail").journals, sync(on_error="fail").runs) == (0, 0)
    (run,) = runs_with_key(here, "twice", parent)
    assert run.info.run_id == resolve(parent) and run.data.tags["trainscape.run_key"] == parent
    # a sync that stopped after logging but before moving the journal: the next one logs nothing again
    (done,) = (journal_dir() / "synced").iterdir()
    done.rename(journal_dir() / done.name)
    again = sync(on_error="fail")
    assert again.journals == 1 and run_map()[parent]["run_id"] == run.info.run_id
    (good,) = [r for r in here.search_runs([run.info.experiment_id], "") if r.info.run_name == "good"]
    assert len(here.get_metric_history(good.info.run_id, "test_acc")) == 3
    assert len(here.search_runs([run.info.experiment_id], "")) == 3


def test_resolve_maps_every_key_and_nothing_else(here, tmp_path):
    with Tracker("keys", "keys_train@a", {}) as tr:
        with tr.child("c1") as c1:
            pass
        with tr.child("c2") as c2:
            pass
    assert resolve(tr.parent.run_key) is None  # not synced yet
    sync(on_error="fail")
    ids = {k: resolve(k) for k in (tr.parent.run_key, c1.run_key, c2.run_key)}
    assert len(set(ids.values())) == 3 and all(len(v) == 32 for v in ids.values())
    assert {here.get_run(v).info.run_name for v in ids.values()} == {"keys_train@a", "c1", "c2"}
    assert here.get_run(ids[c1.run_key]).data.tags["mlflow.parentRunId"] == ids[tr.parent.run_key]
    assert resolve("0" * 32) is None and resolve(None) is None
    assert run_map()[c2.run_key]["experiment_id"] == here.get_experiment_by_name("keys").experiment_id


def test_a_failing_stage_journals_its_runs_as_failed(here):
    with pytest.raises(RuntimeError), Tracker("boom", "boom_train@a", {}) as tr:
        with tr.child("half") as child:
            child.log_metrics({"loss": 1.0})
            raise RuntimeError("the study crashed")
    sync(on_error="fail")
    assert here.get_run(resolve(tr.parent.run_key)).info.status == "FAILED"
    assert here.get_run(resolve(child.run_key)).info.status == "FAILED"
    assert here.get_run(resolve(child.run_key)).data.metrics == {"loss": 1.0}


def test_a_running_stage_is_left_alone_and_a_killed_one_is_replayed(here, tmp_path):
    with Tracker("live", "live_train@a", {}) as tr:
        tr.checkpoint()
        report = sync(on_error="fail")
        assert (report.journals, report.running) == (0, 1), "a running stage's journal is not replayed"
    assert sync(on_error="fail").journals == 1
    script = ("import os\nfrom pipeline.tracking import Tracker\n"
              "with Tracker('killed', 'killed_train@a', {}) as tr:\n"
              "    with tr.child('part0') as run:\n        run.log_metrics({'acc': 0.5})\n"
              "    tr.checkpoint()\n    print(tr.parent.run_key, run.run_key, flush=True)\n"
              "    with tr.child('part1') as run:\n        os._exit(9)\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=os.environ, capture_output=True, text=True)
    assert out.returncode == 9, out.stderr
    parent, part0 = out.stdout.split()
    assert sync(on_error="fail").journals == 1
    assert here.get_run(resolve(parent)).info.status == "KILLED"
    run = here.get_run(resolve(part0))
    assert run.info.status == "FINISHED" and run.data.metrics == {"acc": 0.5}


def test_two_syncs_at_once_log_every_run_once(here, tmp_path):
    parents = [record("twosyncs", tmp_path / f"u{i}")[0] for i in range(4)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-m", "pipeline.tracking", "sync", "--on-error", "fail"], cwd=ROOT,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    synced = sorted(int(o.split("]")[1].split()[0]) for o, _ in outs)
    assert synced == [0, 4], outs  # one process replayed all four, the other found nothing left
    for key in parents:
        (run,) = runs_with_key(here, "twosyncs", key)
        children = here.search_runs([run.info.experiment_id], f"tags.mlflow.parentRunId = '{run.info.run_id}'")
        assert sorted(c.info.run_name for c in children) == ["bad", "good"]
    assert len(here.search_runs([here.get_experiment_by_name("twosyncs").experiment_id], "")) == 4 * 3


def test_an_unreachable_store_warns_or_fails_as_configured(monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # nothing listens on port 9
    # direct: at the stage
    monkeypatch.setenv("TRAINSCAPE_TRACKING", "direct")
    with pytest.warns(UserWarning, match="MLflow tracking failed"), Tracker("x", "x_train@a", {}) as tr:
        with tr.child("c") as run:
            run.log_metrics({"a": 1.0})
    with pytest.raises(Exception):  # noqa: B017
        with Tracker("x", "x_train@a", {}, on_error="fail"):
            pass
    # journal: the stage does not notice; the sync warns and keeps the journal, or fails
    monkeypatch.setenv("TRAINSCAPE_TRACKING", "journal")
    with Tracker("x", "x_train@a", {}) as tr:
        tr.parent.log_metrics({"a": 1.0})
    with pytest.warns(UserWarning, match="MLflow sync of x_train@a-.* failed"):
        report = sync()
    assert (report.journals, report.failed) == (0, 1) and len(pending()) == 1
    with pytest.raises(Exception):  # noqa: B017
        sync(on_error="fail")
    assert len(pending()) == 1 and resolve(tr.parent.run_key) is None
