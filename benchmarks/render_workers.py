"""A render unit's figures saved by one process against forked savers side by side (``save_figures``).

    .venv/bin/python benchmarks/render_workers.py [--figures 6 --repeats 3]

Run it unpinned: the point is the second core. The figures are shaped like a mupc analysis
render unit (six figures of 2×3 log-scaled line panels, ``figure_save.figure``; PNG + PDF each).
``TRAINSCAPE_FIGURE_WORKERS=1`` is the sequential save; the other side uses every core this
process may run on. Best of ``--repeats`` interleaved rounds; the files of both sides are compared
byte for byte.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from figure_save import figure  # the same log-scaled line panels

from pipeline.contract import Figure
from pipeline.writer.figures import save_figures


def figures(n: int) -> list[Figure]:
    return [Figure(f"fig{f}", "benchmark", "none", mpl=figure(2, 3)) for f in range(n)]


def timed(n: int, workers: str, folder: Path) -> tuple[float, dict[str, bytes]]:
    os.environ["TRAINSCAPE_FIGURE_WORKERS"] = workers
    figs = figures(n)  # drawn outside the clock: the study draws, the writer saves
    folder.mkdir()
    start = time.perf_counter()
    files = save_figures(figs, folder)
    seconds = time.perf_counter() - start
    return seconds, {p.name: p.read_bytes() for group in files for p in group}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--figures", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    sides = {"1 process": "1", f"{min(cores, args.figures)} forked savers": str(cores)}
    times: dict[str, list[float]] = {name: [] for name in sides}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            outputs = {}
            for name, workers in sides.items():
                seconds, outputs[name] = timed(args.figures, workers, Path(tmp) / f"{r}-{workers}")
                times[name].append(seconds)
            if len({tuple(sorted(o.items())) for o in outputs.values()}) != 1:
                sys.exit("the two sides wrote different files")
    print(f"{args.figures} figures (PNG + PDF each), {cores} cores available, best of {args.repeats}; "
          "files identical on both sides")
    for name, ts in times.items():
        print(f"  {name:18s} {min(ts):6.2f} s   (all: {', '.join(f'{t:.2f}' for t in ts)})")
    one, many = (min(ts) for ts in times.values())
    print(f"  speed-up: {one / many:.2f}x")


if __name__ == "__main__":
    main()
