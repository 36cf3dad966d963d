"""The notebook's aggregation rules (spec §5.4, §8.2 item 10) on synthetic ragged inputs; expected
values computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pipeline.studies.mupc.training import notebook_stats as ag


def test_metric_stats_truncates_to_shortest_and_uses_population_std():
    m, s = ag.compute_metric_stats([[10, 20, 30], [30, 40], [20, 60, 90, 99]])
    # truncated to 2 columns: [10,20],[30,40],[20,60]
    assert m.tolist() == pytest.approx([20.0, 40.0])
    # population std of (10,30,20) = sqrt(200/3); of (20,40,60) = sqrt(800/3)
    assert s.tolist() == pytest.approx([math.sqrt(200 / 3), math.sqrt(800 / 3)])


def test_metric_stats_empty_seed_empties_the_curve():
    m, s = ag.compute_metric_stats([[50.0, 60.0], []])
    assert len(m) == 0 and len(s) == 0


def test_fill_empty_shortens_curve_to_one_point():
    # μPC lr sweep: seed 1 stopped before any evaluation -> [10] -> curve of one point
    series = [ag.fill_empty(a) for a in ([80.0, 90.0, 95.0], [], [70.0, 88.0])]
    m, s = ag.compute_metric_stats(series)
    assert m.tolist() == pytest.approx([(80 + 10 + 70) / 3])
    mu = (80 + 10 + 70) / 3
    assert s[0] == pytest.approx(math.sqrt(((80 - mu) ** 2 + (10 - mu) ** 2 + (70 - mu) ** 2) / 3))


def test_bp_fill_replaces_short_runs_by_three_chance_points():
    assert ag.fill_bp_short([55.0]).tolist() == [10.0, 10.0, 10.0]
    assert ag.fill_bp_short([]).tolist() == [10.0, 10.0, 10.0]
    assert ag.fill_bp_short([55.0, 60.0]).tolist() == [55.0, 60.0]
    m, _ = ag.compute_metric_stats([ag.fill_bp_short(a) for a in ([40.0, 50.0, 60.0, 70.0], [12.0])])
    assert m.tolist() == pytest.approx([25.0, 30.0, 35.0])


def test_sp_chance_cells_reproduce_the_notebook_rule():
    cells = ag.notebook_chance_cells([8, 16, 32, 64, 128])
    assert cells == {"linear": [32, 64, 128], "tanh": [], "relu": [64, 128]}
    assert ag.is_chance_cell("relu", 64, cells) and not ag.is_chance_cell("tanh", 128, cells)
    assert ag.is_chance_cell("linear", 32, cells) and not ag.is_chance_cell("relu", 32, cells)
    m, s = ag.compute_metric_stats([ag.chance_curve() for _ in range(3)])
    assert m.tolist() == [10.0, 10.0, 10.0] and s.tolist() == [0.0, 0.0, 0.0]


def test_pc_128_is_chance_with_the_length_of_each_bp_seed():
    bp = [[50.0, 70.0, 90.0], [60.0, 80.0]]
    pc = [ag.pc_chance_like(a) for a in bp]
    assert [len(p) for p in pc] == [3, 2]
    m, _ = ag.compute_metric_stats(pc)
    assert m.tolist() == [10.0, 10.0]


def test_cond_num_and_unreached_rows():
    assert ag.compute_cond_num([-2.0, 0.5, 4.0]) == pytest.approx(2.0)  # |4| / |-2|
    assert math.isnan(ag.compute_cond_num([0.0, 0.0]))
    k = ag.cond_nums_notebook([0.5, 0.25], [5.0, 10.0], n_rows=4)
    assert k[:2].tolist() == pytest.approx([10.0, 40.0]) and np.isnan(k[2:]).all()
    m, _ = ag.compute_metric_stats([k, ag.cond_nums_notebook([1.0] * 4, [2.0] * 4, 4)])
    assert m[:2].tolist() == pytest.approx([6.0, 21.0]) and np.isnan(m[2:]).all()


def test_x_axes():
    assert ag.acc_steps(3, 100).tolist() == [100, 200, 300]
    assert ag.cond_steps(3, 100).tolist() == [0, 100, 200]


def test_contour_cell_reproduces_try_except_and_builtin_min():
    assert ag.contour_cell([0.5, 0.2, 0.3], [40.0, 80.0]) == (0.2, 80.0)
    assert ag.contour_cell([], [40.0]) == (0.0, 0.0)  # min raises first: both stay 0
    assert ag.contour_cell([0.5, 0.3], []) == (0.3, 0.0)  # loss written, max raises
    loss, _ = ag.contour_cell([0.5, float("nan")], [50.0])  # a later NaN is skipped by min()
    assert loss == 0.5
    loss, _ = ag.contour_cell([float("nan"), 0.1], [50.0])  # a first NaN propagates
    assert math.isnan(loss)


def test_contour_mean_and_log10():
    cells = np.array([[[0.1, 0.001, 0.0], [0.0, 0.0, 0.0]],
                      [[float("nan"), 0.1, 0.1], [1.0, 10.0, 100.0]]])
    m = ag.contour_mean(cells)
    assert m[0, 0] == pytest.approx(0.101 / 3)  # a failed seed's 0 is averaged in
    z = ag.log10_notebook(m)
    assert np.isneginf(z[0, 1]) and np.isnan(z[1, 0])
    assert z[1, 1] == pytest.approx(math.log10(37.0))
    zc = ag.contour_log10_clean(np.where(cells == 0.0, np.nan, cells))
    assert np.isnan(zc[0, 0]) and np.isnan(zc[0, 1]) and np.isnan(zc[1, 0])
    assert ag.argbest(z, "min") == (0, 0) and ag.argbest(z, "max") == (1, 1)
    assert ag.argbest(np.array([[0.0, -1.0], [2.0, np.nan]]), "min") == (0, 1)


def test_contour_cell_clean_masks_failures():
    assert ag.contour_cell_clean([0.5, 0.2], [40.0, 80.0]) == (0.2, 80.0)
    loss, acc = ag.contour_cell_clean([0.5, float("nan")], [])
    assert math.isnan(loss) and math.isnan(acc)


def test_activity_decay_per_seed_max_then_mean_std():
    mat = np.array([[ag.max_acc_per_seed([50.0, 70.0]), ag.max_acc_per_seed([])],
                    [ag.max_acc_per_seed([90.0, 60.0]), ag.max_acc_per_seed([30.0])]])
    m, s = ag.decay_stats(mat)
    assert m.tolist() == pytest.approx([80.0, 20.0]) and s.tolist() == pytest.approx([10.0, 10.0])


def test_clean_padding_and_selection_score():
    m, s = ag.compute_metric_stats_clean([[50.0, 60.0, 70.0], [40.0]], n=3)
    assert m.tolist() == pytest.approx([45.0, 35.0, 40.0]) and s.tolist() == pytest.approx([5.0, 25.0, 30.0])
    assert ag.final_acc_score([[50.0, 90.0], []]) == pytest.approx(50.0)
