"""render@<family>: the analysis figures F1–F6, F26, F27 (matplotlib re-implementation of the seed's plots).

Every grid (N, H, L lists, slices, steps) comes from the resolved section; each renderer reads exactly
the cells its params list, from the one train unit of its family. Phase diagrams: rows = N (y axis),
columns = H (x axis).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from matplotlib.colors import LogNorm

from pipeline.contract import Context, Figure, Output
from pipeline.plotting import plt
from pipeline.studies.mupc.analysis.config import HessianParams, MupcAnalysisParams
from pipeline.studies.mupc.analysis.families import FAMILIES
from pipeline.studies.mupc.analysis.layout import (
    FWD_METRICS,
    cell_dir,
    fwd_key,
    hessian_configs,
    hessian_key,
    theory_key,
)
from pipeline.studies.mupc.runs import fmt_num

LAYER_NAMES = ("ℓ=1", "ℓ=L/4", "ℓ=L/2", "ℓ=3L/4", "ℓ=L")
Reader = Callable[[str], Any]  # a file of the source train unit by name -> JSON object or npz arrays


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


def _hist_panel(ax: Any, spectra: dict[str, np.ndarray], cmap: str, title: str) -> None:
    colors = plt.get_cmap(cmap)(np.linspace(0.35, 1.0, len(spectra)))
    for (label, ev), col in zip(spectra.items(), colors):
        w = np.full(len(ev), 1.0 / len(ev))
        lo, hi = float(np.min(ev)), float(np.max(ev))
        if hi - lo < 1e-9 * max(1.0, abs(hi)):  # degenerate spectrum (e.g. O = 0 at H = 1)
            lo, hi = lo - 0.5, hi + 0.5
        ax.hist(ev, bins=np.linspace(lo, hi, 51), weights=w, histtype="step", color=col, label=label, lw=1.2)
    ax.set_yscale("log")
    ax.set_xlabel("eigenvalue")
    ax.set_ylabel("fraction (log)")
    ax.set_title(title)
    ax.legend(fontsize=7)


def _phase(ax: Any, grid: np.ndarray, Ns: list[int], Hs: list[int], title: str, log: bool,
           vmin: float | None = None, vmax: float | None = None, annotate: bool = False, cmap: str = "viridis") -> None:
    data = np.asarray(grid, dtype=float)
    if log:
        finite = data[np.isfinite(data) & (data > 0)]
        lo = vmin if vmin is not None else (finite.min() if finite.size else 1.0)
        hi = vmax if vmax is not None else (finite.max() if finite.size else 10.0)
        norm = LogNorm(vmin=lo, vmax=max(hi, lo * 1.0001))
        im = ax.imshow(np.where(data > 0, data, np.nan), origin="lower", cmap=cmap, norm=norm, aspect="auto")
    else:
        finite = data[np.isfinite(data)]
        if vmin is None and vmax is None and finite.size and np.ptp(finite) <= 1e-9 * np.abs(finite).max():
            # one value in every cell (O's κ is 1: its spectrum is symmetric): say so, not a rounding-noise scale
            c = float(finite.mean())
            vmin, vmax = c - (0.05 * abs(c) or 1.0), c + (0.05 * abs(c) or 1.0)
            title += f" (= {c:.4g} in every cell)"
        im = ax.imshow(data, origin="lower", cmap=cmap, aspect="auto", vmin=vmin, vmax=vmax)
    ax.set_xticks(range(len(Hs)), [str(h) for h in Hs])
    ax.set_yticks(range(len(Ns)), [str(n) for n in Ns])
    ax.set_xlabel("H (hidden layers)")
    ax.set_ylabel("N (width)")
    ax.set_title(title, fontsize=9)
    ax.grid(False)
    plt.colorbar(im, ax=ax, fraction=0.046)
    if annotate:
        for i in range(len(Ns)):
            for j in range(len(Hs)):
                if np.isfinite(data[i, j]):
                    ax.text(j, i, f"{data[i, j]:.3g}", ha="center", va="center", fontsize=6, color="w")


def _grid_of(cells: dict, Ns: list[int], Hs: list[int], key: str) -> np.ndarray:
    return np.array([[cells[(N, H)].get(key, np.nan) for H in Hs] for N in Ns], dtype=float)


# ----------------------------------------------------------------------------- F1–F4


def _depth_width_hists(row: np.ndarray, read: Reader, c: dict[str, Any], hp: HessianParams, name: str,
                       label: str) -> None:
    """Two panels of the spectrum ``name``: across H at the widest N (Blues), across N at the deepest H (Reds)."""
    Nmax, Hmax = max(hp.widths), max(hp.depths)
    _hist_panel(row[0], {f"H={H}": _spectrum(read, c, Nmax, H, name) for H in hp.depths}, "Blues",
                f"{label}, N={Nmax}")
    _hist_panel(row[1], {f"N={N}": _spectrum(read, c, N, Hmax, name) for N in hp.widths}, "Reds",
                f"{label}, H={Hmax}")


def _group_figure(family: str, gk: str, fig: plt.Figure, src: str, caption: str, seed: str) -> Figure:
    """One figure of a Hessian family for one configuration group (``<family>_<group>``)."""
    return Figure(f"{family}_{gk}", caption, seed, mpl=fig, sources=[("train", src)], family=family)


def render_f1(read: Reader, cfg: MupcAnalysisParams, src: str) -> list[Figure]:
    hp = cfg.hessian
    Nmax, Hmax = max(hp.widths), max(hp.depths)
    figs = []
    for gk, configs in _hessian_groups(hp).items():
        fig, axes = plt.subplots(len(configs), 2, figsize=(10, 3.2 * len(configs)), squeeze=False, layout="constrained")
        for r, c in enumerate(configs):
            _depth_width_hists(axes[r], read, c, hp, "num_hessian_eigenvals", f"{c['act']}: λ(H_z)")
        fig.suptitle(f"Activity Hessian at init — {gk}")
        figs.append(_group_figure("F1", gk, fig, src, f"Eigenvalue histograms of H_z at init across H (N={Nmax}) "
                                  f"and across N (H={Hmax}); {gk}.", "H_num_eigenvals_N_128 / _H_128"))
    return figs


def _extremes_row(axes: Any, cells: dict[tuple[int, int], dict[str, Any]], hp: HessianParams, prefix: str,
                  label: str, kappa: str, log_k: bool) -> None:
    """One row of phase diagrams over (N, H): λ_max, λ_min and κ of the cells' ``<prefix>lambda_max`` … keys."""
    for ax, (key, name, log) in zip(axes, (("lambda_max", "λ_max", False), ("lambda_min", "λ_min", False),
                                          ("kappa", kappa, log_k))):
        _phase(ax, _grid_of(cells, hp.widths, hp.depths, prefix + key), hp.widths, hp.depths, f"{label}: {name}", log)


