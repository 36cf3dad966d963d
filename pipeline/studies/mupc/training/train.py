"""train@<sweep>: expand one sweep, skip its finished runs, train the rest in stacked groups.

The unit is resumable: each run of a group is yielded as the part ``runs/<hash>/`` (``config.json``,
``arrays.npz``, its MLflow child) as soon as the group ends, so killing the stage and rerunning it
recomputes only the unfinished runs (at group granularity); a run is kept when its earlier record
matches (:func:`~pipeline.studies.mupc.training.sweep_expansion.is_done`). The final output is the sweep's
``index.json``.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from pipeline.contract import Context, Output, Run
from pipeline.device import cpu_threads, set_matmul_precision
from pipeline.studies.mupc.engine.runs import RunConfig
from pipeline.studies.mupc.training.config import TrainingParams
from pipeline.studies.mupc.training.cost import group_flops
from pipeline.studies.mupc.training.group_training import DataSet, RunResult, load_dataset, train_group
from pipeline.studies.mupc.training.sweep_expansion import (
    ARRAYS_FILE,
    CONFIG_FILE,
    INDEX_FILE,
    expand,
    is_done,
    resume_settings,
    run_part,
    run_record,
    stack_groups,
    sweep_index,
)

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def final_numbers(a: Any) -> dict[str, float]:
    """A run's final numbers from its arrays: last and best test accuracy, lowest training loss."""
    out: dict[str, float] = {}
    if len(a["test_accs"]):
        out["final_test_acc"] = float(a["test_accs"][-1])
        out["max_test_acc"] = float(np.max(a["test_accs"]))
    tl = a["batch_train_losses"]
    if len(tl) and np.isfinite(tl).any():
        out["min_train_loss"] = float(np.nanmin(np.where(np.isfinite(tl), tl, np.nan)))
    return out


def runs_table(ctx: Context, runs: list[RunConfig], records: dict[str, dict[str, Any] | None]) -> pd.DataFrame:
    """The sweep's per-run table: one row per run of the profile, its RunConfig, key, status, the
    precision it trained in, iterations and final numbers (empty for a run not trained)."""
    rows = []
    for rc in runs:
        rec = records.get(rc.hash()) or {}
        arrays = ctx.previous(f"{run_part(rc)}/{ARRAYS_FILE}") if rec else None
        rows.append({"hash": rc.hash(), "key": rc.key(), **rc.as_params(), "status": rec.get("status", "missing"),
                     "dtype": rec.get("dtype"), "precision": rec.get("precision"), "stop_iter": rec.get("stop_iter"),
                     **(final_numbers(arrays) if arrays is not None else {})})
    return pd.DataFrame(rows)


def child_run(unit: str, res: RunResult, extra: dict[str, Any], every: int,
              span: tuple[float, float] | None = None) -> Run:
    """MLflow child run per config × seed: flattened RunConfig params, per-evaluation test_acc and
    test_loss, train_loss (every ``every`` iterations), κ where monitored, final numbers, the arrays."""
    rc = res.rc
    params = {**rc.as_params(), "key": rc.key(), "hash": rc.hash(), "sweep": unit,
              "data.n_train": extra["data"]["n_train"], "data.n_test": extra["data"]["n_test"],
              "device": extra["device"], "dtype": extra["dtype"], "allow_tf32": extra["allow_tf32"],
              "precision": extra["precision"], **({"engine": res.extra["engine"]} if "engine" in res.extra else {})}
    a = res.arrays
    te = rc.test_every
    series: dict[str, tuple[Any, Any]] = {}
    if len(a["test_accs"]):
        steps = [(t + 1) * te for t in range(len(a["test_accs"]))]
        series.update(test_acc=(steps, a["test_accs"]), test_loss=(steps, a["test_losses"]))
    tl = a["batch_train_losses"]
    if len(tl):
        idx = np.arange(0, len(tl), every)
        series["train_loss"] = (idx + 1, np.where(np.isfinite(tl[idx]), tl[idx], np.nan))
    if "cond_nums" in a and len(a["cond_nums"]):
        series["kappa"] = ([t * te for t in range(len(a["cond_nums"]))], a["cond_nums"])
    if span is not None:
        start, end = span
        total = max(int(res.stop_iter), 1)
        series = {k: (steps, vals, [start + (end - start) * min(int(st), total) / total for st in steps])
                  for k, (steps, vals) in series.items()}
    final: dict[str, float] = {"iterations": res.stop_iter, **final_numbers(a)}
    if span is not None:
        final["group_seconds"] = span[1] - span[0]  # wall clock: MLflow only, never in the run's record
    return Run(f"{unit}/{rc.hash()}", params, tags={"run_key": rc.key(), "status": res.status}, metrics=final,
               series=series, artifacts=[ARRAYS_FILE], failed=None if res.status == "finished" else res.status)


