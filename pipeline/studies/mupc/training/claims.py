"""mupc_training's claims (F7–F25 and F28; paper Figs. 1, 3, 5 and spec §8.3): standard PC loses accuracy
and conditioning with depth and activity decay does not rescue it, no learning rate trains it at the
deepest depth, μPC trains at every depth and width where PC stays at chance, and μPC's best learning
rates transfer across width and depth and from MNIST to Fashion-MNIST, whose optimum the lr grid
brackets.

The accuracies read are means over seeds of the selected learning rates, never single runs: PC
inference with Adam from the feed-forward start is ill-conditioned (hidden errors are exactly
zero there), so one run can move by percents under a 1e-15 perturbation (mupc README).

Every number read is published by the family's extract (``mupc_training_extract@F<k>``, headlines.py), never
by its render. The comparisons' final accuracies are the verdict aggregation of ``notebook_stats.py``: each seed
keeps its own final value (a diverged run or one without evaluations counts as chance), then the mean over
seeds; the transfer optima leave failed seeds out of a cell instead of averaging their 0 in.
"""

import re
from collections.abc import Mapping
from functools import partial
from typing import Any

from pipeline.checks import (
    at_least,
    at_most,
    cellwise,
    coordinates,
    each,
    exceeds,
    number,
    trend,
)
from pipeline.contract import FINDING, SANITY, Claim

TINY = ("smoke trains 32 iterations of width-16 nets on 2,048 images: accuracies sit near chance "
        "and their order across depth is noise")
# "Trains": 10 points above chance (10 %). Kept only where the spec gives no level: F13's band of activity
# lrs (spec §8.1 reads the paper's levels off its final, best-lr curves, not off the lrs around the best).
TRAINS = 20.0
# F9–F11's κ over training: spec §8.3 calls its trends statistical (seeds differ from the reference); two thirds
# of the cells, where F8's claim asks every cell
KAPPA_RISE_SHARE = 2 / 3
# The paper's levels, spec §8.1 [UNCERTAIN: read off the axis ticks, MNIST 10/55/100 and F-MNIST 10/50/90, of
# Figs. 1 and A.16–A.18, not printed]: ≈ 90 %+ on MNIST and the high 80s on Fashion-MNIST for μPC and BP at their
# best lrs. Each finding asks for that level less 10 points (the reading's uncertainty and seed spread).
MNIST_LEVEL, FMNIST_LEVEL = 80.0, 75.0
LEVELS = {"mnist": MNIST_LEVEL, "fashion_mnist": FMNIST_LEVEL}
SHALLOW_PC = ("smoke's S13 trains at H = 8 (N = 16), where standard PC trains: linear at (param lr 0.01, act lr "
              "0.01) ends at 28 %; the paper's failure is at 128 layers")
SMOKE_LEVEL = ("smoke trains 32 iterations of width-16 nets on 2,048 images: its accuracies (21–70 %) are far "
               "below the paper's levels after full epochs")


def fam(k: str) -> str:
    return f"mupc_training_extract@{k}"


def last_by_depth(final_acc: Any, *, act: str, direction: str) -> tuple[bool, Any]:
    """F20's final accuracy per depth of one activation (verdict aggregation: a diverged seed is chance),
    then :func:`trend` along H."""
    if not isinstance(final_acc, Mapping):
        return False, None
    cells = {k: v.get("final") for k, v in final_acc.items() if k.startswith(f"{act}/")}
    return trend(cells, axis="H", direction=direction)


def deepest(mapping: Any, *, check: Any) -> tuple[bool, Any]:
    """``check`` applied to the cell of the largest ``H=`` in a mapping keyed ``…/H=<h>``."""
    if not isinstance(mapping, Mapping) or not mapping:
        return False, None
    hs = {k: float(k.rsplit("H=", 1)[1]) for k in mapping if "H=" in k}
    if not hs:
        return False, None
    key = max(hs, key=hs.get)
    ok, measured = check(mapping[key])
    return ok, {key: measured}


def at_dataset_level(mapping: Any, *, levels: Mapping[str, float]) -> tuple[bool, Any]:
    """Every accuracy of a mapping keyed ``<dataset>/…`` is at least its dataset's level (a dataset without one
    fails); measured: per key the accuracy and the level it was held to."""
    if not isinstance(mapping, Mapping) or not mapping:
        return False, None
    ok, measured = True, {}
    for key, value in mapping.items():
        level = levels.get(str(key).split("/", 1)[0])
        holds, v = at_least(value, threshold=level) if level is not None else (False, number(value))
        ok &= holds
        measured[key] = {"acc": v, "level": level}
    return ok, measured


def trains_at_every_width(per_n: Any, *, drop: float) -> tuple[bool, Any]:
    """F14: every width's best-lr accuracy is at its dataset's paper level (``LEVELS``), and per activation the
    widest net is at most ``drop`` points below the narrowest (the paper draws wider as better; at these
    levels the widths lie within a point, so a strict "above" would be decided by evaluation noise); measured:
    the level check and, per activation, narrowest and widest."""
    level_ok, levels = at_dataset_level(per_n, levels=LEVELS)
    if not level_ok and levels is None:
        return False, None
    _, ends = trend(per_n, axis="N", direction="up")
    widths_ok = bool(ends)
    for accs in (ends or {}).values():
        vals = list(accs.values())
        widths_ok &= len(vals) >= 2 and None not in vals and vals[-1] >= vals[0] - drop
    return level_ok and widths_ok, {"levels": levels, "per_width": ends}


