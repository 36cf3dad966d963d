"""extract@<summary>: final numbers of the listed runs and of the glyph, as the study's metrics."""

from __future__ import annotations

import numpy as np

from pipeline.contract import Context, Output
from pipeline.studies.imprint.config import ImprintParams
from pipeline.studies.imprint.glyph import glyph_info

RUN_KEYS = ("init", "optimizer", "precision", "ns_precision", "epochs", "final_test_acc", "final_train_acc",
            "spectral_norm_initial", "spectral_norm_final")


def glyph_contrast(w2: np.ndarray, bitmap: np.ndarray) -> np.ndarray:
    """Per snapshot, mean W2 on the glyph's background minus mean W2 on its strokes: the imprint's
    strength (``glyph_scale`` at init, 0 once the glyph has faded)."""
    bg = bitmap > 0.5
    return np.array([float(w[bg].mean() - w[~bg].mean()) for w in w2])


def extract(ctx: Context, unit: str) -> Output:
    cfg: ImprintParams = ctx.cfg
    runs = {}
    for key in cfg.summary[unit].runs:
        m = ctx.read("train", key, "metrics.json")
        runs[key] = {k: m[k] for k in RUN_KEYS}
        runs[key].update(test_acc_epoch1=m["test_acc"][1], train_acc_epoch1=m["train_acc"][1], seconds=m["seconds"])
        if m["init"] == "glyph":  # how much of the stamped glyph W2 still holds after training
            a = ctx.read("train", key, "arrays.npz")
            c = glyph_contrast(a["w2"], a["glyph_bitmap"])
            runs[key].update(glyph_contrast_initial=float(c[0]), glyph_contrast_final=float(c[-1]),
                             glyph_contrast_retained=float(c[-1] / c[0]))
    g = glyph_info(cfg.glyph, cfg.glyph_scale)
    summary = {"profile": ctx.profile, "runs": runs,
               "glyph": {"kind": g["kind"], "sha256": g["sha256"], "scale": cfg.glyph_scale,
                         "spectral_norm_scaled": g["spectral_norm_scaled"], "ink_fraction": g["ink_fraction"]}}
    flat = {f"{r}.{k}": v for r, d in runs.items() for k, v in d.items() if isinstance(v, float)}
    for key, r in runs.items():
        ctx.log(f"{key}: test acc epoch 1 {r['test_acc_epoch1']:.4f}, final {r['final_test_acc']:.4f}; "
                f"||W2||_2 {r['spectral_norm_initial']:.3f} -> {r['spectral_norm_final']:.3f}")
    return Output(json={"summary.json": summary}, metrics=summary, meta={"runs": list(runs)},
                  run_metrics={**flat, "glyph.spectral_norm_scaled": g["spectral_norm_scaled"]})
