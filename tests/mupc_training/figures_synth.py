"""Synthetic sweeps in the train units' format (``index.json``, ``runs/<hash>/config.json`` +
``arrays.npz``) with smoke-like grids, for the figure renderers' tests. Some runs stop early
(diverged, empty arrays)."""

from __future__ import annotations

import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np

from pipeline.io import write_json, write_npz
from pipeline.studies.mupc.engine.runs import RunConfig
from pipeline.studies.mupc.training.sweep_expansion import run_record, sweep_index
from pipeline.writer import read_file

ITERS_PER_EPOCH = 32
ACTS = ("linear", "tanh", "relu")


def _pc(**kw) -> RunConfig:
    base = dict(dataset="mnist", N=16, H=2, act="linear", param="sp", init="standard", skips=False, seed=0,
                epochs=1, test_every=8, param_lr=1e-3, T=20, act_lr=0.5)
    base.update(kw)
    return RunConfig(**base)


def grids() -> dict[str, list[RunConfig]]:
    g: dict[str, list[RunConfig]] = {}

    def sp(sweep: str, hs_for, dss=("mnist",), **kw) -> None:
        g[sweep] = [_pc(dataset=ds, act=act, H=H, act_lr=lr, seed=s, metrics="hessian", **kw)
                    for ds in dss for act in ACTS for H in hs_for(act)
                    for lr in (0.5, 0.05) for s in (0, 1)]

    sp("S1", lambda a: (2, 4), dss=("mnist", "fashion_mnist"))
    sp("S2", lambda a: (2, 4), act_optim="adam")
    sp("S3", lambda a: (2, 4), skips=True)
    sp("S4", lambda a: (2, 4, 8) if a != "relu" else (2, 4), init="orthogonal")
    g["S5"] = [_pc(act_lr=0.5, activity_decay=d, seed=s) for d in (0.1, 0.0) for s in (0, 1)]
    mu = dict(param="mupc", init="standard_gauss", skips=True)
    g["S6"] = [_pc(H=H, T=H, act=a, act_lr=al, param_lr=pl, seed=s, **mu)
               for a in ACTS for H in (2, 4, 8) for al in (1.0, 0.1) for pl in (0.1, 0.01) for s in (0, 1)]
    g["S7"] = [_pc(N=N, H=2, T=2, act=a, act_lr=al, param_lr=pl, seed=s, **mu)
               for a in ACTS for N in (8, 16, 32) for al in (1.0, 0.1) for pl in (0.1, 0.01) for s in (0, 1)]
    g["S8"] = [replace(rc, dataset="fashion_mnist") for rc in g["S7"] if rc.N == 16]
    g["S9"] = [_pc(H=H, T=H, act=a, act_lr=0.5, param_lr=0.1, seed=s, metrics="hessian", **mu)
               for a in ACTS for H in (2, 4) for s in (0, 1)]
    g["S10"] = [_pc(H=8, T=8, act="relu", act_lr=0.5, param_lr=0.1, seed=s, epochs=2, **mu) for s in (0, 1)]
    g["S11"] = [_pc(dataset="fashion_mnist", H=8, T=8, act="relu", act_lr=0.5, param_lr=0.05, seed=s,
                    epochs=2, **mu) for s in (0, 1)]
    g["S12"] = [_pc(H=H, T=H, act=a, skips=True, act_lr=0.1, param_lr=0.01, seed=s)
                for a in ACTS for H in (2, 4, 8) for s in (0, 1)]
    g["S13"] = [_pc(H=8, T=8, act=a, skips=True, act_lr=al, param_lr=pl, seed=0)  # (0.1, 1): no evaluation
                for a in ACTS for al in (1.0, 0.1) for pl in (0.1, 0.01)]
    bp = dict(method="bp", param="depth_mup", init="standard_gauss", skips=True, T=0, act_lr=0.0)
    g["B1"] = ([_pc(H=2, act=a, param_lr=lr, seed=s, **bp) for a in ACTS for lr in (0.01, 0.001) for s in (0, 1)]
               + [_pc(dataset=ds, H=2, act="relu", epochs=2, param_lr=lr, seed=s, **bp)
                  for ds in ("mnist", "fashion_mnist") for lr in (0.01, 0.001) for s in (0, 1)])
    g["B2"] = ([_pc(H=H, act="relu", param_lr=lr, seed=s, **bp) for H in (2, 8) for lr in (0.01, 0.001)
                for s in (0, 1)]
               + [_pc(dataset=ds, H=8, act="relu", epochs=2, param_lr=lr, seed=s, **bp)
                  for ds in ("mnist", "fashion_mnist") for lr in (0.01, 0.001) for s in (0, 1)])
    return g