def both_train(a: Any, b: Any) -> tuple[bool, Any]:
    """Every final accuracy of both families is at its dataset's paper level (``LEVELS``); measured: each one's."""
    va, vb = (at_dataset_level(x, levels=LEVELS) for x in (a, b))
    return va[0] and vb[0], [va[1], vb[1]]


def loss_optima(contour_optimum: Any) -> dict[str, tuple[float, float]] | None:
    """The notebook-aggregation min-train-loss optimum (act lr, param lr) per activation of a contour
    family without a swept N/H (F25: keys ``notebook/<act>/loss``)."""
    if not isinstance(contour_optimum, Mapping):
        return None
    out = {}
    for key, opt in contour_optimum.items():
        parts = key.split("/")
        if len(parts) == 3 and parts[0] == "notebook" and parts[2] == "loss" and isinstance(opt, Mapping):
            out[parts[1]] = (opt["act_lr"], opt["param_lr"])
    return out or None


def single(grid: Any, axis: str) -> Any:
    """The one value of a contour grid's axis (F25's N and H), else None."""
    vals = grid.get(axis) if isinstance(grid, Mapping) else None
    return vals[0] if isinstance(vals, list) and len(vals) == 1 else None


def near_mnist_optimum(fm_opt: Any, fm_grid: Any, mn_opt: Any, mn_grid: Any, *, factor: float) -> tuple[bool, Any]:
    """Per activation, the Fashion-MNIST loss optimum (F25) is within ``factor`` of the MNIST optimum
    of the same width and depth (F23's cell at F25's N; F23's H must be F25's) on both lrs; measured:
    both optima and the ratios (≥ 1) per activation."""
    fm = loss_optima(fm_opt)
    n, h = single(fm_grid, "N"), single(fm_grid, "H")
    if fm is None or n is None or h is None or single(mn_grid, "H") != h or not isinstance(mn_opt, Mapping):
        return False, None
    ok, measured = True, {}
    for act, (a, p) in sorted(fm.items()):
        m = mn_opt.get(f"notebook/{act}/loss/N={n}")
        if not isinstance(m, Mapping):
            ok, measured[act] = False, {"fmnist": [a, p], "mnist": None}
            continue
        ratios = [max(x, y) / min(x, y) for x, y in ((a, m["act_lr"]), (p, m["param_lr"]))]
        ok &= all(r <= factor * (1 + 1e-9) for r in ratios)
        measured[act] = {"fmnist": [a, p], "mnist": [m["act_lr"], m["param_lr"]], "ratios": ratios}
    return ok, {"N": n, "H": h, **measured}


def interior_optimum(opt: Any, grid: Any) -> tuple[bool, Any]:
    """Per activation, the loss optimum lies strictly inside the swept lr grid on both axes (the grid
    brackets it: neither lr is the grid's smallest or largest); measured: the optima and the grid."""
    optima = loss_optima(opt)
    if optima is None or not isinstance(grid, Mapping):
        return False, None
    axes = {k: sorted(grid.get(k) or []) for k in ("act_lr", "param_lr")}
    inside = {act: all(len(axes[k]) >= 3 and axes[k][0] < v < axes[k][-1] for k, v in zip(axes, pair))
              for act, pair in optima.items()}
    return all(inside.values()), {"optima": {a: list(p) for a, p in sorted(optima.items())}, "grid": axes}


def picks_table_lrs(best_act_lr: Any, *, share: float, falls: float) -> tuple[bool, Any]:
    """F7: the sweep's best activity lr (mean over seeds of the final accuracy) is table 5.3's exactly in at
    least ``share`` of the table's cells, and, as in the table (every one of its 6 (dataset, activation)
    pairs), it is lower at the deepest H than at the shallowest in at least ``falls`` of the pairs. On S1's
    three-value grid "the table's or its neighbour" holds for any pick of the middle value, and one lr
    everywhere matches up to 10 of 18 cells; neither passes both. Measured: the share, the cells that miss
    (computed, table) and the deepest against the shallowest pick per pair."""
    if not isinstance(best_act_lr, Mapping):
        return False, None
    rated = {k: v for k, v in best_act_lr.items() if isinstance(v, Mapping) and v.get("steps") is not None}
    if not rated:
        return False, None
    misses = {k: [v["computed"], v["table"]] for k, v in rated.items() if v["steps"] != 0}
    got = 1 - len(misses) / len(rated)
    by_pair: dict[str, dict[int, float]] = {}
    for key, v in rated.items():
        pair, _, depth = key.rpartition("/H=")
        by_pair.setdefault(pair, {})[int(depth)] = float(v["computed"])
    ends = {pair: [picks[min(picks)], picks[max(picks)]] for pair, picks in sorted(by_pair.items()) if len(picks) > 1}
    fell = sum(deep < shallow for shallow, deep in ends.values()) / len(ends) if ends else 0.0
    return got >= share and fell >= falls, {"share": got, "cells": len(rated), "misses": misses,
                                            "falls_with_depth": fell, "shallow_deep": ends}


