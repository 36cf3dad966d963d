"""PC training on CUDA: eager against CUDA graphs, one run against stacks, TF32 off and on, set-up apart.

    python3 benchmarks/pc_gpu.py            # quick: three shapes, stacks 1/8/64 (sized for about 2 minutes)
    python3 benchmarks/pc_gpu.py --paper    # the paper's shapes and stacks 1/8/32/64 (several minutes)
    python3 benchmarks/pc_gpu.py --shapes 512:8:8 --stacks 1 8 --target 0.2 --no-float64   # one look
    python3 benchmarks/pc_gpu.py --shapes 512:128:128 --stacks 64 --tf32 on --no-float64 --graph-max-stack 8 \
        --engine standard fused     # the engine's two routes side by side, in one run

Needs torch and numpy only (the engine's modules; nothing of DVC, MLflow or plotting). Without CUDA it says
so and exits 0.

Per shape ``N:H:T`` (``--paper``: N = 512 with H ∈ {8, 32, 128}, T = H, and N = 128, H = 8, T = 500; the
default leaves out H = 128, whose 64-run stack alone draws 2·10⁹ weights on one CPU thread and computes
70 TFLOP per iteration; μPC, ReLU, skips, B = 64, GD inference, synthetic MNIST-shaped data) and runs
per stack R, one group is
set up as the trainer sets one up (``iteration.GroupIteration``: weights from each run's seed, buffers),
then, for TF32 off and on (float32 data), the steady state is timed eagerly and replayed from a CUDA
graph (capture and the trainer's self-check timed apart), and float64 (``--float64``: the float64
sweeps' shapes, S1–S5 and S9) the same way. Columns:

* ``setup``: weights and buffers of the group; ``capture``: capture plus the self-check (two eager and
  two replayed iterations from a saved state, compared);
* ``eager``/``graph``: training iterations per second summed over the R runs (steady state: after two
  warm-up iterations, timed with the device synchronised before and after, ``--target`` seconds each);
* ``TFLOP/s`` and ``%peak``: the graph's executed matrix-product FLOPs (the count of
  ``mupc/training/cost.py``: ``iteration_flops``, the engine's inference front included) per second,
  and their share of the card's matrix-product peak measured in the same run (a large ``torch.matmul``,
  float32 with TF32 off and on, float64);
* ``graph/eager``: the speed-up of the replay;
* ``GB/it``, ``TB/s``, ``%bw`` and ``%floor``: the bytes one iteration of the stack moves by the count of
  ``mupc/training/cost.py`` (``iteration_bytes``, the engine's kernels), the bandwidth that count reaches at
  the best rate, its share of the device-to-device copy bandwidth measured in the same run, and the share of
  the memory floor (each weight read once and each activity read and written once per inference step):
  the floor's time at the copy bandwidth over the measured time. A stack is bandwidth-bound where ``%bw``
  nears 100, whatever ``%peak`` says.

``--graph-max-stack R`` times stacks above R eagerly only (no capture): the capture of a deep 64-run stack
costs a minute for nothing.

``--engine standard fused`` times each setting on both routes of the engine (``energy.PCEngine``: torch
kernels, or the Triton kernels of ``mupc/engine/fused.py``), one row each, the ``GB/it`` of each route by its own
count (``iteration_bytes(..., route="fused")``); the default is the standard route alone.

At the end: the paper profile's PC training estimated from these rates (each stacked group of the paper
profile at the rate of the nearest measured shape and the largest measured stack not above its size, in
its sweep's precision, graphs where they passed their check), training iterations only: evaluations,
the Hessian monitor and the BP sweeps are not counted. It reads the params file, so it needs PyYAML;
without it the rates are printed alone.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline.device import set_matmul_precision  # noqa: E402
from pipeline.studies.mupc.engine import fused  # noqa: E402
from pipeline.studies.mupc.engine.energy import EnergyTerms, InferenceConfig  # noqa: E402
from pipeline.studies.mupc.engine.iteration import GroupIteration  # noqa: E402
from pipeline.studies.mupc.engine.model import NetSpec, init_weights  # noqa: E402

B, D, D_Y, N_TRAIN = 64, 784, 10, 4096
DEVICE = "cuda"  # a module constant so the code path can be walked on a CPU (with its capture failing)
PAPER_SHAPES = ["512:8:8", "512:32:32", "512:128:128", "128:8:500"]
PAPER_STACKS = [1, 8, 32, 64]
QUICK_SHAPES = ["512:8:8", "512:32:32", "128:8:500"]
QUICK_STACKS = [1, 8, 64]
FLOAT64_SHAPES = ["128:8:500", "512:8:8"]  # the float64 sweeps: S1–S5 (N = 128, T = 500) and S9 (N = 512, T = H)
QUICK_FLOAT64_SHAPES = ["512:8:8"]


def cost_function(name: str = "iteration_flops") -> Callable[..., Any]:
    """A counting function of ``pipeline/studies/mupc/training/cost.py``: ``iteration_flops(N, H, T, ...)``
    (FLOPs of one training iteration) or ``iteration_bytes`` (its bytes). Importing it runs the training
    package's ``__init__``, which reads the params schema (PyYAML); where that is missing the function alone is
    compiled from the file's source (pure arithmetic: it needs nothing else)."""
    try:
        from pipeline.studies.mupc.training import cost
        return getattr(cost, name)
    except ImportError:
        pass
    path = ROOT / "pipeline" / "studies" / "mupc" / "training" / "cost.py"
    tree = ast.parse(path.read_text())
    def constant(n: ast.stmt) -> bool:  # module constants such as ``D, D_Y = 784, 10`` (the defaults)
        return (isinstance(n, ast.Assign) and isinstance(n.value, (ast.Constant, ast.Tuple))
                and all(isinstance(e, ast.Constant) for e in ast.walk(n.value) if isinstance(e, ast.expr)
                        and not isinstance(e, ast.Tuple)))

    def table(n: ast.stmt) -> bool:  # module tables such as ``ENGINE_ACTIVITY_PASSES = {"relu": 25, ...}``
        return isinstance(n, ast.Assign) and isinstance(n.value, ast.Dict)

    keep = [n for n in tree.body
            if (isinstance(n, ast.FunctionDef) and n.name == name) or constant(n) or table(n)]
    namespace: dict[str, object] = {}
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(path), "exec"), namespace)
    return namespace[name]  # type: ignore[return-value]


