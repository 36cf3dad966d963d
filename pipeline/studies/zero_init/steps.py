"""Stage functions of the ``zero_init`` study (see pipeline/stage.py for the contract).

* ``zero_init_train@<run>``: one run of ``zero_init.runs``. A run that no figure of the active
  profile reads is *skipped explicitly*: the stage logs why, tags its MLflow run ``skipped`` and
  writes ``result.json`` with ``skipped: true`` and the reason (the metrics JSON lists it too).
* ``zero_init_extract@summary``: ``reports/metrics/zero_init.json`` over the active runs.
* ``zero_init_render@<figure>``: one figure of ``zero_init.figures`` from the runs its active
  profile list names (never a glob).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from pipeline.config import ConfigError, active
from pipeline.io import read_json, write_json
from pipeline.paths import figures_dir, metrics_file
from pipeline.stage import Figure, StageContext
from pipeline.studies.zero_init.config import Budget, RunSpec, ZeroInitParams

INIT_LABELS = {"zero": "ZerO", "partial_identity": "Partial Identity", "random": "Random",
               "one": "OnE", "spray": "Spray"}


def datasets(cfg: ZeroInitParams) -> tuple[str, ...]:
    return (cfg.dataset,)


def units(cfg: ZeroInitParams, kind: str) -> list[str]:
    if kind == "train":
        return list(cfg.runs)
    if kind == "extract":
        return list(cfg.summaries)
    if kind == "render":
        return list(cfg.figures)
    return []


def active_runs(cfg: ZeroInitParams, profile: str) -> list[str]:
    """Run keys the active profile's figures read, in first-use order (each trained once)."""
    out: list[str] = []
    for fig in cfg.figures.values():
        for key in active(fig.runs, profile, "zero_init.figures"):
            if key not in out:
                out.append(key)
    return out


def budget(cfg: ZeroInitParams, profile: str, run: RunSpec) -> Budget:
    return active(cfg.profiles, profile, "zero_init").settings[run.setting]


def skip_reason(cfg: ZeroInitParams, profile: str, unit: str) -> str | None:
    if unit in active_runs(cfg, profile):
        return None
    return (f"profile {profile!r}: no figure reads run {unit!r} "
            f"(zero_init.figures.*.runs.{profile}); nothing trained")


def run_params(cfg: ZeroInitParams, profile: str, unit: str) -> dict[str, Any]:
    """The flattened configuration of one run (logged as MLflow params and kept in result.json)."""
    run = cfg.runs[unit]
    b = budget(cfg, profile, run)
    return {"run": unit, "init": run.init, "n_h": run.n_h, "setting": run.setting,
            "bias": cfg.settings[run.setting].bias, **dataclasses.asdict(b), "lr": cfg.lr,
            "batch_size": cfg.batch_size, "test_batch_size": cfg.test_batch_size,
            "rank_tol": cfg.rank_tol, "rank_on": cfg.rank_on, "zero_scale": cfg.zero_scale,
            "init_seed": cfg.init_seed, "data_seed": cfg.data_seed, "profile": profile}


# ------------------------------------------------------------------------------------------ train