def trainable_band(per_lr: Any, *, level: float, span: float) -> tuple[bool, Any]:
    """F13: in every (dataset, act, H) cell the activity lrs whose final mean accuracy reaches ``level``
    span at least a factor ``span`` (largest / smallest of them); measured: that span per cell (0: none
    or one lr trains)."""
    if not isinstance(per_lr, Mapping) or not per_lr:
        return False, None
    spans = {}
    for cell, accs in per_lr.items():
        ok = [float(a) for a, v in (accs or {}).items() if number(v) is not None and v >= level]
        spans[cell] = max(ok) / min(ok) if len(ok) >= 2 else 0.0
    return all(v >= span for v in spans.values()), spans


def on_measured(flag: Any, *values: Any, check: Any) -> tuple[bool, Any]:
    """``check(*values)`` once the family says every PC cell it drew was trained (``pc_measured``: a
    family publishes it only then, so a profile drawing the notebook's 10 % fill leaves the claim not
    measured instead of checking the fill)."""
    if flag is not True:
        return False, None
    return check(*values)


def mupc_ahead(cell: Any, *, margin: float) -> tuple[bool, Any]:
    """One F18 cell: μPC's final accuracy minus PC's exceeds ``margin`` points; measured: that difference."""
    if not isinstance(cell, Mapping):
        return False, None
    return exceeds(cell.get("mupc"), cell.get("pc"), margin=margin)


def bp_gap(cell: Any, *, most: float) -> tuple[bool, Any]:
    """One F19 panel: BP's final accuracy minus μPC's is at most ``most`` points; measured: that gap."""
    if not isinstance(cell, Mapping):
        return False, None
    bp, mu = number(cell.get("BP")), number(cell.get("μPC"))
    if bp is None or mu is None:
        return False, None
    return bp - mu <= most, bp - mu


def pc_fails(act: str, H: int) -> bool:
    """Where the paper says standard PC fails (the notebook's chance rule, spec §5.4/§8.1): ReLU (and any
    activation but tanh) at H ≥ 64, linear from H = 32; tanh trains to H = 128."""
    return (H >= 64 and act != "tanh") or (H >= 32 and act == "linear")


def sp_cells(final_acc: Any, act: str) -> dict[int, float | None]:
    """F20's verdict accuracy (``final``) per depth of one activation."""
    if not isinstance(final_acc, Mapping):
        return {}
    return {int(k.rsplit("=", 1)[1]): number(v.get("final")) for k, v in final_acc.items()
            if k.startswith(f"{act}/H=") and isinstance(v, Mapping)}


def fails_where_the_paper_says(final_acc: Any, *, act: str, level: float, most: float) -> tuple[bool, Any]:
    """F20, one activation: standard PC reaches ``level`` at every depth where the paper says it trains and stays
    at most ``most`` at every depth where it says it fails (:func:`pc_fails`), with a depth of each kind (an
    untrained sweep, at chance everywhere, fails; so does one that trains everywhere); measured: the cells."""
    cells = sp_cells(final_acc, act)
    trains = {h: a for h, a in cells.items() if not pc_fails(act, h)}
    fails = {h: a for h, a in cells.items() if pc_fails(act, h)}
    ok = (bool(trains) and bool(fails) and all(a is not None and a >= level for a in trains.values())
          and all(a is not None and a <= most for a in fails.values()))
    return ok, {f"H={h}": a for h, a in sorted(cells.items())}


def trains_at_every_depth(final_acc: Any, *, act: str, level: float) -> tuple[bool, Any]:
    """F20, one activation: standard PC reaches ``level`` at every depth (two at least); measured: the cells."""
    cells = sp_cells(final_acc, act)
    ok = len(cells) >= 2 and all(a is not None and a >= level for a in cells.values())
    return ok, {f"H={h}": a for h, a in sorted(cells.items())}


def ahead_where_pc_fails(final_acc: Any, *, margin: float) -> tuple[bool, Any]:
    """F18: at every depth where the paper says PC fails (:func:`pc_fails`), μPC's final accuracy exceeds
    PC's by more than ``margin`` points; measured: the difference per such cell. At the depths where both
    train the paper claims no order (its Fig. 1 shows them level), so those cells are not checked."""
    if not isinstance(final_acc, Mapping):
        return False, None
    cells = {k: v for k, v in final_acc.items() if "/H=" in k and pc_fails(k.split("/")[0], int(k.rsplit("=", 1)[1]))}
    if not cells:
        return False, None
    ok, measured = True, {}
    for key, cell in sorted(cells.items()):
        holds, diff = mupc_ahead(cell, margin=margin)
        ok &= holds
        measured[key] = diff
    return ok, measured


def allowed_steps(steps: int, grid: Any) -> int:
    """``steps`` where "within that many grid steps" accepts at most half of the grid's values (one step: 3 of
    at least 6), else 0: on gpu_medium's 4 act lrs and 2 param lrs, one step accepted 6 of the 8 cells."""
    n = len(grid) if isinstance(grid, list | tuple) else 0
    return steps if 2 * (2 * steps + 1) <= n else 0


