"""Atomic writes and the gallery/manifest builder."""

import errno
import json
import os
import pickle
from pathlib import Path

import pytest

from pipeline.contract import Output, Run
from pipeline.gallery import build_manifest, gallery_html, link_runs
from pipeline.io import WriteError, atomic_dir, atomic_path, read_json, read_npz, write_json, write_npz
from pipeline.tracking import Tracker
from pipeline.tracking import records as run_records
from pipeline.writer import write_part, write_unit


def test_failed_write_leaves_previous_file_intact(tmp_path):
    target = tmp_path / "out.json"
    write_json(target, {"v": 1})
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("interrupted")
    assert read_json(target) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_a_full_disk_is_a_write_error_naming_the_file_and_leaves_it_whole(tmp_path, monkeypatch):
    target = tmp_path / "unit" / "out.json"
    write_json(target, {"v": 1})

    def full(self: Path, data: bytes) -> int:
        self.write_text("hal")  # the disk fills part-way through the file
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Path, "write_bytes", full)
    with pytest.raises(WriteError) as caught:
        write_json(target, {"v": 2})
    assert caught.value.errno == errno.ENOSPC and caught.value.path == target
    with pytest.raises(WriteError) as in_folder, atomic_dir(target.parent) as tmp:
        write_json(tmp / "out.json", {"v": 2})
    assert in_folder.value.path == target  # the file the folder would hold, not its temporary twin
    assert read_json(target) == {"v": 1} and sorted(p.name for p in tmp_path.rglob("*")) == ["out.json", "unit"]
    again = pickle.loads(pickle.dumps(caught.value))  # as a worker process would send it back
    assert (type(again), again.errno, again.path) == (WriteError, errno.ENOSPC, target)


def test_atomic_dir_swaps_whole_folder(tmp_path):
    out = tmp_path / "unit"
    with atomic_dir(out) as tmp:
        (tmp / "a.txt").write_text("1")
    with pytest.raises(ValueError), atomic_dir(out) as tmp:
        (tmp / "b.txt").write_text("2")
        raise ValueError
    assert sorted(p.name for p in out.iterdir()) == ["a.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["unit"]


def test_outputs_get_the_usual_permissions(tmp_path):
    import os
    import stat

    mask = os.umask(0o022)
    try:
        write_json(tmp_path / "a.json", {})
        with atomic_dir(tmp_path / "d") as tmp:
            (tmp / "x").write_text("1")
    finally:
        os.umask(mask)
    assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "d").stat().st_mode) == 0o755


def test_npz_roundtrip(tmp_path):
    write_npz(tmp_path / "a.npz", x=[1.0, 2.0], y=[[1]])
    got = read_npz(tmp_path / "a.npz")
    assert got["x"].tolist() == [1.0, 2.0] and got["y"].shape == (1, 1)


def entry(i: str, study: str = "s") -> dict:
    return {"id": f"{study}/{i}", "study": study, "files": [f"reports/figures/{study}/{i}.png"],
            "params_hash": "p" * 64, "git_commit": "c" * 40, "run_key": "r" * 32,
            "mlflow_run_id": "r" * 32,
            "mlflow_experiment_id": "1", "data_sha256": {"mnist/x": "d" * 64}, "profile": "smoke",
            "seed_figure": "Fig 1", "caption": "<b>cap</b>"}


def test_manifest_requires_keys_and_unique_ids():
    m = build_manifest([{"figures": [entry("a")]}, {"figures": [entry("b", "t")]}])
    assert [f["id"] for f in m["figures"]] == ["s/a", "t/b"]
    with pytest.raises(ValueError, match="appears twice"):
        build_manifest([{"figures": [entry("a")]}, {"figures": [entry("a")]}])
    bad = entry("c")
    del bad["git_commit"]
    with pytest.raises(ValueError, match="lacks manifest keys"):
        build_manifest([{"figures": [bad]}])


def test_gallery_escapes_and_links_provenance():
    page = gallery_html(build_manifest([{"figures": [entry("a")]}]), ui="http://ui")
    assert "&lt;b&gt;cap&lt;/b&gt;" in page and "<b>cap</b>" not in page
    assert "src='../reports/figures/s/a.png'" in page
    assert "http://ui/#/experiments/1/runs/" + "r" * 32 in page
    assert json.dumps  # module used


