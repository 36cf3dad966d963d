"""Saving a many-panel figure: matplotlib's per-format ``savefig`` against :func:`pipeline.plotting.save_mpl`.

    taskset -c 1 .venv/bin/python benchmarks/figure_save.py [--rows 5 --cols 6 --repeats 3]

The figure is shaped like the mupc analysis figures (a grid of log-scaled line panels with titles,
labels and a legend, constrained layout), saved as PNG and PDF. ``savefig per format`` lets matplotlib
lay the figure out and measure its tight box again for each file (the style sets ``savefig.bbox:
tight``); ``save_mpl`` lays it out once (:func:`pipeline.plotting.freeze_layout`) and reuses that layout
and box for both. Best of ``--repeats`` interleaved rounds; the two PNGs' sizes are printed too, since
both must frame the same content.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.plotting import _META, dpi, plt, save_mpl


def figure(rows: int, cols: int) -> plt.Figure:
    rng = np.random.default_rng(0)
    fig, axes = plt.subplots(rows, cols, figsize=(3 * cols, 2.4 * rows), layout="constrained")
    x = np.arange(1, 65)
    for i, ax in enumerate(axes.flat):
        for k in range(5):
            ax.plot(x, np.exp(rng.normal(0, 0.3, x.size).cumsum() / 8) * (k + 1), label=f"H={2 ** (k + 1)}")
        ax.set_yscale("log")
        ax.set_title(f"panel {i}: N = {2 ** (i % 7 + 1)}")
        ax.set_xlabel("width N")
        ax.set_ylabel("activity RMS")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle("many-panel figure")
    return fig


def per_format(fig: plt.Figure, base: Path) -> None:
    for fmt in ("png", "pdf"):
        fig.savefig(base.with_name(f"{base.name}.{fmt}"), format=fmt, dpi=dpi(), metadata=_META.get(fmt))
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=5)
    ap.add_argument("--cols", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    best = {"savefig per format": float("inf"), "save_mpl": float("inf")}
    fns = {"savefig per format": per_format, "save_mpl": save_mpl}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.repeats):
            for name, fn in fns.items():
                fig = figure(a.rows, a.cols)  # building the figure is not timed
                t = time.perf_counter()
                fn(fig, Path(tmp) / name.replace(" ", "_"))
                best[name] = min(best[name], time.perf_counter() - t)
        sizes = {name: plt.imread(Path(tmp) / f"{name.replace(' ', '_')}.png").shape[:2] for name in fns}
    print(f"{a.rows}x{a.cols} panels, PNG ({dpi()} dpi) + PDF; best of {a.repeats} interleaved rounds")
    for name, t in best.items():
        print(f"  {name:20s} {t:6.2f} s   png {sizes[name][1]}x{sizes[name][0]} px")
    print(f"  speed-up {best['savefig per format'] / best['save_mpl']:.2f}x")


if __name__ == "__main__":
    main()
