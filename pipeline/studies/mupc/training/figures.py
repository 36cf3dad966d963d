"""render@F<k>: the training figures F7–F25 (spec §6), matplotlib, one function per family; drawing only.

Each renderer takes its grid from the runs of the sweeps it reads (the index of each sweep's train
unit), the learning rates its family's extract selected (``extract@F<k>``'s ``headline.json``) and its
other choices (chance cells, fills) from ``mupc_training.figures``; it returns :class:`Figure` records.
Every number the claims read is computed by the extract (``metrics.py``), never here, so restyling a
figure cannot move a finding. Panels the notebook writes as one file per activation (or per H) are
combined as subplots of one figure per dataset.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from pipeline.contract import Context, Figure, Output
from pipeline.plotting import plt
from pipeline.studies.mupc.runs import RunConfig, fmt_num
from pipeline.studies.mupc.training import aggregate as ag
from pipeline.studies.mupc.training.config import FamilySpec, FiguresParams
from pipeline.studies.mupc.training.families import FAMILIES
from pipeline.studies.mupc.training.grid import (
    DS_NAME,
    PC_FILL,
    Env,
    accs,
    bp_cell,
    by_seed,
    cell_h,
    cell_width,
    choose,
    contour_arrays,
    expected_len,
    kappa_series,
    lr_groups,
    mupc_choice,
    per_dataset,
    pick,
    sp_cell,
    sp_table,
    stats,
    suffix,
    sweep_runs,
    values,
    variants,
)
from pipeline.studies.mupc.training.source import RenderError, Sweeps, from_reader

CLEAN_NOTE = "clean aggregation: early-stopped seeds padded with chance to the expected length"


# ----------------------------------------------------------------------------- drawing helpers


def colours(cmap: str, n: int, skip: int = 2) -> list[Any]:
    """Plotly's ``sample_colorscale(cmap, n + skip)[skip:]`` with a matplotlib colormap."""
    cm = plt.get_cmap(cmap)
    m = n + skip
    return [cm(i / (m - 1) if m > 1 else 1.0) for i in range(skip, m)]


def viridis(n: int) -> list[Any]:
    cm = plt.get_cmap("viridis")
    return [cm(i / (n - 1) if n > 1 else 0.0) for i in range(n)]


def lr_label(v: float) -> str:
    return f"{v:.0e}".replace("e+0", "e").replace("e-0", "e-") if v < 1 or v >= 10 else fmt_num(v)


def band(ax: plt.Axes, x: np.ndarray, mean: np.ndarray, std: np.ndarray, color: Any, label: str,
         marker: str | None = "o", ls: str = "-", lw: float = 1.5) -> None:
    if len(mean) == 0:
        ax.plot([], [], color=color, ls=ls, label=f"{label} (no evaluations)")
        return
    ax.fill_between(x, mean - std, mean + std, color=color, alpha=0.3, lw=0)
    if len(mean) == 1 and marker is None:  # a run stopped at its first evaluation: one point, no line to draw
        marker = "o"
    ax.plot(x, mean, color=color, marker=marker, ms=3, ls=ls, lw=lw, label=label)


def acc_curve(env: Env, sweep: str, ax: plt.Axes, runs: Sequence[RunConfig], clean: bool, color: Any, label: str,
              fill: Callable | None = None, ref: RunConfig | None = None, **style: Any) -> np.ndarray:
    """Test accuracy of ``runs`` on ``ax``, mean ± 1 std over seeds (the clean variant padded to the expected
    length of ``ref``, by default the first run, whose schedule also places the points); returns the mean."""
    ref = ref or runs[0]
    n = expected_len(env, sweep, ref) if clean else None
    m, s = stats(accs(env, sweep, runs, fill), n, env.chance)
    band(ax, ag.acc_steps(len(m), ref.test_every), m, s, color, label, **style)
    return m


def act_columns(runs: Sequence[RunConfig], rows: int, **size: float) -> tuple[list[str], plt.Figure, np.ndarray]:
    """A figure with one column per activation of ``runs`` (and ``rows`` rows), with those activations."""
    acts = values(runs, "act")
    return (acts, *grid_axes(rows, len(acts), **size))


def grid_axes(nrows: int, ncols: int, w: float = 3.2, h: float = 2.5) -> tuple[plt.Figure, np.ndarray]:
    fig, axes = plt.subplots(nrows, ncols, figsize=(w * ncols, h * nrows), squeeze=False)
    return fig, axes


def finish(env: Env, fig: plt.Figure, fid: str, caption: str, seed: str, sources: Sequence[str],
           clean: bool = False) -> Figure:
    fig.tight_layout()
    return Figure(id=fid, mpl=fig, caption=caption + (f" [{CLEAN_NOTE}]" if clean else ""),
                  seed_figure=seed, sources=[("train", s) for s in dict.fromkeys(sources)],
                  family=env.family)



