"""The MLflow store: the only module that imports MLflow. Its calls are batched within MLflow's limits; the
direct mode (:class:`Direct`) makes them from the stage itself, :mod:`pipeline.tracking.sync` from journals."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pipeline.paths import store_root

MAX_PARAMS_PER_BATCH = 100
MAX_TAGS_PER_BATCH = 100
MAX_METRICS_PER_BATCH = 1000
MAX_ENTITIES_PER_BATCH = 1000  # params + tags + metrics in one log_batch
MAX_PARAM_LEN = 6000
EXPERIMENT_TAGS = {"mlflow.experimentKind": "custom_model_development"}
PARENT_TAG = "mlflow.parentRunId"
RUN_KEY_TAG = "trainscape.run_key"
TERMINAL = ("FINISHED", "FAILED", "KILLED")

ParamItems = Iterable[tuple[str, str]]
MetricItems = Iterable[tuple[str, float, int, int]]  # key, value, timestamp (ms), step


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{store_root() / 'mlflow.db'}"


def artifact_location(study: str) -> str:
    return (store_root() / "mlartifacts" / study).as_uri()


class Store:
    """The MLflow calls, batched within MLflow's limits (imported only here)."""

    def __init__(self, uri: str):
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=uri)
        self._experiments: dict[str, str] = {}

    def experiment(self, name: str, location: str) -> str:
        """The study's experiment, marked as model training so the UI lands on its runs table."""
        if name in self._experiments:
            return self._experiments[name]
        exp = self.client.get_experiment_by_name(name)
        if exp is None:
            try:
                eid = self.client.create_experiment(name, artifact_location=location, tags=EXPERIMENT_TAGS)
                self._experiments[name] = eid
                return eid
            except Exception:  # created concurrently
                exp = self.client.get_experiment_by_name(name)
        for key, value in EXPERIMENT_TAGS.items():
            if exp.tags.get(key) != value:
                self.client.set_experiment_tag(exp.experiment_id, key, value)
        self._experiments[name] = exp.experiment_id
        return exp.experiment_id

    def create_run(self, experiment_id: str, name: str, tags: Mapping[str, str], parent_id: str | None,
                   start_time: int | None = None) -> str:
        all_tags = {**tags, **({PARENT_TAG: parent_id} if parent_id else {})}
        return self.client.create_run(experiment_id, start_time=start_time, run_name=name, tags=all_tags).info.run_id

    def log(self, run_id: str, *, params: ParamItems = (), metrics: MetricItems = (),
            tags: Mapping[str, str] | None = None) -> None:
        """As few ``log_batch`` calls as MLflow's limits allow: params, tags and metrics share a batch
        (each call costs several database commits)."""
        from mlflow.entities import Metric, Param, RunTag

        params, metrics, tag_items = list(params), list(metrics), list((tags or {}).items())
        while params or metrics or tag_items:
            p, params = params[:MAX_PARAMS_PER_BATCH], params[MAX_PARAMS_PER_BATCH:]
            t, tag_items = tag_items[:MAX_TAGS_PER_BATCH], tag_items[MAX_TAGS_PER_BATCH:]
            room = min(MAX_METRICS_PER_BATCH, MAX_ENTITIES_PER_BATCH - len(p) - len(t))
            m, metrics = metrics[:room], metrics[room:]
            self.client.log_batch(run_id, params=[Param(k, v) for k, v in p], tags=[RunTag(k, str(v)) for k, v in t],
                                  metrics=[Metric(k, float(v), int(ts), int(step)) for k, v, ts, step in m])

    def inputs(self, run_id: str, datasets: Mapping[str, Mapping[str, str]]) -> None:
        from mlflow.entities import Dataset, DatasetInput, InputTag

        self.client.log_inputs(run_id, datasets=[
            DatasetInput(Dataset(name, d["digest"], "local", d["source"]), [InputTag("mlflow.data.context", "train")])
            for name, d in datasets.items()])

    def artifact(self, run_id: str, path: str | Path, artifact_path: str | None) -> None:
        self.client.log_artifact(run_id, str(path), artifact_path)

    def end(self, run_id: str, status: str, end_time: int | None = None) -> None:
        self.client.set_terminated(run_id, status, end_time=end_time)

    def search(self, experiment_id: str, filter_string: str) -> list[Any]:
        out, token = [], None
        while True:
            page = self.client.search_runs([experiment_id], filter_string, max_results=1000, page_token=token)
            out += list(page)
            token = page.token
            if not token:
                return out


class Direct:
    """``TRAINSCAPE_TRACKING=direct``: every call straight to MLflow; run ids are MLflow's."""

    def __init__(self, study: str):
        self.store = Store(tracking_uri())
        self.experiment_id = self.store.experiment(study, artifact_location(study))

    def start(self, name: str, tags: Mapping[str, str], parent: str | None, start: int) -> str:
        return self.store.create_run(self.experiment_id, name, tags, parent, start)

    def log(self, run: str, **kw: Any) -> None:
        self.store.log(run, **kw)

    def inputs(self, run: str, datasets: Mapping[str, Mapping[str, str]]) -> None:
        self.store.inputs(run, datasets)

    def artifact(self, run: str, path: str | Path, artifact_path: str | None) -> None:
        self.store.artifact(run, path, artifact_path)

    def end(self, run: str, status: str) -> None:
        self.store.end(run, status)

    def checkpoint(self) -> None:
        pass

    def close(self) -> None:
        pass
