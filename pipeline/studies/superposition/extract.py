"""extract@<variant>: per-seed final and epoch-1 losses; extract@summary: plateau detection on every seed.

Both are the study's metrics (``reports/metrics/superposition_extract@<unit>.json``); the summary's
detections are also the file the loss-curve figure draws (``plateaus.json``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from pipeline.contract import Context, Output
from pipeline.studies.superposition.config import Plateau, Superposition
from pipeline.studies.superposition.plateau import detect_plateaus


def status(losses: Any) -> str:
    """``finished``, or ``failed`` when the loss became non-finite (the seed's child run is FAILED)."""
    return "finished" if np.isfinite(losses).all() else "failed"


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


def feature_directions(w_e: np.ndarray, min_norm: float = 0.1, tol_deg: float = 5.0) -> dict[str, int]:
    """Final feature geometry of one seed: how many features W_E embeds (column norm > ``min_norm``)
    and on how many distinct directions of the hidden plane they lie (angles within ``tol_deg``
    count as one direction, chained in angle order around the circle)."""
    norms = np.linalg.norm(w_e, axis=0)
    ang = np.sort(np.degrees(np.arctan2(w_e[1], w_e[0]))[norms > min_norm])
    if ang.size == 0:
        return {"represented_features": 0, "directions": 0}
    gaps = np.diff(np.append(ang, ang[0] + 360.0))
    return {"represented_features": int(ang.size), "directions": max(1, int(np.sum(gaps > tol_deg)))}


def features_above_init(w_e0: np.ndarray, w_e: np.ndarray) -> int:
    """How many features' W_E columns end longer than the longest column at init (0 at init by
    construction: what training made, not what the draw had)."""
    return int(np.sum(np.linalg.norm(w_e, axis=0) > np.linalg.norm(w_e0, axis=0).max()))


def variant_geometry(seeds: list[int], w_e: np.ndarray, losses: np.ndarray) -> dict[str, dict]:
    """Per seed: the final W_E geometry, the features represented at init and grown above init, and the
    largest rise of the loss from one epoch to the next (``w_e[0]``: the init snapshot)."""
    rises = np.max(np.diff(losses, axis=0), axis=0) if losses.shape[0] > 1 else np.zeros(len(seeds))
    return {str(s): {**feature_directions(w_e[-1, i]), "max_loss_increase": float(rises[i]),
                     "represented_features_initial": feature_directions(w_e[0, i])["represented_features"],
                     "features_above_init": features_above_init(w_e[0, i], w_e[-1, i])}
            for i, s in enumerate(seeds)}


NOTE_EPOCH = 8500  # the note: "compare what happens here at 8500 epochs to the final behaviour!"
DIAGONAL_LEVELS = (0.1, 0.3, 0.5)  # the spec's §3 counts of ReLU(M)'s diagonal (seed 42: 16, 4, 1)


def unembedding_alignment(w_e: np.ndarray, w_u: np.ndarray, min_norm: float = 0.1) -> float | None:
    """The smallest cosine between a feature's W_U row and its W_E column, over the features W_E embeds
    (column norm > ``min_norm``); 1 for the tied model (W_U = W_Eᵀ); None when W_E embeds none."""
    e_norm, u_norm = np.linalg.norm(w_e, axis=0), np.linalg.norm(w_u, axis=1)
    keep = (e_norm > min_norm) & (u_norm > 0)
    if not keep.any():
        return None
    cos = np.sum(w_u * w_e.T, axis=1)[keep] / (e_norm[keep] * u_norm[keep])
    return float(cos.min())


def heatmap_numbers(w_e: np.ndarray, w_u: np.ndarray) -> dict[str, Any]:
    """What the heat maps of M = W_U·W_E and ReLU(M) show for one snapshot: how many diagonal entries of
    ReLU(M) exceed each of ``DIAGONAL_LEVELS``, its largest off-diagonal entry, and M's most negative entry."""
    m = w_u @ w_e
    relu = np.maximum(m, 0.0)
    diag = np.diag(relu)
    off = relu - np.diag(diag)
    return {"relu_m_diagonal_above": {f"{t:g}": int(np.sum(diag > t)) for t in DIAGONAL_LEVELS},
            "relu_m_max_offdiagonal": float(off.max()), "m_min": float(m.min())}


def variant_heatmaps(seeds: list[int], w_e: np.ndarray, w_u: np.ndarray, snap_epochs: np.ndarray) -> dict[str, dict]:
    """Per seed, at the end: the W_U alignment and the heat-map numbers (:func:`heatmap_numbers`); the same at
    init (``…_initial``) and M's most negative entry at the note's epoch 8,500 where a snapshot holds it."""
    epochs = [int(e) for e in snap_epochs]
    note = epochs.index(NOTE_EPOCH) if NOTE_EPOCH in epochs and epochs[-1] > NOTE_EPOCH else None
    out = {}
    for i, s in enumerate(seeds):
        final, initial = heatmap_numbers(w_e[-1, i], w_u[-1, i]), heatmap_numbers(w_e[0, i], w_u[0, i])
        row = {**final, "w_u_alignment_min": unembedding_alignment(w_e[-1, i], w_u[-1, i]),
               "w_u_alignment_min_initial": unembedding_alignment(w_e[0, i], w_u[0, i]),
               "relu_m_diagonal_above_initial": initial["relu_m_diagonal_above"], "m_min_initial": initial["m_min"]}
        if note is not None:
            row[f"m_min_epoch{NOTE_EPOCH}"] = heatmap_numbers(w_e[note, i], w_u[note, i])["m_min"]
        out[str(s)] = row
    return out


def extract_summary(ctx: Context, unit: str) -> Output:
    """Plateau-then-drop detection on every seed of every variant."""
    cfg: Superposition = ctx.cfg
    p = cfg.plateau
    variants = {}
    for v in cfg.variants:
        h = ctx.read("train", v, "history.npz")
        detected = detect_all(p, h["losses"], [int(s) for s in h["seeds"]])
        variants[v] = {"plateau_seeds": [int(s) for s, r in detected.items() if r["plateau"]], "seeds": detected}
        ctx.log(f"{v}: plateau-then-drop in seeds {variants[v]['plateau_seeds']}")
    metrics = {"profile": ctx.profile, "epochs": cfg.train.epochs, "lr_schedule": cfg.lr_schedule,
               "detector": {"tol": p.tol, "window": p.window, "min_drop": p.min_drop, "drop_window": p.drop_window},
               "variants": variants}
    rows = [{"variant": v, "tied": cfg.variants[v].tied, "seed": int(seed), "epochs": cfg.train.epochs,
             "lr": cfg.lr, "lr_schedule": cfg.lr_schedule, "status": status(r["final_loss"]),
             **{k: r[k] for k in ("final_loss", "plateau", "plateau_loss", "plateau_start_epoch", "plateau_end_epoch",
                                  "plateau_drop_epoch")}, "plateaus": len(r["plateaus"])}
            for v, d in variants.items() for seed, r in d["seeds"].items()]
    return Output(json={"plateaus.json": metrics}, metrics=metrics, tables={"runs.csv": pd.DataFrame(rows)},
                  run_metrics={f"{v}_plateau_seeds": len(r["plateau_seeds"]) for v, r in variants.items()})


def extract(ctx: Context, unit: str) -> Output:
    """One variant's per-seed losses, feature geometry and heat-map numbers."""
    h = ctx.read("train", unit, "history.npz")
    seeds = [int(s) for s in h["seeds"]]
    metrics = variant_losses(unit, ctx.cfg.variants[unit].tied, seeds, h["losses"])
    metrics["final_geometry"] = variant_geometry(seeds, h["w_e"], h["losses"])
    heat = variant_heatmaps(seeds, h["w_e"], h["w_u"], h["snap_epochs"])
    for seed, row in metrics["final_geometry"].items():
        row.update(heat[seed])
    cfg: Superposition = ctx.cfg
    rows = [{"variant": unit, "tied": cfg.variants[unit].tied, "seed": s, "epochs": metrics["epochs"], "f": cfg.f,
             "n": cfg.n, "lr": cfg.lr, "lr_schedule": cfg.lr_schedule, "status": status(h["losses"][:, i]),
             "final_loss": metrics["final_loss"][str(s)], "loss_epoch1": metrics["loss_epoch1"][str(s)],
             **{k: v for k, v in metrics["final_geometry"][str(s)].items() if not isinstance(v, dict)}}
            for i, s in enumerate(seeds)]
    return Output(json={"losses.json": metrics}, metrics=metrics, tables={"runs.csv": pd.DataFrame(rows)},
                  run_metrics={"final_loss_min": metrics["final_loss_min"],
                               "final_loss_median": metrics["final_loss_median"]})