# ----------------------------------------------------------------------------- SP families


SP_NAMES = {"S1": ("GD", "sp_gd", ""), "S2": ("Adam", "sp_adam", ""), "S3": ("GD", "sp_skips", "_skips"),
            "S4": ("orthogonal", "sp_orth", "")}


LrCell = tuple[str, list[RunConfig], list[tuple[float, list[RunConfig]]]]




def lr_grid(env: Env, sweep: str, dr: list[RunConfig], clean: bool, cell: Callable[[str, int], LrCell | None],
            fill: Callable | None = None, legend: int = 7,
            on_curve: Callable[[str, int, float, np.ndarray], None] | None = None) -> plt.Figure:
    """One figure of test-accuracy curves per activity lr: rows = activations, columns = H. ``cell(act, H)``
    gives a panel's title, its runs and their groups by activity lr (None: the panel is hidden); each curve
    is the mean ± 1 std over seeds, and ``on_curve(act, H, lr, mean)`` sees it."""
    acts, hs = values(dr, "act"), values(dr, "H")
    fig, axes = grid_axes(len(acts), len(hs))
    for i, act in enumerate(acts):
        for j, H in enumerate(hs):
            ax, got = axes[i, j], cell(act, H)
            if got is None:
                ax.set_visible(False)
                continue
            title, runs, by_lr = got
            for (a_lr, lr_runs), col in zip(by_lr, colours("Oranges", len(by_lr))):
                m = acc_curve(env, sweep, ax, lr_runs, clean, col, f"η={lr_label(a_lr)}", fill, ref=runs[0])
                if on_curve is not None:
                    on_curve(act, H, a_lr, m)
            ax.set_title(title)
            ax.set_xlabel("Training iteration")
            ax.set_ylabel("Test accuracy (%)")
            ax.legend(fontsize=legend)
    return fig


def sp_lr_cell(env: Env, sweep: str, ds: str, dr: list[RunConfig], clean: bool, act: str, H: int) -> LrCell | None:
    """An SP lr-sweep panel: every lr pair of the cell."""
    runs = pick(dr, act=act, H=H)
    if not runs:
        return None
    groups = lr_groups(runs)
    return f"{act}, H={H}", runs, [(a_lr, g) for (_, a_lr), g in groups.items()]


def sp_lr_sweep(env: Env, sweep: str) -> list[Figure]:
    """Test accuracy per activity lr for every (act, H); one figure per dataset (F7, F9–F11)."""
    tag, name, skip_tag = SP_NAMES[sweep]
    runs = sweep_runs(env, sweep)
    figs = []
    for clean, ds, dr in per_dataset(env, runs):
        fig = lr_grid(env, sweep, dr, clean, partial(sp_lr_cell, env, sweep, ds, dr, clean))
        fig.suptitle(f"{DS_NAME[ds]}: SP PC ({name}), test accuracy per activity lr"
                     + (" (clean)" if clean else ""))
        hdr = "_n_hidden_skips" if skip_tag else "_n_hidden"
        seed = f"pcn_results/{DS_NAME[ds]}/test_accs_{tag}_{{act}}_{{H}}{hdr}.pdf"
        figs.append(finish(env, fig, f"{env.family}_{name}_lr_sweep_{ds}{suffix(clean)}",
                           f"{DS_NAME[ds]}, N={cell_width(dr)}, SP PC ({name}): test accuracy (mean ± 1 "
                           f"std over seeds) per activity lr, rows = activation, columns = H.",
                           seed, [sweep], clean))
    return figs



