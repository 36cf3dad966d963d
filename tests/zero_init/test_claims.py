"""zero_init's claims on hand-made metrics: each new or changed one holds on numbers shaped like the
extract's and fails when the number it turns on moves."""

from __future__ import annotations

import copy

import pytest

from pipeline import claims
from pipeline.studies.zero_init.claims import CLAIMS
from pipeline.studies.zero_init.extract import run_summary

SUMMARY = "zero_init_extract@summary"
METRICS = {"runs": {
    "seed_pi_256": {"final_test_acc": 94.72, "n_h": 256, "min_rank_w3_minus_i": 9},
    "seed_random_1024": {"final_rank_w3_minus_i": 1024, "min_rank_w3_minus_i": 1024, "n_h": 1024},
}}


def _row(cid: str, metrics: dict, profile: str = "paper") -> dict:
    claim = next(c for c in CLAIMS if c.id == cid)
    return claims.evaluate(claim, "zero_init", profile, {SUMMARY: metrics}.get)


@pytest.mark.parametrize(("cid", "run", "key", "value"), [
    ("seed_test_accuracy", "seed_pi_256", "final_test_acc", 94.20),  # 0.34 below the seed's 94.54
    ("seed_test_accuracy", "seed_pi_256", "final_test_acc", 94.90),  # 0.36 above
    ("seed_test_accuracy", "seed_pi_256", "final_test_acc", 76.3),   # smoke's stand-in
    # a rank dip anywhere in training (the init included) breaks "full rank from step 0"
    ("random_full_rank", "seed_random_1024", "min_rank_w3_minus_i", 1001),
])
def test_the_claim_holds_and_fails_when_its_metric_moves(cid, run, key, value):
    assert _row(cid, METRICS)["status"] == "holds"
    moved = copy.deepcopy(METRICS)
    moved["runs"][run][key] = value
    assert _row(cid, moved)["status"] == "fails"


def test_random_full_rank_reads_the_lowest_rank_not_the_final_one():
    moved = copy.deepcopy(METRICS)
    moved["runs"]["seed_random_1024"]["min_rank_w3_minus_i"] = 10
    assert moved["runs"]["seed_random_1024"]["final_rank_w3_minus_i"] == 1024
    assert _row("random_full_rank", moved)["status"] == "fails"


def test_the_seed_accuracy_is_not_expected_on_smoke():
    claim = next(c for c in CLAIMS if c.id == "seed_test_accuracy")
    assert not claim.expected("smoke") and claim.fails_on["smoke"] and claim.expected("paper")
    assert claim.role == "finding"


def test_the_extract_publishes_the_lowest_rank_with_the_init():
    r = {"params": {"init": "random", "n_h": 4, "setting": "seed", "bias": 0.01, "lr_step_size": None,
                    "lr_gamma": 1.0, "epochs": 1, "train_images": 10, "lr": 0.1},
         "rank_w3_minus_i": [3, 4, 4], "rank_w3_minus_w3_0": [0, 4, 4], "iterations": 2,
         "test": [{"epoch": 1, "test_acc": 50.0, "lr": 0.1, "rank_w3_minus_i": 4}],
         "first_iter_rank_above_input_dim": None, "diverged": False}
    s = run_summary(r)
    assert s["min_rank_w3_minus_i"] == 3 and s["max_rank_w3_minus_i"] == 4 and s["final_rank_w3_minus_i"] == 4
