"""The lock rewrite DVC does after every stage: one ``dvc.lock`` for the whole graph against one per stage file.

    taskset -c 1 .venv/bin/python benchmarks/lock_rewrite.py [--every 3 --repeats 1]

After a stage runs, DVC loads its ``dvc.lock`` with a comment-preserving YAML round trip, replaces
the stage's entry and writes the file back. This replays exactly that (DVC's own
``modify_yaml``) for every locked stage of the repository, once into a single lock holding every
entry (the layout before ``graph/``) and once into the lock of the stage's own file (the layout now:
one per unit, ``graph/<study>/<kind>/<unit>/dvc.lock``). Both sides rewrite the same entries with the
same content: every ``--every``-th locked stage (a rewrite of the one big lock takes seconds), best of
``--repeats`` interleaved rounds.
Per stage times the number of stages is what one full rebuild of the graph pays for lock rewrites.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from dvc.utils.serialize import modify_yaml
from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parents[1]


def locks() -> dict[Path, dict]:
    yaml = YAML(typ="safe")
    return {p: yaml.load(p.read_text()) for p in [ROOT / "dvc.lock", *sorted((ROOT / "graph").rglob("dvc.lock"))]
            if p.exists()}


def rewrite(path: Path, name: str, entry: dict) -> float:
    """Rewrite one stage's entry into ``path`` as DVC does after the stage ran; seconds."""
    start = time.perf_counter()
    with modify_yaml(path) as data:
        data["stages"][name] = entry
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--every", type=int, default=3, help="rewrite every n-th locked stage (the single lock is slow)")
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    found = locks()
    if len(found) < 2:
        sys.exit("no graph/<study>/<kind>/<unit>/dvc.lock yet: build first (dvc repro)")
    stages = [(path, name, entry) for path, doc in found.items() for name, entry in doc["stages"].items()]
    sampled = stages[::args.every]
    times: dict[str, list[float]] = {"one dvc.lock": [], "one per stage file": []}
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        combined = tmp_path / "combined.lock"
        for _ in range(args.repeats):
            # one lock: every entry of every stage, as the single dvc.yaml had it
            shutil.copy(ROOT / "dvc.lock", combined)
            with modify_yaml(combined) as data:
                for doc in found.values():
                    data["stages"].update(doc["stages"])
            times["one dvc.lock"].append(sum(rewrite(combined, name, entry) for _, name, entry in sampled))
            split = 0.0
            for i, (path, name, entry) in enumerate(sampled):
                own = tmp_path / f"{i}.lock"
                shutil.copy(path, own)
                split += rewrite(own, name, entry)
            times["one per stage file"].append(split)
    kb = sorted(p.stat().st_size / 1e3 for p in found)
    n = len(stages)
    print(f"rewriting {len(sampled)} of the {n} locked stages (every {args.every}th; DVC's modify_yaml), "
          f"best of {args.repeats}:")
    print(f"  locks now: {len(found)} files of {kb[0]:.0f}-{kb[-1]:.0f} kB; one lock would be {sum(kb):.0f} kB")
    for name, ts in times.items():
        per = min(ts) / len(sampled)
        print(f"  {name:18s} {per:.3f} s per stage, x {n} stages = {per * n:5.1f} s "
              f"(measured: {', '.join(f'{t:.2f}' for t in ts)} s)")
    one, per = (min(ts) for ts in times.values())
    print(f"  one lock / per stage file: {one / per:.2f}x")


if __name__ == "__main__":
    main()
