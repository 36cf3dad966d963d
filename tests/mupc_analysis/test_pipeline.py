"""mupc_analysis through the real pipeline: dvc repro of a tiny smoke slice on a copy, MLflow, resume."""

from __future__ import annotations

import json
import sys

import pytest

from pipeline.graph import target, targets
from tests.claims_slice import strict_ledger

# skips, rather than breaks, collection where MLflow is absent (a bare GPU machine's `pytest -m gpu`)
MlflowClient = pytest.importorskip("mlflow.tracking").MlflowClient

TINY = {
    "hessian": {"acts": ["linear", "tanh"],
                "groups": [{"param": "mupc", "inits": ["standard_gauss"], "skips": [True]}],
                "widths": [2, 4], "depths": [2, 4], "dense_max_n": 8, "autodiff_check_max_n": 8},
    "fwd_pass": {"acts": ["linear"], "widths": [16], "depths": [8], "checks": 2, "slice_widths": [16]},
    "theory_grid": {"widths": [1, 2], "depths": [1, 2], "iters": 3, "plot_iters": [0, 2]},
    "theory_width": {"acts": ["linear", "tanh"], "params": ["mupc"], "widths": [1, 2], "plot_widths": [2],
                     "iters": 3, "eq_max_steps": 200},
}
STAGES = targets("mupc_analysis_extract", "mupc_analysis_render@F2", "mupc_analysis_render@F26")
HESS = ("artifacts/mupc_analysis/train/hessian_init/linear/skips/standard_gauss_weight_init/mupc_param/"
        "activity_decay_0/0")


def _stale(repo_copy) -> set[str]:
    out = json.loads(repo_copy.dvc("status", "--json", *STAGES).stdout or "{}")
    return {key.rsplit(":", 1)[-1] for key in out}


