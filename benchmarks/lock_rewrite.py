"""The lock rewrite DVC does after every stage: one ``dvc.lock`` for the whole graph against one per stage file.

    taskset -c 1 .venv/bin/python benchmarks/lock_rewrite.py [--every 3 --repeats 1]

After a stage runs, DVC loads its ``dvc.lock`` with a comment-preserving YAML round trip, replaces
the stage's entry and writes the file back. This replays exactly that (DVC's own
``modify_yaml``) for every locked stage of the repository, once into a single lock holding every
entry (the layout before ``graph/<study>/``) and once into the lock of the stage's own file (the
layout now). Both sides rewrite the same entries with the same content: every ``--every``-th stage
of each lock (a rewrite of the one big lock takes seconds), best of ``--repeats`` interleaved rounds.
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


def rewrite_all(path: Path, entries: dict[str, dict], every: int) -> float:
    """Rewrite every ``every``-th entry into ``path`` as DVC does after the stage ran; seconds in all."""
    start = time.perf_counter()
    for name, entry in list(entries.items())[::every]:
        with modify_yaml(path) as data:
            data["stages"][name] = entry
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--every", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    found = locks()
    if len(found) < 2:
        sys.exit("no graph/<study>/<kind>/<unit>/dvc.lock yet: build first (dvc repro)")
    n = sum(len(doc["stages"]) for doc in found.values())
    times: dict[str, list[float]] = {"one dvc.lock": [], "one per stage file": []}
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        combined = tmp_path / "combined.lock"
        for _ in range(args.repeats):
            # one lock: every entry of every study, as the single dvc.yaml had it
            shutil.copy(ROOT / "dvc.lock", combined)
            with modify_yaml(combined) as data:
                for doc in found.values():
                    data["stages"].update(doc["stages"])
            times["one dvc.lock"].append(sum(rewrite_all(combined, doc["stages"], args.every)
                                             for doc in found.values()))
            split = 0.0
            for i, (path, doc) in enumerate(found.items()):
                own = tmp_path / f"{i}.lock"
                shutil.copy(path, own)
                split += rewrite_all(own, doc["stages"], args.every)
            times["one per stage file"].append(split)
    sizes = ", ".join(f"{p.relative_to(ROOT)} {p.stat().st_size / 1e3:.0f} kB" for p in found)
    sampled = sum(len(list(doc["stages"])[::args.every]) for doc in found.values())
    print(f"rewriting {sampled} of the {n} locked stages (every {args.every}th of each lock; DVC's "
          f"modify_yaml), best of {args.repeats}:")
    print(f"  locks now: {sizes}; one lock would be {combined_size(found):.0f} kB")
    for name, ts in times.items():
        print(f"  {name:14s} {min(ts) / sampled:.3f} s per stage, x {n} stages = {min(ts) / sampled * n:5.1f} s "
              f"(measured: {', '.join(f'{t:.2f}' for t in ts)} s)")
    one, per = (min(ts) for ts in times.values())
    print(f"  one lock / per stage file: {one / per:.2f}x")


def combined_size(found: dict[Path, dict]) -> float:
    return sum(p.stat().st_size for p in found) / 1e3


if __name__ == "__main__":
    main()
