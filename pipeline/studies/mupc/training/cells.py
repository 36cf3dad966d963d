"""The cell helpers the extract (headlines.py) and the render (figures.py) share: which runs of a sweep a
cell holds, their series, the learning rates chosen for a cell, and the notebook's statistics over seeds.
No plotting here, so the extract stage loads no matplotlib.

A choice of learning rates is made once, by the extract (``choose`` records it under ``selected_lrs``); the
render is given that record (``Env.selected``) and draws the runs it names, so a figure never decides
anything its metrics did not.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline.studies.mupc.engine.runs import RunConfig
from pipeline.studies.mupc.training import notebook_stats as ag
from pipeline.studies.mupc.training.config import FiguresParams, Restriction
from pipeline.studies.mupc.training.sweep_reader import RenderError, Sweeps

DS_NAME = {"mnist": "MNIST", "fashion_mnist": "Fashion-MNIST"}


@dataclass
class Env:
    """One family's view of its sweeps. ``headline``: the numbers the extract publishes; ``selected``: the
    extract's ``selected_lrs`` record when the render draws (None: choose, and record the choice)."""

    family: str
    spec: Restriction
    cfg: FiguresParams
    sweeps: Sweeps
    headline: dict[str, Any] = field(default_factory=dict)
    selected: Mapping[str, Any] | None = None

    @property
    def chance(self) -> float:
        return self.cfg.chance


# ----------------------------------------------------------------------------- grid helpers


def close(a: float, b: float) -> bool:
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)


def pick(runs: Iterable[RunConfig], **fields: Any) -> list[RunConfig]:
    out = []
    for rc in runs:
        ok = True
        for k, v in fields.items():
            got = getattr(rc, k)
            ok &= close(got, v) if isinstance(v, float) else got == v
        if ok:
            out.append(rc)
    return out


def values(runs: Iterable[RunConfig], name: str, descending: bool = False) -> list[Any]:
    return sorted({getattr(rc, name) for rc in runs}, reverse=descending)


#: the notebook's order of activations in every figure (``act_fns = ["linear", "tanh", "relu"]``)
ACT_ORDER = ("linear", "tanh", "relu")


def act_order(runs: Iterable[RunConfig]) -> list[str]:
    """The activations of ``runs`` in the notebook's order (panel rows and columns follow it; an activation
    the notebook lacks comes after, alphabetically)."""
    rank = {a: i for i, a in enumerate(ACT_ORDER)}
    return sorted({rc.act for rc in runs}, key=lambda a: (rank.get(a, len(rank)), a))


def by_seed(runs: Sequence[RunConfig]) -> list[RunConfig]:
    return sorted(runs, key=lambda rc: rc.seed)


def restrict(env: Env, runs: list[RunConfig]) -> list[RunConfig]:
    if env.spec.datasets is not None:
        runs = [rc for rc in runs if rc.dataset in env.spec.datasets]
    if env.spec.acts is not None:
        runs = [rc for rc in runs if rc.act in env.spec.acts]
    return runs


def sweep_runs(env: Env, sweep: str) -> list[RunConfig]:
    runs = restrict(env, env.sweeps.runs(sweep))
    if not runs:
        raise RenderError(f"{env.family}: sweep {sweep} has no runs for the datasets/acts drawn "
                          f"(mupc_training.figures.restrict.{env.family})")
    return runs


def accs(env: Env, sweep: str, runs: Sequence[RunConfig], fill: Callable | None = None) -> list[np.ndarray]:
    out = []
    for rc in by_seed(runs):
        a = env.sweeps.series(sweep, rc, "test_accs")
        out.append(fill(a, env.chance) if fill else a)
    return out


def expected_len(env: Env, sweep: str, rc: RunConfig, name: str = "test_accs") -> int:
    """Expected series length: the longest run of the sweep with the same schedule (a finished
    run records every evaluation)."""
    same = pick(env.sweeps.runs(sweep), dataset=rc.dataset, epochs=rc.epochs, test_every=rc.test_every,
                method=rc.method)
    return max(len(env.sweeps.series(sweep, r, name)) for r in same)


