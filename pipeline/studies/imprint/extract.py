"""extract@<summary>: final numbers of the listed runs and of the glyph, as the study's metrics.
extract@seed_spread: the Adam and Muon epoch-1 test accuracy per init seed, their gap and its range."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from pipeline.contract import Context, Output
from pipeline.studies.imprint.config import SPREAD, ImprintParams
from pipeline.studies.imprint.glyph import glyph_info, provenance

RUN_KEYS = ("init", "optimizer", "precision", "ns_precision", "epochs", "final_test_acc", "final_train_acc",
            "spectral_norm_initial", "spectral_norm_final")
# the per-run table's settings columns (from a run's metrics.json), before its status and final numbers
TABLE_SETTINGS = ("init", "optimizer", "init_seed", "data_seed", "precision", "ns_precision", "epochs", "lr",
                  "momentum", "batch_size", "n_train", "n_test", "glyph", "glyph_scale")


def status(train_loss: list[float]) -> str:
    """``finished``, or ``failed`` when the training loss became non-finite (the child run's FAILED)."""
    return "finished" if np.all(np.isfinite(train_loss)) else "failed"


def runs_table(metrics: dict[str, dict[str, Any]], finals: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """One row per run: its settings, status and final numbers (``finals``: the summary's per-run numbers)."""
    rows = [{"run": key, **{k: m[k] for k in TABLE_SETTINGS}, "status": status(m["train_loss"]),
             **{k: v for k, v in finals[key].items() if k not in TABLE_SETTINGS}} for key, m in metrics.items()]
    return pd.DataFrame(rows)


def spread_table(spread: dict[str, Any], epoch: int = 1) -> pd.DataFrame:
    """One row per (init seed, optimiser) of the spread: settings, status, test accuracy after ``epoch``
    and at the end."""
    rows = []
    for seed, by_opt in spread["test_acc"].items():
        for opt, acc in by_opt.items():
            rows.append({"run": f"seed_spread-init{seed}-{opt}", "init": spread["init"], "optimizer": opt,
                         "init_seed": int(seed), "data_seed": spread["data_seed"], "precision": spread["precision"],
                         "ns_precision": spread["ns_precision"], "epochs": spread["epochs"],
                         "n_train": spread["n_train"], "status": status(acc),
                         f"test_acc_epoch{epoch}": acc[epoch], "final_test_acc": acc[-1]})
    return pd.DataFrame(rows)


def glyph_contrast(w2: np.ndarray, bitmap: np.ndarray) -> np.ndarray:
    """Per snapshot, mean W2 on the glyph's background minus mean W2 on its strokes: the imprint's
    strength (``glyph_scale`` at init, 0 once the glyph has faded)."""
    bg = bitmap > 0.5
    return np.array([float(w[bg].mean() - w[~bg].mean()) for w in w2])


def spread_metrics(spread: dict[str, Any], epoch: int = 1) -> dict[str, Any]:
    """Per init seed the Adam and Muon test accuracy after ``epoch`` and the gap Muon − Adam; the range
    of each over seeds, and whether Muon leads on every seed (the claim that does not hang on one draw)."""
    seeds = list(spread["test_acc"])
    adam = np.array([spread["test_acc"][s]["adam"][epoch] for s in seeds])
    muon = np.array([spread["test_acc"][s]["muon"][epoch] for s in seeds])
    gap = muon - adam

    def stats(a: np.ndarray) -> dict[str, float]:
        return {"min": float(a.min()), "median": float(np.median(a)), "max": float(a.max()),
                "range": float(a.max() - a.min())}

    return {"init": spread["init"], "epoch": epoch, "precision": spread["precision"],
            "ns_precision": spread["ns_precision"], "data_seed": spread["data_seed"], "n_train": spread["n_train"],
            "init_seeds": [int(s) for s in seeds],
            "per_seed": {s: {"adam": float(a), "muon": float(m), "gap": float(m - a)}
                         for s, a, m in zip(seeds, adam, muon)},
            "adam": stats(adam), "muon": stats(muon), "gap": stats(gap),
            "muon_ahead_on_every_seed": bool((gap > 0).all()),
            "adam_range_over_gap_median": float((adam.max() - adam.min()) / np.median(gap)) if np.median(gap) else None}


def extract_spread(ctx: Context, unit: str) -> Output:
    spread = ctx.read("train", SPREAD, "spread.json")
    m = {"profile": ctx.profile, **spread_metrics(spread)}
    a, u, g = m["adam"], m["muon"], m["gap"]
    ctx.log(f"epoch-1 test acc over {len(m['init_seeds'])} init seeds: Adam {a['min']:.4f}..{a['max']:.4f}, "
            f"Muon {u['min']:.4f}..{u['max']:.4f}, gap {g['min']:+.4f}..{g['max']:+.4f}")
    return Output(json={"spread.json": m}, metrics=m, tables={"runs.csv": spread_table(spread)},
                  run_metrics={f"{k}.{s}": m[k][s] for k in ("adam", "muon", "gap") for s in ("min", "median", "max")})


def extract(ctx: Context, unit: str) -> Output:
    cfg: ImprintParams = ctx.cfg
    runs, metrics = {}, {}
    for key in cfg.summary[unit].runs:
        m = metrics[key] = ctx.read("train", key, "metrics.json")
        runs[key] = {k: m[k] for k in RUN_KEYS}
        # first_batch_loss: the loss of epoch 1's first batch, before any update (the seed printed it)
        runs[key].update(test_acc_epoch0=m["test_acc"][0], test_acc_epoch1=m["test_acc"][1],
                         train_acc_epoch1=m["train_acc"][1], first_batch_loss=m["first_batch_loss"][0])
        if m["init"] == "glyph":  # how much of the stamped glyph W2 still holds after training
            a = ctx.read("train", key, "arrays.npz")
            c = glyph_contrast(a["w2"], a["glyph_bitmap"])
            runs[key].update(glyph_contrast_initial=float(c[0]), glyph_contrast_final=float(c[-1]),
                             glyph_contrast_retained=float(c[-1] / c[0]))
    g = glyph_info(cfg.glyph, cfg.glyph_scale)
    summary = {"profile": ctx.profile, "runs": runs,
               "glyph": {**provenance(g), "scale": cfg.glyph_scale}}
    flat = {f"{r}.{k}": v for r, d in runs.items() for k, v in d.items() if isinstance(v, float)}
    for key, r in runs.items():
        ctx.log(f"{key}: test acc epoch 1 {r['test_acc_epoch1']:.4f}, final {r['final_test_acc']:.4f}; "
                f"||W2||_2 {r['spectral_norm_initial']:.3f} -> {r['spectral_norm_final']:.3f}")
    return Output(json={"summary.json": summary}, metrics=summary, meta={"runs": list(runs), "glyph": provenance(g)},
                  tables={"runs.csv": runs_table(metrics, runs)},
                  run_metrics={**flat, "glyph.spectral_norm_scaled": g["spectral_norm_scaled"]})
