"""extract@F<k>: the headline numbers of each figure family (spec §6), computed from the sweeps it reads
without drawing: one function per family, named as its drawing function in ``figures.py`` (families.py
names both). Each fills ``env.headline``; the extract publishes it as ``reports/metrics/
mupc_training_extract@F<k>.json``, which the claims read, and the render draws the lrs it selected.

Two aggregations live side by side. The figures' numbers (``notebook_*`` keys, and the keys the seed
figure's own curves define: ``best_final_acc``, ``final_acc_per_act_lr``, ``kappa_*``, the contours'
``contour_*``) are the notebook's, exactly as drawn. The verdict values of the comparisons (``final_acc``
of F16–F20) and of the transfer (``transfer_optimum``) are the verdict aggregation of ``notebook_stats.py``:
a diverged PC run counts as chance, every seed keeps its own final value (no truncation to the shortest
seed) and a failed seed is left out of a transfer cell instead of averaged in as 0.
"""

from __future__ import annotations

import numpy as np

from pipeline.studies.mupc.engine.runs import fmt_num
from pipeline.studies.mupc.training import notebook_stats as ag
from pipeline.studies.mupc.training.cells import (
    PC_FILL,
    Env,
    accs,
    bp_cell,
    by_seed,
    cell_h,
    choose,
    close,
    contour_arrays,
    contour_optimum,
    decay_matrix,
    decimal,
    kappa_ends,
    kappa_series,
    lr_finals,
    lr_groups,
    measured_flag,
    mupc_choice,
    mupc_kappa,
    mupc_kappa_runs,
    pick,
    seed_finals,
    sp_best_runs,
    sp_chosen,
    stats,
    sweep_runs,
    values,
    verdict_acc,
)
from pipeline.studies.mupc.training.sweep_reader import RenderError


def last(series: list[np.ndarray]) -> float | None:
    """The notebook's final mean: the last point of the curve truncated to the shortest seed."""
    m, _ = stats(series, None, 0.0)
    return float(m[-1]) if len(m) else None


# ----------------------------------------------------------------------------- SP families


def sweep_pick(env: Env, sweep: str, ds: str, act: str, H: int,
               groups: dict[tuple[float, float], list]) -> None:
    """Headline ``best_act_lr[<ds>/<act>/H=<h>]``: the activity lr with the best mean-over-seeds final test
    accuracy (an empty run counts as chance), the notebook's table value for the cell (None where table
    5.3 has none) and how many steps of the sweep's lr grid apart they are (spec §8.1: the pick should
    match the notebook's or sit next to it)."""
    scores = {a_lr: ag.final_acc_score(accs(env, sweep, runs), env.chance) for (_, a_lr), runs in groups.items()}
    grid = sorted(scores)
    best = max(grid, key=lambda a: (scores[a], a))
    table = getattr(env.cfg.best_lrs, sweep).get(ds, {}).get(act, {}).get(str(H))
    hit = [i for i, a in enumerate(grid) if close(a, table)] if table is not None else []
    finals = {decimal(a): scores[a] if np.isfinite(scores[a]) else None for a in grid}
    env.headline.setdefault("best_act_lr", {})[f"{ds}/{act}/H={H}"] = {
        "computed": best, "table": table, "grid": grid, "final_acc": finals,
        "steps": abs(grid.index(best) - hit[0]) if hit else None}


def render_sp(env: Env, sweep: str, sweep_fig: bool, best_fig: bool) -> None:
    """F7–F11: the lr sweep's pick per cell (``best_act_lr``) and, at the best lr per (ds, act, H), the final
    accuracy (verdict aggregation, :func:`~pipeline.studies.mupc.training.cells.verdict_acc`) and κ(H_z) at
    init and at the last reached row."""
    runs = sweep_runs(env, sweep)
    datasets = values(runs, "dataset")
    if sweep_fig:
        for ds in datasets:
            dr = pick(runs, dataset=ds)
            for act in values(dr, "act"):
                for H in values(dr, "H"):
                    cell = pick(dr, act=act, H=H)
                    if cell:
                        sweep_pick(env, sweep, ds, act, H, lr_groups(cell))
    if not best_fig:
        return
    best_final = env.headline.setdefault("best_final_acc", {})
    for ds in datasets:
        dr = pick(runs, dataset=ds)
        for act in values(dr, "act"):
            ar = pick(dr, act=act)
            for H in values(ar, "H"):
                _, chosen = sp_best_runs(env, sweep, ds, act, H, pick(ar, H=H))
                best_final[f"{ds}/{act}/H={H}"] = verdict_acc(env, sweep, chosen)
                if kappa_series(env, sweep, chosen, False) is not None:
                    kappa_ends(env, sweep, f"{ds}/{act}/H={H}", chosen)


