"""train@<unit> of the μPC analysis (spec F1–F6, F26–F27); every grid comes from the resolved section.

``hessian_init``: the activity Hessian H_z at initialisation (§2), one cell per (config, N, H), resumable
cell by cell; ``fwd_pass``: activity and weight norms of BP-trained nets (§4); ``theory_grid`` and
``theory_width``: loss vs equilibrium energy (§3).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import torch

from pipeline.contract import Context, Output, Run
from pipeline.data import load_split, normalised
from pipeline.device import cpu_threads
from pipeline.studies.mupc.analysis import fwdpass, newton, theory
from pipeline.studies.mupc.analysis.config import (
    THEORY_CPU_MAX_WIDTH,
    HessianParams,
    MupcAnalysisParams,
    theory_device,
    theory_threads,
)
from pipeline.studies.mupc.analysis.layout import (
    FWD_METRICS,
    cell_dir,
    fwd_draws,
    fwd_key,
    hessian_configs,
    hessian_key,
    is_slice,
    spectrum_routes,
    theory_key,
)
from pipeline.studies.mupc.engine import hessian
from pipeline.studies.mupc.engine.energy import Adam, EnergyTerms, energy, errors, weight_grads
from pipeline.studies.mupc.engine.model import NetSpec, Weights, feedforward, init_weights

MNIST_MEAN, MNIST_STD = 0.1307, 0.3081


def unit_settings(ctx: Context) -> MupcAnalysisParams:
    """The unit's params view, with torch's threads set from it (every train unit's first step)."""
    cfg: MupcAnalysisParams = ctx.cfg
    torch.set_num_threads(cpu_threads(cfg.threads))
    return cfg


# ----------------------------------------------------------------------------- hessian at init


def hessian_spec(c: dict[str, Any], N: int, H: int, legacy: bool) -> NetSpec:
    return NetSpec(D=N, N=N, H=H, d_y=N, act=c["act"], skips=c["skips"], param=c["param"], init=c["init"],
                   orth_gain=1.0, legacy_noskip_branch_scale=legacy)


def hessian_cell(c: dict[str, Any], N: int, H: int, hp: HessianParams, legacy: bool, full: bool,
                 device: str, backend: str) -> tuple[dict[str, np.ndarray], dict[str, Any], float]:
    """One (config, N, H) cell: weights, extremes (+ full spectra where asked, above ``dense_max_n`` by
    ``backend``), κ, method per number; and the seconds its eigenvalues took (for MLflow: a cell's record holds
    only what its settings determine)."""
    spec = hessian_spec(c, N, H, legacy)
    w = init_weights(spec, [c["seed"]], dtype=torch.float64)
    x = hessian.hessian_input(N, c["seed"])
    y = x.clone()
    z, _ = feedforward(spec, w, x.view(1, -1))
    zs = z[0, :, 0]
    blocks = hessian.hessian_blocks(spec, w, x, y, zs, c["activity_decay"])
    arrays: dict[str, np.ndarray] = {}
    info: dict[str, Any] = {"N": N, "H": H, "n": N * H}
    t0 = time.perf_counter()
    if full:
        ev, method = hessian.full_spectrum(blocks, dense_max_n=hp.dense_max_n, backend=backend,
                                           device=device)
        arrays["num_hessian_eigenvals"] = ev
        lmax, lmin, mmax, mmin = float(ev[-1]), float(ev[0]), method, method
    else:
        ex = hessian.extremes(blocks, tol=hp.lanczos_tol, dense_max_n=hp.dense_max_n, band_max_n=hp.band_max_n)
        lmax, lmin, mmax, mmin = ex.lambda_max, ex.lambda_min, ex.method_max, ex.method_min
    info.update(lambda_max=lmax, lambda_min=lmin, kappa=hessian.cond_num(lmax, lmin), method_lambda_max=mmax,
                method_lambda_min=mmin, full_spectrum=full)
    eig_seconds = time.perf_counter() - t0  # wall clock: the config's MLflow run, never the cell's record
    if hp.autodiff_check_max_n >= N * H:
        terms = EnergyTerms(activity_decay=c["activity_decay"])

        def f(v: torch.Tensor) -> torch.Tensor:
            return energy(spec, w, x.view(1, -1), y.view(1, -1), v.view(1, H, 1, N), terms).sum()

        auto = torch.func.hessian(f)(zs.reshape(-1))
        info["autodiff_max_abs_diff"] = float((auto - hessian.to_dense(blocks)).abs().max())
    if c["act"] == "linear":  # theory D, O and H_theory (= H_num for linear nets: compare the matrices)
        tb = hessian.theory_blocks(spec, w, c["activity_decay"])
        legacy_theory = hessian.theory_multipliers(spec) != hessian.multipliers(spec)  # Q1: paper-era 1/√N theory
        info["theory_vs_num_max_abs_diff"] = float(max((tb.diag - blocks.diag).abs().max(),
                                                       (tb.upper - blocks.upper).abs().max() if H > 1 else 0.0))
        d_blocks, o_blocks = hessian.split(tb)
        d_ev = hessian.block_diag_spectrum(tb)
        info.update(D_lambda_max=float(d_ev[-1]), D_lambda_min=float(d_ev[0]), D_method="exact_blocks")
        if full:
            arrays["theory_D_eigenvals"] = d_ev
            if H > 1:
                o_ev, o_method = hessian.off_diagonal_spectrum(o_blocks, dense_max_n=hp.dense_max_n,
                                                               backend=backend, device=device)
            else:
                o_ev, o_method = np.zeros(N), "exact_blocks"
            arrays["theory_O_eigenvals"] = o_ev
            arrays["theory_hessian_eigenvals"] = arrays["num_hessian_eigenvals"]
            info.update(O_lambda_max=float(o_ev[-1]), O_lambda_min=float(o_ev[0]), O_method_max=o_method,
                        O_method_min=o_method)
        elif H > 1:
            if max(hp.dense_max_n, 3) >= N * H:
                o_ev, _ = hessian.full_spectrum(o_blocks, dense_max_n=hp.dense_max_n)
                omax, omin, om_max, om_min = float(o_ev[-1]), float(o_ev[0]), "dense", "dense"
            elif hp.band_max_n >= N * H:
                o_ev, _ = hessian.off_diagonal_spectrum(o_blocks, dense_max_n=0, backend="banded")
                omax, omin, om_max, om_min = float(o_ev[-1]), float(o_ev[0]), "banded", "banded"
            else:
                op = hessian.matvec_op(o_blocks)
                omax = hessian._eigsh(op, "LA", hp.lanczos_tol)
                omin = hessian._eigsh(op, "SA", hp.lanczos_tol)
                om_max, om_min = "lanczos_LA", "lanczos_SA"
            info.update(O_lambda_max=omax, O_lambda_min=omin, O_method_max=om_max, O_method_min=om_min)
        else:
            info.update(O_lambda_max=0.0, O_lambda_min=0.0, O_method_max="exact_blocks", O_method_min="exact_blocks")
        info["D_kappa"] = hessian.cond_num(info["D_lambda_max"], info["D_lambda_min"])
        info["O_kappa"] = hessian.cond_num(info["O_lambda_max"], info["O_lambda_min"])
        if legacy_theory:  # H_theory ≠ H_num: its own spectrum / extremes
            if full:
                th_ev, _ = hessian.full_spectrum(tb, dense_max_n=hp.dense_max_n, backend=backend,
                                                 device=device)
                arrays["theory_hessian_eigenvals"] = th_ev
                tmax, tmin = float(th_ev[-1]), float(th_ev[0])
            else:
                tex = hessian.extremes(tb, tol=hp.lanczos_tol, dense_max_n=hp.dense_max_n, band_max_n=hp.band_max_n)
                tmax, tmin = tex.lambda_max, tex.lambda_min
            info.update(H_theory_lambda_max=tmax, H_theory_lambda_min=tmin,
                        H_theory_kappa=hessian.cond_num(tmax, tmin))
        else:
            info.update(H_theory_lambda_max=lmax, H_theory_lambda_min=lmin, H_theory_kappa=info["kappa"])
    if hp.save_weights:
        arrays.update(w_in=w.w_in[0].numpy(), w_hid=w.w_hid[0].numpy(), w_out=w.w_out[0].numpy(), x=x.numpy())
    arrays.update(lambda_max=np.float64(lmax), lambda_min=np.float64(lmin), kappa=np.float64(info["kappa"]))
    return arrays, info, eig_seconds


@dataclass(frozen=True)
class HessianTask:
    """One cell to compute, picklable: a task in this process or on a Ray worker (``TRAINSCAPE_EXECUTOR``),
    so a cluster (or a local Ray on a many-core CPU) computes the paper grid's full spectra side by side."""

    config: dict[str, Any]
    N: int
    H: int
    hp: HessianParams
    legacy: bool
    full: bool
    device: str
    threads: int
    backend: str  # the full spectra's route (layout.spectrum_routes)


def hessian_task(task: HessianTask) -> tuple[dict[str, np.ndarray], dict[str, Any], float]:
    if task.device.startswith("cpu"):
        torch.set_num_threads(cpu_threads(task.threads))
    return hessian_cell(task.config, task.N, task.H, task.hp, task.legacy, task.full, task.device, task.backend)


def train_hessian(ctx: Context, unit: str) -> Iterator[Output]:
    """Each cell is a part, written as soon as it is computed; a cell whose ``cell.json`` carries the same
    settings is kept. The cells to compute are tasks of ``ctx.map`` (in this process, or Ray tasks side by
    side). The per-config summaries and MLflow runs come with the final output."""
    cfg = unit_settings(ctx)
    hp, legacy = cfg.hessian, cfg.legacy_noskip_branch_scale
    t_all = time.perf_counter()
    configs = hessian_configs(hp)
    routes = spectrum_routes(hp, str(ctx.device))
    cells: dict[tuple[int, int, int], dict[str, Any]] = {}  # (config, N, H) -> info
    tasks, keys, settings_of = [], [], []
    for i, c in enumerate(configs):
        for N, H in itertools.product(hp.widths, hp.depths):
            full = is_slice(N, H, hp)
            backend = routes.get((i, N, H), hp.backend_on(str(ctx.device)))
            settings = cell_settings(c, hp, legacy, full, backend)
            done = ctx.previous(f"{cell_dir(c, N, H)}/cell.json")
            if done is not None and done.get("settings") == settings:
                cells[(i, N, H)] = {k: v for k, v in done["info"].items() if k != "eig_seconds"}  # written before
            else:
                tasks.append(HessianTask(c, N, H, hp, legacy, full, str(ctx.device), cfg.threads, backend))
                keys.append((i, N, H))
                settings_of.append(settings)
    ctx.log(f"hessian_init: {len(configs)} configs, {len(cells)} cells kept, {len(tasks)} to compute")
    eig_seconds: dict[tuple[int, int, int], float] = {}
    finished = ctx.map(hessian_task, tasks, gpus=0 if str(ctx.device).startswith("cpu") else 1)
    for j, (arrays, info, seconds) in ctx.track(finished, total=len(tasks), desc="Hessian cells", unit="cell"):
        i, N, H = keys[j]
        cells[keys[j]], eig_seconds[keys[j]] = info, seconds
        yield Output(part=cell_dir(configs[i], N, H), json={"cell.json": {"settings": settings_of[j], "info": info}},
                     arrays={"cell.npz": arrays})
    summaries: dict[str, Any] = {}
    runs = []
    for i, c in enumerate(configs):
        infos, metrics = [], {}
        for N, H in itertools.product(hp.widths, hp.depths):
            info = cells[(i, N, H)]
            infos.append(info)
            if (i, N, H) in eig_seconds:  # wall clock: the config's MLflow run, never the cell's record
                metrics[f"eig_seconds_N{N}_H{H}"] = eig_seconds[(i, N, H)]
            metrics.update({f"kappa_N{N}_H{H}": info["kappa"], f"lambda_max_N{N}_H{H}": info["lambda_max"],
                            f"lambda_min_N{N}_H{H}": info["lambda_min"]})
        summaries[f"{hessian_key(c)}/summary.json"] = {"config": c, "legacy_noskip_branch_scale": legacy,
                                                       "cells": infos}
        runs.append(Run(hessian_key(c), params={**c, "legacy_noskip_branch_scale": legacy, "widths": hp.widths,
                                                "depths": hp.depths}, metrics=metrics))
    ctx.log(f"hessian_init: {len(configs)} configs in {time.perf_counter() - t_all:.1f} s")
    return Output(json={**summaries, "configs.json": {"configs": [hessian_key(c) for c in configs]}}, runs=runs)


def cell_settings(c: dict[str, Any], hp: HessianParams, legacy: bool, full: bool, backend: str) -> dict[str, Any]:
    """What a cell's numbers depend on (``backend``: its full spectra's route): a kept cell must have been
    computed with these."""
    return {"config": c, "legacy": legacy, "full": full, "dense_max_n": hp.dense_max_n,
            "band_max_n": hp.band_max_n, "backend": backend, "tol": hp.lanczos_tol, "save_weights": hp.save_weights,
            "autodiff_check_max_n": hp.autodiff_check_max_n}


# ----------------------------------------------------------------------------- data


def mnist_batches(n_batches: int, batch_size: int, seed: int, train_images: int | None, device: str,
                  dtype: torch.dtype) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Shuffled (seeded) MNIST training batches, drop_last, on the device; one-hot float targets."""
    split = load_split("mnist", train=True)
    imgs, labels = split.images, split.labels
    if train_images is not None:
        imgs, labels = imgs[:train_images], labels[:train_images]
    x = normalised(imgs, MNIST_MEAN, MNIST_STD, device, torch.float32).to(dtype)
    y = torch.nn.functional.one_hot(labels, 10).to(device=device, dtype=dtype)
    perm = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(seed)).to(device)
    if n_batches * batch_size > x.shape[0]:
        raise ValueError(f"{n_batches} batches of {batch_size} need more than {x.shape[0]} images")
    return [(x[perm[i * batch_size:(i + 1) * batch_size]], y[perm[i * batch_size:(i + 1) * batch_size]])
            for i in range(n_batches)]


# ----------------------------------------------------------------------------- forward pass


def train_fwd(ctx: Context, unit: str) -> Output:
    cfg = unit_settings(ctx)
    fp = cfg.fwd_pass
    batches = mnist_batches(fp.checks, fp.batch_size, fp.seed, fp.train_images, ctx.device, torch.float32)
    shape = (5, fp.checks, len(fp.widths), len(fp.depths))
    res = {(a, o, v): {m: np.full(shape, np.nan) for m in FWD_METRICS}
           for a in fp.acts for o in fp.optims for v in fp.variants}
    t0 = time.perf_counter()
    groups = fwd_draws(fp)
    gains = [gain for (init, gain, _, _), _ in groups if init == "orthogonal"]
    orthogonal = None  # one width's orthogonal draws, every depth and gain (let go when the next width starts)
    for (init, _, N, L), cells in groups:
        i, j = fp.widths.index(N), fp.depths.index(L)
        spec = fwdpass.net_spec(*cells[0], N, L)
        if init == "orthogonal":
            if orthogonal is None or orthogonal.N != N:
                orthogonal = None
                orthogonal = fwdpass.OrthogonalDraws(N, fp.seed, gains, max(fp.depths) - 2)
            initial = orthogonal.weights(spec)
        else:
            initial = fwdpass.initial_weights(spec, fp.seed)  # the cells' shared initial weights
        for variant, act in cells:
            spec = fwdpass.net_spec(variant, act, N, L)
            out = fwdpass.run_cell(spec, list(fp.optims), batches, fp.lr, initial, ctx.device).numpy()
            for r, optim in enumerate(fp.optims):
                for k, metric in enumerate(FWD_METRICS):
                    res[(act, optim, variant)][metric][:, :, i, j] = out[k, r]
    arrays, runs = {}, []
    for (act, optim, variant), arrs in res.items():
        key = fwd_key(act, optim, variant)
        arrays[f"{key}/fwd_pass.npz"] = {f"{m}_per_N_L": a for m, a in arrs.items()}
        flat = {}
        for i, N in enumerate(fp.widths):
            for j, L in enumerate(fp.depths):
                rms = arrs["avg_activity_l2"][:, 0, i, j]
                flat.update({f"rms_t0_N{N}_L{L}_layer{k}": float(v) for k, v in enumerate(rms) if np.isfinite(v)})
        runs.append(Run(key, params={"act": act, "optim": optim, "variant": variant, "lr": fp.lr, "seed": fp.seed,
                                     "widths": fp.widths, "depths": fp.depths,
                                     "spectral_norm": "sqrt(largest eigenvalue of the smaller Gram), float64"},
                        metrics=flat))
    grid = {"widths": fp.widths, "depths": fp.depths, "checks": fp.checks,
            "layers": "[0, L/4-1, L/2-1, 3L/4-1, L-1] (0-based weight layers)",
            "spectral_norm": "sqrt of the largest eigenvalue of the smaller Gram matrix, float64 (exact)"}
    ctx.log(f"fwd_pass: {len(res)} configs in {time.perf_counter() - t0:.1f} s")
    return Output(json={"grid.json": grid}, arrays=arrays, runs=runs)


# ----------------------------------------------------------------------------- energy theory


def theory_spec(act: str, param: str, N: int, H: int) -> NetSpec:
    """An MNIST ResNet of the theory runs (always with skips, so Q1's no-skip scale does not apply)."""
    init = "standard_gauss" if param == "mupc" else "standard"
    return NetSpec(D=784, N=N, H=H, d_y=10, act=act, skips=True, param=param, init=init)


def theory_run(spec: NetSpec, batches: list, lr: float, seed: int, eq_tol: float = 1e-8,
               eq_max_steps: int = 5000, eq_solver: str = "newton", newton_max_steps: int = 50,
               cg_iters: int = 3) -> dict[str, np.ndarray]:
    """PC with exact (linear) or numerical (tanh, relu) inference: per iteration ℒ, F*, ℒ/F*, then an Adam
    step on ∇_θ F at z*. Linear nets also record the closed form ½ rᵀS⁻¹r and its gap to F(z*); numerical
    equilibria their residual, steps, the samples × Newton steps whose line search found no decrease, and the
    gradient-descent steps of a Newton fallback."""
    device = batches[0][0].device
    w = init_weights(spec, [seed], dtype=torch.float64, device=device)
    opt = Adam(w.tensors(), lr)
    n = len(batches)
    out = {k: np.zeros(n) for k in ("train_losses", "train_energies", "loss_energy_ratios")}
    if spec.act == "linear":
        out["closed_form_energies"] = np.zeros(n)
    else:
        out.update(eq_residuals=np.zeros(n), eq_steps=np.zeros(n, dtype=np.int64),
                   eq_fallback_steps=np.zeros(n, dtype=np.int64), eq_failed_steps=np.zeros(n, dtype=np.int64))
    records = []  # per iteration [ℒ, F*(, closed form)] on the device, read once after the loop
    for k, (x, y) in enumerate(batches):
        z0, y_hat = feedforward(spec, w, x)
        record = [theory.summed_loss(y_hat, y)[0]]
        if spec.act == "linear":
            z = theory.linear_equilibrium(spec, w, x, y)
            record.append(theory.closed_form_energy(spec, w, x, y).mean())
        else:
            if eq_solver == "newton":
                eq = newton.newton_equilibrium(spec, w, x, y, z0, tol=eq_tol, max_steps=newton_max_steps,
                                               cg_iters=cg_iters, fallback_max_steps=eq_max_steps)
            else:
                eq = theory.numerical_equilibrium(spec, w, x, y, z0, tol=eq_tol, max_steps=eq_max_steps)
            z = eq.z
            out["eq_residuals"][k], out["eq_steps"][k] = float(eq.residual.max()), eq.steps
            out["eq_fallback_steps"][k], out["eq_failed_steps"][k] = eq.fallback_steps, eq.failed_steps
        record.insert(1, theory.per_sample_energy(spec, w, x, y, z).mean())
        records.append(torch.stack(record))
        if k == n - 1:
            break
        eps, eps_out = errors(spec, w, x, y, z)
        grads = weight_grads(spec, w, x, z, eps, eps_out)
        w = Weights(*opt.step(w.tensors(), grads.tensors()))
    values = torch.stack(records).cpu().numpy()
    out["train_losses"], out["train_energies"] = values[:, 0].copy(), values[:, 1].copy()
    out["loss_energy_ratios"] = values[:, 0] / values[:, 1]
    if spec.act == "linear":
        out["closed_form_energies"] = values[:, 2].copy()
    return out


def theory_record(key: str, params: dict[str, Any], out: dict[str, np.ndarray]) -> Run:
    """The MLflow run of one theory configuration: ℒ, F*, ℒ/F* per iteration and the equilibrium check."""
    steps = range(len(out["loss_energy_ratios"]))
    series = {"loss_energy_ratio": (steps, out["loss_energy_ratios"]), "train_loss": (steps, out["train_losses"]),
              "train_energy": (steps, out["train_energies"])}
    metrics = {}
    if "eq_residuals" in out:
        metrics["max_eq_residual"] = float(np.max(out["eq_residuals"]))
        metrics["mean_eq_steps"] = float(np.mean(out["eq_steps"]))
        metrics["eq_fallback_steps"] = float(np.sum(out["eq_fallback_steps"]))
        metrics["eq_failed_steps"] = float(np.sum(out["eq_failed_steps"]))
    if "closed_form_energies" in out:
        gap = np.max(np.abs(out["closed_form_energies"] - out["train_energies"]) / np.abs(out["train_energies"]))
        metrics["closed_form_rel_gap"] = float(gap)
    return Run(key, params=params, metrics=metrics, series=series)


@dataclass(frozen=True)
class TheoryNet:
    """One theory net to train, picklable: a task in this process or on a Ray worker, which loads its MNIST
    batches itself (937 × 64 float64 images, 376 MB, would be a heavy task argument)."""

    key: str
    spec: NetSpec
    lr: float
    iters: int
    batch_size: int
    seed: int
    train_images: int | None
    device: str
    threads: int
    eq: dict[str, Any]  # theory_run's equilibrium settings (tanh/relu)
    params: dict[str, Any]  # the record's params (MLflow)

    def settings(self) -> dict[str, Any]:
        """What the net's numbers depend on: a kept net must have been trained with these."""
        return {**self.params, "batch_size": self.batch_size, "train_images": self.train_images, **self.eq}


_BATCHES: dict[tuple[Any, ...], list] = {}  # per process: the last MNIST batches its nets trained on


def train_net(net: TheoryNet) -> dict[str, np.ndarray]:
    if net.device.startswith("cpu"):
        torch.set_num_threads(cpu_threads(net.threads))
    data = (net.iters, net.batch_size, net.seed, net.train_images, net.device)
    if data not in _BATCHES:
        _BATCHES.clear()
        _BATCHES[data] = mnist_batches(*data, torch.float64)
    return theory_run(net.spec, _BATCHES[data], net.lr, net.seed, **net.eq)


def train_nets(ctx: Context, nets: list[TheoryNet], desc: str) -> Iterator[Output]:
    """Each net is a part, written as soon as it is trained, with its MLflow run; a net whose ``net.json``
    carries the same settings is kept (a stopped paper unit resumes). The nets to train are ``ctx.map`` tasks:
    in this process, or Ray tasks side by side."""
    t0 = time.perf_counter()
    todo = [n for n in nets if (ctx.previous(f"{n.key}/net.json") or {}).get("settings") != n.settings()]
    ctx.log(f"{len(nets)} nets, {len(nets) - len(todo)} kept, {len(todo)} to train")
    moved = sum(n.device != str(ctx.device) for n in todo)
    if moved:
        ctx.log(f"{moved} nets of width <= {THEORY_CPU_MAX_WIDTH} train on the CPU (latency-bound on {ctx.device}), "
                f"{len(todo) - moved} on {ctx.device}")
    finished = ctx.map(train_net, todo, gpus=0 if len(todo) == moved or str(ctx.device).startswith("cpu") else 1)
    for j, out in ctx.track(finished, total=len(todo), desc=desc, unit="net"):
        net = todo[j]
        yield Output(part=net.key, json={"net.json": {"settings": net.settings()}}, arrays={"theory.npz": out},
                     runs=[replace(theory_record(net.key, net.params, out), tags={"device": net.device})])
    ctx.log(f"{desc}: {len(todo)} nets trained in {time.perf_counter() - t0:.1f} s")
    return Output()


def train_theory_grid(ctx: Context, unit: str) -> Iterator[Output]:
    cfg = unit_settings(ctx)
    tg = cfg.theory_grid
    nets = []
    for (param, lr), N, H in itertools.product(tg.param_lrs.items(), tg.widths, tg.depths):
        spec = theory_spec("linear", param, N, H)
        nets.append(TheoryNet(theory_key("linear", param, N, H), spec, lr, tg.iters, tg.batch_size, tg.seed,
                              tg.train_images, theory_device(N, str(ctx.device)), theory_threads(N, cfg.threads), {},
                              {**asdict(spec), "param_lr": lr, "iters": tg.iters, "seed": tg.seed, "optim": "adam",
                               "inference": "exact (block Cholesky)"}))
    return (yield from train_nets(ctx, nets, "theory grid"))


def train_theory_width(ctx: Context, unit: str) -> Iterator[Output]:
    cfg = unit_settings(ctx)
    tw = cfg.theory_width
    solver = {"newton": "Newton", "gd": "GD"}[tw.eq_solver]
    nets = []
    for act, param, N in itertools.product(tw.acts, tw.params, tw.widths):
        spec = theory_spec(act, param, N, tw.depth)
        inference = "exact (block Cholesky)" if act == "linear" else f"numerical equilibrium ({solver}, float64)"
        eq = {"eq_tol": tw.eq_tol, "eq_max_steps": tw.eq_max_steps, "eq_solver": tw.eq_solver,
              "newton_max_steps": tw.newton_max_steps, "cg_iters": tw.cg_iters}
        nets.append(TheoryNet(theory_key(act, param, N, tw.depth), spec, tw.param_lr, tw.iters, tw.batch_size,
                              tw.seed, tw.train_images, theory_device(N, str(ctx.device)),
                              theory_threads(N, cfg.threads), eq,
                              {**asdict(spec), "param_lr": tw.param_lr, "iters": tw.iters, "seed": tw.seed,
                               "optim": "adam", "inference": inference, **eq}))
    return (yield from train_nets(ctx, nets, "theory across width"))
