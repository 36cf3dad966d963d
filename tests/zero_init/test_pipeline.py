"""Smoke slice of the zero_init stages through the real pipeline (`dvc repro` on a repo copy)."""

from __future__ import annotations

import json
import sys

import pytest
import yaml

from pipeline.graph import target, targets

# skips, rather than breaks, collection where MLflow is absent (a bare GPU machine's `pytest -m gpu`)
mlflow = pytest.importorskip("mlflow")

STAGES = targets("zero_init_train", "zero_init_extract", "zero_init_render")
BUDGET = {"epochs": 1, "train_subset": 640, "test_subset": 500, "max_iters": None, "log_interval": 4}


def shrink(copy) -> None:
    """Three runs, one figure: smoke draws two of them (a few iterations each), paper the third."""
    data = copy.params()
    z = data["zero_init"]
    z["runs"] = {
        "pi_32": {"init": "partial_identity", "n_h": 32, "setting": "seed"},
        "zero_800": {"init": "zero", "n_h": 800, "setting": "seed"},  # Hadamard branch, p = 1024 truncated
        "unused": {"init": "random", "n_h": 2048, "setting": "official"},
    }
    z["figures"] = {"left": {"seed_figure": "Figure 3 (left)", "runs": ["unused"]}}
    z["style"]["titles"] = {"left": "test figure"}
    z["style"]["labels"] = {"zero_800": "ZerO n_h=800"}
    z["profiles"] = {"smoke": {"budgets": {"seed": BUDGET, "official": BUDGET},
                               "figures": {"left": {"runs": ["pi_32", "zero_800"]}},
                               "style": {"profile_note": "SMOKE STAND-IN (test)"}},
                     "paper": {"budgets": {"official": {"epochs": 3}}}}
    # replace (not deep-merge) the section, so the repository's own runs and figures are gone
    (copy.path / "params/zero_init.yaml").write_text(yaml.safe_dump({"zero_init": z}, sort_keys=False))


def stale(copy) -> set[str]:
    return {key.rsplit(":", 1)[-1] for key in json.loads(copy.dvc("status", "--json", *STAGES).stdout or "{}")}


@pytest.mark.pipeline
def test_zero_init_slice_repro_noop_and_bad_param(repo_copy):
    shrink(repo_copy)
    repo_copy.run(sys.executable, "-m", "pipeline.graph")
    root = repo_copy.path
    units = sorted(p.parent.name for p in (root / "graph/zero_init/train").glob("*/dvc.yaml"))
    assert units == ["pi_32", "zero_800"]  # no unit for the undrawn run
    repo_copy.dvc("repro", *STAGES)
    assert not (root / "artifacts/zero_init/train/unused").exists()

    res = json.loads((root / "artifacts/zero_init/train/zero_800/result.json").read_text())
    assert res["iters"] == [0, 1, 5, 9, 10] and res["iterations"] == 10  # true iteration indices
    assert res["rank_w3_minus_i"][0] == 0 and 0 < res["rank_w3_minus_i"][-1] <= 800
    assert res["params"]["init_seed"] == 1 and res["params"]["data_seed"] == 1 and "skipped" not in res
    meta = json.loads((root / "artifacts/zero_init/train/zero_800/meta.json").read_text())
    rec = repo_copy.run_record("zero_init_train@zero_800", "artifacts/zero_init/train/zero_800/meta.json")
    assert rec["children"]["zero_800"] and meta["profile"] == "smoke" and "run_key" not in meta
    ids = repo_copy.sync()  # the slice stops before the gallery stage, which syncs the journals
    mlflow.set_tracking_uri(repo_copy.env["MLFLOW_TRACKING_URI"])
    client = mlflow.MlflowClient()
    child = client.get_run(ids[rec["children"]["zero_800"]])
    assert child.data.params["n_h"] == "800" and child.data.params["train_images"] == "640"
    hist = client.get_metric_history(child.info.run_id, "rank_w3_minus_i")
    assert sorted((m.step, int(m.value)) for m in hist) == list(zip(res["iters"], res["rank_w3_minus_i"]))
    assert child.data.metrics["final_rank_w3_minus_i"] == res["rank_w3_minus_i"][-1]

    metrics = json.loads((root / "reports/metrics/zero_init_extract@summary.json").read_text())
    assert sorted(metrics["runs"]) == ["pi_32", "zero_800"] and "skipped" not in metrics
    z = metrics["runs"]["zero_800"]
    assert z["final_rank_w3_minus_i"] == res["rank_w3_minus_i"][-1]
    assert z["first_iter_rank_above_input_dim"] is None and 0 <= z["final_test_acc"] <= 100

    assert (root / "reports/figures/zero_init/left/left.png").stat().st_size > 1000
    assert not (root / "reports/figures/zero_init/left/left.pdf").exists()  # smoke: PNG only (figures.formats)
    car = json.loads((root / "reports/figures/zero_init/left.figures.json").read_text())
    (fig,) = car["figures"]
    assert fig["id"] == "zero_init/left" and fig["runs"] == ["pi_32", "zero_800"]
    assert "SMOKE STAND-IN (test)" in fig["caption"] and len(fig["sources"]) == 2

    second = repo_copy.dvc("repro", *STAGES)
    text = second.stdout + second.stderr
    assert "up to date" in text or "didn't change" in text, text
    assert "Running stage" not in text, text

    # an edit under an inactive profile reruns nothing; a caption edit or a figure module only the render
    repo_copy.set_params({"zero_init": {"profiles": {"paper": {"budgets": {"seed": {"epochs": 5}}}}}})
    assert stale(repo_copy) == set()
    repo_copy.set_params({"zero_init": {"style": {"titles": {"left": "another title"}}}})
    assert stale(repo_copy) == {"zero_init_render@left"}
    with open(root / "pipeline/studies/zero_init/figures.py", "a") as fh:
        fh.write("# a comment\n")
    assert stale(repo_copy) == {"zero_init_render@left"}

    # a bad value fails before any compute, in `make dag` and in the stage, and deletes nothing
    repo_copy.set_params({"zero_init": {"zero_scale": "both"}}, regenerate=False)
    dag = repo_copy.run(sys.executable, "-m", "pipeline.graph", check=False)
    assert dag.returncode == 2 and "zero_init.zero_scale = 'both'" in dag.stderr, dag.stderr
    proc = repo_copy.dvc("repro", target("zero_init_train@zero_800"), check=False)
    assert proc.returncode != 0
    assert "zero_init.zero_scale = 'both'" in proc.stdout + proc.stderr
    assert (root / "artifacts/zero_init/train/zero_800/result.json").exists()
