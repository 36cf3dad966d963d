"""The one tracking module: MLflow runs for every stage execution.

Layout: one experiment per study (named after it), a parent run per stage execution (named after
the DVC stage), a child run per training configuration. Every run carries the provenance tags of
:func:`provenance_tags`. MLflow is an index over the DVC outputs, which stay canonical: with
``tracking.on_error: warn`` a tracking failure warns instead of failing the stage.

Store: ``MLFLOW_TRACKING_URI`` if set, else ``sqlite:///<repo>/mlflow.db``; artifacts always go to
``<repo>/mlartifacts/<study>`` (never the current directory, which DVC experiments move). ``<repo>``
is ``DVC_ROOT`` when DVC sets it, so queued experiments log into the real repository's store.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from pipeline.paths import store_root
from pipeline.provenance import git_state

MAX_PARAMS_PER_BATCH = 100
MAX_METRICS_PER_BATCH = 1000
MAX_PARAM_LEN = 6000
# MLflow 3 opens an experiment on its GenAI overview unless it is marked as model development
EXPERIMENT_TAGS = {"mlflow.experimentKind": "custom_model_development"}


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{store_root() / 'mlflow.db'}"


def artifact_location(study: str) -> str:
    return (store_root() / "mlartifacts" / study).as_uri()


def tracking_disabled_by_env() -> bool:
    return os.environ.get("TRAINSCAPE_TRACKING", "").lower() in ("0", "off", "false", "no")


def provenance_tags(*, study: str, stage: str, profile: str, params_hash: str,
                    data_sha256: Mapping[str, str]) -> dict[str, str]:
    """The tags every run carries, so a run traces back to commit, params and data."""
    commit, dirty = git_state()
    return {
        "study": study,
        "profile": profile,
        "dvc.stage": stage,
        "dvc.exp_name": os.environ.get("DVC_EXP_NAME", "workspace"),
        "git.commit": commit,
        "git.dirty": str(dirty).lower(),
        "mlflow.source.git.commit": commit,
        "params.hash": params_hash,
        "data.sha256": json.dumps(dict(data_sha256), sort_keys=True),
        # the runs table's Source column: the DVC stage that ran
        "mlflow.source.name": stage,
        "mlflow.source.type": "JOB",
    }


def dataset_inputs(data_sha256: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """``{dataset: {digest, source}}`` from ``{'<dataset>/<file>': sha256}``: what a run logs as its
    MLflow inputs (the UI's Dataset column and lineage). The digest condenses the files' checksums."""
    files: dict[str, list[str]] = {}
    for key, sha in sorted(data_sha256.items()):
        ds, name = key.split("/", 1)
        files.setdefault(ds, []).append(f"{name}:{sha}")
    return {ds: {"digest": hashlib.sha256("\n".join(v).encode()).hexdigest()[:16],
                 "source": json.dumps({"uri": f"artifacts/data/{ds}"})} for ds, v in files.items()}


def _param_str(v: Any) -> str:
    s = json.dumps(v) if isinstance(v, list | tuple | dict) else str(v)
    return s if len(s) <= MAX_PARAM_LEN else s[: MAX_PARAM_LEN - 3] + "..."


class RunLogger:
    """Logs into one MLflow run through the client API (no global active-run state)."""

    def __init__(self, tracker: Tracker, run_id: str | None):
        self._t = tracker
        self.run_id = run_id

    @property
    def enabled(self) -> bool:
        return self.run_id is not None

    def log_params(self, params: Mapping[str, Any]) -> None:
        if not self.enabled:  # tracking off: nothing to log, and MLflow need not be installed
            return
        from mlflow.entities import Param

        items = [Param(str(k), _param_str(v)) for k, v in params.items()]
        for i in range(0, len(items), MAX_PARAMS_PER_BATCH):
            self._t._call("log_batch", self.run_id, params=items[i : i + MAX_PARAMS_PER_BATCH])

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        if not self.enabled:  # tracking off: nothing to log, and MLflow need not be installed
            return
        from mlflow.entities import RunTag

        self._t._call("log_batch", self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def log_metrics(self, metrics: Mapping[str, float], step: int = 0) -> None:
        if not self.enabled:  # tracking off: nothing to log, and MLflow need not be installed
            return
        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        items = [Metric(k, float(v), ts, int(step)) for k, v in metrics.items()]
        self._t._call("log_batch", self.run_id, metrics=items)

    def log_many(self, metrics: Mapping[str, float], series: Mapping[str, tuple[Iterable[int], Iterable[float]]]
                 ) -> None:
        """Final metrics (step 0) and whole series (key -> (steps, values)) in as few batches as possible."""
        if not self.enabled:  # tracking off: nothing to log, and MLflow need not be installed
            return
        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        items = [Metric(k, float(v), ts, 0) for k, v in metrics.items()]
        for key, (steps, values) in series.items():
            stp, vals = list(steps), [float(v) for v in values]
            if len(stp) != len(vals):
                raise ValueError(f"metric {key}: {len(vals)} values but {len(stp)} steps")
            items += [Metric(key, v, ts, int(s)) for s, v in zip(stp, vals)]
        for i in range(0, len(items), MAX_METRICS_PER_BATCH):
            self._t._call("log_batch", self.run_id, metrics=items[i : i + MAX_METRICS_PER_BATCH])

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        self._t._call("log_artifact", self.run_id, str(path), artifact_path)


class Tracker:
    """Context manager for one stage execution: the parent run, and child runs inside it.

    >>> with Tracker("imprint", "imprint_train@glyph-adam", tags) as tr:
    ...     with tr.child("glyph-adam", {"init": "glyph"}) as run:
    ...         run.log_many({"final_acc": accs[-1]}, {"test_acc": (range(len(accs)), accs)})
    """

    def __init__(self, study: str, stage: str, tags: Mapping[str, str], *, params: Mapping[str, Any]
                 | None = None, enabled: bool = True, on_error: str = "warn",
                 datasets: Mapping[str, Mapping[str, str]] | None = None):
        self.study = study
        self.stage = stage
        self.tags = dict(tags)
        self.params = dict(params or {})
        self.datasets = dict(datasets or {})  # see dataset_inputs
        self.enabled = enabled and not tracking_disabled_by_env()
        self.on_error = on_error
        self._client = None
        self._experiment_id: str | None = None
        self.parent = RunLogger(self, None)

    # -- plumbing -------------------------------------------------------------------------------
    def _call(self, method: str, run_id: str | None, *args: Any, **kwargs: Any) -> Any:
        if not self.enabled or self._client is None or run_id is None:
            return None
        try:
            return getattr(self._client, method)(run_id, *args, **kwargs)
        except Exception as exc:  # MLflow is an index; the stage's outputs stay canonical
            self._fail(exc)
            return None

    def _fail(self, exc: Exception) -> None:
        if self.on_error == "fail":
            raise exc
        warnings.warn(f"MLflow tracking failed ({type(exc).__name__}: {exc}); outputs are unaffected",
                      stacklevel=3)

    def _experiment(self) -> str:
        """The study's experiment, marked as model training so the UI lands on its runs table."""
        exp = self._client.get_experiment_by_name(self.study)
        if exp is None:
            try:
                return self._client.create_experiment(self.study, artifact_location=artifact_location(self.study),
                                                      tags=EXPERIMENT_TAGS)
            except Exception:  # created concurrently
                exp = self._client.get_experiment_by_name(self.study)
        for key, value in EXPERIMENT_TAGS.items():
            if exp.tags.get(key) != value:
                self._client.set_experiment_tag(exp.experiment_id, key, value)
        return exp.experiment_id

    def _log_inputs(self, run_id: str | None) -> None:
        if not self.datasets or run_id is None:
            return
        from mlflow.entities import Dataset, DatasetInput, InputTag

        inputs = [DatasetInput(Dataset(name, d["digest"], "local", d["source"]),
                               [InputTag("mlflow.data.context", "train")]) for name, d in self.datasets.items()]
        self._call("log_inputs", run_id, datasets=inputs)

    def _start(self, name: str, tags: Mapping[str, str], parent_id: str | None) -> str | None:
        from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

        all_tags = dict(tags)
        if parent_id:
            all_tags[MLFLOW_PARENT_RUN_ID] = parent_id
        try:
            run = self._client.create_run(self._experiment_id, run_name=name, tags=all_tags)
            return run.info.run_id
        except Exception as exc:
            self._fail(exc)
            return None

    def _end(self, run_id: str | None, status: str) -> None:
        self._call("set_terminated", run_id, status)

    # -- public ---------------------------------------------------------------------------------
    @property
    def experiment_id(self) -> str | None:
        return self._experiment_id

    def __enter__(self) -> Tracker:
        """Open the store and the parent run, log the params and datasets. (This stays on the stage's
        main thread: connecting on a background thread while the study computed was tried, and two
        threads importing packages at once handed plotly MLflow's half-imported pandas.)"""
        if not self.enabled:
            return self
        try:
            from mlflow.tracking import MlflowClient

            self._client = MlflowClient(tracking_uri=tracking_uri())
            self._experiment_id = self._experiment()
        except Exception as exc:
            self._fail(exc)
            self._client = None
            return self
        self.parent = RunLogger(self, self._start(self.stage, self.tags, None))
        if self.params:
            self.parent.log_params(self.params)
        self._log_inputs(self.parent.run_id)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._end(self.parent.run_id, "FAILED" if exc_type else "FINISHED")

    @contextlib.contextmanager
    def child(self, name: str, params: Mapping[str, Any] | None = None,
              tags: Mapping[str, str] | None = None) -> Iterator[ChildRun]:
        """A child run per training configuration; ``run.fail(reason)`` marks it FAILED."""
        run_id = None
        if self.enabled and self._client is not None:
            run_id = self._start(name, {**self.tags, **(tags or {})}, self.parent.run_id)
        run = ChildRun(self, run_id)
        self._log_inputs(run_id)
        if params:
            run.log_params(params)
        try:
            yield run
        except BaseException:
            self._end(run_id, "FAILED")
            raise
        self._end(run_id, "FAILED" if run.failed else "FINISHED")


class ChildRun(RunLogger):
    failed: bool = False

    def fail(self, reason: str) -> None:
        """Mark the run FAILED (diverged, stopped learning) without raising."""
        self.failed = True
        self.set_tags({"failure_reason": reason})
