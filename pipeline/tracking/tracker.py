"""The :class:`Tracker` a stage logs through: a parent run per stage execution, a child run per training
configuration, into the journal (the default) or straight into MLflow (``TRAINSCAPE_TRACKING=direct``)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline.config import ConfigError
from pipeline.tracking.journal import Journal, new_key, now_ms
from pipeline.tracking.store import MAX_PARAM_LEN, Direct

MODE_ENV = "TRAINSCAPE_TRACKING"
OFF_VALUES = ("off", "0", "false", "no")
MODES = ("journal", "direct", "off")


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


class RunLogger:
    """Logs into one run (a key in journal mode, an MLflow run id in direct mode)."""

    def __init__(self, tracker: Tracker, run_key: str | None):
        self._t = tracker
        self.run_key = run_key

    @property
    def enabled(self) -> bool:
        return self.run_key is not None

    def log_params(self, params: Mapping[str, Any]) -> None:
        if params:
            self._t._call("log", self.run_key, params=[(str(k), _param_str(v)) for k, v in params.items()])

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        if tags:
            self._t._call("log", self.run_key, tags={k: str(v) for k, v in tags.items()})

    def log_metrics(self, metrics: Mapping[str, float], step: int = 0) -> None:
        ts = now_ms()
        if metrics:
            self._t._call("log", self.run_key, metrics=[(k, float(v), ts, int(step)) for k, v in metrics.items()])

    def log_many(self, metrics: Mapping[str, float], series: Mapping[str, Series]) -> None:
        """Final metrics (step 0, now) and whole series in as few batches as possible.

        A series is ``(steps, values)`` or ``(steps, values, times)``: each step gets its own
        timestamp, its wall time where the study gives one (seconds since the epoch, as
        ``time.time()``), else spread over the run's life by :func:`step_timestamps`.
        """
        now = now_ms()
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
                                 self._t._started.get(self.run_key or "", now), now)
        for key, (stp, vals, times) in parsed.items():
            items += [(key, v, ts, st) for st, v, ts in zip(stp, vals, spread[key] if times is None else times)]
        if items:
            self._t._call("log", self.run_key, metrics=items)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        self._t._call("artifact", self.run_key, path, artifact_path)


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
        self._sink: Direct | Journal | None = None
        self._experiment_id: str | None = None
        self._started: dict[str, int] = {}  # run id → start (ms): series without times spread from there
        self.parent = RunLogger(self, None)

    # -- plumbing -------------------------------------------------------------------------------
    def _call(self, method: str, run_key: str | None, *args: Any, **kwargs: Any) -> Any:
        if self._sink is None or run_key is None:
            return None
        try:
            return getattr(self._sink, method)(run_key, *args, **kwargs)
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
        start = now_ms()
        try:
            run_key = self._sink.start(name, tags, parent_id, start)
        except Exception as exc:
            self._fail(exc)
            return None
        self._started[run_key] = start
        return run_key

    def _log_inputs(self, run_key: str | None) -> None:
        if self.datasets:
            self._call("inputs", run_key, self.datasets)

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
                self._sink = Direct(self.study)
                self._experiment_id = self._sink.experiment_id
            else:
                self._sink = Journal(self.study, self.stage, new_key())
        except Exception as exc:
            self._fail(exc)
            self._sink = None
            return self
        self.parent = RunLogger(self, self._start(self.stage, self.tags, None))
        if self.params:
            self.parent.log_params(self.params)
        self._log_inputs(self.parent.run_key)
        self.checkpoint()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._call("end", self.parent.run_key, "FAILED" if exc_type else "FINISHED")
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
        run_key = None
        if self.parent.run_key is not None:
            run_key = self._start(name, {**self.tags, **(tags or {})}, self.parent.run_key)
        run = ChildRun(self, run_key)
        self._log_inputs(run_key)
        if params:
            run.log_params(params)
        try:
            yield run
        except BaseException:
            self._call("end", run_key, "FAILED")
            self.checkpoint()
            raise
        self._call("end", run_key, "FAILED" if run.failed else "FINISHED")
        self.checkpoint()


class ChildRun(RunLogger):
    failed: bool = False

    def fail(self, reason: str) -> None:
        """Mark the run FAILED (diverged, stopped learning) without raising."""
        self.failed = True
        self.set_tags({"failure_reason": reason})
