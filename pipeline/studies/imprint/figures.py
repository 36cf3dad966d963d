"""The seed's figures, from the train units' arrays: matplotlib (PNG, PDF) and plotly (HTML)."""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.contract import Context, Figure, Output
from pipeline.plotting import plt
from pipeline.studies.imprint.config import SPREAD, FigureSpec

OPTS = ("adam", "muon")
LABEL = {"adam": "Adam", "muon": "Muon"}
COLOR = {"adam": "#1f77b4", "muon": "#ff7f0e"}  # every figure of the study, matplotlib and plotly
MODEL = "MNIST via MLP(784-128-128-64-10, ReLU), W2 128x128"
CJK_FONT = "Droid Sans Fallback"


def _glyph_text() -> str:
    """'中' where a font that has it is installed (Droid Sans Fallback), else its code point."""
    from matplotlib import font_manager

    have = any(f.name == CJK_FONT for f in font_manager.fontManager.ttflist)
    return "'中'" if have else "U+4E2D"


def _font_kw() -> dict:
    return {"fontfamily": ["DejaVu Sans", CJK_FONT]}


def title(init: str) -> str:
    what = f"GLYPH {_glyph_text()} INIT" if init == "glyph" else "RANDOM INIT"
    return f"{MODEL}, {what}"


def stand_in(profile: str) -> str:
    """The label every smoke figure carries in its title and caption."""
    return "SMOKE STAND-IN" if profile == "smoke" else ""


def composite(arrays: dict, metas: dict, spec: FigureSpec, profile: str = "") -> plt.Figure:
    """W2 grid (Adam row, Muon row, one column per epoch), test accuracy, spectral norm of W2."""
    n = arrays["adam"]["w2"].shape[0]
    fig = plt.figure(figsize=(3 * n + 1.2, 13.5))
    outer = fig.add_gridspec(2, 1, height_ratios=[2.0, 2.2], hspace=0.12)
    top = outer[0].subgridspec(2, n, wspace=0.05, hspace=0.05)
    bottom = outer[1].subgridspec(2, 1, hspace=0.45)
    im = None
    for r, opt in enumerate(OPTS):
        for e in range(n):
            ax = fig.add_subplot(top[r, e])
            im = ax.imshow(arrays[opt]["w2"][e], vmin=spec.vmin, vmax=spec.vmax, interpolation="nearest",
                           cmap="viridis")
            ax.set_xticks([])
            ax.set_yticks([])
            ax.grid(False)
            if r == 0:
                ax.set_title("Initial" if e == 0 else f"Epoch {e}", fontsize=16)
            if e == 0:
                ax.set_ylabel(LABEL[opt], fontsize=22, rotation=0, ha="right", va="center", labelpad=10)
    first, last = fig.axes[0].get_position(), fig.axes[-1].get_position()
    cax = fig.add_axes([last.x1 + 0.0075, last.y0, 0.0075, first.y1 - last.y0])
    cb = fig.colorbar(im, cax=cax, ticks=np.linspace(spec.vmin, spec.vmax, spec.cbar_ticks), format="%.2f")
    cb.ax.tick_params(labelsize=14)
    epochs = arrays["adam"]["epoch"]
    acc_ax = fig.add_subplot(bottom[0])
    sn_ax = fig.add_subplot(bottom[1])
    for opt in OPTS:
        acc_ax.plot(epochs, arrays[opt]["test_acc"], label=f"{LABEL[opt]} val acc (MNIST test set)", lw=2,
                    color=COLOR[opt])
        sn_ax.plot(epochs, arrays[opt]["spectral_norm_w2"], label=f"{LABEL[opt]} spectral norm of W2", lw=2,
                   color=COLOR[opt])
    for ax in (acc_ax, sn_ax):
        ax.set_xlabel("Epoch", fontsize=16)
        ax.set_xticks(epochs)
        ax.set_xlim(epochs[0] - 0.2, epochs[-1] + 0.2)
        ax.tick_params(labelsize=14)
        ax.legend(fontsize=14)
    acc_ax.set_ylabel("test accuracy", fontsize=14)
    sn_ax.set_ylabel(r"$\|W_2\|_2$", fontsize=14)
    acc_ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda x, _p: f"{x:.0%}"))
    m = metas["adam"]
    tag = f" ({stand_in(profile)}, profile {profile})" if stand_in(profile) else ""
    fig.suptitle(f"{title(m['init'])}{tag}\n{m['precision']} parameters, init seed {m['init_seed']}, "
                 f"data seed {m['data_seed']}/{metas['muon']['data_seed']}, {m['n_train']} train images",
                 fontsize=22, y=0.965, **_font_kw())
    return fig


