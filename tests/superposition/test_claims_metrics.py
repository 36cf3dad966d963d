"""The superposition metrics the claims read: final feature geometry and the largest loss rise."""

import numpy as np

from pipeline.studies.superposition.extract import feature_directions, variant_geometry


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
