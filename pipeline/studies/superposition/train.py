"""train@<variant>: every seed of one variant trained in one batched run; returns losses and snapshots."""

from __future__ import annotations

import time

import numpy as np
import torch

from pipeline.config import ConfigError, params_file
from pipeline.contract import Context, Output, Run
from pipeline.device import cpu_threads
from pipeline.studies.superposition.config import Superposition
from pipeline.studies.superposition.model import init_batch, train_batched


def resolve_device(cfg: Superposition, pipeline_device: str) -> str:
    """``cfg.device``, with ``auto`` meaning the pipeline's device; CUDA must exist when asked for."""
    device = pipeline_device if cfg.device == "auto" else cfg.device
    if device.startswith("cuda") and not torch.cuda.is_available():
        key = "superposition.device"
        raise ConfigError(f"{params_file(key)}: {key} = {cfg.device!r} is not allowed here; "
                          "allowed: 'cpu' or 'auto' (no CUDA device)")
    return device


def train(ctx: Context, unit: str) -> Output:
    cfg: Superposition = ctx.cfg
    tp = cfg.train
    tied = cfg.variants[unit].tied
    device = resolve_device(cfg, ctx.device)
    torch.set_num_threads(cpu_threads(cfg.threads))
    ctx.log(f"{len(tp.seeds)} seeds batched, {tp.epochs} epochs, tied={tied}, lr={cfg.lr} "
            f"({cfg.lr_schedule}), {device}/{cfg.dtype}")
    w_e0, w_u0 = init_batch(tp.seeds, cfg.f, cfg.n)
    t0 = time.time()
    hist = train_batched(w_e0, w_u0, epochs=tp.epochs, lr=cfg.lr, tied=tied,
                         snapshot_every=tp.snapshot_every, lr_schedule=cfg.lr_schedule,
                         decay_total=cfg.lr_decay_total, decay_steps=cfg.lr_decay_steps, device=device,
                         dtype=getattr(torch, cfg.dtype), track=ctx.track)
    seconds = time.time() - t0
    ctx.log(f"trained in {seconds:.1f} s")
    final = {str(s): float(hist.losses[-1, i]) for i, s in enumerate(tp.seeds)}
    first = {str(s): float(hist.losses[0, i]) for i, s in enumerate(tp.seeds)}
    base = {"variant": unit, "tied": tied, "f": cfg.f, "n": cfg.n, "lr": cfg.lr,
            "lr_schedule": cfg.lr_schedule, "epochs": tp.epochs, "device": device, "dtype": cfg.dtype,
            "batched_seeds": len(tp.seeds)}
    # MLflow gets the loss every snapshot_every epochs (and the last); the full curve is in history.npz
    idx = np.unique(np.r_[np.arange(0, tp.epochs, tp.snapshot_every), tp.epochs - 1])
    runs = [Run(f"{unit}-seed{seed}", {**base, "seed": seed},
                metrics={"final_loss": final[str(seed)], "loss_epoch1": first[str(seed)]},
                series={"loss": (idx + 1, hist.losses[idx, i])},
                failed=None if np.isfinite(hist.losses[:, i]).all() else "non-finite loss")
            for i, seed in enumerate(tp.seeds)]
    history = {"seeds": np.asarray(tp.seeds), "losses": hist.losses, "snap_epochs": hist.snap_epochs,
               "w_e": hist.w_e, "w_u": hist.w_u}
    summary = {"variant": unit, "tied": tied, "seeds": tp.seeds, "epochs": tp.epochs,
               "device": device, "final_loss": final, "loss_epoch1": first}
    return Output(json={"summary.json": summary}, arrays={"history.npz": history}, runs=runs,
                  run_metrics={"train_seconds": seconds})  # wall clock: MLflow only, never in an output