# How a run was executed, not what it is: its group's size and the stacking chosen for it change when a sweep
# resumes (the runs left are regrouped), so they go to the run record and MLflow, never to config.json.
EXECUTION_KEYS = ("group_size", "stack_layout")


def run_output(unit: str, res: RunResult, extra: dict[str, Any], every: int,
               span: tuple[float, float] | None = None, node: dict[str, Any] | None = None) -> Output:
    """One finished run as a part of the sweep unit. ``node``: where its group ran (executor, Ray node,
    attempt), for the run record and MLflow tags only, so config.json is the same on every executor; so
    are the :data:`EXECUTION_KEYS`, so a resumed sweep writes what an uninterrupted one writes."""
    child = child_run(unit, res, extra, every, span)
    execution = {k: extra[k] for k in EXECUTION_KEYS if k in extra}
    child.tags.update({k: json.dumps(v, sort_keys=True) if isinstance(v, dict) else str(v)
                       for k, v in execution.items()})
    if node:
        child.tags.update({f"executor.{k}" if k != "executor" else k: str(v) for k, v in node.items()})
    record = {k: v for k, v in extra.items() if k not in EXECUTION_KEYS}
    return Output(part=run_part(res.rc), json={CONFIG_FILE: run_record(res.rc, res.status, record)},
                  arrays={ARRAYS_FILE: {k: np.asarray(v) for k, v in res.arrays.items()}},
                  runs=[child], execution={**execution, **({"node": node} if node else {})})


@dataclass(frozen=True)
class GroupTask:
    """One stacked group of a sweep and what training it needs: a picklable unit of work."""

    runs: tuple[RunConfig, ...]
    n_train: int | None
    n_test: int | None
    device: str
    dtype: str
    hessian_dense_max_n: int
    threads: int
    precision: str = "float32"  # float64 | float32 | tf32 (sweeps.precision)
    cuda_graphs: bool = True  # CUDA: replay the iteration from a CUDA graph (trainer.train_pc_group)
    engine: str = "standard"  # the PC engine's route: standard | fused (energy.PCEngine)


_DATA: dict[tuple[Any, ...], DataSet] = {}  # per process: the datasets its groups have loaded


def set_precision(device: str, prec: str) -> None:
    """Make torch compute float32 products as ``prec`` says on ``device`` (TF32 exists only on CUDA).

    Set per task: one process (a Ray worker) may train groups of sweeps with other precisions. The
    runner sets the unit's declared precision too (the train family's ``precision``), before it records the device."""
    set_matmul_precision(device, prec)


def train_task(task: GroupTask) -> tuple[list[RunResult], float, float]:
    """Train one group (wherever it runs: this process or a Ray worker); its results, start and end
    (wall clock: for MLflow's time axis only, never in a tracked output)."""
    t0 = time.time()
    if task.device.startswith("cpu"):
        torch.set_num_threads(cpu_threads(task.threads))
    set_precision(task.device, task.precision)
    ds = task.runs[0].dataset
    key = (ds, task.n_train, task.n_test, task.device, task.dtype)
    if key not in _DATA:
        _DATA[key] = load_dataset(ds, task.n_train, task.n_test, task.device, DTYPES[task.dtype])
    results = train_group(list(task.runs), _DATA[key], task.device, DTYPES[task.dtype], task.hessian_dense_max_n,
                          cuda_graphs=task.cuda_graphs, engine=task.engine)
    return results, t0, time.time()


