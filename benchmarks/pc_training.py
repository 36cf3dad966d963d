"""PC training throughput of the sweep trainer against the matrix-product peak of the same shapes.

    taskset -c 1 .venv/bin/python benchmarks/pc_training.py          # the issue's three settings
    taskset -c 1 .venv/bin/python benchmarks/pc_training.py --sizes 128:8 --iters 32

One process, one thread, pinned by the caller. Per setting (μPC, ReLU, skips, B = 64, T = 8,
float32, a 1,024-image evaluation every 16 iterations; synthetic MNIST-shaped data, so no download):

* ``sequential``: 9 runs trained one after another by ``train_group`` (one run per group);
* ``whole``: the same, with the engine computing every layer at every step;
* ``stacked``: the same 9 runs as one stacked group;
* ``auto``: the runs per stack that the trainer's layout probe (``trainer.stack_layout``) picks here;
* ``previous``: one run through the per-function path the trainer used before the layer-batched
  engine (``feedforward``/``infer``/``errors``/``weight_grads``/``Adam``), for the side-by-side ratio
  (and the 9 runs stacked through it at N ≤ 32);
* ``peak``: the iteration's matrix products alone, with the iteration's shapes and batch counts
  (``bmm`` over [layers × runs]), replayed without any element-wise work.

Useful FLOPs per iteration (matrix products only; W₁x once per batch; counted by
``pipeline/studies/mupc/training/cost.py``, the count ``make plan`` uses): feed-forward
``2B(784N + (H−1)N² + 10N)``, each of the T inference steps ``2B(2(H−1)N² + 2·10N)``, the final
errors ``2B((H−1)N² + 10N)``, the weight gradients (≈ feed-forward) and the evaluation share
(1,024 images / 16 iterations = one feed-forward of 64). The engine follows the inference front: at
the feed-forward point every hidden error is exactly 0, and step t has moved only the top t layers,
so it forms only their predictions and Jᵀε (and the first layer's weight gradient only when T ≥ H);
it executes fewer FLOPs than counted, the "exec" column says how many, and ``whole`` is the same
trainer computing every layer at every step (``front=False``), for the side-by-side ratio. Timings
are the best of ``--repeats`` interleaved rounds, so load from other processes on the core hits
every column alike.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pipeline.studies.mupc.engine.iteration as iteration
import pipeline.studies.mupc.training.group_training as tr
from pipeline.studies.mupc.engine.energy import Adam, InferenceConfig, errors, infer, weight_grads
from pipeline.studies.mupc.engine.model import Weights, feedforward, init_weights
from pipeline.studies.mupc.engine.runs import RunConfig
from pipeline.studies.mupc.training.cost import evaluation_flops, iteration_flops

D, DY, B, T, EVAL_N, EVAL_EVERY, RUNS = 784, 10, 64, 8, 1024, 16, 9


def flops(N: int, H: int) -> tuple[float, float]:
    """(useful, executed) matrix-product FLOPs of one training iteration of one run, with its share of the
    evaluation: ``cost.iteration_flops`` (the count ``make plan`` uses; executed follows the inference
    front) plus one feed-forward of EVAL_N images every EVAL_EVERY iterations."""
    useful, executed = iteration_flops(N, H, T, B, D, DY)
    evaluation = evaluation_flops(N, H, EVAL_N, D, DY) / EVAL_EVERY
    return useful + evaluation, executed + evaluation


def make_runs(N: int, H: int, iters: int) -> list[RunConfig]:
    lrs = [1.0, 0.5, 0.1]
    return [RunConfig(dataset="mnist", N=N, H=H, act="relu", param="mupc", init="standard_gauss", skips=True,
                      seed=i // len(lrs), epochs=1, test_every=EVAL_EVERY, param_lr=0.01, T=T,
                      act_lr=lrs[i % len(lrs)]) for i in range(RUNS)]


def make_data(iters: int) -> tr.DataSet:
    g = torch.Generator().manual_seed(0)
    n_train = B * iters
    x = torch.randn(n_train + EVAL_N, D, generator=g)
    y = torch.nn.functional.one_hot(torch.randint(0, DY, (n_train + EVAL_N,), generator=g), DY).float()
    return tr.DataSet(x[:n_train], y[:n_train], x[n_train:], y[n_train:])


def previous_engine(runs: list[RunConfig], data: tr.DataSet) -> None:
    """The trainer's PC loop before the layer-batched engine (per-function, out of place), runs stacked."""
    spec = tr.net_spec(runs[0])
    orders = torch.stack([tr.batch_orders(rc.seed, len(data.y_train), B, 1) for rc in runs], 1)
    w = init_weights(spec, [rc.seed for rc in runs])
    opt = Adam(w.tensors(), torch.tensor([rc.param_lr for rc in runs]))
    cfg = InferenceConfig(steps=T)
    lr = torch.tensor([rc.act_lr for rc in runs])
    with torch.no_grad():
        for i in range(orders.shape[0]):
            x, y = data.x_train[orders[i]], data.y_train[orders[i]]
            z0, _ = feedforward(spec, w, x)
            z = infer(spec, w, x, y, z0, lr, cfg).z
            eps, eps_out = errors(spec, w, x, y, z)
            w = Weights(*opt.step(w.tensors(), weight_grads(spec, w, x, z, eps, eps_out).tensors()))
            if (i + 1) % EVAL_EVERY == 0:
                tr.evaluate(spec, w, data, half_mse=True)


