"""The fused route's kernels at one shape, tile settings side by side: which cut of the products reaches the
memory bandwidth (``mupc/engine/fused.py``, :class:`~pipeline.studies.mupc.engine.fused.Tiles`).

    python3 benchmarks/fused_tiles.py                       # 512:128 x 64 runs, B = 64, TF32, on CUDA
    python3 benchmarks/fused_tiles.py --json out.json --limit 120

Two parts, in one run on one device:

1. **Kernels.** Each kernel alone over every hidden row of the stack ((H − 1)·R rows of [B, N] activities and
   N × N weights, ReLU, μPC with skips, GD at a per-run rate), per setting ``cols:k:warps:stages``: the median
   of a few timed launches (CUDA events, after one launch that compiles), the bytes it must move (each weight
   once, and the activity-sized tensors it reads and writes: three for the error kernel, five for the step) and
   the TB/s that makes, beside the device-to-device copy bandwidth measured in the same run. A setting the
   device cannot run (too much shared memory) is a row that says so.
2. **The step's weights transposed** (``--kernels ... step_wt``): the step kernel reading a copy of the weights
   stored transposed, as the engine's fused route does, so that a program's column strip of W is one
   contiguous block (``step``: the weights as stored, the route before).

Needs torch and Triton (the machine's own); without CUDA it says so in one line. Every number is this run's.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from pc_gpu import copy_bandwidth  # noqa: E402  (the engine benchmark's measure of the card's bandwidth)

from pipeline.studies.mupc.engine import fused  # noqa: E402  (the checkout's package, from any working directory)

COLS, KS, LAUNCH = (64, 128, 256), (32, 64), ((4, 3), (8, 3), (4, 4), (8, 4), (8, 2))


def settings() -> list[str]:
    """Every ``cols:k:warps:stages`` the sweep tries, today's default first."""
    out = [fused.Tiles().label()]
    for (w, st), c, k in itertools.product(LAUNCH, COLS, KS):
        label = f"{c}:{k}:{w}:{st}"
        if label not in out:
            out.append(label)
    return out


def timed(fn, reps: int) -> float:
    """Median seconds of ``reps`` calls, each between two CUDA events."""
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    return statistics.median(times)


class Stack:
    """The hidden rows of one stack: ``x``/``y`` the activities below/above each product, ``e_self``/``e_next``
    the errors, ``w`` the weights, ``lr`` the per-run rates."""

    def __init__(self, N: int, H: int, R: int, B: int, seed: int = 0):
        g = torch.Generator(device="cuda").manual_seed(seed)
        self.N, self.H, self.R, self.B, self.P = N, H, R, B, (H - 1) * R
        z = torch.randn(H * R, B, N, device="cuda", generator=g)
        self.z, self.x, self.y = z, z[:self.P], z[R:]
        self.e = torch.zeros_like(z)
        self.e_self, self.e_next = self.e[:self.P], self.e[R:]
        self.w = torch.randn(self.P, N, N, device="cuda", generator=g) / N**0.5
        self.w_cols: torch.Tensor | None = None  # the same weights stored transposed, made on first use
        self.lr = torch.full((R,), 0.1 / B, device="cuda")
        self.part = {}

    def partials(self, t: fused.Tiles) -> torch.Tensor:
        key = (t.rows, t.cols)
        if key not in self.part:
            self.part[key] = torch.zeros(self.P, fused.tiles(self.B, self.N, t), device="cuda")
        return self.part[key]

    def errors(self, t: fused.Tiles) -> None:
        fused.predict_error(self.x, self.w, self.y, self.e_next, "relu", 1.0, 1.0 / self.N, True, t)

    def step(self, t: fused.Tiles, transposed: bool = False) -> None:
        """The activity step; ``transposed``: its weights read from a copy stored transposed, so that a program's
        column strip of W (the product ε W's) is one contiguous block, as the error kernel's row strip is."""
        w = self.w
        if transposed:
            if self.w_cols is None:
                self.w_cols = self.w.transpose(1, 2).contiguous()
            w = self.w_cols.transpose(1, 2)
        fused.grad_step(self.e_next, w, self.e_self, self.x, self.partials(t), "relu", 1.0, 1.0 / self.N, 0.0,
                        self.lr, self.R, None, True, t)