# ----------------------------------------------------------------------------- μPC families


def mupc_cond(env: Env, sweep: str) -> None:
    """F12: κ(H_z) at init and at the last reached row per (ds, act, H), at the chosen lrs."""
    runs = sweep_runs(env, sweep)
    for ds in values(runs, "dataset"):
        dr = pick(runs, dataset=ds)
        for act in values(dr, "act"):
            ar = pick(dr, act=act)
            for H in values(ar, "H"):
                mupc_kappa(env, sweep, ds, act, H, pick(ar, H=H), False)  # an error where no Hessian was recorded
                kappa_ends(env, sweep, f"{ds}/{act}/H={H}", mupc_kappa_runs(env, sweep, ds, act, H, pick(ar, H=H)))


def mupc_lr_sweep(env: Env, sweep: str) -> None:
    """F13: at the selected param lr, the final accuracy of every activity lr per cell, as the verdicts
    aggregate it (:func:`~pipeline.studies.mupc.training.cells.verdict_acc`: a seed without evaluations is
    chance, an early-stopped one keeps its last value; no truncation to the shortest seed)."""
    runs = sweep_runs(env, sweep)
    band = env.headline.setdefault("final_acc_per_act_lr", {})
    for ds in values(runs, "dataset"):
        dr = pick(runs, dataset=ds)
        p_lrs = {act: mupc_choice(env, sweep, dr, act, "H")[0] for act in values(dr, "act")}
        for act in values(dr, "act"):
            for H in values(dr, "H"):
                cell = pick(dr, act=act, H=H, param_lr=p_lrs[act])
                for a_lr in values(cell, "act_lr", descending=True):
                    final = verdict_acc(env, sweep, pick(cell, act_lr=a_lr))
                    band.setdefault(f"{ds}/{act}/H={H}", {})[decimal(a_lr)] = final


def mupc_best(env: Env, sweep: str, over: str) -> None:
    """F14 (across N) / F15 (across H): μPC's final accuracy at the best lrs per act (verdict aggregation)."""
    runs = sweep_runs(env, sweep)
    sym = "N" if over == "N" else "H"
    best_final = env.headline.setdefault("best_final_acc", {})
    for ds in values(runs, "dataset"):
        dr = pick(runs, dataset=ds)
        for act in values(dr, "act"):
            p_lr, a_lr = mupc_choice(env, sweep, dr, act, over)
            for v in values(pick(dr, act=act), over):
                chosen = pick(dr, act=act, param_lr=p_lr, act_lr=a_lr, **{over: v})
                best_final[f"{ds}/{act}/{sym}={v}"] = verdict_acc(env, sweep, chosen)


def mupc_long(env: Env, sweep: str, fill_empty: bool, seed_file: str) -> None:
    """F16 / F17: the deepest μPC net's final accuracy: ``final_acc`` per seed (verdicts), the drawn
    curve's last point under ``notebook_final_acc``."""
    runs = sweep_runs(env, sweep)
    ds = runs[0].dataset
    p_lr, a_lr = choose(env, sweep, [runs], None, f"{sweep}/{ds}")
    chosen = pick(runs, param_lr=p_lr, act_lr=a_lr)
    rc = chosen[0]
    key = f"{ds}/H={rc.H}/{rc.epochs}_epochs"
    fill = ag.fill_empty if fill_empty else None
    env.headline.setdefault("final_acc", {})[key] = verdict_acc(env, sweep, chosen)
    env.headline.setdefault("final_acc_per_seed", {})[key] = seed_finals(env, sweep, chosen)
    env.headline.setdefault("notebook_final_acc", {})[key] = last(accs(env, sweep, chosen, fill))


# ----------------------------------------------------------------------------- comparisons


def sp_baseline(env: Env, sweep: str) -> None:
    """F20: per (act, H) the drawn mean curve (notebook), the lrs, and ``final``: the verdict accuracy (a
    diverged seed counts as chance; a chance cell is chance, and ``pc_measured`` is then absent)."""
    runs = sweep_runs(env, sweep)
    means = env.headline.setdefault("final_acc", {})
    seeds = values(runs, "seed")
    for act in values(runs, "act"):
        ar = pick(runs, act=act)
        for H in sorted(set(values(ar, "H")) | set(env.cfg.chance_cells.get(act, []))):
            chosen, how = sp_chosen(env, sweep, ar, act, H)
            series = [ag.chance_curve(3, env.chance) for _ in seeds] if chosen is None else accs(env, sweep, chosen)
            m, _ = stats(series, None, env.chance)
            means[f"{act}/H={H}"] = {"mean_test_accs": [float(v) for v in m], "lrs": how,
                                     "final": env.chance if chosen is None else verdict_acc(env, sweep, chosen)}
    measured_flag(env)


