"""Thin stage entry points for dvc.yaml (``python -m stages.<kind> ...``); the logic lives in ``pipeline``.

With ``TRAINSCAPE_TRACE_MODULES=<file>`` set, every stage process appends to that file, at exit,
one JSON line: its command line and the project modules it loaded (checked against ``dvc.yaml``'s
code deps by ``python -m pipeline.graph --trace <file>``).

With ``TRAINSCAPE_WARM_HOST=<socket>`` set (``make repro`` sets it), a stage command hands itself over to that
warm host, which runs it in a forked child with the heavy libraries already imported (``pipeline/warm.py``).
"""

import atexit
import json
import os
import sys

from pipeline.warm import hand_over

_RC: list[int] = []


def finish(rc: int) -> int:
    """The exit code of a stage's main, remembered for the trace (only successful runs are checked)."""
    _RC.append(rc)
    return rc


def _write_trace(path: str) -> None:
    mods = sorted(name for name in sys.modules if name.split(".")[0] in ("pipeline", "stages"))
    with open(path, "a") as fh:
        fh.write(json.dumps({"argv": sys.argv, "rc": _RC[-1] if _RC else None, "modules": mods}) + "\n")


if os.environ.get("TRAINSCAPE_TRACE_MODULES"):
    atexit.register(_write_trace, os.environ["TRAINSCAPE_TRACE_MODULES"])

hand_over()  # returns at once where no warm host is named or none answers: the stage then runs here