def transfers(transfer: Any, grid: Any, *, steps: int) -> tuple[bool, Any]:
    """F23/F24: per activation, the min-train-loss optima across the swept N or H lie within
    :func:`allowed_steps` of each other on each lr axis of ``grid`` (``span``); measured: the span per
    activation and the steps allowed per axis."""
    if not isinstance(transfer, Mapping) or not transfer or not isinstance(grid, Mapping):
        return False, None
    allow = {axis: allowed_steps(steps, grid.get(axis)) for axis in ("act_lr", "param_lr")}
    spans = {act: rec.get("span") for act, rec in sorted(transfer.items())}
    ok = all(isinstance(s, Mapping) and all(v is not None and v <= allow.get(k, 0) for k, v in s.items())
             for s in spans.values())
    return ok, {"span": spans, "allowed": allow}


def near_notebook(*transfers_and_grids: Any, steps: int) -> tuple[bool, Any]:
    """F23 and F24 (``transfer, grid`` each): per activation, every optimum is within :func:`allowed_steps`
    of the notebook's lrs (act lr 1 / 1 / 0.5 for linear / tanh / relu, param lr 0.1 on MNIST) on each axis;
    measured: the largest distance per family and activation (None: the grid lacks the notebook's value)."""
    ok, measured = True, []
    for transfer, grid in zip(transfers_and_grids[::2], transfers_and_grids[1::2], strict=True):
        if not isinstance(transfer, Mapping) or not transfer or not isinstance(grid, Mapping):
            return False, None
        allow = {axis: allowed_steps(steps, grid.get(axis)) for axis in ("act_lr", "param_lr")}
        far = {act: rec.get("from_notebook") for act, rec in sorted(transfer.items())}
        ok &= all(isinstance(f, Mapping) and all(v is not None and v <= allow.get(k, 0) for k, v in f.items())
                  for f in far.values())
        measured.append({"from_notebook": far, "allowed": allow})
    return ok, measured


def trained_then(accs: Any, *values: Any, keys: str, level: float, check: Any) -> tuple[bool, Any]:
    """``check(*values)`` where the nets it reads trained: every accuracy of ``accs`` whose key fully matches
    ``keys`` is at least ``level`` (an untrained sweep ties every lr, so its optimum is the tie-break's cell);
    measured: the lowest such accuracy and the check's measurement."""
    if not isinstance(accs, Mapping):
        return False, None
    picked = [number(v) for k, v in accs.items() if re.fullmatch(keys, str(k))]
    low = None if not picked or None in picked else min(picked)
    ok, measured = check(*values)
    return (low is not None and low >= level and ok), {"lowest_acc": low, "measured": measured}


def pc_trains_shallow_not_deep(final_acc: Any, *, level: float, most: float) -> tuple[bool, Any]:
    """F18: standard PC trained at the smallest depth reaches ``level`` and at the largest stays at most ``most``
    (chance + 5); measured: PC's final accuracy at both ends."""
    if not isinstance(final_acc, Mapping):
        return False, None
    hs = {k: float(k.rsplit("H=", 1)[1]) for k, v in final_acc.items() if "H=" in k and isinstance(v, Mapping)}
    if len(set(hs.values())) < 2:
        return False, None
    lo, hi = min(hs, key=hs.get), max(hs, key=hs.get)
    a, b = number(final_acc[lo].get("pc")), number(final_acc[hi].get("pc"))
    return (a is not None and b is not None and a >= level and b <= most), {lo: a, hi: b}


def bp_gap_trained(cell: Any, *, most: float, level: float) -> tuple[bool, Any]:
    """One F19 panel: BP and μPC both trained (at least ``level``) and BP − μPC at most ``most`` points."""
    ok, gap = bp_gap(cell, most=most)
    accs = [number(cell.get(k)) for k in ("BP", "μPC")] if isinstance(cell, Mapping) else [None]
    return ok and None not in accs and min(accs) >= level, {"gap": gap, "min_acc": None if None in accs else min(accs)}


def bp_gap_at_dataset_level(final_acc: Any, *, most: float) -> tuple[bool, Any]:
    """F19, every panel (keys ``<dataset>/…``): :func:`bp_gap_trained` at its dataset's paper level
    (``LEVELS``); measured: each panel's gap, lowest accuracy and level."""
    if not isinstance(final_acc, Mapping) or not final_acc:
        return False, None
    out, ok = {}, True
    for key, cell in final_acc.items():
        level = LEVELS.get(str(key).split("/")[0])
        good, m = bp_gap_trained(cell, most=most, level=level) if level is not None else (False, None)
        ok &= good
        out[key] = {**(m or {}), "level": level}
    return ok, out


