"""The one plotting style per library, and atomic, byte-stable figure files (matplotlib and plotly), used by
the framework's figure writer; studies only draw.

matplotlib: :data:`STYLE` (rcParams), :func:`save_mpl`. plotly: the ``trainscape`` template (:data:`PLOTLY_STYLE`,
on top of plotly's default template, which the seed notebooks draw with), :func:`palette` (the notebooks'
``plotly.colors.sample_colorscale`` rule), :func:`save_plotly_html` and :func:`save_plotly_static` (PNG and PDF
through kaleido, which drives a Chromium found on PATH; one kaleido server per process, started at the first
image and stopped at exit)."""

from __future__ import annotations

import atexit
import os
import re
import warnings
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.pyplot as plt  # headless: matplotlib falls back to Agg (the Makefile also sets MPLBACKEND)
import plotly.colors as pcolors
import plotly.graph_objects as go
import plotly.io as pio

from pipeline.config import FIGURE_FORMATS, ConfigError
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


def save_mpl(fig: plt.Figure, base: str | Path, formats: tuple[str, ...] = FIGURE_FORMATS) -> list[Path]:
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


PLOTLY_JS = "plotly.min.js"  # one copy per render unit's folder, beside the HTML files that load it


def save_plotly_html(fig: Any, path: str | Path) -> Path:
    """Interactive HTML that loads plotly.js from :data:`PLOTLY_JS` in its own folder (works offline; the
    folder's one copy, :func:`save_plotly_js`, replaces 4.6 MB embedded in every file)."""
    path = Path(path)
    with atomic_path(path) as tmp:
        # a fixed div id (plotly draws a random one) keeps the file byte-stable across rebuilds
        fig.write_html(tmp, include_plotlyjs=PLOTLY_JS, full_html=True, auto_play=False, div_id=path.stem)
    return path


def save_plotly_js(folder: str | Path) -> Path:
    """The plotly.js bundled with the installed plotly, once, in ``folder`` (the HTML files' script)."""
    from plotly.offline import get_plotlyjs

    path = Path(folder) / PLOTLY_JS
    with atomic_path(path) as tmp:
        tmp.write_text(get_plotlyjs())
    return path


# ----------------------------------------------------------------------------- plotly

#: The plotly style: plotly's default template (the seed notebooks draw with it) with the fonts and sizes
#: below. ``panel``: one panel's size in px (the notebooks' default ``height=300, width=450``); ``png_scale``:
#: PNG pixels per layout px at the default :func:`dpi` (150 → 2; ``TRAINSCAPE_DPI`` scales it).
PLOTLY_STYLE: dict[str, Any] = {
    "font": {"family": "DejaVu Sans, Liberation Sans, Arial, sans-serif", "size": 14, "color": "#222"},
    "title_size": 16,
    "legend_size": 12,
    "note_size": 11,
    "panel": (450, 300),
    "png_scale": 2.0,
}
PLOTLY_TEMPLATE = "trainscape"


def plotly_template() -> go.layout.Template:
    """The ``trainscape`` template (registered with plotly); used as ``plotly+trainscape``."""
    font = PLOTLY_STYLE["font"]
    return go.layout.Template(layout=go.Layout(
        font=font,
        title={"font": {"size": PLOTLY_STYLE["title_size"]}, "x": 0.5, "xanchor": "center"},
        legend={"font": {"size": PLOTLY_STYLE["legend_size"]}},
        hoverlabel={"font": {"family": font["family"]}},
    ))


pio.templates[PLOTLY_TEMPLATE] = plotly_template()
pio.templates.default = f"plotly+{PLOTLY_TEMPLATE}"


def palette(scale: str, n: int, skip: int = 2, extra: int | None = None) -> list[str]:
    """``n`` colours of a plotly colour scale as the notebooks sample them:
    ``sample_colorscale(scale, n + extra)[skip:][:n]`` (``extra`` defaults to ``skip``). The notebooks' rules:
    curves per H/N/lr ``(n + 2)[2:]`` (Blues/Reds/Oranges); κ curves ``sample_colorscale("Viridis", n)``
    (``skip=0``); μPC in paper Fig. 1 ``("Blues", n + 2)[1:]`` (``skip=1, extra=2``)."""
    if n <= 0:
        return []
    m = n + (skip if extra is None else extra)
    return pcolors.sample_colorscale(scale, m)[skip:][:n] if m > 1 else pcolors.sample_colorscale(scale, [1.0])