def test_manifest_links_the_mlflow_runs_of_the_recorded_run_keys():
    key, child, other = "k" * 32, "c" * 32, "o" * 32
    journal = {**entry("a"), "run_key": key, "mlflow_experiment_id": None,
               "sources": [{"stage": "s_train@u", "run_key": key, "children": {"seed0": child}}]}
    unsynced = {**entry("b"), "run_key": other, "mlflow_experiment_id": None}
    for e in (journal, unsynced):
        del e["mlflow_run_id"]  # as the records give them: keys only
    direct = entry("c")  # TRAINSCAPE_TRACKING=direct: the keys are MLflow's own ids, with the experiment id
    del direct["mlflow_run_id"]
    runs = {key: {"run_id": "R" * 32, "experiment_id": "7"}, child: {"run_id": "C" * 32, "experiment_id": "7"}}
    m = link_runs(build_manifest([{"figures": [journal, unsynced, direct]}]), runs)
    a, b, c = m["figures"]
    assert (a["mlflow_run_id"], a["mlflow_experiment_id"], a["run_key"]) == ("R" * 32, "7", key)
    assert a["sources"] == [{"stage": "s_train@u", "run_key": key, "children": {"seed0": child},
                             "mlflow_run_id": "R" * 32, "mlflow_children": {"seed0": "C" * 32}}]
    assert (b["mlflow_run_id"], b["run_key"]) == (None, other)
    assert (c["mlflow_run_id"], c["mlflow_experiment_id"]) == ("r" * 32, "1")
    page = gallery_html(m, ui="http://ui")
    assert "http://ui/#/experiments/7/runs/" + "R" * 32 in page and "k" * 32 not in page
    assert "not in MLflow yet (sync pending)" in page and "http://ui/#/experiments/1/runs/" + "r" * 32 in page
    assert link_runs(m, runs) == m  # linking twice changes nothing


def test_resumable_unit_lists_the_runs_of_all_its_parts(tmp_path, monkeypatch):
    unit = tmp_path / "artifacts/s/train/u"
    monkeypatch.setenv("TRAINSCAPE_ROOT", str(tmp_path))
    prov = {"stage": "s_train@u"}
    with Tracker("s", "s_train@u", {}) as tr:  # a first, interrupted invocation: one part done
        write_part(unit, "s_train@u", Output(part="runs/a", json={"r.json": {"v": 1}}, runs=[Run("a")]), tr, prov)
    with Tracker("s", "s_train@u", {}) as tr:  # the rerun trains the rest and finishes
        write_part(unit, "s_train@u", Output(part="runs/b", json={"r.json": {"v": 2}}, runs=[Run("b")]), tr, prov)
        children = write_unit(unit, "s_train@u", Output(json={"index.json": ["a", "b"]}), tr, prov, in_place=True)
    out = tmp_path / "artifacts/s/train/u"
    assert set(children) == {"a", "b"} and all(children.values())
    assert not {"children", "run_key", "mlflow_run_id"} & set(read_json(out / "meta.json"))
    rec = run_records.lookup("s_train@u", read_json(out / "meta.json"))
    assert rec["children"] == children and rec["run_key"] == tr.parent.run_key
    assert read_json(out / "runs/a/r.json") == {"v": 1} and read_json(out / "index.json") == ["a", "b"]


def test_a_failing_unit_leaves_the_previous_results_whole(tmp_path, monkeypatch):
    unit = tmp_path / "artifacts/s/train/u"
    monkeypatch.setenv("TRAINSCAPE_ROOT", str(tmp_path))
    with Tracker("s", "s_train@u", {}, enabled=False) as tr:
        write_unit(unit, "s_train@u", Output(json={"a.json": {"ok": True}}), tr, {}, in_place=False)
        with pytest.raises(TypeError):
            write_unit(unit, "s_train@u", Output(json={"a.json": {"ok": object()}}), tr, {}, in_place=False)
    out = tmp_path / "artifacts/s/train/u"
    assert read_json(out / "a.json") == {"ok": True}
    assert sorted(p.name for p in out.parent.iterdir()) == ["u"], "no temporary folder is left behind"