def render_f2(read: Reader, cfg: MupcAnalysisParams, src: str) -> list[Figure]:
    hp = cfg.hessian
    figs = []
    for gk, configs in _hessian_groups(hp).items():
        fig, axes = plt.subplots(len(configs), 3, figsize=(13, 3.4 * len(configs)), squeeze=False, layout="constrained")
        for r, c in enumerate(configs):
            _extremes_row(axes[r], _cells(read, c), hp, "", c["act"], "κ = |λmax|/|λmin|",
                          log_k=not (c["param"] == "sp" and not c["skips"]))
        fig.suptitle(f"H_z at init, extremes per (N, H) — {gk}")
        figs.append(_group_figure("F2", gk, fig, src, f"Phase diagrams of λ_max, λ_min and κ of H_z at init; {gk}. "
                                  "Methods per number in the cell summaries.", "H_num_max_eigen / min / cond_num"))
    return figs


def _linear_configs(hp: HessianParams) -> dict[str, dict[str, Any]]:
    return {gk: c for gk, cs in _hessian_groups(hp).items() for c in cs if c["act"] == "linear"}


def render_f3(read: Reader, cfg: MupcAnalysisParams, src: str) -> list[Figure]:
    hp = cfg.hessian
    figs = []
    for gk, c in _linear_configs(hp).items():
        fig, axes = plt.subplots(3, 2, figsize=(10, 9.6), squeeze=False, layout="constrained")
        for r, (name, label) in enumerate((("theory_D_eigenvals", "D"), ("theory_O_eigenvals", "O"),
                                           ("theory_hessian_eigenvals", "H_theory"))):
            _depth_width_hists(axes[r], read, c, hp, name, f"λ({label})")
        fig.suptitle(f"Linear theory Hessian H = D + O — {gk}")
        figs.append(_group_figure("F3", gk, fig, src, "Spectra of D (block diagonal), O (off-diagonal) and H_theory "
                                  f"= D + O for linear networks; {gk}.", "D_/O_/H_theory_eigenvals_{N,H}_128"))
    return figs


