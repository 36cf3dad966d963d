"""Stage steps of the superposition study (seed 002): train every seed of a variant in one batched run,
then draw the loss curves (with detected plateaus), feature geometry and W_U·W_E heat maps."""

from __future__ import annotations

import time

import numpy as np

from pipeline.config import ConfigError
from pipeline.io import read_json, read_npz, write_json, write_npz
from pipeline.paths import figures_dir, metrics_file
from pipeline.stage import Figure, StageContext
from pipeline.studies.superposition.config import Superposition

SUMMARY = "summary"


def datasets(cfg: Superposition) -> tuple[str, ...]:
    return ()  # the dataset is the identity matrix, built in memory


def units(cfg: Superposition, kind: str) -> list[str]:
    if kind == "train":
        return list(cfg.variants)
    if kind == "render":
        return list(cfg.render_units)
    return []


def resolve_device(cfg: Superposition, ctx: StageContext) -> str:
    import torch

    device = ctx.device if cfg.device == "auto" else cfg.device
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"params.yaml: superposition.device = {cfg.device!r} is not allowed here; "
                          "allowed: 'cpu' or 'auto' (no CUDA device)")
    return device


def train(ctx: StageContext, unit: str) -> None:
    import torch

    from pipeline.studies.superposition.model import init_batch, train_batched

    cfg: Superposition = ctx.cfg
    tp = cfg.active(ctx.profile).train
    tied = cfg.variants[unit].tied
    device = resolve_device(cfg, ctx)
    torch.set_num_threads(cfg.threads)
    dtype = getattr(torch, cfg.dtype)
    ctx.log(f"{len(tp.seeds)} seeds batched, {tp.epochs} epochs, tied={tied}, lr={cfg.lr} "
            f"({cfg.lr_schedule}), {device}/{cfg.dtype}")
    w_e0, w_u0 = init_batch(tp.seeds, cfg.f, cfg.n)
    t0 = time.time()
    hist = train_batched(w_e0, w_u0, epochs=tp.epochs, lr=cfg.lr, tied=tied,
                         snapshot_every=tp.snapshot_every, lr_schedule=cfg.lr_schedule,
                         decay_total=cfg.lr_decay_total, decay_steps=cfg.lr_decay_steps, device=device,
                         dtype=dtype)
    seconds = time.time() - t0
    ctx.log(f"trained in {seconds:.1f} s")
    out = ctx.out_dir
    write_npz(out / "history.npz", seeds=np.asarray(tp.seeds), losses=hist.losses,
              snap_epochs=hist.snap_epochs, w_e=hist.w_e, w_u=hist.w_u)
    final = {str(s): float(hist.losses[-1, i]) for i, s in enumerate(tp.seeds)}
    children = {}
    base = {"variant": unit, "tied": tied, "f": cfg.f, "n": cfg.n, "lr": cfg.lr,
            "lr_schedule": cfg.lr_schedule, "epochs": tp.epochs, "device": device, "dtype": cfg.dtype,
            "batched_seeds": len(tp.seeds)}
    # MLflow gets the loss every snapshot_every epochs (and the last); the full curve is in history.npz
    idx = np.unique(np.r_[np.arange(0, tp.epochs, tp.snapshot_every), tp.epochs - 1])
    for i, seed in enumerate(tp.seeds):
        with ctx.tracker.child(f"{unit}-seed{seed}", {**base, "seed": seed}) as run:
            run.log_series("loss", hist.losses[idx, i], steps=idx + 1)
            run.log_metrics({"final_loss": final[str(seed)], "loss_epoch1": float(hist.losses[0, i])})
            if not np.isfinite(hist.losses[:, i]).all():
                run.fail("non-finite loss")
            children[str(seed)] = run.run_id
    ctx.tracker.parent.log_metrics({"train_seconds": seconds})
    write_json(out / "summary.json", {"variant": unit, "tied": tied, "seeds": tp.seeds,
                                      "epochs": tp.epochs, "train_seconds": seconds, "device": device,
                                      "final_loss": final,
                                      "loss_epoch1": {str(s): float(hist.losses[0, i])
                                                      for i, s in enumerate(tp.seeds)}})
    ctx.write_meta(mlflow_children=children)


def detect_all(cfg: Superposition, losses: np.ndarray, seeds: list[int]) -> dict[str, dict]:
    """Per seed: final loss and the detected plateau(s) (the first one also flattened)."""
    from pipeline.studies.superposition.plateau import detect_plateaus

    p = cfg.plateau
    out = {}
    for i, seed in enumerate(seeds):
        hits = detect_plateaus(losses[:, i], tol=p.tol, window=p.window, min_drop=p.min_drop,
                               drop_window=p.drop_window)
        first = hits[0] if hits else None
        out[str(seed)] = {
            "final_loss": float(losses[-1, i]),
            "plateau": first is not None,
            "plateau_loss": first.loss if first else None,
            "plateau_start_epoch": first.start_epoch if first else None,
            "plateau_end_epoch": first.end_epoch if first else None,
            "plateau_drop_epoch": first.drop_epoch if first else None,
            "plateaus": [h.as_dict() for h in hits],
        }
    return out


