"""The journal: the MLflow calls of one stage execution, recorded in files by the stage (which never imports
MLflow) and replayed into MLflow by :mod:`pipeline.tracking.sync`."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.io import write_bytes
from pipeline.paths import store_root
from pipeline.tracking.store import MetricItems, ParamItems, artifact_location, tracking_uri

JOURNAL_ENV = "TRAINSCAPE_JOURNAL"
LOCK = "lock"


def journal_dir() -> Path:
    """Where stages journal and :func:`sync` replays from (ignored by git and DVC)."""
    if os.environ.get(JOURNAL_ENV):
        return Path(os.environ[JOURNAL_ENV]).resolve()
    return store_root() / ".trainscape" / "journal"


def new_key() -> str:
    """A run's key: a uuid4 in hex, the shape of an MLflow run id."""
    return uuid.uuid4().hex


def now_ms() -> int:
    return int(time.time() * 1000)


def _folder_name(stage: str, key: str) -> str:
    return f"{re.sub(r'[^A-Za-z0-9_.@=-]', '_', stage)}-{key}"


class Journal:
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

    def log(self, run_key: str, *, params: ParamItems = (), metrics: MetricItems = (),
            tags: Mapping[str, str] | None = None) -> None:
        if params:
            self.events.append(["params", run_key, [list(p) for p in params]])
        if tags:
            self.events.append(["tags", run_key, {k: str(v) for k, v in tags.items()}])
        if metrics:
            self.events.append(["metrics", run_key, [list(m) for m in metrics]])

    def inputs(self, run_key: str, datasets: Mapping[str, Mapping[str, str]]) -> None:
        self.events.append(["inputs", run_key, {k: dict(v) for k, v in datasets.items()}])

    def artifact(self, run_key: str, path: str | Path, artifact_path: str | None) -> None:
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
        self.events.append(["artifact", run_key, rel, artifact_path])

    def end(self, run_key: str, status: str) -> None:
        self.events.append(["end", run_key, status, now_ms()])

    def checkpoint(self, closed: bool = False) -> None:
        """Write the events since the last segment as the next segment (atomically); nothing when
        nothing was recorded since (a part's checkpoint right after its child's)."""
        if not self.events and not closed and self.segments:
            return
        self.segments += 1
        seg = {**self.header, "segment": self.segments, "written": now_ms(), "closed": closed,
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