def sp_best(env: Env, sweep: str) -> list[Figure]:
    """Best-lr test accuracy and κ(H_z) across H per act; one figure per dataset (F8, F9–F11)."""
    tag, name, skip_tag = SP_NAMES[sweep]
    runs = sweep_runs(env, sweep)
    figs = []
    for clean, ds, dr in per_dataset(env, runs):
        acts, fig, axes = act_columns(dr, 2)
        for j, act in enumerate(acts):
            ar = pick(dr, act=act)
            hs = values(ar, "H")
            bl, vi = colours("Blues", len(hs)), viridis(len(hs))
            for k, H in enumerate(hs):
                cell = pick(ar, H=H)
                p_lr, a_lr = choose(env, sweep, [cell], sp_table(env, sweep, ds, act, H, cell[0].param_lr),
                                    f"{ds}/{act}/H={H}")
                chosen = by_seed(pick(cell, param_lr=p_lr, act_lr=a_lr))
                acc_curve(env, sweep, axes[0, j], chosen, clean, bl[k], f"H={H} (η={lr_label(a_lr)})")
                kap = kappa_series(env, sweep, chosen, clean)
                if kap is not None:
                    km, ks = kap
                    band(axes[1, j], ag.cond_steps(len(km), chosen[0].test_every), km, ks, vi[k], f"H={H}")
            axes[0, j].set_title(act)
            axes[0, j].set_ylabel("Test accuracy (%)")
            axes[1, j].set_ylabel("κ(H_z)")
            axes[1, j].set_yscale("log")
            for ax in axes[:, j]:
                ax.set_xlabel("Training iteration")
                ax.legend(fontsize=7)
        fig.suptitle(f"{DS_NAME[ds]}: SP PC ({name}) at the best activity lr per H"
                     + (" (clean)" if clean else ""))
        skipped = "_skips" if skip_tag else ""
        seed = (f"pcn_results/{DS_NAME[ds]}/best_test_accs_{tag}{skipped}_{{act}}.pdf, "
                f"best_cond_nums_{tag}{skipped}_{{act}}.pdf")
        figs.append(finish(env, fig, f"{env.family}_{name}_best_{ds}{suffix(clean)}",
                           f"{DS_NAME[ds]}, SP PC ({name}), best activity lr per (act, H) "
                           f"(selection: {env.cfg.selection}): top, test accuracy; bottom, condition "
                           f"number of the activity Hessian during training (row t at iteration "
                           f"t·test_every; unreached rows are NaN as in the notebook). Mean ± 1 std.",
                           seed, [sweep], clean))
    return figs




def render_sp(env: Env, sweep: str, sweep_fig: bool, best_fig: bool) -> list[Figure]:
    out = []
    if sweep_fig:
        out += sp_lr_sweep(env, sweep)
    if best_fig:
        out += sp_best(env, sweep)
    return out


# ----------------------------------------------------------------------------- μPC families



def mupc_lr_cell(dr: list[RunConfig], p_lrs: dict[str, float], act: str, H: int) -> LrCell:
    """A μPC lr-sweep panel: every activity lr at the activation's selected param lr."""
    runs = pick(dr, act=act, H=H, param_lr=p_lrs[act])
    by_lr = [(a_lr, pick(runs, act_lr=a_lr)) for a_lr in values(runs, "act_lr", descending=True)]
    return f"{act}, H={H}, param lr {lr_label(p_lrs[act])}", runs, by_lr



def mupc_lr_sweep(env: Env, sweep: str) -> list[Figure]:
    """F13: test accuracy per activity lr at the best param lr, per (act, H); empty → [chance]."""
    runs = sweep_runs(env, sweep)
    figs = []
    for clean, ds, dr in per_dataset(env, runs):
        p_lrs = {act: mupc_choice(env, sweep, dr, act, "H")[0] for act in values(dr, "act")}
        fig = lr_grid(env, sweep, dr, clean, partial(mupc_lr_cell, dr, p_lrs), ag.fill_empty, legend=6)
        fig.suptitle(f"{DS_NAME[ds]}: μPC, test accuracy per activity lr" + (" (clean)" if clean else ""))
        figs.append(finish(env, fig, f"F13_mupc_lr_sweep_{ds}{suffix(clean)}",
                           f"{DS_NAME[ds]}, μPC, N={cell_width(dr)}: test accuracy per activity lr at "
                           "the selected param lr (a seed with no evaluation counts as [10 %], which "
                           "shortens its lr's curve to one point, as in the notebook).",
                           f"pcn_results/{DS_NAME[ds]}/test_accs_muPC_{{act}}_{{H}}_n_hidden.pdf",
                           [sweep], clean))
    return figs


def mupc_best(env: Env, sweep: str, over: str) -> list[Figure]:
    """F14 (across N, Reds) / F15 (across H, Blues): μPC at the best lrs per act."""
    runs = sweep_runs(env, sweep)
    cmap, sym, word = ("Reds", "N", "width") if over == "N" else ("Blues", "H", "depth")
    figs = []
    for clean, ds, dr in per_dataset(env, runs):
        acts, fig, axes = act_columns(dr, 1)
        for j, act in enumerate(acts):
            p_lr, a_lr = mupc_choice(env, sweep, dr, act, over)
            ivs = values(pick(dr, act=act), over)
            for v, col in zip(ivs, colours(cmap, len(ivs))):
                chosen = pick(dr, act=act, param_lr=p_lr, act_lr=a_lr, **{over: v})
                acc_curve(env, sweep, axes[0, j], chosen, clean, col, f"{sym}={v}")
            axes[0, j].set_title(f"{act} (param lr {lr_label(p_lr)}, act lr {lr_label(a_lr)})")
            axes[0, j].set_xlabel("Training iteration")
            axes[0, j].set_ylabel("Test accuracy (%)")
            axes[0, j].legend(fontsize=7)
        fig.suptitle(f"{DS_NAME[ds]}: μPC at the best lrs across {word}" + (" (clean)" if clean else ""))
        fid = f"{env.family}_mupc_best_{word}_{ds}{suffix(clean)}"
        figs.append(finish(env, fig, fid,
                           f"{DS_NAME[ds]}, μPC ResNets, best (param lr, act lr) per activation "
                           f"(selection: {env.cfg.selection}), test accuracy across {word}, "
                           "mean ± 1 std over seeds.",
                           f"pcn_results/{DS_NAME[ds]}/best_test_accs_{word}_muP_{{act}}.pdf",
                           [sweep], clean))
    return figs