def mupc_vs_pc(env: Env, mupc: str, pc: str, bp: str) -> None:
    """F18: per (act, H) μPC's and PC's final accuracy (BP at the deepest H): ``final_acc`` the verdict
    aggregation (a PC run that diverged before its first test is chance, not None), ``notebook_final_acc``
    the drawn curves' last points."""
    mu_runs, pc_runs = sweep_runs(env, mupc), sweep_runs(env, pc)
    head = env.headline.setdefault("final_acc", {})
    drawn = env.headline.setdefault("notebook_final_acc", {})
    for act in values(mu_runs, "act"):
        ds = mu_runs[0].dataset
        p_lr, a_lr = mupc_choice(env, mupc, mu_runs, act, "H")
        hs = values(pick(mu_runs, act=act), "H")
        for H in hs:
            chosen = pick(mu_runs, act=act, H=H, param_lr=p_lr, act_lr=a_lr)
            seeds = [rc.seed for rc in by_seed(chosen)]
            pc_chosen, how = sp_chosen(env, pc, pick(pc_runs, act=act), act, H)
            pc_series = ([ag.chance_curve(3, env.chance) for _ in seeds] if pc_chosen is None
                         else accs(env, pc, pc_chosen))
            key = f"{act}/H={H}"
            head[key] = {"mupc": verdict_acc(env, mupc, chosen),
                         "pc": env.chance if pc_chosen is None else verdict_acc(env, pc, pc_chosen), "pc_lrs": how}
            drawn[key] = {"mupc": last(accs(env, mupc, chosen)), "pc": last(pc_series)}
            if hs[-1] == H:
                bp_runs, _ = bp_cell(env, bp, ds, act, H, chosen[0].epochs)
                head[key]["bp"] = verdict_acc(env, bp, bp_runs)
                drawn[key]["bp"] = last(accs(env, bp, bp_runs))
    measured_flag(env)


def deep_comparison(env: Env, mupc: tuple[str, ...], bp: str) -> None:
    """F19: per dataset, the deepest net's final accuracy of BP, μPC and the PC fill (chance): ``final_acc``
    per seed then the mean (an early-stopped seed keeps its last value), ``notebook_final_acc`` as drawn."""
    head = env.headline.setdefault("final_acc", {})
    drawn = env.headline.setdefault("notebook_final_acc", {})
    for sweep in mupc:
        runs = sweep_runs(env, sweep)
        p_lr, a_lr = choose(env, sweep, [runs], None, f"{sweep}/{runs[0].dataset}")
        chosen = by_seed(pick(runs, param_lr=p_lr, act_lr=a_lr))[: env.cfg.max_seeds_128]
        rc = chosen[0]
        bp_all, _ = bp_cell(env, bp, rc.dataset, rc.act, rc.H, rc.epochs)
        seeds = [r.seed for r in chosen]
        bp_runs = [r for r in bp_all if r.seed in seeds]
        if len(bp_runs) != len(chosen):
            raise RenderError(f"{env.family}: {bp} lacks seeds {seeds} for {rc.dataset}/H={rc.H}/{rc.epochs} epochs")
        bp_acc = accs(env, bp, bp_runs)
        key = f"{rc.dataset}/H={rc.H}/{rc.epochs}_epochs"
        head[key] = {"BP": verdict_acc(env, bp, bp_runs), PC_FILL: env.chance, "μPC": verdict_acc(env, sweep, chosen)}
        drawn[key] = {"BP": last(bp_acc), PC_FILL: last([ag.pc_chance_like(a, env.chance) for a in bp_acc]),
                      "μPC": last(accs(env, sweep, chosen))}


def bp_sweep(env: Env, sweep: str) -> None:
    """F21: per (ds, epochs, act) the best over the lrs of the mean over seeds of each seed's final accuracy
    (:func:`~pipeline.studies.mupc.training.notebook_stats.seed_final`: no truncation to the shortest seed; a seed
    with at most one evaluation counts as chance, as the notebook draws it)."""
    runs = sweep_runs(env, sweep)
    best = env.headline.setdefault("best_final_acc", {})
    for ds, epochs in sorted({(rc.dataset, rc.epochs) for rc in runs}):
        vr = pick(runs, dataset=ds, epochs=epochs)
        for act in values(vr, "act"):
            cell = pick(vr, act=act)
            for lr in values(cell, "param_lr", descending=True):
                final = ag.mean_final([ag.seed_final(a, env.chance)
                                       for a in accs(env, sweep, pick(cell, param_lr=lr), ag.fill_bp_short)])
                if final is not None:
                    key = f"{ds}/{epochs}ep/{act}/H={cell_h(cell)}"
                    best[key] = max(best.get(key, -np.inf), final)


