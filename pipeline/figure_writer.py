"""The one writer of figures: a render unit's files, its MLflow artifacts and its sidecar.

Kept apart from :mod:`pipeline.records` so that only render stages load matplotlib and depend on
the plotting style.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.contract import Figure, Output
from pipeline.io import atomic_dir, write_json
from pipeline.paths import figures_dir, rel, sidecar_path
from pipeline.plotting import save_mpl, save_plotly_html
from pipeline.records import write_files
from pipeline.tracking import Tracker


def save_figure(fig: Figure, folder: Path) -> list[Path]:
    """PNG + PDF of the matplotlib figure, self-contained HTML of the plotly one."""
    if fig.mpl is None and fig.plotly is None:
        raise ValueError(f"figure {fig.id!r} has neither a matplotlib nor a plotly figure")
    files = save_mpl(fig.mpl, folder / fig.id) if fig.mpl is not None else []
    if fig.plotly is not None:
        files.append(save_plotly_html(fig.plotly, folder / f"{fig.id}.html"))
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
    logged to the stage's run, and the sidecar ``<unit>.figures.json`` the report stage reads."""
    out = figures_dir(study) / unit
    saved: list[tuple[Figure, list[str]]] = []
    with atomic_dir(out) as tmp:
        write_files(tmp, output)
        for fig in output.figures:
            saved.append((fig, [p.name for p in save_figure(fig, tmp)]))
    entries = []
    for fig, names in saved:
        for name in names:
            tracker.parent.log_artifact(out / name, f"figures/{fig.id}")
        sources = [{"stage": source_meta[s].get("stage"), "mlflow_run_id": source_meta[s].get("mlflow_run_id"),
                    "children": source_meta[s].get("mlflow_children", {})} for s in fig.sources]
        entries.append({
            "id": f"{study}/{fig.id}", "study": study, "family": fig.family,
            "files": [rel(out / n) for n in names], "caption": fig.caption, "seed_figure": fig.seed_figure,
            "sources": sources, **{k: v for k, v in provenance.items() if k not in ("stage", "study")},
            "data_sha256": figure_data(provenance, [source_meta[s] for s in fig.sources]),
            "render_stage": provenance["stage"], **fig.extra,
        })
    return write_json(sidecar_path(study, unit), {"stage": provenance["stage"], "figures": entries})