def mupc_cond(env: Env, sweep: str) -> list[Figure]:
    """F12: κ(H_z) during μPC training across H per act (Viridis)."""
    runs = sweep_runs(env, sweep)
    figs = []
    for clean, ds, dr in per_dataset(env, runs):
        acts, fig, axes = act_columns(dr, 1)
        for j, act in enumerate(acts):
            ar = pick(dr, act=act)
            hs = values(ar, "H")
            for H, col in zip(hs, viridis(len(hs))):
                cell = pick(ar, H=H)
                b = env.cfg.best_lrs.mupc
                p_lr, a_lr = choose(env, sweep, [cell], (b.param_lr.get(ds, 0.1), 0.5), f"{ds}/{act}/H={H}")
                kap = kappa_series(env, sweep, pick(cell, param_lr=p_lr, act_lr=a_lr), clean)
                if kap is None:
                    raise RenderError(f"{env.family}: {sweep} runs of {ds}/{act}/H={H} hold no Hessian record")
                band(axes[0, j], ag.cond_steps(len(kap[0]), cell[0].test_every), *kap, col, f"H={H}")
            axes[0, j].set_title(act)
            axes[0, j].set_yscale("log")
            axes[0, j].set_xlabel("Training iteration")
            axes[0, j].set_ylabel("κ(H_z)")
            axes[0, j].legend(fontsize=7)
        fig.suptitle(f"{DS_NAME[ds]}: μPC, condition number of the activity Hessian"
                     + (" (clean)" if clean else ""))
        figs.append(finish(env, fig, f"F12_mupc_cond_{ds}{suffix(clean)}",
                           f"{DS_NAME[ds]}, μPC, κ(H_z) = |λmax|/|λmin| during training across H, "
                           "mean ± 1 std over seeds; rows past an early stop are NaN (notebook); the "
                           "clean variant averages the reached rows only.",
                           f"pcn_results/{DS_NAME[ds]}/best_cond_nums_mupc_{{act}}.pdf", [sweep], clean))
    return figs


def mupc_long(env: Env, sweep: str, fill_empty: bool, seed_file: str) -> list[Figure]:
    """F16 (S10, MNIST: empty → [chance]) / F17 (S11, F-MNIST: no fill): deepest μPC net, long run."""
    runs = sweep_runs(env, sweep)
    figs = []
    fill = ag.fill_empty if fill_empty else None
    for clean in variants(env):
        ds = runs[0].dataset
        p_lr, a_lr = choose(env, sweep, [runs], None, f"{sweep}/{ds}")
        chosen = pick(runs, param_lr=p_lr, act_lr=a_lr)
        fig, ax = plt.subplots(figsize=(4.2, 3.0))
        acc_curve(env, sweep, ax, chosen, clean, "#636EFA", "μPC", fill, marker=None)
        ax.set_xlabel("Training iteration")
        ax.set_ylabel("Test accuracy (%)")
        rc = chosen[0]
        ax.set_title(f"{DS_NAME[ds]}: μPC, {rc.act}, H={rc.H}, N={rc.N}, {rc.epochs} epochs"
                     + (" (clean)" if clean else ""), fontsize=9)
        figs.append(finish(env, fig, f"{env.family}_mupc_deep_{ds}{suffix(clean)}",
                           f"{DS_NAME[ds]}, μPC {rc.act} ResNet, H={rc.H}, N={rc.N}, {rc.epochs} epochs, "
                           f"{len(chosen)} seeds: test accuracy, mean ± 1 std"
                           + (" (a seed with no evaluation counts as [10 %])." if fill else "."),
                           seed_file, [sweep], clean))
    return figs


# ----------------------------------------------------------------------------- comparisons



