"""render@<unit>: the figures of the superposition study, from the train and extract outputs.

Plotly geometry and heat-map small multiples at ``render.panel_epochs`` (static PNG/PDF of the notebook's
``plot_weights_interactive`` and ``visualize_matrices_with_slider``, each point labelled as there) and one plotly
slider per figure seed (interactive HTML only: an image of it would show its first step alone); matplotlib loss
curves. Axis and colour ranges are fixed across panels and frames, as in the seed: geometry axes span
±1.1·max|w| over all snapshots of that weight; heat maps use the global min/max over all snapshots.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go
from matplotlib.colors import to_hex
from plotly.subplots import make_subplots

from pipeline.contract import Context, Figure, Output
from pipeline.plotting import PLOTLY_STYLE, plt
from pipeline.studies.superposition.config import SUMMARY, Superposition

HIGHLIGHT = 42  # the seed notebook's seed
FEW_SEEDS = 10  # up to this many seeds every curve has its colour; beyond, only plateau seeds and seed 42


def frame_indices(n_snap: int, frames: int) -> np.ndarray:
    """At most ``frames`` snapshot indices, evenly spread, always including the first and last."""
    if n_snap <= frames:
        return np.arange(n_snap)
    return np.unique(np.round(np.linspace(0, n_snap - 1, frames)).astype(int))


def _snap(ep: np.ndarray, epoch: int) -> int:
    return int(np.flatnonzero(ep == epoch)[0])


def seed_colors(seeds: list[int]) -> dict[int, Any]:
    """One distinct colour per seed, the same in every figure of the study (seeds in sorted order take the
    palette's colours in turn; the notebook's seed is black)."""
    palette = ([plt.get_cmap("tab20")(i) for i in range(0, 20, 2)] + [plt.get_cmap("tab20")(i) for i in range(1, 20, 2)]
               + [plt.get_cmap("tab20b")(i) for i in (0, 4, 8, 12, 16, 2, 6, 10, 14, 18)]
               + [plt.get_cmap("tab20c")(i) for i in (0, 4, 8, 12)])
    others = sorted(s for s in set(seeds) if s != HIGHLIGHT)
    colors: dict[int, Any] = {s: palette[i % len(palette)] for i, s in enumerate(others)}
    colors[HIGHLIGHT] = "black"
    return colors


def zoom_window(losses: np.ndarray, seeds: list[int], detected: dict[str, dict], fallback: list[int]
                ) -> tuple[int | None, int, int]:
    """(seed, first epoch, last epoch) of the zoom: the variant's longest detected plateau with half its
    length either side (so the flat stretch and the drop after it fill the panel), else the configured
    window for every seed (seed None)."""
    best = None
    for s in seeds:
        for p in detected[str(s)]["plateaus"]:
            if best is None or p["length"] > best[1]["length"]:
                best = (s, p)
    if best is None:
        return None, fallback[0], min(fallback[1], losses.shape[0])
    s, p = best
    pad = max(p["length"] // 2, 10)
    return s, max(1, p["start_epoch"] - pad), min(losses.shape[0], p["drop_epoch"] + pad)


def loss_curves(curves: dict[str, tuple[list[int], np.ndarray]], detected: dict[str, dict[str, dict]],
                zoom: list[int], stand_in: str = "") -> plt.Figure:
    """Log-log loss of every seed per variant; seeds with a detected plateau (and the notebook's seed, and
    every seed when there are at most ``FEW_SEEDS``) in their own colour, plateaus thick; bottom row a zoom
    on the longest plateau."""
    variants = list(curves)
    colors = seed_colors([s for v in variants for s in curves[v][0]])
    fig, axes = plt.subplots(2, len(variants), figsize=(6.4 * len(variants), 9.0), squeeze=False)
    for j, v in enumerate(variants):
        seeds, losses = curves[v]
        epochs = np.arange(1, losses.shape[0] + 1)
        zseed, z0, z1 = zoom_window(losses, seeds, detected[v], zoom)
        for row, ax in enumerate(axes[:, j]):
            for i, s in enumerate(seeds):
                info = detected[v][str(s)]
                shown = bool(info["plateaus"]) or s == HIGHLIGHT or len(seeds) <= FEW_SEEDS
                color, lw, z = (colors[s], 1.2, 4 if s == HIGHLIGHT else 3) if shown else ("0.75", 0.6, 1)
                ax.plot(epochs, losses[:, i], color=color, lw=lw, zorder=z,
                        label=f"seed {s}" if shown and row == 0 else None)
                for p in info["plateaus"]:
                    sl = slice(p["start_epoch"] - 1, p["end_epoch"])
                    ax.plot(epochs[sl], losses[sl, i], color=color, lw=5, alpha=0.4, zorder=z,
                            solid_capstyle="butt")
                    ax.plot([p["drop_epoch"]], [losses[p["drop_epoch"] - 1, i]], "o", color=color, ms=5,
                            zorder=z + 1)
            ax.set_xlabel("epoch")
            ax.set_ylabel("MSE loss")
            if row == 0:
                ax.set_xscale("log")
                ax.set_yscale("log")
                n_pl = sum(1 for s in seeds if detected[v][str(s)]["plateaus"])
                ax.set_title(f"{v}: {len(seeds)} seeds, {n_pl} with a plateau")
                ax.axvspan(z0, z1, color="0.9", zorder=0)
            else:
                window = slice(z0 - 1, z1)
                sel = [seeds.index(zseed)] if zseed is not None else list(range(len(seeds)))
                lo, hi = float(np.nanmin(losses[window, sel])), float(np.nanmax(losses[window, sel]))
                pad = 0.08 * (hi - lo) or 1e-3 * hi
                ax.set_xlim(z0, z1)
                ax.set_ylim(lo - pad, hi + pad)
                ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
                what = f"seed {zseed}'s plateau" if zseed is not None else "no plateau detected"
                ax.set_title(f"zoom ({what}): epochs {z0}–{z1}")
        if axes[0, j].get_legend_handles_labels()[0]:
            axes[0, j].legend(fontsize=9, ncol=2, loc="upper right")
    if stand_in:
        fig.suptitle(stand_in, fontsize=12)
    fig.tight_layout()
    return fig


#: the notebook's ``plot_weights_interactive`` points: ``mode="markers+text"``, every feature's index above its
#: point (``textposition="top center"``), ``marker=dict(size=8)``
GEOMETRY_MARKER, GEOMETRY_TEXT = 8, 9
GEOMETRY_SIDE = 300  # px of one square geometry panel


def feature_points(x: np.ndarray, y: np.ndarray, colour: str, name: str, visible: bool = True) -> go.Scatter:
    """One weight matrix's features as the notebook draws them: a point per feature, each labelled."""
    return go.Scatter(x=x.round(5), y=y.round(5), mode="markers+text", text=[str(i) for i in range(len(x))],
                      textposition="top center", marker={"size": GEOMETRY_MARKER, "color": colour},
                      textfont={"size": GEOMETRY_TEXT}, name=name, visible=visible, showlegend=False)