def lr_groups(runs: Sequence[RunConfig]) -> dict[tuple[float, float], list[RunConfig]]:
    groups: dict[tuple[float, float], list[RunConfig]] = {}
    for rc in sorted(runs, key=lambda r: (-r.param_lr, -r.act_lr, r.seed)):
        groups.setdefault((rc.param_lr, rc.act_lr), []).append(rc)
    return groups




def choose(env: Env, sweep: str, cells: list[list[RunConfig]], table: tuple[float, float] | None,
           what: str) -> tuple[float, float]:
    """Best (param lr, act lr) shared by ``cells`` (lists of runs over lrs × seeds).

    One combination in the grid → that one. ``selection: table`` → the notebook's value (an
    error if the grid lacks it). ``selection: computed`` → the best mean (over cells) of the
    mean-over-seeds final test accuracy (empty run = chance); ties → the larger lrs. The render
    (``env.selected`` set) takes the extract's record instead of choosing again."""
    combos = [set(lr_groups(c)) for c in cells]
    common = sorted(set.intersection(*combos), key=lambda t: (-t[0], -t[1])) if combos else []
    if not common:
        raise RenderError(f"{env.family}: no learning-rate pair common to all cells of {what} in {sweep}")
    if env.selected is not None:
        return chosen(env, sweep, common, what)
    rec = env.headline.setdefault("selected_lrs", {})
    if len(common) == 1:
        choice = common[0]
        rec[what] = {"param_lr": choice[0], "act_lr": choice[1], "rule": "only pair in grid"}
        return choice
    if env.cfg.selection == "table":
        if table is None:
            raise RenderError(f"{env.family}: no table lr for {what} (mupc_training.figures.best_lrs)")
        hits = [c for c in common if close(c[0], table[0]) and close(c[1], table[1])]
        if not hits:
            raise RenderError(
                f"{env.family}: table lr (param {table[0]}, act {table[1]}) for {what} is not in the "
                f"{sweep} grid {common}; use selection: computed for this profile")
        rec[what] = {"param_lr": table[0], "act_lr": table[1], "rule": "table"}
        return hits[0]
    scores = {}
    for c in common:
        per_cell = [ag.final_acc_score(accs(env, sweep, lr_groups(cell)[c]), env.chance) for cell in cells]
        scores[c] = float(np.mean(per_cell))
    choice = max(common, key=lambda c: scores[c])  # first max in (desc param, desc act) order
    rec[what] = {"param_lr": choice[0], "act_lr": choice[1], "rule": "computed",
                 "score_final_acc": scores[choice],
                 "table": None if table is None else {"param_lr": table[0], "act_lr": table[1]}}
    return choice


def chosen(env: Env, sweep: str, common: list[tuple[float, float]], what: str) -> tuple[float, float]:
    """The pair the extract selected for ``what`` (its ``selected_lrs`` record), as it stands in the grid."""
    assert env.selected is not None
    rec = env.selected.get(what)
    if rec is None:
        raise RenderError(f"{env.family}: the extract selected no lrs for {what}; rerun its extract stage")
    hits = [c for c in common if close(c[0], rec["param_lr"]) and close(c[1], rec["act_lr"])]
    if not hits:
        raise RenderError(f"{env.family}: the extract's lrs for {what} ({rec}) are not in the {sweep} grid {common}")
    return hits[0]


def stats(series: list[np.ndarray], clean_n: int | None, chance: float) -> tuple[np.ndarray, np.ndarray]:
    if clean_n is None:
        return ag.compute_metric_stats(series)
    return ag.compute_metric_stats_clean(series, clean_n, chance)


def variants(env: Env) -> list[bool]:
    return [False, True] if env.cfg.clean_variants else [False]


def suffix(clean: bool) -> str:
    return "_clean" if clean else ""



def per_dataset(env: Env, runs: list[RunConfig]) -> Iterator[tuple[bool, str, list[RunConfig]]]:
    """(clean, dataset, its runs) for each variant drawn (plain, then clean) and each dataset of ``runs``: one
    figure each."""
    for clean in variants(env):
        for ds in values(runs, "dataset"):
            yield clean, ds, pick(runs, dataset=ds)


def cell_width(runs: Sequence[RunConfig]) -> str:
    return ",".join(str(n) for n in values(runs, "N"))