def fill_note(env: Env) -> str:
    """The caption's account of the SP cells: all trained, or which are the notebook's fill (not measured)."""
    if not env.cfg.chance_cells:
        return "every SP cell trained and measured"
    return (f"cells {dict(env.cfg.chance_cells)} NOT MEASURED: drawn as the notebook's 10 % fill "
            "(mupc_training.figures.chance_cells)")



def sp_baseline(env: Env, sweep: str) -> list[Figure]:
    """F20: SP PC at N=512 with skips across H per act (chance cells filled without loading)."""
    runs = sweep_runs(env, sweep)
    figs = []
    for clean in variants(env):
        acts, fig, axes = act_columns(runs, 1)
        for j, act in enumerate(acts):
            ar = pick(runs, act=act)
            hs = sorted(set(values(ar, "H")) | set(env.cfg.chance_cells.get(act, [])))
            for H, col in zip(hs, colours("Blues", len(hs))):
                series, how = sp_cell(env, sweep, ar, act, H, values(runs, "seed"))
                ref = pick(ar, H=H)[:1] or ar[:1]
                n = expected_len(env, sweep, ref[0]) if clean else None
                m, s = stats(series, n, env.chance)
                band(axes[0, j], ag.acc_steps(len(m), ref[0].test_every), m, s, col, f"H={H}")
            axes[0, j].set_title(act)
            axes[0, j].set_xlabel("Training iteration")
            axes[0, j].set_ylabel("Test accuracy (%)")
            axes[0, j].legend(fontsize=7)
        ds = runs[0].dataset
        fig.suptitle(f"{DS_NAME[ds]}: SP PC with skips across depth" + (" (clean)" if clean else ""))
        figs.append(finish(env, fig, f"F20_sp_depth_{ds}{suffix(clean)}",
                           f"{DS_NAME[ds]}, SP PC ResNets (N={cell_width(runs)}), best lrs per (act, H); "
                           f"{fill_note(env)}.",
                           f"pcn_results/{DS_NAME[ds]}/best_test_accs_depth_SP_{{act}}.pdf", [sweep], clean))
    return figs



def mupc_vs_pc(env: Env, mupc: str, pc: str, bp: str) -> list[Figure]:
    """F18 (paper Fig. 1 right): μPC (Blues) vs SP PC (Reds, dashed) across H, BP at the deepest H."""
    s6, s12, b2 = mupc, pc, bp
    mu_runs = sweep_runs(env, s6)
    pc_runs = sweep_runs(env, s12)
    figs = []
    for clean in variants(env):
        acts, fig, axes = act_columns(mu_runs, 1, w=4.0, h=3.0)
        for j, act in enumerate(acts):
            ax = axes[0, j]
            ds = mu_runs[0].dataset
            p_lr, a_lr = mupc_choice(env, s6, mu_runs, act, "H")
            hs = values(pick(mu_runs, act=act), "H")
            mu_cols = colours("Blues", len(hs), skip=1)
            pc_cols = colours("Reds", len(hs))
            for k, H in enumerate(hs):
                chosen = pick(mu_runs, act=act, H=H, param_lr=p_lr, act_lr=a_lr)
                te = chosen[0].test_every
                seeds = [rc.seed for rc in by_seed(chosen)]
                mu = accs(env, s6, chosen)
                pc, how = sp_cell(env, s12, pick(pc_runs, act=act), act, H, seeds)
                n = expected_len(env, s6, chosen[0]) if clean else None
                mm, ms = stats(mu, n, env.chance)
                pm, ps = stats(pc, n, env.chance)
                band(ax, ag.acc_steps(len(mm), te), mm, ms, mu_cols[k], f"μPC H={H}")
                band(ax, ag.acc_steps(len(pm), te), pm, ps, pc_cols[k], f"PC H={H}", ls="--")
                if hs[-1] == H:
                    bp, bp_lr_v = bp_cell(env, b2, ds, act, H, chosen[0].epochs)
                    bm, bs = stats(accs(env, b2, bp), expected_len(env, b2, bp[0]) if clean else None, env.chance)
                    band(ax, ag.acc_steps(len(bm), bp[0].test_every), bm, bs, "black",
                         f"BP Depth-μP H={H} (lr {bp_lr_v:g})", marker=None, ls="--", lw=2.5)
            ax.set_title(f"{act}: μPC vs PC vs BP")
            ax.set_xlabel("Training iteration")
            ax.set_ylabel("Test accuracy (%)")
            ax.legend(fontsize=6, ncol=2)
        fig.suptitle(f"{DS_NAME[mu_runs[0].dataset]}: μPC vs PC across depth" + (" (clean)" if clean else ""))
        figs.append(finish(env, fig, f"F18_mupc_vs_pc{suffix(clean)}",
                           "Paper Fig. 1 (right): ResNets across H on MNIST, 1 epoch: μPC (solid, blues) vs "
                           f"standard PC (dashed, reds; {fill_note(env)}) vs BP "
                           "with Depth-μP at the deepest H (black dashed); mean ± 1 std over seeds.",
                           "pcn_results/{act}_mupc_vs_pc_best_accs.pdf (+ n_hiddens_{blue,red,black}_legend.pdf)",
                           [s6, s12, b2], clean))
    return figs


