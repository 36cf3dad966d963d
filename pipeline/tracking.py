"""The one tracking module: MLflow runs for every stage execution, journaled by the stage and
replayed into MLflow by :func:`sync`.

Layout: one experiment per study (named after it), a parent run per stage execution (named after
the DVC stage), a child run per training configuration. Every run carries the provenance tags of
:func:`provenance_tags`. MLflow is an index over the DVC outputs, which stay canonical: with
``tracking.on_error: warn`` a tracking failure warns instead of failing (the stage, or the sync).

Modes, from ``TRAINSCAPE_TRACKING``:

* ``journal`` (the default): the stage process never imports MLflow (importing its client and SQL
  store and creating runs cost about 3.7 s of every stage). The :class:`Tracker` records every call
  it would make in a journal, the folder ``<store root>/.trainscape/journal/<stage>-<key>/``: numbered
  segments, each written atomically (at the start, after each part of a resumable unit, at exit,
  FAILED on an exception), and the logged files hard-linked as they were when logged. Each run gets a
  key, a uuid4 hex like an MLflow run id: ``run_id`` returns it and ``meta.json``, sidecars and
  ``claims.json`` record it as ``mlflow_run_id``. :func:`sync` (the report stage, ``make ui``,
  ``python -m pipeline.tracking sync``) replays the journals into MLflow with their original times,
  tags each run ``trainscape.run_key=<key>`` and keeps the map key → run id that :func:`resolve`
  reads (the gallery's links resolve through it). Runs appear in MLflow after that sync.
* ``direct``: every call goes to MLflow from the stage itself, run ids are MLflow's (for debugging).
* ``off`` (also ``0``, ``false``, ``no``; or ``tracking.enabled: false``): nothing is recorded.

Store: ``MLFLOW_TRACKING_URI`` if set, else ``sqlite:///<repo>/mlflow.db``; artifacts always go to
``<repo>/mlartifacts/<study>`` (never the current directory, which DVC experiments move). ``<repo>``
is ``DVC_ROOT`` when DVC sets it, so queued experiments journal and log into the real repository.
A journal replays into the store its stage was pointed at. ``TRAINSCAPE_JOURNAL`` moves the
journal folder (the tests keep theirs in a temporary folder).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import sys
import time
import uuid
import warnings
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.config import ConfigError, load_params
from pipeline.io import read_json, write_bytes, write_json
from pipeline.paths import store_root
from pipeline.provenance import git_state

MAX_PARAMS_PER_BATCH = 100
MAX_TAGS_PER_BATCH = 100
MAX_METRICS_PER_BATCH = 1000
MAX_ENTITIES_PER_BATCH = 1000  # params + tags + metrics in one log_batch
MAX_PARAM_LEN = 6000
# MLflow 3 opens an experiment on its GenAI overview unless it is marked as model development
EXPERIMENT_TAGS = {"mlflow.experimentKind": "custom_model_development"}
PARENT_TAG = "mlflow.parentRunId"
RUN_KEY_TAG = "trainscape.run_key"
MODE_ENV = "TRAINSCAPE_TRACKING"
JOURNAL_ENV = "TRAINSCAPE_JOURNAL"
OFF_VALUES = ("off", "0", "false", "no")
MODES = ("journal", "direct", "off")
TERMINAL = ("FINISHED", "FAILED", "KILLED")
LOCK, SYNC_LOCK, RUN_MAP, SYNCED = "lock", "sync.lock", "runs.json", "synced"


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{store_root() / 'mlflow.db'}"


def artifact_location(study: str) -> str:
    return (store_root() / "mlartifacts" / study).as_uri()


def tracking_mode() -> str:
    """``journal`` (unset or empty too), ``direct`` or ``off``; any other value is a ConfigError."""
    raw = os.environ.get(MODE_ENV, "")
    value = raw.strip().lower()
    if value in ("", "journal"):
        return "journal"
    if value == "direct":
        return "direct"
    if value in OFF_VALUES:
        return "off"
    raise ConfigError(f"{MODE_ENV} = {raw!r} is not allowed; allowed: 'journal' (the default, also when unset), "
                      f"'direct' (log from the stage itself), 'off' (or {', '.join(OFF_VALUES[1:])})")


def tracking_disabled_by_env() -> bool:
    return tracking_mode() == "off"


def journal_dir() -> Path:
    """Where stages journal and :func:`sync` replays from (ignored by git and DVC)."""
    if os.environ.get(JOURNAL_ENV):
        return Path(os.environ[JOURNAL_ENV]).resolve()
    return store_root() / ".trainscape" / "journal"


def new_key() -> str:
    """A run's key: a uuid4 in hex, the shape of an MLflow run id."""
    return uuid.uuid4().hex


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


