"""No-op ``dvc status``: params split per study (the layout) against all sections in one file and none.

DVC reads a stage's params by parsing the whole file they live in and walking its whole tree once
per key, for every stage. This benchmark builds two scratch copies of the graph, identical but for
where the study sections live, and times ``dvc status`` on each, interleaved, best of ``--rounds``:

- ``per-study``: the repository as it is (``params.yaml`` + ``params/<study>.yaml``);
- ``one file``: every section merged back into ``params.yaml``, with ``dvc.yaml`` and ``dvc.lock``
  rewritten to read them from there (the same keys and locked values);
- ``no params at all``: every params dependency dropped, the floor of DVC's own per-stage cost
  (code and data hashes, outputs, the graph) that no params layout can go below.

Both copies hold the code, params, ``dvc.yaml`` and ``dvc.lock`` but no outputs (each stage reports
its outputs missing, at the same small cost on both sides), so the difference is the params cost.
With ``--workspace`` it also times ``dvc status`` of the repository itself, outputs included.

    taskset -c 1 .venv/bin/python benchmarks/dvc_status.py
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DVC = str(Path(sys.executable).parent / "dvc")
COPIED = ("pipeline", "stages", "params", "params.yaml", "dvc.yaml", "dvc.lock", "graph", "pyproject.toml")


def _git(ws: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", *args], cwd=ws,
                   check=True, stdout=subprocess.DEVNULL)


def copy_repo(dest: Path) -> Path:
    dest.mkdir(parents=True)
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(src, dest / name)
    _git(dest, "init", "-q")
    subprocess.run([DVC, "init", "-q"], cwd=dest, check=True)
    subprocess.run([DVC, "config", "core.analytics", "false"], cwd=dest, check=True)
    return dest


def _dump(path: Path, doc: dict) -> None:
    path.write_text(yaml.safe_dump(doc, sort_keys=False, width=120))


def merge_into_one_file(ws: Path) -> None:
    """Move every study section back into ``params.yaml``; point the dvc.yaml and dvc.lock files there."""
    params = yaml.safe_load((ws / "params.yaml").read_text())
    for path in sorted((ws / "params").glob("*.yaml")):
        params.update(yaml.safe_load(path.read_text()))
    shutil.rmtree(ws / "params")
    _dump(ws / "params.yaml", params)
    for path in [ws / "dvc.yaml", *sorted((ws / "graph").rglob("dvc.yaml"))]:
        graph = yaml.safe_load(path.read_text())
        for stage in graph["stages"].values():
            body = stage.get("do", stage)
            flat: list[str] = []
            for entry in body.get("params", []):
                flat += [k for keys in entry.values() for k in keys] if isinstance(entry, dict) else [entry]
            if flat:
                body["params"] = flat
        _dump(path, graph)
    for path in [ws / "dvc.lock", *sorted((ws / "graph").rglob("dvc.lock"))]:
        lock = yaml.safe_load(path.read_text())
        for stage in lock["stages"].values():
            if stage.get("params"):
                stage["params"] = {"params.yaml": {k: v for keys in stage["params"].values()
                                                   for k, v in keys.items()}}
        _dump(path, lock)


def strip_params(ws: Path) -> None:
    """Drop every params dependency from the dvc.yaml and dvc.lock files: what DVC costs for these
    stages' code, data and outputs alone, the floor no params layout can go below."""
    for path in [ws / "dvc.yaml", *sorted((ws / "graph").rglob("dvc.yaml"))]:
        graph = yaml.safe_load(path.read_text())
        for stage in graph["stages"].values():
            stage.get("do", stage).pop("params", None)
        _dump(path, graph)
    for path in [ws / "dvc.lock", *sorted((ws / "graph").rglob("dvc.lock"))]:
        lock = yaml.safe_load(path.read_text())
        for stage in lock["stages"].values():
            stage.pop("params", None)
        _dump(path, lock)


def status_seconds(ws: Path) -> tuple[float, str]:
    start = time.perf_counter()
    out = subprocess.run([DVC, "status"], cwd=ws, check=True, capture_output=True, text=True).stdout
    return time.perf_counter() - start, out


def summary(out: str) -> str:
    """What the status reports, without the stage names: equal on both sides or the comparison is off."""
    return "\n".join(sorted(line.strip() for line in out.splitlines() if line.startswith(("\t", " "))))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workspace", action="store_true", help="also time `dvc status` of the repository")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        split = copy_repo(Path(tmp) / "per_study")
        one = copy_repo(Path(tmp) / "one_file")
        merge_into_one_file(one)
        bare = copy_repo(Path(tmp) / "no_params")
        strip_params(bare)
        for ws in (split, one, bare):
            _git(ws, "add", "-A")
            _git(ws, "commit", "-qm", "ws")
        sides = {"per-study files": split, "one params.yaml": one, "no params at all": bare}
        times: dict[str, list[float]] = {name: [] for name in sides}
        reports = {}
        for _ in range(args.rounds):
            for name, ws in sides.items():
                seconds, reports[name] = status_seconds(ws)
                times[name].append(seconds)
        if summary(reports["per-study files"]) != summary(reports["one params.yaml"]):
            print("warning: the two copies report different changes; the comparison is not like for like")
        stages = sum(len(yaml.safe_load(p.read_text())["stages"])
                     for p in [split / "dvc.lock", *(split / "graph").rglob("dvc.lock")])
        print(f"no-op `dvc status` of {stages} locked stages, outputs absent in both copies, "
              f"best of {args.rounds} interleaved rounds:")
        for name, ts in times.items():
            print(f"  {name:18s} {min(ts):6.2f} s   (all: {', '.join(f'{t:.2f}' for t in ts)})")
        print(f"  one file / per-study: {min(times['one params.yaml']) / min(times['per-study files']):.2f}x")
        print(f"  params' share of the per-study status: "
              f"{1 - min(times['no params at all']) / min(times['per-study files']):.0%}")
    if args.workspace:
        ts = [status_seconds(ROOT)[0] for _ in range(args.rounds)]
        print(f"the repository's own `dvc status` (outputs included): {min(ts):.2f} s "
              f"(all: {', '.join(f'{t:.2f}' for t in ts)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