def deep_comparison(env: Env, mupc: tuple[str, ...], bp: str) -> list[Figure]:
    """F19: deepest relu net, μPC (S10/S11) vs PC (chance, [10]*len(BP)) vs BP (B2), per dataset."""
    figs = []
    for clean in variants(env):
        items = []
        for sweep in mupc:
            runs = sweep_runs(env, sweep)
            items.append((sweep, runs))
        fig, axes = grid_axes(1, len(items), w=4.0, h=3.0)
        for j, (sweep, runs) in enumerate(items):
            ax = axes[0, j]
            p_lr, a_lr = choose(env, sweep, [runs], None, f"{sweep}/{runs[0].dataset}")
            chosen = by_seed(pick(runs, param_lr=p_lr, act_lr=a_lr))[: env.cfg.max_seeds_128]
            rc = chosen[0]
            bp_all, bp_lr_v = bp_cell(env, bp, rc.dataset, rc.act, rc.H, rc.epochs)
            seeds = [r.seed for r in chosen]
            bp_runs = [r for r in bp_all if r.seed in seeds]
            if len(bp_runs) != len(chosen):
                raise RenderError(f"{env.family}: {bp} lacks seeds {seeds} for {rc.dataset}/H={rc.H}/{rc.epochs} "
                                  "epochs")
            bp_acc = accs(env, bp, bp_runs)
            pc_acc = [ag.pc_chance_like(a, env.chance) for a in bp_acc]
            mu_acc = accs(env, sweep, chosen)
            n_mu = expected_len(env, sweep, rc) if clean else None
            n_bp = expected_len(env, bp, bp_runs[0]) if clean else None
            curves = [("BP", bp_acc, n_bp, "#222A2A", None, "-", bp_runs[0].test_every),
                      (PC_FILL, pc_acc, n_bp, "#EF553B", None, "--", bp_runs[0].test_every),
                      ("μPC", mu_acc, n_mu, "#636EFA", "o", "", rc.test_every)]
            for label, series, n, col, mk, ls, te in curves:
                m, s = stats(series, n, env.chance)
                band(ax, ag.acc_steps(len(m), te), m, s, col, label, marker=mk, ls=ls or "none")
            ax.set_title(f"{DS_NAME[rc.dataset]}: {rc.act}, H={rc.H}, {rc.epochs} epochs")
            ax.set_xlabel("Training iteration")
            ax.set_ylabel("Test accuracy (%)")
            ax.legend(fontsize=7)
        fig.suptitle("Deepest net: μPC vs PC vs BP (Depth-μP)" + (" (clean)" if clean else ""))
        figs.append(finish(env, fig, f"F19_deep_mupc_vs_pc_vs_bp{suffix(clean)}",
                           "Deepest ReLU ResNet (paper: 128 layers; smoke: the deepest smoke H), μPC vs BP "
                           "with Depth-μP; PC is NOT MEASURED here on any profile (no sweep trains PC at this "
                           "depth and schedule): the dashed line is the notebook's fill, [10 %] × length of "
                           "the BP curve ('PC runs diverge for any lrs'); F18 shows PC measured at this depth "
                           "after 1 epoch where the profile trains it. The notebook labels the "
                           "F-MNIST x ticks as epochs (t+1 with test_every 900); here both panels show "
                           "training iterations (t+1)·test_every.",
                           "pcn_results/{MNIST,Fashion-MNIST}/mupc_vs_pc_vs_bp_128_relu_net.pdf",
                           [*mupc, bp], clean))
    return figs


