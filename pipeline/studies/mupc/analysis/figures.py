"""render@<family>: the analysis figures F1–F6, F26, F27, drawn as the seed notebook (001) draws them: plotly
where it uses plotly, matplotlib for its phase diagrams; drawing only.

Every grid (N, H, L lists, slices, steps) comes from the resolved section; each renderer reads exactly the cells
its params list, from the one train unit of its family, and returns :class:`Figure` records: a plotly figure,
whose PNG and PDF kaleido writes beside its interactive HTML, or a matplotlib one (PNG and PDF). Every number the
claims read is computed by the extract (``extract.py``), never here. The notebook writes one file per panel; here
the panels of one configuration are the subplots of one figure (:class:`Panels`, one legend with each name once),
with the notebook's trace types, colour scales and their sampling (:func:`pipeline.plotting.palette`), axis types
and ticks:

* spectra (F1, F3): overlaid ``go.Histogram`` (``histnorm="probability"``, 50 bins, opacity 0.75), log y with a
  tick per decade; Blues across H, Reds across N, ``sample_colorscale(len(widths) + 3)[3:]``;
* phase diagrams (F2, F4, F26): matplotlib, as the notebook (``plot_metric_phase_diagram``,
  ``plot_loss_energy_ratio_phase_diagram``): ``imshow(origin="lower", interpolation="bicubic")`` over rows N and
  columns H ticked 2^k, viridis (ℒ/F*: inferno on its fixed log range [1, color_max], μPC cells written in
  white), a ``LogNorm`` where the notebook has one (κ unless sp without skips);
* layer traces (F5, F6): one ``go.Scatter`` (width 2, opacity 0.8) per layer ℓ ∈ {1, L/4, L/2, 3L/4, L}, Reds
  (activities) or Greens (weights) ``(5 + 3)[3:]``, log x ticked 2^k, log y for the activities of sp (a tick per
  decade across N, per ten decades across L); over steps: lines, three x ticks;
* curves over training (F27): ``go.Scatter`` lines per width, Purples (energy, with the loss of the widest net
  in #EF553B, width 1), Reds (loss), Viridis (ratio), ``(n + 3)[3:]``, linear axes, three x ticks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from matplotlib.colors import LogNorm

from pipeline.contract import Context, Figure, Output
from pipeline.plotting import palette, plt
from pipeline.studies.mupc.analysis.config import FwdPassParams, HessianParams, MupcAnalysisParams
from pipeline.studies.mupc.analysis.families import FAMILIES
from pipeline.studies.mupc.analysis.layout import (
    FWD_METRICS,
    cell_dir,
    fwd_key,
    hessian_configs,
    hessian_key,
    theory_key,
)
from pipeline.studies.mupc.engine.runs import fmt_num
from pipeline.studies.mupc.training.plotly_panels import Panels

LAYER_NAMES = ("ℓ = 1", "ℓ = 1/4L", "ℓ = 1/2L", "ℓ = 3/4L", "ℓ = L")  # the notebook's layer_idxs
Reader = Callable[[str], Any]  # a file of the source train unit by name -> JSON object or npz arrays

HIST_BINS, HIST_OPACITY = 50, 0.75  # the notebook's spectra
LINE_OPACITY = 0.8  # the notebook's layer traces and curves over training
LOSS_COLOUR = "#EF553B"  # the loss drawn with the energies
SKIP = 3  # the notebook samples its curve colours as sample_colorscale(scale, n + 3)[3:]
HIST_PANEL, CURVE_PANEL = (550, 400), (550, 350)  # px per panel
H_Z, ITER = "H<sub>z</sub>", "Training iteration"
H_Z_TEX = "$H_z$"  # the same in the matplotlib phase diagrams
TEX = {"D": "$D$", "O": "$O$", "H_theory": "$H_{theory}$"}
FWD_LABELS = {"avg_activity_l1": "‖z<sub>ℓ</sub>‖<sub>1</sub>", "avg_activity_l2": "‖z<sub>ℓ</sub>‖<sub>2</sub>",
              "param_spectral_norms": "‖W<sub>ℓ</sub>‖<sub>2</sub>"}


def pow2(v: float) -> str:
    """A grid value as the notebook's ticks and trace names write it: 2^k for a power of two, else the number."""
    k = float(np.log2(v)) if v > 0 else float("nan")
    return f"2<sup>{round(k)}</sup>" if np.isfinite(k) and abs(k - round(k)) < 1e-9 else fmt_num(v)


