"""Bookkeeping of a running stage: what it shows of itself (its progress bars and the line it ends with, done or
a failed write) and the timings of its study code.

None of it changes what a stage computes or writes, so this module is bookkeeping (``pipeline.graph``'s
``BOOKKEEPING``): a change to how progress is shown leaves every stage up to date.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm import tqdm

from pipeline.paths import rel


class _Lines:
    """A stream for tqdm when stderr is not a terminal: each refresh becomes one line, not a ``\\r``."""

    def __init__(self, stream: Any):
        self._stream = stream

    def write(self, text: str) -> None:
        text = text.strip("\r\n")
        if text:
            self._stream.write(text + "\n")

    def flush(self) -> None:
        self._stream.flush()


def bars(stage: str) -> Callable[..., Any]:
    """Progress bars on stderr (``TRAINSCAPE_PROGRESS=off`` silences them, as the test suite does)."""
    if os.environ.get("TRAINSCAPE_PROGRESS", "").lower() in ("0", "off", "false", "no"):
        return lambda iterable, **_: iterable
    tty = sys.stderr.isatty()

    def bar(iterable: Any, *, total: float | None = None, desc: str = "", unit: str = "it",
            weight: Callable[[Any], float] | None = None, note: Callable[[Any], str] | None = None) -> Any:
        kw = dict(total=total, desc=f"[{stage}] {desc}".rstrip(), unit=unit,
                  file=sys.stderr if tty else _Lines(sys.stderr), mininterval=0.5 if tty else 30,
                  dynamic_ncols=tty, ncols=None if tty else 100)
        if weight is None and note is None:
            return tqdm(iterable, **kw)
        return _weighted(tqdm(unit_scale=weight is not None, **kw), iterable, weight, note)

    return bar


def _weighted(bar: Any, iterable: Any, weight: Callable[[Any], float] | None,
              note: Callable[[Any], str] | None) -> Any:
    """Each item advances ``bar`` by its weight (1 without one), with ``note(item)`` after the bar."""
    with bar:
        for item in iterable:
            if note is not None:
                bar.set_postfix_str(note(item), refresh=False)
            bar.update(weight(item) if weight is not None else 1)
            yield item


def finished(stage: str, clock: float, first_line: float, last_line: float, study_seconds: float) -> None:
    """The stage's last log line, and with ``TRAINSCAPE_TIMINGS=<file>`` a line appended there: when the study's
    code started and ended (wall clock) and how long it ran; ``benchmarks/stage_overhead.py`` takes the rest of
    the process's time as the framework's cost."""
    print(f"[{stage}] done in {time.time() - clock:.1f} s (the study's own code: {study_seconds:.1f} s)", flush=True)
    path = os.environ.get("TRAINSCAPE_TIMINGS")
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps({"stage": stage, "first_line": first_line, "last_line": last_line,
                                 "study_seconds": study_seconds, "written": time.time()}) + "\n")


WRITE_FAILED = 4  # exit code: an output could not be written (a full disk); what was written stays


def _shown(path: Path) -> str:
    """``path`` relative to the repository where it lies inside it (the run records may not)."""
    try:
        return rel(path)
    except ValueError:
        return str(path)


def write_failed_line(stage: str, exc: OSError, target: str, parts: Path | None) -> str:
    """The one line a failed write (:class:`pipeline.io.WriteError`) ends a stage with: which file and why, what
    stays, and the rerun. ``parts``: a resumable unit's folder, whose finished parts stay (a rerun resumes after
    them; each part's ``meta.json`` is written last); None when the unit is written whole (a rerun starts it
    again)."""
    why = (exc.strerror or "error")[:1].lower() + (exc.strerror or "error")[1:]
    head = f"error: {stage}: {why} writing {_shown(Path(exc.filename or '?'))}"
    if parts is None:
        return (f"{head}; nothing is half-written and earlier outputs stay as they were: free space and rerun "
                f"`dvc repro {target}`")
    n = sum(1 for _ in parts.glob("*/**/meta.json"))
    return (f"{head}; the {n} finished part{'' if n == 1 else 's'} in {_shown(parts)} are kept and nothing is "
            f"half-written: free space and rerun `dvc repro {target}` to resume")
