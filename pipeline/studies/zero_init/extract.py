"""extract@summary: final rank, test accuracy and first iteration above the input dimension per trained run."""

from __future__ import annotations

from typing import Any

import pandas as pd

from pipeline.contract import Context, Output
from pipeline.studies.zero_init.config import ZeroInitParams


def rank_before_lr_decay(r: dict[str, Any]) -> int | None:
    """rank(W3 − I) at the end of the last epoch trained at the base lr, when a StepLR decay followed
    (null otherwise): what a claim reads to be independent of the schedule."""
    decayed = [t for t in r["test"] if t["lr"] < r["params"]["lr"]]
    if not decayed:
        return None
    before = [t for t in r["test"] if t["epoch"] < decayed[0]["epoch"]]
    return before[-1]["rank_w3_minus_i"] if before else None


def run_summary(r: dict[str, Any]) -> dict[str, Any]:
    """The metrics of one run from its ``result.json``."""
    p = r["params"]
    return {
        "init": p["init"], "n_h": p["n_h"], "setting": p["setting"], "bias": p["bias"],
        "lr_step_size": p["lr_step_size"], "lr_gamma": p["lr_gamma"],
        "epochs": p["epochs"], "iterations": r["iterations"], "train_images": p["train_images"],
        "final_rank_w3_minus_i": r["rank_w3_minus_i"][-1],
        "final_rank_w3_minus_w3_0": r["rank_w3_minus_w3_0"][-1],
        "max_rank_w3_minus_i": max(r["rank_w3_minus_i"]),
        "min_rank_w3_minus_i": min(r["rank_w3_minus_i"]),  # over every logged iteration, the init included
        "final_test_acc": r["test"][-1]["test_acc"],
        "test_acc_per_epoch": [t["test_acc"] for t in r["test"]],
        "lr_per_epoch": [t["lr"] for t in r["test"]],
        "rank_w3_minus_i_per_epoch": [t["rank_w3_minus_i"] for t in r["test"]],
        "rank_w3_minus_i_before_lr_decay": rank_before_lr_decay(r),
        "first_iter_rank_above_input_dim": r["first_iter_rank_above_input_dim"],
        "diverged": r["diverged"],
    }


TABLE_SETTINGS = ("init", "n_h", "setting", "bias", "lr_step_size", "lr_gamma", "epochs", "train_images")
TABLE_FINALS = ("iterations", "final_rank_w3_minus_i", "final_rank_w3_minus_w3_0", "max_rank_w3_minus_i",
                "final_test_acc", "rank_w3_minus_i_before_lr_decay", "first_iter_rank_above_input_dim")


def runs_table(runs: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """One row per trained run: its settings, status (``finished`` or ``diverged``) and final numbers."""
    return pd.DataFrame([{"run": key, **{k: r[k] for k in TABLE_SETTINGS},
                          "status": "diverged" if r["diverged"] else "finished", **{k: r[k] for k in TABLE_FINALS}}
                         for key, r in runs.items()])


def extract(ctx: Context, unit: str) -> Output:
    cfg: ZeroInitParams = ctx.cfg
    runs = {key: run_summary(ctx.read("train", key, "result.json")) for key in cfg.train_runs()}
    summary = {"profile": ctx.profile, "input_dim": cfg.input_dim_line, "rank_tol": cfg.rank_tol,
               "zero_scale": cfg.zero_scale, "runs": runs}
    for k, v in runs.items():
        ctx.log(f"{k}: final rank {v['final_rank_w3_minus_i']}, test acc {v['final_test_acc']:.2f} %, "
                f"first iteration above {cfg.input_dim_line}: {v['first_iter_rank_above_input_dim']}")
    run_metrics = {f"{k}.{m}": v[m] for k, v in runs.items() for m in ("final_rank_w3_minus_i", "final_test_acc")}
    return Output(json={"summary.json": summary}, metrics=summary, meta={"runs": list(runs)},
                  tables={"runs.csv": runs_table(runs)},
                  run_metrics=run_metrics)
