"""extract@<variant>: per-seed final and epoch-1 losses; extract@summary: plateau detection on every seed.

Both are the study's metrics (``reports/metrics/superposition_extract@<unit>.json``); the summary's
detections are also the file the loss-curve figure draws (``plateaus.json``).
"""

from __future__ import annotations

import numpy as np

from pipeline.contract import Context, Output
from pipeline.studies.superposition.config import SUMMARY, Plateau, Superposition
from pipeline.studies.superposition.plateau import detect_plateaus


def detect_all(plateau: Plateau, losses: np.ndarray, seeds: list[int]) -> dict[str, dict]:
    """Per seed: final loss and the detected plateau(s) (the first one also flattened)."""
    out = {}
    for i, seed in enumerate(seeds):
        hits = detect_plateaus(losses[:, i], tol=plateau.tol, window=plateau.window, min_drop=plateau.min_drop,
                               drop_window=plateau.drop_window)
        first = hits[0] if hits else None
        out[str(seed)] = {
            "final_loss": float(losses[-1, i]),
            "plateau": first is not None,
            "plateau_loss": first.loss if first else None,
            "plateau_start_epoch": first.start_epoch if first else None,
            "plateau_end_epoch": first.end_epoch if first else None,
            "plateau_drop_epoch": first.drop_epoch if first else None,
            "plateaus": [h.as_dict() for h in hits],
        }
    return out


def variant_losses(unit: str, tied: bool, seeds: list[int], losses: np.ndarray) -> dict:
    """One variant's per-seed final and epoch-1 losses, and the spread of the final ones."""
    return {
        "variant": unit, "tied": tied, "epochs": int(losses.shape[0]),
        "final_loss": {str(s): float(losses[-1, i]) for i, s in enumerate(seeds)},
        "loss_epoch1": {str(s): float(losses[0, i]) for i, s in enumerate(seeds)},
        "final_loss_min": float(losses[-1].min()), "final_loss_median": float(np.median(losses[-1]))}


def summary(ctx: Context) -> Output:
    """Plateau-then-drop detection on every seed of every variant."""
    cfg: Superposition = ctx.cfg
    p = cfg.plateau
    variants = {}
    for v in cfg.variants:
        h = ctx.read("train", v, "history.npz")
        detected = detect_all(p, h["losses"], [int(s) for s in h["seeds"]])
        variants[v] = {"plateau_seeds": [int(s) for s, r in detected.items() if r["plateau"]],
                       "train_seconds": ctx.read("train", v, "summary.json")["train_seconds"], "seeds": detected}
        ctx.log(f"{v}: plateau-then-drop in seeds {variants[v]['plateau_seeds']}")
    metrics = {"profile": ctx.profile, "epochs": cfg.train.epochs, "lr_schedule": cfg.lr_schedule,
               "detector": {"tol": p.tol, "window": p.window, "min_drop": p.min_drop, "drop_window": p.drop_window},
               "variants": variants}
    return Output(json={"plateaus.json": metrics}, metrics=metrics,
                  run_metrics={f"{v}_plateau_seeds": len(r["plateau_seeds"]) for v, r in variants.items()})


def extract(ctx: Context, unit: str) -> Output:
    if unit == SUMMARY:
        return summary(ctx)
    h = ctx.read("train", unit, "history.npz")
    metrics = variant_losses(unit, ctx.cfg.variants[unit].tied, [int(s) for s in h["seeds"]], h["losses"])
    return Output(json={"losses.json": metrics}, metrics=metrics,
                  run_metrics={"final_loss_min": metrics["final_loss_min"],
                               "final_loss_median": metrics["final_loss_median"]})
