"""Stage contract of the imprint study (see :mod:`pipeline.stage`).

train@<run>      one (init, optimiser) run: arrays.npz (W2 snapshots, curves), metrics.json, meta.json
extract@<name>   final numbers of the listed runs -> summary.json and reports/metrics/imprint.json
render@<figure>  the seed's composite figure for one init (PNG, PDF, interactive HTML), and for the
                 glyph figure the single panels (bitmap, W2 at init, trained W2)
"""

from __future__ import annotations

import platform
import time

import numpy as np
import torch

from pipeline.config import active
from pipeline.data import load_split, normalised
from pipeline.io import atomic_dir, read_json, read_npz, write_json, write_npz
from pipeline.paths import figures_dir, metrics_file
from pipeline.stage import Figure, StageContext
from pipeline.studies.imprint import glyph as glyphs
from pipeline.studies.imprint.model import DTYPES, build_mlp, stamp_glyph
from pipeline.studies.imprint.training import Data
from pipeline.studies.imprint.training import train as train_loop

DATASET = "mnist"


def datasets(cfg) -> tuple[str, ...]:  # noqa: ANN001
    return (DATASET,)


def units(cfg, kind: str) -> list[str]:  # noqa: ANN001
    return {"train": list(cfg.runs), "extract": list(cfg.summary), "render": list(cfg.figures)}.get(kind, [])


def profile_of(ctx: StageContext):  # noqa: ANN201
    return active(vars(ctx.cfg.profiles), ctx.profile, "imprint")


def glyph_info(cfg) -> dict:  # noqa: ANN001
    bitmap = glyphs.glyph_bitmap(cfg.glyph)
    return {"bitmap": bitmap, "kind": cfg.glyph, "sha256": glyphs.bitmap_sha256(bitmap),
            "spectral_norm_scaled": glyphs.spectral_norm(cfg.glyph_scale * bitmap),
            **glyphs.ink_stats(bitmap)}


def load_data(ctx: StageContext, prof, dtype: torch.dtype) -> Data:  # noqa: ANN001
    cfg, dev = ctx.cfg, ctx.device
    tr, te = load_split(DATASET, train=True), load_split(DATASET, train=False)
    ntr, nte = prof.n_train or len(tr.labels), prof.n_test or len(te.labels)
    return Data(normalised(tr.images[:ntr], cfg.mean, cfg.std, dev, dtype), tr.labels[:ntr].to(dev),
                normalised(te.images[:nte], cfg.mean, cfg.std, dev, dtype), te.labels[:nte].to(dev))


# ----------------------------------------------------------------------------------------- train


def train(ctx: StageContext, unit: str) -> None:
    cfg, prof, run = ctx.cfg, profile_of(ctx), ctx.cfg.runs[unit]
    if prof.torch_threads:
        torch.set_num_threads(prof.torch_threads)
    dtype = DTYPES[prof.precision]
    glyph = glyph_info(cfg) if run.init == "glyph" else None  # fails loudly before any compute
    t0 = time.perf_counter()
    data = load_data(ctx, prof, dtype)
    model = build_mlp(cfg.init_seed, dtype)
    if glyph is not None:
        stamp_glyph(model, glyph["bitmap"], cfg.glyph_scale)
    model = model.to(ctx.device)
    if cfg.compile:
        model = torch.compile(model)
    params = {
        "run": unit, "init": run.init, "optimizer": run.optimizer, "data_seed": run.data_seed,
        "init_seed": cfg.init_seed, "precision": prof.precision,
        "ns_precision": prof.ns_precision, "compile": cfg.compile,
        "glyph": cfg.glyph if glyph else "none", "glyph_scale": cfg.glyph_scale if glyph else 0.0,
        "glyph_sha256": glyph["sha256"] if glyph else "none", "lr": cfg.lr, "momentum": cfg.momentum,
        "ns_steps": cfg.ns_steps, "batch_size": cfg.batch_size, "test_batch_size": cfg.test_batch_size,
        "epochs": prof.epochs, "n_train": int(data.x_train.shape[0]), "n_test": int(data.x_test.shape[0]),
        "device": ctx.device, "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
        "profile": ctx.profile,
    }
    ctx.log(f"{run.init} init + {run.optimizer}, {prof.precision} (NS {prof.ns_precision}), "
            f"{prof.epochs} epochs on "
            f"{params['n_train']}/{params['n_test']} images, {ctx.device}")
    tags = {"glyph.sha256": params["glyph_sha256"], "init": run.init, "optimizer": run.optimizer}
    with ctx.tracker.child(unit, params, tags=tags) as child:
        hist = train_loop(model, data, optimizer=run.optimizer, epochs=prof.epochs, lr=cfg.lr,
                          momentum=cfg.momentum, ns_steps=cfg.ns_steps,
                          ns_dtype=DTYPES[prof.ns_precision], batch_size=cfg.batch_size,
                          test_batch_size=cfg.test_batch_size, data_seed=run.data_seed, log=ctx.log)
        epochs = np.arange(prof.epochs + 1)
        curves = {"epoch": epochs, "train_acc": np.array(hist.train_acc), "test_acc": np.array(hist.test_acc),
                  "spectral_norm_w2": np.array(hist.spectral_norm_w2),
                  "train_loss": np.array(hist.train_loss),
                  "first_batch_loss": np.array(hist.first_batch_loss),
                  "epoch_seconds": np.array(hist.epoch_seconds)}
        for key in ("test_acc", "train_acc", "spectral_norm_w2"):
            child.log_series(key, curves[key], epochs)
        for key in ("train_loss", "first_batch_loss", "epoch_seconds"):
            child.log_series(key, curves[key], epochs[1:])
        if not np.all(np.isfinite(hist.train_loss)):
            child.fail("non-finite training loss")
        metrics = {**params, **{k: v.tolist() for k, v in curves.items()},
                   "final_test_acc": hist.test_acc[-1], "final_train_acc": hist.train_acc[-1],
                   "spectral_norm_initial": hist.spectral_norm_w2[0],
                   "spectral_norm_final": hist.spectral_norm_w2[-1],
                   "seconds": time.perf_counter() - t0}
        if glyph:
            metrics["glyph_spectral_norm_scaled"] = glyph["spectral_norm_scaled"]
        with atomic_dir(ctx.out_dir) as tmp:
            arrays = {**curves, "w2": np.stack(hist.w2).astype(np.float32)}
            if glyph:
                arrays["glyph_bitmap"] = glyph["bitmap"].astype(np.float32)
            write_npz(tmp / "arrays.npz", **arrays)
            write_npz(tmp / "curves.npz", **curves)
            write_json(tmp / "metrics.json", metrics)
            child.log_artifact(tmp / "curves.npz")
            child.log_artifact(tmp / "metrics.json")
            ctx.write_meta(tmp, mlflow_children={unit: child.run_id}, python=platform.python_version())
    ctx.log(f"final test acc {hist.test_acc[-1]:.4f}, ||W2||_2 {hist.spectral_norm_w2[0]:.3f} -> "
            f"{hist.spectral_norm_w2[-1]:.3f}")


