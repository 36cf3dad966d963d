"""The one writer of figures: a render unit's files, its MLflow artifacts and its sidecar.

Kept apart from :mod:`pipeline.records` so that only render stages load matplotlib and depend on
the plotting style.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from pipeline import runs as run_records
from pipeline.contract import Figure, Output
from pipeline.executor import figure_workers_setting
from pipeline.io import atomic_dir, read_json, write_json
from pipeline.paths import figures_dir, rel, sidecar_path
from pipeline.plotting import dpi, save_mpl, save_plotly_html
from pipeline.records import run_entry, write_files
from pipeline.tracking import Tracker


def save_figure(fig: Figure, folder: Path) -> list[Path]:
    """PNG + PDF of the matplotlib figure, self-contained HTML of the plotly one."""
    if fig.mpl is None and fig.plotly is None:
        raise ValueError(f"figure {fig.id!r} has neither a matplotlib nor a plotly figure")
    files = save_mpl(fig.mpl, folder / fig.id) if fig.mpl is not None else []
    if fig.plotly is not None:
        files.append(save_plotly_html(fig.plotly, folder / f"{fig.id}.html"))
    return files


_PENDING: list[tuple[Figure, Path]] = []  # what forked savers inherit (figures are not pickled)


def _save_pending(i: int) -> list[Path]:
    return save_figure(*_PENDING[i])


def check_settings() -> None:
    """The renderer's environment settings, checked before a render computes (ConfigError: exit 2)."""
    figure_workers_setting()
    dpi()


def figure_workers(n_figures: int) -> int:
    """Processes that save a unit's figures: the cores this process may use (``TRAINSCAPE_FIGURE_WORKERS``
    overrides), at most one per figure. DVC runs one stage at a time, so a render has the machine."""
    cores = figure_workers_setting() or len(os.sched_getaffinity(0))
    return max(1, min(cores, n_figures))


def save_figures(figs: Sequence[Figure], folder: Path) -> list[list[Path]]:
    """Every figure's files, saved by forked processes side by side when more than one core is free.

    Laying out and rasterising a matplotlib figure is single-threaded and was most of a render stage's
    time; the children inherit the drawn figures (fork), so nothing is pickled, and each file is
    written atomically exactly as a sequential save would write it."""
    workers = figure_workers(len(figs))
    if workers == 1 or "fork" not in multiprocessing.get_all_start_methods():
        return [save_figure(fig, folder) for fig in figs]
    _PENDING[:] = [(fig, folder) for fig in figs]
    try:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            files = pool.map(_save_pending, range(len(figs)), chunksize=1)
    finally:
        _PENDING.clear()
    for fig in figs:  # the children closed their copies; the parent's are still open
        if fig.mpl is not None:
            plt.close(fig.mpl)
    return files


def figure_data(provenance: Mapping[str, Any], sources: list[Mapping[str, Any]]) -> dict[str, str]:
    """The checksums of the datasets a figure read: those its render stage loaded itself and those
    of the units it draws (their ``meta.json``), never the whole study's (a Hessian-at-init figure
    reads no dataset)."""
    out = dict(provenance.get("data_sha256", {}))
    for meta in sources:
        out.update(meta.get("data_sha256", {}))
    return dict(sorted(out.items()))


def write_render(study: str, unit: str, output: Output, tracker: Tracker, provenance: Mapping[str, Any],
                 source_meta: Mapping[tuple[str, str], Mapping[str, Any]]) -> Path:
    """A render unit: figure files (and any JSON) in ``reports/figures/<study>/<unit>/``, the figures
    logged to the stage's run, and the sidecar ``<unit>.figures.json`` the report stage reads.

    The sidecar holds what the inputs determine: each source as its stage and the fingerprint of its
    ``meta.json`` (:func:`pipeline.runs.fingerprint`), which the report resolves to the runs recorded
    for it; the render's own run goes to its run record."""
    out = figures_dir(study) / unit
    saved: list[tuple[Figure, list[str]]] = []
    with atomic_dir(out) as tmp:
        write_files(tmp, output)
        for fig, paths in zip(output.figures, save_figures(output.figures, tmp), strict=True):
            saved.append((fig, [p.name for p in paths]))
    entries = []
    for fig, names in saved:
        for name in names:
            tracker.parent.log_artifact(out / name, f"figures/{fig.id}")
        sources = [{"stage": source_meta[s].get("stage"), "meta_sha256": run_records.fingerprint(source_meta[s])}
                   for s in fig.sources]
        entries.append({
            "id": f"{study}/{fig.id}", "study": study, "family": fig.family,
            "files": [rel(out / n) for n in names], "caption": fig.caption, "seed_figure": fig.seed_figure,
            "sources": sources, **{k: v for k, v in provenance.items() if k not in ("stage", "study")},
            "data_sha256": figure_data(provenance, [source_meta[s] for s in fig.sources]),
            "render_stage": provenance["stage"], **fig.extra,
        })
    sidecar = {"stage": provenance["stage"], "figures": entries}
    path = write_json(sidecar_path(study, unit), sidecar)
    run_records.record(str(provenance["stage"]), read_json(path), run_entry(tracker, {}, output.execution))
    return path
