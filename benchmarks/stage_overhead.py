"""What one stage costs beyond its own work, against a bare interpreter, measured side by side.

Prints, from one run (commands interleaved, ``--repeats`` times, minimum and median):
- the import time of each heavy module in a fresh process (minus ``python -c pass``);
- real stages of the imprint study, run as ``dvc repro`` runs them (``python -m stages.<kind> ...``)
  in a scratch workspace: the process's wall time, the time inside the study's own code (the runner
  records it with ``TRAINSCAPE_TIMINGS``), and the rest — the framework's start-up (interpreter,
  imports, params, provenance) and wind-down (files, tracking) — in each tracking mode
  (``TRAINSCAPE_TRACKING``): ``journal`` (the default: the stage journals, MLflow stays out of it),
  ``direct`` (the stage logs to MLflow itself) and ``off``;
- the sync that replays the journal-mode stages' journals into MLflow afterwards
  (``python -m pipeline.tracking sync``, once, as the gallery stage does), per journal.

Needs the imprint training outputs (``dvc repro -R graph/imprint/train``); runs
from the repository root: ``python benchmarks/stage_overhead.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
MODULES = {
    "numpy": "import numpy",
    "yaml": "import yaml",
    "scipy.linalg": "import scipy.linalg",
    "torch": "import torch",
    "matplotlib.pyplot": "import matplotlib.pyplot",
    "plotly.graph_objects": "import plotly.graph_objects",
    "mlflow (client)": "from mlflow.tracking import MlflowClient",
    "mlflow (client + SQL store)": "from mlflow.tracking import MlflowClient; "
                                   "import mlflow.store.tracking.sqlalchemy_store",
    "pipeline.stage (the runner)": "import pipeline.stage",
}
STAGES = [("render", "imprint", "glyph"), ("extract", "imprint", "final")]
MODES = ("journal", "direct", "off")


def workspace(tmp: Path) -> Path:
    """A scratch copy holding what the imprint stages read, so the benchmark leaves the repository as is."""
    ws = tmp / "ws"
    train = ROOT / "artifacts/imprint/train"
    if not train.is_dir():
        sys.exit("the imprint training outputs are missing: run "
                 "`dvc repro -R graph/imprint/train` first")
    (ws / "artifacts/imprint").mkdir(parents=True)
    shutil.copytree(train, ws / "artifacts/imprint/train")
    (ws / "artifacts/data").symlink_to(ROOT / "artifacts/data")
    for f in ("params.yaml", "dvc.yaml"):
        shutil.copy(ROOT / f, ws / f)
    shutil.copytree(ROOT / "params", ws / "params")
    subprocess.run(["git", "init", "-q"], cwd=ws, check=True)
    subprocess.run(["git", "add", "params.yaml", "params", "dvc.yaml"], cwd=ws, check=True)
    subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-qm", "ws"],
                   cwd=ws, check=True)
    return ws


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    start = time.time()
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return start, time.time()


def stage_cmd(kind: str, study: str, unit: str) -> list[str]:
    return [PY, "-m", f"stages.{kind}", study, unit, "--profile", "smoke"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DVC_", "MLFLOW_", "TRAINSCAPE_"))}
    base["PYTHONPATH"] = str(ROOT)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        ws = workspace(tmp)
        timings = tmp / "timings.jsonl"
        env = {**base, "TRAINSCAPE_ROOT": str(ws), "TRAINSCAPE_TIMINGS": str(timings)}
        results: dict[str, list[float]] = {}
        stage_rows: dict[str, list[tuple[float, float, float, float]]] = {}
        # the store exists before anything is timed (creating it runs MLflow's migrations: seconds)
        subprocess.run(stage_cmd(*STAGES[1]), cwd=ROOT, env={**env, "TRAINSCAPE_TRACKING": "direct"}, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(args.repeats):
            start, end = timed([PY, "-c", "pass"], base)
            results.setdefault("python -c pass", []).append(end - start)
            for name, stmt in MODULES.items():
                start, end = timed([PY, "-c", stmt], base)
                results.setdefault(name, []).append(end - start)
            for kind, study, unit in STAGES:
                for mode in MODES:
                    timings.write_text("")
                    start, end = timed(stage_cmd(kind, study, unit), {**env, "TRAINSCAPE_TRACKING": mode})
                    rec = json.loads(timings.read_text().splitlines()[-1])
                    row = (end - start, rec["study_seconds"], rec["first_line"] - start, end - rec["last_line"])
                    stage_rows.setdefault(f"{study}_{kind}@{unit} ({mode})", []).append(row)
        journals = len([p for p in (ws / ".trainscape/journal").iterdir() if p.is_dir()])
        sync_start, sync_end = timed([PY, "-m", "pipeline.tracking", "sync", "--on-error", "fail"],
                                     {**env, "TRAINSCAPE_TRACKING": "journal"})

    bare = min(results["python -c pass"])
    print(f"{'import in a fresh process (minus python -c pass)':52s} {'min s':>7s} {'median s':>9s}")
    print(f"{'python -c pass (itself)':52s} {bare:7.2f} {statistics.median(results['python -c pass']):9.2f}")
    for name in MODULES:
        vals = [v - bare for v in results[name]]
        print(f"{name:52s} {min(vals):7.2f} {statistics.median(vals):9.2f}")
    print()
    print(f"{'stage process (median of ' + str(args.repeats) + ')':44s} {'wall':>6s} {'study':>6s} {'before':>7s} "
          f"{'after':>6s} {'start-up':>9s} {'÷ bare':>7s} {'÷ off':>6s}")
    overheads = {name: statistics.median(r[0] - r[1] for r in rows) for name, rows in stage_rows.items()}
    for name, rows in stage_rows.items():
        wall, study, before, after = (statistics.median(col) for col in zip(*rows))
        off = overheads[name.rsplit(" (", 1)[0] + " (off)"]
        print(f"{name:44s} {wall:6.2f} {study:6.2f} {before:7.2f} {after:6.2f} {overheads[name]:9.2f} "
              f"{overheads[name] / bare:6.0f}× {overheads[name] / off:5.2f}×")
    for kind, study, unit in STAGES:
        name = f"{study}_{kind}@{unit}"
        journal, direct = overheads[f"{name} (journal)"], overheads[f"{name} (direct)"]
        print(f"{name}: start-up direct - journal = {direct - journal:.2f} s saved per stage "
              f"(journal costs {journal - overheads[name + ' (off)']:+.2f} s over off)")
    sync_s = sync_end - sync_start
    print(f"\nsync (python -m pipeline.tracking sync, one process): {journals} journals in {sync_s:.2f} s, "
          f"{sync_s / max(journals, 1):.2f} s per journal (MLflow's import paid once)")
    print("\nwall: the process; study: inside the study's own code; before: spawn to its first line; after: its last"
          "\nline to exit (files, figures, tracking); start-up = wall - study (everything before and after it).")


if __name__ == "__main__":
    main()
