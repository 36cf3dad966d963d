"""Which MLflow runs made the outputs on disk: one small untracked record per stage.

A stage's DVC outputs hold only what its inputs determine (no run ids, journal keys or wall-clock
times), so a forced rerun with the same code, params and data rewrites them byte for byte and leaves
everything downstream cached. The link from an output to the runs that made it lives here instead:
``<journal root>/runs/<stage>.json`` (``.trainscape/runs/`` beside ``.trainscape/journal/``, under
``DVC_ROOT`` for queued experiments; ignored by git and DVC). It maps the fingerprint of the
output's record (``meta.json`` of a train/extract unit, the figures sidecar of a render unit) to the
run key of the execution that wrote it, its child runs and what that execution did (:attr:`Output.execution`).
Each part of a resumable unit has a record of its own, ``runs/<stage>.parts/<part>.json``, written as the part
is: one file a part keeps the cost of a part's record the same at its 4,410th part as at its first.
Keyed by fingerprint, a record never links an output to a run that did not make those bytes: after
``dvc pull`` of results built elsewhere (or ``dvc checkout`` of older ones) there is no matching record,
and the gallery says "run not recorded here".
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.io import read_json, write_json
from pipeline.tracking.journal import journal_dir
from pipeline.tracking.tracker import Tracker

KEEP = 16  # fingerprints kept per stage (the latest executions with different outputs)


def runs_dir() -> Path:
    """``.trainscape/runs`` beside the journal (``TRAINSCAPE_JOURNAL`` moves both)."""
    return journal_dir().parent / "runs"


def record_path(stage: str) -> Path:
    return runs_dir() / f"{stage}.json"


def part_path(stage: str, part: str) -> Path:
    """The record of one part of a resumable unit (``part`` may name nested folders, as its output does)."""
    return runs_dir() / f"{stage}.parts" / f"{part}.json"


def entry(tracker: Tracker, children: Mapping[str, str], execution: Mapping[str, Any]) -> dict[str, Any]:
    """What a record links an output to: the stage's run key, its experiment, its child runs and what this
    execution did."""
    return {"run_key": tracker.parent.run_key, "mlflow_experiment": tracker.study,
            "mlflow_experiment_id": tracker.experiment_id, "children": dict(children),
            "execution": dict(execution)}


def fingerprint(obj: Any) -> str:
    """sha256 of an output record's content (parsed JSON, canonical form): the same on the writer's side
    and on a reader's, whatever the file's formatting."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _load(stage: str) -> dict[str, Any]:
    path = record_path(stage)
    try:
        return read_json(path) if path.exists() else {}
    except (OSError, ValueError):  # a damaged record only loses links, never outputs
        return {}


def _stamped(run: Mapping[str, Any]) -> dict[str, Any]:
    """``run`` with the time it was recorded (ms since the epoch)."""
    return {**run, "recorded": int(time.time() * 1000)}


def record(stage: str, output: Mapping[str, Any], run: Mapping[str, Any]) -> None:
    """Link ``output`` (the record just written) to ``run`` (``run_key``, experiment, ``children``:
    child name → run key, execution)."""
    data = _load(stage)
    runs = data.get("runs", {})
    runs.pop(fingerprint(output), None)
    runs[fingerprint(output)] = _stamped(run)  # latest last
    data["runs"] = dict(list(runs.items())[-KEEP:])
    write_json(record_path(stage), {"stage": stage, **data})


def record_part(stage: str, part: str, output: Mapping[str, Any], run: Mapping[str, Any]) -> None:
    """Link part ``part`` of a resumable unit (``output``: its record just written) to ``run``, in the part's
    own file."""
    write_json(part_path(stage, part), {"fingerprint": fingerprint(output), **_stamped(run)})


def part_record(stage: str, part: str) -> dict[str, Any] | None:
    """The record of one part of a resumable unit, None where this workspace has none."""
    path = part_path(stage, part)
    try:
        return read_json(path) if path.exists() else None
    except (OSError, ValueError):
        return None


def lookup(stage: str, output: Mapping[str, Any] | None = None, *, fp: str | None = None) -> dict[str, Any] | None:
    """The run that wrote ``output`` (or the output of fingerprint ``fp``); None when this workspace did
    not record it (results pulled from elsewhere, or built before records existed)."""
    fp = fp or (fingerprint(output) if output is not None else None)
    return _load(stage).get("runs", {}).get(fp or "")


def part_children(stage: str, parts: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """The child runs of the parts of a resumable unit (``parts``: name → its ``meta.json``) that this
    workspace recorded, this execution's and earlier ones' (those recorded before a part had a file of its own
    are under the stage's record's ``parts``)."""
    earlier = _load(stage).get("parts", {})
    out: dict[str, str] = {}
    for name, meta in sorted(parts.items()):
        rec = part_record(stage, name) or earlier.get(name)
        if rec and rec.get("fingerprint") == fingerprint(meta):
            out.update(rec.get("children", {}))
    return out


def with_runs(sidecar: Mapping[str, Any]) -> dict[str, Any]:
    """A render unit's figures sidecar with each figure's ``run_key`` and its sources' keys and children,
    from the records; ``run_recorded: False`` where the workspace holds no record of the execution that
    wrote it. (The gallery turns keys into MLflow run ids once synced: :func:`pipeline.gallery.link_runs`.)"""
    rec = lookup(str(sidecar.get("stage", "")), sidecar)
    figures = []
    for entry in sidecar.get("figures", []):
        out = {**entry, "run_key": rec.get("run_key") if rec else None, "run_recorded": rec is not None}
        if rec is not None and rec.get("mlflow_experiment_id"):
            out["mlflow_experiment_id"] = rec["mlflow_experiment_id"]
        sources = []
        for src in entry.get("sources", []):
            srec = lookup(str(src.get("stage", "")), fp=src.get("meta_sha256"))
            sources.append({**src, "run_key": srec.get("run_key") if srec else None,
                            "children": srec.get("children", {}) if srec else {}})
        if "sources" in entry:
            out["sources"] = sources
        figures.append(out)
    return {**sidecar, "figures": figures}