def _group_key(c: dict[str, Any]) -> str:
    return (f"{c['param']}_{c['init']}_{'skips' if c['skips'] else 'no_skips'}_decay{fmt_num(c['activity_decay'])}"
            f"_seed{c['seed']}")


def _hessian_groups(hp: HessianParams) -> dict[str, list[dict[str, Any]]]:
    """Configs that share a figure: every activation of one (param, init, skips, decay, seed)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for c in hessian_configs(hp):
        groups.setdefault(_group_key(c), []).append(c)
    return groups


def _cells(read: Reader, c: dict[str, Any]) -> dict[tuple[int, int], dict[str, Any]]:
    cells = read(f"{hessian_key(c)}/summary.json")["cells"]
    return {(x["N"], x["H"]): x for x in cells}


def _spectrum(read: Reader, c: dict[str, Any], N: int, H: int, name: str) -> np.ndarray:
    return read(f"{cell_dir(c, N, H)}/cell.npz")[name]


def _grid_of(cells: dict, Ns: list[int], Hs: list[int], key: str) -> np.ndarray:
    return np.array([[cells[(N, H)].get(key, np.nan) for H in Hs] for N in Ns], dtype=float)


def _finite(y: np.ndarray) -> np.ndarray:
    """``y`` with non-finite values (overflow) as gaps."""
    y = np.asarray(y, dtype=float)
    return np.where(np.isfinite(y), y, np.nan)


def _group_figure(family: str, gk: str, p: Panels, src: str, caption: str, seed: str) -> Figure:
    """One figure of a Hessian family for one configuration group (``<family>_<group>``)."""
    return Figure(f"{family}_{gk}", caption, seed, plotly=p.done(), sources=[("train", src)], family=family)


# ----------------------------------------------------------------------------- F1, F3: spectra


def _spectra(p: Panels, r: int, c: int, spectra: dict[str, np.ndarray], scale: str, n_colours: int,
             xlabel: str) -> None:
    """The notebook's ``plot_hessian_eigenvalues_slice``: one histogram per spectrum, overlaid, log y."""
    colours = palette(scale, max(n_colours, len(spectra)), skip=SKIP)[: len(spectra)]
    for (name, ev), col in zip(spectra.items(), colours, strict=True):
        p.add(go.Histogram(x=np.asarray(ev, dtype=float), histnorm="probability", nbinsx=HIST_BINS, name=name,
                           marker={"color": col}, opacity=HIST_OPACITY, legendgroup=name,
                           showlegend=p.show(name, col)), r, c)
    p.axes(r, c, xlabel, "Density (log)", type="log", exponentformat="power", dtick=1)


def _depth_width_hists(p: Panels, r: int, read: Reader, c: dict[str, Any], hp: HessianParams, name: str,
                       xlabel: str) -> None:
    """Row ``r``: the spectrum ``name`` across H at the widest N (Blues) and across N at the deepest H (Reds);
    both sample their colours by the number of widths, as the notebook does."""
    Nmax, Hmax = max(hp.widths), max(hp.depths)
    n = len(hp.widths)
    _spectra(p, r, 1, {f"H={pow2(H)}": _spectrum(read, c, Nmax, H, name) for H in hp.depths}, "Blues", n, xlabel)
    _spectra(p, r, 2, {f"N={pow2(N)}": _spectrum(read, c, N, Hmax, name) for N in hp.widths}, "Reds", n, xlabel)