def glyph_panels(arrays: dict, metas: dict, spec: FigureSpec, profile: str = "") -> plt.Figure:
    """The seed's single panels: bitmap, W2 at glyph init, W2 after Adam, W2 after Muon."""
    bitmap = arrays["adam"]["glyph_bitmap"]
    ea, em = metas["adam"]["epochs"], metas["muon"]["epochs"]
    panels = [("glyph bitmap", bitmap, 0.0, 1.0),
              ("W2 at glyph init", arrays["adam"]["w2"][0], spec.vmin, spec.vmax),
              (f"W2 after Adam (epoch {ea})", arrays["adam"]["w2"][-1], spec.vmin, spec.vmax),
              (f"W2 after Muon (epoch {em})", arrays["muon"]["w2"][-1], spec.vmin, spec.vmax)]
    fig, axes = plt.subplots(1, 4, figsize=(19, 4.4), gridspec_kw={"wspace": 0.35})
    for ax, (name, w, lo, hi) in zip(axes, panels):
        im = ax.imshow(w, vmin=lo, vmax=hi, interpolation="nearest", cmap="viridis")
        ax.set_title(name)
        ax.grid(False)
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    m = metas["adam"]
    tag = f" — {stand_in(profile)}" if stand_in(profile) else ""
    fig.suptitle(f"glyph {_glyph_text()} ({m['glyph']}, sha256 {m['glyph_sha256'][:12]}), "
                 f"scale {m['glyph_scale']}{tag}", **_font_kw())
    return fig


