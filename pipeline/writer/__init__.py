"""The one writer of a stage's results: output files, ``meta.json``, metrics, figures (:mod:`.figures`),
sidecars, and what MLflow and the run records link to them.

Everything lands atomically: a unit's folder is built beside itself and swapped in, so a failed or
interrupted stage leaves the previous results whole (resumable units write each part the same way).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.contract import Output, Run
from pipeline.io import atomic_dir, read_json, read_npz, write_csv, write_json, write_npz
from pipeline.paths import metrics_path, stage_name, study_dir
from pipeline.tracking import Tracker
from pipeline.tracking import records as run_records


def read_file(path: Path) -> Any:
    """A file a stage wrote: ``.json`` → object, ``.npz`` → arrays, anything else → bytes."""
    if path.suffix == ".json":
        return read_json(path)
    if path.suffix == ".npz":
        return read_npz(path)
    return path.read_bytes()


def write_files(folder: Path, output: Output) -> list[Path]:
    """The JSON, npz and CSV files of ``output`` into ``folder``."""
    paths = []
    for name, obj in output.json.items():
        paths.append(write_json(folder / name, obj))
    for name, arrays in output.arrays.items():
        paths.append(write_npz(folder / name, **arrays))
    for name, table in output.tables.items():
        if not name.endswith(".csv"):
            raise ValueError(f"table {name!r}: a table is written as CSV; name it <name>.csv")
        paths.append(write_csv(folder / name, table))
    return paths


def run_entry(tracker: Tracker, children: Mapping[str, str], execution: Mapping[str, Any]) -> dict[str, Any]:
    """What a run record (:mod:`pipeline.tracking.records`) links an output to: the stage's run key, its experiment,
    its child runs and what this execution did."""
    return {"run_key": tracker.parent.run_key, "mlflow_experiment": tracker.study,
            "mlflow_experiment_id": tracker.experiment_id, "children": dict(children),
            "execution": dict(execution)}


def log_runs(tracker: Tracker, runs: list[Run], folder: Path) -> dict[str, str]:
    """Each :class:`Run` as a child of the stage's run; returns ``{name: run id}`` (run keys in
    journal mode, see :mod:`pipeline.tracking`). Files are logged from ``folder`` before it is swapped
    in: the journal links them as they are, so they need not exist under that name afterwards."""
    ids = {}
    for run in runs:
        with tracker.child(run.name, run.params, tags=run.tags) as child:
            child.log_many(run.metrics, run.series)
            for name in run.artifacts:
                child.log_artifact(folder / name)
            if run.failed:
                child.fail(run.failed)
        if child.run_key:
            ids[run.name] = child.run_key
    return ids


def write_unit(study: str, kind: str, unit: str, output: Output, tracker: Tracker,
               provenance: Mapping[str, Any], *, in_place: bool) -> dict[str, str]:
    """A train/extract unit: its files and ``meta.json`` in ``artifacts/<study>/<kind>/<unit>``.

    ``in_place`` (resumable units) keeps parts written earlier; otherwise the folder is swapped whole.
    ``meta.json`` holds what the inputs determine; the run key and child runs go to the stage's run record.
    """
    out = study_dir(study, kind, unit)
    meta = {**provenance, **output.meta}
    if in_place:
        out.mkdir(parents=True, exist_ok=True)
        write_files(out, output)
        children = {**parts_children(stage_name(study, kind, unit), out), **log_runs(tracker, output.runs, out)}
        write_json(out / "meta.json", meta)
    else:
        with atomic_dir(out) as tmp:
            write_files(tmp, output)
            children = log_runs(tracker, output.runs, tmp)
            write_json(tmp / "meta.json", meta)
    run_records.record(stage_name(study, kind, unit), read_json(out / "meta.json"),
                       run_entry(tracker, children, output.execution))
    return children


def parts_children(stage: str, out: Path) -> dict[str, str]:
    """The MLflow child runs of every part a resumable unit holds that this workspace recorded, this
    run's and earlier ones'."""
    parts = {meta.parent.relative_to(out).as_posix(): read_json(meta) for meta in out.glob("*/**/meta.json")}
    return run_records.part_children(stage, parts)


def write_part(study: str, kind: str, unit: str, part: Output, tracker: Tracker,
               provenance: Mapping[str, Any]) -> dict[str, str]:
    """One part of a resumable unit, as ``<unit folder>/<part>/``, the moment it is computed."""
    folder = study_dir(study, kind, unit) / str(part.part)
    with atomic_dir(folder) as tmp:
        write_files(tmp, part)
        children = log_runs(tracker, part.runs, tmp)
        write_json(tmp / "meta.json", {**provenance, **part.meta})
    run_records.record(stage_name(study, kind, unit), read_json(folder / "meta.json"),
                       run_entry(tracker, children, part.execution), part=str(part.part))
    tracker.checkpoint()  # the part's runs are journaled with it: a killed stage's parts still reach MLflow
    return children


def write_metrics(stage: str, metrics: Mapping[str, Any]) -> Path:
    return write_json(metrics_path(stage), metrics)
