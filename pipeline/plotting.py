"""The one plotting style, and atomic, byte-stable figure files (matplotlib and plotly), used by the
framework's figure writer; studies only draw."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.pyplot as plt  # headless: matplotlib falls back to Agg (the Makefile also sets MPLBACKEND)

from pipeline.config import ConfigError
from pipeline.io import atomic_path

STYLE = {
    "figure.dpi": 100,
    "savefig.dpi": 150,
    "savefig.bbox": "tight",
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.frameon": False,
    "image.interpolation": "nearest",
    "svg.hashsalt": "trainscape",
    "pdf.compression": 6,
}


def apply_style() -> None:
    matplotlib.rcParams.update(STYLE)


apply_style()

# Deterministic outputs: no timestamps in PDF/PNG metadata.
_META = {"pdf": {"CreationDate": None, "ModDate": None, "Producer": "trainscape"},
         "png": {"Software": "trainscape"}}


DPI_RANGE = (10, 2400)


def dpi() -> int:
    """``TRAINSCAPE_DPI`` lowers the raster resolution (tests); default from the style. A value that is
    not an integer in :data:`DPI_RANGE` is bad input (ConfigError, checked before a render computes)."""
    raw = os.environ.get("TRAINSCAPE_DPI")
    if raw is None:
        return int(STYLE["savefig.dpi"])
    lo, hi = DPI_RANGE
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or not lo <= value <= hi:
        raise ConfigError(f"environment: TRAINSCAPE_DPI = {raw!r} is not allowed; "
                          f"allowed: an integer from {lo} to {hi}")
    return value


def freeze_layout(fig: plt.Figure) -> Any:
    """Lay ``fig`` out once and keep that layout; returns its tight bounding box (inches, padded).

    ``savefig`` otherwise runs the layout engine and the tight-box measurement again for every format
    (two full passes over every axis and label per file, most of a many-panel figure's save time)."""
    fig.set_dpi(dpi())  # lay out at the resolution the files are written at, as savefig would
    fig.draw_without_rendering()
    fig.set_layout_engine(None)  # positions stay where the engine put them
    return fig.get_tightbbox().padded(matplotlib.rcParams["savefig.pad_inches"])


def save_mpl(fig: plt.Figure, base: str | Path, formats: tuple[str, ...] = ("png", "pdf")) -> list[Path]:
    """Save ``fig`` as ``<base>.<fmt>`` for each format, atomically, from one layout; close it; return the
    paths."""
    base = Path(base)
    bbox = freeze_layout(fig)
    out = []
    for fmt in formats:
        path = base.with_name(f"{base.name}.{fmt}")
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=fmt, dpi=dpi(), metadata=_META.get(fmt), bbox_inches=bbox)
        out.append(path)
    plt.close(fig)
    return out


def save_plotly_html(fig: Any, path: str | Path) -> Path:
    """Self-contained interactive HTML (plotly.js embedded, works offline)."""
    path = Path(path)
    with atomic_path(path) as tmp:
        # a fixed div id (plotly draws a random one) keeps the file byte-stable across rebuilds
        fig.write_html(tmp, include_plotlyjs=True, full_html=True, auto_play=False, div_id=path.stem)
    return path