def matmul_replay(N: int, H: int, R: int, iters: int) -> callable:
    """The iteration's matrix products alone (same shapes, batch counts, transposes), ``iters`` times."""
    g = torch.Generator().manual_seed(1)

    def r(*s: int) -> torch.Tensor:
        return torch.randn(*s, generator=g)

    x, w_in, y = r(R, B, D), r(R, N, D), r(R, B, DY)
    hid, w_out = r((H - 1) * R, N, N), r(R, DY, N)
    a, o = r(H * R, B, N), r(H * R, B, N)
    lo, hi = a[:(H - 1) * R], o[R:]
    mu1, eps_out, g_in, g_hid, g_out = r(R, B, N), r(R, B, DY), r(R, N, D), r((H - 1) * R, N, N), r(R, DY, N)
    xe = r(EVAL_N, D)

    def one_iteration(i: int) -> None:
        mu1.baddbmm_(x, w_in.transpose(1, 2), beta=0.0)
        for ell in range(H - 1):  # feed-forward, layer by layer
            w = hid[ell * R:(ell + 1) * R].transpose(1, 2)
            o[(ell + 1) * R:(ell + 2) * R].baddbmm_(a[ell * R:(ell + 1) * R], w)
        torch.baddbmm(y, a[-R:], w_out.transpose(1, 2), out=eps_out)
        for t in range(T + 1):  # T steps (the first without hidden products) and the final errors
            c = min(t, H - 1) * R  # rows of the layers the inference front has reached
            if c:
                hi[-c:].baddbmm_(lo[-c:], hid[-c:].transpose(1, 2))
            if t:  # the first step reuses the feed-forward pass's ε_L
                torch.baddbmm(y, a[-R:], w_out.transpose(1, 2), out=eps_out)
            if c and t < T:
                torch.bmm(hi[-c:], hid[-c:], out=lo[-c:])
            if t < T:
                a[-R:].baddbmm_(eps_out, w_out, beta=0.0)
        if T >= H:
            g_in.baddbmm_(a[:R].transpose(1, 2), x, beta=0.0)
        c = min(T, H - 1) * R
        g_hid[-c:].baddbmm_(hi[-c:].transpose(1, 2), lo[-c:], beta=0.0)
        g_out.baddbmm_(eps_out.transpose(1, 2), a[-R:], beta=0.0)
        if (i + 1) % EVAL_EVERY == 0:  # evaluation: one feed-forward of 1,024 images per run
            z = torch.matmul(xe, w_in.reshape(R * N, D).T).view(EVAL_N, R, N).transpose(0, 1)
            for ell in range(H - 1):
                z = torch.baddbmm(z, z, hid[ell * R:(ell + 1) * R].transpose(1, 2))
            torch.bmm(z, w_out.transpose(1, 2))

    def run() -> None:
        for i in range(iters):
            one_iteration(i)

    return run


