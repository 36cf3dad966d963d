"""The tracking module against a temporary MLflow store: layout, tags, params, metrics, status."""

import sys

import pytest
from mlflow.tracking import MlflowClient

from pipeline.tracking import Tracker, provenance_tags, tracking_uri


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'm.db'}"
    mp = pytest.MonkeyPatch()
    mp.setenv("MLFLOW_TRACKING_URI", uri)
    tags = provenance_tags(study="unitstudy", stage="unitstudy_train@a", profile="smoke", params_hash="abc",
                           data_sha256={"mnist/x": "f00"})
    with Tracker("unitstudy", "unitstudy_train@a", tags, params={"profile": "smoke", "lr": 0.1}) as tr:
        with tr.child("good", {"init": "glyph", "optimizer": "muon"}) as run:
            run.log_many({}, {"test_acc": ([0, 1, 2], [0.1, 0.5, 0.9])})
        with tr.child("bad", {"init": "random"}) as run:
            run.fail("diverged")
        parent_id = tr.parent.run_id
    mp.undo()
    return MlflowClient(tracking_uri=uri), parent_id


def test_store_defaults_to_repository_sqlite(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    assert tracking_uri().startswith("sqlite:///") and tracking_uri().endswith("/mlflow.db")


def test_parent_run_has_provenance_tags_and_params(logged):
    client, parent_id = logged
    run = client.get_run(parent_id)
    t = run.data.tags
    assert run.info.run_name == "unitstudy_train@a" and run.info.status == "FINISHED"
    assert t["study"] == "unitstudy" and t["profile"] == "smoke" and t["dvc.stage"] == "unitstudy_train@a"
    assert t["params.hash"] == "abc" and t["data.sha256"] == '{"mnist/x": "f00"}'
    assert len(t["git.commit"]) in (40, 7) and t["git.dirty"] in ("true", "false")
    assert run.data.params == {"profile": "smoke", "lr": "0.1"}
    exp = client.get_experiment(run.info.experiment_id)
    assert exp.name == "unitstudy" and exp.artifact_location.endswith("/mlartifacts/unitstudy")


def test_child_runs_nest_and_carry_metric_history(logged):
    client, parent_id = logged
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
        assert tr.parent.run_id is None and run.run_id is None


def test_unreachable_store_warns_but_does_not_fail(monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # nothing listens on port 9
    with pytest.warns(UserWarning, match="MLflow tracking failed"), Tracker("x", "x_train@a", {}) as tr:
        with tr.child("c") as run:
            run.log_metrics({"a": 1.0})
    with pytest.raises(Exception):  # noqa: B017
        with Tracker("x", "x_train@a", {}, on_error="fail"):
            pass
