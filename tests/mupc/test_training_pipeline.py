"""Smoke slice of the μPC training stages through the real pipeline (`dvc repro` on a repo copy)."""

from __future__ import annotations

import json
import shutil

import pytest

from pipeline.studies.mupc.runs import RunConfig
from pipeline.studies.mupc.training.sweeps import load_run

STAGES = ("mupc_training_train@S9", "mupc_training_train@B1")


def shrink(copy) -> None:
    sm = copy.params()["mupc"]["training"]["profiles"]["smoke"]
    s9 = {**sm["sweeps"]["S9"]["grids"][0], "acts": ["relu"], "H": [2], "seeds": [0, 1], "test_every": 2}
    b1 = {**sm["sweeps"]["B1"]["grids"][0], "acts": ["relu"], "param_lrs": [0.01], "seeds": [0], "test_every": 2}
    copy.set_params({"mupc": {"training": {"profiles": {"smoke": {
        "data": {"n_train": 256, "n_test": 128},
        "sweeps": {"S9": {"grids": [s9]}, "B1": {"grids": [b1]}}}}}}})


@pytest.mark.pipeline
def test_training_slice_repro_resume_and_bad_param(repo_copy):
    shrink(repo_copy)
    repo_copy.dvc("repro", *STAGES)
    s9 = repo_copy.path / "artifacts/mupc/train/S9"
    index = json.loads((s9 / "index.json").read_text())
    assert index["profile"] == "smoke" and len(index["runs"]) == 2
    assert all(e["status"] in ("finished", "diverged", "no_learning") for e in index["runs"])
    meta = json.loads((s9 / "meta.json").read_text())
    assert len(meta["trained"]) == 2 and meta["mlflow_run_id"]
    assert len(meta["mlflow_children"]) == 2
    rc = RunConfig(dataset="mnist", N=16, H=2, act="relu", param="mupc", init="standard_gauss", skips=True, seed=0,
                   epochs=1, test_every=2, param_lr=0.1, T=2, act_lr=0.5, metrics="hessian")
    cfg, arrays = load_run(s9, rc)
    assert cfg["hash"] == rc.hash() and cfg["data"] == {"n_train": 256, "n_test": 128}
    assert len(arrays["cond_nums"]) == 1 + len(arrays["test_accs"]) and len(arrays["batch_train_losses"]) >= 2
    b1 = json.loads((repo_copy.path / "artifacts/mupc/train/B1/index.json").read_text())
    assert len(b1["runs"]) == 1 and b1["runs"][0]["key"].startswith("bp_results/MNIST/width_16/2_n_hidden/relu")

    second = repo_copy.dvc("repro", *STAGES)
    assert "up to date" in second.stdout or "didn't change" in second.stdout, second.stdout

    # persist + per-run resumption: delete one run, repro recomputes only that run
    shutil.rmtree(s9 / "runs" / rc.hash())
    repo_copy.dvc("repro", STAGES[0])
    meta = json.loads((s9 / "meta.json").read_text())
    assert meta["trained"] == [rc.hash()] and meta["summary"]["n_skipped"] == 1

    # a bad value fails before any compute and deletes nothing
    bad = repo_copy.params()["mupc"]["training"]["profiles"]["smoke"]["sweeps"]["S9"]["grids"][0]
    repo_copy.set_params({"mupc": {"training": {"profiles": {"smoke": {"sweeps": {"S9": {
        "grids": [{**bad, "acts": ["softplus"]}]}}}}}}})
    proc = repo_copy.dvc("repro", STAGES[0], check=False)
    assert proc.returncode != 0
    assert "mupc.training.profiles.smoke.sweeps.S9.grids[0].acts[0]" in proc.stdout + proc.stderr
    assert (s9 / "index.json").exists() and (s9 / "runs" / rc.hash() / "arrays.npz").exists()