def _hist_panels(rows: Sequence[str], hp: HessianParams, title: str) -> Panels:
    Nmax, Hmax = max(hp.widths), max(hp.depths)
    titles = [f"{row}, {s}" for row in rows for s in (f"across H, N={Nmax}", f"across N, H={Hmax}")]
    p = Panels(len(rows), 2, titles, HIST_PANEL, title)
    p.fig.update_layout(barmode="overlay")
    return p


def render_f1(read: Reader, cfg: MupcAnalysisParams, src: str) -> list[Figure]:
    hp = cfg.hessian
    Nmax, Hmax = max(hp.widths), max(hp.depths)
    figs = []
    for gk, configs in _hessian_groups(hp).items():
        p = _hist_panels([c["act"] for c in configs], hp, f"Activity Hessian at init — {gk}")
        for r, c in enumerate(configs, start=1):
            _depth_width_hists(p, r, read, c, hp, "num_hessian_eigenvals", f"λ({H_Z})")
        figs.append(_group_figure("F1", gk, p, src, f"Eigenvalue histograms of H_z at init across H (N={Nmax}) "
                                  f"and across N (H={Hmax}); {gk}.", "H_num_eigenvals_N_128 / _H_128"))
    return figs


def _linear_configs(hp: HessianParams) -> dict[str, dict[str, Any]]:
    return {gk: c for gk, cs in _hessian_groups(hp).items() for c in cs if c["act"] == "linear"}


THEORY_MATRICES = (("theory_D_eigenvals", "D", "D"), ("theory_O_eigenvals", "O", "O"),
                   ("theory_hessian_eigenvals", "H_theory", "H<sub>theory</sub>"))


def render_f3(read: Reader, cfg: MupcAnalysisParams, src: str) -> list[Figure]:
    hp = cfg.hessian
    figs = []
    for gk, c in _linear_configs(hp).items():
        p = _hist_panels([f"λ({label})" for _, _, label in THEORY_MATRICES], hp,
                         f"Linear theory Hessian H = D + O — {gk}")
        for r, (name, _, label) in enumerate(THEORY_MATRICES, start=1):
            _depth_width_hists(p, r, read, c, hp, name, f"λ({label})")
        figs.append(_group_figure("F3", gk, p, src, "Spectra of D (block diagonal), O (off-diagonal) and H_theory "
                                  f"= D + O for linear networks; {gk}.", "D_/O_/H_theory_eigenvals_{N,H}_128"))
    return figs


# ----------------------------------------------------------------------------- F2, F4, F26: phase diagrams


def one_value(grid: np.ndarray) -> float | None:
    """The value of a grid whose finite cells all hold one number (rounding noise aside; O's κ is 1: its
    spectrum is symmetric), else None."""
    finite = grid[np.isfinite(grid)]
    if finite.size and np.ptp(finite) <= 1e-9 * np.abs(finite).max():
        return float(finite.mean())
    return None


def phase_title(title: str, grid: np.ndarray, log: bool) -> str:
    """A phase panel's title; one value in every cell is named, not drawn on a rounding-noise scale."""
    one = None if log else one_value(np.asarray(grid, dtype=float))
    return title if one is None else f"{title} (= {one:.4g} in every cell)"


def pow2_tex(v: float) -> str:
    """``2^k`` in mathtext, the notebook's phase-diagram tick labels."""
    return f"$2^{{{int(round(np.log2(v)))}}}$"