def train(ctx: StageContext, unit: str) -> None:
    cfg: ZeroInitParams = ctx.cfg
    params = run_params(cfg, ctx.profile, unit)
    reason = skip_reason(cfg, ctx.profile, unit)
    if reason is not None:
        ctx.log(f"SKIPPED: {reason}")
        ctx.tracker.parent.set_tags({"skipped": "true", "skip_reason": reason})
        write_json(ctx.out_dir / "result.json", {"skipped": True, "reason": reason, "params": params})
        ctx.write_meta(skipped=reason, mlflow_children={})
        return

    import torch

    from pipeline.data import load_split, normalised
    from pipeline.studies.zero_init.train import RunConfig, train_run

    device = ctx.device
    if device == "cpu":
        torch.set_num_threads(min(cfg.cpu_threads, os.cpu_count() or 1))
    run = cfg.runs[unit]
    b = budget(cfg, ctx.profile, run)
    tr, te = load_split(cfg.dataset, train=True), load_split(cfg.dataset, train=False)
    ntr, nte = b.train_subset or tr.labels.shape[0], b.test_subset or te.labels.shape[0]
    # pixels in [0, 1] (ToTensor), no normalisation, as in the seed
    x_tr = normalised(tr.images[:ntr], 0.0, 1.0, device)
    x_te = normalised(te.images[:nte], 0.0, 1.0, device)
    y_tr, y_te = tr.labels[:ntr].to(device), te.labels[:nte].to(device)
    rc = RunConfig(init=run.init, n_h=run.n_h, bias=cfg.settings[run.setting].bias, epochs=b.epochs,
                   lr=cfg.lr, batch_size=cfg.batch_size, test_batch_size=cfg.test_batch_size,
                   log_interval=b.log_interval, max_iters=b.max_iters, rank_tol=cfg.rank_tol,
                   rank_on=cfg.rank_on, zero_scale=cfg.zero_scale, init_seed=cfg.init_seed,
                   data_seed=cfg.data_seed, input_dim=cfg.input_dim_line)
    ctx.log(f"{run.init} n_h={run.n_h} setting={run.setting} epochs={b.epochs} "
            f"train images={ntr} device={device}")
    with ctx.tracker.child(unit, {**params, "device": device, "train_images": ntr,
                                  "test_images": nte}) as child:
        res = train_run(rc, x_tr, y_tr, x_te, y_te, log=ctx.log)
        child.log_series("rank_w3_minus_i", res.rank_w3_minus_i, res.iters)
        child.log_series("rank_w3_minus_w3_0", res.rank_w3_minus_w3_0, res.iters)
        child.log_series("train_loss", res.train_loss, res.loss_iters)
        child.log_series("running_acc", res.running_acc, res.loss_iters)
        child.log_series("test_acc", [t["test_acc"] for t in res.test], [t["epoch"] for t in res.test])
        child.log_series("test_loss", [t["test_loss"] for t in res.test], [t["epoch"] for t in res.test])
        first = res.first_iter_above(cfg.input_dim_line)
        finals = {"final_rank_w3_minus_i": res.rank_w3_minus_i[-1],
                  "final_rank_w3_minus_w3_0": res.rank_w3_minus_w3_0[-1],
                  "final_test_acc": res.test[-1]["test_acc"], "iterations": res.iterations,
                  "train_seconds": res.seconds["total"], "rank_seconds": res.seconds["rank"]}
        child.log_metrics(finals)
        if first is not None:
            child.log_metrics({"first_iter_rank_above_input_dim": first})
        if res.diverged:
            child.fail("training loss became non-finite")
        out = {"skipped": False, "params": {**params, "train_images": ntr, "test_images": nte,
                                            "device": device},
               **res.to_json(), "first_iter_rank_above_input_dim": first}
        write_json(ctx.out_dir / "result.json", out)
        ctx.write_meta(mlflow_children={unit: child.run_id})
    ctx.log(f"final rank(W3-I) {res.rank_w3_minus_i[-1]}, rank(W3-W3_0) {res.rank_w3_minus_w3_0[-1]}, "
            f"test acc {res.test[-1]['test_acc']:.2f} %, {res.seconds['total']:.1f} s "
            f"({res.seconds['rank']:.1f} s ranks)")


def load_result(ctx: StageContext, unit: str) -> dict[str, Any]:
    res = read_json(ctx.unit_dir("train", unit) / "result.json")
    if res.get("skipped"):
        raise ConfigError(f"zero_init run {unit!r} was skipped ({res['reason']}); rerun its train stage")
    want = run_params(ctx.cfg, ctx.profile, unit)
    got = {k: res["params"].get(k) for k in want}
    if got != want:
        raise ConfigError(f"zero_init run {unit!r}: its result.json was made with other params "
                          f"({got} != {want}); run `dvc repro`")
    return res


# ---------------------------------------------------------------------------------------- extract