def sp_table(env: Env, sweep: str, ds: str, act: str, H: int, param_lr: float) -> tuple[float, float] | None:
    table = getattr(env.cfg.best_lrs, sweep)
    lr = table.get(ds, {}).get(act, {}).get(str(H))
    return None if lr is None else (param_lr, lr)



def kappa_series(env: Env, sweep: str, runs: Sequence[RunConfig], clean: bool
                 ) -> tuple[np.ndarray, np.ndarray] | None:
    """κ per row over seeds: the notebook's fixed-length arrays (unreached rows NaN); the clean
    variant averages only the rows each seed reached (nanmean)."""
    have = [rc for rc in runs if len(env.sweeps.series(sweep, rc, "lambda_min"))]
    if not have:
        return None
    n_rows = expected_len(env, sweep, runs[0], "lambda_min")
    mats = [ag.cond_nums_notebook(env.sweeps.series(sweep, rc, "lambda_min"),
                                  env.sweeps.series(sweep, rc, "lambda_max"), n_rows) for rc in by_seed(runs)]
    if not clean:
        return ag.compute_metric_stats(mats)
    mat = np.stack(mats)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(mat, axis=0), np.nanstd(mat, axis=0)


def sp_best_runs(env: Env, sweep: str, ds: str, act: str, H: int, cell: list[RunConfig]
                 ) -> tuple[float, list[RunConfig]]:
    """An SP cell at its chosen lrs (the notebook's table where it has the cell): the activity lr and one run
    per seed, what F8–F11 draw and their extract measures."""
    p_lr, a_lr = choose(env, sweep, [cell], sp_table(env, sweep, ds, act, H, cell[0].param_lr), f"{ds}/{act}/H={H}")
    return a_lr, by_seed(pick(cell, param_lr=p_lr, act_lr=a_lr))


def mupc_kappa_runs(env: Env, sweep: str, ds: str, act: str, H: int, cell: list[RunConfig]) -> list[RunConfig]:
    """F12's runs of a μPC cell: its seeds at the chosen lrs (the notebook's μPC lrs as the table)."""
    b = env.cfg.best_lrs.mupc
    p_lr, a_lr = choose(env, sweep, [cell], (b.param_lr.get(ds, 0.1), 0.5), f"{ds}/{act}/H={H}")
    return pick(cell, param_lr=p_lr, act_lr=a_lr)


def mupc_kappa(env: Env, sweep: str, ds: str, act: str, H: int, cell: list[RunConfig], clean: bool
               ) -> tuple[np.ndarray, np.ndarray]:
    """F12: κ(H_z) of a μPC cell at its chosen lrs (the notebook's μPC lrs as the table), mean and std per row;
    a cell with no Hessian record is an error."""
    kap = kappa_series(env, sweep, mupc_kappa_runs(env, sweep, ds, act, H, cell), clean)
    if kap is None:
        raise RenderError(f"{env.family}: {sweep} runs of {ds}/{act}/H={H} hold no Hessian record")
    return kap


def kappa_ends(env: Env, sweep: str, cell: str, runs: Sequence[RunConfig]) -> None:
    """Headline κ(H_z) of a cell for the verdicts: the mean over seeds of each seed's κ at initialisation (row 0)
    and at the last row it reached (no truncation to the shortest seed: a seed stopped early keeps its last κ,
    where the notebook's mean would end at the stopped seed's first rows); None where no seed has a row."""
    firsts, lasts = [], []
    for rc in by_seed(runs):
        lo, hi = env.sweeps.series(sweep, rc, "lambda_min"), env.sweeps.series(sweep, rc, "lambda_max")
        kap = np.array([ag.compute_cond_num([a, b]) for a, b in zip(lo, hi)], dtype=float)
        finite = kap[np.isfinite(kap)]
        if len(kap) and np.isfinite(kap[0]):
            firsts.append(float(kap[0]))
        if len(finite):
            lasts.append(float(finite[-1]))
    env.headline.setdefault("kappa_init", {})[cell] = float(np.mean(firsts)) if firsts else None
    env.headline.setdefault("kappa_final", {})[cell] = float(np.mean(lasts)) if lasts else None