def _phase(ax: Any, grid: np.ndarray, Ns: Sequence[int], Hs: Sequence[int], title: str, bar: str, log: bool,
           cmap: str = "viridis", vrange: tuple[float, float] | None = None, cells: bool = False) -> None:
    """A phase diagram of ``grid`` [N, H] as the notebook draws one (``plot_metric_phase_diagram``,
    ``plot_loss_energy_ratio_phase_diagram``): ``imshow`` with ``origin="lower"``, bicubic interpolation, a
    ``LogNorm`` where ``log`` (on ``vrange``, default the data's; cells ≤ 0 are gaps), axes H and N ticked
    2^k, a colour bar titled ``bar``; ``cells``: each value written on its cell in white. One value in every cell
    is named in the title and drawn on ±5 % around it, not on a rounding-noise scale."""
    data = np.asarray(grid, dtype=float)
    if log:
        shown = np.where(data > 0, data, np.nan)
        finite = shown[np.isfinite(shown)]
        lo, hi = vrange if vrange is not None else ((finite.min(), finite.max()) if finite.size else (1.0, 10.0))
        im = ax.imshow(shown, origin="lower", interpolation="bicubic", cmap=cmap, aspect="auto",
                       norm=LogNorm(vmin=lo, vmax=max(hi, lo * 1.0001)))
    else:
        one = one_value(data)
        limits = (one - (0.05 * abs(one) or 1.0), one + (0.05 * abs(one) or 1.0)) if one is not None else (None, None)
        im = ax.imshow(data, origin="lower", interpolation="bicubic", cmap=cmap, aspect="auto", vmin=limits[0],
                       vmax=limits[1])
    ax.set_xticks(range(len(Hs)), [pow2_tex(h) for h in Hs])
    ax.set_yticks(range(len(Ns)), [pow2_tex(n) for n in Ns])
    ax.set_xlabel("$H$")
    ax.set_ylabel("$N$")
    ax.set_title(phase_title(title, data, log))
    ax.grid(False)
    ax.figure.colorbar(im, ax=ax, fraction=0.046).set_label(bar)
    if cells:
        for i in range(len(Ns)):
            for j in range(len(Hs)):
                if np.isfinite(data[i, j]):
                    ax.text(j, i, f"{data[i, j]:.2f}", color="white", ha="center", va="center", fontsize=7)


Phase = tuple[str, str, np.ndarray, bool]  # panel title, colour-bar title, grid [N, H], log colour
EXTREMES = (("lambda_max", r"$\lambda_{max}$"), ("lambda_min", r"$\lambda_{min}$"), ("kappa", r"$\kappa$"))


def _extremes(cells: dict[tuple[int, int], dict[str, Any]], hp: HessianParams, prefix: str, row: str,
              matrix: str, log_k: bool) -> list[Phase]:
    """One row of phase diagrams over (N, H): λ_max, λ_min (linear colour) and κ (log colour where ``log_k``) of
    the cells' ``<prefix>lambda_max`` … keys."""
    return [(f"{row}: {name}", f"{name}({matrix})", _grid_of(cells, hp.widths, hp.depths, prefix + key),
             log_k if key == "kappa" else False) for key, name in EXTREMES]


def _phase_figure(rows: list[list[Phase]], hp: HessianParams, title: str) -> plt.Figure:
    fig, axes = plt.subplots(len(rows), len(rows[0]), figsize=(4.4 * len(rows[0]), 3.6 * len(rows)), squeeze=False,
                             layout="constrained")
    for r, row in enumerate(rows):
        for c, (panel, bar, grid, log) in enumerate(row):
            _phase(axes[r][c], grid, hp.widths, hp.depths, panel, bar, log)
    fig.suptitle(title)
    return fig


def _kappa_log(c: dict[str, Any]) -> bool:
    """The notebook's κ colour: log, except for sp without skips."""
    return not (c["param"] == "sp" and not c["skips"])


def _phase_group_figure(family: str, gk: str, fig: plt.Figure, src: str, caption: str, seed: str) -> Figure:
    """One matplotlib figure of a phase-diagram family for one configuration group (``<family>_<group>``)."""
    return Figure(f"{family}_{gk}", caption, seed, mpl=fig, sources=[("train", src)], family=family)


def render_f2(read: Reader, cfg: MupcAnalysisParams, src: str) -> list[Figure]:
    hp = cfg.hessian
    figs = []
    for gk, configs in _hessian_groups(hp).items():
        rows = [_extremes(_cells(read, c), hp, "", c["act"], H_Z_TEX, _kappa_log(c)) for c in configs]
        fig = _phase_figure(rows, hp, f"H_z at init, extremes per (N, H) — {gk}")
        figs.append(_phase_group_figure("F2", gk, fig, src, f"Phase diagrams of λ_max, λ_min and κ of H_z at init; "
                                        f"{gk}. Methods per number in the cell summaries.",
                                        "H_num_max_eigen / min / cond_num"))
    return figs