def composite_html(arrays: dict, metas: dict, spec: FigureSpec) -> Any:
    """Interactive version: W2 of both runs with an epoch slider, and the two curves."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    epochs = arrays["adam"]["epoch"].tolist()
    w = {opt: np.round(arrays[opt]["w2"].astype(np.float64), 4) for opt in OPTS}
    fig = make_subplots(rows=2, cols=2, row_heights=[0.62, 0.38], vertical_spacing=0.1,
                        subplot_titles=("Adam: W2", "Muon: W2", "test accuracy", "spectral norm of W2"))
    for c, opt in enumerate(OPTS, start=1):
        fig.add_trace(go.Heatmap(z=w[opt][0], zmin=spec.vmin, zmax=spec.vmax, colorscale="Viridis",
                                 showscale=c == 2, name=LABEL[opt],
                                 colorbar={"len": 0.6, "y": 1.0, "yanchor": "top"}), row=1, col=c)
    for c, key in ((1, "test_acc"), (2, "spectral_norm_w2")):
        for opt in OPTS:
            fig.add_trace(go.Scatter(x=epochs, y=arrays[opt][key].tolist(), mode="lines+markers",
                                     name=LABEL[opt], legendgroup=opt, showlegend=c == 1,
                                     line={"color": COLOR[opt]}), row=2, col=c)
        fig.add_trace(go.Scatter(x=[0, 0], y=[arrays[o][key][0] for o in OPTS], mode="markers",
                                 marker={"size": 14, "symbol": "circle-open", "color": "black"},
                                 showlegend=False, hoverinfo="skip"), row=2, col=c)
    moving = [0, 1, 4, 7]  # the two heatmaps and the two epoch markers

    def frame_data(e: int) -> list:
        return [go.Heatmap(z=w["adam"][e]), go.Heatmap(z=w["muon"][e]),
                go.Scatter(x=[e, e], y=[arrays[o]["test_acc"][e] for o in OPTS]),
                go.Scatter(x=[e, e], y=[arrays[o]["spectral_norm_w2"][e] for o in OPTS])]

    fig.frames = [go.Frame(data=frame_data(e), traces=moving, name=str(e)) for e in epochs]
    steps = [{"label": "Initial" if e == 0 else f"Epoch {e}", "method": "animate",
              "args": [[str(e)], {"mode": "immediate", "frame": {"duration": 0, "redraw": True},
                                  "transition": {"duration": 0}}]} for e in epochs]
    for c in (1, 2):
        fig.update_yaxes(autorange="reversed", scaleanchor=f"x{c}", row=1, col=c)
    fig.update_yaxes(tickformat=".0%", row=2, col=1)
    fig.update_xaxes(title_text="Epoch", row=2)
    m = metas["adam"]
    slider = {"active": 0, "steps": steps, "pad": {"t": 40}, "currentvalue": {"prefix": "W2 at "}}
    fig.update_layout(title=f"{title(m['init'])} ({m['precision']}, {m['epochs']} epochs)",
                      height=950, width=1150, legend={"x": 1.02, "y": 0.3, "yanchor": "top"},
                      sliders=[slider])
    return fig


def spread_figure(spread: dict, profile: str) -> plt.Figure:
    """Epoch-1 test accuracy per init seed, Adam and Muon joined per seed: the gap next to its spread."""
    seeds = list(spread["test_acc"])
    x = np.arange(len(seeds))
    acc = {opt: np.array([spread["test_acc"][s][opt][1] for s in seeds]) for opt in OPTS}
    fig, (ax, gx) = plt.subplots(1, 2, figsize=(10, 4.2), gridspec_kw={"width_ratios": [3, 1.3], "wspace": 0.35})
    ax.vlines(x, acc["adam"], acc["muon"], color="0.75", lw=1.5, zorder=1)
    for opt in OPTS:
        ax.scatter(x, acc[opt], color=COLOR[opt], s=36, zorder=2, label=LABEL[opt])
    ax.set_xticks(x, seeds)
    ax.set_xlabel("init seed")
    ax.set_ylabel("test accuracy after epoch 1")
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _p: f"{v:.0%}"))
    ax.legend(loc="lower right")
    gap = 100 * (acc["muon"] - acc["adam"])
    gx.scatter(np.zeros_like(gap), gap, color="0.3", s=30)
    gx.axhline(0, color="0.6", lw=0.8)
    gx.set_xticks([])
    gx.set_xlim(-1, 1)
    gx.set_ylabel("Muon − Adam (points)")
    gx.set_title(f"gap {gap.min():.1f} to {gap.max():.1f}", fontsize=10)
    tag = f" ({stand_in(profile)})" if stand_in(profile) else ""
    fig.suptitle(f"{spread['init']} init, {len(seeds)} init seeds: epoch-1 test accuracy{tag}\n"
                 f"{spread['precision']} parameters, data seed {spread['data_seed']}, "
                 f"{spread['n_train']} train images", fontsize=11)
    return fig


def render_spread(ctx: Context, unit: str) -> Output:
    spread = ctx.read("train", SPREAD, "spread.json")
    seeds = list(spread["test_acc"])
    adam = [spread["test_acc"][s]["adam"][1] for s in seeds]
    muon = [spread["test_acc"][s]["muon"][1] for s in seeds]
    gaps = [100 * (m - a) for a, m in zip(adam, muon)]
    prefix = f"{stand_in(ctx.profile)}: smoke settings, not the paper's. " if stand_in(ctx.profile) else ""
    caption = (f"{prefix}Test accuracy after epoch 1 from the {spread['init']} init drawn with init seeds "
               f"{', '.join(seeds)}, each trained with Adam and with Muon from the same data order "
               f"({spread['precision']}, profile {ctx.profile}). Adam's epoch-1 accuracy spans "
               f"{100 * min(adam):.1f}–{100 * max(adam):.1f} %, Muon's {100 * min(muon):.1f}–{100 * max(muon):.1f} %; "
               f"Muon leads by {min(gaps):.1f} to {max(gaps):.1f} points. The seed's single draw (Adam 89.5 % "
               "vs Muon 94.9 %) is one point of this spread.")
    fig = Figure(id=SPREAD, mpl=spread_figure(spread, ctx.profile), caption=caption, sources=[("train", SPREAD)],
                 seed_figure="play_15_0 (glyph composite), epoch-1 test accuracy")
    return Output(figures=[fig])


def render(ctx: Context, unit: str) -> Output:
    spec = ctx.cfg.figures[unit]
    runs = {opt: getattr(spec, opt) for opt in OPTS}
    arrays = {opt: ctx.read("train", key, "arrays.npz") for opt, key in runs.items()}
    metas = {opt: ctx.read("train", key, "metrics.json") for opt, key in runs.items()}
    init = metas["adam"]["init"]
    sources = [("train", key) for key in runs.values()]
    what = "glyph '中'" if init == "glyph" else "random"
    prefix = f"{stand_in(ctx.profile)}: smoke settings, not the paper's. " if stand_in(ctx.profile) else ""
    glyph = metas["adam"].get("glyph_provenance")
    drawn = ""
    if glyph:
        font = "Droid Sans Fallback" if glyph["shape"] == "droid" else "the font-free rectangles"
        why = f"; {glyph['fallback']}" if glyph["fallback"] else ""
        drawn = f" The glyph is drawn with {font} (asked: {glyph['requested']}{why})."
    figs = [Figure(
        id=unit, mpl=composite(arrays, metas, spec, ctx.profile), plotly=composite_html(arrays, metas, spec),
        sources=sources,
        seed_figure=("play_15_0 (glyph init: 'SHAPE A INIT')" if init == "glyph" else "play_16_0 (random init)"),
        caption=(f"{prefix}{what} init: W2 (128x128) of the Adam and Muon runs at each epoch, test accuracy and "
                 f"spectral norm of W2 per epoch ({metas['adam']['precision']}, {metas['adam']['epochs']} epochs, "
                 f"profile {ctx.profile}).{drawn} HTML: epoch slider."))]
    if spec.glyph_panels:
        figs.append(Figure(
            id=f"{unit}_panels", mpl=glyph_panels(arrays, metas, spec, ctx.profile), sources=sources,
            seed_figure="play_5_1, play_7_0, play_10_0, play_13_0 (single panels)",
            caption=f"{prefix}The glyph bitmap, W2 at glyph init, and W2 after training with Adam and with Muon."
                    f"{drawn}"))
    return Output(figures=figs)