def mupc_choice(env: Env, sweep: str, runs: list[RunConfig], act: str, over: str) -> tuple[float, float]:
    """μPC best (param lr, act lr) for ``act``, shared by every N or H of the sweep (transfer)."""
    ar = pick(runs, act=act)
    ds = ar[0].dataset
    cells = [pick(ar, **{over: v}) for v in values(ar, over)]
    b = env.cfg.best_lrs.mupc
    table = (b.param_lr[ds], b.act_lr[act]) if ds in b.param_lr and act in b.act_lr else None
    return choose(env, sweep, cells, table, f"{sweep}/{ds}/{act} (all {over})")



def sp_chosen(env: Env, sweep: str, runs: list[RunConfig], act: str, H: int) -> tuple[list[RunConfig] | None, str]:
    """The SP baseline runs of one (act, H) at its lrs, and how they were chosen: cells listed in
    ``chance_cells`` → None, not loaded (the notebook's fill, recorded under ``pc_not_measured``); every
    other cell is trained."""
    if ag.is_chance_cell(act, H, env.cfg.chance_cells):
        unmeasured = env.headline.setdefault("pc_not_measured", [])
        if f"{act}/H={H}" not in unmeasured:
            unmeasured.append(f"{act}/H={H}")
        return None, NOT_MEASURED
    cell = pick(runs, act=act, H=H)
    if not cell:
        raise RenderError(f"{env.family}: {sweep} has no run for act={act}, H={H}; list it under "
                          f"mupc_training.figures.chance_cells if it is drawn as chance")
    pair = env.cfg.best_lrs.S12.get(act, {}).get(str(H))
    p_lr, a_lr = choose(env, sweep, [cell], None if pair is None else (pair[0], pair[1]), f"{sweep}/{act}/H={H}")
    return pick(cell, param_lr=p_lr, act_lr=a_lr), f"param lr {p_lr:g}, act lr {a_lr:g}"


def sp_cell(env: Env, sweep: str, runs: list[RunConfig], act: str, H: int, seeds: Sequence[int],
            ) -> tuple[list[np.ndarray], str]:
    """SP baseline test accuracies of one (act, H) (:func:`sp_chosen`): a chance cell → [chance]*3 per seed."""
    chosen_runs, how = sp_chosen(env, sweep, runs, act, H)
    if chosen_runs is None:
        return [ag.chance_curve(3, env.chance) for _ in seeds], how
    return accs(env, sweep, chosen_runs), how


def seed_finals(env: Env, sweep: str, runs: Sequence[RunConfig]) -> list[float]:
    """Each seed's final test accuracy for the verdicts (:func:`aggregate.seed_final`: a run without
    evaluations counts as chance, an early-stopped one keeps its last evaluation), by seed."""
    return [ag.seed_final(env.sweeps.series(sweep, rc, "test_accs"), env.chance) for rc in by_seed(runs)]


def verdict_acc(env: Env, sweep: str, runs: Sequence[RunConfig]) -> float | None:
    """The final accuracy of a cell the claims read: the mean over seeds of :func:`seed_finals` (no
    truncation to the shortest seed); None only for a cell without runs."""
    return ag.mean_final(seed_finals(env, sweep, runs))


NOT_MEASURED = "not measured: the notebook's 10 % fill"
PC_FILL = "PC (not measured: 10 % fill)"



def measured_flag(env: Env) -> None:
    """``pc_measured`` (published only when no SP cell was filled): claims on the PC cells read it, so a
    profile that draws the notebook's fill shows them as not measured instead of checking 10 %."""
    env.headline.setdefault("pc_not_measured", [])
    if not env.headline["pc_not_measured"]:
        env.headline["pc_measured"] = True



def bp_lr(env: Env, ds: str, epochs: int, act: str) -> float | None:
    return env.cfg.best_lrs.bp.get(ds, {}).get(str(epochs), {}).get(act)


def bp_cell(env: Env, sweep: str, ds: str, act: str, H: int, epochs: int) -> tuple[list[RunConfig], float]:
    cell = pick(env.sweeps.runs(sweep), method="bp", dataset=ds, act=act, H=H, epochs=epochs)
    if not cell:
        raise RenderError(f"{env.family}: {sweep} has no BP run for {ds}, {act}, H={H}, {epochs} epochs")
    lr = bp_lr(env, ds, epochs, act)
    p_lr, a_lr = choose(env, sweep, [cell], None if lr is None else (lr, cell[0].act_lr),
                        f"{sweep}/{ds}/{act}/H={H}/{epochs}ep")
    return by_seed(pick(cell, param_lr=p_lr)), p_lr