def bp_sweep(env: Env, sweep: str) -> list[Figure]:
    """F21: BP Depth-μP lr sweep; a seed with len(test_accs) <= 1 → [chance]*3."""
    runs = sweep_runs(env, sweep)
    figs = []
    for clean in variants(env):
        for ds, epochs in sorted({(rc.dataset, rc.epochs) for rc in runs}):
            vr = pick(runs, dataset=ds, epochs=epochs)
            acts, fig, axes = act_columns(vr, 1)
            for j, act in enumerate(acts):
                cell = pick(vr, act=act)
                lrs = values(cell, "param_lr", descending=True)
                for lr, col in zip(lrs, colours("Oranges", len(lrs))):
                    acc_curve(env, sweep, axes[0, j], pick(cell, param_lr=lr), clean, col, f"η={lr_label(lr)}",
                              ag.fill_bp_short, ref=cell[0])
                axes[0, j].set_title(f"{act}, H={cell_h(cell)}")
                axes[0, j].set_xlabel("Training iteration")
                axes[0, j].set_ylabel("Test accuracy (%)")
                axes[0, j].legend(fontsize=6)
            fig.suptitle(f"{DS_NAME[ds]}, {epochs} epoch(s): BP with Depth-μP per lr" + (" (clean)" if clean else ""))
            figs.append(finish(env, fig, f"F21_bp_lr_sweep_{ds}_{epochs}ep{suffix(clean)}",
                               f"{DS_NAME[ds]}, {epochs} epoch(s), BP with Depth-μP (Adam): test accuracy per "
                               "lr; a seed with at most one evaluation counts as [10, 10, 10] %, as in the "
                               "notebook.", f"bp_results/{DS_NAME[ds]}/{{act}}_best_test_accs.pdf", [sweep], clean))
    return figs



def activity_decay(env: Env, sweep: str) -> list[Figure]:
    """F22: per activity lr, max test accuracy (per seed) vs activity decay, mean ± std."""
    runs = sweep_runs(env, sweep)
    a_lrs = values(runs, "act_lr", descending=True)
    decays = values(runs, "activity_decay", descending=True)
    fig, axes = grid_axes(1, len(a_lrs))
    for j, a_lr in enumerate(a_lrs):
        seeds = values(runs, "seed")
        mat = np.zeros((len(seeds), len(decays)))
        for i, dec in enumerate(decays):
            for k, sd in enumerate(seeds):
                rc = pick(runs, act_lr=a_lr, activity_decay=dec, seed=sd)
                if len(rc) != 1:
                    raise RenderError(f"F22: S5 needs one run per (act lr, decay, seed); got {len(rc)}")
                mat[k, i] = ag.max_acc_per_seed(env.sweeps.series(sweep, rc[0], "test_accs"), env.chance)
        m, s = ag.decay_stats(mat)
        x = np.arange(len(decays))
        band(axes[0, j], x, m, s, "#636EFA", "max test acc")
        axes[0, j].set_xticks(x, [fmt_num(d) for d in decays])
        axes[0, j].set_xlabel("Activity decay")
        axes[0, j].set_ylabel("Test accuracy (%)")
        axes[0, j].set_title(f"activity lr {lr_label(a_lr)}")
    rc = runs[0]
    fig.suptitle(f"{DS_NAME[rc.dataset]}: SP PC {rc.act}, H={rc.H}, N={rc.N}: activity decay")
    return [finish(env, fig, f"F22_activity_decay_{rc.dataset}",
                   "Max test accuracy per seed (a run without evaluations counts as chance; the notebook "
                   "would fail there) vs activity decay, mean ± 1 std over seeds, one panel per activity lr.",
                   "pcn_results/MNIST/…/activity_lr_{lr}/max_test_accs_per_activity_decay.pdf", [sweep])]


# ----------------------------------------------------------------------------- contours



def edges(v: Sequence[float]) -> np.ndarray:
    """Cell edges on a log axis for ascending ``v`` (geometric midpoints)."""
    lv = np.log10(np.asarray(v, dtype=float))
    if len(lv) == 1:
        return 10 ** np.array([lv[0] - 0.5, lv[0] + 0.5])
    mid = (lv[1:] + lv[:-1]) / 2
    return 10 ** np.concatenate([[2 * lv[0] - mid[0]], mid, [2 * lv[-1] - mid[-1]]])


