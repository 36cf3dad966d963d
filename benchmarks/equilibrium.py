"""Equilibria of the F27 (``theory_width``) nets: gradient descent (the reference) against Newton
(``pipeline/studies/mupc/analysis/newton.py``), side by side in one run.

    taskset -c 1 .venv/bin/python benchmarks/equilibrium.py              # the full table (≈ 25 min here)
    taskset -c 1 .venv/bin/python benchmarks/equilibrium.py --widths 64 128 --iters 2

Part 1, one solve: for each (N, SP | μPC, tanh | ReLU) at H = 4 on one MNIST batch of B = 64, at
initialisation, both solvers from the feed-forward state to the stage's tolerance (1e-8), each timed once
after a warm-up; printed: time and steps each way, the ratio, and how far the answers are apart — the largest
relative difference of z* and the relative difference of the batch's F*; for ReLU the number of samples whose
equilibria differ by more than 1e-6 (another local minimum: the ReLU energy is piecewise quadratic and not
convex) and which solver's F* is lower there, and how many samples gradient descent itself moves to another
point when its step is a quarter as long (ReLU: is its minimum a property of the flow or of its step?).

Part 2, training: ``--iters`` iterations of ``theory_run`` (equilibrium, Adam step) for the largest width each
way, extrapolated to the unit's 937 iterations per net; the Newton steps per equilibrium are printed.

Part 3, what a CPU's Newton step skips: the same ``--iters`` iterations at the largest width by Newton computing
every sample at every step with the line search's tries at once (``drop_converged=False``, a GPU's line search),
with converged samples leaving the batch, and with the tries in turn as well (as the stage runs it on the CPU),
in turn, twice each, the faster of each; printed: time per iteration and the ratios, the steps per equilibrium,
and the samples computed per equilibrium over the batch size (the full-batch steps they cost: the cost model's
``NEWTON_STEPS``).

Part 4, whole runs (``--parts 4``, not in the default: the paper's widths take about 33 min on one core, 15.5 min of
it the four nets at N = 512): every (act, param, N) of ``--widths`` trained over all ``--whole-iters`` iterations by
``theory_run`` as the stage trains it, on its MNIST batches; printed: seconds per iteration and minutes per net, the
mean steps per equilibrium, the mean full-batch steps (samples computed over the batch size) and the fallback's
steps, then the mean of the params' full-batch steps per width: the cost model's ``NEWTON_STEPS``
(``pipeline/studies/mupc/analysis/cost.py``).

Both on one core, one torch thread (``torch.set_num_threads(1)``; run it under ``taskset -c 1``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.studies.mupc.analysis import newton, theory
from pipeline.studies.mupc.analysis.train import mnist_batches, theory_run, theory_spec
from pipeline.studies.mupc.engine.model import feedforward, init_weights

TOL, GD_CAP, SEED, ITERS = 1e-8, 20000, 4320, 937
T = TypeVar("T")


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def one_solve(act: str, param: str, N: int, x: torch.Tensor, y: torch.Tensor) -> dict:
    spec = theory_spec(act, param, N, 4)
    w = init_weights(spec, [SEED], dtype=torch.float64)
    z0, _ = feedforward(spec, w, x)
    newton.newton_equilibrium(spec, w, x[:8], y[:8], z0[:, :, :8], tol=TOL)  # warm-up
    gd, t_gd = timed(lambda: theory.numerical_equilibrium(spec, w, x, y, z0, tol=TOL, max_steps=GD_CAP))
    nt, t_nt = timed(lambda: newton.newton_equilibrium(spec, w, x, y, z0, tol=TOL, fallback_max_steps=GD_CAP))
    f_gd = theory.per_sample_energy(spec, w, x, y, gd.z)[0]
    f_nt = theory.per_sample_energy(spec, w, x, y, nt.z)[0]
    per_sample = ((nt.z - gd.z).abs().amax(dim=(1, 3)) / gd.z.abs().amax())[0]
    other = per_sample > 1e-6
    # ReLU: does gradient descent's own choice of minimum depend on its step? (a quarter of the step)
    slow = (theory.numerical_equilibrium(spec, w, x, y, z0, tol=TOL, max_steps=4 * GD_CAP, safety=4.0).z
            if act == "relu" else gd.z)
    gd_moves = int(((slow - gd.z).abs().amax(dim=(1, 3)) / gd.z.abs().amax() > 1e-6).sum())
    return {"gd_moves": gd_moves,
            "act": act, "param": param, "N": N, "t_gd": t_gd, "steps_gd": gd.steps, "gd_conv": gd.converged,
            "t_nt": t_nt, "steps_nt": nt.steps, "nt_conv": nt.converged, "fallback": nt.fallback_steps,
            "z_rel": float(per_sample.max()), "F_rel": float((f_nt.sum() - f_gd.sum()) / f_gd.sum()),
            "other": int(other.sum()), "lower": int((f_nt < f_gd)[other].sum())}


def training(act: str, param: str, N: int, iters: int) -> dict:
    spec = theory_spec(act, param, N, 4)
    batches = mnist_batches(iters, 64, SEED, None, "cpu", torch.float64)
    gd, t_gd = timed(lambda: theory_run(spec, batches, 1e-3, SEED, TOL, GD_CAP, "gd"))
    nt, t_nt = timed(lambda: theory_run(spec, batches, 1e-3, SEED, TOL, GD_CAP, "newton"))
    ratio_gap = np.max(np.abs(nt["loss_energy_ratios"] - gd["loss_energy_ratios"]) / gd["loss_energy_ratios"])
    return {"act": act, "param": param, "N": N, "t_gd": t_gd / iters, "t_nt": t_nt / iters,
            "steps_gd": gd["eq_steps"].tolist(), "steps_nt": nt["eq_steps"].tolist(),
            "fallback": int(nt["eq_fallback_steps"].sum()), "ratio_gap": float(ratio_gap)}


# Part 3's ways, in the order they ran: (converged samples leave, line-search tries in turn)
WAYS = {"every sample, tries at once": (False, False), "dropping converged": (True, False),
        "and tries in turn": (True, True)}


def batch_steps(act: str, param: str, N: int, iters: int, rounds: int = 2) -> dict:
    """Part 3: theory_run each of :data:`WAYS`, in turn, the fastest of ``rounds`` each."""
    spec = theory_spec(act, param, N, 4)
    B = 64
    batches = mnist_batches(iters, B, SEED, None, "cpu", torch.float64)
    solve, in_turn = newton.newton_equilibrium, newton.TRIES_IN_TURN
    best: dict[str, float] = {}
    outs: dict[str, dict] = {}
    eqs: dict[str, list] = {}
    try:
        for _ in range(rounds):
            for way, (drop, turn) in WAYS.items():
                eqs[way] = []

                def counted(*a, _drop=drop, _way=way, **kw):
                    eq = solve(*a, drop_converged=_drop, **kw)
                    eqs[_way].append(eq)
                    return eq

                newton.newton_equilibrium = counted
                newton.TRIES_IN_TURN = ("cpu",) if turn else ()
                outs[way], t = timed(lambda: theory_run(spec, batches, 1e-3, SEED, TOL, GD_CAP, "newton"))
                best[way] = min(best.get(way, np.inf), t / iters)
    finally:
        newton.newton_equilibrium, newton.TRIES_IN_TURN = solve, in_turn
    first, *_, last = WAYS
    gap = max(np.max(np.abs(outs[way]["loss_energy_ratios"] - outs[first]["loss_energy_ratios"])
                     / outs[first]["loss_energy_ratios"]) for way in WAYS)
    return {"t": best, "steps": [eq.steps for eq in eqs[last]], "full": [eq.sample_steps / B for eq in eqs[last]],
            "gap": float(gap)}


def whole_run(act: str, param: str, N: int, iters: int) -> dict:
    """Part 4: one net's whole training, each equilibrium's samples computed counted."""
    spec = theory_spec(act, param, N, 4)
    B = 64
    batches = mnist_batches(iters, B, SEED, None, "cpu", torch.float64)
    solve, full = newton.newton_equilibrium, []

    def counted(*a, **kw):
        eq = solve(*a, **kw)
        full.append(eq.sample_steps / B)
        return eq

    newton.newton_equilibrium = counted
    try:
        out, t = timed(lambda: theory_run(spec, batches, 1e-3, SEED, TOL, GD_CAP, "newton"))
    finally:
        newton.newton_equilibrium = solve
    return {"t": t / iters, "steps": float(np.mean(out["eq_steps"])), "full": float(np.mean(full)),
            "fallback": int(out["eq_fallback_steps"].sum())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--widths", type=int, nargs="+", default=[64, 128, 256, 512])
    ap.add_argument("--iters", type=int, default=3, help="training iterations of part 2 (largest width)")
    ap.add_argument("--acts", nargs="+", default=["tanh", "relu"], choices=["tanh", "relu"])
    ap.add_argument("--params", nargs="+", default=["sp", "mupc"], choices=["sp", "mupc"])
    ap.add_argument("--parts", type=int, nargs="+", default=[1, 2, 3], choices=[1, 2, 3, 4])
    ap.add_argument("--whole-iters", type=int, default=ITERS, help="training iterations of part 4 (each net)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    x, y = mnist_batches(1, 64, SEED, None, "cpu", torch.float64)[0]
    if 1 in args.parts:
        part_one(args, x, y)
    N = max(args.widths)
    if 2 in args.parts:
        part_two(args, N)
    if 3 in args.parts:
        part_three(args, N)
    if 4 in args.parts:
        part_four(args)


def part_one(args: argparse.Namespace, x: torch.Tensor, y: torch.Tensor) -> None:
    print("Part 1: one equilibrium, H = 4, B = 64, tol 1e-8, at initialisation (one core)")
    print(f"{'act':5} {'param':5} {'N':>4} | {'GD s':>7} {'steps':>6} | {'Newton s':>8} {'steps':>5} {'fb':>3} | "
          f"{'GD/Newton':>9} | {'max rel z':>9} {'rel F*':>9} {'other min':>9} {'Newton lower':>12} | "
          f"{'GD ¼ step: other':>16}")
    for N in args.widths:
        for act in args.acts:
            for param in args.params:
                r = one_solve(act, param, N, x, y)
                conv = "" if r["gd_conv"] and r["nt_conv"] else " (not converged)"
                print(f"{act:5} {param:5} {N:>4} | {r['t_gd']:7.2f} {r['steps_gd']:>6} | {r['t_nt']:8.3f} "
                      f"{r['steps_nt']:>5} {r['fallback']:>3} | {r['t_gd'] / r['t_nt']:8.1f}× | {r['z_rel']:9.1e} "
                      f"{r['F_rel']:9.1e} {r['other']:>6}/64 {r['lower']:>12} | "
                      f"{r['gd_moves']:>13}/64{conv}", flush=True)


def part_two(args: argparse.Namespace, N: int) -> None:
    print(f"\nPart 2: {args.iters} training iterations of theory_run at N = {N}, H = 4 (per iteration; "
          f"× {ITERS} iterations a net)")
    print(f"{'act':5} {'param':5} | {'GD s/it':>8} {'Newton s/it':>11} {'ratio':>6} | {'GD h/net':>8} "
          f"{'Newton min/net':>14} | Newton steps / GD steps per iteration | max rel gap of ℒ/F*")
    for act in args.acts:
        for param in args.params:
            r = training(act, param, N, args.iters)
            print(f"{act:5} {param:5} | {r['t_gd']:8.2f} {r['t_nt']:11.3f} {r['t_gd'] / r['t_nt']:5.1f}× | "
                  f"{r['t_gd'] * ITERS / 3600:8.2f} {r['t_nt'] * ITERS / 60:14.1f} | {r['steps_nt']} / {r['steps_gd']}"
                  f" (fallback {r['fallback']}) | {r['ratio_gap']:.1e}", flush=True)


def part_three(args: argparse.Namespace, N: int) -> None:
    print(f"\nPart 3: {args.iters} training iterations at N = {N} by Newton: every sample at every step with the "
          f"line search's tries at once, converged samples leaving the batch, and the tries in turn as well (s per "
          f"iteration, the faster of two runs each, in turn; ratios to the first)")
    print(f"{'act':5} {'param':5} | {' | '.join(WAYS)} | min/net | steps per equilibrium | full-batch steps "
          f"they cost | max rel gap of ℒ/F*")
    for act in args.acts:
        for param in args.params:
            r = batch_steps(act, param, N, args.iters)
            t0 = r["t"][next(iter(WAYS))]
            times = " | ".join(f"{t:.3f} ({t0 / t:.2f}×)" for t in r["t"].values())
            print(f"{act:5} {param:5} | {times} | {list(r['t'].values())[-1] * ITERS / 60:7.1f} | {r['steps']} "
                  f"(mean {np.mean(r['steps']):.1f}) | {[round(f, 1) for f in r['full']]} "
                  f"(mean {np.mean(r['full']):.1f}) | {r['gap']:.1e}", flush=True)


def part_four(args: argparse.Namespace) -> None:
    print(f"\nPart 4: whole runs, {args.whole_iters} iterations of theory_run a net, H = 4, B = 64, by Newton "
          f"(one core)")
    print(f"{'act':5} {'param':5} {'N':>4} | {'s/it':>7} {'min/net':>7} | {'steps':>5} {'full-batch':>10} "
          f"{'fallback':>8}")
    table: dict[str, dict[int, float]] = {}
    for act in args.acts:
        for N in args.widths:
            full = []
            for param in args.params:
                r = whole_run(act, param, N, args.whole_iters)
                full.append(r["full"])
                print(f"{act:5} {param:5} {N:>4} | {r['t']:7.4f} {r['t'] * args.whole_iters / 60:7.2f} | "
                      f"{r['steps']:5.2f} {r['full']:10.2f} {r['fallback']:>8}", flush=True)
            table.setdefault(act, {})[N] = round(float(np.mean(full)), 2)
    print(f"full-batch steps per equilibrium, mean of {', '.join(args.params)} (NEWTON_STEPS): {table}")


if __name__ == "__main__":
    main()
