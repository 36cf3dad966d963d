"""Smoke slice of the zero_init stages through the real pipeline (`dvc repro` on a repo copy)."""

from __future__ import annotations

import json

import pytest
import yaml


def shrink(copy) -> None:
    """Three runs (one skipped on purpose) and one figure, a few iterations each."""
    data = copy.params()
    z = data["zero_init"]
    z["runs"] = {
        "pi_32": {"init": "partial_identity", "n_h": 32, "setting": "seed"},
        "zero_800": {"init": "zero", "n_h": 800, "setting": "seed"},  # Hadamard branch, p = 1024 truncated
        "unused": {"init": "random", "n_h": 2048, "setting": "official"},
    }
    z["figures"] = {"left": {"seed_figure": "Figure 3 (left)", "runs": {
        "smoke": ["pi_32", "zero_800"], "gpu_medium": ["unused"], "paper": ["unused"]}}}
    z["style"]["titles"] = {"left": "test figure"}
    z["style"]["labels"] = {"zero_800": "ZerO n_h=800"}
    budget = {"epochs": 1, "train_subset": 640, "test_subset": 500, "max_iters": None, "log_interval": 4}
    z["profiles"]["smoke"]["settings"] = {"seed": budget, "official": budget}
    # replace (not deep-merge) the section, so the repository's own runs and figures are gone
    (copy.path / "params.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.mark.pipeline
def test_zero_init_slice_repro_noop_and_bad_param(repo_copy):
    (repo_copy.path / "dvc.lock").unlink(missing_ok=True)
    shrink(repo_copy)
    first = repo_copy.dvc("repro", "--glob", "zero_init_*")
    root = repo_copy.path
    assert "SKIPPED" in first.stdout  # the explicit, logged skip of the unused run

    res = json.loads((root / "artifacts/zero_init/train/zero_800/result.json").read_text())
    assert res["iters"] == [0, 1, 5, 9, 10] and res["iterations"] == 10  # true iteration indices
    assert res["rank_w3_minus_i"][0] == 0 and 0 < res["rank_w3_minus_i"][-1] <= 800
    assert res["params"]["init_seed"] == 1 and res["params"]["data_seed"] == 1
    meta = json.loads((root / "artifacts/zero_init/train/zero_800/meta.json").read_text())
    assert meta["mlflow_children"]["zero_800"] and meta["profile"] == "smoke"
    skipped = json.loads((root / "artifacts/zero_init/train/unused/result.json").read_text())
    assert skipped["skipped"] is True and "smoke" in skipped["reason"]

    metrics = json.loads((root / "reports/metrics/zero_init.json").read_text())
    assert sorted(metrics["runs"]) == ["pi_32", "zero_800"] and list(metrics["skipped"]) == ["unused"]
    z = metrics["runs"]["zero_800"]
    assert z["final_rank_w3_minus_i"] == res["rank_w3_minus_i"][-1]
    assert z["first_iter_rank_above_input_dim"] is None and 0 <= z["final_test_acc"] <= 100

    for ext in ("png", "pdf"):
        assert (root / f"reports/figures/zero_init/left.{ext}").stat().st_size > 1000
    car = json.loads((root / "reports/figures/zero_init/left.figures.json").read_text())
    (fig,) = car["figures"]
    assert fig["id"] == "zero_init/left" and fig["runs"] == ["pi_32", "zero_800"]
    assert "SMOKE STAND-IN" in fig["caption"] and len(fig["sources"]) == 2

    second = repo_copy.dvc("repro", "--glob", "zero_init_*")
    assert "up to date" in second.stdout or "didn't change" in second.stdout, second.stdout
    assert "Running stage" not in second.stdout

    # a bad value fails before any compute and deletes nothing (train outs are persistent)
    repo_copy.set_params({"zero_init": {"zero_scale": "both"}})
    proc = repo_copy.dvc("repro", "zero_init_train@zero_800", check=False)
    assert proc.returncode != 0
    assert "zero_init.zero_scale" in proc.stdout + proc.stderr
    assert (root / "artifacts/zero_init/train/zero_800/result.json").exists()
