"""render@F<k>: the training figures F7–F25 (spec §6), plotly as the seed notebook draws them, and the project's F28
(no notebook figure), one function per family; drawing only.

Each renderer takes its grid from the runs of the sweeps it reads (the index of each sweep's train
unit), the learning rates its family's extract selected (``extract@F<k>``'s ``headline.json``) and its
other choices (chance cells, fills) from ``mupc_training.figures``; it returns :class:`Figure` records with a
plotly figure, whose PNG and PDF kaleido writes beside its interactive HTML (:mod:`pipeline.writer.figures`).
Every number the claims read is computed by the extract (``headlines.py``), never here, so restyling a
figure cannot move a finding. Panels the notebook writes as one file per activation (or per H) are
combined as subplots of one figure per dataset (:mod:`.panels`); the notebook's trace types, colour scales
and their sampling (:func:`pipeline.plotting.palette`), axis types and ticks are kept, and what the project
adds is a grey note below the plot.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np
import plotly.graph_objects as go

from pipeline.contract import Context, Figure, Output
from pipeline.plotting import palette
from pipeline.studies.mupc.engine.runs import RunConfig, fmt_num
from pipeline.studies.mupc.training import notebook_stats as ag
from pipeline.studies.mupc.training.cells import (
    DS_NAME,
    PC_FILL,
    Env,
    accs,
    act_order,
    bp_cell,
    by_seed,
    cell_h,
    cell_width,
    choose,
    contour_arrays,
    decay_matrix,
    expected_len,
    kappa_series,
    lr_finals,
    lr_groups,
    mupc_choice,
    mupc_kappa,
    per_dataset,
    pick,
    sp_best_runs,
    sp_cell,
    stats,
    suffix,
    sweep_runs,
    values,
    variants,
)
from pipeline.studies.mupc.training.config import FiguresParams, Restriction
from pipeline.studies.mupc.training.families import FAMILIES
from pipeline.studies.mupc.training.plotly_panels import Panels, band, contour
from pipeline.studies.mupc.training.sweep_reader import RenderError, Sweeps, from_reader

CLEAN_NOTE = "clean aggregation: early-stopped seeds padded with chance to the expected length"
#: the notebook's colour scale of test-accuracy curves per independent variable (plot_metric_per_iv)
SCALE = {"H": "Blues", "N": "Reds", "lr": "Oranges"}
MU_COLOUR, PC_COLOUR, BP_COLOUR = "#636EFA", "#EF553B", "#222A2A"  # the notebook's 128-layer colours
ACC, ITER = "Test accuracy (%)", "Training iteration"
KAPPA = "κ(H<sub>z</sub>)"


# ----------------------------------------------------------------------------- drawing helpers


def lr_label(v: float) -> str:
    return f"{v:.0e}".replace("e+0", "e").replace("e-0", "e-") if v < 1 or v >= 10 else fmt_num(v)


def acc_curve(env: Env, sweep: str, p: Panels, r: int, c: int, runs: Sequence[RunConfig], clean: bool, colour: Any,
              label: str, fill: Callable | None = None, ref: RunConfig | None = None, **style: Any) -> np.ndarray:
    """Test accuracy of ``runs`` in panel (r, c), mean ± 1 std over seeds (the clean variant padded to the
    expected length of ``ref``, by default the first run, whose schedule also places the points); returns the
    mean."""
    ref = ref or runs[0]
    n = expected_len(env, sweep, ref) if clean else None
    m, s = stats(accs(env, sweep, runs, fill), n, env.chance)
    band(p, r, c, ag.acc_steps(len(m), ref.test_every), m, s, colour, label, **style)
    return m


def title(ds: str, what: str, clean: bool) -> str:
    return f"{DS_NAME[ds]}: {what}" + (" (clean)" if clean else "")


def finish(env: Env, fig: Panels | go.Figure, fid: str, caption: str, seed: str, sources: Sequence[str],
           clean: bool = False) -> Figure:
    """The figure record; a clean variant says so below the plot and in its caption."""
    if isinstance(fig, Panels):
        if clean:
            fig.note(f"trainscape: {CLEAN_NOTE}")
        fig = fig.done()
    return Figure(id=fid, plotly=fig, caption=caption + (f" [{CLEAN_NOTE}]" if clean else ""),
                  seed_figure=seed, sources=[("train", s) for s in dict.fromkeys(sources)], family=env.family)


# ----------------------------------------------------------------------------- SP families


SP_NAMES = {"S1": ("GD", "sp_gd", ""), "S2": ("Adam", "sp_adam", ""), "S3": ("GD", "sp_skips", "_skips"),
            "S4": ("orthogonal", "sp_orth", "")}


LrCell = tuple[str, list[RunConfig], list[tuple[float, list[RunConfig]]]]


def lr_grid(env: Env, sweep: str, dr: list[RunConfig], clean: bool, cell: Callable[[str, int], LrCell | None],
            head: str, fill: Callable | None = None, panel: tuple[int, int] | None = None,
            on_curve: Callable[[str, int, float, np.ndarray], None] | None = None) -> Panels:
    """Test-accuracy curves per activity lr (the notebook's ``plot_metric_per_iv(iv_id="activity_lr")``: Oranges,
    ``sample_colorscale(n + 2)[2:]``): rows = activations, columns = H. ``cell(act, H)`` gives a panel's title,
    its runs and their groups by activity lr (None: the panel is hidden); ``on_curve(act, H, lr, mean)`` sees
    each mean."""
    acts, hs = act_order(dr), values(dr, "H")
    cells = {(act, H): cell(act, H) for act in acts for H in hs}
    titles = [cells[a, h][0] if cells[a, h] else "" for a in acts for h in hs]
    p = Panels(len(acts), len(hs), titles, panel, head)
    for i, act in enumerate(acts):
        for j, H in enumerate(hs):
            got = cells[act, H]
            if got is None:
                p.hide(i + 1, j + 1)
                continue
            _, runs, by_lr = got
            for (a_lr, lr_runs), col in zip(by_lr, palette(SCALE["lr"], len(by_lr)), strict=True):
                m = acc_curve(env, sweep, p, i + 1, j + 1, lr_runs, clean, col, f"η={lr_label(a_lr)}", fill,
                              ref=runs[0])
                if on_curve is not None:
                    on_curve(act, H, a_lr, m)
            p.axes(i + 1, j + 1, ITER, ACC)
    return p


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
        p = lr_grid(env, sweep, dr, clean, partial(sp_lr_cell, env, sweep, ds, dr, clean),
                    title(ds, f"SP PC ({name}), test accuracy per activity lr", clean))
        hdr = "_n_hidden_skips" if skip_tag else "_n_hidden"
        seed = f"pcn_results/{DS_NAME[ds]}/test_accs_{tag}_{{act}}_{{H}}{hdr}.pdf"
        figs.append(finish(env, p, f"{env.family}_{name}_lr_sweep_{ds}{suffix(clean)}",
                           f"{DS_NAME[ds]}, N={cell_width(dr)}, SP PC ({name}): test accuracy (mean ± 1 "
                           f"std over seeds) per activity lr, rows = activation, columns = H.",
                           seed, [sweep], clean))
    return figs


def sp_best(env: Env, sweep: str) -> list[Figure]:
    """Best-lr test accuracy (Blues) and κ(H_z) (Viridis) across H per act; one figure per dataset (F8, F9–F11)."""
    tag, name, skip_tag = SP_NAMES[sweep]
    runs = sweep_runs(env, sweep)
    figs = []
    for clean, ds, dr in per_dataset(env, runs):
        acts = act_order(dr)
        p = Panels(2, len(acts), [*acts, *[f"{a}: κ" for a in acts]],
                   title=title(ds, f"SP PC ({name}) at the best activity lr per H", clean))
        for j, act in enumerate(acts):
            ar = pick(dr, act=act)
            hs = values(ar, "H")
            bl, vi = palette(SCALE["H"], len(hs)), palette("Viridis", len(hs), skip=0, extra=0)
            for k, H in enumerate(hs):
                a_lr, chosen = sp_best_runs(env, sweep, ds, act, H, pick(ar, H=H))
                acc_curve(env, sweep, p, 1, j + 1, chosen, clean, bl[k], f"H={H}", hover=f"H={H}, η={lr_label(a_lr)}")
                kap = kappa_series(env, sweep, chosen, clean)
                if kap is not None:
                    km, ks = kap
                    band(p, 2, j + 1, ag.cond_steps(len(km), chosen[0].test_every), km, ks, vi[k], f"κ: H={H}")
            p.axes(1, j + 1, ITER, ACC)
            p.axes(2, j + 1, ITER, KAPPA)
        skipped = "_skips" if skip_tag else ""
        seed = (f"pcn_results/{DS_NAME[ds]}/best_test_accs_{tag}{skipped}_{{act}}.pdf, "
                f"best_cond_nums_{tag}{skipped}_{{act}}.pdf")
        figs.append(finish(env, p, f"{env.family}_{name}_best_{ds}{suffix(clean)}",
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
        p_lrs = {act: mupc_choice(env, sweep, dr, act, "H")[0] for act in act_order(dr)}
        p = lr_grid(env, sweep, dr, clean, partial(mupc_lr_cell, dr, p_lrs),
                    title(ds, "μPC, test accuracy per activity lr", clean), ag.fill_empty, panel=(650, 450))
        figs.append(finish(env, p, f"F13_mupc_lr_sweep_{ds}{suffix(clean)}",
                           f"{DS_NAME[ds]}, μPC, N={cell_width(dr)}: test accuracy per activity lr at "
                           "the selected param lr (a seed with no evaluation counts as [10 %], which "
                           "shortens its lr's curve to one point, as in the notebook).",
                           f"pcn_results/{DS_NAME[ds]}/test_accs_muPC_{{act}}_{{H}}_n_hidden.pdf",
                           [sweep], clean))
    return figs


def mupc_best(env: Env, sweep: str, over: str) -> list[Figure]:
    """F14 (across N, Reds) / F15 (across H, Blues): μPC at the best lrs per act."""
    runs = sweep_runs(env, sweep)
    sym, word = ("N", "width") if over == "N" else ("H", "depth")
    figs = []
    for clean, ds, dr in per_dataset(env, runs):
        acts = act_order(dr)
        chosen_lrs = {act: mupc_choice(env, sweep, dr, act, over) for act in acts}
        p = Panels(1, len(acts), [f"{a} (param lr {lr_label(chosen_lrs[a][0])}, act lr {lr_label(chosen_lrs[a][1])})"
                                  for a in acts], title=title(ds, f"μPC at the best lrs across {word}", clean))
        for j, act in enumerate(acts):
            p_lr, a_lr = chosen_lrs[act]
            ivs = values(pick(dr, act=act), over)
            for v, col in zip(ivs, palette(SCALE[sym], len(ivs)), strict=True):
                chosen = pick(dr, act=act, param_lr=p_lr, act_lr=a_lr, **{over: v})
                acc_curve(env, sweep, p, 1, j + 1, chosen, clean, col, f"{sym}={v}")
            p.axes(1, j + 1, ITER, ACC)
        fid = f"{env.family}_mupc_best_{word}_{ds}{suffix(clean)}"
        figs.append(finish(env, p, fid,
                           f"{DS_NAME[ds]}, μPC ResNets, best (param lr, act lr) per activation "
                           f"(selection: {env.cfg.selection}), test accuracy across {word}, "
                           "mean ± 1 std over seeds.",
                           f"pcn_results/{DS_NAME[ds]}/best_test_accs_{word}_muP_{{act}}.pdf",
                           [sweep], clean))
    return figs


def mupc_cond(env: Env, sweep: str) -> list[Figure]:
    """F12: κ(H_z) during μPC training across H per act (the notebook's ``sample_colorscale("Viridis", n)``,
    linear y axis, x ticks at t·test_every)."""
    runs = sweep_runs(env, sweep)
    figs = []
    for clean, ds, dr in per_dataset(env, runs):
        acts = act_order(dr)
        p = Panels(1, len(acts), acts, title=title(ds, "μPC, condition number of the activity Hessian", clean))
        for j, act in enumerate(acts):
            ar = pick(dr, act=act)
            hs = values(ar, "H")
            for H, col in zip(hs, palette("Viridis", len(hs), skip=0, extra=0), strict=True):
                cell = pick(ar, H=H)
                kap = mupc_kappa(env, sweep, ds, act, H, cell, clean)
                band(p, 1, j + 1, ag.cond_steps(len(kap[0]), cell[0].test_every), *kap, col, f"H={H}")
            p.axes(1, j + 1, ITER, KAPPA)
        figs.append(finish(env, p, f"F12_mupc_cond_{ds}{suffix(clean)}",
                           f"{DS_NAME[ds]}, μPC, κ(H_z) = |λmax|/|λmin| during training across H, "
                           "mean ± 1 std over seeds; rows past an early stop are NaN (notebook); the "
                           "clean variant averages the reached rows only.",
                           f"pcn_results/{DS_NAME[ds]}/best_cond_nums_mupc_{{act}}.pdf", [sweep], clean))
    return figs


def mupc_long(env: Env, sweep: str, fill_empty: bool, seed_file: str) -> list[Figure]:
    """F16 (S10, MNIST: empty → [chance]) / F17 (S11, F-MNIST: no fill): deepest μPC net, long run (the notebook's
    ``plot_metric_stats``, from its plotting module, is not in the notebook: drawn as its other curves)."""
    runs = sweep_runs(env, sweep)
    figs = []
    fill = ag.fill_empty if fill_empty else None
    for clean in variants(env):
        ds = runs[0].dataset
        p_lr, a_lr = choose(env, sweep, [runs], None, f"{sweep}/{ds}")
        chosen = pick(runs, param_lr=p_lr, act_lr=a_lr)
        rc = chosen[0]
        p = Panels(1, 1, title=title(ds, f"μPC, {rc.act}, H={rc.H}, N={rc.N}, {rc.epochs} epochs", clean),
                   legend=False)
        acc_curve(env, sweep, p, 1, 1, chosen, clean, MU_COLOUR, "μPC", fill, marker=False)
        p.axes(1, 1, ITER, ACC)
        figs.append(finish(env, p, f"{env.family}_mupc_deep_{ds}{suffix(clean)}",
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
        acts = act_order(runs)
        ds = runs[0].dataset
        p = Panels(1, len(acts), acts, title=title(ds, "SP PC with skips across depth", clean))
        for j, act in enumerate(acts):
            ar = pick(runs, act=act)
            hs = sorted(set(values(ar, "H")) | set(env.cfg.chance_cells.get(act, [])))
            for H, col in zip(hs, palette(SCALE["H"], len(hs)), strict=True):
                series, how = sp_cell(env, sweep, ar, act, H, values(runs, "seed"))
                ref = pick(ar, H=H)[:1] or ar[:1]
                n = expected_len(env, sweep, ref[0]) if clean else None
                m, s = stats(series, n, env.chance)
                band(p, 1, j + 1, ag.acc_steps(len(m), ref[0].test_every), m, s, col, f"H={H}", hover=how)
            p.axes(1, j + 1, ITER, ACC)
        if env.cfg.chance_cells:
            p.note(f"trainscape: {fill_note(env)}")
        figs.append(finish(env, p, f"F20_sp_depth_{ds}{suffix(clean)}",
                           f"{DS_NAME[ds]}, SP PC ResNets (N={cell_width(runs)}), best lrs per (act, H); "
                           f"{fill_note(env)}.",
                           f"pcn_results/{DS_NAME[ds]}/best_test_accs_depth_SP_{{act}}.pdf", [sweep], clean))
    return figs


#: the notebook's y ticks of paper Fig. 1 per activation (plot_mupc_vs_pc_vs_bp_accs)
FIG1_YTICKS = {"relu": [10, 50, 90], "tanh": [60, 75, 90], "linear": [10, 30, 50, 70, 90]}


def mupc_vs_pc(env: Env, mupc: str, pc: str, bp: str) -> list[Figure]:
    """F18 (paper Fig. 1 right): μPC (``sample_colorscale("Blues", n + 2)[1:]``, solid) vs SP PC
    (``("Reds", n + 2)[2:]``, dashed) across H, BP (black, dashed, width 3, no markers) at the deepest H."""
    s6, s12, b2 = mupc, pc, bp
    mu_runs = sweep_runs(env, s6)
    pc_runs = sweep_runs(env, s12)
    figs = []
    for clean in variants(env):
        acts = act_order(mu_runs)
        ds = mu_runs[0].dataset
        p = Panels(1, len(acts), [f"{a}: μPC vs PC vs BP" for a in acts], (500, 350),
                   title(ds, "μPC vs PC across depth", clean))
        for j, act in enumerate(acts):
            p_lr, a_lr = mupc_choice(env, s6, mu_runs, act, "H")
            hs = values(pick(mu_runs, act=act), "H")
            mu_cols = palette("Blues", len(hs), skip=1, extra=2)
            pc_cols = palette("Reds", len(hs), skip=2)
            for k, H in enumerate(hs):
                chosen = pick(mu_runs, act=act, H=H, param_lr=p_lr, act_lr=a_lr)
                te = chosen[0].test_every
                seeds = [rc.seed for rc in by_seed(chosen)]
                mu = accs(env, s6, chosen)
                pc, how = sp_cell(env, s12, pick(pc_runs, act=act), act, H, seeds)
                n = expected_len(env, s6, chosen[0]) if clean else None
                mm, ms = stats(mu, n, env.chance)
                pm, ps = stats(pc, n, env.chance)
                band(p, 1, j + 1, ag.acc_steps(len(mm), te), mm, ms, mu_cols[k], f"μPC H={H}")
                band(p, 1, j + 1, ag.acc_steps(len(pm), te), pm, ps, pc_cols[k], f"PC H={H}", dash="dash", hover=how)
                if hs[-1] == H:
                    bpr, bp_lr_v = bp_cell(env, b2, ds, act, H, chosen[0].epochs)
                    bm, bs = stats(accs(env, b2, bpr), expected_len(env, b2, bpr[0]) if clean else None, env.chance)
                    band(p, 1, j + 1, ag.acc_steps(len(bm), bpr[0].test_every), bm, bs, "black",
                         f"BP Depth-μP H={H} (lr {bp_lr_v:g})", marker=False, dash="dash", width=3)
            ticks = FIG1_YTICKS.get(act)
            p.axes(1, j + 1, ITER, ACC, **({"tickvals": ticks, "ticktext": [str(t) for t in ticks]} if ticks else {}))
        if env.cfg.chance_cells:
            p.note(f"trainscape: PC {fill_note(env)}")
        figs.append(finish(env, p, f"F18_mupc_vs_pc{suffix(clean)}",
                           "Paper Fig. 1 (right): ResNets across H on MNIST, 1 epoch: μPC (solid, blues) vs "
                           f"standard PC (dashed, reds; {fill_note(env)}) vs BP "
                           "with Depth-μP at the deepest H (black dashed); mean ± 1 std over seeds.",
                           "pcn_results/{act}_mupc_vs_pc_best_accs.pdf (+ n_hiddens_{blue,red,black}_legend.pdf)",
                           [s6, s12, b2], clean))
    return figs


def deep_comparison(env: Env, mupc: tuple[str, ...], bp: str) -> list[Figure]:
    """F19: deepest relu net, μPC (S10/S11, markers) vs PC (chance, [10]*len(BP), dashed) vs BP (B2), per dataset,
    in the notebook's colours."""
    figs = []
    for clean in variants(env):
        items = [(sweep, sweep_runs(env, sweep)) for sweep in mupc]
        picks = []
        for sweep, runs in items:
            p_lr, a_lr = choose(env, sweep, [runs], None, f"{sweep}/{runs[0].dataset}")
            picks.append(by_seed(pick(runs, param_lr=p_lr, act_lr=a_lr))[: env.cfg.max_seeds_128])
        p = Panels(1, len(items), [f"{DS_NAME[c[0].dataset]}: {c[0].act}, H={c[0].H}, {c[0].epochs} epochs"
                                   for c in picks], (425, 300),
                   "Deepest net: μPC vs PC vs BP (Depth-μP)" + (" (clean)" if clean else ""))
        for j, ((sweep, _), chosen) in enumerate(zip(items, picks, strict=True)):
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
            curves = [("BP", bp_acc, n_bp, BP_COLOUR, False, None, 2, bp_runs[0].test_every),
                      (PC_FILL, pc_acc, n_bp, PC_COLOUR, False, "dash", 3, bp_runs[0].test_every),
                      ("μPC", mu_acc, n_mu, MU_COLOUR, "only", None, 2, rc.test_every)]
            for label, series, n, col, mk, dash, width, te in curves:
                m, s = stats(series, n, env.chance)
                band(p, 1, j + 1, ag.acc_steps(len(m), te), m, s, col, label, marker=mk, dash=dash, width=width)
            ticks = [10, 55, 100] if rc.dataset == "mnist" else [10, 50, 90]
            p.axes(1, j + 1, ITER, ACC, tickvals=ticks, ticktext=[str(t) for t in ticks])
        p.note("trainscape: PC is NOT MEASURED at this depth (no sweep trains it): the dashed line is the "
               "notebook's 10 % fill, as long as the BP curve.")
        figs.append(finish(env, p, f"F19_deep_mupc_vs_pc_vs_bp{suffix(clean)}",
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
    """F21: BP Depth-μP lr sweep (Oranges per lr, as the notebook's ``iv_id="activity_lr"``); a seed with
    len(test_accs) <= 1 → [chance]*3."""
    runs = sweep_runs(env, sweep)
    figs = []
    for clean in variants(env):
        for ds, epochs in sorted({(rc.dataset, rc.epochs) for rc in runs}):
            vr = pick(runs, dataset=ds, epochs=epochs)
            acts = act_order(vr)
            p = Panels(1, len(acts), [f"{a}, H={cell_h(pick(vr, act=a))}" for a in acts], (575, 400),
                       title(ds, f"{epochs} epoch(s), BP with Depth-μP per lr", clean))
            for j, act in enumerate(acts):
                cell = pick(vr, act=act)
                lrs = values(cell, "param_lr", descending=True)
                for lr, col in zip(lrs, palette(SCALE["lr"], len(lrs)), strict=True):
                    acc_curve(env, sweep, p, 1, j + 1, pick(cell, param_lr=lr), clean, col, f"η={lr_label(lr)}",
                              ag.fill_bp_short, ref=cell[0])
                p.axes(1, j + 1, ITER, ACC)
            figs.append(finish(env, p, f"F21_bp_lr_sweep_{ds}_{epochs}ep{suffix(clean)}",
                               f"{DS_NAME[ds]}, {epochs} epoch(s), BP with Depth-μP (Adam): test accuracy per "
                               "lr; a seed with at most one evaluation counts as [10, 10, 10] %, as in the "
                               "notebook.", f"bp_results/{DS_NAME[ds]}/{{act}}_best_test_accs.pdf", [sweep], clean))
    return figs


def activity_decay(env: Env, sweep: str) -> list[Figure]:
    """F22: per activity lr, max test accuracy (per seed) vs activity decay, mean ± std (the notebook's
    ``plot_accs_per_activity_decay``: #636EFA, x = the decays' index labelled with their values, no legend)."""
    runs = sweep_runs(env, sweep)
    a_lrs = values(runs, "act_lr", descending=True)
    decays = values(runs, "activity_decay", descending=True)
    rc = runs[0]
    p = Panels(1, len(a_lrs), [f"activity lr {lr_label(a)}" for a in a_lrs], legend=False,
               title=f"{DS_NAME[rc.dataset]}: SP PC {rc.act}, H={rc.H}, N={rc.N}: activity decay")
    for j, a_lr in enumerate(a_lrs):
        m, s = ag.decay_stats(decay_matrix(env, sweep, runs, a_lr, decays, values(runs, "seed")))
        x = np.arange(len(decays))
        band(p, 1, j + 1, x, m, s, MU_COLOUR, "max test acc", ticks=False)
        p.fig.update_xaxes(tickvals=list(x), ticktext=[fmt_num(d) for d in decays], row=1, col=j + 1)
        p.axes(1, j + 1, "Activity decay", ACC)
    return [finish(env, p, f"F22_activity_decay_{rc.dataset}",
                   "Max test accuracy per seed (a run without evaluations counts as chance; the notebook "
                   "would fail there) vs activity decay, mean ± 1 std over seeds, one panel per activity lr.",
                   "pcn_results/MNIST/…/activity_lr_{lr}/max_test_accs_per_activity_decay.pdf", [sweep])]


# ----------------------------------------------------------------------------- contours


def draw_contour(p: Panels, r: int, c: int, p_lrs: list[float], a_lrs: list[float], z: np.ndarray, cmap: str,
                 label: str, best: str) -> tuple[float, float, float] | None:
    """The notebook's contour of log10 values over (act lr, param lr) in panel (r, c); non-finite cells marked
    (× failed, −∞ a mean of 0) and the optimum starred (both the project's, named so in the legend). Returns
    the optimum (act lr, param lr, 10^z there) or None when no cell is finite."""
    pa, aa = np.asarray(p_lrs)[::-1], np.asarray(a_lrs)[::-1]  # ascending
    zz = np.asarray(z, dtype=float)[::-1, ::-1]
    contour(p, r, c, aa, pa, zz, cmap, label)
    bad = [(rr, cc) for (rr, cc), ok in np.ndenumerate(np.isfinite(zz)) if not ok]
    if bad:
        name = "not finite (× failed, −∞ mean 0)"
        p.add(go.Scatter(x=[aa[cc] for _, cc in bad], y=[pa[rr] for rr, _ in bad], mode="text", cliponaxis=False,
                         text=["−∞" if np.isneginf(zz[rr, cc]) else "×" for rr, cc in bad], name=name,
                         textfont={"color": "black"}, showlegend=p.show(name, "black"), legendgroup=name), r, c)
    idx = ag.argbest(zz, best)
    if idx is None:
        return None
    name = "optimum"
    p.add(go.Scatter(x=[aa[idx[1]]], y=[pa[idx[0]]], mode="markers", name=name, legendgroup=name, cliponaxis=False,
                     marker={"symbol": "star", "size": 14, "color": "gold", "line": {"color": "black", "width": 1}},
                     showlegend=p.show(name, "gold")), r, c)
    return float(aa[idx[1]]), float(pa[idx[0]]), float(10 ** zz[idx])


#: a contour figure's rows of metrics: (metric, colour scale, colour-bar title, which extreme is best)
LOSS_ROW = ("loss", "RdBu_r", "Training loss", "min")
ACC_ROW = ("acc", "Greens", ACC, "max")


def contour_panels(rows: int, cols: int, titles: list[str], head: str) -> Panels:
    """Panels for contours: the notebook's 500 × 400 px and white background, the legend of the project's marks
    (optimum, non-finite cells) above the plot, clear of the colour bars beside every panel."""
    p = Panels(rows, cols, titles, (500, 400), head, hspace=0.16, vspace=0.3 / rows)
    p.fig.update_layout(plot_bgcolor="white")
    p.legend_top()
    return p


def transfer_layout(acts: list[str], ivs: list[Any], rows: list[tuple[str, ...]]
                    ) -> dict[tuple[int, int], tuple[str, Any, tuple[str, ...]]]:
    """Each panel (row, col) of a transfer figure → (act, iv, metric row). F25 (``ivs`` [None]): the notebook's
    loss and accuracy rows by activation columns; F23/F24: rows = activations, columns = the N or H drawn."""
    if ivs == [None]:
        return {(r + 1, j + 1): (act, None, row) for r, row in enumerate(rows) for j, act in enumerate(acts)}
    return {(i + 1, j + 1): (act, v, rows[0]) for i, act in enumerate(acts) for j, v in enumerate(ivs)}


def transfer_contours(env: Env, sweep: str, over: str | None) -> list[Figure]:
    """F23 (over N) / F24 (over H): min train loss contours per act (RdBu_r); F25 (over None): F-MNIST loss and
    accuracy (Greens) contours per act, as the notebook's ``plot_learning_rates_contour``."""
    runs = sweep_runs(env, sweep)
    figs = []
    for clean in variants(env):
        ds = runs[0].dataset
        acts = act_order(runs)
        ivs = values(runs, over) if over else [None]
        layout = transfer_layout(acts, ivs, [LOSS_ROW] if over else [LOSS_ROW, ACC_ROW])
        titles = [f"{act}" + (f", {over}={v}" if over else "") + f" ({row[0]})" for act, v, row in layout.values()]
        word = {"N": "width", "H": "depth", None: "F-MNIST"}[over]
        nrow, ncol = max(r for r, _ in layout), max(c for _, c in layout)
        p = contour_panels(nrow, ncol, titles, title(ds, f"μPC hyper-parameter transfer ({word})", clean))
        grids: dict[tuple[str, Any], tuple] = {}  # a cell's arrays, loaded once for its loss and accuracy rows
        for (r, c), (act, v, (what, cmap, label, best)) in layout.items():
            if (act, v) not in grids:
                grids[act, v] = contour_arrays(env, sweep, pick(runs, act=act, **({over: v} if over else {})), clean)
            p_lrs, a_lrs, loss, acc = grids[act, v]
            cells = loss if what == "loss" else acc
            z = ag.contour_log10_clean(cells) if clean else ag.log10_notebook(ag.contour_mean(cells))
            draw_contour(p, r, c, p_lrs, a_lrs, z, cmap, label, best)
            p.axes(r, c, "Activity lr", "Weight lr")
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
        p.note("trainscape: the star marks the optimum the extract records; ×/−∞ mark cells with no finite "
               "value (the notebook leaves them to the contour).")
        cap = (f"{DS_NAME[ds]}, μPC: {'min train loss' if over else 'min train loss and max test accuracy'} "
               f"over (activity lr, weight lr), log axes; star = optimum. {note}.")
        figs.append(finish(env, p, f"{fid}{suffix(clean)}", cap, seed, [sweep]))
    return figs


#: F28 is the project's addition: the notebook draws no lr grid of standard PC at its deepest depth
PROJECT_FIGURE = "none (the project's addition: no notebook figure)"


ACC_TICKS = (1, 10, 20, 50, 100)  # % accuracy on F28's shared colour bar


def shared_accuracy_scale(fig: go.Figure) -> None:
    """One colour range, log10 of 1–100 % (lower where a cell is), for every contour panel of ``fig``, its colour
    bars ticked in plain percentages, so panels of different activations compare by colour."""
    traces = [t for t in fig.data if t.type in ("contour", "heatmap")]
    finite = [float(v) for t in traces for v in np.ravel(np.asarray(t.z, dtype=float)) if np.isfinite(v)]
    lo = min([0.0, *finite])
    ticks = [float(np.log10(v)) for v in ACC_TICKS if np.log10(v) >= lo]
    for t in traces:
        t.update(zauto=False, zmin=lo, zmax=2.0,
                 colorbar={"tickvals": ticks, "ticktext": [f"{10 ** v:g}" for v in ticks]})


def pc_any_lr(env: Env, sweep: str) -> list[Figure]:
    """F28 (the project's addition): standard PC's final accuracy (verdict aggregation: a run without evaluations
    is chance) over (activity lr, weight lr) per act (columns) and H (rows), one figure per dataset, drawn as the
    accuracy contours of F25 (Greens, log10 values, log axes; star = the best cell) with their helpers, on one
    colour range for every panel."""
    runs = sweep_runs(env, sweep)
    figs = []
    for ds in values(runs, "dataset"):
        dr = pick(runs, dataset=ds)
        acts, hs = act_order(dr), values(dr, "H")
        p = contour_panels(len(hs), len(acts), [f"{act}, H={H}" for H in hs for act in acts],
                           title(ds, "standard PC, final test accuracy over the lr grid", False))
        for i, H in enumerate(hs):
            for j, act in enumerate(acts):
                cell = pick(dr, act=act, H=H)
                if not cell:
                    p.hide(i + 1, j + 1)
                    continue
                p_lrs, a_lrs, z = lr_finals(env, sweep, cell)
                with np.errstate(divide="ignore", invalid="ignore"):
                    draw_contour(p, i + 1, j + 1, p_lrs, a_lrs, np.log10(z), "Greens", ACC, "max")
                p.axes(i + 1, j + 1, "Activity lr", "Weight lr")
        shared_accuracy_scale(p.fig)
        epochs = ",".join(str(e) for e in values(dr, "epochs"))
        p.note("trainscape: the project's addition (no notebook figure). Each cell is one (activity lr, weight lr) "
               "pair's final test accuracy, mean over seeds; a run that diverged before its first test counts as "
               f"chance ({env.chance:g} %). One colour range (1–100 %) for every panel; the star marks the best "
               "cell.")
        figs.append(finish(env, p, f"F28_pc_any_lr_{ds}",
                           f"Project addition (no notebook figure): {DS_NAME[ds]}, standard PC (SP, skips, "
                           f"N={cell_width(dr)}) at H={cell_h(dr)}, {epochs} epoch(s): final test accuracy (mean "
                           "over seeds; a run that diverged before its first test counts as chance, "
                           f"{env.chance:g} %) over (activity lr, weight lr), log axes and log10 colour scale; star = "
                           "the best cell. It checks the paper's 'standard PC cannot train 128-layer nets for any "
                           "lr'.",
                           PROJECT_FIGURE, [sweep]))
    return figs


# ----------------------------------------------------------------------------- entry


def drawer(family: str) -> Callable[[Env], list[Figure]]:
    """The function that draws ``family`` with its sweeps and arguments (its entry in families.py)."""
    spec = FAMILIES[family]
    draw = globals()[spec.draw]
    return lambda env: draw(env, **spec.sources, **spec.args)


def render_family(cfg: FiguresParams, unit: str, sweeps: Sweeps, selected: Mapping[str, Any]) -> list[Figure]:
    """The figures of family ``unit``, at the learning rates its extract ``selected`` (``selected_lrs``)."""
    env = Env(family=unit, spec=cfg.restrict.get(unit, Restriction()), cfg=cfg, sweeps=sweeps, selected=selected)
    return drawer(unit)(env)


def render(ctx: Context, unit: str) -> Output:
    selected = ctx.read("extract", unit, "headline.json").get("selected_lrs", {})
    figs = render_family(ctx.cfg.figures, unit, from_reader(ctx.read), selected)
    ctx.log(f"{len(figs)} figures")
    return Output(figures=figs)