def arrays_for(rc: RunConfig) -> tuple[dict[str, np.ndarray], str]:
    rng = np.random.default_rng(zlib.crc32(rc.hash().encode()))
    n_iter = ITERS_PER_EPOCH * rc.epochs
    stop, status = n_iter, "finished"
    if rc.method == "pc" and rc.act_lr >= 1.0 and rc.seed == 1:
        stop, status = 2 * rc.test_every + 3, "diverged"  # two evaluations, then NaN loss
    if rc.method == "pc" and rc.act_lr >= 1.0 and rc.H == 8 and rc.seed == 0 and rc.param_lr == 0.1:
        stop, status = 3, "diverged"  # no evaluation at all
    quality = 60 + 30 * rng.random() - 2 * rc.H
    losses = 0.5 * np.exp(-np.arange(stop) / 20) + 0.01 * rng.random(stop)
    if status == "diverged":
        losses[-1] = np.nan
    n_eval = stop // rc.test_every
    accs = quality * (1 - np.exp(-(np.arange(n_eval) + 1) / 2)) + 20 + rng.normal(0, 1, n_eval)
    out = {"batch_train_losses": losses, "test_accs": accs, "test_losses": 0.1 * np.ones(n_eval)}
    if rc.metrics == "hessian":
        rows = n_eval + 1
        out["lambda_min"] = 0.1 + 0.01 * rng.random(rows)
        out["lambda_max"] = 10 * (1 + np.arange(rows)) * (1 + 0.1 * rng.random(rows))
        out["cond_nums"] = np.abs(out["lambda_max"]) / np.abs(out["lambda_min"])
    return out, status


def write_sweeps(root: Path, g: dict[str, list[RunConfig]]) -> None:
    """``root/<sweep>/runs/<hash>/{config.json,arrays.npz}`` + ``root/<sweep>/{index.json,meta.json}``."""
    for sweep, runs in g.items():
        records = {}
        for rc in runs:
            arrays, status = arrays_for(rc)
            d = root / sweep / "runs" / rc.hash()
            write_npz(d / "arrays.npz", **arrays)
            records[rc.hash()] = run_record(rc, status, {"stop_iter": len(arrays["batch_train_losses"])})
            write_json(d / "config.json", records[rc.hash()])
        write_json(root / sweep / "index.json", sweep_index(sweep, "smoke", runs, records))
        write_json(root / sweep / "meta.json", {"stage": f"mupc_training_train@{sweep}", })


def reader(root: Path):
    """A stage reader (``ctx.read``) over the synthetic train units under ``root``."""

    def read(kind: str, unit: str, name: str):
        assert kind == "train", kind
        path = root / unit / name
        if not path.exists():
            raise FileNotFoundError(path)
        return read_file(path)

    return read


def arrays_short(rc: RunConfig, evals_per_epoch: int = 3) -> dict[str, np.ndarray]:
    """Arrays of a finished run with a few evaluations per epoch whatever its ``test_every`` (a profile's
    grid shape at little cost): ``evals_per_epoch`` test accuracies per epoch, a loss per iteration of
    those evaluations, Hessian extremes per evaluation (+ init) for Hessian sweeps."""
    rng = np.random.default_rng(zlib.crc32(rc.hash().encode()))
    n_eval = evals_per_epoch * rc.epochs
    quality = 60 + 30 * rng.random()
    accs = quality * (1 - np.exp(-(np.arange(n_eval) + 1) / 2)) + 10 + rng.normal(0, 1, n_eval)
    n_loss = n_eval * min(rc.test_every, 16)
    out = {"batch_train_losses": 0.5 * np.exp(-np.arange(n_loss) / 20) + 0.01 * rng.random(n_loss),
           "test_accs": accs, "test_losses": 0.1 * np.ones(n_eval)}
    if rc.metrics == "hessian":
        rows = n_eval + 1
        out["lambda_min"] = 0.1 + 0.01 * rng.random(rows)
        out["lambda_max"] = 10 * (1 + np.arange(rows)) * (1 + 0.1 * rng.random(rows))
        out["cond_nums"] = out["lambda_max"] / out["lambda_min"]
    return out