def geometry_panels(w_e: np.ndarray, w_u: np.ndarray, ep: np.ndarray, panel_epochs: list[int],
                    label: str, color: Any = "#636EFA") -> go.Figure:
    """The notebook's geometry view (``plot_weights_interactive``, every point labelled) at the panel epochs:
    rows W_E columns (feature i = W_E[:, i]) and W_U rows (W_U[i, :]), columns epochs; each row's square axes
    ±1.1·max|w| over all snapshots, as the notebook fixes them for its slider."""
    pts = {"W_E": np.transpose(w_e, (0, 2, 1)), "W_U": w_u}  # [K, f, n]
    colour = to_hex(color)
    rows, cols = len(pts), len(panel_epochs)
    gap, vgap = 70, 95
    plot_w, plot_h = GEOMETRY_SIDE * cols + gap * (cols - 1), GEOMETRY_SIDE * rows + vgap * (rows - 1)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[f"epoch {e}" for _ in pts for e in panel_epochs],
                        horizontal_spacing=gap / plot_w if cols > 1 else 0.0, vertical_spacing=vgap / plot_h)
    for r, (name, p) in enumerate(pts.items(), start=1):
        lim = [-1.1 * float(np.abs(p).max()), 1.1 * float(np.abs(p).max())]
        for c, e in enumerate(panel_epochs, start=1):
            q = p[_snap(ep, e)]
            fig.add_trace(feature_points(q[:, 0], q[:, 1], colour, f"{name}, epoch {e}"), row=r, col=c)
            fig.update_xaxes(range=lim, title_text="hidden 0" if r == rows else None, row=r, col=c)
            fig.update_yaxes(range=lim, title_text=f"{name}: hidden 1" if c == 1 else None, row=r, col=c)
    for ann in fig.layout.annotations:  # the subplot titles: a little smaller than the figure's
        ann.font = {"size": PLOTLY_STYLE["font"]["size"]}
    margin = {"t": 90, "l": 90, "r": 40, "b": 70}
    fig.update_layout(title={"text": f"{label}: features in the hidden space (top W_E columns, bottom W_U rows)"},
                      margin=margin, width=plot_w + margin["l"] + margin["r"],
                      height=plot_h + margin["t"] + margin["b"])
    return fig


