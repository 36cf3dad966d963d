"""A study's render stages at two revisions, side by side, in one built workspace, on one core.

    .venv/bin/python benchmarks/render_revisions.py [WORKSPACE] [--study mupc_analysis] [--before HEAD~1] \
        [--after HEAD] [--units F1 F2 ...] [--repeats 2]

WORKSPACE (default: this checkout) is a built checkout (after ``make repro``); where the study's train units are
not built there, the script says so and measures nothing (``make bench`` runs it without arguments). Each side
runs ``python -m stages.render <study> <unit>`` from a git worktree of its revision, in a root of its own
(``TRAINSCAPE_ROOT``: its revision's params, the workspace's trained units linked in, its own reports folder),
tracking off, pinned with ``taskset -c 1`` (kaleido's Chromium inherits the pin). Rounds alternate the sides;
best of ``--repeats`` process walls (median in brackets).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def worktree(rev: str, where: Path) -> Path:
    subprocess.run(["git", "worktree", "add", "--detach", "-q", str(where), rev], cwd=ROOT, check=True)
    return where


def side_root(code: Path, workspace: Path, where: Path) -> Path:
    """A root with the revision's params and the workspace's artifacts (read only by a render)."""
    where.mkdir()
    shutil.copytree(code / "params", where / "params")
    shutil.copy(code / "params.yaml", where / "params.yaml")
    (where / "artifacts").symlink_to(workspace.resolve() / "artifacts")
    return where


def render(code: Path, root: Path, study: str, unit: str) -> float:
    env = {**os.environ, "TRAINSCAPE_ROOT": str(root), "TRAINSCAPE_TRACKING": "off", "PYTHONPATH": str(code),
           "TRAINSCAPE_FIGURE_WORKERS": "1"}
    start = time.perf_counter()
    proc = subprocess.run(["taskset", "-c", "1", sys.executable, "-m", "stages.render", study, unit], cwd=code,
                          env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode:
        sys.exit(f"{code.name} {study} {unit} failed:\n{proc.stderr[-3000:]}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workspace", type=Path, nargs="?", default=ROOT)
    ap.add_argument("--study", default="mupc_analysis")
    ap.add_argument("--units", nargs="+")
    ap.add_argument("--before", default="HEAD~1")
    ap.add_argument("--after", default="HEAD")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    if not (args.workspace / "artifacts" / args.study / "train").is_dir():
        print(f"render_revisions: {args.workspace} has no built {args.study} train units (`make repro` builds them); "
              "nothing measured")
        return
    units = args.units or sorted(p.name for p in (args.workspace / "graph" / args.study / "render").iterdir())
    with tempfile.TemporaryDirectory() as tmp:
        sides = {side: worktree(rev, Path(tmp, side)) for side, rev in (("before", args.before), ("after", args.after))}
        roots = {side: side_root(code, args.workspace, Path(tmp, f"{side}-root")) for side, code in sides.items()}
        try:
            walls: dict[tuple[str, str], list[float]] = {}
            for r in range(args.repeats):
                for unit in units:
                    for side in (("before", "after") if r % 2 == 0 else ("after", "before")):
                        walls.setdefault((unit, side), []).append(render(sides[side], roots[side], args.study,
                                                                         unit))
        finally:
            for path in sides.values():
                subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=ROOT, check=False)
    print(f"{args.study} render stages, taskset -c 1, best of {args.repeats} process walls (median); seconds")
    print(f"| unit | before ({args.before}) | after ({args.after}) | after / before |")
    print("|---|---|---|---|")
    total = [0.0, 0.0]
    for unit in units:
        b, a = min(walls[unit, "before"]), min(walls[unit, "after"])
        total[0] += b
        total[1] += a
        print(f"| {unit} | {b:.2f} ({statistics.median(walls[unit, 'before']):.2f}) | "
              f"{a:.2f} ({statistics.median(walls[unit, 'after']):.2f}) | {a / b:.2f}× |")
    print(f"| all | {total[0]:.2f} | {total[1]:.2f} | {total[1] / total[0]:.2f}× |")


if __name__ == "__main__":
    main()
