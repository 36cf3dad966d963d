"""A rerun with the same code, params and data writes every output byte for byte (so DVC keeps what is
downstream cached), while the journal (hence MLflow) and the run record still get each execution.

One cheap unit per study, through the real stage command (``python -m stages.<kind>``) in a temporary
workspace (``TRAINSCAPE_ROOT``): run, keep the bytes, delete the outputs, run again, compare.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.tracking import journal_dir
from pipeline.tracking.records import fingerprint
from tests.workspace import scratch_workspace

ROOT = Path(__file__).resolve().parent.parent

# (kind, study, unit): the cheapest smoke unit of each study's training, and an extract that writes a table
UNITS = (("train", "imprint", "random-adam"), ("train", "zero_init", "seed_pi_256"),
         ("train", "superposition", "untied"), ("extract", "superposition", "untied"),
         ("train", "mupc_analysis", "fwd_pass"), ("train", "mupc_training", "S5"))
TIMES = {"imprint_train@random-adam": "epoch_seconds", "superposition_train@untied": "train_seconds",
         "mupc_training_train@S5": "group_seconds"}  # wall clock that must reach the journal, not the outputs


def _outputs(root: Path, kind: str, study: str, unit: str) -> list[Path]:
    folder = root / "artifacts" / study / kind / unit
    metrics = root / "reports" / "metrics" / f"{study}_{kind}@{unit}.json"
    return [*sorted(p for p in folder.rglob("*") if p.is_file()), *([metrics] if metrics.exists() else [])]


@pytest.mark.pipeline
def test_a_forced_rerun_rewrites_every_output_byte_for_byte(tmp_path: Path, data_mirror: Path) -> None:
    def fewer_images(root: Path) -> None:  # the same code path on fewer images
        imprint = yaml.safe_load((root / "params/imprint.yaml").read_text())
        imprint["imprint"].update(n_train=2000, n_test=1000)
        (root / "params/imprint.yaml").write_text(yaml.safe_dump(imprint, sort_keys=False))

    root = scratch_workspace(tmp_path / "ws", data_mirror, fewer_images)
    journal = journal_dir()  # the test's own (conftest): the stages journal there, their records beside it
    env = {**os.environ, "TRAINSCAPE_ROOT": str(root), "TRAINSCAPE_JOURNAL": str(journal),
           "TRAINSCAPE_PROGRESS": "off", "PYTHONPATH": str(ROOT)}

    def build() -> dict[str, bytes]:
        for kind, study, unit in UNITS:
            proc = subprocess.run([sys.executable, "-m", f"stages.{kind}", study, unit, "--profile", "smoke"],
                                  cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
            assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        return {p.relative_to(root).as_posix(): p.read_bytes() for u in UNITS for p in _outputs(root, *u)}

    first = build()
    records = {}
    for kind, study, unit in UNITS:
        stage = f"{study}_{kind}@{unit}"
        meta = json.loads((root / "artifacts" / study / kind / unit / "meta.json").read_text())
        assert not {"run_key", "children", "mlflow_run_id", "mlflow_experiment_id"} & set(meta)
        assert meta["git_dirty"] is False and len(meta["git_commit"]) == 40
        records[stage] = json.loads((journal.parent / "runs" / f"{stage}.json").read_text())["runs"][fingerprint(meta)]
        shutil.rmtree(root / "artifacts" / study / kind / unit)
        (root / "reports" / "metrics" / f"{stage}.json").unlink(missing_ok=True)
    second = build()

    assert sorted(first) == sorted(second) and any(name.endswith("runs.csv") for name in first)
    changed = [name for name in first if first[name] != second[name]]
    assert not changed, f"a rerun changed {changed}"
    for kind, study, unit in UNITS:
        stage = f"{study}_{kind}@{unit}"
        meta = json.loads((root / "artifacts" / study / kind / unit / "meta.json").read_text())
        rec = json.loads((journal.parent / "runs" / f"{stage}.json").read_text())["runs"][fingerprint(meta)]
        keys = sorted(p.name.rsplit("-", 1)[1] for p in journal.glob(f"{stage}-*"))
        assert sorted([records[stage]["run_key"], rec["run_key"]]) == keys  # both executions journaled
        assert rec["run_key"] != records[stage]["run_key"]  # the record links the latest
        assert set(rec["children"]) == set(records[stage]["children"])
        if stage in TIMES:  # the wall-clock times went to the journal (MLflow) instead
            latest = journal / f"{stage}-{rec['run_key']}"
            assert any(TIMES[stage] in s.read_text() for s in latest.glob("seg-*.json"))