def cell_h(runs: Sequence[RunConfig]) -> str:
    return ",".join(str(h) for h in values(runs, "H"))


def decimal(v: float) -> str:
    """Plain decimal text (0.0001, never 1e-04), so a key's coordinates parse as numbers."""
    return np.format_float_positional(float(v), trim="-")



def contour_arrays(env: Env, sweep: str, runs: list[RunConfig], clean: bool
                   ) -> tuple[list[float], list[float], np.ndarray, np.ndarray]:
    """[param lr, act lr, seed] arrays of min train loss and max test acc (notebook or clean cells)."""
    p_lrs = values(runs, "param_lr", descending=True)
    a_lrs = values(runs, "act_lr", descending=True)
    seeds = values(runs, "seed")
    loss = np.zeros((len(p_lrs), len(a_lrs), len(seeds)))
    acc = np.zeros_like(loss)
    cell_fn = ag.contour_cell_clean if clean else ag.contour_cell
    for i, p in enumerate(p_lrs):
        for j, a in enumerate(a_lrs):
            for k, sd in enumerate(seeds):
                rc = pick(runs, param_lr=p, act_lr=a, seed=sd)
                if len(rc) != 1:
                    raise RenderError(f"{env.family}: {sweep} needs one run per (param lr {p}, act lr {a}, "
                                      f"seed {sd}); got {len(rc)}")
                loss[i, j, k], acc[i, j, k] = cell_fn(env.sweeps.series(sweep, rc[0], "batch_train_losses"),
                                                      env.sweeps.series(sweep, rc[0], "test_accs"))
    return p_lrs, a_lrs, loss, acc



def lr_finals(env: Env, sweep: str, runs: list[RunConfig]) -> tuple[list[float], list[float], np.ndarray]:
    """F28: the final accuracy of every (param lr, activity lr) of ``runs`` (one cell: a dataset, act and H) as
    the verdicts aggregate it (:func:`verdict_acc`: a run without evaluations counts as chance), an array
    [param lr desc, act lr desc] with NaN where the grid holds no run; the extract and the render read the
    same array."""
    p_lrs = values(runs, "param_lr", descending=True)
    a_lrs = values(runs, "act_lr", descending=True)
    z = np.full((len(p_lrs), len(a_lrs)), np.nan)
    for i, p in enumerate(p_lrs):
        for j, a in enumerate(a_lrs):
            v = verdict_acc(env, sweep, pick(runs, param_lr=p, act_lr=a))
            if v is not None:
                z[i, j] = v
    return p_lrs, a_lrs, z


def contour_optimum(p_lrs: Sequence[float], a_lrs: Sequence[float], z: np.ndarray, best: str
                    ) -> tuple[float, float, float] | None:
    """The optimum of a contour panel ``z`` [param lr desc, act lr desc] as the render marks it (the first
    best cell in ascending lr order): (act lr, param lr, 10^z there), or None when no cell is finite."""
    pa, aa = np.asarray(p_lrs)[::-1], np.asarray(a_lrs)[::-1]
    zz = np.asarray(z, dtype=float)[::-1, ::-1]
    idx = ag.argbest(zz, best)
    if idx is None:
        return None
    return float(aa[idx[1]]), float(pa[idx[0]]), float(10 ** zz[idx])


def decay_matrix(env: Env, sweep: str, runs: Sequence[RunConfig], act_lr: float, decays: Sequence[float],
                 seeds: Sequence[int]) -> np.ndarray:
    """F22: each seed's max test accuracy per activity decay at ``act_lr`` ([seed, decay]); the extract and
    the render read the same matrix."""
    mat = np.zeros((len(seeds), len(decays)))
    for i, dec in enumerate(decays):
        for k, sd in enumerate(seeds):
            one = pick(runs, act_lr=act_lr, activity_decay=dec, seed=sd)
            if len(one) != 1:
                raise RenderError(f"F22: S5 needs one run per (act lr, decay, seed); got {len(one)}")
            mat[k, i] = ag.max_acc_per_seed(env.sweeps.series(sweep, one[0], "test_accs"), env.chance)
    return mat
