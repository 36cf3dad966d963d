"""Sweeps → runs, and the on-disk run records of a sweep stage.

* :func:`expand` turns one sweep of the active profile into its :class:`RunConfig` list (the union of
  the cartesian products of its grid blocks, first-occurrence order, duplicates dropped).
* A sweep stage owns ``artifacts/mupc/train/<sweep>/`` (:func:`sweep_dir`); each finished run has
  ``runs/<rc.hash()>/config.json`` and ``runs/<rc.hash()>/arrays.npz`` (see ``runs.py``), and the
  stage writes ``index.json`` listing the runs of the active profile (key, hash, status).
* :func:`load_run` is what renderers use: ``load_run(sweep_dir("S6"), rc) -> (config, arrays)``.
* :func:`stack_groups` partitions runs into groups trained together along the run axis: runs that
  share every shape-relevant field (dataset, N, H, act, skips, init, param, T, act optim, activity
  decay, epochs, test_every, metrics, kind) and differ only in seed, act lr and param lr.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.io import read_json, read_npz, write_json, write_npz
from pipeline.paths import study_dir
from pipeline.studies.mupc.runs import STATUSES, RunConfig
from pipeline.studies.mupc.training.config import Grid, Sweep, TrainingParams

CONFIG_FILE = "config.json"
ARRAYS_FILE = "arrays.npz"
INDEX_FILE = "index.json"


def resolve_T(T: int | str, H: int) -> int:
    """``"H"`` → H (T = H, the μPC and SP-baseline runs), else the integer itself."""
    return H if T == "H" else int(T)


def expand_grid(g: Grid, kind: str, metrics: str) -> list[RunConfig]:
    out = []
    if kind == "bp":
        for ds, N, H, act, skips, lr, E, seed in itertools.product(
                g.datasets, g.N, g.H, g.acts, g.skips, g.param_lrs, [g.epochs], g.seeds):
            out.append(RunConfig(dataset=ds, N=N, H=H, act=act, param=g.param, init=g.init, skips=skips,
                                 seed=seed, epochs=E, test_every=g.test_every, param_lr=float(lr),
                                 kind="bp", metrics="basic"))
        return out
    for ds, N, H, act, skips, T, decay, plr, alr, seed in itertools.product(
            g.datasets, g.N, g.H, g.acts, g.skips, g.T, g.activity_decays, g.param_lrs, g.act_lrs, g.seeds):
        out.append(RunConfig(dataset=ds, N=N, H=H, act=act, param=g.param, init=g.init, skips=skips,
                             seed=seed, epochs=g.epochs, test_every=g.test_every, param_lr=float(plr),
                             kind="pc", T=resolve_T(T, H), act_optim=g.act_optim, act_lr=float(alr),
                             activity_decay=float(decay), metrics=metrics))
    return out


def expand_sweep(sweep: Sweep) -> list[RunConfig]:
    seen: dict[RunConfig, None] = {}
    for g in sweep.grids:
        for rc in expand_grid(g, sweep.kind, sweep.metrics):
            seen.setdefault(rc, None)
    return list(seen)


def expand(cfg: TrainingParams, sweep_id: str, profile: str) -> list[RunConfig]:
    """All runs of sweep ``sweep_id`` (S1…S12, B1, B2) under ``profile`` (smoke|gpu_medium|paper)."""
    prof = cfg.profile(profile)
    if sweep_id not in prof.sweeps:
        raise KeyError(f"mupc.training: sweep {sweep_id!r} is not defined; known: {sorted(prof.sweeps)}")
    return expand_sweep(prof.sweeps[sweep_id])


# ----------------------------------------------------------------------------- stacking


def stack_key(rc: RunConfig) -> tuple:
    """Fields that fix the shapes and the schedule of a run; runs with equal keys stack."""
    return (rc.kind, rc.dataset, rc.N, rc.H, rc.act, rc.skips, rc.init, rc.param, rc.T, rc.act_optim,
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


def sweep_dir(sweep_id: str) -> Path:
    """``artifacts/mupc/train/<sweep_id>``."""
    return study_dir("mupc", "train", sweep_id)


def run_dir(sweep: Path, rc: RunConfig) -> Path:
    return Path(sweep) / "runs" / rc.hash()


def save_run(sweep: Path, rc: RunConfig, status: str, arrays: dict[str, Any], extra: dict[str, Any]) -> Path:
    """Write a run's arrays, then its config.json (the completion marker), each atomically."""
    if status not in STATUSES:
        raise ValueError(f"status {status!r} is not one of {STATUSES}")
    d = run_dir(sweep, rc)
    write_npz(d / ARRAYS_FILE, **{k: np.asarray(v) for k, v in arrays.items()})
    write_json(d / CONFIG_FILE, {"run": rc.as_params(), "key": rc.key(), "hash": rc.hash(), "status": status,
                                 **extra})
    return d


def read_config(sweep: Path, rc: RunConfig) -> dict[str, Any] | None:
    p = run_dir(sweep, rc) / CONFIG_FILE
    if not p.exists():
        return None
    try:
        return read_json(p)
    except (OSError, ValueError):
        return None


def is_done(sweep: Path, rc: RunConfig, data: dict[str, Any] | None = None) -> bool:
    """A run is done when its config.json has the same hash, a final status and the same data subset
    (and its arrays exist); such runs are skipped on resumption."""
    cfg = read_config(sweep, rc)
    if cfg is None or cfg.get("hash") != rc.hash() or cfg.get("status") not in STATUSES:
        return False
    if data is not None and cfg.get("data") != data:
        return False
    return (run_dir(sweep, rc) / ARRAYS_FILE).exists()


def load_run(sweep: Path, rc: RunConfig) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``(config_dict, arrays_dict)`` of one finished run; FileNotFoundError if it has not run.

    ``config_dict`` has ``run`` (RunConfig fields), ``key``, ``hash``, ``status``
    (finished|diverged|no_learning), ``stop_iter``, ``data``, ``device``, ``dtype``...; arrays as
    listed in ``runs.py`` (``batch_train_losses``, ``test_accs`` in %, ``test_losses``, PC:
    ``n_infer_iters``; metrics == "hessian": ``lambda_min``, ``lambda_max``, ``cond_nums``).
    """
    d = run_dir(sweep, rc)
    cfg = read_config(sweep, rc)
    if cfg is None:
        raise FileNotFoundError(f"run {rc.key()} has no {CONFIG_FILE} under {d}")
    return cfg, read_npz(d / ARRAYS_FILE)


def write_index(sweep: Path, sweep_id: str, profile: str, runs: list[RunConfig]) -> Path:
    entries = []
    for rc in runs:
        cfg = read_config(sweep, rc)
        entries.append({"key": rc.key(), "hash": rc.hash(), "status": cfg.get("status") if cfg else None,
                        "stop_iter": cfg.get("stop_iter") if cfg else None})
    return write_json(Path(sweep) / INDEX_FILE, {"sweep": sweep_id, "profile": profile, "runs": entries})