def png_scale() -> float:
    """PNG pixels per layout px: :data:`PLOTLY_STYLE` ``png_scale`` at the default dpi, scaled by ``TRAINSCAPE_DPI``."""
    return PLOTLY_STYLE["png_scale"] * dpi() / float(STYLE["savefig.dpi"])


def static_plotly(fig: Any) -> bool:
    """Whether a plotly figure gets static files: every figure but an animation (frames) or one driven by a
    slider (steps that restyle its traces), whose static image would show only its first step; that one stays
    interactive HTML alone (its study draws the steps worth a still as small multiples)."""
    return fig is not None and hasattr(fig, "to_image") and not fig.frames and not fig.layout.sliders


# --- kaleido: one server per process

_KALEIDO = {"started": False}
CHROMIUM_HINT = ("static plotly figures (PNG/PDF) are drawn by kaleido in Chromium, and none was found "
                 "(not on PATH, no BROWSER_PATH): install it with `apt-get install chromium` (or run "
                 "`make setup` as root)")


def find_chromium() -> str | None:
    """The browser kaleido would drive (choreographer's own search: BROWSER_PATH, then PATH), or None."""
    from choreographer.browsers.chromium import Chromium

    return Chromium.find_browser(skip_local=False)


def check_chromium() -> None:
    """ConfigError naming what to install when no Chromium is found (before a render computes)."""
    if find_chromium() is None:
        raise ConfigError(CHROMIUM_HINT)


def kaleido_server() -> None:
    """Start this process's kaleido server, stopped at exit. Chromium launches in the server's thread (≈2 s
    of CPU): an image asked for at once waits for it, one asked for later does not (later images ≈0.2 s)."""
    if _KALEIDO["started"]:
        return
    import kaleido

    check_chromium()
    kaleido.start_sync_server(silence_warnings=True)
    _KALEIDO["started"] = True
    atexit.register(stop_kaleido_server)


def kaleido_running() -> bool:
    return _KALEIDO["started"]


def stop_kaleido_server() -> None:
    if _KALEIDO["started"]:
        import kaleido

        kaleido.stop_sync_server(silence_warnings=True)
        _KALEIDO["started"] = False


#: Chromium's PDF writer stamps the time of writing; a fixed date of the same length keeps the xref offsets.
_PDF_DATE = re.compile(rb"/(CreationDate|ModDate) ?\(D:[0-9]{14}[^)]*\)")


def _fixed_date(m: re.Match) -> bytes:
    stamp = b"D:19700101000000+00'00'"
    head = b"/" + m.group(1) + (b" (" if b" (" in m.group(0) else b"(")
    body = m.group(0)[len(head):-1]
    return head + (stamp[: len(body)] if len(body) <= len(stamp) else stamp + b" " * (len(body) - len(stamp))) + b")"


def stable_pdf(data: bytes) -> bytes:
    """Chromium's PDF with its creation and modification dates fixed (same byte length), so a rebuild writes
    the same bytes."""
    return _PDF_DATE.sub(_fixed_date, data)


def plotly_image(fig: Any, fmt: str) -> bytes:
    """One image of ``fig`` through this process's kaleido server, at the figure's layout size."""
    kaleido_server()
    with warnings.catch_warnings():  # "kopts is ignored if using a server": we use the server on purpose
        warnings.simplefilter("ignore", UserWarning)
        data = pio.to_image(fig, format=fmt, scale=png_scale() if fmt == "png" else 1.0, validate=False)
    return stable_pdf(data) if fmt == "pdf" else data


def save_plotly_static(fig: Any, base: str | Path, formats: tuple[str, ...] = FIGURE_FORMATS) -> list[Path]:
    """``<base>.<fmt>`` of a plotly figure for each format, drawn by kaleido, each written atomically."""
    base = Path(base)
    out = []
    for fmt in formats:
        path = base.with_name(f"{base.name}.{fmt}")
        data = plotly_image(fig, fmt)
        with atomic_path(path) as tmp:
            tmp.write_bytes(data)
        out.append(path)
    return out