def render_f4(read: Reader, cfg: MupcAnalysisParams, src: str) -> list[Figure]:
    hp = cfg.hessian
    figs = []
    for gk, c in _linear_configs(hp).items():
        cells = _cells(read, c)
        fig, axes = plt.subplots(3, 3, figsize=(13, 10), squeeze=False, layout="constrained")
        for r, pre in enumerate(("D", "O", "H_theory")):
            _extremes_row(axes[r], cells, hp, f"{pre}_", pre, "κ", log_k=pre != "O")
        fig.suptitle(f"Linear theory extremes — {gk}")
        figs.append(_group_figure("F4", gk, fig, src, f"λ_max, λ_min, κ of D, O and H_theory per (N, H); {gk}.",
                           "D_/O_/H_theory_{max,min}_eigen, H_theory_cond_num"))
    return figs


# ----------------------------------------------------------------------------- F5–F6


def _layer_traces(ax: Any, xs: list[int], ys: np.ndarray, xlabel: str, title: str, logy: bool) -> None:
    colors = plt.get_cmap("viridis")(np.linspace(0, 0.9, ys.shape[0]))
    for k in range(ys.shape[0]):
        ax.plot(xs, ys[k], "o-", color=colors[k], label=LAYER_NAMES[k], ms=3)
    ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=8)


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
                    ncol = 1 + len(fp.slice_widths)
                    fig, axes = plt.subplots(len(fp.variants), ncol, figsize=(4 * ncol, 2.8 * len(fp.variants)),
                                             squeeze=False, layout="constrained")
                    for r, v in enumerate(fp.variants):
                        arr, logy = data[v][metric], v.startswith("sp")
                        _layer_traces(axes[r, 0], fp.widths, arr[:, t, :, j_slice], "N",
                                      f"{v}: {label}, L={fp.slice_depth}, t={t}", logy)
                        for cidx, N in enumerate(fp.slice_widths, start=1):
                            i = fp.widths.index(N)
                            _layer_traces(axes[r, cidx], fp.depths, arr[:, t, i, :], "L",
                                          f"{v}: {label}, N={N}, t={t}", logy)
                    axes[0, 0].legend(fontsize=7)
                    fig.suptitle(f"Forward pass: {label} — {act}, {optim}, t={t}")
                    fid = f"F5_{act}_{optim}_{metric}_t{t}"
                    figs.append(Figure(fid,
                                       f"{label} at layers 1, L/4, L/2, 3L/4, L per width (L={fp.slice_depth}) and per "
                                       f"depth (N ∈ {fp.slice_widths}) at step {t}; {act}, {optim}, 5 variants; log y "
                                       "for sp. Non-finite values (overflow) are not drawn.",
                                       f"{metric}_per_N_at_t{t} / _per_L_at_t{t}", mpl=fig, sources=[("train", src)],
                                       family="F5"))
    return figs


def render_f6(read: Reader, cfg: MupcAnalysisParams, src: str) -> list[Figure]:
    fp = cfg.fwd_pass
    j_slice, t = fp.depths.index(fp.slice_depth), fp.plot_ts[0]
    Lmax = max(fp.depths)
    figs = []
    for act in fp.acts:
        for optim in fp.optims:
            ncol = 1 + 2 * len(fp.slice_widths)
            fig, axes = plt.subplots(len(fp.variants), ncol, figsize=(3.6 * ncol, 2.8 * len(fp.variants)),
                                     squeeze=False, layout="constrained")
            for r, v in enumerate(fp.variants):
                arr = _fwd_load(read, act, optim, v)["param_spectral_norms"]
                _layer_traces(axes[r, 0], fp.widths, arr[:, t, :, j_slice], "N",
                              f"{v}: ‖W‖₂, L={fp.slice_depth}, t={t}", True)
                for cidx, N in enumerate(fp.slice_widths):
                    i = fp.widths.index(N)
                    _layer_traces(axes[r, 1 + cidx], fp.depths, arr[:, t, i, :], "L", f"{v}: ‖W‖₂, N={N}, t={t}", True)
                    ax = axes[r, 1 + len(fp.slice_widths) + cidx]
                    ys = arr[:, :, i, fp.depths.index(Lmax)]
                    colors = plt.get_cmap("viridis")(np.linspace(0, 0.9, ys.shape[0]))
                    for k in range(ys.shape[0]):
                        ax.plot(range(fp.checks), ys[k], "o-", color=colors[k], ms=3, label=LAYER_NAMES[k])
                    ax.set_yscale("log")
                    ax.set_xlabel("t")
                    ax.set_title(f"{v}: ‖W‖₂ over t, N={N}, L={Lmax}", fontsize=8)
            axes[0, 0].legend(fontsize=7)
            fig.suptitle(f"Spectral norms of the raw weights — {act}, {optim}")
            fid = f"F6_{act}_{optim}"
            figs.append(Figure(fid,
                               f"Largest singular value of the raw W_ℓ (exact, matrix_norm ord=2) per width, per depth "
                               f"and over steps; {act}, {optim}, 5 variants.",
                               "params_spectral_norm_per_N / _per_L / _over_t", mpl=fig, sources=[("train", src)],
                               family="F6"))
    return figs


