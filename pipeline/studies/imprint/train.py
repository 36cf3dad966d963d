"""train@<run>: one (init, optimiser) run of the imprint study. Returns W2 per epoch and the curves.
train@seed_spread: the spread's init seeds, each trained with Adam and with Muon; test accuracy per epoch."""

from __future__ import annotations

import platform
import time

import numpy as np
import torch

from pipeline.contract import Context, Output, Run
from pipeline.data import load_split, normalised
from pipeline.device import cpu_threads
from pipeline.studies.imprint.config import SPREAD, ImprintParams
from pipeline.studies.imprint.glyph import glyph_info, provenance
from pipeline.studies.imprint.model import DTYPES, build_mlp, stamp_glyph
from pipeline.studies.imprint.muon import NewtonSchulz
from pipeline.studies.imprint.training import Data
from pipeline.studies.imprint.training import train as train_loop

DATASET = "mnist"


def load_data(cfg: ImprintParams, device: str, dtype: torch.dtype) -> Data:
    tr, te = load_split(DATASET, train=True), load_split(DATASET, train=False)
    ntr, nte = cfg.n_train or len(tr.labels), cfg.n_test or len(te.labels)
    return Data(normalised(tr.images[:ntr], cfg.mean, cfg.std, device, dtype), tr.labels[:ntr].to(device),
                normalised(te.images[:nte], cfg.mean, cfg.std, device, dtype), te.labels[:nte].to(device))


def ns_meta(ns: NewtonSchulz, optimizer: str) -> dict:
    """Provenance of the Newton-Schulz step: asked to compile, compiled, why not."""
    if optimizer != "muon":
        return {"ns_compile": None}
    return {"ns_compile": {"requested": ns.requested, "compiled": ns.compiled, "fallback": ns.fallback}}


def init_model(cfg: ImprintParams, init_seed: int, glyph: dict | None, dtype: torch.dtype, device: str):
    """The seed's init from ``init_seed``, the glyph stamped when given, on the device (compiled if asked)."""
    model = build_mlp(init_seed, dtype)
    if glyph is not None:
        stamp_glyph(model, glyph["bitmap"], cfg.glyph_scale)
    model = model.to(device)
    return torch.compile(model) if cfg.compile else model


def train_spread(ctx: Context, unit: str) -> Output:
    """Every init seed of the spread, with Adam and with Muon, from the same data order."""
    cfg: ImprintParams = ctx.cfg
    set_threads(cfg)
    sp = cfg.spread
    dtype = DTYPES[cfg.precision]
    glyph = glyph_info(cfg.glyph, cfg.glyph_scale) if sp.init == "glyph" else None
    t0 = time.perf_counter()
    data = load_data(cfg, ctx.device, dtype)
    ns = NewtonSchulz(cfg.ns_compile)
    acc = np.zeros((len(sp.init_seeds), 2, sp.epochs + 1))
    seconds = np.zeros((len(sp.init_seeds), 2))
    runs = []
    for i, seed in enumerate(sp.init_seeds):
        for j, opt in enumerate(("adam", "muon")):
            t1 = time.perf_counter()
            model = init_model(cfg, seed, glyph, dtype, ctx.device)
            hist = train_loop(model, data, optimizer=opt, epochs=sp.epochs, lr=cfg.lr, momentum=cfg.momentum,
                              ns_steps=cfg.ns_steps, ns_dtype=DTYPES[cfg.ns_precision], batch_size=cfg.batch_size,
                              test_batch_size=cfg.test_batch_size, data_seed=sp.data_seed, ns=ns, train_acc=False)
            acc[i, j] = hist.test_acc
            seconds[i, j] = time.perf_counter() - t1
            runs.append(Run(f"{SPREAD}-init{seed}-{opt}",
                            {"init": sp.init, "optimizer": opt, "init_seed": seed, "data_seed": sp.data_seed,
                             "epochs": sp.epochs, "precision": cfg.precision, "ns_precision": cfg.ns_precision},
                            metrics={"test_acc_epoch1": hist.test_acc[1], "seconds": seconds[i, j]},
                            series={"test_acc": (list(range(sp.epochs + 1)), hist.test_acc)}))
        ctx.log(f"init seed {seed}: epoch-1 test acc Adam {acc[i, 0, 1]:.4f}, Muon {acc[i, 1, 1]:.4f} "
                f"({seconds[i].sum():.0f} s)")
    result = {"init": sp.init, "init_seeds": sp.init_seeds, "epochs": sp.epochs, "data_seed": sp.data_seed,
              "precision": cfg.precision, "ns_precision": cfg.ns_precision, "n_train": int(data.x_train.shape[0]),
              "test_acc": {str(s): {"adam": acc[i, 0].tolist(), "muon": acc[i, 1].tolist()}
                           for i, s in enumerate(sp.init_seeds)}}
    meta = {"glyph": provenance(glyph) if glyph else None, **ns_meta(ns, "muon"), "python": platform.python_version()}
    return Output(json={"spread.json": result},
                  arrays={"spread.npz": {"init_seeds": np.asarray(sp.init_seeds), "test_acc": acc}},
                  runs=runs, meta=meta, run_metrics={"seconds": time.perf_counter() - t0})  # times: MLflow only