#: F4's panels the notebook does not draw: it plots κ of H_theory only (``H_theory_cond_num``)
F4_ADDITIONS = ("D", "O")
ADDITION = "trainscape addition, not in the notebook"
ADDITION_GREY = "0.4"


def mark_addition(ax: Any) -> None:
    """A panel the project adds to a notebook figure: said under its title, title and dashed frame in grey."""
    ax.set_title(f"{ax.get_title()}\n({ADDITION})", color=ADDITION_GREY)
    for spine in ax.spines.values():
        spine.set(visible=True, linestyle="--", edgecolor=ADDITION_GREY)


def render_f4(read: Reader, cfg: MupcAnalysisParams, src: str) -> list[Figure]:
    """λ_max, λ_min of D, O and H_theory and κ of H_theory, as the notebook; κ(D) and κ(O) are marked as the
    project's additions (κ(O) is 1 in every cell: O's spectrum is symmetric)."""
    hp = cfg.hessian
    figs = []
    for gk, c in _linear_configs(hp).items():
        cells = _cells(read, c)
        rows = [_extremes(cells, hp, f"{pre}_", pre, TEX[pre], pre != "O" and _kappa_log(c))
                for _, pre, _ in THEORY_MATRICES]
        fig = _phase_figure(rows, hp, f"Linear theory extremes — {gk}")
        kappa = dict(EXTREMES)["kappa"]
        for ax in fig.axes:
            if any(ax.get_title().startswith(f"{pre}: {kappa}") for pre in F4_ADDITIONS):
                mark_addition(ax)
        figs.append(_phase_group_figure("F4", gk, fig, src, f"λ_max, λ_min of D, O and H_theory and κ of H_theory per "
                                        f"(N, H), as the notebook; κ(D) and κ(O) (grey, dashed frame) are the "
                                        f"project's additions (κ(O) = 1: O's spectrum is symmetric); {gk}.",
                                        "D_/O_/H_theory_{max,min}_eigen, H_theory_cond_num"))
    return figs


def render_f26(read: Reader, cfg: MupcAnalysisParams, src: str) -> list[Figure]:
    tg = cfg.theory_grid
    figs = []
    for param in tg.param_lrs:
        ratios = np.array([[read(f"{theory_key('linear', param, N, H)}/theory.npz")
                            ["loss_energy_ratios"] for H in tg.depths] for N in tg.widths])  # [nN, nH, iters]
        ncol = min(4, len(tg.plot_iters))
        nrow = int(np.ceil(len(tg.plot_iters) / ncol))
        fig, axes = plt.subplots(nrow, ncol, figsize=(4.4 * ncol, 3.8 * nrow), squeeze=False, layout="constrained")
        for k, t in enumerate(tg.plot_iters):
            _phase(axes.flat[k], ratios[:, :, t], tg.widths, tg.depths, f"t = {t}", r"$\mathcal{L}\,/\,F^*$", True,
                   "inferno", (1.0, tg.color_max[param]), cells=param == "mupc")
        for ax in list(axes.flat)[len(tg.plot_iters):]:
            ax.axis("off")
        fig.suptitle(f"Loss / equilibrium energy, linear ResNets, {param} (Adam lr {fmt_num(tg.param_lrs[param])})")
        figs.append(Figure(f"F26_{param}",
                           f"Phase diagrams (rows N, columns H) of ℒ/F* with the exact equilibrium (closed form "
                           f"½rᵀS⁻¹r = F(z*)), {param}, at iterations {tg.plot_iters}; log colour [1, "
                           f"{tg.color_max[param]:g}].", "loss_energy_ratio_t_{t}", mpl=fig,
                           sources=[("train", src)], family="F26"))
    return figs


# ----------------------------------------------------------------------------- F5–F6: layer traces


