"""What a mupc_training sweep computes, counted from its shapes: runs, stacked groups, FLOPs (``make plan``).

Light on purpose (no torch, no training code): ``make plan`` reads it for every sweep of a profile, and the
stage's plan line before it trains. The probes that time one step of each shape are in ``probe.py``.

FLOPs are those of the matrix products, 2·m·n·k each; element-wise work (activations, Adam) is not counted,
but the calibration times whole steps, so its time is in the estimate. With B = 64, D = 784, d_y = 10:

* one PC training iteration of one run (:func:`iteration_flops`, the count ``benchmarks/pc_training.py``
  and the mupc README quote): feed-forward ``2B(DN + (H−1)N² + d_y N)`` (W₁x once per batch), each of the
  T inference steps ``2B(2(H−1)N² + 2 d_y N)`` (predictions and Jᵀε), the final errors
  ``2B((H−1)N² + d_y N)`` and the weight gradients (≈ one feed-forward): the *useful* count. The engine
  follows the inference front (step t forms only the top min(t, H−1) layers' products; the first layer's
  weight gradient only once T ≥ H), so it *executes* fewer; with activity decay it forms every layer
  (executed = useful). The plan counts executed FLOPs;
* one evaluation (every ``test_every`` iterations): a feed-forward of the kept test images
  (:func:`evaluation_flops`);
* one BP iteration: feed-forward and backward, 3 feed-forwards (:func:`bp_iteration_flops`);
* the Hessian monitor (``metrics: hessian``), per run at initialisation and at every evaluation
  (:func:`hessian_flops`, n = N·H): the blocks, then up to ``hessian_dense_max_n`` (the value for the device
  estimated for) a dense ``eigvalsh`` (4n³/3, eigenvalues only; ≈ 9n³ with eigenvectors), above it the
  structured extremes (Lanczos and a banded Cholesky, O(nN²)); the counts are
  ``pipeline/studies/mupc/engine/cost.py``'s.

Iterations per epoch: ``n_train // 64`` (drop_last; ``data.n_train``, null = the 60,000 images of either
dataset). Every run is counted for all its iterations: runs that stop early (diverged, no learning) cost
less, so the count is an upper bound.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pipeline.contract import Cost, Work
from pipeline.studies.mupc.engine.cost import blocks_flops, eig_flops
from pipeline.studies.mupc.engine.runs import RunConfig
from pipeline.studies.mupc.training.config import TrainingParams
from pipeline.studies.mupc.training.sweep_expansion import (
    CONFIG_FILE,
    expand,
    is_done,
    resume_settings,
    run_part,
    stack_groups,
)

D, D_Y = 784, 10
SPLIT = {"train": 60_000, "test": 10_000}  # images per split, MNIST and Fashion-MNIST alike
EVAL_BATCH = 64  # the evaluator keeps n_test // 64 · 64 test images (drop_last)


def iteration_flops(N: int, H: int, T: int, B: int = 64, D: int = D, d_y: int = D_Y,
                    front: bool = True) -> tuple[float, float]:
    """(useful, executed) matrix-product FLOPs of one PC training iteration of one run, evaluation excluded
    (see the module docstring). ``front``: the engine follows the inference front (off with activity decay)."""
    ffwd = 2 * B * (D * N + (H - 1) * N * N + d_y * N)
    pred = 2 * B * ((H - 1) * N * N + d_y * N)
    useful = ffwd + T * 2 * pred + pred + ffwd
    if not front:
        return useful, useful
    hid, out = 2 * B * N * N, 2 * B * d_y * N
    steps = (out if T else 0) + sum(2 * (min(t, H - 1) * hid + out) for t in range(1, T))
    final = min(T, H - 1) * hid + out
    grads = (2 * B * D * N if T >= H else 0) + min(T, H - 1) * hid + out
    return useful, ffwd + steps + final + grads


# Activity-sized passes (reads + writes of [R, B, N] per layer) of one inference step of the engine
# (``energy.PCEngine.errors``, ``_grad``, the norm and the GD update), counted from its kernels: φ and φ' 2 + 2,
# μ_ℓ's copy 2, its ``baddbmm`` 3, ε = z − μ 3, ε_ℓ − s·ε_{ℓ+1} 3, Jᵀε's ``bmm`` 2, its ``addcmul`` 4, the norm 1,
# the update 3; linear has no φ or φ' and accumulates Jᵀε into G (3 instead of 2 + 4).
ENGINE_ACTIVITY_PASSES = {"relu": 25, "tanh": 25, "linear": 18}
# The fused route (``energy.PCEngine(route="fused")``, ``mupc/engine/fused.py``), GD, with skips (without: 7): the error
# kernel reads z_{ℓ−1} (the product's operand, φ applied as it loads; its skip term 1 more), z_ℓ and writes ε_ℓ
# (4); the gradient kernel reads ε_{ℓ+1} (the operand; its skip term 1 more), ε_ℓ and z_ℓ and writes z_ℓ (5); the
# norm partials are a few numbers per tile. Adam reads and writes its two moments besides (+4). Any activation.
FUSED_ACTIVITY_PASSES = 9
FLOOR_ACTIVITY_PASSES = 2  # read z, write z: every other activity-sized value can live in registers
ENGINE_WEIGHT_READS, FLOOR_WEIGHT_READS = 2, 1  # both products of a step: two reads today, one at the floor
# The iteration's other weight-sized passes (feed-forward 1, the final errors 1, the weight gradient 1 written,
# Adam reading w, m, v and the gradient and writing w, m, v: 7): counted alike on both sides.
OTHER_WEIGHT_PASSES = 10
# The fused route copies the hidden weights transposed once an iteration (read 1, write 1), for its step kernel.
FUSED_COPY_WEIGHT_PASSES = 2


def iteration_bytes(N: int, H: int, T: int, act: str, R: int = 1, B: int = 64, itemsize: int = 4,
                    route: str = "engine") -> float:
    """Bytes that one PC training iteration of a stack of ``R`` runs moves to and from device memory, the
    hidden layers' terms (input and read-out layers left out: < 1 % at N = 512): ``route`` ``engine`` as
    :class:`~pipeline.studies.mupc.engine.energy.PCEngine` does it, ``fused`` as its fused route does (each weight read
    twice per step still, the element-wise work in the products' kernels), or ``floor``, each weight read once and each
    activity read and written once per inference step. Both follow the inference front (step t touches the
    top min(t, H − 1) hidden products and min(t + 1, H) activity rows), as the engine does from the
    feed-forward point; the rest of the iteration (:data:`OTHER_WEIGHT_PASSES`) is the same on both sides.
    A model for ``benchmarks/pc_gpu.py``'s bandwidth columns, not a measurement."""
    passes = {"engine": (ENGINE_WEIGHT_READS, ENGINE_ACTIVITY_PASSES[act]),
              "fused": (ENGINE_WEIGHT_READS, FUSED_ACTIVITY_PASSES),
              "floor": (FLOOR_WEIGHT_READS, FLOOR_ACTIVITY_PASSES)}
    if route not in passes:
        raise ValueError(f"route {route!r} is not one of {', '.join(passes)}")
    w_reads, a_passes = passes[route]
    weight, rows = R * N * N * itemsize, R * B * N * itemsize
    steps = sum(w_reads * min(t, H - 1) * weight + a_passes * min(t + 1, H) * rows for t in range(T))
    other = OTHER_WEIGHT_PASSES + (FUSED_COPY_WEIGHT_PASSES if route == "fused" else 0)
    return float(steps + other * (H - 1) * weight)


# CUDA graphs pay where an iteration's kernels are short enough for their launches to show: measured on an
# H100 (benchmarks/README.md, "Graphs only where they pay"; tests/mupc_training/fixtures/headline/pc_gpu.json)
# the replay gained 1.13-7.8x up to 1.07 GB moved per inference step and 1.01-1.04x from 2.0 GB (twelve
# settings, N 128-512, H 8-128, T 8-500, 1-64 runs; bytes by iteration_bytes, averaged over the steps).
GRAPH_MAX_STEP_BYTES = 1.5e9


def graphs_skipped(N: int, H: int, T: int, act: str, R: int, B: int = 64, itemsize: int = 4,
                   limit: float = GRAPH_MAX_STEP_BYTES) -> str | None:
    """None where a CUDA graph of such a stack is expected to pay, else why not: the engine's bytes per inference
    step at or above ``limit``, where the stack is bound by memory bandwidth and the capture and its check (a
    minute at 512:128:128 × 64) buy nothing."""
    steps = max(T, 1)
    per_step = iteration_bytes(N, H, steps, act, R, B, itemsize) / steps
    if per_step < limit:
        return None
    return (f"bandwidth-bound: {per_step / 1e9:.2f} GB per inference step >= {limit / 1e9:g} GB, "
            f"where graphs gained at most 1.04x on an H100")


def evaluation_flops(N: int, H: int, images: int, D: int = D, d_y: int = D_Y) -> float:
    """One feed-forward of ``images`` images (a test evaluation of one run)."""
    return 2 * images * (D * N + (H - 1) * N * N + d_y * N)


def bp_iteration_flops(N: int, H: int, B: int = 64, D: int = D, d_y: int = D_Y) -> float:
    """One BP iteration of one run: feed-forward and backward (inputs' and weights' gradients), 3 feed-forwards."""
    return 3 * evaluation_flops(N, H, B, D, d_y)


def hessian_method(N: int, H: int, dense_max_n: int) -> str:
    """``dense`` (one batched ``eigvalsh``) up to ``dense_max_n`` = N·H, else ``structured``."""
    return "dense" if dense_max_n >= N * H else "structured"


def hessian_flops(N: int, H: int, method: str) -> float:
    """One Hessian-monitor call for one run: the blocks and the eigen-solve (dense or structured)."""
    return blocks_flops(N, H) + eig_flops(method, N, H)


def iterations(cfg: TrainingParams, rc: RunConfig) -> int:
    """Training iterations of run ``rc``: epochs × (n_train // batch)."""
    return rc.epochs * ((cfg.data.n_train or SPLIT["train"]) // rc.batch_size)


def test_images(cfg: TrainingParams) -> int:
    """The test images one evaluation reads (drop_last to whole batches of 64)."""
    return (cfg.data.n_test or SPLIT["test"]) // EVAL_BATCH * EVAL_BATCH


def run_flops(cfg: TrainingParams, rc: RunConfig, device: str = "cpu") -> tuple[float, float]:
    """(training with its evaluations, Hessian monitor) FLOPs of one run for all its iterations on ``device``
    (the monitor's route depends on it: the device's ``hessian_dense_max_n``)."""
    its = iterations(cfg, rc)
    evals = its // rc.test_every
    evaluation = evals * evaluation_flops(rc.N, rc.H, test_images(cfg))
    if rc.method == "bp":
        return its * bp_iteration_flops(rc.N, rc.H, rc.batch_size) + evaluation, 0.0
    step = iteration_flops(rc.N, rc.H, rc.T, rc.batch_size, front=not rc.activity_decay)[1]
    hess = 0.0
    if rc.metrics == "hessian":
        method = hessian_method(rc.N, rc.H, cfg.hessian_dense_max_n.for_device(device))
        hess = (1 + evals) * hessian_flops(rc.N, rc.H, method)
    return its * step + evaluation, hess


def group_flops(cfg: TrainingParams, group: Sequence[RunConfig], device: str = "cpu") -> float:
    """FLOPs of one stacked group on ``device`` (the progress bar of the sweep counts these)."""
    return sum(sum(run_flops(cfg, rc, device)) for rc in group)


def group_work(cfg: TrainingParams, group: Sequence[RunConfig], prec: str, device: str) -> list[Work]:
    """The work of one stacked group on ``device``: its training steps (with evaluations) and its Hessian monitor."""
    rc, R = group[0], len(group)
    flops = [run_flops(cfg, r, device) for r in group]
    threads = cfg.threads
    if rc.method == "bp":
        shape = {"N": rc.N, "H": rc.H, "runs": R, "precision": prec, "threads": threads}
        out = [Work(f"bp N={rc.N} H={rc.H}, {R} runs per group", "bp_step", shape, sum(f[0] for f in flops))]
    else:
        shape = {"N": rc.N, "H": rc.H, "T": rc.T, "runs": R, "act_optim": rc.act_optim,
                 "front": not rc.activity_decay, "precision": prec, "threads": threads}
        if device.startswith("cuda"):
            # the probe replays its iteration from a graph where graphs are on: a stack the trainer replays runs
            # so, and one it trains eagerly (bandwidth-bound) runs at about its replayed rate, which a scaled-down
            # stand-in shows only when replayed (eager, its launches would show instead)
            shape["graphs"] = cfg.cuda_graphs
        out = [Work(f"pc N={rc.N} H={rc.H} T={rc.T}{'' if shape['front'] else ' (decay)'}, {R} runs per group",
                    "pc_step", shape, sum(f[0] for f in flops))]
    hess = sum(f[1] for f in flops)
    if hess:
        method = hessian_method(rc.N, rc.H, cfg.hessian_dense_max_n.for_device(device))
        out.append(Work(f"Hessian monitor N={rc.N} H={rc.H} ({method}, float64)", "hessian",
                        {"N": rc.N, "H": rc.H, "method": method, "threads": threads}, hess))
    return out


def train_cost(cfg: TrainingParams, unit: str, device: str, previous: Callable[[str], Any] | None = None) -> Cost:
    """Sweep ``unit``: the runs still to train (those ``previous`` holds a matching record of are done, as
    the stage decides), their stacked groups and work; identical shapes merged."""
    runs = expand(cfg, unit)
    settings = resume_settings(cfg, unit, device)
    todo = [rc for rc in runs
            if previous is None or not is_done(previous(f"{run_part(rc)}/{CONFIG_FILE}"), rc, settings)]
    groups = stack_groups(todo, cfg.max_stack)
    merged: dict[str, Work] = {}
    for group in groups:
        for w in group_work(cfg, group, settings["precision"], device):
            key = f"{w.probe}:{sorted(w.shape.items())}"
            merged[key] = Work(w.label, w.probe, w.shape, merged[key].flops + w.flops) if key in merged else w
    done = len(runs) - len(todo)
    note = (f"{done:,} of {len(runs):,} runs already trained, not counted" if done
            else f"all {len(runs):,} run{'' if len(runs) == 1 else 's'}")
    return Cost(runs=len(todo), groups=len(groups), work=tuple(merged.values()),
                note=f"{note}; {settings['precision']}; upper bound: runs that stop early cost less")
