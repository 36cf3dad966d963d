"""render@<unit>: the figures of the superposition study, from the train and extract outputs.

Matplotlib small multiples and loss curves, one plotly slider per figure seed. Axis and colour
ranges are fixed across panels and frames, as in the seed: geometry axes span ±1.1·max|w| over all
snapshots of that weight; heat maps use the global min/max over all snapshots.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.contract import Context, Figure, Output
from pipeline.plotting import plt
from pipeline.studies.superposition.config import SUMMARY, Superposition

HIGHLIGHT = 42  # the seed notebook's seed


def frame_indices(n_snap: int, frames: int) -> np.ndarray:
    """At most ``frames`` snapshot indices, evenly spread, always including the first and last."""
    if n_snap <= frames:
        return np.arange(n_snap)
    return np.unique(np.round(np.linspace(0, n_snap - 1, frames)).astype(int))


def _snap(ep: np.ndarray, epoch: int) -> int:
    return int(np.flatnonzero(ep == epoch)[0])


def loss_curves(curves: dict[str, tuple[list[int], np.ndarray]], detected: dict[str, dict[str, dict]],
                zoom: list[int]) -> plt.Figure:
    """Log-log loss of every seed per variant, detected plateaus thick and coloured; bottom row a zoom."""
    variants = list(curves)
    fig, axes = plt.subplots(2, len(variants), figsize=(6.2 * len(variants), 8.5), squeeze=False)
    cmap = plt.get_cmap("tab10")
    for j, v in enumerate(variants):
        seeds, losses = curves[v]
        epochs = np.arange(1, losses.shape[0] + 1)
        lo = np.nanmin(losses[zoom[0] - 1 : zoom[1]]) if zoom[1] <= len(epochs) else np.nanmin(losses)
        hi = np.nanmax(losses[zoom[0] - 1 : zoom[1]]) if zoom[1] <= len(epochs) else np.nanmax(losses)
        for row, ax in enumerate(axes[:, j]):
            k = 0
            for i, s in enumerate(seeds):
                info = detected[v][str(s)]
                if info["plateaus"]:
                    color, lw, z = cmap(k % 10), 1.0, 3
                    k += 1
                elif s == HIGHLIGHT:
                    color, lw, z = "black", 1.2, 4
                else:
                    color, lw, z = "0.7", 0.6, 1
                label = f"seed {s}" if (info["plateaus"] or s == HIGHLIGHT) else None
                ax.plot(epochs, losses[:, i], color=color, lw=lw, zorder=z, label=label if row == 0 else None)
                for p in info["plateaus"]:
                    sl = slice(p["start_epoch"] - 1, p["end_epoch"])
                    ax.plot(epochs[sl], losses[sl, i], color=color, lw=4, alpha=0.45, zorder=z,
                            solid_capstyle="butt")
                    ax.plot([p["drop_epoch"]], [losses[p["drop_epoch"] - 1, i]], "o", color=color, ms=4,
                            zorder=z + 1)
            ax.set_yscale("log")
            if row == 0:
                ax.set_xscale("log")
                ax.set_title(f"{v}: {len(seeds)} seeds, "
                             f"{sum(1 for s in seeds if detected[v][str(s)]['plateaus'])} with a plateau")
            else:
                ax.set_xlim(*zoom)
                ax.set_ylim(lo * 0.998, hi * 1.002)
                ax.set_title(f"zoom: epochs {zoom[0]}–{zoom[1]}")
            ax.set_xlabel("epoch")
            ax.set_ylabel("MSE loss")
        if any(ax.get_legend_handles_labels()[0] for ax in axes[:1, j]):
            axes[0, j].legend(fontsize=7, ncol=2, loc="upper right")
    fig.tight_layout()
    return fig


def geometry_panels(w_e: np.ndarray, w_u: np.ndarray, ep: np.ndarray, panel_epochs: list[int],
                    label: str) -> plt.Figure:
    """Rows: W_E columns (feature i = W_E[:, i]) and W_U rows (W_U[i, :]); columns: epochs."""
    pts = {"W_E (embedding)": np.transpose(w_e, (0, 2, 1)), "W_U (unembedding)": w_u}  # [K, f, n]
    cols = len(panel_epochs)
    fig, axes = plt.subplots(2, cols, figsize=(2.6 * cols, 5.6), squeeze=False)
    for r, (name, p) in enumerate(pts.items()):
        lim = 1.1 * float(np.abs(p).max())
        for c, e in enumerate(panel_epochs):
            ax = axes[r, c]
            q = p[_snap(ep, e)]
            ax.scatter(q[:, 0], q[:, 1], s=6, color="tab:blue", zorder=2)
            for i, (x, y) in enumerate(q[:, :2]):
                ax.annotate(str(i), (x, y), fontsize=4.5, color="tab:red", xytext=(1, 1),
                            textcoords="offset points")
            ax.set_xlim(-lim, lim)
            ax.set_ylim(-lim, lim)
            ax.set_aspect("equal")
            ax.axhline(0, color="0.6", lw=0.5)
            ax.axvline(0, color="0.6", lw=0.5)
            ax.tick_params(labelsize=6)
            ax.set_title(f"{name.split()[0]}, epoch {e}", fontsize=8)
    fig.suptitle(f"{label}: features in the hidden space (x = hidden 0, y = hidden 1)", fontsize=10)
    fig.tight_layout()
    return fig


def heatmap_panels(w_e: np.ndarray, w_u: np.ndarray, ep: np.ndarray, panel_epochs: list[int],
                   label: str) -> plt.Figure:
    """Rows: W_U·W_E and ReLU(W_U·W_E); columns: epochs."""
    m = np.matmul(w_u, w_e)  # [K, f, f]
    mats = {"W_U·W_E": m, "ReLU(W_U·W_E)": np.maximum(m, 0)}
    cols = len(panel_epochs)
    fig, axes = plt.subplots(2, cols, figsize=(2.4 * cols + 0.8, 5.0), squeeze=False)
    for r, (name, a) in enumerate(mats.items()):
        vmin, vmax = float(a.min()), float(a.max())
        for c, e in enumerate(panel_epochs):
            ax = axes[r, c]
            im = ax.imshow(a[_snap(ep, e)], cmap="magma", vmin=vmin, vmax=vmax)
            ax.set_title(f"{name}, epoch {e}", fontsize=8)
            ax.tick_params(labelsize=6)
            ax.grid(False)
        fig.colorbar(im, ax=list(axes[r]), shrink=0.85, pad=0.01)
    fig.suptitle(f"{label}: row = output feature, column = input feature", fontsize=10)
    return fig


def slider_html(w_e: np.ndarray, w_u: np.ndarray, ep: np.ndarray, frames: int, label: str) -> Any:
    """Four panels (W_E and W_U feature points, W_U·W_E and ReLU of it) driven by one epoch slider."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    idx = frame_indices(len(ep), frames)
    pe, pu = np.transpose(w_e, (0, 2, 1)), w_u
    m = np.matmul(w_u, w_e).astype(np.float32)
    r = np.maximum(m, 0)
    lim_e, lim_u = 1.1 * float(np.abs(pe).max()), 1.1 * float(np.abs(pu).max())
    rng = {"m": (float(m.min()), float(m.max())), "r": (float(r.min()), float(r.max()))}
    fig = make_subplots(rows=2, cols=2, horizontal_spacing=0.12, vertical_spacing=0.1,
                        subplot_titles=("W_E columns", "W_U rows", "W_U·W_E", "ReLU(W_U·W_E)"))
    labels = [str(i) for i in range(pe.shape[1])]
    per = 4
    for k, j in enumerate(idx):
        vis = k == 0
        for col, p in ((1, pe[j]), (2, pu[j])):
            fig.add_trace(go.Scatter(x=p[:, 0].round(5), y=p[:, 1].round(5), mode="markers+text",
                                     text=labels, textposition="top center", marker={"size": 6},
                                     textfont={"size": 8}, visible=vis, showlegend=False), row=1, col=col)
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