def _now_ms() -> int:
    return int(time.time() * 1000)


ParamItems = Iterable[tuple[str, str]]
MetricItems = Iterable[tuple[str, float, int, int]]  # key, value, timestamp (ms), step


# -- MLflow itself: the direct mode and the replay -------------------------------------------------


class _Store:
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


class _Direct:
    """``TRAINSCAPE_TRACKING=direct``: every call straight to MLflow; run ids are MLflow's."""

    def __init__(self, study: str):
        self.store = _Store(tracking_uri())
        self.experiment_id = self.store.experiment(study, artifact_location(study))

    def start(self, name: str, tags: Mapping[str, str], parent: str | None) -> str:
        return self.store.create_run(self.experiment_id, name, tags, parent)

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


# -- the journal --------------------------------------------------------------------------------


def _folder_name(stage: str, key: str) -> str:
    return f"{re.sub(r'[^A-Za-z0-9_.@=-]', '_', stage)}-{key}"


class _Journal:
    """The default mode: the calls of one stage execution, recorded in ``<journal_dir>/<stage>-<key>/``.

    The folder appears (renamed from a hidden one) only once it holds its first segment and its
    ``lock`` is held: while the lock is held the stage is alive; a folder without a closing segment
    whose lock is free belongs to a killed stage (its open runs replay as KILLED).
    """

    def __init__(self, study: str, stage: str, key: str):
        self.key = key
        self.header = {"version": 1, "key": key, "study": study, "stage": stage, "uri": tracking_uri(),
                       "artifact_location": artifact_location(study)}
        final = journal_dir() / _folder_name(stage, key)
        self.path = final.with_name(f".{final.name}.tmp")
        self.path.mkdir(parents=True)
        self._lock = os.open(self.path / LOCK, os.O_CREAT | os.O_RDWR, 0o644)
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        self.events: list[list[Any]] = []
        self.segments = 0
        self.files = 0
        self._final = final

    def start(self, name: str, tags: Mapping[str, str], parent: str | None) -> str:
        key = self.key if parent is None else new_key()  # a journal holds one parent run, its own key
        self.events.append(["run", key, name, parent, _now_ms(), dict(tags)])
        return key

    def log(self, run: str, *, params: ParamItems = (), metrics: MetricItems = (),
            tags: Mapping[str, str] | None = None) -> None:
        if params:
            self.events.append(["params", run, [list(p) for p in params]])
        if tags:
            self.events.append(["tags", run, {k: str(v) for k, v in tags.items()}])
        if metrics:
            self.events.append(["metrics", run, [list(m) for m in metrics]])

    def inputs(self, run: str, datasets: Mapping[str, Mapping[str, str]]) -> None:
        self.events.append(["inputs", run, {k: dict(v) for k, v in datasets.items()}])

    def artifact(self, run: str, path: str | Path, artifact_path: str | None) -> None:
        """Hard-link the file as it is now (a later atomic rewrite replaces the output's inode, not this
        one; a file logged inside an ``atomic_dir`` temp folder survives the swap); copy across devices."""
        self.files += 1
        rel = f"files/{self.files}/{Path(path).name}"
        dst = self.path / rel
        dst.parent.mkdir(parents=True)
        try:
            os.link(path, dst)
        except OSError:
            shutil.copy2(path, dst)
        self.events.append(["artifact", run, rel, artifact_path])

    def end(self, run: str, status: str) -> None:
        self.events.append(["end", run, status, _now_ms()])

    def checkpoint(self, closed: bool = False) -> None:
        """Write the events since the last segment as the next segment (atomically)."""
        self.segments += 1
        seg = {**self.header, "segment": self.segments, "written": _now_ms(), "closed": closed,
               "events": self.events}
        write_bytes(self.path / f"seg-{self.segments:06d}.json", json.dumps(seg, separators=(",", ":")).encode())
        self.events = []
        if self.path != self._final:
            os.replace(self.path, self._final)
            self.path = self._final

    def close(self) -> None:
        try:
            self.checkpoint(closed=True)
        finally:
            os.close(self._lock)


# -- the tracker --------------------------------------------------------------------------------