def heatmap_panels(w_e: np.ndarray, w_u: np.ndarray, ep: np.ndarray, panel_epochs: list[int],
                   label: str) -> go.Figure:
    """Rows: W_U·W_E and ReLU(W_U·W_E) (named on the left); columns: epochs (the titles). Each panel is the
    notebook's ``go.Heatmap(z=matrix[::-1], colorscale='magma')``, its colour range the global min/max of
    that matrix over all snapshots (the notebook's ``const_colorbar=True``, as the slider), one colour bar
    per row. The rows are stored reversed as the notebook stores them and placed at their feature index on
    a reversed y axis, so output feature 0 is the top row, as in the notebook and the slider, and the ticks
    and hover name the true feature."""
    m = np.matmul(w_u, w_e).astype(np.float32)  # [K, f, f]
    mats = {"W_U·W_E": m, "ReLU(W_U·W_E)": np.maximum(m, 0)}
    rows, cols = len(mats), len(panel_epochs)
    f = m.shape[1]
    gap, vgap = 55, 95  # px between panels: for the y ticks; for the x ticks and the next row's titles
    side = max(230, (560 - gap * (cols - 1)) // cols)  # a panel's square, px (the title's width at the least)
    plot_w, plot_h = side * cols + gap * (cols - 1), side * rows + vgap * (rows - 1)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[f"epoch {e}" for _ in mats for e in panel_epochs],
                        horizontal_spacing=gap / plot_w if cols > 1 else 0.0, vertical_spacing=vgap / plot_h)
    for r, (name, a) in enumerate(mats.items(), start=1):
        zmin, zmax = float(a.min()), float(a.max())
        yd = fig.get_subplot(r, 1).yaxis.domain
        bar = {"x": 1.0, "xanchor": "left", "xpad": 12, "y": (yd[0] + yd[1]) / 2, "yanchor": "middle",
               "len": yd[1] - yd[0], "thickness": 14}
        for c, e in enumerate(panel_epochs, start=1):
            fig.add_trace(go.Heatmap(z=a[_snap(ep, e)][::-1], y=np.arange(f)[::-1], colorscale="magma",
                                     zmin=zmin, zmax=zmax, showscale=c == cols, colorbar=bar if c == cols else None,
                                     name=f"{name}, epoch {e}",
                                     hovertemplate="output %{y}, input %{x}: %{z:.3g}<extra>%{fullData.name}</extra>"),
                          row=r, col=c)
            fig.update_yaxes(autorange="reversed", title_text=f"{name}<br>output feature" if c == 1 else None,
                             row=r, col=c)
            fig.update_xaxes(title_text="input feature" if r == rows else None, row=r, col=c)
    for ann in fig.layout.annotations:  # the subplot titles: a little smaller than the figure's
        ann.font = {"size": PLOTLY_STYLE["font"]["size"]}
    margin = {"t": 90, "l": 100, "r": 110, "b": 70}
    fig.update_layout(title={"text": f"{label}: W_U·W_E (top) and ReLU(W_U·W_E) (bottom)"}, margin=margin,
                      width=plot_w + margin["l"] + margin["r"], height=plot_h + margin["t"] + margin["b"])
    return fig


