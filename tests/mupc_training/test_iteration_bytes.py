"""The byte count behind ``benchmarks/pc_gpu.py``'s bandwidth columns (``cost.iteration_bytes``)."""

import pytest

from pipeline.studies.mupc.training.cost import (
    ENGINE_ACTIVITY_PASSES,
    FUSED_ACTIVITY_PASSES,
    FUSED_COPY_WEIGHT_PASSES,
    OTHER_WEIGHT_PASSES,
    iteration_bytes,
)

GB = 1e9


def test_one_full_depth_step_of_the_deepest_stack_moves_what_the_kernels_read_and_write():
    """T = 1 from the feed-forward point touches no hidden product and one activity row; the difference of two
    consecutive T isolates one step of front k: at k = H − 1 (every layer) the 64-run 512:128 stack's step
    reads 17.0 GB of weights (two products) and moves 25 activity passes of 1.07 GB, 8.5 GB and 2.1 GB at
    the floor."""
    N, H, R = 512, 128, 64
    step = {route: iteration_bytes(N, H, H, "relu", R, route=route) - iteration_bytes(N, H, H - 1, "relu", R,
                                                                                       route=route)
            for route in ("engine", "floor")}
    weights, rows = R * (H - 1) * N * N * 4, R * H * 64 * N * 4
    assert step["engine"] == pytest.approx(2 * weights + 25 * rows)
    assert step["floor"] == pytest.approx(weights + 2 * rows)
    assert 2 * weights / GB == pytest.approx(17.05, abs=0.01) and 25 * rows / GB == pytest.approx(26.8, abs=0.1)


def test_the_rest_of_the_iteration_counts_alike_and_the_routes_are_checked():
    base = OTHER_WEIGHT_PASSES * 7 * 16 * 16 * 4
    assert iteration_bytes(16, 8, 0, "tanh") == iteration_bytes(16, 8, 0, "tanh", route="floor") == base
    assert ENGINE_ACTIVITY_PASSES["linear"] < ENGINE_ACTIVITY_PASSES["relu"] == ENGINE_ACTIVITY_PASSES["tanh"]
    assert iteration_bytes(16, 8, 4, "relu", itemsize=8) == 2 * iteration_bytes(16, 8, 4, "relu")
    with pytest.raises(ValueError, match="route 'fast' is not one of engine, fused, floor"):
        iteration_bytes(16, 8, 4, "relu", route="fast")


def test_the_fused_route_moves_the_same_weights_and_fewer_activity_passes():
    """The fused route reads each weight twice per step as the engine does and moves 9 activity passes instead
    of 25: 17.0 + 9.7 GB per full-depth step of the 64-run 512:128:128 stack instead of 17.0 + 26.8 GB."""
    N, H, R = 512, 128, 64
    step = {route: iteration_bytes(N, H, H, "relu", R, route=route) - iteration_bytes(N, H, H - 1, "relu", R,
                                                                                       route=route)
            for route in ("engine", "fused")}
    weights, rows = R * (H - 1) * N * N * 4, R * H * 64 * N * 4
    assert step["fused"] == pytest.approx(2 * weights + FUSED_ACTIVITY_PASSES * rows)
    assert step["fused"] / GB == pytest.approx(26.7, abs=0.1) and step["engine"] / GB == pytest.approx(43.9, abs=0.1)
    assert ENGINE_ACTIVITY_PASSES["linear"] > FUSED_ACTIVITY_PASSES
    # and once an iteration the transposed copy its step kernel reads: one weight read and one write
    copy = iteration_bytes(N, H, 0, "relu", R, route="fused") - iteration_bytes(N, H, 0, "relu", R)
    assert copy == FUSED_COPY_WEIGHT_PASSES * weights == 2 * weights
