"""extract@analysis_metrics: a few headline numbers of each train unit, as the study's metrics."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from pipeline.contract import Context, Output
from pipeline.studies.mupc.analysis.config import MupcAnalysisParams
from pipeline.studies.mupc.analysis.layout import fwd_key, hessian_configs, hessian_key, theory_key

Reader = Callable[[str], Any]  # a file of the train unit by name -> JSON object or npz arrays


def hessian_headline(read: Reader, cfg: MupcAnalysisParams) -> dict[str, Any]:
    """κ and λ_min of the linear configs (first seed and decay) at the four corners of the (N, H) grid, and
    F3's theory numbers there (κ(D), κ(H_theory), max |H_theory − H_num|); for the tanh and ReLU configs,
    κ, λ_min and λ_max at the same corners under ``nonlinear_*/<act>_<config>`` (F1 beyond linear nets); for
    every act, max |H_autodiff − H_blocks| at every cell where the train unit ran ``torch.func.hessian``
    (N·H ≤ ``autodiff_check_max_n``) under ``autodiff_vs_blocks/<act>_<config>`` (spec §8.2 invariants 1–2)."""
    hp = cfg.hessian
    out = {}
    corners_n, corners_h = (min(hp.widths), max(hp.widths)), (min(hp.depths), max(hp.depths))
    for c in hessian_configs(hp):
        if c["seed"] != hp.seeds[0] or c["activity_decay"] != hp.activity_decays[0]:
            continue
        cells = read(f"{hessian_key(c)}/summary.json")["cells"]
        config = f"{c['param']}_{c['init']}_{'skips' if c['skips'] else 'no_skips'}"
        out[f"autodiff_vs_blocks/{c['act']}_{config}"] = {f"N{x['N']}_H{x['H']}": x["autodiff_max_abs_diff"]
                                                         for x in cells if "autodiff_max_abs_diff" in x}
        corner = [x for x in cells if x["N"] in corners_n and x["H"] in corners_h]
        if c["act"] != "linear":
            for q in ("kappa", "lambda_min", "lambda_max"):
                out[f"nonlinear_{q}/{c['act']}_{config}"] = {f"N{x['N']}_H{x['H']}": x[q] for x in corner}
            continue
        out[f"kappa/{config}"] = {f"N{x['N']}_H{x['H']}": x["kappa"] for x in corner}
        out[f"lambda_min/{config}"] = {f"N{x['N']}_H{x['H']}": x["lambda_min"] for x in corner}
        # F3: the theory split H = D + O (linear nets): κ of the block diagonal D and of D + O, and how far
        # the theory matrix is from the numeric one
        out[f"D_kappa/{config}"] = {f"N{x['N']}_H{x['H']}": x["D_kappa"] for x in corner}
        out[f"H_theory_kappa/{config}"] = {f"N{x['N']}_H{x['H']}": x["H_theory_kappa"] for x in corner}
        out[f"theory_vs_num/{config}"] = {f"N{x['N']}_H{x['H']}": x["theory_vs_num_max_abs_diff"] for x in corner}
    return out


def spectral_drift(s: np.ndarray) -> float:
    """Largest relative change of a spectral norm over the recorded steps, max_t |s_t / s_0 − 1|
    (NaN when a step overflowed, as the stored norms are)."""
    s = np.asarray(s, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return float(np.max(np.abs(s[1:] / s[0] - 1.0))) if s.size > 1 else 0.0


def fwd_headline(read: Reader, cfg: MupcAnalysisParams) -> dict[str, Any]:
    """Linear nets, layer L/2 (a hidden N × N weight), per variant and (N, L): the activity RMS at step 0
    (first optimiser), the raw weight's spectral norm ‖W‖₂ at step 0 (F6; the optimisers share their
    initial weights) and, per optimiser, its drift over the recorded BP steps (F6, over t)."""
    fp = cfg.fwd_pass
    cells = [(i, j, f"N{N}_L{L}") for i, N in enumerate(fp.widths) for j, L in enumerate(fp.depths)]
    out = {}
    for v in fp.variants:
        d = read(f"{fwd_key('linear', fp.optims[0], v)}/fwd_pass.npz")
        rms, spec = d["avg_activity_l2_per_N_L"], d["param_spectral_norms_per_N_L"]
        out[f"rms_t0_hidden_L2/linear_{v}"] = {k: float(rms[2, 0, i, j]) for i, j, k in cells}
        out[f"spectral_t0_hidden_L2/linear_{v}"] = {k: float(spec[2, 0, i, j]) for i, j, k in cells}
    for optim in fp.optims:
        for v in fp.variants:
            spec = read(f"{fwd_key('linear', optim, v)}/fwd_pass.npz")["param_spectral_norms_per_N_L"]
            out[f"spectral_drift_hidden_L2/linear_{optim}_{v}"] = {k: spectral_drift(spec[2, :, i, j])
                                                                    for i, j, k in cells}
    return out


def theory_grid_headline(read: Reader, cfg: MupcAnalysisParams) -> dict[str, Any]:
    """ℒ/F* per (N, H), per parameterisation, at iteration 0 (``ratio_t0``) and at the last iteration
    (``ratio_final``, after ``iters − 1`` Adam steps: F26 at t > 0)."""
    tg = cfg.theory_grid
    out: dict[str, Any] = {}
    for param in tg.param_lrs:
        ratios = {f"N{N}_H{H}": read(f"{theory_key('linear', param, N, H)}/theory.npz")["loss_energy_ratios"]
                  for N in tg.widths for H in tg.depths}
        out[f"ratio_t0/{param}"] = {k: float(r[0]) for k, r in ratios.items()}
        out[f"ratio_final/{param}"] = {k: float(r[-1]) for k, r in ratios.items()}
    return out


def theory_width_headline(read: Reader, cfg: MupcAnalysisParams) -> dict[str, Any]:
    """ℒ/F* at iteration 0 per width, and the worst equilibrium residual of the nonlinear nets."""
    tw = cfg.theory_width
    out = {}
    for act in tw.acts:
        for param in tw.params:
            vals = {}
            for N in tw.widths:
                d = read(f"{theory_key(act, param, N, tw.depth)}/theory.npz")
                vals[f"N{N}"] = float(d["loss_energy_ratios"][0])
                if "eq_residuals" in d:
                    vals[f"N{N}_max_eq_residual"] = float(np.max(d["eq_residuals"]))
            out[f"ratio_t0/{act}_{param}_H{tw.depth}"] = vals
    return out


def finite_status(*values: Any) -> str:
    """``finished``, or ``failed`` when a final number is not finite (a diverged or overflowed run)."""
    return "finished" if all(np.isfinite(np.asarray(v, dtype=float)).all() for v in values) else "failed"


def hessian_rows(read: Reader, cfg: MupcAnalysisParams) -> list[dict[str, Any]]:
    """One row per (config, N, H) cell of the Hessian at init: its settings and extremes."""
    rows = []
    for c in hessian_configs(cfg.hessian):
        for x in read(f"{hessian_key(c)}/summary.json")["cells"]:
            rows.append({"unit": "hessian_init", "run": f"{hessian_key(c)}/N{x['N']}_H{x['H']}", **c,
                         "N": x["N"], "H": x["H"], "status": finite_status(x["kappa"]),
                         **{k: x[k] for k in ("lambda_max", "lambda_min", "kappa")}})
    return rows


def fwd_rows(read: Reader, cfg: MupcAnalysisParams) -> list[dict[str, Any]]:
    """One row per (act, optimiser, variant, N, L) of the forward pass: activity RMS and ‖W‖₂ of layer
    L/2 at the first and the last recorded step."""
    fp = cfg.fwd_pass
    rows = []
    for act in fp.acts:
        for optim in fp.optims:
            for v in fp.variants:
                d = read(f"{fwd_key(act, optim, v)}/fwd_pass.npz")
                rms, spec = d["avg_activity_l2_per_N_L"], d["param_spectral_norms_per_N_L"]
                for i, N in enumerate(fp.widths):
                    for j, L in enumerate(fp.depths):
                        last = (float(rms[2, -1, i, j]), float(spec[2, -1, i, j]))
                        rows.append({"unit": "fwd_pass", "run": f"{fwd_key(act, optim, v)}/N{N}_L{L}", "act": act,
                                     "optim": optim, "variant": v, "N": N, "L": L, "lr": fp.lr, "seed": fp.seed,
                                     "status": finite_status(*last), "rms_t0_hidden_L2": float(rms[2, 0, i, j]),
                                     "rms_final_hidden_L2": last[0], "spectral_t0_hidden_L2": float(spec[2, 0, i, j]),
                                     "spectral_final_hidden_L2": last[1]})
    return rows


def theory_row(unit: str, d: dict[str, np.ndarray], **settings: Any) -> dict[str, Any]:
    """One theory run: its settings, ℒ, F* and ℒ/F* at the first and the last iteration."""
    row = {"unit": unit, "run": theory_key(settings["act"], settings["param"], settings["N"], settings["H"]),
           **settings, "status": finite_status(d["train_losses"][-1], d["train_energies"][-1]),
           "ratio_t0": float(d["loss_energy_ratios"][0]), "final_ratio": float(d["loss_energy_ratios"][-1]),
           "final_train_loss": float(d["train_losses"][-1]), "final_train_energy": float(d["train_energies"][-1])}
    if "eq_residuals" in d:
        row["max_eq_residual"] = float(np.max(d["eq_residuals"]))
    return row


def theory_grid_rows(read: Reader, cfg: MupcAnalysisParams) -> list[dict[str, Any]]:
    tg = cfg.theory_grid
    return [theory_row("theory_grid", read(f"{theory_key('linear', p, N, H)}/theory.npz"), act="linear", param=p,
                       N=N, H=H, param_lr=lr, iters=tg.iters, seed=tg.seed)
            for p, lr in tg.param_lrs.items() for N in tg.widths for H in tg.depths]


def theory_width_rows(read: Reader, cfg: MupcAnalysisParams) -> list[dict[str, Any]]:
    tw = cfg.theory_width
    return [theory_row("theory_width", read(f"{theory_key(a, p, N, tw.depth)}/theory.npz"), act=a, param=p, N=N,
                       H=tw.depth, param_lr=tw.param_lr, iters=tw.iters, seed=tw.seed)
            for a in tw.acts for p in tw.params for N in tw.widths]


def runs_table(ctx: Context, cfg: MupcAnalysisParams) -> pd.DataFrame:
    """Every run of the train units in one long table (``unit`` tells them apart; a column a unit does not
    have is empty): Hessian cells, forward-pass cells, theory nets."""
    rows: list[dict[str, Any]] = []
    for u in cfg.train_units:
        def read(name: str, u: str = u) -> Any:
            return ctx.read("train", u, name)
        rows += ROWS[u](read, cfg)
    return pd.DataFrame(rows)


# what the extract takes from each train unit: its headline numbers and its rows of the runs table
HEADLINES = {"hessian_init": hessian_headline, "fwd_pass": fwd_headline, "theory_grid": theory_grid_headline,
             "theory_width": theory_width_headline}
ROWS = {"hessian_init": hessian_rows, "fwd_pass": fwd_rows, "theory_grid": theory_grid_rows,
        "theory_width": theory_width_rows}


def extract(ctx: Context, unit: str) -> Output:
    cfg: MupcAnalysisParams = ctx.cfg
    data: dict[str, Any] = {"profile": ctx.profile}
    for train_unit in cfg.train_units:
        data[train_unit] = HEADLINES[train_unit](lambda name, u=train_unit: ctx.read("train", u, name), cfg)
    flat = {f"{u}/{group}/{cell}": v for u in cfg.train_units for group, cells in data[u].items()
            for cell, v in cells.items() if math.isfinite(v)}
    ctx.log(f"{len(flat)} headline numbers of {cfg.train_units}")
    return Output(json={"headline.json": data}, metrics=data, run_metrics=flat,
                  tables={"runs.csv": runs_table(ctx, cfg)})