def activity_decay(env: Env, sweep: str) -> None:
    """F22: per activity lr, the mean over seeds of the max test accuracy per decay."""
    runs = sweep_runs(env, sweep)
    decays = values(runs, "activity_decay", descending=True)
    seeds = values(runs, "seed")
    head = env.headline.setdefault("max_test_acc_per_decay", {})
    grid = env.headline.setdefault("max_test_acc_by_decay", {})  # the same cells keyed act_lr=<a>/decay=<c>
    for a_lr in values(runs, "act_lr", descending=True):
        m, _ = ag.decay_stats(decay_matrix(env, sweep, runs, a_lr, decays, seeds))
        head[f"act_lr={fmt_num(a_lr)}"] = {fmt_num(d): float(v) for d, v in zip(decays, m)}
        grid.update({f"act_lr={decimal(a_lr)}/decay={decimal(d)}": float(v) for d, v in zip(decays, m)})


def pc_any_lr(env: Env, sweep: str) -> None:
    """F28 (the project's addition): per (dataset, act, H) the final accuracy of standard PC at every (param lr,
    activity lr) of the grid, ``final_acc_per_lr[<ds>/<act>/H=<h>][p=<param lr>/a=<act lr>]``, as the verdicts
    aggregate it (:func:`~pipeline.studies.mupc.training.cells.verdict_acc`: a run that diverges before its first
    test counts as chance, each seed keeps its own final value), and the best of them, ``best_final_acc``, with
    its lrs under ``best_lrs`` (the cell the figure stars: of equal cells, the smallest lrs)."""
    runs = sweep_runs(env, sweep)
    per_lr = env.headline.setdefault("final_acc_per_lr", {})
    best = env.headline.setdefault("best_final_acc", {})
    best_lrs = env.headline.setdefault("best_lrs", {})
    for ds in values(runs, "dataset"):
        dr = pick(runs, dataset=ds)
        for act in values(dr, "act"):
            for H in values(pick(dr, act=act), "H"):
                key = f"{ds}/{act}/H={H}"
                p_lrs, a_lrs, z = lr_finals(env, sweep, pick(dr, act=act, H=H))
                per_lr[key] = {f"p={decimal(p)}/a={decimal(a)}": float(z[i, j]) for i, p in enumerate(p_lrs)
                               for j, a in enumerate(a_lrs) if np.isfinite(z[i, j])}
                with np.errstate(divide="ignore", invalid="ignore"):
                    opt = contour_optimum(p_lrs, a_lrs, np.log10(z), "max")  # the cell the figure stars
                if opt is not None:
                    a_best, p_best, _ = opt
                    best[key] = per_lr[key][f"p={decimal(p_best)}/a={decimal(a_best)}"]
                    best_lrs[key] = {"param_lr": p_best, "act_lr": a_best}


# ----------------------------------------------------------------------------- contours


