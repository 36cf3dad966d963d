"""One sweep stage (``mupc_training_train@<sweep>``): expand, skip finished runs, train the rest in
stacked groups, write each run atomically as soon as its group ends, log MLflow children, index.

Resumption: the stage's out folder is ``persist: true`` in dvc.yaml; a run whose ``config.json`` has
the same hash, a final status and the same data subset is skipped, so killing the stage and rerunning
recomputes only the unfinished runs (at group granularity: a group is written when it ends).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import numpy as np
import torch

from pipeline.studies.mupc.training.config import TrainingParams
from pipeline.studies.mupc.training.sweeps import (
    expand,
    is_done,
    run_dir,
    save_run,
    stack_groups,
    write_index,
)
from pipeline.studies.mupc.training.trainer import DataSet, RunResult, load_dataset, train_group

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def log_child(ctx: Any, unit: str, res: RunResult, extra: dict[str, Any], every: int) -> str | None:
    """MLflow child run per config × seed: flattened RunConfig params, per-evaluation metrics,
    train_loss (every ``every`` iterations), κ where monitored, the arrays as an artifact."""
    rc = res.rc
    params = {**rc.as_params(), "key": rc.key(), "hash": rc.hash(), "sweep": unit,
              "data.n_train": extra["data"]["n_train"], "data.n_test": extra["data"]["n_test"],
              "device": extra["device"], "dtype": extra["dtype"], "allow_tf32": extra["allow_tf32"]}
    a = res.arrays
    with ctx.tracker.child(f"{unit}/{rc.hash()}", params, tags={"run_key": rc.key(), "status": res.status}) as run:
        te = rc.test_every
        if len(a["test_accs"]):
            steps = [(t + 1) * te for t in range(len(a["test_accs"]))]
            run.log_series("test_acc", a["test_accs"], steps)
            run.log_series("test_loss", a["test_losses"], steps)
        tl = a["batch_train_losses"]
        if len(tl):
            idx = np.arange(0, len(tl), every)
            run.log_series("train_loss", np.where(np.isfinite(tl[idx]), tl[idx], np.nan), idx + 1)
        if "cond_nums" in a and len(a["cond_nums"]):
            run.log_series("kappa", a["cond_nums"], [t * te for t in range(len(a["cond_nums"]))])
        final = {"iterations": res.stop_iter}
        if len(a["test_accs"]):
            final["final_test_acc"] = float(a["test_accs"][-1])
            final["max_test_acc"] = float(np.max(a["test_accs"]))
        if len(tl) and np.isfinite(tl).any():
            final["min_train_loss"] = float(np.nanmin(np.where(np.isfinite(tl), tl, np.nan)))
        run.log_metrics(final)
        run.log_artifact(run_dir(ctx.out_dir, rc) / "arrays.npz", "arrays")
        if res.status != "finished":
            run.fail(res.status)
        return run.run_id


def run_sweep(ctx: Any, cfg: TrainingParams, unit: str, *, trainer=train_group,
              loader=load_dataset) -> dict[str, Any]:
    """Train every unfinished run of sweep ``unit`` under the active profile. Returns a summary."""
    t0 = time.time()
    prof = cfg.profile(ctx.profile)
    device = ctx.device
    if str(device).startswith("cpu"):
        torch.set_num_threads(cfg.threads)
    elif torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = prof.allow_tf32
        torch.backends.cudnn.allow_tf32 = prof.allow_tf32
    dtype = DTYPES[prof.dtype]
    subset = {"n_train": prof.data.n_train, "n_test": prof.data.n_test}
    out = ctx.out_dir
    runs = expand(cfg, unit, ctx.profile)
    todo = [rc for rc in runs if not is_done(out, rc, subset)]
    groups = stack_groups(todo, prof.max_stack)
    ctx.log(f"{len(runs)} runs, {len(runs) - len(todo)} already done, {len(todo)} to train in {len(groups)} groups "
            f"on {device}")
    prov = ctx.provenance()
    base = {"data": subset, "device": str(device), "dtype": prof.dtype, "allow_tf32": prof.allow_tf32,
            "git_commit": prov["git_commit"], "data_sha256": prov["data_sha256"], "profile": ctx.profile}
    cache: dict[str, DataSet] = {}
    children: dict[str, str] = {}
    trained: list[str] = []
    for gi, group in enumerate(groups):
        ds = group[0].dataset
        if ds not in cache:
            cache[ds] = loader(ds, prof.data.n_train, prof.data.n_test, device, dtype)
        tg = time.time()
        results = trainer(group, cache[ds], device, dtype, prof.hessian_dense_max_n) \
            if group[0].kind == "pc" else trainer(group, cache[ds], device, dtype)
        for res in results:
            extra = {**base, "stop_iter": res.stop_iter, **res.extra}
            save_run(out, res.rc, res.status, res.arrays, extra)
            trained.append(res.rc.hash())
            rid = log_child(ctx, unit, res, extra, prof.train_loss_log_every)
            if rid:
                children[res.rc.hash()] = rid
        st = Counter(r.status for r in results)
        ctx.log(f"group {gi + 1}/{len(groups)}: {len(group)} runs N={group[0].N} H={group[0].H} {group[0].act} "
                f"{group[0].dataset} in {time.time() - tg:.1f} s; {dict(st)}")
    write_index(out, unit, ctx.profile, runs)
    statuses = Counter()
    from pipeline.studies.mupc.training.sweeps import read_config

    for rc in runs:
        c = read_config(out, rc)
        statuses[c["status"] if c else "missing"] += 1
    summary = {"n_runs": len(runs), "n_trained": len(trained), "n_skipped": len(runs) - len(todo),
               "seconds": time.time() - t0, **{f"n_{k}": v for k, v in statuses.items()}}
    ctx.tracker.parent.log_metrics(summary)
    ctx.write_meta(mlflow_children=children, trained=trained, summary=summary)
    return summary