def slider_html(w_e: np.ndarray, w_u: np.ndarray, ep: np.ndarray, frames: int, label: str) -> Any:
    """Four panels (W_E and W_U feature points, W_U·W_E and ReLU of it) driven by one epoch slider."""
    idx = frame_indices(len(ep), frames)
    pe, pu = np.transpose(w_e, (0, 2, 1)), w_u
    m = np.matmul(w_u, w_e).astype(np.float32)
    r = np.maximum(m, 0)
    lim_e, lim_u = 1.1 * float(np.abs(pe).max()), 1.1 * float(np.abs(pu).max())
    rng = {"m": (float(m.min()), float(m.max())), "r": (float(r.min()), float(r.max()))}
    fig = make_subplots(rows=2, cols=2, horizontal_spacing=0.12, vertical_spacing=0.1,
                        subplot_titles=("W_E columns", "W_U rows", "W_U·W_E", "ReLU(W_U·W_E)"))
    per = 4
    for k, j in enumerate(idx):
        vis = k == 0
        for col, p, name in ((1, pe[j], "W_E"), (2, pu[j], "W_U")):
            fig.add_trace(feature_points(p[:, 0], p[:, 1], "#636EFA", f"{name}, epoch {int(ep[j])}", vis),
                          row=1, col=col)
        for col, a, key, bar_x in ((1, m[j], "m", 0.44), (2, r[j], "r", 1.0)):
            fig.add_trace(go.Heatmap(z=a, colorscale="Magma", zmin=rng[key][0], zmax=rng[key][1],
                                     colorbar={"len": 0.42, "y": 0.21, "x": bar_x}, visible=vis,
                                     showscale=True), row=2, col=col)
    steps = []
    for k, j in enumerate(idx):
        visible = [False] * (per * len(idx))
        visible[per * k : per * (k + 1)] = [True] * per
        steps.append({"method": "restyle", "args": ["visible", visible], "label": str(int(ep[j]))})
    fig.update_layout(sliders=[{"active": 0, "currentvalue": {"prefix": "epoch "}, "pad": {"t": 40},
                                "steps": steps}],
                      width=950, height=1000, title=f"{label} ({len(idx)} of {len(ep)} snapshots)")
    fig.update_xaxes(range=[-lim_e, lim_e], title_text="hidden 0", row=1, col=1)
    fig.update_yaxes(range=[-lim_e, lim_e], title_text="hidden 1", row=1, col=1)
    fig.update_xaxes(range=[-lim_u, lim_u], title_text="hidden 0", row=1, col=2)
    fig.update_yaxes(range=[-lim_u, lim_u], title_text="hidden 1", row=1, col=2)
    for col in (1, 2):
        fig.update_yaxes(autorange="reversed", row=2, col=col)  # row 0 at the top, as the seed
    return fig