def no_lr_trains_deepest(per_lr: Any, mupc_final: Any, *, acts: tuple[str, ...], most: float,
                         level: float) -> tuple[bool, Any]:
    """F28: at the deepest H of the lr grid (``final_acc_per_lr``, keys ``<ds>/<act>/H=<h>``, each a mapping
    ``p=<param lr>/a=<act lr>`` -> final accuracy), every lr pair of every activation in ``acts`` ends at most
    ``most``, and μPC at that H (F16's ``final_acc``, keys ``<ds>/H=<h>/…``) reaches ``level``: a pipeline in
    which nothing trains leaves every PC cell at chance as well. Measured: the depth, per cell its best lr pair
    and accuracy (the activations not held included), the held lr pairs above ``most`` and μPC's accuracy."""
    if not isinstance(per_lr, Mapping) or not isinstance(mupc_final, Mapping):
        return False, None
    depth = {k: coordinates(str(k)).get("H") for k in per_lr}
    hs = [h for h in depth.values() if isinstance(h, float)]
    if not hs:
        return False, None
    h = max(hs)
    deep = {k: v for k, v in per_lr.items() if depth[k] == h and isinstance(v, Mapping) and v}
    held = {k: v for k, v in deep.items() if str(k).split("/")[1] in acts}
    pc_ok, per_cell = each(held, check=partial(each, check=partial(at_most, threshold=most)))
    pc_ok &= {str(k).split("/")[1] for k in held} == set(acts)
    mu = {k: v for k, v in mupc_final.items() if coordinates(str(k)).get("H") == h}
    mu_ok, mu_acc = each(mu, check=partial(at_least, threshold=level))
    best = {}
    for key, cells in sorted(deep.items()):
        finite = {lr: number(v) for lr, v in cells.items() if number(v) is not None}
        top = max(finite, key=finite.get) if finite else None
        best[key] = {"lrs": top, "acc": finite.get(top) if top else None}
    above = {f"{k}/{lr}": v for k, m in per_cell.items() for lr, v in (m or {}).items() if v is None or v > most}
    return pc_ok and mu_ok, {"H": int(h), "best": best, "above": above, "mupc": mu_acc}


PC_MEASURED_F18, PC_MEASURED_F20 = (fam("F18"), "pc_measured"), (fam("F20"), "pc_measured")
FALLS = partial(trend, axis="H", direction="down")
NEIGHBOURING_OPTIMA = partial(transfers, steps=1)