def render(ctx: StageContext, unit: str) -> list[Figure]:
    from pipeline.studies.superposition import figures

    cfg: Superposition = ctx.cfg
    prof = cfg.active(ctx.profile)
    fdir = figures_dir(ctx.study) / unit  # this unit's own DVC out (the sidecar sits beside it)
    if unit == SUMMARY:
        variants = list(cfg.variants)
        curves, per_variant = {}, {}
        for v in variants:
            h = read_npz(ctx.unit_dir("train", v) / "history.npz")
            seeds = [int(s) for s in h["seeds"]]
            curves[v] = (seeds, h["losses"])
            per_variant[v] = detect_all(cfg, h["losses"], seeds)
        metrics = {
            "profile": ctx.profile, "epochs": prof.train.epochs, "lr_schedule": cfg.lr_schedule,
            "detector": {"tol": cfg.plateau.tol, "window": cfg.plateau.window,
                         "min_drop": cfg.plateau.min_drop, "drop_window": cfg.plateau.drop_window},
            "variants": {v: {"plateau_seeds": [int(s) for s, r in per_variant[v].items() if r["plateau"]],
                             "train_seconds": read_json(ctx.unit_dir("train", v) / "summary.json")[
                                 "train_seconds"],
                             "seeds": per_variant[v]} for v in variants},
        }
        write_json(metrics_file(ctx.study).with_name(cfg.render_units[SUMMARY]), metrics)
        for v in variants:
            ps = metrics["variants"][v]["plateau_seeds"]
            ctx.log(f"{v}: plateau-then-drop in seeds {ps}")
            ctx.tracker.parent.log_metrics({f"{v}_plateau_seeds": len(ps)})
        files = figures.loss_curves(curves, per_variant, prof.render.zoom_epochs, fdir / "loss_curves")
        return [Figure("loss_curves", files,
                       "Loss per epoch (log-log, MSE mean) for every seed of each variant, with the "
                       "detected plateaus (thick, coloured) and the epoch the loss drops (dot); bottom: "
                       "zoom.", seed_figure="loss plot of train() (every 10,000 epochs)",
                       sources=[("train", v) for v in variants])]
    h = read_npz(ctx.unit_dir("train", unit) / "history.npz")
    seeds = [int(s) for s in h["seeds"]]
    tied = cfg.variants[unit].tied
    losses = h["losses"]
    write_json(metrics_file(ctx.study).with_name(cfg.render_units[unit]), {
        "variant": unit, "tied": tied, "epochs": int(losses.shape[0]),
        "final_loss": {str(s): float(losses[-1, i]) for i, s in enumerate(seeds)},
        "loss_epoch1": {str(s): float(losses[0, i]) for i, s in enumerate(seeds)},
        "final_loss_min": float(losses[-1].min()), "final_loss_median": float(np.median(losses[-1]))})
    out = []
    for seed in prof.render.figure_seeds:
        i = seeds.index(seed)
        w_e, w_u, ep = h["w_e"][:, i], h["w_u"][:, i], h["snap_epochs"]
        tag = f"{unit}_seed{seed}"
        src = [("train", unit)]
        label = f"{unit} model, seed {seed}"
        out.append(Figure(f"{tag}_geometry",
                          figures.geometry_panels(w_e, w_u, ep, prof.render.panel_epochs, label,
                                                  fdir / f"{tag}_geometry"),
                          f"{label}: the 50 features in the 2-D hidden space (top: W_E columns, bottom: "
                          "W_U rows) at chosen epochs; axes fixed over training." +
                          (" Tied: W_U = W_Eᵀ, so both rows agree." if tied else ""),
                          seed_figure="plot_weights_interactive (static frames)", sources=src))
        out.append(Figure(f"{tag}_heatmaps",
                          figures.heatmap_panels(w_e, w_u, ep, prof.render.panel_epochs, label,
                                                 fdir / f"{tag}_heatmaps"),
                          f"{label}: W_U·W_E (top) and ReLU(W_U·W_E) (bottom) at chosen epochs; magma, "
                          "colour range fixed over all snapshots.",
                          seed_figure="visualize_matrices_with_slider (static frames)", sources=src))
        out.append(Figure(f"{tag}_slider",
                          [figures.slider_html(w_e, w_u, ep, prof.render.html_frames, label,
                                               fdir / f"{tag}_slider.html")],
                          f"{label}: interactive, epoch slider over {prof.render.html_frames} of the "
                          f"{len(ep)} snapshots: feature directions of W_E and W_U, W_U·W_E and its ReLU.",
                          seed_figure="plot_weights_interactive + visualize_matrices_with_slider",
                          sources=src))
    return out