def copy_bandwidth(n_bytes: int = 2**31, reps: int = 10) -> float:
    """Bytes per second of the best of ``reps`` device-to-device copies of ``n_bytes`` (read and written
    counted): the memory bandwidth the card reaches in practice."""
    a = torch.empty(n_bytes // 4, device=DEVICE, dtype=torch.float32)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    best = math.inf
    for _ in range(reps):
        sync()
        t = time.perf_counter()
        b.copy_(a)
        sync()
        best = min(best, time.perf_counter() - t)
    del a, b
    return 2 * n_bytes / best


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def matmul_peak(dtype: torch.dtype, tf32: bool, n: int, reps: int = 10) -> float:
    """FLOP/s of the best of ``reps`` n×n ``torch.matmul`` calls (the card's matrix-product peak in practice)."""
    set_matmul_precision(DEVICE, "tf32" if tf32 else "float32")
    a = torch.randn(n, n, device=DEVICE, dtype=dtype)
    b = torch.randn(n, n, device=DEVICE, dtype=dtype)
    c = torch.empty(n, n, device=DEVICE, dtype=dtype)
    for _ in range(3):
        torch.matmul(a, b, out=c)
    best = math.inf
    for _ in range(reps):
        sync()
        t = time.perf_counter()
        torch.matmul(a, b, out=c)
        sync()
        best = min(best, time.perf_counter() - t)
    del a, b, c
    return 2 * n**3 / best


@dataclass
class Row:
    N: int
    H: int
    T: int
    R: int
    precision: str  # float32 | tf32 | float64
    engine: str = "standard"  # the engine's route: standard | fused
    setup_s: float = math.nan
    capture_s: float = math.nan
    eager_its: float = math.nan  # iterations per second summed over the runs
    graph_its: float = math.nan
    graph_ok: bool = False
    note: str = ""

    def best_its(self) -> float:
        return self.graph_its if self.graph_ok else self.eager_its


def steady(it: GroupIteration, orders: torch.Tensor, target: float) -> float:
    """Training iterations per second of one stack (steady state: two warm-up iterations, then enough
    iterations for about ``target`` seconds), the device synchronised before and after."""
    losses = torch.empty(len(orders), it.R, device=DEVICE, dtype=it.act_lr.dtype)

    def run(n: int, start: int) -> float:
        sync()
        t = time.perf_counter()
        for i in range(start, start + n):
            it.load(orders[i % len(orders)])
            losses[i % len(orders)] = it.step()[0]
        sync()
        return time.perf_counter() - t

    first = run(2, 0)
    n = max(3, min(500, math.ceil(target / max(first / 2, 1e-6))))
    return n / run(n, 2)


@torch.no_grad()
def bench_group(N: int, H: int, T: int, R: int, precisions: list[str], target: float, graphs: bool = True,
                engine: str = "standard") -> list[Row]:
    """One group set up once on the engine's route ``engine``; per precision: eager, then (``graphs``) capture +
    check, then the replay."""
    dtype = torch.float64 if precisions == ["float64"] else torch.float32
    spec = NetSpec(D=D, N=N, H=H, d_y=D_Y, act="relu", skips=True, param="mupc", init="standard_gauss")
    g = torch.Generator(device=DEVICE).manual_seed(0)
    x = torch.randn(N_TRAIN, D, device=DEVICE, dtype=dtype, generator=g)
    y = torch.nn.functional.one_hot(torch.randint(0, D_Y, (N_TRAIN,), device=DEVICE, generator=g), D_Y).to(dtype)
    orders = torch.randint(0, N_TRAIN, (64, R, B), device=DEVICE, generator=g)
    sync()
    t = time.perf_counter()
    w0 = init_weights(spec, list(range(R)), dtype=dtype, device=DEVICE)
    route, _, tiles = engine.partition("@")
    before = fused.TILES
    fused.TILES = fused.Tiles.parse(tiles) if tiles else before  # what the engine is built with, and keeps
    try:
        it = GroupIteration(spec, w0, B, InferenceConfig(steps=T), EnergyTerms(), [0.1] * R, [1e-3] * R, x, y,
                            DEVICE, dtype, route)
    finally:
        fused.TILES = before
    del w0
    sync()
    setup = time.perf_counter() - t
    rows = []
    for prec in precisions:
        row = Row(N, H, T, R, prec, engine, setup_s=setup)
        set_matmul_precision(DEVICE, prec)
        it.replay, it.outputs = None, None
        row.eager_its = R * steady(it, orders, target)
        if not graphs:
            row.note = "graphs not tried (--graph-max-stack)"
            rows.append(row)
            continue
        sync()
        t = time.perf_counter()
        why = it.enable_graph([orders[0], orders[1]])
        sync()
        row.capture_s = time.perf_counter() - t
        row.graph_ok = why is None
        if why is None:
            row.graph_its = R * steady(it, orders, target)
        else:
            row.note = f"graphs off: {why}"
        rows.append(row)
    it.replay, it.outputs = None, None
    return rows


def engine_arg(text: str) -> str:
    """``standard``, ``fused`` or ``fused@<tiles>`` (:meth:`fused.Tiles.parse`), checked before anything runs."""
    route, at, tiles = text.partition("@")
    if route not in ("standard", "fused") or (at and route != "fused"):
        raise argparse.ArgumentTypeError(f"{text!r}: standard, fused or fused@cols:k:warps:stages")
    if tiles:
        try:
            fused.Tiles.parse(tiles)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def paper_estimate(rows: list[Row], flops: Callable[..., tuple[float, float]]) -> list[str]:
    """Lines: the paper profile's PC training time from the measured rates (see the module docstring)."""
    try:
        from pipeline.config import load_section, read_tree
        from pipeline.studies.mupc.training.config import TrainingParams
        from pipeline.studies.mupc.training.sweep_expansion import expand, precision, stack_groups, sweep_dtype
    except ImportError as exc:
        return [f"paper profile: not estimated (reading params/mupc_training.yaml needs {exc.name})"]
    cfg = load_section(TrainingParams, read_tree(ROOT), "mupc_training", "paper")
    its_per_epoch = (cfg.data.n_train or 60_000) // B
    per_sweep: dict[str, float] = {}
    missing: set[str] = set()
    for unit in cfg.sweep_ids:
        if cfg.sweeps[unit].method != "pc":
            continue
        prec = precision(sweep_dtype(cfg, unit), cfg.allow_tf32, "cuda")
        for group in stack_groups(expand(cfg, unit), cfg.max_stack):
            rc, R = group[0], len(group)
            cands = [r for r in rows if r.precision == prec and not math.isnan(r.eager_its)]
            if not cands:
                missing.add(f"{unit} ({prec})")
                continue

            def dist(r: Row, rc=rc) -> float:
                return abs(math.log(r.N / rc.N)) + abs(math.log(r.H / rc.H)) + abs(math.log(r.T / rc.T))

            near = min(dist(r) for r in cands)
            same = [r for r in cands if dist(r) == near]
            below = [r for r in same if r.R <= R]
            m = max(below, key=lambda r: r.R) if below else min(same, key=lambda r: r.R)
            its = m.best_its()
            rate = its * flops(m.N, m.H, m.T)[1]  # executed FLOP/s of the measured stack
            work = R * rc.epochs * its_per_epoch * flops(rc.N, rc.H, rc.T, front=not rc.activity_decay)[1]
            per_sweep[unit] = per_sweep.get(unit, 0.0) + work / rate
    total = sum(per_sweep.values())
    out = ["paper profile, PC training iterations at these rates (evaluations, Hessian monitor and BP not "
           "counted): " + ", ".join(f"{u} {s / 3600:.2f} h" for u, s in per_sweep.items()),
           f"  total {total / 3600:.2f} h"]
    if missing:
        out.append(f"  not estimated (precision not measured): {', '.join(sorted(missing))}")
    return out


def finite(value: object) -> object:
    """``value`` with every NaN or infinity replaced by None (strict JSON)."""
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return None if isinstance(value, float) and not math.isfinite(value) else value


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--paper", action="store_true", help="the paper's shapes and stacks (default: the quick ones)")
    ap.add_argument("--shapes", nargs="+", help="N:H:T settings (float32, TF32 off and on)")
    ap.add_argument("--stacks", nargs="+", type=int, help="runs per stack")
    ap.add_argument("--float64", nargs="*", help="N:H:T settings timed in float64")
    ap.add_argument("--no-float64", action="store_true", help="skip the float64 settings")
    ap.add_argument("--float64-stacks", nargs="+", type=int, default=[1, 8], help="runs per stack in float64")
    ap.add_argument("--tf32", choices=["both", "on", "off"], default="both")
    ap.add_argument("--target", type=float, default=0.5, help="seconds of steady state timed per setting")
    ap.add_argument("--peak-n", type=int, default=8192, help="matrix size of the peak measurement")
    ap.add_argument("--graph-max-stack", type=int, default=None,
                    help="capture CUDA graphs only for stacks of at most this many runs (default: every stack)")
    ap.add_argument("--engine", nargs="+", type=engine_arg, default=["standard"],
                    help="the engine's routes to time, one row each: standard, fused (Triton kernels, today's "
                         "tiles) or fused@cols:k:warps:stages (benchmarks/fused_tiles.py)")
    ap.add_argument("--json", type=Path, help="also write every row and the peaks to this JSON file")
    a = ap.parse_args(argv)
    a.shapes = a.shapes or (PAPER_SHAPES if a.paper else QUICK_SHAPES)
    a.stacks = a.stacks or (PAPER_STACKS if a.paper else QUICK_STACKS)
    a.float64 = a.float64 if a.float64 is not None else (FLOAT64_SHAPES if a.paper else QUICK_FLOAT64_SHAPES)
    if not torch.cuda.is_available():
        print("pc_gpu: no CUDA device (torch.cuda.is_available() is False); nothing measured")
        return 0
    t_start = time.perf_counter()
    flops, nbytes = cost_function("iteration_flops"), cost_function("iteration_bytes")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, μPC ReLU skips, B={B}, GD inference, "
          f"synthetic data; it/s summed over the runs of a stack")
    peak = {"float32": matmul_peak(torch.float32, False, a.peak_n), "tf32": matmul_peak(torch.float32, True, a.peak_n)}
    if not a.no_float64 and a.float64:
        peak["float64"] = matmul_peak(torch.float64, False, a.peak_n)
    print(f"matmul peak (n = {a.peak_n}): " + ", ".join(f"{k} {v / 1e12:.1f} TFLOP/s" for k, v in peak.items()))
    bw = copy_bandwidth()
    print(f"device-to-device copy: {bw / 1e12:.2f} TB/s (read and written counted)")

    def traffic(r: Row) -> dict[str, float]:
        """GB per stack iteration by the engine's count, the TB/s it reaches at the best rate, its share of the
        copy bandwidth and the memory floor's share (floor time at the copy bandwidth over the measured time)."""
        size = 8 if r.precision == "float64" else 4
        engine = nbytes(r.N, r.H, r.T, "relu", r.R, B, size, "fused" if r.engine.startswith("fused") else "engine")
        floor = nbytes(r.N, r.H, r.T, "relu", r.R, B, size, "floor")
        per_s = r.best_its() / r.R  # stack iterations per second
        return {"gb_per_it": engine / 1e9, "tb_per_s": engine * per_s / 1e12,
                "pct_bandwidth": 100 * engine * per_s / bw, "pct_floor": 100 * floor * per_s / bw}
    precs = {"both": ["float32", "tf32"], "on": ["tf32"], "off": ["float32"]}[a.tf32]
    plan = [(s, R, precs, e) for s in a.shapes for R in a.stacks for e in a.engine]
    if not a.no_float64:
        plan += [(s, R, ["float64"], e) for s in (a.float64 or []) for R in a.float64_stacks for e in a.engine]
    hdr = (f"{'N':>4} {'H':>3} {'T':>3} {'R':>3} {'prec':>7} {'engine':>14} | {'setup s':>7} {'capture s':>9} | "
           f"{'eager it/s':>10} "
           f"{'graph it/s':>10} {'graph/eager':>11} | {'TFLOP/s':>7} {'%peak':>5} | {'GB/it':>7} {'TB/s':>5} "
           f"{'%bw':>4} {'%floor':>6} | note")
    print(hdr)
    rows: list[Row] = []
    for shape, R, ps, eng in plan:
        N, H, T = (int(v) for v in shape.split(":"))
        try:
            got = bench_group(N, H, T, R, ps, a.target, a.graph_max_stack is None or a.graph_max_stack >= R, eng)
        except torch.OutOfMemoryError:
            got = [Row(N, H, T, R, p, eng, note="out of memory") for p in ps]
        except Exception as exc:  # one failing setting is a finding, not the end of the measurement
            why = (str(exc).strip().splitlines() or [""])[0][:200]
            got = [Row(N, H, T, R, p, eng, note=f"failed: {type(exc).__name__}: {why}") for p in ps]
        torch.cuda.empty_cache()
        for r in got:
            rows.append(r)
            tf = r.best_its() * flops(N, H, T)[1] / 1e12
            m = traffic(r)
            print(f"{N:>4} {H:>3} {T:>3} {R:>3} {r.precision:>7} {r.engine:>14} | {r.setup_s:>7.2f} "
                  f"{r.capture_s:>9.2f} | "
                  f"{r.eager_its:>10.1f} {r.graph_its:>10.1f} {r.graph_its / r.eager_its:>10.2f}x | "
                  f"{tf:>7.2f} {100 * tf * 1e12 / peak[r.precision]:>5.1f} | {m['gb_per_it']:>7.1f} "
                  f"{m['tb_per_s']:>5.2f} {m['pct_bandwidth']:>4.0f} {m['pct_floor']:>6.1f} | {r.note}", flush=True)
    estimate = []
    for eng in a.engine:
        lines = paper_estimate([r for r in rows if r.engine == eng], flops)
        estimate += [f"[{eng}] {lines[0]}", *lines[1:]] if len(a.engine) > 1 else lines
    for line in estimate:
        print(line)
    took = time.perf_counter() - t_start
    print(f"benchmark took {took:.0f} s")
    if a.json:
        def record(r: Row) -> dict:
            tflops = r.best_its() * flops(r.N, r.H, r.T)[1] / 1e12
            return {**asdict(r), "graph_over_eager": r.graph_its / r.eager_its if r.graph_ok else None,
                    "tflops": tflops, "pct_peak": 100 * tflops * 1e12 / peak[r.precision], **traffic(r)}

        out = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "seconds": took,
               "peak_tflops": {k: v / 1e12 for k, v in peak.items()}, "copy_tb_per_s": bw / 1e12,
               "rows": [record(r) for r in rows],
               "paper_estimate": estimate}
        a.json.write_text(json.dumps(finite(out), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