def stand_in(ctx: Context) -> str:
    """The smoke profile's label for titles and captions ('' for the other profiles)."""
    if ctx.profile != "smoke":
        return ""
    t = ctx.cfg.train
    return f"SMOKE STAND-IN: {t.epochs} epochs, {len(t.seeds)} seeds, not the paper's 50,000 epochs and 33 seeds"


def render_summary(ctx: Context, unit: str) -> Output:
    """The loss curves of every variant with the plateaus extract@summary detected."""
    cfg: Superposition = ctx.cfg
    detected = ctx.read("extract", SUMMARY, "plateaus.json")["variants"]
    curves = {}
    for v in cfg.variants:
        h = ctx.read("train", v, "history.npz")
        curves[v] = ([int(s) for s in h["seeds"]], h["losses"])
    note = stand_in(ctx)
    fig = Figure("loss_curves", mpl=loss_curves(curves, {v: detected[v]["seeds"] for v in curves},
                                                 cfg.render.zoom_epochs, note),
                 caption=(f"{note}. " if note else "") +
                         "Loss per epoch (log-log, MSE mean) for every seed of each variant. Seeds with a detected "
                         "plateau and the notebook's seed 42 (black) have their own colour, the same in every figure "
                         "of the study; their plateaus are thick and the epoch the loss drops is a dot; other seeds "
                         "grey. Bottom: zoom on the variant's longest plateau (shaded above), or on "
                         f"render.zoom_epochs {cfg.render.zoom_epochs} when none is detected.",
                 seed_figure="loss plot of train() (every 10,000 epochs)",
                 sources=[("train", v) for v in cfg.variants] + [("extract", SUMMARY)])
    return Output(figures=[fig])


def render(ctx: Context, unit: str) -> Output:
    """One variant's geometry, heat-map and slider figures of the figure seeds."""
    cfg: Superposition = ctx.cfg
    rp = cfg.render
    h = ctx.read("train", unit, "history.npz")
    seeds = [int(s) for s in h["seeds"]]
    tied = cfg.variants[unit].tied
    src = [("train", unit)]
    colors = seed_colors(seeds)
    note = stand_in(ctx)
    figs = []
    for seed in rp.figure_seeds:
        i = seeds.index(seed)
        w_e, w_u, ep = h["w_e"][:, i], h["w_u"][:, i], h["snap_epochs"]
        tag = f"{unit}_seed{seed}"
        label = f"{unit} model, seed {seed}" + (" (SMOKE STAND-IN)" if note else "")
        pre = f"{note}. " if note else ""
        figs.append(Figure(f"{tag}_geometry",
                           plotly=geometry_panels(w_e, w_u, ep, rp.panel_epochs, label, colors[seed]),
                           caption=f"{pre}{label}: the 50 features in the 2-D hidden space (top: W_E columns, "
                                   "bottom: W_U rows) at chosen epochs, each labelled with its index as in the "
                                   "notebook, in the seed's colour of the loss curves; axes fixed over "
                                   "training." +
                                   (" Tied: W_U = W_Eᵀ, so both rows agree." if tied else ""),
                           seed_figure="plot_weights_interactive (static frames)", sources=src))
        figs.append(Figure(f"{tag}_heatmaps", plotly=heatmap_panels(w_e, w_u, ep, rp.panel_epochs, label),
                           caption=f"{pre}{label}: W_U·W_E (top) and ReLU(W_U·W_E) (bottom) at chosen epochs; magma, "
                                   "colour range fixed over all snapshots.",
                           seed_figure="visualize_matrices_with_slider (static frames)", sources=src))
        figs.append(Figure(f"{tag}_slider", plotly=slider_html(w_e, w_u, ep, rp.html_frames, label),
                           caption=f"{pre}{label}: interactive, epoch slider over {rp.html_frames} of the {len(ep)} "
                                   "snapshots: feature directions of W_E and W_U, W_U·W_E and its ReLU.",
                           seed_figure="plot_weights_interactive + visualize_matrices_with_slider", sources=src))
    return Output(figures=figs)