def _layer_traces(p: Panels, r: int, c: int, xs: Sequence[int], ys: np.ndarray, scale: str, over_t: bool) -> None:
    """The notebook's ``plot_metric_per_iv``: one trace per layer (``ys`` [5, len(xs)]); over steps ``lines``
    with three x ticks, else ``lines+markers``."""
    for k, col in enumerate(palette(scale, ys.shape[0], skip=SKIP)):
        name = LAYER_NAMES[k]
        p.add(go.Scatter(x=list(xs), y=_finite(ys[k]), name=name, legendgroup=name, showlegend=p.show(name, col),
                         mode="lines" if over_t else "lines+markers", line={"width": 2, "color": col},
                         opacity=LINE_OPACITY), r, c)
    if over_t:
        p.xs[(r, c)] = np.asarray(xs, dtype=float)


def _layer_axes(p: Panels, r: int, c: int, xs: Sequence[int] | None, xlabel: str, ylabel: str, logy: bool) -> None:
    """A layer panel's axes: across N or L (``xs``) log x ticked 2^k; log y (a tick per decade, per ten decades
    across L) where ``logy``."""
    if xs is not None:
        p.fig.update_xaxes(type="log", tickvals=list(xs), ticktext=[pow2(v) for v in xs], exponentformat="power",
                           row=r, col=c)
    y_kw = {"type": "log", "exponentformat": "power", "dtick": 10 if xlabel == "Depth" else 1} if logy else {}
    p.axes(r, c, xlabel, ylabel, **y_kw)


def _fwd_load(read: Reader, act: str, optim: str, variant: str) -> dict[str, np.ndarray]:
    d = read(f"{fwd_key(act, optim, variant)}/fwd_pass.npz")
    return {m: d[f"{m}_per_N_L"] for m in FWD_METRICS}


def render_f5(read: Reader, cfg: MupcAnalysisParams, src: str) -> list[Figure]:
    fp = cfg.fwd_pass
    j_slice = fp.depths.index(fp.slice_depth)
    figs = []
    for act in fp.acts:
        for optim in fp.optims:
            data = {v: _fwd_load(read, act, optim, v) for v in fp.variants}
            for metric, label in (("avg_activity_l1", "mean |z_ℓ|"), ("avg_activity_l2", "RMS z_ℓ")):
                for t in fp.plot_ts:
                    titles = [s for v in fp.variants for s in
                              [f"{v}: L={fp.slice_depth}, t={t}", *(f"{v}: N={N}, t={t}" for N in fp.slice_widths)]]
                    p = Panels(len(fp.variants), 1 + len(fp.slice_widths), titles, CURVE_PANEL,
                               f"Forward pass: {label} — {act}, {optim}, t={t}")
                    for r, v in enumerate(fp.variants, start=1):
                        arr, logy = data[v][metric], v.startswith("sp")
                        _layer_traces(p, r, 1, fp.widths, arr[:, t, :, j_slice], "Reds", False)
                        _layer_axes(p, r, 1, fp.widths, "Width", FWD_LABELS[metric], logy)
                        for c, N in enumerate(fp.slice_widths, start=2):
                            _layer_traces(p, r, c, fp.depths, arr[:, t, fp.widths.index(N), :], "Reds", False)
                            _layer_axes(p, r, c, fp.depths, "Depth", FWD_LABELS[metric], logy)
                    fid = f"F5_{act}_{optim}_{metric}_t{t}"
                    figs.append(Figure(fid,
                                       f"{label} at layers 1, L/4, L/2, 3L/4, L per width (L={fp.slice_depth}) and per "
                                       f"depth (N ∈ {fp.slice_widths}) at step {t}; {act}, {optim}, 5 variants; log y "
                                       "for sp. Non-finite values (overflow) are not drawn.",
                                       f"{metric}_per_N_at_t{t} / _per_L_at_t{t}", plotly=p.done(),
                                       sources=[("train", src)], family="F5"))
    return figs


def _f6_figure(fid: str, p: Panels, src: str, caption: str, seed: str) -> Figure:
    return Figure(fid, caption, seed, plotly=p.done(), sources=[("train", src)], family="F6")


