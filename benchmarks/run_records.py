"""A resumable unit's part records at two revisions, side by side in one run, on one core.

    .venv/bin/python benchmarks/run_records.py [--before 99be42d] [--after HEAD] [--parts 4410] [--repeats 2]

Each side records ``--parts`` parts of one stage (the paper's hessian_init writes 4,410, one a cell) through
``pipeline.tracking.records.record``, as ``pipeline.writer.write_part`` does after each part, then looks up
their children once (``part_children``, as the unit's final write does). Each side runs from a git worktree of
its revision in a process of its own, pinned with ``taskset -c 1``, with a run-record folder of its own. 99be42d
kept every part in the stage's one record file, read and rewritten whole for each part.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# One side's work, run with the side's code on PYTHONPATH; prints its seconds as JSON.
SIDE = """
import json, sys, time
from pipeline.tracking import records
n = int(sys.argv[1])
stage = "mupc_analysis_train@hessian_init"
prov = {"stage": stage, "git_commit": "c" * 40, "params_hash": "p" * 64, "profile": "paper",
        "data_sha256": {"mnist": "d" * 64}, "device": {"type": "cpu", "name": "x" * 24}}
parts = {f"tanh/sp_standard_skips/N{i % 7}_H{i // 7}": {**prov, "cell": i, "N": i % 7, "H": i // 7}
         for i in range(n)}
run = {"run_key": "k" * 32, "mlflow_experiment": "mupc_analysis", "mlflow_experiment_id": None,
       "children": {}, "execution": {}}
if hasattr(records, "record_part"):
    record = records.record_part
else:  # before a part had a file of its own
    def record(stage, part, meta, run):
        records.record(stage, meta, run, part=part)
times = []
start = time.perf_counter()
for name, meta in parts.items():
    t = time.perf_counter()
    record(stage, name, meta, run)
    times.append(time.perf_counter() - t)
recorded = time.perf_counter() - start
t = time.perf_counter()
records.part_children(stage, parts)
print(json.dumps({"record": recorded, "first": sum(times[:100]) / 100, "last": sum(times[-100:]) / 100,
                  "lookup": time.perf_counter() - t}))
"""


def side(code: Path, parts: int, where: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(code), "TRAINSCAPE_JOURNAL": str(where / "journal")}
    proc = subprocess.run(["taskset", "-c", "1", sys.executable, "-c", SIDE, str(parts)], cwd=code, env=env,
                          capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"{code.name} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="99be42d")
    ap.add_argument("--after", default="HEAD")
    ap.add_argument("--parts", type=int, default=4410)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    if args.parts < 100:
        sys.exit(f"--parts {args.parts}: at least 100 (the first and last hundred are timed)")
    results: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as tmp:
        codes = {}
        for name, rev in (("before", args.before), ("after", args.after)):
            codes[name] = Path(tmp, name)
            subprocess.run(["git", "worktree", "add", "--detach", "-q", str(codes[name]), rev], cwd=ROOT, check=True)
        try:
            for r in range(args.repeats):
                for name in (("before", "after") if r % 2 == 0 else ("after", "before")):
                    where = Path(tmp, f"{name}-{r}")
                    where.mkdir()
                    results[name].append(side(codes[name], args.parts, where))
        finally:
            for code in codes.values():
                subprocess.run(["git", "worktree", "remove", "--force", str(code)], cwd=ROOT, check=False)
    best = {name: min(rs, key=lambda x: x["record"]) for name, rs in results.items()}
    print(f"{args.parts} part records of one stage, taskset -c 1, best of {args.repeats} (by the records' total)")
    print("| side | records, total | a record, first 100 | a record, last 100 | lookup of all |")
    print("|---|---|---|---|---|")
    for name, rev in (("before", args.before), ("after", args.after)):
        b = best[name]
        print(f"| {name} ({rev}) | {b['record']:.2f} s | {1e3 * b['first']:.2f} ms | {1e3 * b['last']:.2f} ms | "
              f"{b['lookup']:.2f} s |")
    ratio = (best["before"]["record"] + best["before"]["lookup"]) / (best["after"]["record"] + best["after"]["lookup"])
    print(f"before / after, records and lookup: {ratio:.1f}×")


if __name__ == "__main__":
    main()
