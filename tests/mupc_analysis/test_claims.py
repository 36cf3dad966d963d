"""mupc_analysis's F6 claims on hand-made metrics: each holds on numbers shaped like the measured ones
and fails when the number it turns on moves (the spectral norms of the forward-pass experiment)."""

from __future__ import annotations

import copy

import pytest

from pipeline import claims
from pipeline.studies.mupc.analysis.claims import CLAIMS, over_gaussian_edge

STAGE = "mupc_analysis_extract@analysis_metrics"
CELLS = ("N16_L8", "N16_L16", "N1024_L8", "N1024_L16")
SQRT = {"N16": 8.0, "N1024": 64.0}  # 2√N


def _grid(value) -> dict[str, float]:
    return {c: value(c) for c in CELLS}


FWD = {
    **{f"spectral_t0_hidden_L2/linear_{v}": _grid(lambda c: 1.14) for v in ("sp_no_skips", "sp_skips")},
    **{f"spectral_t0_hidden_L2/linear_{v}": _grid(lambda c: 0.95 * SQRT[c.split("_")[0]])
       for v in ("depth_mup_no_skips", "depth_mup_skips")},
    "spectral_t0_hidden_L2/linear_orthogonal": _grid(lambda c: 1.0),
    **{f"spectral_drift_hidden_L2/linear_{o}_depth_mup_skips": _grid(lambda c: 4e-4) for o in ("sgd", "adam")},
    "spectral_drift_hidden_L2/linear_adam_orthogonal": _grid(lambda c: 0.05),
}
METRICS = {"profile": "paper", "fwd_pass": FWD}


def _claim(cid: str):
    return next(c for c in CLAIMS if c.id == cid)


def _row(cid: str, metrics: dict) -> dict:
    return claims.evaluate(_claim(cid), "mupc_analysis", "paper", {STAGE: metrics}.get)


F6 = [c.id for c in CLAIMS if "F6" in c.figures]


def test_every_f6_claim_holds_on_the_fixture():
    assert len(F6) == 4
    for cid in F6:
        assert _row(cid, METRICS)["status"] == "holds", cid


@pytest.mark.parametrize(("cid", "key", "cell", "value"), [
    # SP's raw weights growing with width (e.g. an init without the 1/√fan_in scale)
    ("sp_weight_spectral_norm_O1", "spectral_t0_hidden_L2/linear_sp_skips", "N1024_L16", 9.0),
    # Depth-μP's weights off the Gaussian edge: scaled like SP, or twice the edge
    ("depth_mup_weight_spectral_norm_sqrt_width", "spectral_t0_hidden_L2/linear_depth_mup_skips", "N1024_L8", 1.15),
    ("depth_mup_weight_spectral_norm_sqrt_width", "spectral_t0_hidden_L2/linear_depth_mup_no_skips", "N16_L8", 16.0),
    ("depth_mup_weights_stable_in_training", "spectral_drift_hidden_L2/linear_adam_depth_mup_skips", "N16_L16", 0.02),
    ("depth_mup_weights_stable_in_training", "spectral_drift_hidden_L2/linear_sgd_depth_mup_skips", "N16_L16",
     float("nan")),  # an overflowed step never counts as stable
    ("adam_moves_orthogonal_weights_more", "spectral_drift_hidden_L2/linear_adam_orthogonal", "N16_L8", 1e-4),
])
def test_an_f6_claim_fails_when_its_metric_moves(cid, key, cell, value):
    moved = copy.deepcopy(METRICS)
    moved["fwd_pass"][key][cell] = value
    row = _row(cid, moved)
    assert row["status"] == "fails" and row["surprise"], row


def test_a_missing_variant_leaves_the_claim_unmeasured_or_failing():
    moved = copy.deepcopy(METRICS)
    del moved["fwd_pass"]["spectral_drift_hidden_L2/linear_adam_orthogonal"]
    assert _row("adam_moves_orthogonal_weights_more", moved)["status"] == "not measured"
    for k in [k for k in moved["fwd_pass"] if "depth_mup" in k and k.startswith("spectral_t0")]:
        del moved["fwd_pass"][k]
    assert _row("depth_mup_weight_spectral_norm_sqrt_width", moved)["status"] == "fails"  # nothing to check


def test_over_gaussian_edge_reads_the_width_from_the_key():
    ok, ratios = over_gaussian_edge({"N16_L8": 7.2, "N64_L8": 15.0}, lo=0.75, hi=1.1)
    assert ok and ratios == {"N16_L8": pytest.approx(0.9), "N64_L8": pytest.approx(15.0 / 16.0)}
    assert not over_gaussian_edge({"N16_L8": 7.2, "N64_L8": 7.2}, lo=0.75, hi=1.1)[0]  # flat in width
    assert not over_gaussian_edge({"L8": 7.2}, lo=0.75, hi=1.1)[0]  # no width in the key
    assert over_gaussian_edge({}, lo=0.75, hi=1.1) == (False, None)


# ----------------------------------------------------------------------------- F1 and F3: the Hessian split

CONFIGS = ("sp_standard_no_skips", "mupc_standard_gauss_skips")
CORNERS = ("N2_H2", "N2_H8", "N8_H2", "N8_H8")
# smoke's measured shape (linear sp standard, no skips): κ(H) 5.1 → 25.8 with depth, κ(D) 2.09 → 2.38
HESSIAN = {**{f"H_theory_kappa/{c}": dict(zip(CORNERS, (4.0, 20.0, 5.14, 25.8))) for c in CONFIGS},
           **{f"D_kappa/{c}": dict(zip(CORNERS, (2.0, 2.2, 2.09, 2.38))) for c in CONFIGS},
           **{f"lambda_min/{c}": dict(zip(CORNERS, (0.61, 0.33, 0.51, 0.13))) for c in CONFIGS},
           **{f"kappa/{c}": dict(zip(CORNERS, (5.1, 20.0, 5.14, 25.8))) for c in CONFIGS},
           **{f"theory_vs_num/{c}": dict.fromkeys(CORNERS, 4.4e-16) for c in CONFIGS}}
