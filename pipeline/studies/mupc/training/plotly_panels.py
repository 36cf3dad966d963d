"""Plotly drawing helpers of the μPC training figures, drawn as the seed notebook (001) draws them.

The notebook draws one ``go.Figure`` per panel: a mean ± 1 std band (``go.Scatter`` ``fill="toself"``,
``opacity=0.3``, an invisible line) under a ``mode="lines+markers"`` mean line (``width=2``), colours from
``plotly.colors.sample_colorscale`` (:func:`pipeline.plotting.palette`), three x ticks at the first, middle and
last evaluation, ``height=300, width=450`` and ``font=dict(size=16)``. Here the panels of one dataset are the
subplots of one figure (:class:`Panels`, one legend with each name once); what the project adds (the clean
variant, the notebook's 10 % fill where PC is not measured, the optimum star of a contour) is written as a
grey note below the plot, apart from what the notebook draws.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pipeline.plotting import PLOTLY_STYLE

BAND_OPACITY = 0.3  # the notebook's fill opacity
INVISIBLE = "rgba(255,255,255,0)"  # the notebook's band outline
NOTE_COLOUR = "#666"


class Panels:
    """A figure of ``rows`` × ``cols`` panels (``make_subplots``), each ``panel`` px (width, height); the legend
    lists each (name, colour) once, the repeats joining its group so that a click toggles them together."""

    def __init__(self, rows: int, cols: int, titles: Sequence[str] | None = None, panel: tuple[int, int] | None = None,
                 title: str = "", hspace: float | None = None, vspace: float | None = None, legend: bool = True):
        w, h = panel or PLOTLY_STYLE["panel"]
        self.rows, self.cols = rows, cols
        self.fig = make_subplots(rows=rows, cols=cols, subplot_titles=list(titles) if titles else None,
                                 horizontal_spacing=hspace if hspace is not None else min(0.3, 0.24 / cols * 2),
                                 vertical_spacing=vspace if vspace is not None else min(0.3, 0.36 / rows))
        self.seen: set[tuple[str, str]] = set()
        self.xs: dict[tuple[int, int], np.ndarray] = {}
        self.notes: list[str] = []
        self.legend = legend
        self.size = (int(w * cols + (170 if legend else 60)), int(h * rows + 110))
        self.fig.update_layout(title={"text": title}, width=self.size[0], height=self.size[1], showlegend=legend,
                               margin={"t": 90, "l": 70, "r": 40, "b": 70})
        for a in self.fig.layout.annotations:  # the subplot titles: a little smaller than the figure's
            a.font = {"size": PLOTLY_STYLE["font"]["size"]}

    def show(self, name: str, colour: Any) -> bool:
        """Whether a trace named ``name`` in ``colour`` enters the legend (the first one does)."""
        key = (name, str(colour))
        if key in self.seen:
            return False
        self.seen.add(key)
        return True

    def add(self, trace: Any, r: int, c: int) -> None:
        self.fig.add_trace(trace, row=r, col=c)

    def axes(self, r: int, c: int, x: str | None = None, y: str | None = None, **y_kw: Any) -> None:
        self.fig.update_xaxes(title_text=x, row=r, col=c)
        self.fig.update_yaxes(title_text=y, row=r, col=c, **y_kw)

    def hide(self, r: int, c: int) -> None:
        self.fig.update_xaxes(visible=False, row=r, col=c)
        self.fig.update_yaxes(visible=False, row=r, col=c)

    def legend_top(self) -> None:
        """The legend in one row at the figure's top right, beside the title: where panels carry their own colour
        bars, plotly's default place (right of the plot) is on top of the last column's bar."""
        self.fig.update_layout(legend={"orientation": "h", "yref": "container", "y": 0.995, "yanchor": "top",
                                       "x": 1.0, "xanchor": "right"})

    def note(self, text: str) -> None:
        """A line of what the project adds, written below the plot (grey), apart from the notebook's drawing."""
        self.notes.append(text)

    def done(self) -> go.Figure:
        """The figure: the notebook's three x ticks on each curve panel, the notes below the plot."""
        for (r, c), x in self.xs.items():
            n = len(x)
            ticks = [x[0], x[int((n - 1) / 2)], x[-1]] if n else []
            ticks = list(dict.fromkeys(float(t) for t in ticks))
            self.fig.update_xaxes(tickvals=ticks, ticktext=[f"{t:g}" for t in ticks], row=r, col=c)
        if self.notes:
            chars = max(60, int(self.size[0] / 7.5))
            lines = [ln for t in self.notes for ln in textwrap.wrap(t, chars)]
            self.fig.add_annotation(text="<br>".join(lines), xref="paper", yref="paper", x=0, y=0, xanchor="left",
                                    yanchor="top", yshift=-72, showarrow=False, align="left",
                                    font={"size": PLOTLY_STYLE["note_size"], "color": NOTE_COLOUR})
            extra = 16 * len(lines) + 24
            self.fig.update_layout(height=self.size[1] + extra, margin={"b": 70 + extra})
        return self.fig



