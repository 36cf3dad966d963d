"""The one writer of a stage's results: output files, ``meta.json``, metrics, figures (:mod:`.figures`),
sidecars, and what MLflow and the run records link to them.

Everything lands atomically: a unit's folder is built beside itself and swapped in, so a failed or
interrupted stage leaves the previous results whole (resumable units write each part the same way).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from pipeline.contract import Output, Run
from pipeline.io import atomic_dir, read_json, read_npz, write_csv, write_json, write_npz
from pipeline.paths import dvc_target, metrics_path, study_dir
from pipeline.provenance import MissingInputError
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


def unit_reader(study: str) -> Callable[..., Any]:
    """A stage's reader of the files the units of ``study`` wrote: ``read(kind, unit, name)``; a missing file
    names the target that builds it, or with ``required=False`` is None (what a resumable unit finds of its own
    earlier parts)."""

    def read(kind: str, unit: str, name: str, *, required: bool = True) -> Any:
        path = study_dir(study, kind, unit) / name
        if path.exists():
            return read_file(path)
        if not required:
            return None
        raise MissingInputError(f"{study}: {kind} unit {unit!r} has no {name} ({path}); "
                                f"run `dvc repro {dvc_target(study, kind, unit)}`")

    return read


@contextlib.contextmanager
def _target(folder: Path, in_place: bool) -> Iterator[Path]:
    """Where a unit's files go: its folder itself (``in_place``), or a temporary twin swapped in whole."""
    if in_place:
        folder.mkdir(parents=True, exist_ok=True)
        yield folder
    else:
        with atomic_dir(folder) as tmp:
            yield tmp


def write_unit(folder: Path, stage: str, output: Output, tracker: Tracker, provenance: Mapping[str, Any], *,
               in_place: bool, metrics: Any = None) -> dict[str, str]:
    """A train/extract unit: its files and ``meta.json`` in its ``folder`` (``artifacts/<study>/<kind>/<unit>``),
    its run record, then its published ``metrics`` (``reports/metrics/<stage>.json``) where it has them.

    ``in_place`` (resumable units) keeps parts written earlier; otherwise the folder is swapped whole.
    ``meta.json`` holds what the inputs determine; the run key and child runs go to the stage's run record.
    """
    with _target(folder, in_place) as tmp:
        write_files(tmp, output)
        children = log_runs(tracker, output.runs, tmp)
        write_json(tmp / "meta.json", {**provenance, **output.meta})
    if in_place:  # the parts it holds, this run's and earlier ones' (this write leaves them as they were)
        children = {**parts_children(stage, folder), **children}
    run_records.record(stage, read_json(folder / "meta.json"), run_records.entry(tracker, children, output.execution))
    if metrics is not None:
        write_json(metrics_path(stage), metrics)
    return children


def parts_children(stage: str, out: Path) -> dict[str, str]:
    """The MLflow child runs of every part a resumable unit holds that this workspace recorded, this
    run's and earlier ones'."""
    parts = {meta.parent.relative_to(out).as_posix(): read_json(meta) for meta in out.glob("*/**/meta.json")}
    return run_records.part_children(stage, parts)


def write_part(folder: Path, stage: str, part: Output, tracker: Tracker,
               provenance: Mapping[str, Any]) -> dict[str, str]:
    """One part of a resumable unit, as ``<unit folder>/<part>/``, the moment it is computed."""
    out = folder / str(part.part)
    with atomic_dir(out) as tmp:
        write_files(tmp, part)
        children = log_runs(tracker, part.runs, tmp)
        write_json(tmp / "meta.json", {**provenance, **part.meta})
    run_records.record_part(stage, str(part.part), read_json(out / "meta.json"),
                            run_records.entry(tracker, children, part.execution))
    tracker.checkpoint()  # the part's runs are journaled with it: a killed stage's parts still reach MLflow
    return children
