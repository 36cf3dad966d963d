"""Sync: the journals into MLflow, each from where the last pass left it; ``python -m pipeline.tracking``."""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import shutil
import signal
import sys
import threading
import time
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pipeline.config import ConfigError, load_params
from pipeline.io import read_json, write_json
from pipeline.tracking.journal import LOCK, journal_dir
from pipeline.tracking.store import PARENT_TAG, RUN_KEY_TAG, TERMINAL, Store
from pipeline.tracking.tracker import MODE_ENV, tracking_mode

SYNC_LOCK, RUN_MAP, SYNCED, PROGRESS = "sync.lock", "runs.json", "synced", "replayed.json"
FOLLOW_INTERVAL = 5.0  # seconds between two passes of ``sync --follow``


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
        event, key = ev[0], ev[1]
        run = runs.setdefault(key, _Run(key))
        if event == "run":
            run.name, run.parent, run.start, run.tags = ev[2], ev[3], ev[4], ev[5]
        elif event == "params":  # MLflow keeps a param's first value (a second one is refused)
            seen = {k for k, _ in run.params}
            run.params += [(k, v) for k, v in ev[2] if k not in seen]
        elif event == "tags":
            run.later_tags.update(ev[2])
        elif event == "metrics":
            run.metrics += [tuple(m) for m in ev[2]]
        elif event == "inputs":
            run.inputs.append(ev[2])
        elif event == "artifact":
            run.artifacts.append((ev[2], ev[3]))
        elif event == "end":
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


def _existing(store: Store, experiment_id: str, key: str, prog: _Progress) -> dict[str, Any]:
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


def _replay(store: Store, journal: _Pending, prog: _Progress) -> int:
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
class SyncResult:
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
         stores: dict[str, Store] | None = None) -> SyncResult:
    """Replay the pending journals into MLflow under an exclusive lock (queued experiments can run
    gallery stages at the same time), each from where the last pass left it (``replayed.json``). A
    running stage's journal is left for later unless ``live`` (:func:`follow`). A journal replayed to
    its end moves to ``synced/`` without its files (MLflow holds copies); the map key → run id is
    rewritten atomically. ``uri`` overrides the store the journals name; ``stores`` keeps clients
    between passes. MLflow is imported only when a journal has something new."""
    folder = folder or journal_dir()
    result = SyncResult()
    start = time.perf_counter()
    if not pending(folder):
        return result
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
                        result.running += 1
                    if journal is None or (journal.last == prog.segments and not journal.final):
                        continue
                    target = uri or journal.header["uri"]
                    if target not in stores:
                        stores[target] = Store(target)
                    new = _replay(stores[target], journal, prog)
                except Exception as exc:
                    result.failed += 1
                    if on_error == "fail":
                        raise
                    warnings.warn(f"MLflow sync of {path.name} failed ({type(exc).__name__}: {exc}); it stays "
                                  "pending, outputs are unaffected", stacklevel=2)
                    continue
                for key, rid in prog.ids.items():
                    entry = {"run_id": rid, "experiment_id": prog.experiment_id, "experiment": prog.header["study"]}
                    if mapping.get(key) != entry:
                        mapping[key], mapped = entry, True
                result.runs += new
                result.updated += 1
                if journal.final:
                    done.append(path)
                    result.journals += 1
        finally:
            if mapped:
                write_json(folder / RUN_MAP, mapping)
            if done:
                (folder / SYNCED).mkdir(exist_ok=True)
                for path in done:
                    shutil.rmtree(path / "files", ignore_errors=True)
                    (path / LOCK).unlink(missing_ok=True)
                    os.replace(path, folder / SYNCED / path.name)
    result.seconds = time.perf_counter() - start
    return result


def follow(folder: Path | None = None, *, interval: float = FOLLOW_INTERVAL, on_error: str = "warn",
           uri: str | None = None, stop: threading.Event | None = None) -> None:
    """Sync every ``interval`` seconds until ``stop`` is set, the journals of running stages included:
    their runs show in MLflow while they run (a child as it ends, the parent RUNNING until its stage
    ends). A pass prints its line when it brought anything new."""
    stop = stop or threading.Event()
    stores: dict[str, Store] = {}
    while not stop.is_set():
        result = sync(folder, on_error=on_error, uri=uri, live=True, stores=stores)
        if result.updated or result.failed:
            print(result.line(), flush=True)
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