def set_threads(cfg: ImprintParams) -> None:
    if cfg.torch_threads:
        torch.set_num_threads(cpu_threads(cfg.torch_threads))


def train(ctx: Context, unit: str) -> Output:
    """One (init, optimiser) run."""
    cfg: ImprintParams = ctx.cfg
    set_threads(cfg)
    run = cfg.runs[unit]
    dtype = DTYPES[cfg.precision]
    glyph = glyph_info(cfg.glyph, cfg.glyph_scale) if run.init == "glyph" else None  # fails before compute
    t0 = time.perf_counter()
    data = load_data(cfg, ctx.device, dtype)
    model = init_model(cfg, cfg.init_seed, glyph, dtype, ctx.device)
    ns = NewtonSchulz(cfg.ns_compile)
    params = {
        "run": unit, "init": run.init, "optimizer": run.optimizer, "data_seed": run.data_seed,
        "init_seed": cfg.init_seed, "precision": cfg.precision, "ns_precision": cfg.ns_precision,
        "compile": cfg.compile, "ns_compile": cfg.ns_compile, "glyph": glyph["shape"] if glyph else "none",
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
                      test_batch_size=cfg.test_batch_size, data_seed=run.data_seed, ns=ns, log=ctx.log,
                      track=ctx.track)
    if ns.fallback:
        ctx.log(f"Newton-Schulz step not compiled: {ns.fallback}")
    epochs = np.arange(cfg.epochs + 1)
    curves = {"epoch": epochs, "train_acc": np.array(hist.train_acc), "test_acc": np.array(hist.test_acc),
              "spectral_norm_w2": np.array(hist.spectral_norm_w2), "train_loss": np.array(hist.train_loss),
              "first_batch_loss": np.array(hist.first_batch_loss)}
    series = {k: (epochs, curves[k]) for k in ("test_acc", "train_acc", "spectral_norm_w2")}
    series.update({k: (epochs[1:], curves[k]) for k in ("train_loss", "first_batch_loss")})
    series["epoch_seconds"] = (epochs[1:], hist.epoch_seconds)  # wall clock: MLflow only, never in an output
    metrics = {**params, **{k: v.tolist() for k, v in curves.items()},
               "final_test_acc": hist.test_acc[-1], "final_train_acc": hist.train_acc[-1],
               "spectral_norm_initial": hist.spectral_norm_w2[0], "spectral_norm_final": hist.spectral_norm_w2[-1]}
    arrays = {**curves, "w2": np.stack(hist.w2).astype(np.float32)}
    metrics.update(ns_meta(ns, run.optimizer))
    if glyph:
        metrics["glyph_provenance"] = provenance(glyph)
        metrics["glyph_spectral_norm_scaled"] = glyph["spectral_norm_scaled"]
        arrays["glyph_bitmap"] = glyph["bitmap"].astype(np.float32)
    child = Run(unit, params, tags={"glyph.sha256": params["glyph_sha256"], "init": run.init,
                                    "optimizer": run.optimizer},
                series=series, artifacts=["curves.npz", "metrics.json"],
                failed=None if np.all(np.isfinite(hist.train_loss)) else "non-finite training loss")
    ctx.log(f"final test acc {hist.test_acc[-1]:.4f}, ||W2||_2 {hist.spectral_norm_w2[0]:.3f} -> "
            f"{hist.spectral_norm_w2[-1]:.3f}")
    return Output(json={"metrics.json": metrics}, arrays={"arrays.npz": arrays, "curves.npz": curves},
                  runs=[child], run_metrics={"final_test_acc": hist.test_acc[-1], "seconds": time.perf_counter() - t0},
                  meta={"python": platform.python_version(), "glyph": provenance(glyph) if glyph else None,
                        **ns_meta(ns, run.optimizer)})
