"""The writer's figures: a render unit's files, its MLflow artifacts and its sidecar.

A module of its own so that only render stages load matplotlib, plotly and kaleido, and only they depend on
the plotting style (restyling reruns no training).
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from pipeline import registry
from pipeline.config import FIGURE_FORMATS, figure_workers_setting, load_params
from pipeline.contract import Figure, Output
from pipeline.io import atomic_dir, read_json, write_json
from pipeline.paths import figures_dir, metrics_path, rel, sidecar_path, study_dir
from pipeline.plotting import (
    check_chromium,
    dpi,
    kaleido_running,
    kaleido_server,
    save_mpl,
    save_plotly_html,
    save_plotly_js,
    save_plotly_static,
    static_plotly,
)
from pipeline.tracking import Tracker
from pipeline.tracking import records as run_records
from pipeline.writer import write_files


def kaleido_static(fig: Figure) -> bool:
    """Whether ``fig``'s PNG and PDF are drawn by kaleido: a plotly figure with no matplotlib one (and no
    animation frames, :func:`pipeline.plotting.static_plotly`)."""
    return fig.mpl is None and static_plotly(fig.plotly)


def save_figure(fig: Figure, folder: Path, formats: Sequence[str] = FIGURE_FORMATS) -> list[Path]:
    """The matplotlib figure in each of ``formats`` (the profile's: PNG, and PDF where it asks), the HTML
    of the plotly one; a plotly figure alone also gets its ``formats`` from kaleido (before its HTML, so the
    gallery shows the PNG)."""
    if fig.mpl is None and fig.plotly is None:
        raise ValueError(f"figure {fig.id!r} has neither a matplotlib nor a plotly figure")
    if fig.mpl is not None:
        files = save_mpl(fig.mpl, folder / fig.id, tuple(formats))
    elif kaleido_static(fig):
        files = save_plotly_static(fig.plotly, folder / fig.id, tuple(formats))
    else:
        files = []
    if fig.plotly is not None:
        files.append(save_plotly_html(fig.plotly, folder / f"{fig.id}.html"))
    return files


_PENDING: list[tuple[Figure, Path, Sequence[str]]] = []  # what forked savers inherit (figures are not pickled)


def _save_pending(i: int) -> list[Path]:
    return save_figure(*_PENDING[i])


def check_settings(argv: Sequence[str] | None = None) -> bool:
    """The renderer's environment settings, checked before a render computes (ConfigError: exit 2): the
    figure workers and dpi, and a Chromium for kaleido where the unit (``argv``: the stage's ``<study>
    <unit>``, by default the command line's) exports static plotly images. Returns whether it does."""
    figure_workers_setting()
    dpi()
    args = [a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")]
    plotly_images = len(args) >= 2 and exports_plotly_images(args[0], args[1])
    if plotly_images:
        check_chromium()
    return plotly_images


def ready_renderer(argv: Sequence[str] | None = None) -> None:
    """:func:`check_settings`, then, where the unit exports plotly images, kaleido's Chromium started now: it
    launches (≈2 s) on the other core while the unit loads its inputs and draws, not at the first image."""
    if check_settings(argv):
        kaleido_server()


def exports_plotly_images(study: str, unit: str) -> bool:
    """Whether render unit ``unit`` of ``study`` draws plotly figures that get kaleido's PNG/PDF: its entry in
    the study's figure table, under the workspace's params, says so (``FigureEntry.plotly_images``). An unknown
    study or unit, or params that do not load, is False here: :func:`pipeline.stage.prepare` names that error
    next."""
    try:
        found = registry.load(study)
        stage = found.stage("render")
        entry = stage.figure_table(registry.config(found, load_params())).get(unit) if stage else None
    except Exception:  # prepare() reports a bad study, params or unit with its own message
        return False
    return entry is not None and entry.plotly_images


def figure_workers(n_figures: int) -> int:
    """Processes that save a unit's figures: the cores this process may use (``TRAINSCAPE_FIGURE_WORKERS``
    overrides), at most one per figure. DVC runs one stage at a time, so a render has the machine."""
    cores = figure_workers_setting() or len(os.sched_getaffinity(0))
    return max(1, min(cores, n_figures))


def save_figures(figs: Sequence[Figure], folder: Path, formats: Sequence[str] = FIGURE_FORMATS) -> list[list[Path]]:
    """Every figure's files, saved by forked processes side by side when more than one core is free.

    Laying out and rasterising a matplotlib figure is single-threaded and was most of a render stage's
    time; the children inherit the drawn figures (fork), so nothing is pickled, and each file is
    written atomically exactly as a sequential save would write it.
    Plotly figures with static files are saved in this process, after the forked ones: kaleido's one server
    (a Chromium with its own processes and threads) is never forked, and Chromium rasterises in parallel
    itself. Where that server already runs (:func:`ready_renderer`), nothing is forked."""
    out: dict[int, list[Path]] = {}
    forked = [i for i, fig in enumerate(figs) if not kaleido_static(fig)]
    workers = figure_workers(len(forked)) if forked else 1
    # never fork beside a running kaleido server (its threads would not be in the child)
    if workers == 1 or kaleido_running() or "fork" not in multiprocessing.get_all_start_methods():
        out.update((i, save_figure(figs[i], folder, formats)) for i in forked)
    else:
        _PENDING[:] = [(figs[i], folder, formats) for i in forked]
        try:
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                out.update(zip(forked, pool.map(_save_pending, range(len(forked)), chunksize=1), strict=True))
        finally:
            _PENDING.clear()
        for i in forked:  # the children closed their copies; the parent's are still open
            if figs[i].mpl is not None:
                plt.close(figs[i].mpl)
    out.update((i, save_figure(fig, folder, formats)) for i, fig in enumerate(figs) if i not in out)
    return [out[i] for i in range(len(figs))]


def figure_data(provenance: Mapping[str, Any], sources: list[Mapping[str, Any]]) -> dict[str, str]:
    """The checksums of the datasets a figure read: those its render stage loaded itself and those
    of the units it draws (their ``meta.json``), never the whole study's (a Hessian-at-init figure
    reads no dataset)."""
    out = dict(provenance.get("data_sha256", {}))
    for meta in sources:
        out.update(meta.get("data_sha256", {}))
    return dict(sorted(out.items()))


def write_render(study: str, unit: str, output: Output, tracker: Tracker, provenance: Mapping[str, Any],
                 formats: Sequence[str] = FIGURE_FORMATS, *, metrics: Any = None) -> Path:
    """A render unit: figure files in ``formats`` (and any JSON) in ``reports/figures/<study>/<unit>/``, the
    figures logged to the stage's run, the sidecar ``<unit>.figures.json`` the gallery stage reads, then its
    published ``metrics`` where it has them.

    The sidecar holds what the inputs determine: each source as its stage and the fingerprint of its
    ``meta.json`` (:func:`pipeline.tracking.records.fingerprint`), which the gallery resolves to the runs recorded
    for it; the render's own run goes to its run record."""
    source_meta = {src: read_json(study_dir(study, *src) / "meta.json") for f in output.figures for src in f.sources}
    out = figures_dir(study) / unit
    saved: list[tuple[Figure, list[str]]] = []
    with atomic_dir(out) as tmp:
        write_files(tmp, output)
        for fig, paths in zip(output.figures, save_figures(output.figures, tmp, formats), strict=True):
            saved.append((fig, [p.name for p in paths]))
        js = save_plotly_js(tmp).name if any(fig.plotly is not None for fig in output.figures) else None
    entries = []
    for fig, names in saved:
        # an HTML file loads the unit's plotly.js beside it: in MLflow's artifacts too
        for name in names + ([js] if js and any(n.endswith(".html") for n in names) else []):
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
    run_records.record(str(provenance["stage"]), read_json(path), run_records.entry(tracker, {}, output.execution))
    if metrics is not None:
        write_json(metrics_path(str(provenance["stage"])), metrics)
    return path