def _f6_at_step(arrs: dict[str, np.ndarray], fp: FwdPassParams, t: int, title: str) -> Panels:
    """The notebook's spectral norms at step ``t``: per width at the slice depth (its ``depth_idx = 0``), per
    depth at each slice width; rows = variants."""
    j_slice, label = fp.depths.index(fp.slice_depth), FWD_LABELS["param_spectral_norms"]
    titles = [s for v in fp.variants for s in
              [f"{v}: L={fp.slice_depth}, t={t}", *(f"{v}: N={N}, t={t}" for N in fp.slice_widths)]]
    p = Panels(len(fp.variants), 1 + len(fp.slice_widths), titles, CURVE_PANEL, title)
    for r, v in enumerate(fp.variants, start=1):
        _layer_traces(p, r, 1, fp.widths, arrs[v][:, t, :, j_slice], "Greens", False)
        _layer_axes(p, r, 1, fp.widths, "Width", label, False)
        for c, N in enumerate(fp.slice_widths, start=2):
            _layer_traces(p, r, c, fp.depths, arrs[v][:, t, fp.widths.index(N), :], "Greens", False)
            _layer_axes(p, r, c, fp.depths, "Depth", label, False)
    return p


def _f6_over_steps(arrs: dict[str, np.ndarray], fp: FwdPassParams, title: str) -> Panels:
    """The notebook's spectral norms over training at each slice width, at the slice depth (``depth_idx = 0``,
    the depth of its per-width panels, not the deepest net); rows = variants."""
    j_slice, label = fp.depths.index(fp.slice_depth), FWD_LABELS["param_spectral_norms"]
    titles = [f"{v}: over t, N={N}, L={fp.slice_depth}" for v in fp.variants for N in fp.slice_widths]
    p = Panels(len(fp.variants), len(fp.slice_widths), titles, CURVE_PANEL, title)
    for r, v in enumerate(fp.variants, start=1):
        for c, N in enumerate(fp.slice_widths, start=1):
            _layer_traces(p, r, c, range(fp.checks), arrs[v][:, :, fp.widths.index(N), j_slice], "Greens", True)
            _layer_axes(p, r, c, None, ITER, label, False)
    return p


def render_f6(read: Reader, cfg: MupcAnalysisParams, src: str) -> list[Figure]:
    """Per (act, optim): one figure per step of ``plot_ts`` (per width and per depth, as F5) and one over
    training, the notebook's ``params_spectral_norm_per_N_at_t{t}``, ``_per_L_at_t{t}`` and ``_over_t``."""
    fp = cfg.fwd_pass
    figs = []
    for act in fp.acts:
        for optim in fp.optims:
            arrs = {v: _fwd_load(read, act, optim, v)["param_spectral_norms"] for v in fp.variants}
            head = f"Spectral norms of the raw weights — {act}, {optim}"
            for t in fp.plot_ts:
                figs.append(_f6_figure(
                    f"F6_{act}_{optim}_t{t}", _f6_at_step(arrs, fp, t, f"{head}, t={t}"), src,
                    f"Largest singular value of the raw W_ℓ (exact, matrix_norm ord=2) at layers 1, L/4, L/2, 3L/4, L "
                    f"per width (L={fp.slice_depth}) and per depth (N ∈ {fp.slice_widths}) at step {t}; {act}, "
                    f"{optim}, {len(fp.variants)} variants.",
                    f"params_spectral_norm_per_N_at_t{t}_L_{fp.slice_depth} / _per_L_at_t{t}_N_{{N}}"))
            figs.append(_f6_figure(
                f"F6_{act}_{optim}_over_t", _f6_over_steps(arrs, fp, f"{head}, over training"), src,
                f"Largest singular value of the raw W_ℓ over the {fp.checks} training steps at L={fp.slice_depth} "
                f"(the depth of the per-width panels), N ∈ {fp.slice_widths}; {act}, {optim}, "
                f"{len(fp.variants)} variants.", "params_spectral_norm_over_t_N_{N}"))
    return figs


# ----------------------------------------------------------------------------- F27: curves over training

