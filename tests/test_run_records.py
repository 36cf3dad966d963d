"""Outputs hold what the inputs determine; the run that wrote them is in an untracked run record."""

from __future__ import annotations

import pandas as pd
import pytest

from pipeline.contract import Output, Run
from pipeline.gallery import build_manifest, gallery_html, link_runs
from pipeline.io import read_json, write_json
from pipeline.tracking import Tracker, pending
from pipeline.tracking import records as run_records
from pipeline.writer import write_unit


def _unit(tmp_path, key: str) -> tuple[bytes, bytes, str | None, dict]:
    unit = tmp_path / "artifacts/s/train/u"
    with Tracker("s", "s_train@u", {}) as tr:
        write_unit(unit, "s_train@u", Output(json={"a.json": {"x": 1.5}}, runs=[Run("seed0", metrics={"t": 2.0})],
                                             tables={"runs.csv": pd.DataFrame([{"run": "seed0", "x": 0.1}])},
                                             execution={"trained": [key]}),
                   tr, {"stage": "s_train@u", "git_commit": "c"}, in_place=False)
    out = tmp_path / "artifacts/s/train/u"
    return (out / "meta.json").read_bytes(), (out / "runs.csv").read_bytes(), tr.parent.run_key, read_json(
        out / "meta.json")


def test_a_rerun_writes_the_same_bytes_and_records_its_own_run(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINSCAPE_ROOT", str(tmp_path))
    meta1, csv1, key1, _ = _unit(tmp_path, "first")
    meta2, csv2, key2, meta = _unit(tmp_path, "second")
    assert (meta1, csv1) == (meta2, csv2) and key1 != key2
    assert csv1 == b"run,x\nseed0,0.1\n"
    rec = run_records.lookup("s_train@u", meta)
    assert rec["run_key"] == key2 and set(rec["children"]) == {"seed0"}
    assert rec["execution"] == {"trained": ["second"]}
    assert run_records.record_path("s_train@u").parent == tmp_path / "runs"  # beside the journal (conftest)
    assert len(pending()) == 2  # both executions are journaled for MLflow


def test_a_table_is_named_csv(tmp_path, monkeypatch):
    unit = tmp_path / "artifacts/s/train/u"
    monkeypatch.setenv("TRAINSCAPE_ROOT", str(tmp_path))
    with Tracker("s", "s_train@u", {}, enabled=False) as tr, pytest.raises(ValueError, match="CSV"):
        write_unit(unit, "s_train@u", Output(tables={"runs.txt": pd.DataFrame([{"a": 1}])}), tr, {"stage": "s"},
                   in_place=False)


def _sidecar(stage: str = "s_render@f") -> dict:
    return {"stage": stage, "figures": [
        {"id": "s/f", "study": "s", "files": ["reports/figures/s/f/f.png"], "params_hash": "p" * 64,
         "git_commit": "c" * 40, "data_sha256": {}, "profile": "smoke", "seed_figure": "Fig 1",
         "sources": [{"stage": "s_train@u", "meta_sha256": run_records.fingerprint({"stage": "s_train@u"})}]}]}


def test_the_report_links_recorded_runs_and_says_when_a_run_is_not_recorded_here(tmp_path):
    car = _sidecar()
    pulled = link_runs(build_manifest([run_records.with_runs(car)]), {})
    assert pulled["figures"][0]["run_key"] is None
    assert "run not recorded here" in gallery_html(pulled)
    run_records.record("s_render@f", car, {"run_key": "k" * 32, "children": {}})
    run_records.record("s_train@u", {"stage": "s_train@u"}, {"run_key": "t" * 32,
                                                             "children": {"seed0": "c" * 32}})
    runs = {"k" * 32: {"run_id": "R" * 32, "experiment_id": "7"}, "c" * 32: {"run_id": "C" * 32, "experiment_id": "7"}}
    fig = link_runs(build_manifest([run_records.with_runs(car)]), runs)["figures"][0]
    assert (fig["mlflow_run_id"], fig["run_key"], fig["mlflow_experiment_id"]) == ("R" * 32, "k" * 32, "7")
    assert fig["sources"][0]["mlflow_children"] == {"seed0": "C" * 32}
    other = _sidecar()
    other["figures"][0]["params_hash"] = "q" * 64  # another build's sidecar (e.g. dvc checkout): not this run's
    assert run_records.with_runs(other)["figures"][0]["run_recorded"] is False


def test_the_gallery_links_the_tables():
    manifest = {"figures": [], "tables": [{"id": "s/summary/runs.csv", "study": "s", "stage": "s_extract@summary",
                                           "file": "artifacts/s/extract/summary/runs.csv", "rows": 3,
                                           "columns": ["run", "status"]}]}
    page = gallery_html(manifest)
    assert "href='../artifacts/s/extract/summary/runs.csv'" in page and "<td>3</td>" in page


def test_a_part_is_recorded_in_a_file_of_its_own_and_found_by_its_fingerprint():
    """A resumable unit's part records cost the same at its last part as at its first: recording one writes
    that part's file only (the stage's record, rewritten whole for each part, grew with every part)."""
    stage = "s_train@u"
    parts = {f"tanh/N{n}": {"stage": stage, "N": n} for n in (2, 4, 8)}
    for i, (name, meta) in enumerate(parts.items()):
        run_records.record_part(stage, name, meta, {"run_key": "k" * 32, "children": {f"cell{i}": f"{i}" * 32}})
    assert not run_records.record_path(stage).exists()
    written = sorted(p.relative_to(run_records.runs_dir()).as_posix() for p in run_records.runs_dir().rglob("*.json"))
    assert written == [f"{stage}.parts/tanh/N{n}.json" for n in (2, 4, 8)]
    assert run_records.part_record(stage, "tanh/N4")["fingerprint"] == run_records.fingerprint(parts["tanh/N4"])
    changed = {**parts, "tanh/N8": {"stage": stage, "N": 16}}  # a part whose bytes this workspace did not record
    assert run_records.part_children(stage, changed) == {"cell0": "0" * 32, "cell1": "1" * 32}
    assert run_records.part_record(stage, "tanh/N16") is None


def test_parts_recorded_in_the_stage_record_before_they_had_files_still_link_their_runs():
    """A unit resumed across the change keeps the child runs of the parts it kept."""
    stage = "s_train@u"
    old, new = {"stage": stage, "N": 2}, {"stage": stage, "N": 4}
    write_json(run_records.record_path(stage), {"stage": stage, "parts": {
        "N2": {"fingerprint": run_records.fingerprint(old), "run_key": "k" * 32, "children": {"a": "1" * 32}}}})
    run_records.record_part(stage, "N4", new, {"run_key": "q" * 32, "children": {"b": "2" * 32}})
    assert run_records.part_children(stage, {"N2": old, "N4": new}) == {"a": "1" * 32, "b": "2" * 32}
