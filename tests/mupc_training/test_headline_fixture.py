"""The paper's Figure 1 claims on paper-scale runs: the ``headline`` slice trained on an H100
(``fixtures/headline/README.md`` gives the provenance), judged again here from its run records.

``tf32`` is the slice as ``make gpu-headline`` trained it in TF32; two of its five single-run μPC groups
diverged there. ``float32`` holds those runs (and S10's) trained again in full float32. The extract units run
here, on the CPU, from the runs the H100 recorded: they must give the H100's own metrics, and the claims
their verdicts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pipeline.paths import repo_root

ROOT = repo_root()
FIXTURE = Path(__file__).parent / "fixtures" / "headline"
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_headline as gh  # noqa: E402


def rebuild(tmp_path: Path, data_mirror: Path, *folders: str) -> dict:
    out = tmp_path / "out"
    assert gh.rebuild([FIXTURE / f for f in folders], out, data_mirror, tmp_path / "ws", 120, draw=False) == 0
    s = json.loads((out / "summary.json").read_text())
    return s | {"ws": tmp_path / "ws", "status": {c["claim"]: c["status"] for c in s["claims"]},
                "measured": {c["claim"]: c.get("measured") for c in s["claims"]}}


def test_the_h100_slice_in_tf32_is_judged_here_as_it_was_there(tmp_path, data_mirror):
    s = rebuild(tmp_path, data_mirror, "tf32")
    for unit in gh.EXTRACT_UNITS:  # the CPU's extraction of the H100's runs is the H100's
        name = f"mupc_training_extract@{unit}.json"
        here = json.loads((s["ws"] / "reports" / "metrics" / name).read_text())
        there = json.loads((FIXTURE / "tf32" / "reports" / "metrics" / name).read_text())
        assert here == there, unit
    device = {r["claim"]: r["status"] for r in json.loads((FIXTURE / "tf32" / "reports" / "claims.json").read_text())
              ["claims"]}
    assert s["status"] == {c: device[c] for c in gh.CLAIMS}
    # TF32: the lone S6 and S11 runs diverged (μPC at chance), S10's three seeds trained
    assert s["status"] == {"mupc_near_bp_128_layers": "fails", "mupc_beats_pc_128_layers": "fails",
                           "mupc_deepest_trains_long": "fails", "pc_fails_at_128_layers_for_any_lr": "holds"}
    near = s["measured"]["mupc_near_bp_128_layers"]
    assert near["mnist/H=128/1_epochs"]["min_acc"] > 96 and near["fashion_mnist/H=128/1_epochs"]["min_acc"] == 10.0


def test_with_the_deep_mupc_runs_in_float32_every_figure_1_claim_holds(tmp_path, data_mirror):
    s = rebuild(tmp_path, data_mirror, "tf32", "float32")
    assert s["rebuilt_from"]["S6"].endswith("float32") and s["rebuilt_from"]["B2"].endswith("tf32")
    assert set(s["status"].values()) == {"holds"}, s["status"]
    m = s["measured"]
    assert m["mupc_beats_pc_128_layers"]["relu/H=128"] == pytest.approx(86.65, abs=0.01)  # μPC 96.45 − PC ≈ 9.8
    deep = {k: v["acc"] for d in m["mupc_deepest_trains_long"] for k, v in d.items()}
    assert deep == pytest.approx({"mnist/H=128/1_epochs": 96.38, "fashion_mnist/H=128/1_epochs": 84.15}, abs=0.01)
    assert all(abs(v["gap"]) < 1.1 for v in m["mupc_near_bp_128_layers"].values())  # μPC within ~1 point of BP
    assert m["pc_fails_at_128_layers_for_any_lr"]["above"] == {}  # no PC lr above 20 % at 128 layers


def test_the_fixture_is_the_headline_profile_at_the_paper_shape():
    for part in ("tf32", "float32"):
        for csv in (FIXTURE / part / "artifacts" / "mupc_training" / "train").glob("*/runs.csv"):
            rows = csv.read_text().splitlines()
            head = rows[0].split(",")
            for row in rows[1:]:
                r = dict(zip(head, row.split(",")))
                assert (r["N"], r["H"], r["batch_size"]) == ("512", "128", "64"), (csv, r)
                assert r["precision"] == ("tf32" if part == "tf32" else "float32"), (csv, r)
