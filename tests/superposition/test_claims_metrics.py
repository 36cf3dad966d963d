"""The superposition metrics the claims read: final feature geometry and the largest loss rise."""

import copy

import numpy as np
import pytest

from pipeline import claims
from pipeline.studies.superposition.claims import CLAIMS
from pipeline.studies.superposition.extract import feature_directions, features_above_init, variant_geometry


def _cols(angles_deg, norms):
    a = np.radians(np.asarray(angles_deg, dtype=float))
    return np.stack([np.cos(a), np.sin(a)]) * np.asarray(norms, dtype=float)


def test_features_on_four_directions_count_four():
    angles = [-164.5, -163.0, 15.1, 16.0, 84.7, 126.4, 127.0, 40.0]
    norms = [1, 1, 1, 1, 1, 1, 1, 0.05]  # the last is not embedded (norm <= 0.1)
    assert feature_directions(_cols(angles, norms)) == {"represented_features": 7, "directions": 4}


def test_directions_wrap_around_the_circle_and_spread_features_count_apart():
    assert feature_directions(_cols([179.0, -179.0], [1, 1]))["directions"] == 1
    assert feature_directions(_cols([0, 60, 120, 180, 240], [1] * 5))["directions"] == 5
    assert feature_directions(np.zeros((2, 3))) == {"represented_features": 0, "directions": 0}


def test_largest_loss_rise_per_seed():
    losses = np.array([[3.0, 3.0], [2.0, 3.5], [1.0, 1.0]])
    w_e = np.zeros((1, 2, 2, 4))
    geo = variant_geometry([0, 42], w_e, losses)
    assert geo["0"]["max_loss_increase"] == -1.0 and geo["42"]["max_loss_increase"] == 0.5


def test_features_above_init_count_only_columns_longer_than_the_longest_at_init():
    w0 = _cols([0, 90, 180, 270], [0.12, 0.15, 0.05, 0.11])  # longest at init: 0.15
    w1 = _cols([0, 90, 180, 270], [1.0, 0.15, 0.16, 0.02])
    assert features_above_init(w0, w0) == 0
    assert features_above_init(w0, w1) == 2
    geo = variant_geometry([42], np.stack([w0, w1])[:, None], np.array([[1.0], [0.5]]))
    assert geo["42"]["features_above_init"] == 2 and geo["42"]["represented_features_initial"] == 3


GEOMETRY = {"final_geometry": {"0": {"features_above_init": 13}, "42": {"features_above_init": 17}}}
PLATEAUS = {"variants": {"untied": {"seeds": {
    "3": {"plateaus": [{"start_epoch": 6813, "end_epoch": 10487, "loss": 0.01832}]},
    "42": {"plateaus": []}}}}}
STAGES = {"superposition_extract@untied": GEOMETRY, "superposition_extract@summary": PLATEAUS}


def _row(cid: str, stages: dict, profile: str = "paper") -> dict:
    claim = next(c for c in CLAIMS if c.id == cid)
    return claims.evaluate(claim, "superposition", profile, stages.get)


def test_features_grow_above_init_fails_when_a_seed_keeps_at_most_two():
    assert _row("features_grow_above_init", STAGES)["status"] == "holds"
    moved = copy.deepcopy(STAGES)
    moved["superposition_extract@untied"]["final_geometry"]["0"]["features_above_init"] = 2
    assert _row("features_grow_above_init", moved)["status"] == "fails"
    assert next(c for c in CLAIMS if c.id == "features_grow_above_init").expected("smoke")


@pytest.mark.parametrize(("start", "end"), [(8500, 10487), (6813, 8900), (12000, 14000)])
def test_the_note_plateau_claim_fails_when_no_plateau_covers_epochs_8000_to_9000(start, end):
    assert _row("plateau_at_note_epochs", STAGES)["status"] == "holds"
    moved = copy.deepcopy(STAGES)
    moved["superposition_extract@summary"]["variants"]["untied"]["seeds"]["3"]["plateaus"] = [
        {"start_epoch": start, "end_epoch": end, "loss": 0.01832}]
    assert _row("plateau_at_note_epochs", moved)["status"] == "fails"
