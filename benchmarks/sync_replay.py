"""What the tracking sync costs for a whole build: the runs of a real build, journaled and synced.

Reads every stage run of a built store (default: the repository's ``mlflow.db``; a fresh clone's
complete smoke build is the case to measure) with its child runs, params, tags, metric histories,
dataset inputs and artifacts, records each stage again through a journal-mode
:class:`~pipeline.tracking.Tracker`, exactly the calls a stage makes, into a scratch journal, then
times ``python -m pipeline.tracking sync`` into a fresh store (in its own process, as the report
stage runs it; the store is created first, its migrations are not timed) and checks that every run
arrived. Prints, side by side, the stages' journaling, the sync (MLflow's import included) and a
plain ``python -c "import mlflow client + SQL store"``.

``python benchmarks/sync_replay.py --store sqlite:////path/to/build/mlflow.db``
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mlflow.tracking import MlflowClient  # noqa: E402

from pipeline.tracking import PARENT_TAG, RUN_KEY_TAG, Tracker, run_map  # noqa: E402

SYSTEM_TAGS = ("mlflow.runName", "mlflow.user", PARENT_TAG, RUN_KEY_TAG, "failure_reason")


def files(client: MlflowClient, run: Any) -> list[tuple[Path, str | None]]:
    """A run's artifact files on disk (file stores only) with the folder they were logged under."""
    base = Path(run.info.artifact_uri.removeprefix("file://"))
    out, todo = [], [None]
    while todo:
        folder = todo.pop()
        for a in client.list_artifacts(run.info.run_id, folder):
            if a.is_dir:
                todo.append(a.path)
            else:
                out.append((base / a.path, str(Path(a.path).parent) if "/" in a.path else None))
    return out


def history(client: MlflowClient, run: Any) -> dict[str, tuple[list[int], list[float]]]:
    out = {}
    for key in run.data.metrics:
        hist = sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: m.step)
        out[key] = ([m.step for m in hist], [m.value for m in hist])
    return out


def inputs(run: Any) -> dict[str, dict[str, str]]:
    return {d.dataset.name: {"digest": d.dataset.digest, "source": d.dataset.source}
            for d in (run.inputs.dataset_inputs if run.inputs else [])}


def load(uri: str) -> list[dict[str, Any]]:
    """Every stage run of the store with its children: what each stage logged."""
    client = MlflowClient(tracking_uri=uri)
    stages = []
    for exp in client.search_experiments():
        runs = []
        token = None
        while True:
            page = client.search_runs([exp.experiment_id], max_results=1000, page_token=token)
            runs += list(page)
            token = page.token
            if not token:
                break
        for parent in (r for r in runs if PARENT_TAG not in r.data.tags):
            kids = [r for r in runs if r.data.tags.get(PARENT_TAG) == parent.info.run_id]
            stages.append({"study": exp.name, "run": parent, "series": history(client, parent),
                           "files": files(client, parent), "inputs": inputs(parent),
                           "children": [(k, history(client, k), files(client, k)) for k in
                                        sorted(kids, key=lambda r: r.info.start_time)]})
    return sorted(stages, key=lambda s: s["run"].info.start_time)


def tags_of(run: Any) -> dict[str, str]:
    return {k: v for k, v in run.data.tags.items() if k not in SYSTEM_TAGS}


def journal(stage: dict[str, Any]) -> None:
    """The calls the stage made, through the Tracker (journal mode)."""
    parent = stage["run"]
    with Tracker(stage["study"], parent.info.run_name, tags_of(parent), params=parent.data.params,
                 datasets=stage["inputs"]) as tr:
        for kid, series, kid_files in stage["children"]:
            with tr.child(kid.info.run_name, kid.data.params, tags_of(kid)) as run:
                run.log_many({}, series)
                for path, folder in kid_files:
                    run.log_artifact(path, folder)
                if "failure_reason" in kid.data.tags:
                    run.fail(kid.data.tags["failure_reason"])
        tr.parent.log_many({}, stage["series"])
        for path, folder in stage["files"]:
            tr.parent.log_artifact(path, folder)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default=f"sqlite:///{ROOT / 'mlflow.db'}", help="the built store to read")
    args = ap.parse_args()
    if args.store.startswith("sqlite:///") and not Path(args.store.removeprefix("sqlite:///")).is_file():
        sys.exit(f"no store at {args.store}: build first (dvc repro), or pass --store")
    t0 = time.perf_counter()
    stages = load(args.store)
    if not stages:
        sys.exit(f"{args.store} holds no stage run: build first (dvc repro, then the gallery stage syncs)")
    n_runs = sum(1 + len(s["children"]) for s in stages)
    n_metrics = sum(len(v[0]) for s in stages for v in [*s["series"].values(),
                                                         *(x for _, h, _ in s["children"] for x in h.values())])
    print(f"read {len(stages)} stage runs, {n_runs} runs, {n_metrics} metric values from {args.store} "
          f"({time.perf_counter() - t0:.1f} s)")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DVC_", "MLFLOW_", "TRAINSCAPE_"))}
        env.update(PYTHONPATH=str(ROOT), TRAINSCAPE_ROOT=str(tmp), TRAINSCAPE_JOURNAL=str(tmp / "journal"),
                   MLFLOW_TRACKING_URI=f"sqlite:///{tmp / 'mlflow.db'}")
        os.environ.update(TRAINSCAPE_ROOT=env["TRAINSCAPE_ROOT"], TRAINSCAPE_JOURNAL=env["TRAINSCAPE_JOURNAL"],
                          MLFLOW_TRACKING_URI=env["MLFLOW_TRACKING_URI"], TRAINSCAPE_TRACKING="journal")
        t0 = time.perf_counter()
        for stage in stages:
            journal(stage)
        journaling = time.perf_counter() - t0
        subprocess.run([sys.executable, "-c", "from mlflow.tracking import MlflowClient; "
                        f"MlflowClient({env['MLFLOW_TRACKING_URI']!r}).search_experiments()"],
                       env=env, check=True, capture_output=True)  # the store exists before the timing
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "pipeline.tracking", "sync", "--on-error", "fail"], cwd=ROOT,
                             env=env, check=True, capture_output=True, text=True).stdout.strip()
        sync_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "from mlflow.tracking import MlflowClient; "
                        "import mlflow.store.tracking.sqlalchemy_store"], env=env, check=True)
        import_s = time.perf_counter() - t0
        synced = run_map(tmp / "journal")
        assert len(synced) == n_runs, f"{len(synced)} runs synced, {n_runs} recorded"
        assert len(MlflowClient(env["MLFLOW_TRACKING_URI"]).search_runs(
            [e.experiment_id for e in MlflowClient(env["MLFLOW_TRACKING_URI"]).search_experiments()],
            max_results=50000)) == n_runs
    print(out)
    print(f"{'':44s} {'s':>7s} {'per stage':>10s}")
    print(f"{'journaling every stage (in this process)':44s} {journaling:7.2f} {journaling / len(stages):10.3f}")
    print(f"{'sync, one process (MLflow import included)':44s} {sync_s:7.2f} {sync_s / len(stages):10.3f}")
    print(f"{'python -c import mlflow client + SQL store':44s} {import_s:7.2f}")
    print(f"sync of the whole build = {sync_s / import_s:.1f}× one MLflow import; every run arrived ({n_runs})")


if __name__ == "__main__":
    main()
