"""A μPC training render stage before (matplotlib) and after (plotly + kaleido), side by side, on one core.

    .venv/bin/python benchmarks/render_plotly.py [--families F18 F22 F24] [--repeats 3] [--before 11bc116]

Each side of each family is a fresh process pinned with ``taskset -c 1`` (the Chromium that kaleido starts
inherits the pin), timed as a render stage spends it: imports, drawing the family from the synthetic sweeps of
``tests/mupc_training`` at the lrs its extract selects, and writing its files (matplotlib: PNG + PDF through
``save_mpl``; plotly: PNG + PDF through kaleido's one server, plus the interactive HTML). The matplotlib side
draws with ``pipeline/studies/mupc/training/figures.py`` as it stands at ``--before`` (the last matplotlib
revision), loaded from git; the plotly side with the working tree's. Rounds alternate the sides; best of
``--repeats``. Each child reports its import, draw and save seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEFORE = "11bc116"  # the last revision whose training figures are matplotlib

CHILD = r"""
import importlib.util, json, os, sys, time
t0 = time.perf_counter()
sys.path.insert(0, os.environ["BENCH_ROOT"])
side, family, out, before_file = sys.argv[1:5]
from pipeline.writer.figures import save_figures
from pipeline.studies.mupc.training.extract import extract_family
from tests.mupc_training import test_figures as T
from tests.mupc_training.figures_synth import grids, write_sweeps
if side == "matplotlib":
    spec = importlib.util.spec_from_file_location("figures_mpl", before_file)
    figures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(figures)
else:
    from pipeline.studies.mupc.training import figures
t1 = time.perf_counter()
from pathlib import Path
root = Path(out, "sweeps")
os.makedirs(root)
g = grids()
write_sweeps(root, g)
cfg, sw = T.training_cfg().figures, T.sweeps(g, root)
head = extract_family(cfg, "smoke", family, sw)
t2 = time.perf_counter()
figs = figures.render_family(cfg, family, sw, head.get("selected_lrs", {}))
t3 = time.perf_counter()
files = save_figures(figs, Path(out, "figs"))
t4 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "draw": t3 - t2, "save": t4 - t3, "figures": len(figs),
                  "files": sorted(os.path.basename(str(p)) for f in files for p in f),
                  "bytes": sum(os.path.getsize(p) for f in files for p in f)}))
"""


def run(side: str, family: str, before_file: Path) -> dict:
    with tempfile.TemporaryDirectory() as out:
        Path(out, "figs").mkdir()
        start = time.perf_counter()
        proc = subprocess.run(["taskset", "-c", "1", sys.executable, "-c", CHILD, side,
                               family, out, str(before_file)], capture_output=True, text=True, cwd=ROOT,
                              env={**os.environ, "TRAINSCAPE_FIGURE_WORKERS": "1", "BENCH_ROOT": str(ROOT)})
        wall = time.perf_counter() - start
    if proc.returncode:
        sys.exit(f"{side} {family} failed:\n{proc.stderr[-3000:]}")
    rec = json.loads(proc.stdout.strip().splitlines()[-1])
    return {**rec, "wall": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", nargs="+", default=["F18", "F22", "F24"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--before", default=BEFORE, help="git revision of the matplotlib figures.py")
    args = ap.parse_args()
    src = subprocess.run(["git", "show", f"{args.before}:pipeline/studies/mupc/training/figures.py"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    with tempfile.TemporaryDirectory() as tmp:
        before_file = Path(tmp, "figures_mpl.py")
        before_file.write_text(src)
        best: dict[tuple[str, str], dict] = {}
        walls: dict[tuple[str, str], list[float]] = {}
        for r in range(args.repeats):
            for family in args.families:
                for side in (("matplotlib", "plotly") if r % 2 == 0 else ("plotly", "matplotlib")):
                    rec = run(side, family, before_file)
                    walls.setdefault((family, side), []).append(rec["wall"])
                    if (family, side) not in best or rec["wall"] < best[family, side]["wall"]:
                        best[family, side] = rec
    print(f"taskset -c 1, best of {args.repeats} (median wall in brackets); seconds")
    print("| family | side | figures | files | process wall | imports | draw | save | bytes written |")
    print("|---|---|---|---|---|---|---|---|---|")
    for family in args.families:
        for side in ("matplotlib", "plotly"):
            b = best[family, side]
            print(f"| {family} | {side} | {b['figures']} | {len(b['files'])} | {b['wall']:.2f} "
                  f"({statistics.median(walls[family, side]):.2f}) | {b['import']:.2f} | {b['draw']:.2f} | "
                  f"{b['save']:.2f} | {b['bytes'] / 1e6:.1f} MB |")


if __name__ == "__main__":
    main()