class RunLogger:
    """Logs into one run (a key in journal mode, an MLflow run id in direct mode)."""

    def __init__(self, tracker: Tracker, run_id: str | None):
        self._t = tracker
        self.run_id = run_id

    @property
    def enabled(self) -> bool:
        return self.run_id is not None

    def log_params(self, params: Mapping[str, Any]) -> None:
        if params:
            self._t._call("log", self.run_id, params=[(str(k), _param_str(v)) for k, v in params.items()])

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        if tags:
            self._t._call("log", self.run_id, tags={k: str(v) for k, v in tags.items()})

    def log_metrics(self, metrics: Mapping[str, float], step: int = 0) -> None:
        ts = _now_ms()
        if metrics:
            self._t._call("log", self.run_id, metrics=[(k, float(v), ts, int(step)) for k, v in metrics.items()])

    def log_many(self, metrics: Mapping[str, float], series: Mapping[str, tuple[Iterable[int], Iterable[float]]]
                 ) -> None:
        """Final metrics (step 0) and whole series (key -> (steps, values)) in as few batches as possible."""
        ts = _now_ms()
        items = [(k, float(v), ts, 0) for k, v in metrics.items()]
        for key, (steps, values) in series.items():
            stp, vals = list(steps), [float(v) for v in values]
            if len(stp) != len(vals):
                raise ValueError(f"metric {key}: {len(vals)} values but {len(stp)} steps")
            items += [(key, v, ts, int(s)) for s, v in zip(stp, vals)]
        if items:
            self._t._call("log", self.run_id, metrics=items)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        self._t._call("artifact", self.run_id, path, artifact_path)


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
        self.mode = tracking_mode() if enabled else "off"
        self.enabled = self.mode != "off"
        self.on_error = on_error
        self._sink: _Direct | _Journal | None = None
        self._experiment_id: str | None = None
        self.parent = RunLogger(self, None)

    # -- plumbing -------------------------------------------------------------------------------
    def _call(self, method: str, run_id: str | None, *args: Any, **kwargs: Any) -> Any:
        if self._sink is None or run_id is None:
            return None
        try:
            return getattr(self._sink, method)(run_id, *args, **kwargs)
        except Exception as exc:  # MLflow is an index; the stage's outputs stay canonical
            self._fail(exc)
            return None

    def _fail(self, exc: Exception) -> None:
        if self.on_error == "fail":
            raise exc
        warnings.warn(f"MLflow tracking failed ({type(exc).__name__}: {exc}); outputs are unaffected",
                      stacklevel=3)

    def _start(self, name: str, tags: Mapping[str, str], parent_id: str | None) -> str | None:
        if self._sink is None:
            return None
        try:
            return self._sink.start(name, tags, parent_id)
        except Exception as exc:
            self._fail(exc)
            return None

    def _log_inputs(self, run_id: str | None) -> None:
        if self.datasets:
            self._call("inputs", run_id, self.datasets)

    # -- public ---------------------------------------------------------------------------------
    @property
    def experiment_id(self) -> str | None:
        """The MLflow experiment's id in direct mode; None in journal mode (known once synced)."""
        return self._experiment_id

    def __enter__(self) -> Tracker:
        """Open the journal (or the store, in direct mode) and the parent run, log the params and
        datasets. (This stays on the stage's main thread: connecting on a background thread while the
        study computed was tried, and two threads importing packages at once handed plotly MLflow's
        half-imported pandas.)"""
        if not self.enabled:
            return self
        try:
            if self.mode == "direct":
                self._sink = _Direct(self.study)
                self._experiment_id = self._sink.experiment_id
            else:
                self._sink = _Journal(self.study, self.stage, new_key())
        except Exception as exc:
            self._fail(exc)
            self._sink = None
            return self
        self.parent = RunLogger(self, self._start(self.stage, self.tags, None))
        if self.params:
            self.parent.log_params(self.params)
        self._log_inputs(self.parent.run_id)
        self.checkpoint()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._call("end", self.parent.run_id, "FAILED" if exc_type else "FINISHED")
        if self._sink is not None:
            sink, self._sink = self._sink, None
            try:
                sink.close()
            except Exception as err:
                self._fail(err)

    def checkpoint(self) -> None:
        """Persist what was recorded so far (journal mode; a no-op otherwise): a resumable unit calls
        it after each part, so a killed stage's finished parts still reach MLflow."""
        if self._sink is not None:
            try:
                self._sink.checkpoint()
            except Exception as exc:
                self._fail(exc)

    @contextlib.contextmanager
    def child(self, name: str, params: Mapping[str, Any] | None = None,
              tags: Mapping[str, str] | None = None) -> Iterator[ChildRun]:
        """A child run per training configuration; ``run.fail(reason)`` marks it FAILED."""
        run_id = None
        if self.parent.run_id is not None:
            run_id = self._start(name, {**self.tags, **(tags or {})}, self.parent.run_id)
        run = ChildRun(self, run_id)
        self._log_inputs(run_id)
        if params:
            run.log_params(params)
        try:
            yield run
        except BaseException:
            self._call("end", run_id, "FAILED")
            raise
        self._call("end", run_id, "FAILED" if run.failed else "FINISHED")