def extract(ctx: StageContext, unit: str) -> None:
    cfg: ZeroInitParams = ctx.cfg
    runs: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    for key in cfg.runs:
        reason = skip_reason(cfg, ctx.profile, key)
        if reason is not None:
            skipped[key] = reason
            continue
        r = load_result(ctx, key)
        p = r["params"]
        runs[key] = {
            "init": p["init"], "n_h": p["n_h"], "setting": p["setting"], "bias": p["bias"],
            "epochs": p["epochs"], "iterations": r["iterations"], "train_images": p["train_images"],
            "final_rank_w3_minus_i": r["rank_w3_minus_i"][-1],
            "final_rank_w3_minus_w3_0": r["rank_w3_minus_w3_0"][-1],
            "max_rank_w3_minus_i": max(r["rank_w3_minus_i"]),
            "final_test_acc": r["test"][-1]["test_acc"],
            "test_acc_per_epoch": [t["test_acc"] for t in r["test"]],
            "first_iter_rank_above_input_dim": r["first_iter_rank_above_input_dim"],
            "diverged": r["diverged"],
            "train_seconds": round(r["seconds"]["total"], 2),
        }
    summary = {"profile": ctx.profile, "input_dim": cfg.input_dim_line, "rank_tol": cfg.rank_tol,
               "zero_scale": cfg.zero_scale, "runs": runs, "skipped": skipped}
    write_json(metrics_file("zero_init"), summary)
    write_json(ctx.out_dir / "summary.json", summary)
    ctx.tracker.parent.log_metrics({f"{k}.final_rank_w3_minus_i": v["final_rank_w3_minus_i"]
                                    for k, v in runs.items()})
    ctx.tracker.parent.log_metrics({f"{k}.final_test_acc": v["final_test_acc"] for k, v in runs.items()})
    ctx.write_meta(runs=sorted(runs), skipped=skipped, mlflow_children={})
    for k, v in runs.items():
        ctx.log(f"{k}: final rank {v['final_rank_w3_minus_i']}, test acc {v['final_test_acc']:.2f} %, "
                f"first iteration above {cfg.input_dim_line}: {v['first_iter_rank_above_input_dim']}")


# ----------------------------------------------------------------------------------------- render


def run_label(cfg: ZeroInitParams, fig_key: str, key: str, all_same_init: bool) -> str:
    if key in cfg.style.labels:
        return cfg.style.labels[key]
    run = cfg.runs[key]
    return f"n_h={run.n_h}" if all_same_init else f"{INIT_LABELS[run.init]} Init"


def caption(cfg: ZeroInitParams, profile: str, fig_key: str, results: dict[str, dict]) -> str:
    parts = []
    for key, r in results.items():
        p = r["params"]
        bias = "no bias" if p["bias"] is None else f"bias {p['bias']:g}"
        parts.append(f"{key} ({INIT_LABELS[p['init']]}, n_h={p['n_h']}, {bias}, {p['epochs']} epoch(s), "
                     f"{r['iterations']} iterations on {p['train_images']} images, final test acc "
                     f"{r['test'][-1]['test_acc']:.2f} %)")
    return (f"{cfg.style.titles[fig_key]}. rank(W3 − I) of the square layer l3 (singular values > {cfg.rank_tol:g}, "
            f"float32) against the true iteration index, plain SGD lr {cfg.lr:g}, batch {cfg.batch_size}; "
            f"dashed: input dimension {cfg.input_dim_line}. Runs: " + "; ".join(parts)
            + f". Profile {profile}: {cfg.style.profile_notes[profile]}")


def render(ctx: StageContext, unit: str) -> list[Figure]:
    from pipeline.studies.zero_init.plots import rank_figure

    cfg: ZeroInitParams = ctx.cfg
    fig = cfg.figures[unit]
    keys = active(fig.runs, ctx.profile, f"zero_init.figures.{unit}")
    results = {k: load_result(ctx, k) for k in keys}
    same = len({cfg.runs[k].init for k in keys}) == 1
    curves = [(run_label(cfg, unit, k, same), r["iters"], r["rank_w3_minus_i"]) for k, r in results.items()]
    files = rank_figure(curves, cfg.input_dim_line, figures_dir("zero_init") / unit)
    ctx.tracker.parent.log_metrics({f"{k}.final_rank_w3_minus_i": r["rank_w3_minus_i"][-1]
                                    for k, r in results.items()})
    ctx.write_meta(runs=keys, mlflow_children={})
    return [Figure(id=unit, files=files, caption=caption(cfg, ctx.profile, unit, results),
                   seed_figure=fig.seed_figure, sources=[("train", k) for k in keys],
                   extra={"runs": keys})]