def kernel_rows(st: Stack, labels: list[str], reps: int, bw: float, deadline: float,
                kernels: tuple[str, ...] = ("errors", "step")) -> list[dict]:
    """Each kernel of ``kernels`` (``errors``, ``step``, ``step_wt``: the step reading transposed weights) at
    each setting."""
    act = st.P * st.B * st.N * 4
    weights = st.P * st.N * st.N * 4
    need = {"errors": weights + 3 * act, "step": weights + 5 * act, "step_wt": weights + 5 * act}
    rows = []
    for label in labels:
        t = fused.Tiles.parse(label)
        fns = {"errors": lambda t=t: st.errors(t), "step": lambda t=t: st.step(t),
               "step_wt": lambda t=t: st.step(t, transposed=True)}
        for kernel, fn in ((k, fns[k]) for k in kernels):
            if time.perf_counter() > deadline:
                return rows
            row = {"tiles": label, "kernel": kernel, "gb": need[kernel] / 1e9}
            try:
                c = time.perf_counter()
                fn()
                torch.cuda.synchronize()
                row["first_s"] = time.perf_counter() - c
                row["s"] = timed(fn, reps)
                row["tb_per_s"] = need[kernel] / row["s"] / 1e12
                row["pct_copy"] = 100 * need[kernel] / row["s"] / bw
            except Exception as exc:  # a setting the device cannot run is a finding, not the end of the sweep
                row["failed"] = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:160]}"
            rows.append(row)
            print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()),
                  flush=True)
    return rows


def best_pair(rows: list[dict]) -> str:
    """The setting whose error and step launches take least together (the step as the engine reads its weights:
    ``step_wt`` where it was timed)."""
    by: dict[str, dict[str, float]] = {}
    for r in rows:
        if "s" in r:
            by.setdefault(r["tiles"], {})[r["kernel"]] = r["s"]
    step = "step_wt" if any(r["kernel"] == "step_wt" for r in rows) else "step"
    both = {k: v["errors"] + v[step] for k, v in by.items() if "errors" in v and step in v}
    return min(both, key=both.get)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="512:128", help="N:H")
    ap.add_argument("--runs", type=int, default=64, help="runs in the stack (R)")
    ap.add_argument("--batch", type=int, default=64, help="B")
    ap.add_argument("--reps", type=int, default=7, help="timed launches per setting (the median is kept)")
    ap.add_argument("--limit", type=float, default=150, help="seconds for both parts together")
    ap.add_argument("--tiles", nargs="+", help="settings cols:k:warps:stages (default: the sweep's list)")
    ap.add_argument("--kernels", nargs="+", choices=["errors", "step", "step_wt"], default=["errors", "step_wt"],
                    help="step_wt: the step kernel reading a copy of the weights stored transposed")
    ap.add_argument("--json", type=Path, help="also write every row to this JSON file")
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("fused_tiles: no CUDA device (torch.cuda.is_available() is False); nothing measured")
        return 0
    t0 = time.perf_counter()
    N, H = (int(v) for v in a.shape.split(":"))
    bw = copy_bandwidth()
    st = Stack(N, H, a.runs, a.batch)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {N}:{H} x {a.runs} runs, B = {a.batch}, "
          f"TF32; copy {bw / 1e12:.2f} TB/s", flush=True)
    kernels = kernel_rows(st, a.tiles or settings(), a.reps, bw, t0 + a.limit, tuple(a.kernels))
    out = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "shape": a.shape, "runs": a.runs,
           "batch": a.batch, "copy_tb_per_s": bw / 1e12, "kernels": kernels}
    try:
        out["best"] = best_pair(kernels)
    except ValueError:
        out["best"] = None
    if out["best"]:
        best = {r["kernel"]: r.get("s") for r in kernels if r["tiles"] == out["best"]}
        print(f"best pair {out['best']}: " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in best.items()), flush=True)
    out["seconds"] = time.perf_counter() - t0
    print(f"fused_tiles took {out['seconds']:.0f} s")
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