def draw_contour(ax: plt.Axes, p_lrs: list[float], a_lrs: list[float], z: np.ndarray, cmap: str,
                 label: str, best: str) -> tuple[float, float, float] | None:
    """Heat map of log10 values over (act lr, param lr), log axes; −∞/NaN cells hatched as failed.
    Returns the optimum (act lr, param lr, value there, 10^z) or None when no cell is finite."""
    pa, aa = np.asarray(p_lrs)[::-1], np.asarray(a_lrs)[::-1]  # ascending
    zz = np.asarray(z, dtype=float)[::-1, ::-1]
    masked = np.ma.masked_invalid(zz)
    im = ax.pcolormesh(edges(aa), edges(pa), masked, cmap=cmap, shading="flat")
    finite = np.isfinite(zz)
    if finite.sum() >= 4 and zz.shape[0] >= 2 and zz.shape[1] >= 2:
        with contextlib.suppress(ValueError, TypeError):
            ax.contour(aa, pa, np.ma.masked_invalid(zz), colors="k", linewidths=0.5, alpha=0.5)
    for (r, c), ok in np.ndenumerate(finite):
        if not ok:
            ax.text(aa[c], pa[r], "−∞" if np.isneginf(zz[r, c]) else "×", ha="center", va="center", fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("Activity lr")
    ax.set_ylabel("Weight lr")
    ax.figure.colorbar(im, ax=ax, label=label)
    idx = ag.argbest(zz, best)
    if idx is None:
        return None
    ax.plot(aa[idx[1]], pa[idx[0]], marker="*", color="gold", ms=12, mec="k")
    return float(aa[idx[1]]), float(pa[idx[0]]), float(10 ** zz[idx])


def transfer_contours(env: Env, sweep: str, over: str | None) -> list[Figure]:
    """F23 (over N) / F24 (over H): min train loss contours per act; F25 (over None): F-MNIST loss
    and accuracy contours per act."""
    runs = sweep_runs(env, sweep)
    figs = []
    for clean in variants(env):
        ds = runs[0].dataset
        acts = values(runs, "act")
        ivs = values(runs, over) if over else [None]
        rows = [("loss", "RdBu_r", "log10 min train loss", "min")]
        if over is None:
            rows.append(("acc", "Greens", "log10 max test acc (%)", "max"))
        nrows = len(acts) * len(rows)
        fig, axes = grid_axes(nrows, len(ivs), w=3.6, h=2.8)
        for i, act in enumerate(acts):
            for j, v in enumerate(ivs):
                sub = pick(runs, act=act, **({over: v} if over else {}))
                p_lrs, a_lrs, loss, acc = contour_arrays(env, sweep, sub, clean)
                for r, (what, cmap, label, best) in enumerate(rows):
                    cells = loss if what == "loss" else acc
                    z = ag.contour_log10_clean(cells) if clean else ag.log10_notebook(ag.contour_mean(cells))
                    ax = axes[i * len(rows) + r, j]
                    draw_contour(ax, p_lrs, a_lrs, z, cmap, label, best)
                    ax.set_title(f"{act}" + (f", {over}={v}" if over else "") + f" ({what})", fontsize=9)
        word = {"N": "width", "H": "depth", None: "F-MNIST"}[over]
        fig.suptitle(f"{DS_NAME[ds]}: μPC hyper-parameter transfer ({word})" + (" (clean)" if clean else ""))
        if over == "N":
            seed, fid = "pcn_results/min_train_losses_over_lrs_{act}_width_{N}.pdf", "F23_transfer_width"
        elif over == "H":
            seed, fid = "pcn_results/min_train_losses_over_lrs_{act}_depth_{H}.pdf", "F24_transfer_depth"
        else:
            n = cell_width(runs)
            seed = (f"pcn_results/min_train_losses_over_lrs_Fashion-MNIST_{{act}}_width_{n}.pdf, "
                    f"max_test_accs_over_lrs_Fashion-MNIST_{{act}}_width_{n}.pdf")
            fid = "F25_transfer_fmnist"
        note = ("clean aggregation: a cell where any seed is empty or non-finite is masked (×)" if clean else
                "notebook aggregation: per seed min(batch_train_losses) / max(test_accs) with failed runs "
                "left at 0, mean over seeds, log10 (a mean of 0 → −∞, NaN propagates)")
        cap = (f"{DS_NAME[ds]}, μPC: {'min train loss' if over else 'min train loss and max test accuracy'} "
               f"over (activity lr, weight lr), log axes; star = optimum. {note}.")
        fig_rec = finish(env, fig, f"{fid}{suffix(clean)}", cap, seed, [sweep])
        figs.append(fig_rec)
    return figs


# ----------------------------------------------------------------------------- entry


def drawer(family: str) -> Callable[[Env], list[Figure]]:
    """The function that draws ``family`` with its sweeps and arguments (its entry in families.py)."""
    spec = FAMILIES[family]
    draw = globals()[spec.draw]
    return lambda env: draw(env, **spec.sweeps, **spec.args)


def render_family(cfg: FiguresParams, unit: str, sweeps: Sweeps, selected: Mapping[str, Any]) -> list[Figure]:
    """The figures of family ``unit``, at the learning rates its extract ``selected`` (``selected_lrs``)."""
    env = Env(family=unit, spec=cfg.restrict.get(unit, FamilySpec()), cfg=cfg, sweeps=sweeps, selected=selected)
    return drawer(unit)(env)


def render(ctx: Context, unit: str) -> Output:
    selected = ctx.read("extract", unit, "headline.json").get("selected_lrs", {})
    figs = render_family(ctx.cfg.figures, unit, from_reader(ctx.read), selected)
    ctx.log(f"{len(figs)} figures")
    return Output(figures=figs)
