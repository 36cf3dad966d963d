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
  segments, each written atomically (at the start, as each child run ends, after each part of a
  resumable unit, at exit, FAILED on an exception), and the logged files hard-linked as they were
  when logged. Each run gets a key, a uuid4 hex like an MLflow run id: ``run_id`` returns it, the
  stage's run record (:mod:`pipeline.runs`, never a DVC output) links the outputs to it and
  ``claims.json`` records it as ``mlflow_run_id``. :func:`sync` (the
  report stage, ``make ui``, ``python -m pipeline.tracking sync``) replays the journals into MLflow
  with their original times, tags each run ``trainscape.run_key=<key>`` and keeps the map key → run
  id that :func:`resolve` reads (the gallery's links resolve through it). ``sync --follow``
  (:func:`follow`, which ``make ui`` keeps running beside the UI) replays the journals of running
  stages too, as they grow: each child run shows as it ends, the parent RUNNING until its stage
  ends. Each journal's ``replayed.json`` says how much of it is in MLflow, so every pass, and a plain
  sync after them, replays only what is new.
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
import signal
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
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
LOCK, SYNC_LOCK, RUN_MAP, SYNCED, PROGRESS = "lock", "sync.lock", "runs.json", "synced", "replayed.json"
FOLLOW_INTERVAL = 5.0  # seconds between two passes of ``sync --follow``


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
# a metric series: (steps, values), or (steps, values, wall times in seconds since the epoch)
Series = tuple[Iterable[int], Iterable[float]] | tuple[Iterable[int], Iterable[float], Iterable[float]]


def step_timestamps(steps: Mapping[str, Sequence[int]], start: int, end: int) -> dict[str, list[int]]:
    """Timestamps (ms) for series logged without wall times, so MLflow's time axes follow the steps.

    The rule: linear in the step number, the lowest step of all the series at ``start`` (the run's
    start) and the highest at ``end`` (when they are logged: for a child run logged as it ends, its
    end); one step alone sits at ``end``. Within a series different steps get different, increasing
    timestamps, never later than ``end``: where steps lie closer than a millisecond apart the earlier
    ones move earlier (before ``start`` if they must); equal steps share a timestamp.
    """
    every = [s for v in steps.values() for s in v]
    if not every:
        return {k: [] for k in steps}
    lo, hi, span = min(every), max(every), max(end - start, 0)
    out: dict[str, list[int]] = {}
    for key, series in steps.items():
        at: dict[int, int] = {}
        later: int | None = None
        for s in sorted(set(series), reverse=True):
            t = end if hi == lo else start + round((s - lo) * span / (hi - lo))
            at[s] = later = t if later is None else min(t, later - 1)
        out[key] = [at[s] for s in series]
    return out


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

    def start(self, name: str, tags: Mapping[str, str], parent: str | None, start: int) -> str:
        key = self.key if parent is None else new_key()  # a journal holds one parent run, its own key
        self.events.append(["run", key, name, parent, start, dict(tags)])
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
        """Write the events since the last segment as the next segment (atomically); nothing when
        nothing was recorded since (a part's checkpoint right after its child's)."""
        if not self.events and not closed and self.segments:
            return
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

    def log_many(self, metrics: Mapping[str, float], series: Mapping[str, Series]) -> None:
        """Final metrics (step 0, now) and whole series in as few batches as possible.

        A series is ``(steps, values)`` or ``(steps, values, times)``: each step gets its own
        timestamp, its wall time where the study gives one (seconds since the epoch, as
        ``time.time()``), else spread over the run's life by :func:`step_timestamps`.
        """
        now = _now_ms()
        items = [(k, float(v), now, 0) for k, v in metrics.items()]
        parsed: dict[str, tuple[list[int], list[float], list[int] | None]] = {}
        for key, s in series.items():
            stp, vals = [int(x) for x in s[0]], [float(v) for v in s[1]]
            times = [round(float(t) * 1000) for t in s[2]] if len(s) > 2 else None
            if len(stp) != len(vals) or (times is not None and len(times) != len(stp)):
                raise ValueError(f"metric {key}: {len(stp)} steps, {len(vals)} values"
                                 + (f", {len(times)} times" if times is not None else ""))
            parsed[key] = (stp, vals, times)
        spread = step_timestamps({k: p[0] for k, p in parsed.items() if p[2] is None},
                                 self._t._started.get(self.run_id or "", now), now)
        for key, (stp, vals, times) in parsed.items():
            items += [(key, v, ts, st) for st, v, ts in zip(stp, vals, spread[key] if times is None else times)]
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
        self._started: dict[str, int] = {}  # run id → start (ms): series without times spread from there
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
        start = _now_ms()
        try:
            run_id = self._sink.start(name, tags, parent_id, start)
        except Exception as exc:
            self._fail(exc)
            return None
        self._started[run_id] = start
        return run_id

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
        """Persist what was recorded so far (journal mode; a no-op otherwise): every child run calls it
        as it ends, a resumable unit after each part, so a killed stage's finished parts still reach
        MLflow and ``sync --follow`` shows them while the stage runs."""
        if self._sink is not None:
            try:
                self._sink.checkpoint()
            except Exception as exc:
                self._fail(exc)

    @contextlib.contextmanager
    def child(self, name: str, params: Mapping[str, Any] | None = None,
              tags: Mapping[str, str] | None = None) -> Iterator[ChildRun]:
        """A child run per training configuration; ``run.fail(reason)`` marks it FAILED. The journal is
        written as the run ends, so ``sync --follow`` shows it within seconds (a multi-hour stage's)."""
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
            self.checkpoint()
            raise
        self._call("end", run_id, "FAILED" if run.failed else "FINISHED")
        self.checkpoint()


class ChildRun(RunLogger):
    failed: bool = False

    def fail(self, reason: str) -> None:
        """Mark the run FAILED (diverged, stopped learning) without raising."""
        self.failed = True
        self.set_tags({"failure_reason": reason})


# -- sync: journals into MLflow -------------------------------------------------------------------


@dataclass
class _Run:
    """What a run got in some events of its journal; ``name`` is None when the run was created in
    events replayed earlier."""

    key: str
    name: str | None = None
    parent: str | None = None
    start: int = 0
    tags: dict[str, str] = field(default_factory=dict)
    params: list[tuple[str, str]] = field(default_factory=list)
    later_tags: dict[str, str] = field(default_factory=dict)
    metrics: list[tuple[str, float, int, int]] = field(default_factory=list)
    inputs: list[dict[str, dict[str, str]]] = field(default_factory=list)
    artifacts: list[tuple[str, str | None]] = field(default_factory=list)
    status: str | None = None
    end: int | None = None


def _fold(events: Iterable[list[Any]]) -> dict[str, _Run]:
    """Events as runs in the order they first appear, each with everything logged to it."""
    runs: dict[str, _Run] = {}
    for ev in events:
        kind, key = ev[0], ev[1]
        run = runs.setdefault(key, _Run(key))
        if kind == "run":
            run.name, run.parent, run.start, run.tags = ev[2], ev[3], ev[4], ev[5]
        elif kind == "params":  # MLflow keeps a param's first value (a second one is refused)
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
class _Progress:
    """How much of one journal is in MLflow: ``replayed.json`` beside its segments, rewritten atomically
    under the sync lock, so each pass (of ``sync --follow``, or a plain sync after it) replays only the
    segments written since and never creates a run twice."""

    segments: int = 0  # segments 1..segments are in MLflow, every event of them
    applying: int = 0  # > segments while a pass runs: a pass that died left it, the next one looks in MLflow
    closed: bool = False
    written: int = 0  # when the last replayed segment was written: the end of runs a killed stage left open
    header: dict[str, Any] = field(default_factory=dict)
    experiment_id: str = ""
    ids: dict[str, str] = field(default_factory=dict)  # run key → MLflow run id
    open: dict[str, list[str]] = field(default_factory=dict)  # runs not ended in MLflow → their params' names

    @classmethod
    def load(cls, path: Path) -> _Progress:
        file = path / PROGRESS
        return cls(**read_json(file)) if file.exists() else cls()

    def save(self, path: Path) -> None:
        write_json(path / PROGRESS, asdict(self))


@dataclass
class _Pending:
    """The part of a journal a pass replays: its events in the segments not replayed yet, up to ``last``."""

    path: Path
    header: dict[str, Any]
    events: list[list[Any]]
    closed: bool
    written: int
    final: bool = True  # closed, or its stage is dead: nothing more will come
    last: int = 0


def _segments(path: Path, after: int = 0) -> list[dict[str, Any]]:
    files = sorted(path.glob("seg-*.json"))
    return [read_json(s) for s in files if int(s.stem.removeprefix("seg-")) > after]


def _stage_alive(path: Path) -> bool:
    """The stage holds its journal's lock while it runs."""
    try:
        fd = os.open(path / LOCK, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _read_journal(path: Path, progress: _Progress | None = None, live: bool = False) -> _Pending | None:
    """What of a journal folder can be replayed now: the segments after those ``progress`` holds; final
    when it is closed or its stage is dead (its lock is free). While its stage runs: None, or with
    ``live`` (the follow mode) the segments written so far."""
    prog = progress or _Progress()
    data = _segments(path, prog.segments)
    closed = bool(data[-1]["closed"]) if data else prog.closed
    alive = False
    if not closed and (data or prog.segments):
        alive = _stage_alive(path)
        if not alive:  # it may have closed the journal between the first read and the lock
            data = _segments(path, prog.segments)
            closed = bool(data[-1]["closed"]) if data else prog.closed
    if (alive and not live) or not (data or prog.segments):
        return None
    header = prog.header or {k: v for k, v in data[0].items() if k not in ("segment", "written", "closed", "events")}
    return _Pending(path, header, [ev for d in data for ev in d["events"]], closed,
                    data[-1]["written"] if data else prog.written, final=not alive,
                    last=data[-1]["segment"] if data else prog.segments)


def _existing(store: _Store, experiment_id: str, key: str, prog: _Progress) -> dict[str, Any]:
    """The journal's runs already in MLflow, by key: what a pass that died left there."""
    found: dict[str, Any] = {}
    parent_id = prog.ids.get(key)
    if parent_id is None:
        hits = store.search(experiment_id, f"tags.`{RUN_KEY_TAG}` = '{key}'")
        if not hits:
            return found
        found[key] = hits[0]
        parent_id = hits[0].info.run_id
    for run in store.search(experiment_id, f"tags.`{PARENT_TAG}` = '{parent_id}'"):
        found.setdefault(run.data.tags.get(RUN_KEY_TAG, ""), run)
    return found


def _replay(store: _Store, journal: _Pending, prog: _Progress) -> int:
    """A journal's new events into MLflow; returns how many runs it mapped now.

    A run is created once (with its tags, its start no later than its first metric), then gets what
    it logs, and is ended when its end is journaled; while the stage runs its parent stays RUNNING;
    when the journal is final, the runs it left open end KILLED. ``prog`` is saved after the pass (and
    marked before it): a pass that died is redone, reusing the runs it created (found by their key
    tag; one ended then is complete) and logging again only what MLflow keeps once (metrics with
    their timestamps, params, tags, inputs and artifacts are all idempotent)."""
    h = journal.header
    experiment_id = prog.experiment_id or store.experiment(h["study"], h["artifact_location"])
    prog.header, prog.experiment_id = h, experiment_id
    recover = prog.applying > prog.segments or prog.segments == 0  # also: journals an older sync replayed
    if journal.last > prog.segments:
        prog.applying = journal.last
        prog.save(journal.path)
    existing = _existing(store, experiment_id, h["key"], prog) if recover else {}
    before = len(prog.ids)
    try:
        for key, run in _fold(journal.events).items():
            rid, fresh = prog.ids.get(key), False
            if rid is None:
                old = existing.get(key)
                if old is not None:
                    rid = prog.ids[key] = old.info.run_id
                    if old.info.status in TERMINAL:
                        continue
                    prog.open[key] = sorted(old.data.params)
                elif run.name is None:
                    raise RuntimeError(f"{journal.path.name}: events of run {key} whose creation is not in MLflow "
                                       f"(remove {PROGRESS} to replay the journal from its start)")
                else:
                    start = min([run.start, *(m[2] for m in run.metrics)])
                    tags = {**run.tags, **run.later_tags, RUN_KEY_TAG: key}  # tags set later go in with the run
                    rid = store.create_run(experiment_id, run.name, tags, prog.ids.get(run.parent or ""), start)
                    prog.ids[key], prog.open[key], fresh = rid, [], True
            known = set(prog.open.get(key, ()))
            params = [(k, v) for k, v in run.params if k not in known]
            store.log(rid, params=params, metrics=run.metrics, tags=None if fresh else run.later_tags)
            if key in prog.open:
                prog.open[key] = sorted(known | {k for k, _ in params})
            for datasets in run.inputs:
                store.inputs(rid, datasets)
            for rel, artifact_path in run.artifacts:
                store.artifact(rid, journal.path / rel, artifact_path)
            if run.status:
                store.end(rid, run.status, run.end)
                prog.open.pop(key, None)
        if journal.final:
            for key in list(prog.open):
                store.end(prog.ids[key], "KILLED", journal.written)
                del prog.open[key]
        prog.segments, prog.closed, prog.written = journal.last, journal.closed, journal.written
    finally:
        prog.save(journal.path)
    return len(prog.ids) - before


def run_map(folder: Path | None = None) -> dict[str, dict[str, str]]:
    """Every synced key → ``{run_id, experiment_id, experiment}``."""
    path = (folder or journal_dir()) / RUN_MAP
    return read_json(path) if path.exists() else {}


def resolve(key: str | None, folder: Path | None = None) -> str | None:
    """The MLflow run id of a run key, once synced (None before)."""
    return run_map(folder).get(key or "", {}).get("run_id")


@dataclass
class SyncReport:
    journals: int = 0  # replayed to their end now
    runs: int = 0  # runs newly in MLflow
    running: int = 0  # their stage still runs: left for a later sync, or followed (``live``)
    failed: int = 0  # left for a later sync: MLflow refused (on_error: warn)
    updated: int = 0  # journals that brought anything new into MLflow
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
    """The journal folders not yet synced to their end, oldest first."""
    folder = folder or journal_dir()
    if not folder.is_dir():
        return []
    out = [p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name != SYNCED]
    return sorted(out, key=lambda p: (p / "seg-000001.json").stat().st_mtime if (p / "seg-000001.json").exists()
                  else 0.0)


def sync(folder: Path | None = None, *, on_error: str = "warn", uri: str | None = None, live: bool = False,
         stores: dict[str, _Store] | None = None) -> SyncReport:
    """Replay the pending journals into MLflow under an exclusive lock (queued experiments can run
    report stages at the same time), each from where the last pass left it (``replayed.json``). A
    running stage's journal is left for later unless ``live`` (:func:`follow`). A journal replayed to
    its end moves to ``synced/`` without its files (MLflow holds copies); the map key → run id is
    rewritten atomically. ``uri`` overrides the store the journals name; ``stores`` keeps clients
    between passes. MLflow is imported only when a journal has something new."""
    folder = folder or journal_dir()
    report = SyncReport()
    start = time.perf_counter()
    if not pending(folder):
        return report
    stores = {} if stores is None else stores
    folder.mkdir(parents=True, exist_ok=True)
    with _exclusive(folder / SYNC_LOCK):
        mapping = run_map(folder)
        mapped = False
        done: list[Path] = []
        try:
            for path in pending(folder):
                try:
                    prog = _Progress.load(path)
                    journal = _read_journal(path, prog, live)
                    if journal is None or not journal.final:
                        report.running += 1
                    if journal is None or (journal.last == prog.segments and not journal.final):
                        continue
                    target = uri or journal.header["uri"]
                    if target not in stores:
                        stores[target] = _Store(target)
                    new = _replay(stores[target], journal, prog)
                except Exception as exc:
                    report.failed += 1
                    if on_error == "fail":
                        raise
                    warnings.warn(f"MLflow sync of {path.name} failed ({type(exc).__name__}: {exc}); it stays "
                                  "pending, outputs are unaffected", stacklevel=2)
                    continue
                for key, rid in prog.ids.items():
                    entry = {"run_id": rid, "experiment_id": prog.experiment_id, "experiment": prog.header["study"]}
                    if mapping.get(key) != entry:
                        mapping[key], mapped = entry, True
                report.runs += new
                report.updated += 1
                if journal.final:
                    done.append(path)
                    report.journals += 1
        finally:
            if mapped:
                write_json(folder / RUN_MAP, mapping)
            if done:
                (folder / SYNCED).mkdir(exist_ok=True)
                for path in done:
                    shutil.rmtree(path / "files", ignore_errors=True)
                    (path / LOCK).unlink(missing_ok=True)
                    os.replace(path, folder / SYNCED / path.name)
    report.seconds = time.perf_counter() - start
    return report


def follow(folder: Path | None = None, *, interval: float = FOLLOW_INTERVAL, on_error: str = "warn",
           uri: str | None = None, stop: threading.Event | None = None) -> None:
    """Sync every ``interval`` seconds until ``stop`` is set, the journals of running stages included:
    their runs show in MLflow while they run (a child as it ends, the parent RUNNING until its stage
    ends). A pass prints its line when it brought anything new."""
    stop = stop or threading.Event()
    stores: dict[str, _Store] = {}
    while not stop.is_set():
        report = sync(folder, on_error=on_error, uri=uri, live=True, stores=stores)
        if report.updated or report.failed:
            print(report.line(), flush=True)
        stop.wait(interval)


def main(argv: list[str] | None = None) -> int:
    """``python -m pipeline.tracking sync [--follow [--interval S]] | resolve KEY``."""
    ap = argparse.ArgumentParser(prog="python -m pipeline.tracking", description="MLflow journals")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sync", help="replay the pending journals into MLflow")
    s.add_argument("--on-error", choices=("warn", "fail"), help="default: tracking.on_error of params.yaml")
    s.add_argument("--follow", action="store_true",
                   help="keep syncing, running stages included, until interrupted (SIGINT or SIGTERM)")
    s.add_argument("--interval", type=float, default=FOLLOW_INTERVAL, help="seconds between passes of --follow")
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
    if args.follow:
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):  # the pass under way ends first
            signal.signal(sig, lambda *_: stop.set())
        print(f"[tracking] following {journal_dir()} every {args.interval:g} s", flush=True)
        follow(interval=args.interval, on_error=on_error, stop=stop)
        return 0
    print(sync(on_error=on_error).line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