class ChildRun(RunLogger):
    failed: bool = False

    def fail(self, reason: str) -> None:
        """Mark the run FAILED (diverged, stopped learning) without raising."""
        self.failed = True
        self.set_tags({"failure_reason": reason})


# -- sync: journals into MLflow -------------------------------------------------------------------


@dataclass
class _Run:
    key: str
    name: str
    parent: str | None
    start: int
    tags: dict[str, str]
    params: list[tuple[str, str]] = field(default_factory=list)
    later_tags: dict[str, str] = field(default_factory=dict)
    metrics: list[tuple[str, float, int, int]] = field(default_factory=list)
    inputs: list[dict[str, dict[str, str]]] = field(default_factory=list)
    artifacts: list[tuple[str, str | None]] = field(default_factory=list)
    status: str | None = None
    end: int | None = None


def _fold(events: Iterable[list[Any]]) -> dict[str, _Run]:
    """A journal's events as runs in creation order, each with everything logged to it."""
    runs: dict[str, _Run] = {}
    for ev in events:
        kind, key = ev[0], ev[1]
        if kind == "run":
            runs[key] = _Run(key, ev[2], ev[3], ev[4], ev[5])
            continue
        run = runs[key]
        if kind == "params":  # MLflow keeps a param's first value (a second one is refused)
            seen = {k for k, _ in run.params}
            run.params += [(k, v) for k, v in ev[2] if k not in seen]
        elif kind == "tags":
            run.later_tags.update(ev[2])
        elif kind == "metrics":
            run.metrics += [tuple(m) for m in ev[2]]
        elif kind == "inputs":
            run.inputs.append(ev[2])
        elif kind == "artifact":
            run.artifacts.append((ev[2], ev[3]))
        elif kind == "end":
            run.status, run.end = ev[2], ev[3]
    return runs


@dataclass
class _Pending:
    path: Path
    header: dict[str, Any]
    events: list[list[Any]]
    closed: bool
    written: int


def _segments(path: Path) -> list[dict[str, Any]]:
    return [read_json(s) for s in sorted(path.glob("seg-*.json"))]


def _read_journal(path: Path) -> _Pending | None:
    """A journal folder that can be replayed now: closed, or its stage is dead (its lock is free).
    None while its stage still runs."""
    data = _segments(path)
    if data and not data[-1]["closed"]:
        try:
            fd = os.open(path / LOCK, os.O_RDWR)
        except FileNotFoundError:
            fd = None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return None  # the stage is still running
            finally:
                os.close(fd)
        data = _segments(path)  # it may have closed the journal between the first read and the lock
    if not data:
        return None
    header = {k: v for k, v in data[0].items() if k not in ("segment", "written", "closed", "events")}
    return _Pending(path, header, [ev for d in data for ev in d["events"]], bool(data[-1]["closed"]),
                    data[-1]["written"])


def _replay(store: _Store, journal: _Pending) -> dict[str, dict[str, str]]:
    """One journal into MLflow. A run already there with its key (an earlier sync stopped before it
    moved the journal) is reused, never logged twice; one left unfinished by a crashed sync is
    deleted and logged afresh. Each run is created, logged and terminated before the next."""
    h = journal.header
    runs = _fold(journal.events)
    experiment_id = store.experiment(h["study"], h["artifact_location"])
    existing: dict[str, Any] = {}
    found = store.search(experiment_id, f"tags.`{RUN_KEY_TAG}` = '{h['key']}'")
    if found:
        existing[h["key"]] = found[0]
        for run in store.search(experiment_id, f"tags.`{PARENT_TAG}` = '{found[0].info.run_id}'"):
            existing.setdefault(run.data.tags.get(RUN_KEY_TAG, ""), run)
    ids: dict[str, str] = {}
    for key, run in runs.items():
        old = existing.get(key)
        if old is not None and old.info.status in TERMINAL:
            ids[key] = old.info.run_id
            continue
        if old is not None:
            store.client.delete_run(old.info.run_id)
        parent = ids.get(run.parent) if run.parent else None
        tags = {**run.tags, **run.later_tags, RUN_KEY_TAG: key}  # tags set later go in with the run
        rid = store.create_run(experiment_id, run.name, tags, parent, run.start)
        store.log(rid, params=run.params, metrics=run.metrics)
        for datasets in run.inputs:
            store.inputs(rid, datasets)
        for rel, artifact_path in run.artifacts:
            store.artifact(rid, journal.path / rel, artifact_path)
        store.end(rid, run.status or "KILLED", run.end or journal.written)
        ids[key] = rid
    return {k: {"run_id": v, "experiment_id": experiment_id, "experiment": h["study"]} for k, v in ids.items()}