#: the notebook's three plots of the width sweep: (array, colour scale, y title, legend prefix)
WIDTH_CURVES = (("train_energies", "Purples", "Equilib. energy", "F*"), ("train_losses", "Reds", "Loss", "ℒ"),
                ("loss_energy_ratios", "Viridis", "Ratio", "ℒ/F*"))


def _curve(p: Panels, c: int, y: np.ndarray, colour: str, name: str, width: float = 2, **kw: Any) -> None:
    x = np.arange(len(y))
    p.add(go.Scatter(x=x, y=_finite(y), name=name, legendgroup=name, showlegend=p.show(name, colour), mode="lines",
                     line={"width": width, "color": colour}, **kw), 1, c)
    if len(x) > len(p.xs.get((1, c), ())):
        p.xs[(1, c)] = x.astype(float)


LEGEND_ROW = 30  # px a legend entry takes: a curve panel grows so that its figure's legend fits beside it


def render_f27(read: Reader, cfg: MupcAnalysisParams, src: str) -> list[Figure]:
    tw = cfg.theory_width
    figs = []
    entries = 3 * len(tw.plot_widths) + 1  # F*, ℒ and ℒ/F* per plotted width, and the widest net's loss
    panel = (CURVE_PANEL[0], max(CURVE_PANEL[1], LEGEND_ROW * entries + 50))  # + 50: the plot area is 50 px short
    for act in tw.acts:
        for param in tw.params:
            runs = {N: read(f"{theory_key(act, param, N, tw.depth)}/theory.npz") for N in tw.widths}
            # the solver the nets were trained with, as their records say (not today's params)
            how = read(f"{theory_key(act, param, max(tw.widths), tw.depth)}/net.json")["settings"]
            solver = ("Newton (gradient descent where it does not converge)" if how.get("eq_solver") == "newton" else
                      "gradient descent on the per-sample energy, step ≤ 1/λ_max(H_z)") + \
                f", float64, tol {how.get('eq_tol', float('nan')):g}"
            eq = "exact equilibrium" if act == "linear" else "numerical equilibrium"
            res = "" if act == "linear" else (
                f"; max residual {max(float(np.max(r['eq_residuals'])) for r in runs.values()):.1e}")
            p = Panels(1, 3, ["equilibrium energy F*", "loss ℒ", "ℒ / F*"], panel,
                       f"{act}, {param}, H={tw.depth}: {eq}{res}")
            for c, (key, scale, ylabel, prefix) in enumerate(WIDTH_CURVES, start=1):
                cols = palette(scale, len(tw.plot_widths), skip=SKIP)
                for N, col in zip(tw.plot_widths, cols, strict=True):
                    _curve(p, c, runs[N][key], col, f"{prefix}, N = {pow2(N)}", opacity=LINE_OPACITY)
                if key == "train_energies":  # the notebook's loss of the widest net, first in the legend
                    Nbig = max(tw.plot_widths)
                    _curve(p, c, runs[Nbig]["train_losses"], LOSS_COLOUR, f"loss, N = {pow2(Nbig)}", width=1,
                           legendrank=0)
                p.axes(1, c, ITER, ylabel)
            fid = f"F27_{act}_{param}"
            figs.append(Figure(fid,
                               f"Energy, loss and ℒ/F* over training per width (H={tw.depth}), {act}, {param}, "
                               f"{eq}" + ("" if act == "linear" else f" ({solver})") + ".",
                               "energies_per_width / losses_per_width / loss_energy_ratios_per_width",
                               plotly=p.done(), sources=[("train", src)], family="F27"))
    return figs


def render(ctx: Context, unit: str) -> Output:
    cfg: MupcAnalysisParams = ctx.cfg
    src = FAMILIES[unit].sources["source"]
    return Output(figures=drawer(unit)(lambda name: ctx.read("train", src, name), cfg, src))


def drawer(family: str) -> Callable[[Reader, MupcAnalysisParams, str], list[Figure]]:
    """The function that draws ``family`` (its entry in families.py)."""
    return globals()[FAMILIES[family].draw]
