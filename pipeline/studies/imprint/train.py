"""train@<run>: one (init, optimiser) run of the imprint study. Returns W2 per epoch and the curves."""

from __future__ import annotations

import platform
import time

import numpy as np
import torch

from pipeline.contract import Context, Output, Run
from pipeline.data import load_split, normalised
from pipeline.studies.imprint.config import ImprintParams
from pipeline.studies.imprint.glyph import glyph_info
from pipeline.studies.imprint.model import DTYPES, build_mlp, stamp_glyph
from pipeline.studies.imprint.training import Data
from pipeline.studies.imprint.training import train as train_loop

DATASET = "mnist"


def load_data(cfg: ImprintParams, device: str, dtype: torch.dtype) -> Data:
    tr, te = load_split(DATASET, train=True), load_split(DATASET, train=False)
    ntr, nte = cfg.n_train or len(tr.labels), cfg.n_test or len(te.labels)
    return Data(normalised(tr.images[:ntr], cfg.mean, cfg.std, device, dtype), tr.labels[:ntr].to(device),
                normalised(te.images[:nte], cfg.mean, cfg.std, device, dtype), te.labels[:nte].to(device))


def train(ctx: Context, unit: str) -> Output:
    cfg: ImprintParams = ctx.cfg
    run = cfg.runs[unit]
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    dtype = DTYPES[cfg.precision]
    glyph = glyph_info(cfg.glyph, cfg.glyph_scale) if run.init == "glyph" else None  # fails before compute
    t0 = time.perf_counter()
    data = load_data(cfg, ctx.device, dtype)
    model = build_mlp(cfg.init_seed, dtype)
    if glyph is not None:
        stamp_glyph(model, glyph["bitmap"], cfg.glyph_scale)
    model = model.to(ctx.device)
    if cfg.compile:
        model = torch.compile(model)
    params = {
        "run": unit, "init": run.init, "optimizer": run.optimizer, "data_seed": run.data_seed,
        "init_seed": cfg.init_seed, "precision": cfg.precision, "ns_precision": cfg.ns_precision,
        "compile": cfg.compile, "glyph": cfg.glyph if glyph else "none",
        "glyph_scale": cfg.glyph_scale if glyph else 0.0, "glyph_sha256": glyph["sha256"] if glyph else "none",
        "lr": cfg.lr, "momentum": cfg.momentum, "ns_steps": cfg.ns_steps, "batch_size": cfg.batch_size,
        "test_batch_size": cfg.test_batch_size, "epochs": cfg.epochs, "n_train": int(data.x_train.shape[0]),
        "n_test": int(data.x_test.shape[0]), "device": ctx.device, "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__, "profile": ctx.profile,
    }
    ctx.log(f"{run.init} init + {run.optimizer}, {cfg.precision} (NS {cfg.ns_precision}), {cfg.epochs} epochs on "
            f"{params['n_train']}/{params['n_test']} images, {ctx.device}")
    hist = train_loop(model, data, optimizer=run.optimizer, epochs=cfg.epochs, lr=cfg.lr, momentum=cfg.momentum,
                      ns_steps=cfg.ns_steps, ns_dtype=DTYPES[cfg.ns_precision], batch_size=cfg.batch_size,
                      test_batch_size=cfg.test_batch_size, data_seed=run.data_seed, log=ctx.log)
    epochs = np.arange(cfg.epochs + 1)
    curves = {"epoch": epochs, "train_acc": np.array(hist.train_acc), "test_acc": np.array(hist.test_acc),
              "spectral_norm_w2": np.array(hist.spectral_norm_w2), "train_loss": np.array(hist.train_loss),
              "first_batch_loss": np.array(hist.first_batch_loss), "epoch_seconds": np.array(hist.epoch_seconds)}
    series = {k: (epochs, curves[k]) for k in ("test_acc", "train_acc", "spectral_norm_w2")}
    series.update({k: (epochs[1:], curves[k]) for k in ("train_loss", "first_batch_loss", "epoch_seconds")})
    metrics = {**params, **{k: v.tolist() for k, v in curves.items()},
               "final_test_acc": hist.test_acc[-1], "final_train_acc": hist.train_acc[-1],
               "spectral_norm_initial": hist.spectral_norm_w2[0], "spectral_norm_final": hist.spectral_norm_w2[-1],
               "seconds": time.perf_counter() - t0}
    arrays = {**curves, "w2": np.stack(hist.w2).astype(np.float32)}
    if glyph:
        metrics["glyph_spectral_norm_scaled"] = glyph["spectral_norm_scaled"]
        arrays["glyph_bitmap"] = glyph["bitmap"].astype(np.float32)
    child = Run(unit, params, tags={"glyph.sha256": params["glyph_sha256"], "init": run.init,
                                    "optimizer": run.optimizer},
                series=series, artifacts=["curves.npz", "metrics.json"],
                failed=None if np.all(np.isfinite(hist.train_loss)) else "non-finite training loss")
    ctx.log(f"final test acc {hist.test_acc[-1]:.4f}, ||W2||_2 {hist.spectral_norm_w2[0]:.3f} -> "
            f"{hist.spectral_norm_w2[-1]:.3f}")
    return Output(json={"metrics.json": metrics}, arrays={"arrays.npz": arrays, "curves.npz": curves},
                  runs=[child], meta={"python": platform.python_version()},
                  run_metrics={"final_test_acc": hist.test_acc[-1]})