@pytest.mark.pipeline
def test_smoke_slice_through_dvc(repo_copy):
    repo_copy.set_params({"mupc_analysis": {"profiles": {"smoke": TINY}}})  # and rewrites dvc.yaml
    repo_copy.dvc("repro", *STAGES)
    p = repo_copy.path
    # a shrunk smoke grid: its sanity claims (theorems, properties of the code) hold at any size
    strict_ledger(repo_copy, "mupc_analysis", role="sanity", must_check={
        "hessian_positive_definite", "theory_hessian_is_numeric_hessian", "nonlinear_hessian_blocks_are_autodiff",
        "loss_over_energy_at_least_one"})
    summary = json.loads((p / HESS / "summary.json").read_text())
    cells = {(c["N"], c["H"]): c for c in summary["cells"]}
    assert set(cells) == {(2, 2), (2, 4), (4, 2), (4, 4)}
    assert cells[(4, 4)]["method_lambda_min"] == "banded"  # slice cell (N = max): full spectrum, n = 16 > 8
    assert cells[(2, 2)]["method_lambda_min"] == "dense"  # n = 4 ≤ dense_max_n
    assert cells[(2, 2)]["autodiff_max_abs_diff"] < 1e-10
    assert all(c["kappa"] >= 1 for c in cells.values())

    metrics = json.loads((p / "reports/metrics/mupc_analysis_extract@analysis_metrics.json").read_text())
    assert metrics["profile"] == "smoke"
    # invariants 1–2 reach the ledger: autodiff against the block builder at every cell with N·H ≤ 8
    assert set(metrics["hessian_init"]["autodiff_vs_blocks/tanh_mupc_standard_gauss_skips"]) == {
        "N2_H2", "N2_H4", "N4_H2"}
    assert set(metrics["hessian_init"]["kappa/mupc_standard_gauss_skips"]) == {"N2_H2", "N2_H4", "N4_H2", "N4_H4"}
    assert metrics["hessian_init"]["kappa/mupc_standard_gauss_skips"]["N4_H4"] == cells[(4, 4)]["kappa"]
    assert set(metrics["fwd_pass"]["rms_t0_hidden_L2/linear_sp_skips"]) == {"N16_L8"}
    assert all(r >= 1 for r in metrics["theory_grid"]["ratio_t0/mupc"].values())  # ℒ ≥ F*
    assert metrics["theory_width"]["ratio_t0/tanh_mupc_H2"]["N2_max_eq_residual"] >= 0

    side = json.loads((p / "reports/figures/mupc_analysis/F26.figures.json").read_text())
    assert [f["id"] for f in side["figures"]] == ["mupc_analysis/F26_sp", "mupc_analysis/F26_mupc"]
    assert {f["family"] for f in side["figures"]} == {"F26"}
    assert side["figures"][0]["sources"][0]["stage"] == "mupc_analysis_train@theory_grid"
    assert all((p / f).stat().st_size > 0 for fig in side["figures"] for f in fig["files"])
    f2 = json.loads((p / "reports/figures/mupc_analysis/F2.figures.json").read_text())["figures"]
    assert [f["id"] for f in f2] == ["mupc_analysis/F2_mupc_standard_gauss_skips_decay0_seed0"]

    # MLflow: one child run per Hessian config, with κ per cell; one per theory run with the ℒ/F* series
    meta = repo_copy.run_record("mupc_analysis_train@hessian_init",
                                "artifacts/mupc_analysis/train/hessian_init/meta.json")
    ids = repo_copy.sync()  # the slice stops before the gallery stage, which syncs the journals
    client = MlflowClient(tracking_uri=repo_copy.env["MLFLOW_TRACKING_URI"])
    assert len(meta["children"]) == 2  # linear and tanh
    child = meta["children"][HESS.removeprefix("artifacts/mupc_analysis/train/hessian_init/")]
    run = client.get_run(ids[child])
    assert run.data.tags["mlflow.parentRunId"] == ids[meta["run_key"]]
    assert run.data.metrics["kappa_N4_H4"] == pytest.approx(cells[(4, 4)]["kappa"])
    grid_meta = repo_copy.run_record("mupc_analysis_train@theory_grid",
                                     "artifacts/mupc_analysis/train/theory_grid/meta.json")
    assert len(grid_meta["children"]) == 2 * 2 * 2
    series = client.get_metric_history(ids[grid_meta["children"]["linear/mupc/width_2/2_n_hidden"]],
                                       "loss_energy_ratio")
    assert [m.step for m in series] == [0, 1, 2]

    again = repo_copy.dvc("repro", *STAGES)
    assert "Running stage" not in again.stdout, again.stdout
    repo_copy.set_params({"mupc_analysis": {"profiles": {"paper": {"threads": 2}, "gpu_medium": {"hessian": {
        "seeds": [5]}}}}})
    assert _stale(repo_copy) == set()  # another profile's overrides rerun nothing

    # resume: a new depth recomputes the cells whose settings changed and keeps the others
    def stamp_of(key: str) -> str:  # the run that wrote a cell (its record)
        part = f"{HESS}/{key}".removeprefix("artifacts/mupc_analysis/train/hessian_init/")
        return repo_copy.run_record("mupc_analysis_train@hessian_init", part=part)["run_key"]

    stamp = {key: stamp_of(key) for key in ("width_2/2_n_hidden", "width_2/4_n_hidden", "width_4/2_n_hidden")}
    repo_copy.set_params({"mupc_analysis": {"profiles": {"smoke": {"hessian": {"depths": [2, 4, 6]}}}}})
    repo_copy.dvc("repro", target("mupc_analysis_train@hessian_init"))
    now = {key: stamp_of(key) for key in stamp}
    assert now["width_2/2_n_hidden"] == stamp["width_2/2_n_hidden"]  # unchanged settings: kept
    assert now["width_4/2_n_hidden"] == stamp["width_4/2_n_hidden"]
    assert now["width_2/4_n_hidden"] != stamp["width_2/4_n_hidden"]  # no longer a full-spectrum slice
    assert len(json.loads((p / HESS / "summary.json").read_text())["cells"]) == 6

    # a bad value stops before any compute and leaves the outputs alone
    before = sorted(x.name for x in (p / "artifacts/mupc_analysis/train/theory_grid/linear/mupc").iterdir())
    repo_copy.set_params({"mupc_analysis": {"profiles": {"smoke": {"theory_grid": {"iters": 0}}}}}, regenerate=False)
    bad = repo_copy.run(sys.executable, "-m", "stages.train", "mupc_analysis", "theory_grid", check=False)
    assert bad.returncode == 2 and "mupc_analysis.theory_grid.iters = 0" in bad.stderr, bad.stderr
    assert sorted(x.name for x in (p / "artifacts/mupc_analysis/train/theory_grid/linear/mupc").iterdir()) == before
