"""Sweeps → runs, and the records of a sweep stage.

* :func:`expand` turns one sweep of the resolved section into its :class:`RunConfig` list (the union
  of the cartesian products of its grid blocks, first-occurrence order, duplicates dropped).
* A sweep unit owns ``artifacts/mupc_training/train/<sweep>/``; each finished run is a part
  ``runs/<rc.hash()>/`` with ``config.json`` (:func:`run_record`) and ``arrays.npz`` (see ``runs.py``),
  and the unit's final output is ``index.json`` (:func:`sweep_index`) listing the runs of the active
  profile (RunConfig fields, key, hash, status): what the renderers read.
* :func:`stack_groups` partitions runs into groups trained together along the run axis: runs that
  share every shape-relevant field (dataset, N, H, act, skips, init, param, T, act optim, activity
  decay, epochs, test_every, metrics, method) and differ only in seed, act lr and param lr.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from pipeline.studies.mupc.engine.runs import STATUSES, RunConfig
from pipeline.studies.mupc.training.config import Grid, Sweep, TrainingParams

CONFIG_FILE = "config.json"
ARRAYS_FILE = "arrays.npz"
INDEX_FILE = "index.json"
# Settings of a run's config.json that must match for a finished run to be kept on resumption
# (the RunConfig itself is matched through its hash): a sweep never mixes dtypes or precisions.
RESUME_KEYS = ("data", "dtype", "allow_tf32", "precision")
PRECISIONS = ("float64", "float32", "tf32")


def sweep_dtype(cfg: TrainingParams, sweep_id: str) -> str:
    """The dtype sweep ``sweep_id`` trains in: its own ``dtype``, else the section's."""
    return cfg.sweeps[sweep_id].dtype or cfg.dtype


def precision(dtype: str, allow_tf32: bool, device: str) -> str:
    """What a run's products compute in: ``float64``; ``tf32`` (float32 data, TF32 products: only on
    CUDA with ``allow_tf32``); else ``float32``."""
    if dtype == "float64":
        return "float64"
    return "tf32" if allow_tf32 and str(device).startswith("cuda") else "float32"


def unit_precision(cfg: TrainingParams, sweep_id: str, device: str) -> str:
    """What sweep ``sweep_id``'s products compute in on ``device`` (the train family's declared precision)."""
    return precision(sweep_dtype(cfg, sweep_id), cfg.allow_tf32, device)


def resolve_T(T: int | str, H: int) -> int:
    """``"H"`` → H (T = H, the μPC and SP-baseline runs), else the integer itself."""
    return H if T == "H" else int(T)


def expand_grid(g: Grid, method: str, metrics: str) -> list[RunConfig]:
    out = []
    if method == "bp":
        for ds, N, H, act, skips, lr, E, seed in itertools.product(
                g.datasets, g.N, g.H, g.acts, g.skips, g.param_lrs, [g.epochs], g.seeds):
            out.append(RunConfig(dataset=ds, N=N, H=H, act=act, param=g.param, init=g.init, skips=skips,
                                 seed=seed, epochs=E, test_every=g.test_every, param_lr=float(lr),
                                 method="bp", metrics="basic"))
        return out
    for ds, N, H, act, skips, T, decay, plr, alr, seed in itertools.product(
            g.datasets, g.N, g.H, g.acts, g.skips, g.T, g.activity_decays, g.param_lrs, g.act_lrs, g.seeds):
        out.append(RunConfig(dataset=ds, N=N, H=H, act=act, param=g.param, init=g.init, skips=skips,
                             seed=seed, epochs=g.epochs, test_every=g.test_every, param_lr=float(plr),
                             method="pc", T=resolve_T(T, H), act_optim=g.act_optim, act_lr=float(alr),
                             activity_decay=float(decay), metrics=metrics))
    return out


def expand_sweep(sweep: Sweep) -> list[RunConfig]:
    seen: dict[RunConfig, None] = {}
    for g in sweep.grids:
        for rc in expand_grid(g, sweep.method, sweep.metrics):
            seen.setdefault(rc, None)
    return list(seen)