class WholeEngine(tr.PCEngine):
    """The engine computing every layer at every step (``front=False``), for the side-by-side ratio."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs, front=False)


def whole_layers(runs: list[RunConfig], data: tr.DataSet) -> None:
    """The sequential trainer with :class:`WholeEngine` (the engine class of the trainer's iteration,
    swapped for the call)."""
    engine, iteration.PCEngine = iteration.PCEngine, WholeEngine
    try:
        tr.train_group(runs, data, "cpu", layout="sequential")
    finally:
        iteration.PCEngine = engine


def best_time(fn: callable, best: dict[str, float], key: str) -> None:
    t = time.perf_counter()
    fn()
    best[key] = min(best.get(key, float("inf")), time.perf_counter() - t)


def bench(N: int, H: int, iters: int, repeats: int) -> dict[str, float]:
    runs, data = make_runs(N, H, iters), make_data(iters)
    tr.NO_LEARNING_ACC = -1.0  # random labels: keep every run going for the whole timing
    fns = {
        "sequential": lambda: tr.train_group(runs, data, "cpu", layout="sequential"),
        "stacked": lambda: tr.train_group(runs, data, "cpu", layout="stacked"),
        "previous": lambda: previous_engine(runs[:1], data),
        "whole": lambda: whole_layers(runs, data),
        "peak1": matmul_replay(N, H, 1, iters),
        "peak9": matmul_replay(N, H, RUNS, iters),
    }
    if N <= 32:  # the previous path stacked too (at N = 128 it takes minutes)
        fns["previous stacked"] = lambda: previous_engine(runs, data)
    fns["previous"]()  # warm-up
    tr.train_group(runs[:1], data, "cpu")
    auto = tr.train_group(runs, data, "cpu", layout="measure")[0].extra["stack_layout"]
    best: dict[str, float] = {}
    for _ in range(repeats):
        for key, fn in fns.items():
            best_time(fn, best, key)
    useful, executed = flops(N, H)
    n_seq = RUNS * iters
    out = {"N": N, "H": H, "useful_gflop": useful / 1e9, "executed_gflop": executed / 1e9,
           "seq_its": n_seq / best["sequential"], "stacked_its": n_seq / best["stacked"],
           "previous_its": iters / best["previous"], "whole_its": n_seq / best["whole"],
           "previous_stacked_its": n_seq / best["previous stacked"] if "previous stacked" in best else float("nan"),
           "mm_seq": best["peak1"] / (best["sequential"] / RUNS), "mm_stacked": best["peak9"] / best["stacked"],
           "peak1": useful * iters / best["peak1"] / 1e9 * (executed / useful),
           "peak9": RUNS * useful * iters / best["peak9"] / 1e9 * (executed / useful),
           "auto": auto["runs_per_stack"]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=["128:8", "128:32", "16:8"], help="N:H settings")
    ap.add_argument("--iters", type=int, default=16, help="training iterations per run (one evaluation per 16)")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(1)
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    print(f"torch {torch.__version__}, 1 thread, CPU affinity {cpus}; μPC ReLU skips, B={B}, T={T}, float32, "
          f"eval {EVAL_N} images / {EVAL_EVERY} its; {RUNS} runs; best of {a.repeats} interleaved rounds")
    print("it/s: sequential, whole and previous = per run; stacked = summed over the 9 runs. GF/s = useful "
          "GFLOP/s by the count above; peak = the same iteration's matrix products alone (executed FLOPs / "
          "time); % = useful GF/s / peak (the issue's measure; above 100 % where the skipped products outweigh "
          "the rest); x% = executed GF/s / peak; whole = the engine computing every layer at every step "
          "(front=False); mm% = share of the iteration's time the products alone take; auto = runs per stack "
          "the trainer's probe picks; prev stk = the previous path stacked (N <= 32 only)")
    hdr = (f"{'N':>4} {'H':>3} {'GFLOP/it':>9} {'exec':>6} | {'previous':>8} {'whole':>7} {'seq it/s':>8} "
           f"{'GF/s':>6} {'peak':>5} {'%':>4} {'x%':>4} | {'stack it/s':>10} {'GF/s':>6} {'peak':>5} {'%':>4} "
           f"{'x%':>4} | {'seq/prev':>8} {'seq/whole':>9} {'stack/seq':>9} {'auto':>4} | {'mm% seq':>7} "
           f"{'mm% stk':>7} {'prev stk':>8}")
    print(hdr)
    for size in a.sizes:
        N, H = (int(v) for v in size.split(":"))
        r = bench(N, H, a.iters, a.repeats)
        g_seq, g_st = r["seq_its"] * r["useful_gflop"], r["stacked_its"] * r["useful_gflop"]
        x = r["executed_gflop"] / r["useful_gflop"]
        print(f"{N:>4} {H:>3} {r['useful_gflop']:>9.4f} {r['executed_gflop']:>6.3f} | {r['previous_its']:>8.1f} "
              f"{r['whole_its']:>7.1f} {r['seq_its']:>8.1f} {g_seq:>6.1f} {r['peak1']:>5.1f} "
              f"{100 * g_seq / r['peak1']:>4.0f} {100 * x * g_seq / r['peak1']:>4.0f} | "
              f"{r['stacked_its']:>10.1f} {g_st:>6.1f} {r['peak9']:>5.1f} {100 * g_st / r['peak9']:>4.0f} "
              f"{100 * x * g_st / r['peak9']:>4.0f} | {r['seq_its'] / r['previous_its']:>7.2f}x "
              f"{r['seq_its'] / r['whole_its']:>8.2f}x {r['stacked_its'] / r['seq_its']:>8.2f}x {r['auto']:>4} | "
              f"{100 * r['mm_seq']:>7.0f} {100 * r['mm_stacked']:>7.0f} {r['previous_stacked_its']:>8.1f}", flush=True)


if __name__ == "__main__":
    main()