OWN = {"profile": "paper", "hessian_init": HESSIAN}


@pytest.mark.parametrize("cid", ["lambda_min_falls_with_depth", "coupling_drives_ill_conditioning",
                                 "theory_hessian_is_numeric_hessian", "hessian_positive_definite"])
def test_the_hessian_split_claims_hold_on_the_smoke_shape(cid):
    assert _row(cid, OWN)["status"] == "holds"


@pytest.mark.parametrize(("cid", "key", "cell", "value"), [
    # D's conditioning grows with depth as much as H's: the coupling does not drive it
    ("coupling_drives_ill_conditioning", "D_kappa/mupc_standard_gauss_skips", "N8_H8", 9.0),
    ("lambda_min_falls_with_depth", "lambda_min/sp_standard_no_skips", "N2_H8", 0.5),  # 1.2x: too flat
    ("theory_hessian_is_numeric_hessian", "theory_vs_num/sp_standard_no_skips", "N8_H8", 1e-6),
])
def test_the_hessian_split_claims_fail_when_their_metric_moves(cid, key, cell, value):
    moved = copy.deepcopy(OWN)
    moved["hessian_init"][key][cell] = value
    assert _row(cid, moved)["status"] == "fails"


def _paper_corner(lmin: float, lmax: float = 550.0) -> dict:
    """OWN with the deepest, widest paper corner (N = H = 128) of one configuration at ``lmin``."""
    moved = copy.deepcopy(OWN)
    for key in ("lambda_min", "kappa"):
        moved["hessian_init"][f"{key}/sp_standard_no_skips"]["N128_H128"] = (
            lmin if key == "lambda_min" else (abs(lmax / lmin) if lmin else float("inf")))
    return moved


@pytest.mark.parametrize("lmin", [1e-40, 0.0, -1e-14, -1e-10])
def test_positive_definite_holds_where_lambda_min_is_below_float64_resolution(lmin):
    """N = H = 128, λ_max ≈ 550 (SP, N(0, 1) weights): the solver's resolution is 128·128·ε·550 ≈ 2e-9, so
    a true λ_min of 1e-100 reads as noise of either sign below it; the old floor of 1e-12 failed there."""
    assert _row("hessian_positive_definite", _paper_corner(lmin))["status"] == "holds"


@pytest.mark.parametrize("lmin", [-1e-6, -0.01])
def test_positive_definite_fails_on_a_negative_eigenvalue_above_resolution(lmin):
    assert _row("hessian_positive_definite", _paper_corner(lmin))["status"] == "fails"
    moved = copy.deepcopy(OWN)
    moved["hessian_init"]["lambda_min/mupc_standard_gauss_skips"]["N8_H8"] = lmin
    assert _row("hessian_positive_definite", moved)["status"] == "fails"


# ----------------------------------------------------------------------------- F1 beyond linear nets

# smoke's measured κ at the corners (μPC, N 2..8, H 2..8): ReLU without skips grows least (17.6 → 34.3 at N = 8)
NONLINEAR = {"nonlinear_kappa/relu_mupc_standard_gauss_no_skips": dict(zip(CORNERS, (4.89, 14.0, 17.6, 34.3))),
             "nonlinear_kappa/relu_mupc_standard_gauss_skips": dict(zip(CORNERS, (7.07, 125.4, 22.4, 152.5))),
             "nonlinear_kappa/tanh_mupc_standard_gauss_no_skips": dict(zip(CORNERS, (2.70, 54.7, 11.3, 166.2))),
             "nonlinear_kappa/tanh_mupc_standard_gauss_skips": dict(zip(CORNERS, (25.5, 108.6, 51.2, 174.5))),
             # SP is not part of the claim (an SP ReLU net without skips is flat at N = 2 on the paper grid)
             "nonlinear_kappa/relu_sp_standard_no_skips": dict(zip(CORNERS, (3.51, 3.59, 5.97, 17.0)))}
NONLINEAR_OWN = {"profile": "paper", "hessian_init": {**HESSIAN, **NONLINEAR}}


def test_the_nonlinear_widening_claim_holds_on_the_smoke_shape():
    assert _row("kappa_grows_with_depth_nonlinear_mupc", NONLINEAR_OWN)["status"] == "holds"


@pytest.mark.parametrize(("key", "cell", "value"), [
    ("nonlinear_kappa/relu_mupc_standard_gauss_no_skips", "N8_H8", 25.0),  # 1.4x: a spectrum that barely widens
    ("nonlinear_kappa/tanh_mupc_standard_gauss_skips", "N2_H8", 20.0),  # narrower at depth
    ("nonlinear_kappa/tanh_mupc_standard_gauss_no_skips", "N8_H8", float("nan")),
])
def test_the_nonlinear_widening_claim_fails_when_kappa_stays_flat(key, cell, value):
    moved = copy.deepcopy(NONLINEAR_OWN)
    moved["hessian_init"][key][cell] = value
    assert _row("kappa_grows_with_depth_nonlinear_mupc", moved)["status"] == "fails"


def test_the_nonlinear_widening_claim_needs_the_nonlinear_metrics():
    assert _row("kappa_grows_with_depth_nonlinear_mupc", OWN)["status"] == "fails"  # linear only: nothing checked