def train(ctx: Context, unit: str) -> Generator[Output, None, Output]:
    """Train every unfinished run of sweep ``unit``; yields each run, returns the sweep's index."""
    t0 = time.time()
    cfg: TrainingParams = ctx.cfg
    device = ctx.device
    if str(device).startswith("cpu"):
        torch.set_num_threads(cpu_threads(cfg.threads))
    settings = resume_settings(cfg, unit, str(device))
    dtype, prec = settings["dtype"], settings["precision"]
    runs = expand(cfg, unit)
    todo = [rc for rc in runs if not is_done(ctx.previous(f"{run_part(rc)}/{CONFIG_FILE}"), rc, settings)]
    groups = stack_groups(todo, cfg.max_stack)
    ctx.log(f"{len(runs)} runs, {len(runs) - len(todo)} already done, {len(todo)} to train in {len(groups)} groups "
            f"on {device} in {prec}")
    base = {**settings, "device": str(device), "git_commit": ctx.provenance["git_commit"],
            "data_sha256": ctx.provenance["data_sha256"], "profile": ctx.profile}
    _DATA.clear()  # a stage loads its data afresh (Ray workers keep theirs for the groups they train)
    # only a sweep that monitors H_z reads (and declares) the dense crossover (its device's); the others never use it
    dense_max_n = cfg.hessian_dense_max_n.for_device(str(device)) if cfg.sweeps[unit].metrics == "hessian" else 0
    tasks = [GroupTask(tuple(group), cfg.data.n_train, cfg.data.n_test, str(device), dtype,
                       dense_max_n, cfg.threads, prec, cfg.cuda_graphs, cfg.engine) for group in groups]
    trained: list[str] = []
    graphs_off: set[str] = set()  # why groups trained without CUDA graphs: each reason said once
    # each stacked group is one task: in this process, or a Ray task (TRAINSCAPE_EXECUTOR=ray)
    where: dict[int, dict[str, Any]] = {}  # group -> where it ran (provenance: the run record, MLflow)
    finished = ctx.map(train_task, tasks, gpus=0 if str(device).startswith("cpu") else 1, where=where)
    placed: list[dict[str, Any]] = []
    flops = [group_flops(cfg, group, str(device)) for group in groups]  # the bar counts FLOPs (its ETA), runs after it
    runs_done = [0]

    def runs_note(item: tuple[int, Any]) -> str:
        runs_done[0] += len(groups[item[0]])
        return f"{runs_done[0]}/{len(todo)} runs"

    for gi, (results, started, ended) in ctx.track(finished, total=sum(flops), desc="training", unit="FLOP",
                                                   weight=lambda item: flops[item[0]], note=runs_note):
        group, seconds = groups[gi], ended - started
        node = where.get(gi)
        if node:
            placed.append({"group": gi, "runs": [r.rc.hash() for r in results], **node})
        for res in results:
            trained.append(res.rc.hash())
            yield run_output(unit, res, {**base, "stop_iter": res.stop_iter, **res.extra}, cfg.train_loss_log_every,
                             (started, ended), node)
        st = Counter(r.status for r in results)
        why = results[0].extra.get("cuda_graphs_off") if results else None
        if why and why not in graphs_off:
            graphs_off.add(why)
            ctx.log(f"group {gi + 1}/{len(groups)} trains without CUDA graphs (as does any later group for the same "
                    f"reason; each run's config.json says so): {why}")
        on = f" on {node['node_ip']}" + (f" (attempt {node['attempt'] + 1})" if node.get("attempt") else "") \
            if node and node.get("node_ip") else ""
        ctx.log(f"group {gi + 1}/{len(groups)}: {len(group)} runs N={group[0].N} H={group[0].H} {group[0].act} "
                f"{group[0].dataset} in {seconds:.1f} s{on}; {dict(st)}")
    records = {rc.hash(): ctx.previous(f"{run_part(rc)}/{CONFIG_FILE}") for rc in runs}
    statuses = Counter(rec["status"] if rec else "missing" for rec in records.values())
    summary = {"n_runs": len(runs), **{f"n_{k}": v for k, v in statuses.items()}}
    # what this execution did (which runs it trained, how long it took) depends on what an earlier one
    # left: the run record and MLflow, never meta.json, so a rerun leaves the sweep's outputs as they were
    execution = {"trained": trained, "n_trained": len(trained), "n_skipped": len(runs) - len(todo),
                 "groups": sorted(placed, key=lambda g: g["group"])}
    return Output(json={INDEX_FILE: sweep_index(unit, ctx.profile, runs, records)},
                  tables={"runs.csv": runs_table(ctx, runs, records)}, meta={"summary": summary},
                  execution=execution, run_metrics={**summary, "n_trained": len(trained),
                                                    "n_skipped": len(runs) - len(todo), "seconds": time.time() - t0})