CLAIMS = (
    Claim("sp_sweep_picks_notebook_lrs", "F7 (test_accs_GD_{act}_{H}_n_hidden; spec §5.3, §8.1)",
          "Standard PC (GD inference): the activity-lr sweep picks the notebook's best rates: in at least half "
          "of table 5.3's (dataset, activation, depth) cells the rate with the best final accuracy is the "
          "notebook's, and, as in every row of the table, the deepest net's best rate is below the shallowest "
          "one's in at least 5 of 6 (dataset, activation) pairs (one lr everywhere, or the grid's middle "
          "value, fails).",
          ((fam("F7"), "best_act_lr"),), partial(picks_table_lrs, share=0.5, falls=0.8), figures=("F7",),
          fails_on={"smoke": "smoke's S1 grid (H = 2, 4) holds none of table 5.3's cells (H = 8, 16, 32)"},
          role=FINDING),
    Claim("mupc_broad_activity_lr_band", "F13 (test_accs_muPC_{act}_{H}_n_hidden; paper Figs. A.16–A.18)",
          "μPC trains over a broad band of activity lrs: at the selected param lr, in every (activation, depth) "
          "cell the activity lrs that train (at least 10 points above chance: the spec gives the paper's levels "
          "only for the best lrs, §8.1) span at least a factor 10.",
          ((fam("F13"), "final_acc_per_act_lr"),), partial(trainable_band, level=TRAINS, span=10.0),
          figures=("F13",), fails_on={"smoke": TINY}, role=FINDING),
    Claim("sp_gd_acc_falls_with_depth", "F7/F8 (best_test_accs_GD; paper Fig. 3)",
          "Standard PC (GD inference, no skips): at its best activity lr, test accuracy is lower at the "
          "largest depth than at the smallest, for every dataset and activation.",
          ((fam("F8"), "best_final_acc"),), FALLS, figures=("F7", "F8"), role=FINDING),
    Claim("sp_adam_acc_falls_with_depth", "F9 (best_test_accs_Adam)",
          "Standard PC with Adam inference: best-lr accuracy falls with depth (means over seeds: the "
          "Adam-inference sweep is ill-conditioned at the feed-forward start).",
          ((fam("F9"), "best_final_acc"),), FALLS, figures=("F9",), role=FINDING),
    Claim("sp_skips_acc_falls_with_depth", "F10 (best_test_accs_GD_skips)",
          "Standard PC with skips: best-lr accuracy falls with depth.",
          ((fam("F10"), "best_final_acc"),), FALLS, figures=("F10",), role=FINDING),
    Claim("sp_orthogonal_acc_falls_with_depth", "F11 (best_test_accs_orthogonal)",
          "Standard PC with orthogonal init: best-lr accuracy falls with depth.",
          ((fam("F11"), "best_final_acc"),), FALLS, figures=("F11",), fails_on={"smoke": TINY}, role=FINDING),
    Claim("sp_kappa_grows_with_depth", "F8 (best_cond_nums_GD)",
          "Standard PC: the condition number of the activity Hessian at init is larger at the largest "
          "depth than at the smallest. A property of the untrained net (it holds before any update): "
          "a sanity check here, mupc_analysis's Hessian-at-init findings state it for the init.",
          ((fam("F8"), "kappa_init"),), partial(trend, axis="H", direction="up"), figures=("F8",), role=SANITY),
    Claim("sp_kappa_rises_in_training", "F8 (best_cond_nums_GD; spec §8.3)",
          "Standard PC: the inference landscape becomes more ill-conditioned with training (κ(H_z) at "
          "the last evaluation above κ at init) in every (dataset, activation, depth).",
          ((fam("F8"), "kappa_final"), (fam("F8"), "kappa_init")), partial(cellwise, relation="greater"),
          figures=("F8",), fails_on={"smoke": "smoke's 32 training iterations move κ by a few percent either way; "
                                              "the paper's rise is over a full epoch"}, role=FINDING),
    *(Claim(f"sp_kappa_rises_in_training_{variant}", f"{fig} (best_cond_nums_{plot}; spec §8.3)",
            f"Standard PC ({what}): κ(H_z) at the last evaluation is above κ at init in at least two thirds of the "
            "(dataset, activation, depth) cells: the spec's statistical reading of the paper's 'more "
            "ill-conditioned with training time' for the best-lr SP curves F8–F11.",
            ((fam(fig), "kappa_final"), (fam(fig), "kappa_init")),
            partial(cellwise, relation="greater", share=KAPPA_RISE_SHARE), figures=(fig,),
            fails_on={"smoke": "smoke's 32 training iterations move κ by a few percent either way; the paper's "
                               "rise is over a full epoch"}, role=FINDING)
      for variant, fig, plot, what in (("adam", "F9", "Adam", "Adam on the activities"),
                                       ("skips", "F10", "GD_skips", "GD, with skips"),
                                       ("orthogonal", "F11", "orthogonal", "orthogonal init"))),
    Claim("mupc_kappa_grows_with_depth", "F12 (best_cond_nums_mupc)",
          "μPC: κ(H_z) at init still grows with depth (the paper: roughly polynomially). A property of the "
          "untrained net (it holds before any update): a sanity check here, as mupc_analysis's "
          "kappa_grows_with_depth_mupc states it for the init.",
          ((fam("F12"), "kappa_init"),), partial(trend, axis="H", direction="up"), figures=("F12",), role=SANITY),
    Claim("mupc_trains_at_every_depth", "F13/F15 (best_test_accs_depth_muP; paper Fig. 1)",
          "μPC trains at every depth at the paper's level: at its best lrs the MNIST accuracy after one epoch is "
          "at least 80 % for every activation and depth (the paper: ≈ 90 %+ up to 128 layers, spec §8.1).",
          ((fam("F15"), "mupc_best_final_acc_per_H"),), partial(at_dataset_level, levels=LEVELS),
          figures=("F13", "F15"), fails_on={"smoke": TINY}, role=FINDING),
    Claim("mupc_trains_at_every_width", "F14 (best_test_accs_width_muP)",
          "μPC at its best lrs trains at every width to the paper's level (at least 80 % on MNIST after one "
          "epoch; the paper's axes suggest ≈ 90 %+, spec §8.1), and the widest net is at most 1 point below the "
          "narrowest, for every activation.",
          ((fam("F14"), "mupc_best_final_acc_per_N"),), partial(trains_at_every_width, drop=1.0),
          figures=("F14",), fails_on={"smoke": SMOKE_LEVEL}, role=FINDING),
    Claim("mupc_deepest_trains_long", "F16/F17 (mupc_128_*_acc)",
          "The deepest μPC net trains on both datasets over several epochs to the paper's level: final "
          "accuracy at least 80 % on MNIST and 75 % on Fashion-MNIST (the paper: ≈ 90 %+ and the high 80s, "
          "spec §8.1).",
          ((fam("F16"), "final_acc"), (fam("F17"), "final_acc")),
          both_train,
          figures=("F16", "F17"), fails_on={"smoke": TINY}, role=FINDING),
    Claim("mupc_beats_pc_at_every_depth", "F18 (paper Fig. 1, right)",
          "ReLU ResNets (F18 draws ReLU): at every depth where the paper says standard PC fails (from H = 64), μPC "
          "ends more than 20 points above PC, every PC cell trained (not the notebook's 10 % fill); "
          "where both train, the paper shows them level and claims no order.",
          (PC_MEASURED_F18, (fam("F18"), "fig1_final_acc")),
          partial(on_measured, check=partial(ahead_where_pc_fails, margin=20.0)), figures=("F18",),
          fails_on={"smoke": "smoke's S6 grid stops at H = 8: no depth where the paper says PC fails"},
          role=FINDING),
    Claim("pc_at_chance_when_deep", "F18/F20 (paper Fig. 1, right)",
          "Standard PC does not train deep ReLU ResNets, though it trains shallow ones: trained at the smallest "
          "depth F18 draws it reaches the paper's MNIST level, at least 80 % (the paper: ≈ 90 %), at the largest "
          "it stays within 5 points of chance (an untrained PC is at chance at every depth).",
          (PC_MEASURED_F18, (fam("F18"), "fig1_final_acc")),
          partial(on_measured, check=partial(pc_trains_shallow_not_deep, level=MNIST_LEVEL, most=15.0)),
          figures=("F18", "F20"), fails_on={"smoke": TINY}, role=FINDING),
    Claim("mupc_beats_pc_128_layers", "F18 at its deepest H (paper Fig. 1, right; F19's PC is not measured)",
          "At the deepest net F18 draws (paper: 128 layers, 1 epoch), μPC ends at least 20 points above standard "
          "PC trained at the same depth (the paper: μPC near 90 %, PC at chance).",
          (PC_MEASURED_F18, (fam("F18"), "fig1_final_acc")),
          partial(on_measured, check=partial(deepest, check=partial(mupc_ahead, margin=20.0))),
          figures=("F18", "F19"), fails_on={"smoke": TINY}, role=FINDING),
    Claim("mupc_near_bp_128_layers", "F19 (mupc_vs_pc_vs_bp_128_relu_net)",
          "The deepest μPC net trains close to BP with Depth-μP: on MNIST and Fashion-MNIST, over the same "
          "schedule, both reach the paper's level (80 % on MNIST, 75 % on Fashion-MNIST; the paper: ≈ 90 %+ and "
          "the high 80s) and μPC's final accuracy is at most 10 points below BP's (two untrained nets are level "
          "at chance).",
          ((fam("F19"), "final_acc"),), partial(bp_gap_at_dataset_level, most=10.0),
          figures=("F19",),
          fails_on={"smoke": TINY}, role=FINDING),
    Claim("pc_fails_at_128_layers_for_any_lr",
          "F28 (paper Fig. 1 and its caption: standard PC cannot train 128-layer nets; the notebook: 'PC runs "
          "diverge … for any lrs')",
          "No learning rate trains standard PC at the deepest depth, while μPC trains there: at the deepest H of "
          "S13 (paper: 128 layers, N = 512, skips, MNIST, 1 epoch), for linear and ReLU and every (param lr, "
          "activity lr) of the grid, standard PC's final accuracy stays at most 20 % (10 points above chance; a "
          "run that diverges before its first test counts as chance), and μPC at the same depth (F16) reaches at "
          "least 20 % (a pipeline in which nothing trains would leave PC at chance as well). Tanh, which the "
          "notebook trains to H = 128 (table 5.3), is measured and drawn but not held.",
          ((fam("F28"), "final_acc_per_lr"), (fam("F16"), "final_acc")),
          partial(no_lr_trains_deepest, acts=("linear", "relu"), most=TRAINS, level=TRAINS),
          figures=("F28", "F16"), fails_on={"smoke": SHALLOW_PC}, role=FINDING),
    Claim("sp_linear_fails_with_depth", "F20 (best_test_accs_depth_SP)",
          "Standard PC with skips, linear, every cell trained: accuracy is lower at the largest depth than at "
          "the smallest.",
          (PC_MEASURED_F20, (fam("F20"), "final_acc")),
          partial(on_measured, check=partial(last_by_depth, act="linear", direction="down")), figures=("F20",),
          role=FINDING),
    Claim("sp_linear_fails_from_32_layers", "F20 (best_test_accs_depth_SP; spec §8.1: the notebook's chance rule)",
          "Standard PC with skips, linear, every cell trained: it trains below 32 layers (at least 20 %, 10 points "
          "above chance) and stays within 5 points of chance from H = 32 on, where the notebook draws it at chance "
          "(an untrained sweep, at chance everywhere, fails the first half).",
          (PC_MEASURED_F20, (fam("F20"), "final_acc")),
          partial(on_measured, check=partial(fails_where_the_paper_says, act="linear", level=TRAINS, most=15.0)),
          figures=("F20",), fails_on={"smoke": "smoke's S12 stops at H = 8, where linear PC trains"}, role=FINDING),
    Claim("sp_tanh_trains_to_128_layers", "F20 (best_test_accs_depth_SP; table 5.3's tanh cells)",
          "Standard PC with skips, tanh, trains at every depth up to the deepest (the paper: to H = 128, where the "
          "notebook's table 5.3 gives tanh its lrs and its figure draws tanh trained): at least 20 % (10 points above "
          "chance; the paper prints no level for these cells) in every cell.",
          (PC_MEASURED_F20, (fam("F20"), "final_acc")),
          partial(on_measured, check=partial(trains_at_every_depth, act="tanh", level=TRAINS)),
          figures=("F20",), role=FINDING),
    Claim("bp_trains", "F21 (bp_results best_test_accs)",
          "BP with Depth-μP trains every activation to the paper's level: at its best lr at least 80 % on MNIST "
          "and 75 % on Fashion-MNIST (the paper's BP curves: ≈ 90 %+ and the high 80s, spec §8.1).",
          ((fam("F21"), "best_final_acc"),), partial(at_dataset_level, levels=LEVELS),
          figures=("F21",), fails_on={"smoke": SMOKE_LEVEL}, role=FINDING),
    Claim("activity_decay_does_not_help_pc", "F22 (max_test_accs_per_activity_decay)",
          "Activity decay does not rescue standard PC (linear, no skips): for every activity lr the max test "
          "accuracy with the strongest decay is below that without decay.",
          ((fam("F22"), "max_test_acc_by_decay"),), partial(trend, axis="decay", direction="down"),
          figures=("F22",), role=FINDING),
    Claim("mupc_lr_transfers_across_width", "F23 (paper Fig. 5)",
          "μPC's best (activity lr, param lr) by min train loss (mean over the seeds that did not fail) stays "
          "put across width, for every activation (zero-shot transfer): on each lr axis the optima lie within one "
          "step of each other where the axis has at least 6 values, on one value where it has fewer (one step "
          "then accepts most of the grid), and the swept nets train (F14's best accuracy at every width at "
          "least 20 %: an untrained sweep ties every lr and its 'optimum' is the tie-break's cell everywhere).",
          ((fam("F14"), "mupc_best_final_acc_per_N"), (fam("F23"), "transfer_width"), (fam("F23"), "contour_grid")),
          partial(trained_then, keys=r".*", level=TRAINS, check=NEIGHBOURING_OPTIMA), figures=("F23",),
          fails_on={"smoke": "smoke's two-lr grid over 32 iterations: the optimum of an untrained net is noise"},
          role=FINDING),
    Claim("mupc_lr_transfers_across_depth", "F24 (paper Fig. 5)",
          "μPC's best (activity lr, param lr) by min train loss (mean over the seeds that did not fail) stays "
          "put across depth, for every activation: on each lr axis the optima lie within one step of each other "
          "where the axis has at least 6 values, on one value where it has fewer, and the swept nets train "
          "(F15's best accuracy at every depth at least 20 %: an untrained sweep ties every lr).",
          ((fam("F15"), "mupc_best_final_acc_per_H"), (fam("F24"), "transfer_depth"), (fam("F24"), "contour_grid")),
          partial(trained_then, keys=r".*", level=TRAINS, check=NEIGHBOURING_OPTIMA), figures=("F24",),
          fails_on={"smoke": "smoke's two-lr grid over 32 iterations: the optimum of an untrained net is noise"},
          role=FINDING),
    Claim("mupc_transfer_optimum_is_notebooks", "F23/F24 (paper Fig. 5; the notebook's best_test_accs_*_muP cells)",
          "The transferred optimum is the one the notebook uses: at every width (F23) and depth (F24) the "
          "min-train-loss optimum is activity lr 1 / 1 / 0.5 (linear / tanh / relu) and param lr 0.1, or one step "
          "from it on an lr axis of at least 6 values (the paper's 11 activity lrs; its 4 param lrs and "
          "gpu_medium's 4 and 2, where one step accepted 6 of 8 cells, ask for the value itself).",
          ((fam("F23"), "transfer_width"), (fam("F23"), "contour_grid"), (fam("F24"), "transfer_depth"),
           (fam("F24"), "contour_grid")), partial(near_notebook, steps=1),
          figures=("F23", "F24"),
          fails_on={"smoke": "smoke's act-lr grid (1, 0.1) lacks relu's 0.5, and its 32 iterations leave the "
                             "optimum of an untrained net to noise"},
          role=FINDING),
    Claim("mupc_trains_on_fmnist", "F25 (max_test_accs_over_lrs_Fashion-MNIST)",
          "μPC trains on Fashion-MNIST to the paper's level: at the best (activity lr, param lr) of the accuracy "
          "contour the max test accuracy (mean over seeds) is at least 75 % for every activation (the paper's "
          "Fashion-MNIST curves reach the high 80s, spec §8.1; S8 trains one epoch).",
          ((fam("F25"), "contour_best"),), partial(each, keys=r"notebook/\w+/acc",
                                                    check=partial(at_least, threshold=FMNIST_LEVEL)),
          figures=("F25",), fails_on={"smoke": SMOKE_LEVEL}, role=FINDING),
    Claim("mupc_fmnist_optimum_near_mnist", "F25 vs F23 (min_train_losses_over_lrs; spec §5.3)",
          "μPC's lrs carry over from MNIST to Fashion-MNIST: the F-MNIST min-train-loss optimum is within a "
          "factor 5 (one step of the paper's lr grid) of the MNIST optimum at the same width and depth, on both "
          "lrs, for every activation (the notebook moved the param lr from 0.1 to 0.05); the F-MNIST nets train "
          "(the accuracy contour's best at least 20 % per activation: an untrained sweep ties every lr, and both "
          "datasets' 'optima' are then the same tie-break cell).",
          ((fam("F25"), "contour_best"), (fam("F25"), "contour_optimum"), (fam("F25"), "contour_grid"),
           (fam("F23"), "contour_optimum"), (fam("F23"), "contour_grid")),
          partial(trained_then, keys=r"notebook/\w+/acc", level=TRAINS,
                  check=partial(near_mnist_optimum, factor=5.0)),
          figures=("F25", "F23"), role=FINDING),
    Claim("mupc_fmnist_optimum_interior", "F25 (min_train_losses_over_lrs_Fashion-MNIST)",
          "The F-MNIST min-train-loss optimum is an interior region of the lr grid: for every activation "
          "neither its activity lr nor its param lr is the grid's smallest or largest.",
          ((fam("F25"), "contour_optimum"), (fam("F25"), "contour_grid")), interior_optimum,
          figures=("F25",),
          fails_on={"smoke": "smoke's grid has two lrs per axis (act 1, 0.1; param 0.1, 0.01): no interior cell",
                    "gpu_medium": "gpu_medium's param-lr grid has two values (0.1, 0.01): no interior cell"},
          role=FINDING),
)