def transfer_contours(env: Env, sweep: str, over: str | None) -> None:
    """F23–F25: per panel the optimum the figure marks and its value (``contour_optimum``/``contour_best``,
    notebook and clean aggregation), the grid, and ``transfer_optimum``: the min-train-loss optimum with
    failed seeds left out of each cell (verdicts), with the notebook's μPC lrs for the dataset."""
    runs = sweep_runs(env, sweep)
    head = env.headline.setdefault("contour_optimum", {})
    best_value = env.headline.setdefault("contour_best", {})
    ds = runs[0].dataset
    env.headline["contour_grid"] = {"dataset": ds, "N": values(runs, "N"), "H": values(runs, "H"),
                                    "act_lr": values(runs, "act_lr"), "param_lr": values(runs, "param_lr")}
    rows = [("loss", "min")] + ([("acc", "max")] if over is None else [])
    ivs = values(runs, over) if over else [None]
    for clean in [False, True] if env.cfg.clean_variants else [False]:
        for act in values(runs, "act"):
            for v in ivs:
                sub = pick(runs, act=act, **({over: v} if over else {}))
                p_lrs, a_lrs, loss, acc = contour_arrays(env, sweep, sub, clean)
                for what, best in rows:
                    cells = loss if what == "loss" else acc
                    z = ag.contour_log10_clean(cells) if clean else ag.log10_notebook(ag.contour_mean(cells))
                    opt = contour_optimum(p_lrs, a_lrs, z, best)
                    key = f"{'clean' if clean else 'notebook'}/{act}/{what}" + (f"/{over}={v}" if over else "")
                    head[key] = None if opt is None else {"act_lr": opt[0], "param_lr": opt[1]}
                    best_value[key] = None if opt is None else opt[2]
    verdict = env.headline.setdefault("transfer_optimum", {})
    for act in values(runs, "act"):
        for v in ivs:
            sub = pick(runs, act=act, **({over: v} if over else {}))
            p_lrs, a_lrs, loss = transfer_losses(env, sweep, sub)
            with np.errstate(divide="ignore", invalid="ignore"):
                z = np.log10(ag.contour_mean_excluding(loss))
            opt = contour_optimum(p_lrs, a_lrs, z, "min")
            verdict[f"{act}" + (f"/{over}={v}" if over else "")] = (
                None if opt is None else {"act_lr": opt[0], "param_lr": opt[1]})
    b = env.cfg.best_lrs.mupc
    env.headline["notebook_lrs"] = {act: {"act_lr": b.act_lr[act], "param_lr": b.param_lr[ds]}
                                    for act in values(runs, "act") if act in b.act_lr and ds in b.param_lr}


def transfer_losses(env: Env, sweep: str, runs: list) -> tuple[list[float], list[float], np.ndarray]:
    """[param lr, act lr, seed] min train loss per seed, NaN for a failed seed (empty or non-finite)."""
    p_lrs, a_lrs, seeds = (values(runs, "param_lr", descending=True), values(runs, "act_lr", descending=True),
                           values(runs, "seed"))
    loss = np.full((len(p_lrs), len(a_lrs), len(seeds)), np.nan)
    for i, p in enumerate(p_lrs):
        for j, a in enumerate(a_lrs):
            for k, sd in enumerate(seeds):
                for rc in pick(runs, param_lr=p, act_lr=a, seed=sd):
                    loss[i, j, k] = ag.contour_cell_excluding(env.sweeps.series(sweep, rc, "batch_train_losses"),
                                                              env.sweeps.series(sweep, rc, "test_accs"))[0]
    return p_lrs, a_lrs, loss


# ----------------------------------------------------------------------------- study-level names (derived)


def steps_apart(grid: list[float], a: float, b: float) -> int | None:
    """How many steps of the (sorted) lr ``grid`` separate ``a`` and ``b``; None when either is off it."""
    ia = [i for i, g in enumerate(grid) if close(g, a)]
    ib = [i for i, g in enumerate(grid) if close(g, b)]
    return abs(ia[0] - ib[0]) if ia and ib else None


def transfer(headline: dict) -> dict:
    """Per activation, the verdict optima (``transfer_optimum``) across the swept N or H: the optima, the
    distinct (act lr, param lr) pairs, ``span``: how many grid steps the optima spread over on each lr axis
    (0: one optimum, 1: neighbouring lrs), and ``from_notebook``: the most grid steps any optimum sits from
    the notebook's lrs on each axis (None where the grid lacks the notebook's value)."""
    grid = headline.get("contour_grid", {})
    axes = {k: sorted(grid.get(k) or []) for k in ("act_lr", "param_lr")}
    notebook = headline.get("notebook_lrs", {})
    out: dict[str, dict] = {}
    for key, opt in sorted(headline.get("transfer_optimum", {}).items()):
        if opt is None:
            continue
        act, _, where = key.partition("/")
        rec = out.setdefault(act, {"optima": {}, "distinct": []})
        rec["optima"][where or "all"] = opt
        pair = [opt["act_lr"], opt["param_lr"]]
        if pair not in rec["distinct"]:
            rec["distinct"].append(pair)
    for act, rec in out.items():
        opts = list(rec["optima"].values())
        rec["span"] = {k: max(steps_apart(axes[k], o[k], p[k]) or 0 for o in opts for p in opts) for k in axes}
        nb = notebook.get(act)
        rec["notebook"] = nb
        if nb is None:
            rec["from_notebook"] = None
            continue
        far = {k: [steps_apart(axes[k], o[k], nb[k]) for o in opts] for k in axes}
        rec["from_notebook"] = {k: None if None in d else max(d) for k, d in far.items()}
    return out


def best_final_acc(headline: dict) -> dict:
    return headline.get("best_final_acc", {})


def final_acc(headline: dict) -> dict:
    return headline.get("final_acc", {})
