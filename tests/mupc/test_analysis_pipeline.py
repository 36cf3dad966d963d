"""Analysis part of μPC through the real pipeline, and params validation."""

import copy
import json
import sys

import pytest
import yaml

from pipeline.config import ConfigError, parse_params
from tests.conftest import ROOT

TINY = {
    "hessian": {"acts": ["linear"], "families": [{"param": "mupc", "inits": ["standard_gauss"], "skips": [True]}],
                "widths": [2, 4], "depths": [2, 4], "dense_max_n": 8, "autodiff_check_max_n": 8},
    "theory_grid": {"widths": [1, 2], "depths": [1, 2], "iters": 3, "plot_iters": [0, 2]},
}


def _raw() -> dict:
    return yaml.safe_load((ROOT / "params.yaml").read_text())


def _smoke(raw: dict) -> dict:
    return raw["mupc"]["analysis"]["profiles"]["smoke"]


@pytest.mark.parametrize("mutate,needle", [
    (lambda s: s["hessian"].update(acts=["sigmoid"]), "mupc.analysis.profiles.smoke.hessian.acts[0]"),
    (lambda s: s["fwd_pass"].update(depths=[8, 10]), "multiples of 4"),
    (lambda s: s["fwd_pass"].update(slice_depth=12), "slice_depth"),
    (lambda s: s["theory_grid"].update(plot_iters=[0, 900]), "plot_iters"),
    (lambda s: s["theory_width"].update(plot_widths=[3]), "plot_widths"),
    (lambda s: s["hessian"]["families"][0].update(param="depth_mup"), "families[0].param"),
    (lambda s: s["hessian"].update(widths=[2, 2]), "without repeated values"),
    (lambda s: s["hessian"].update(bogus=1), "bogus is not a known key"),
])
def test_params_validation_errors(mutate, needle):
    raw = copy.deepcopy(_raw())
    mutate(_smoke(raw))
    with pytest.raises(ConfigError, match=None) as exc:
        parse_params(raw)
    assert needle in str(exc.value)


def test_render_units_must_match_their_sources():
    raw = copy.deepcopy(_raw())
    raw["mupc"]["analysis"]["render_units"]["F26"] = "theory_width"
    with pytest.raises(ConfigError, match="render_units.F26"):
        parse_params(raw)


def test_all_profiles_validate():
    raw = copy.deepcopy(_raw())
    for prof in ("smoke", "gpu_medium", "paper"):
        raw["profile"] = prof
        parse_params(raw)


@pytest.mark.pipeline
def test_smoke_slice_through_dvc(repo_copy):
    repo_copy.set_params({"mupc": {"analysis": {"profiles": {"smoke": TINY}}}})
    stages = ["mupc_analysis_render@F2", "mupc_analysis_render@F26"]
    repo_copy.dvc("repro", *stages)
    p = repo_copy.path
    summary = json.loads((p / "artifacts/mupc/train/hessian_init/linear/skips/standard_gauss_weight_init/mupc_param/"
                          "activity_decay_0/0/summary.json").read_text())
    cells = {(c["N"], c["H"]): c for c in summary["cells"]}
    assert set(cells) == {(2, 2), (2, 4), (4, 2), (4, 4)}
    assert cells[(4, 4)]["method_lambda_min"] == "banded"  # slice cell (N = max): full spectrum, n = 16 > 8
    assert cells[(2, 2)]["method_lambda_min"] == "dense"  # n = 4 ≤ dense_max_n
    assert cells[(2, 2)]["autodiff_max_abs_diff"] < 1e-10
    assert all(c["kappa"] >= 1 for c in cells.values())
    side = json.loads((p / "reports/figures/mupc/F26.figures.json").read_text())
    assert {f["family"] for f in side["figures"]} == {"F26"} and len(side["figures"]) == 2
    assert all((p / f).exists() for fig in side["figures"] for f in fig["files"])
    again = repo_copy.dvc("repro", *stages)
    assert "up to date" in again.stdout or "didn't change" in again.stdout
    # a bad value stops before any compute and leaves the outputs alone
    before = sorted(x.name for x in (p / "artifacts/mupc/train/theory_grid/linear/mupc").iterdir())
    repo_copy.set_params({"mupc": {"analysis": {"profiles": {"smoke": {"theory_grid": {"iters": 0}}}}}})
    bad = repo_copy.run(sys.executable, "-m", "stages.train", "mupc", "theory_grid", check=False)
    assert bad.returncode == 2 and "theory_grid.iters" in bad.stderr
    assert sorted(x.name for x in (p / "artifacts/mupc/train/theory_grid/linear/mupc").iterdir()) == before