# ----------------------------------------------------------------------------- F26–F27


def render_f26(read: Reader, cfg: MupcAnalysisParams, src: str) -> list[Figure]:
    tg = cfg.theory_grid
    figs = []
    for param in tg.param_lrs:
        ratios = np.array([[read(f"{theory_key('linear', param, N, H)}/theory.npz")
                            ["loss_energy_ratios"] for H in tg.depths] for N in tg.widths])  # [nN, nH, iters]
        ncol = min(4, len(tg.plot_iters))
        nrow = int(np.ceil(len(tg.plot_iters) / ncol))
        fig, axes = plt.subplots(nrow, ncol, figsize=(4.2 * ncol, 3.6 * nrow), squeeze=False, layout="constrained")
        for k, t in enumerate(tg.plot_iters):
            _phase(axes.flat[k], ratios[:, :, t], tg.widths, tg.depths, f"ℒ/F* at t={t}", True, 1.0,
                   tg.color_max[param], annotate=(param == "mupc"), cmap="magma")
        for ax in list(axes.flat)[len(tg.plot_iters):]:
            ax.axis("off")
        fig.suptitle(f"Loss / equilibrium energy, linear ResNets, {param} (Adam lr {fmt_num(tg.param_lrs[param])})")
        fid = f"F26_{param}"
        figs.append(Figure(fid,
                           f"Phase diagrams (rows N, columns H) of ℒ/F* with the exact equilibrium (closed form "
                           f"½rᵀS⁻¹r = F(z*)), {param}, at iterations {tg.plot_iters}; log colour [1, "
                           f"{tg.color_max[param]:g}].", "loss_energy_ratio_t_{t}", mpl=fig, sources=[("train", src)],
                           family="F26"))
    return figs


def render_f27(read: Reader, cfg: MupcAnalysisParams, src: str) -> list[Figure]:
    tw = cfg.theory_width
    figs = []
    colors = plt.get_cmap("Reds")(np.linspace(0.35, 1.0, len(tw.plot_widths)))
    for act in tw.acts:
        for param in tw.params:
            runs = {N: read(f"{theory_key(act, param, N, tw.depth)}/theory.npz") for N in tw.widths}
            fig, axes = plt.subplots(1, 3, figsize=(14, 3.6), layout="constrained")
            for N, col in zip(tw.plot_widths, colors):
                d = runs[N]
                axes[0].plot(d["train_energies"], color=col, label=f"F*, N={N}")
                axes[1].plot(d["train_losses"], color=col, label=f"ℒ, N={N}")
                axes[2].plot(d["loss_energy_ratios"], color=col, label=f"N={N}")
            Nbig = max(tw.plot_widths)
            axes[0].plot(runs[Nbig]["train_losses"], "k--", label=f"ℒ, N={Nbig}")
            for ax, lab in zip(axes, ("equilibrium energy F*", "loss ℒ", "ℒ / F*")):
                ax.set_yscale("log")
                ax.set_xlabel("iteration")
                ax.set_ylabel(lab)
                ax.legend(fontsize=7)
            eq = "exact equilibrium" if act == "linear" else "numerical equilibrium"
            res = "" if act == "linear" else (
                f"; max residual {max(float(np.max(r['eq_residuals'])) for r in runs.values()):.1e}")
            fig.suptitle(f"{act}, {param}, H={tw.depth}: {eq}{res}")
            fid = f"F27_{act}_{param}"
            figs.append(Figure(fid,
                               f"Energy, loss and ℒ/F* over training per width (H={tw.depth}), {act}, {param}, "
                               f"{eq}" + ("" if act == "linear" else " (GD on the per-sample energy, float64, step "
                                          "≤ 1/λ_max(H_z))") + ".",
                               "energies_per_width / losses_per_width / loss_energy_ratios_per_width", mpl=fig,
                               sources=[("train", src)], family="F27"))
    return figs


def render(ctx: Context, unit: str) -> Output:
    cfg: MupcAnalysisParams = ctx.cfg
    src = FAMILIES[unit].sources["source"]
    return Output(figures=drawer(unit)(lambda name: ctx.read("train", src, name), cfg, src))


def drawer(family: str) -> Callable[[Reader, MupcAnalysisParams, str], list[Figure]]:
    """The function that draws ``family`` (its entry in families.py)."""
    return globals()[FAMILIES[family].draw]
