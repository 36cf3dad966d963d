"""Thin stage entry points for dvc.yaml (``python -m stages.<kind> ...``); the logic lives in ``pipeline``.

With ``TRAINSCAPE_TRACE_MODULES=<file>`` set, every stage process appends to that file, at exit,
one JSON line: its command line and the project modules it loaded (checked against ``dvc.yaml``'s
code deps by ``python -m pipeline.graph --trace <file>``).
"""

import atexit
import json
import os
import sys


def _write_trace(path: str) -> None:
    mods = sorted(name for name in sys.modules if name.split(".")[0] in ("pipeline", "stages"))
    with open(path, "a") as fh:
        fh.write(json.dumps({"argv": sys.argv, "modules": mods}) + "\n")


if os.environ.get("TRAINSCAPE_TRACE_MODULES"):
    atexit.register(_write_trace, os.environ["TRAINSCAPE_TRACE_MODULES"])
