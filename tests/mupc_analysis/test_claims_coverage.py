"""Every mupc_analysis claim reads metrics that each profile's extract publishes, or carries that profile's
exemption: the keys come from the real extract's headline functions, fed train files shaped from the resolved
params (no compute), so a profile that drops a configuration a claim reads shows up here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from pipeline import claims
from pipeline.config import load_section, read_tree
from pipeline.studies.mupc.analysis.claims import CLAIMS
from pipeline.studies.mupc.analysis.config import MupcAnalysisParams
from pipeline.studies.mupc.analysis.extract import HEADLINES
from pipeline.studies.mupc.analysis.layout import fwd_key, hessian_configs, hessian_key, theory_key
from tests.conftest import ROOT

NAME, STAGE = "mupc_analysis", "mupc_analysis_extract@analysis_metrics"
PROFILES = ("smoke", "gpu_medium", "paper")


def shaped_files(cfg: MupcAnalysisParams) -> dict[str, dict[str, Any]]:
    """Per train unit, the files its extract reads, with the names and shapes the train unit writes (values 1):
    a Hessian cell's autodiff check only where N·H ≤ autodiff_check_max_n, as ``train.hessian_cell`` runs it."""
    hp, fp, tg, tw = cfg.hessian, cfg.fwd_pass, cfg.theory_grid, cfg.theory_width
    cell_keys = ("kappa", "lambda_min", "lambda_max", "D_kappa", "H_theory_kappa", "theory_vs_num_max_abs_diff")
    hessian = {f"{hessian_key(c)}/summary.json": {"cells": [
        {"N": N, "H": H, **dict.fromkeys(cell_keys, 1.0),
         **({"autodiff_max_abs_diff": 0.0} if hp.autodiff_check_max_n >= N * H else {})}
        for N in hp.widths for H in hp.depths]} for c in hessian_configs(hp)}
    shape = (5, fp.checks, len(fp.widths), len(fp.depths))
    fwd = {f"{fwd_key(a, o, v)}/fwd_pass.npz": {"avg_activity_l2_per_N_L": np.ones(shape),
                                                 "param_spectral_norms_per_N_L": np.ones(shape)}
           for a in fp.acts for o in fp.optims for v in fp.variants}

    def theory(act: str, iters: int) -> dict[str, np.ndarray]:
        return {"loss_energy_ratios": np.ones(iters), **({} if act == "linear" else {"eq_residuals": np.zeros(iters)})}

    grid = {f"{theory_key('linear', p, N, H)}/theory.npz": theory("linear", tg.iters)
            for p in tg.param_lrs for N in tg.widths for H in tg.depths}
    width = {f"{theory_key(a, p, N, tw.depth)}/theory.npz": theory(a, tw.iters)
             for a in tw.acts for p in tw.params for N in tw.widths}
    return {"hessian_init": hessian, "fwd_pass": fwd, "theory_grid": grid, "theory_width": width}


def profile_metrics(profile: str) -> dict[str, Any]:
    """What ``extract@analysis_metrics`` would publish under ``profile`` (keys exact, values placeholders)."""
    cfg = load_section(MupcAnalysisParams, read_tree(ROOT), NAME, profile)
    files = shaped_files(cfg)
    return {"profile": profile, **{u: HEADLINES[u](files[u].__getitem__, cfg) for u in cfg.train_units}}


def numbers(measured: Any) -> tuple[int, int]:
    """(finite numbers, missing values) among the leaves of a check's measurement."""
    if isinstance(measured, Mapping):
        measured = list(measured.values())
    if isinstance(measured, list | tuple):
        found = [numbers(m) for m in measured]
        return sum(f for f, _ in found), sum(m for _, m in found)
    if measured is None:
        return 0, 1
    return (1, 0) if isinstance(measured, int | float) and not isinstance(measured, bool) else (0, 0)


def reads_everything(claim: claims.Claim, metrics: dict[str, Any], profile: str) -> tuple[bool, Any]:
    """Whether the claim finds every value it reads and its check measures something, with nothing missing."""
    row = claims.evaluate(claim, NAME, profile, {STAGE: metrics}.get)
    if row["status"] == claims.UNMEASURED:
        return False, row["missing"]
    found, missing = numbers(row["measured"])
    return found > 0 and missing == 0, {"numbers": found, "missing": missing}


@pytest.fixture(scope="module")
def metrics() -> dict[str, dict[str, Any]]:
    return {p: profile_metrics(p) for p in PROFILES}


@pytest.mark.parametrize("profile", PROFILES)
def test_every_claim_is_measured_or_exempt_under_each_profile(metrics, profile):
    unmeasured = {}
    for claim in CLAIMS:
        ok, why = reads_everything(claim, metrics[profile], profile)
        if not ok and profile not in claim.fails_on:
            unmeasured[claim.id] = why
    assert not unmeasured, f"{profile}: claims without their metrics and without an exemption: {unmeasured}"


def test_gpu_medium_computes_the_sp_side_of_mupc_vs_sp(metrics):
    """Q5: gpu_medium's Hessian grid had SP only with orthogonal weights, so the μPC-vs-SP claim read a key
    (``kappa/sp_standard_skips``) the profile never published."""
    claim = next(c for c in CLAIMS if c.id == "mupc_conditions_deep_nets_better")
    assert "kappa/sp_standard_skips" in metrics["gpu_medium"]["hessian_init"]
    assert reads_everything(claim, metrics["gpu_medium"], "gpu_medium")[0]


def test_the_coverage_check_sees_a_missing_configuration(metrics):
    """The check itself: a profile without the SP configurations leaves those claims unmeasured."""
    hessian = {k: v for k, v in metrics["gpu_medium"]["hessian_init"].items() if "sp_standard" not in k}
    dropped = {**metrics["gpu_medium"], "hessian_init": hessian}
    claim = next(c for c in CLAIMS if c.id == "mupc_conditions_deep_nets_better")
    assert not reads_everything(claim, dropped, "gpu_medium")[0]
    no_autodiff = {**metrics["smoke"], "hessian_init": {k: v for k, v in metrics["smoke"]["hessian_init"].items()
                                                         if not k.startswith("autodiff_vs_blocks/linear")}}
    claim = next(c for c in CLAIMS if c.id == "theory_hessian_is_numeric_hessian")
    assert not reads_everything(claim, no_autodiff, "smoke")[0]