EDGE = 1e-6  # decades added to each side of a contour's log axes (see contour's span)

def band(p: Panels, r: int, c: int, x: np.ndarray, mean: np.ndarray, std: np.ndarray, colour: Any, label: str,
         marker: bool | str = True, dash: str | None = None, width: float = 2, hover: str | None = None,
         ticks: bool = True) -> None:
    """The notebook's mean ± 1 std: a filled band (opacity 0.3, no outline, no legend) and the mean line
    (``lines+markers``; ``marker=False``: ``lines``; ``marker="only"``: ``markers``). A one-point curve is
    drawn with its marker (a line alone would draw nothing)."""
    x = np.asarray(x, dtype=float)
    mean, std = np.asarray(mean, dtype=float), np.asarray(std, dtype=float)
    if len(mean) == 0:
        name = f"{label} (no evaluations)"
        p.add(go.Scatter(x=[], y=[], mode="lines", line={"color": colour, "dash": dash}, name=name,
                         showlegend=p.show(name, colour)), r, c)
        return
    if ticks and len(x) > len(p.xs.get((r, c), ())):
        p.xs[(r, c)] = x
    up, lo = mean + std, mean - std
    p.add(go.Scatter(x=list(x) + list(x[::-1]), y=list(up) + list(lo[::-1]), fill="toself", fillcolor=colour,
                     line={"color": INVISIBLE}, hoverinfo="skip", showlegend=False, opacity=BAND_OPACITY,
                     legendgroup=label), r, c)
    mode = "markers" if marker == "only" else ("lines+markers" if marker or len(mean) == 1 else "lines")
    p.add(go.Scatter(x=x, y=mean, mode=mode, line={"width": width, "color": colour, "dash": dash}, name=label,
                     legendgroup=label, showlegend=p.show(label, colour),
                     hovertemplate=None if hover is None else f"{hover}<br>%{{x}}: %{{y:.3g}}<extra>{label}</extra>"),
              r, c)


# ----------------------------------------------------------------------------- contours


def colorbar_ticks(z: np.ndarray) -> tuple[list[float], list[str]]:
    """The notebook's colour-bar ticks of a log10 panel: six from floor(min) to ceil(max), ``10^e`` (one decimal);
    only finite cells count (the notebook's failed cells are 0, whose log10 is −∞)."""
    finite = z[np.isfinite(z)]
    if not finite.size:
        return [], []
    emin, emax = int(np.floor(finite.min())), int(np.ceil(finite.max()))
    vals = [float(v) for v in np.linspace(emin, emax, num=6)]
    return vals, [f"10<sup>{e:.1f}</sup>" for e in vals]


def contour(p: Panels, r: int, c: int, a_lrs: Sequence[float], p_lrs: Sequence[float], z: np.ndarray,
            colorscale: str, title: str) -> None:
    """The notebook's ``go.Contour`` of log10 values over (activity lr, weight lr), ``contours_coloring="heatmap"``,
    its colour bar (title on the right, 10^e ticks) beside the panel, log axes (``nticks`` 5 and 2,
    ``exponentformat="power"``). ``a_lrs``, ``p_lrs`` ascending, ``z`` [param lr, act lr]; non-finite cells
    are gaps. A grid with a single lr on an axis cannot be contoured: a ``go.Heatmap`` of the same cells."""
    zz = np.where(np.isfinite(z), z, np.nan)
    vals, text = colorbar_ticks(np.asarray(z, dtype=float))
    sub = p.fig.get_subplot(r, c)
    xd, yd = sub.xaxis.domain, sub.yaxis.domain
    bar = {"title": {"text": title, "side": "right"}, "tickvals": vals, "ticktext": text, "x": xd[1] + 0.005,
           "xanchor": "left", "y": (yd[0] + yd[1]) / 2, "yanchor": "middle", "len": (yd[1] - yd[0]) * 1.08,
           "thickness": 12}
    kw = {"z": zz, "x": list(a_lrs), "y": list(p_lrs), "colorscale": colorscale, "showscale": True, "colorbar": bar,
          "name": title}
    both = zz.shape[0] >= 2 and zz.shape[1] >= 2
    p.add(go.Contour(contours_coloring="heatmap", **kw) if both else go.Heatmap(**kw), r, c)
    def span(v: Sequence[float]) -> list[float]:
        """The grid's extent (markers on its edge do not widen it), out by 1e-6 decades: plotly.js culls a
        marker outside the range, and its log10 of an edge value (0.1 → −0.9999999999999998) can be."""
        lv = np.log10(np.asarray(v, dtype=float))
        lo, hi = float(lv.min()), float(lv.max())
        return [lo - EDGE, hi + EDGE] if lo < hi else [lo - 0.5, hi + 0.5]

    p.fig.update_xaxes(type="log", nticks=5, exponentformat="power", range=span(a_lrs), row=r, col=c)
    p.fig.update_yaxes(type="log", nticks=2, exponentformat="power", range=span(p_lrs), row=r, col=c)