# ----------------------------------------------------------------------------------------- extract


def extract(ctx: StageContext, unit: str) -> None:
    """Final numbers of the listed runs (and the glyph's) into the study metrics file."""
    cfg = ctx.cfg
    runs = {}
    for key in cfg.summary[unit].runs:
        m = read_json(ctx.unit_dir("train", key) / "metrics.json")
        runs[key] = {k: m[k] for k in ("init", "optimizer", "precision", "ns_precision", "epochs",
                                       "final_test_acc", "final_train_acc", "spectral_norm_initial",
                                       "spectral_norm_final")}
        runs[key]["test_acc_epoch1"] = m["test_acc"][1]
        runs[key]["train_acc_epoch1"] = m["train_acc"][1]
        runs[key]["seconds"] = m["seconds"]
    g = glyph_info(cfg)
    summary = {"profile": ctx.profile, "runs": runs,
               "glyph": {"kind": g["kind"], "sha256": g["sha256"], "scale": cfg.glyph_scale,
                         "spectral_norm_scaled": g["spectral_norm_scaled"],
                         "ink_fraction": g["ink_fraction"]}}
    flat = {f"{r}.{k}": v for r, d in runs.items() for k, v in d.items() if isinstance(v, float)}
    ctx.tracker.parent.log_metrics({**flat, "glyph.spectral_norm_scaled": g["spectral_norm_scaled"]})
    with atomic_dir(ctx.out_dir) as tmp:
        write_json(tmp / "summary.json", summary)
        ctx.write_meta(tmp, runs=list(runs))
    write_json(metrics_file("imprint"), summary)
    for key, r in runs.items():
        ctx.log(f"{key}: test acc epoch 1 {r['test_acc_epoch1']:.4f}, final {r['final_test_acc']:.4f}; "
                f"||W2||_2 {r['spectral_norm_initial']:.3f} -> {r['spectral_norm_final']:.3f}")


# ----------------------------------------------------------------------------------------- render


def render(ctx: StageContext, unit: str) -> list[Figure]:
    from pipeline.studies.imprint import figures as figs

    spec = ctx.cfg.figures[unit]
    runs = {opt: getattr(spec, opt) for opt in ("adam", "muon")}
    arrays = {opt: read_npz(ctx.unit_dir("train", key) / "arrays.npz") for opt, key in runs.items()}
    metas = {opt: read_json(ctx.unit_dir("train", key) / "metrics.json") for opt, key in runs.items()}
    init = metas["adam"]["init"]
    out = figures_dir("imprint") / unit
    sources = [("train", key) for key in runs.values()]
    with atomic_dir(out) as tmp:
        composite = figs.composite(arrays, metas, spec, tmp / f"{unit}_composite")
        html = figs.composite_html(arrays, metas, spec, tmp / f"{unit}_interactive.html")
        panels = figs.glyph_panels(arrays, metas, spec, tmp / f"{unit}_panels") if spec.glyph_panels else []
    moved = lambda paths: [out / p.name for p in paths]  # noqa: E731
    what = "glyph '中'" if init == "glyph" else "random"
    result = [Figure(
        id=unit, files=moved([*composite, html]), sources=sources,
        seed_figure=("play_15_0 (glyph init: 'SHAPE A INIT')" if init == "glyph"
                     else "play_16_0 (random init)"),
        caption=(f"{what} init: W2 (128x128) of the Adam and Muon runs at each epoch, test accuracy "
                 f"and spectral norm of W2 per epoch ({metas['adam']['precision']}, "
                 f"{metas['adam']['epochs']} epochs, profile {ctx.profile}). HTML: epoch slider."))]
    if panels:
        result.append(Figure(
            id=f"{unit}_panels", files=moved(panels), sources=sources,
            seed_figure="play_5_1, play_7_0, play_10_0, play_13_0 (single panels)",
            caption="The glyph bitmap, W2 at glyph init, and W2 after training with Adam and with Muon."))
    return result