def run_map(folder: Path | None = None) -> dict[str, dict[str, str]]:
    """Every synced key → ``{run_id, experiment_id, experiment}``."""
    path = (folder or journal_dir()) / RUN_MAP
    return read_json(path) if path.exists() else {}


def resolve(key: str | None, folder: Path | None = None) -> str | None:
    """The MLflow run id of a run key, once synced (None before)."""
    return run_map(folder).get(key or "", {}).get("run_id")


@dataclass
class SyncReport:
    journals: int = 0  # replayed now
    runs: int = 0
    running: int = 0  # left for a later sync: their stage still runs
    failed: int = 0  # left for a later sync: MLflow refused (on_error: warn)
    seconds: float = 0.0

    def line(self) -> str:
        return (f"[tracking] {self.journals} journals ({self.runs} runs) synced into MLflow in {self.seconds:.1f} s"
                + (f"; {self.running} still running" if self.running else "")
                + (f"; {self.failed} failed, left pending" if self.failed else ""))


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def pending(folder: Path | None = None) -> list[Path]:
    """The journal folders not yet synced, oldest first."""
    folder = folder or journal_dir()
    if not folder.is_dir():
        return []
    out = [p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name != SYNCED]
    return sorted(out, key=lambda p: (p / "seg-000001.json").stat().st_mtime if (p / "seg-000001.json").exists()
                  else 0.0)


def sync(folder: Path | None = None, *, on_error: str = "warn", uri: str | None = None) -> SyncReport:
    """Replay every pending journal into MLflow, once, under an exclusive lock (queued experiments
    can run report stages at the same time). A synced journal moves to ``synced/`` without its
    files (MLflow holds copies); the map key → run id is rewritten atomically. ``uri`` overrides the
    store the journals name. MLflow is imported only when a journal is pending."""
    folder = folder or journal_dir()
    report = SyncReport()
    start = time.perf_counter()
    if not pending(folder):
        return report
    folder.mkdir(parents=True, exist_ok=True)
    with _exclusive(folder / SYNC_LOCK):
        mapping = run_map(folder)
        done: list[Path] = []
        stores: dict[str, _Store] = {}
        try:
            for path in pending(folder):
                try:
                    journal = _read_journal(path)
                    if journal is None:
                        report.running += 1
                        continue
                    target = uri or journal.header["uri"]
                    if target not in stores:
                        stores[target] = _Store(target)
                    ids = _replay(stores[target], journal)
                except Exception as exc:
                    report.failed += 1
                    if on_error == "fail":
                        raise
                    warnings.warn(f"MLflow sync of {path.name} failed ({type(exc).__name__}: {exc}); it stays "
                                  "pending, outputs are unaffected", stacklevel=2)
                    continue
                mapping.update(ids)
                done.append(path)
                report.journals += 1
                report.runs += len(ids)
        finally:
            if done:
                write_json(folder / RUN_MAP, mapping)
                (folder / SYNCED).mkdir(exist_ok=True)
                for path in done:
                    shutil.rmtree(path / "files", ignore_errors=True)
                    (path / LOCK).unlink(missing_ok=True)
                    os.replace(path, folder / SYNCED / path.name)
    report.seconds = time.perf_counter() - start
    return report


def main(argv: list[str] | None = None) -> int:
    """``python -m pipeline.tracking sync | resolve KEY``."""
    ap = argparse.ArgumentParser(prog="python -m pipeline.tracking", description="MLflow journals")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sync", help="replay the pending journals into MLflow")
    s.add_argument("--on-error", choices=("warn", "fail"), help="default: tracking.on_error of params.yaml")
    r = sub.add_parser("resolve", help="print the MLflow run id of a run key")
    r.add_argument("key")
    args = ap.parse_args(argv)
    try:
        mode = tracking_mode()
        if args.cmd == "resolve":
            print(resolve(args.key) or "")
            return 0
        if mode == "off":
            print(f"[tracking] {MODE_ENV}=off: nothing synced")
            return 0
        on_error = args.on_error
        if on_error is None:
            try:
                on_error = load_params().tracking.on_error
            except (OSError, ConfigError):
                on_error = "warn"
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(sync(on_error=on_error).line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
