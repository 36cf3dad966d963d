"""``make gpu-headline`` (benchmarks/gpu_headline.py; without CUDA: test_gpu_check.py): the slice's cuts read
from the two profiles; the whole command's flow (train, extract, judge, bundle, resume) on the CPU with the
smoke profile standing in for the headline one."""

from __future__ import annotations

import json
import sys
import tarfile

import pytest

from pipeline.paths import repo_root

ROOT = repo_root()
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_headline as gh  # noqa: E402


def test_the_cuts_are_read_from_the_headline_and_paper_profiles():
    cuts = {line.split(":")[0]: line for line in gh.cuts()}
    assert list(cuts) == list(gh.TRAIN_UNITS)
    assert cuts["S10"] == "S10: 3 of 5 runs; epochs [1] (paper [5]); seed [0, 1, 2] (paper [0, 1, 2, 3, 4])"
    assert "S11: 1 of 3 runs; epochs [1] (paper [15])" in cuts["S11"]
    assert "act ['linear', 'relu'] (paper ['linear', 'relu', 'tanh'])" in cuts["S13"]
    for unit in gh.TRAIN_UNITS:  # the paper's shape everywhere: no depth other than 128 is trained
        cfg = gh.config("headline")
        assert {(tuple(g.N), tuple(g.H)) for g in cfg.sweeps[unit].grids} == {((512,), (128,))}, unit


@pytest.fixture
def smoke_slice(monkeypatch, data_mirror, tmp_path):
    monkeypatch.setattr(gh, "PROFILE", "smoke")
    machine = {"git_commit": "0" * 40, "gpu": "none (CPU)", "torch": "cpu", "cuda": None}

    def run(budget: float) -> dict:
        out = tmp_path / f"out{budget:g}"
        assert gh.run(out, data_mirror, tmp_path / "ws", budget, 120, machine) == 0
        return json.loads((out / "summary.json").read_text()) | {"out": out}
    return run


def test_the_slice_trains_extracts_judges_bundles_and_resumes(smoke_slice):
    s = smoke_slice(600)
    assert list(s["train"]) == list(gh.TRAIN_UNITS)
    assert all(r["rc"] == 0 and r["runs_trained_now"] == r["plan"]["todo"] > 0 for r in s["train"].values())
    assert all(r["rc"] == 0 for r in s["extract"].values()), s["extract"]
    assert [c["claim"] for c in s["claims"]] == list(gh.CLAIMS)
    assert all(c["status"] in ("holds", "fails") and c["measured"] is not None for c in s["claims"])
    with tarfile.open(s["out"] / "headline.tar.gz") as tar:
        names = set(tar.getnames())
    assert "reports/claims.json" in names and "artifacts/mupc_training/train/S10/runs.csv" in names
    assert {f"reports/metrics/mupc_training_extract@{u}.json" for u in gh.EXTRACT_UNITS} <= names
    assert "logs/S13.log" in names and not list(s["out"].glob("*.log"))  # logs travel in the bundle only
    again = smoke_slice(600)  # every run is recorded: nothing to train, the same verdicts
    assert all(r["plan"]["todo"] == 0 and r["runs_trained_now"] == 0 for r in again["train"].values())
    assert [c["status"] for c in again["claims"]] == [c["status"] for c in s["claims"]]


def test_without_budget_nothing_trains_and_no_claim_is_judged(smoke_slice):
    s = smoke_slice(0)
    assert all("skipped" in r for r in s["train"].values())
    assert all(isinstance(r, str) and r.startswith("not run:") for r in s["extract"].values())
    assert all(c["status"].startswith("not measured") for c in s["claims"])
    assert "S10: not trained (no training budget left)" in (s["out"] / "summary.txt").read_text()


def test_the_plan_costs_the_slice_alone(tmp_path):
    import os
    import subprocess

    env = {**os.environ, "TRAINSCAPE_PLAN_CACHE": str(tmp_path / "plan")}
    out = subprocess.run([sys.executable, "benchmarks/gpu_headline.py", "--plan"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "plan of profile 'headline': 11 stages" in out.stdout
    rows = [ln.split()[0] for ln in out.stdout.splitlines() if ln.startswith("  mupc_training_")]
    assert sorted(rows) == sorted([*(f"mupc_training_train@{u}" for u in gh.TRAIN_UNITS),
                                   *(f"mupc_training_extract@{u}" for u in gh.EXTRACT_UNITS)])