def expand(cfg: TrainingParams, sweep_id: str) -> list[RunConfig]:
    """All runs of sweep ``sweep_id`` (S1…S13, B1, B2) of the resolved section."""
    if sweep_id not in cfg.sweeps:
        raise KeyError(f"mupc_training: sweep {sweep_id!r} is not defined; known: {sorted(cfg.sweeps)}")
    return expand_sweep(cfg.sweeps[sweep_id])


# ----------------------------------------------------------------------------- stacking


def stack_key(rc: RunConfig) -> tuple:
    """Fields that fix the shapes and the schedule of a run; runs with equal keys stack."""
    return (rc.method, rc.dataset, rc.N, rc.H, rc.act, rc.skips, rc.init, rc.param, rc.T, rc.act_optim,
            rc.activity_decay, rc.weight_decay, rc.spectral_penalty, rc.batch_size, rc.epochs,
            rc.test_every, rc.metrics)


def stack_groups(runs: Iterable[RunConfig], max_stack: int = 0) -> list[list[RunConfig]]:
    """Partition runs into stackable groups (order kept), each at most ``max_stack`` runs (0 = any)."""
    groups: dict[tuple, list[RunConfig]] = {}
    for rc in runs:
        groups.setdefault(stack_key(rc), []).append(rc)
    out = []
    for members in groups.values():
        size = max_stack if max_stack > 0 else len(members)
        out.extend(members[i:i + size] for i in range(0, len(members), size))
    return out


# ----------------------------------------------------------------------------- run records


def run_part(rc: RunConfig) -> str:
    """The run's sub-folder of the sweep unit (a part of the resumable unit)."""
    return f"runs/{rc.hash()}"


def run_record(rc: RunConfig, status: str, extra: dict[str, Any]) -> dict[str, Any]:
    """A run's ``config.json``: its RunConfig, key, hash, status and the stage's settings."""
    if status not in STATUSES:
        raise ValueError(f"status {status!r} is not one of {STATUSES}")
    return {"run": rc.as_params(), "key": rc.key(), "hash": rc.hash(), "status": status, **extra}


def resume_settings(cfg: TrainingParams, sweep_id: str, device: str) -> dict[str, Any]:
    """The :data:`RESUME_KEYS` settings a sweep records in every run's config.json (and must find there
    to keep a run): the data subset, the dtype, the TF32 choice and the resulting precision."""
    dtype = sweep_dtype(cfg, sweep_id)
    return {"data": {"n_train": cfg.data.n_train, "n_test": cfg.data.n_test}, "dtype": dtype,
            "allow_tf32": cfg.allow_tf32, "precision": precision(dtype, cfg.allow_tf32, device)}


def is_done(record: dict[str, Any] | None, rc: RunConfig, settings: dict[str, Any]) -> bool:
    """A run is done when an earlier ``config.json`` has its hash, a final status and the same
    :data:`RESUME_KEYS` settings; such runs are skipped on resumption. A run's folder is written
    whole (config.json and arrays.npz together), so the record stands for its arrays too."""
    if record is None or record.get("hash") != rc.hash() or record.get("status") not in STATUSES:
        return False
    return all(record.get(k) == settings[k] for k in RESUME_KEYS)


def sweep_index(sweep_id: str, profile: str, runs: list[RunConfig],
                records: dict[str, dict[str, Any] | None]) -> dict[str, Any]:
    """``index.json``: every run of the sweep under the active profile with its record's status."""
    entries = []
    for rc in runs:
        rec = records.get(rc.hash())
        entries.append({"key": rc.key(), "hash": rc.hash(), "run": rc.as_params(),
                        "status": rec.get("status") if rec else None,
                        "stop_iter": rec.get("stop_iter") if rec else None})
    return {"sweep": sweep_id, "profile": profile, "runs": entries}