def render_summary(ctx: Context) -> Output:
    """The loss curves of every variant with the plateaus extract@summary detected."""
    cfg: Superposition = ctx.cfg
    detected = ctx.read("extract", SUMMARY, "plateaus.json")["variants"]
    curves = {}
    for v in cfg.variants:
        h = ctx.read("train", v, "history.npz")
        curves[v] = ([int(s) for s in h["seeds"]], h["losses"])
    fig = Figure("loss_curves", mpl=loss_curves(curves, {v: detected[v]["seeds"] for v in curves},
                                                 cfg.render.zoom_epochs),
                 caption="Loss per epoch (log-log, MSE mean) for every seed of each variant, with the detected "
                         "plateaus (thick, coloured) and the epoch the loss drops (dot); bottom: zoom.",
                 seed_figure="loss plot of train() (every 10,000 epochs)",
                 sources=[("train", v) for v in cfg.variants] + [("extract", SUMMARY)])
    return Output(figures=[fig])


def render(ctx: Context, unit: str) -> Output:
    if unit == SUMMARY:
        return render_summary(ctx)
    cfg: Superposition = ctx.cfg
    rp = cfg.render
    h = ctx.read("train", unit, "history.npz")
    seeds = [int(s) for s in h["seeds"]]
    tied = cfg.variants[unit].tied
    src = [("train", unit)]
    figs = []
    for seed in rp.figure_seeds:
        i = seeds.index(seed)
        w_e, w_u, ep = h["w_e"][:, i], h["w_u"][:, i], h["snap_epochs"]
        tag = f"{unit}_seed{seed}"
        label = f"{unit} model, seed {seed}"
        figs.append(Figure(f"{tag}_geometry", mpl=geometry_panels(w_e, w_u, ep, rp.panel_epochs, label),
                           caption=f"{label}: the 50 features in the 2-D hidden space (top: W_E columns, bottom: "
                                   "W_U rows) at chosen epochs; axes fixed over training." +
                                   (" Tied: W_U = W_Eᵀ, so both rows agree." if tied else ""),
                           seed_figure="plot_weights_interactive (static frames)", sources=src))
        figs.append(Figure(f"{tag}_heatmaps", mpl=heatmap_panels(w_e, w_u, ep, rp.panel_epochs, label),
                           caption=f"{label}: W_U·W_E (top) and ReLU(W_U·W_E) (bottom) at chosen epochs; magma, "
                                   "colour range fixed over all snapshots.",
                           seed_figure="visualize_matrices_with_slider (static frames)", sources=src))
        figs.append(Figure(f"{tag}_slider", plotly=slider_html(w_e, w_u, ep, rp.html_frames, label),
                           caption=f"{label}: interactive, epoch slider over {rp.html_frames} of the {len(ep)} "
                                   "snapshots: feature directions of W_E and W_U, W_U·W_E and its ReLU.",
                           seed_figure="plot_weights_interactive + visualize_matrices_with_slider", sources=src))
    return Output(figures=figs)
