"""The zero_init stage functions on tiny inputs: what train returns, the summary, the figures' content."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

# skips, rather than breaks, collection where plotly is absent (a bare GPU machine's `pytest -m gpu`): the
# project's plotting module draws the μPC figures with it
pytest.importorskip("plotly")

from pipeline.config import load_section, read_tree
from pipeline.contract import Context, Output
from pipeline.paths import repo_root
from pipeline.studies.zero_init import extract, figures, train
from pipeline.studies.zero_init.config import Budget, RunSpec, ZeroInitParams


@pytest.fixture(scope="module")
def smoke() -> ZeroInitParams:
    raw = read_tree(repo_root())
    return load_section(ZeroInitParams, raw, "zero_init", "smoke")


def fake_result(key: str, cfg: ZeroInitParams, ranks: list[int]) -> dict:
    """A result.json as train writes it, with a rank curve of its own."""
    run = cfg.runs[key]
    iters = [0, 1, 21, 41, 60][: len(ranks)]
    return {"params": {**train.run_params(cfg, "smoke", key), "train_images": 3840, "test_images": 2000,
                       "device": "cpu"},
            "iters": iters, "rank_w3_minus_i": ranks, "rank_w3_minus_w3_0": [min(r, run.n_h) for r in ranks],
            "test": [{"epoch": 1, "iteration": iters[-1], "lr": 0.1, "test_acc": 78.5, "test_loss": 0.7,
                      "rank_w3_minus_i": ranks[-1]}],
            "iterations": iters[-1], "diverged": False,
            "first_iter_rank_above_input_dim": next((i for i, r in zip(iters, ranks) if r > 784), None)}


def context(cfg: ZeroInitParams, kind: str, unit: str, files: dict) -> Context:
    return Context(study="zero_init", kind=kind, unit=unit, profile="smoke", cfg=cfg, device="cpu",
                   stage=f"zero_init_{kind}@{unit}", provenance={}, reader=lambda *key: files[key],
                   own=lambda _n: None, log=lambda _m: None)


def test_summary_has_the_trained_runs_and_names_the_undrawn(smoke):
    curves = {k: [0, 100 + i, 200 + i] for i, k in enumerate(smoke.train_runs())}
    curves["seed_random_1024"] = [1024, 1024, 1024]
    files = {("train", k, "result.json"): fake_result(k, smoke, r) for k, r in curves.items()}
    out = extract.extract(context(smoke, "extract", "summary", files), "summary")
    m = out.metrics
    assert m is out.json["summary.json"] and m["profile"] == "smoke" and m["input_dim"] == 784
    assert list(m["runs"]) == smoke.train_runs()
    pi = m["runs"]["seed_pi_256"]
    assert pi == {"init": "partial_identity", "n_h": 256, "setting": "seed", "bias": 0.01, "lr_step_size": 12,
                  "lr_gamma": 0.7, "epochs": 1, "iterations": 21, "train_images": 3840,
                  "final_rank_w3_minus_i": 200, "final_rank_w3_minus_w3_0": 200, "max_rank_w3_minus_i": 200,
                  "min_rank_w3_minus_i": 0,
                  "final_test_acc": 78.5, "test_acc_per_epoch": [78.5], "lr_per_epoch": [0.1],
                  "rank_w3_minus_i_per_epoch": [200], "rank_w3_minus_i_before_lr_decay": None,
                  "first_iter_rank_above_input_dim": None, "diverged": False}
    assert m["runs"]["seed_random_1024"]["first_iter_rank_above_input_dim"] == 0
    assert "skipped" not in m, "runs no figure of the profile draws are not units, so nothing is skipped"
    assert out.run_metrics["seed_random_1024.final_rank_w3_minus_i"] == 1024
    table = out.tables["runs.csv"]  # one row per trained run: settings, status, final numbers
    assert list(table["run"]) == smoke.train_runs() and set(table["status"]) == {"finished"}
    assert list(table.columns) == ["run", *extract.TABLE_SETTINGS, "status", *extract.TABLE_FINALS]
    assert table.set_index("run").loc["seed_pi_256", "final_rank_w3_minus_i"] == 200


def test_rank_before_lr_decay_is_the_last_epoch_at_the_base_lr(smoke):
    r = fake_result("off_pi_256", smoke, [0, 10, 20])
    r["test"] = [{"epoch": e, "iteration": 10 * e, "lr": 0.1 if e <= 2 else 0.07, "test_acc": 90.0,
                  "test_loss": 0.3, "rank_w3_minus_i": 100 + e} for e in range(1, 5)]
    assert extract.rank_before_lr_decay(r) == 102
    assert extract.run_summary(r)["rank_w3_minus_i_per_epoch"] == [101, 102, 103, 104]
    for t in r["test"]:
        t["lr"] = 0.1
    assert extract.rank_before_lr_decay(r) is None  # the decay never acted: nothing to separate


def test_render_draws_each_run_on_its_iterations_with_the_input_dim_line(smoke):
    ranks = {"seed_random_1024": [1024, 1024, 1024, 1024, 1024], "seed_pi_1024": [0, 120, 220, 260, 294],
             "seed_zero_1024": [0, 90, 160, 245, 308]}
    files = {("train", k, "result.json"): fake_result(k, smoke, r) for k, r in ranks.items()}
    out = figures.render(context(smoke, "render", "fig3_right", files), "fig3_right")
    assert isinstance(out, Output)
    (fig,) = out.figures
    assert fig.id == "fig3_right" and fig.plotly is None and fig.extra == {"runs": list(ranks)}
    assert fig.sources == [("train", k) for k in ranks]
    (ax,) = fig.mpl.axes
    lines = ax.get_lines()
    assert [ln.get_label() for ln in lines] == ["input_dim=784", "Random Init", "Partial Identity Init",
                                                "ZerO Init"]
    assert lines[0].get_linestyle() == "--" and list(lines[0].get_ydata()) == [784, 784]
    assert list(lines[0].get_xdata()) == [0, 60]
    for ln, r in zip(lines[1:], ranks.values()):
        assert list(ln.get_xdata()) == [0, 1, 21, 41, 60] and list(ln.get_ydata()) == r
    assert ax.get_xlabel() == "Iterations" and ax.get_ylabel() == "Rank"
    assert fig.caption.startswith("SMOKE STAND-IN (not the paper's numbers). " + smoke.style.titles["fig3_right"]
                                  + ". rank(W3 − I)")
    assert ax.get_title() == "SMOKE STAND-IN"
    # one hue per init, the same in every figure: ZerO green, partial identity blue, random grey
    assert [ln.get_color() for ln in lines[1:]] == [figures.run_color(i, 1024) for i in ("random", "partial_identity",
                                                                                         "zero")]
    assert "seed_zero_1024 (ZerO, n_h=1024, bias 0.01, 1 epoch(s), 60 iterations on 3840 images, final rank 308" \
        in fig.caption
    assert "StepLR" not in fig.caption  # 1 epoch: the decay after epoch 12 never acts
    assert fig.caption.endswith("Profile smoke: " + smoke.style.profile_note)
    assert fig.seed_figure == smoke.figures["fig3_right"].seed_figure
    assert out.run_metrics == {"seed_random_1024.final_rank_w3_minus_i": 1024,
                               "seed_pi_1024.final_rank_w3_minus_i": 294, "seed_zero_1024.final_rank_w3_minus_i": 308}


def test_render_labels_widths_when_one_init_and_style_labels_win(smoke):
    cfg = dataclasses.replace(smoke, style=dataclasses.replace(smoke.style, labels={"seed_pi_1024": "wide"}))
    files = {("train", k, "result.json"): fake_result(k, cfg, [0, 10, 20]) for k in ("seed_pi_256", "seed_pi_1024")}
    (fig,) = figures.render(context(cfg, "render", "fig3_left", files), "fig3_left").figures
    assert [ln.get_label() for ln in fig.mpl.axes[0].get_lines()] == ["input_dim=784", "n_h=256", "wide"]
    c256, c1024 = (ln.get_color() for ln in fig.mpl.axes[0].get_lines()[1:])
    assert c1024 == figures.run_color("partial_identity", 1024) != c256  # the width's shade of the init's hue
    assert "seed_pi_256 (Partial Identity, n_h=256" in fig.caption


def test_run_colors_are_one_hue_per_init_and_one_shade_per_width():
    inits = list(figures.INIT_LABELS)
    colors = {(i, w): figures.run_color(i, w) for i in inits for w in (256, 512, 1024, 2048)}
    assert len(set(colors.values())) == len(colors)
    assert figures.run_color("zero", 1024) == figures.run_color("zero", 1024)
    assert figures.run_color("zero", 3000) == figures.run_color("zero", 1024)  # unlisted widths: the 1024 shade


def test_train_returns_the_result_and_one_child_run(smoke, data_mirror, tmp_path, monkeypatch):
    (tmp_path / "artifacts").mkdir()
    (tmp_path / "artifacts" / "data").symlink_to(data_mirror)  # MNIST, fetched once per session
    monkeypatch.setenv("TRAINSCAPE_ROOT", str(tmp_path))
    cfg = dataclasses.replace(smoke, runs={"tiny": RunSpec("zero", 40, "seed")},
                              budgets={**smoke.budgets, "seed": Budget(1, 640, 500, None, 4)}, cpu_threads=1)
    threads = torch.get_num_threads()
    try:
        out = train.train(context(cfg, "train", "tiny", {}), "tiny")
    finally:
        torch.set_num_threads(threads)
    res = out.json["result.json"]
    assert "skipped" not in res and res["iters"] == [0, 1, 5, 9, 10] and res["iterations"] == 10
    assert res["params"]["bias"] == 0.01 and res["params"]["train_images"] == 640 and res["params"]["n_h"] == 40
    assert res["params"]["init_seed"] == 1 and res["params"]["data_seed"] == 1
    assert (res["params"]["lr_step_size"], res["params"]["lr_gamma"]) == (12, 0.7)
    assert res["test"][0]["lr"] == 0.1 and res["test"][0]["rank_w3_minus_i"] == res["rank_w3_minus_i"][-1]
    (run,) = out.runs
    assert run.name == "tiny" and run.failed is None and run.params == res["params"]
    assert run.series["rank_w3_minus_i"] == (res["iters"], res["rank_w3_minus_i"])
    assert run.series["test_acc"] == ([1], [res["test"][0]["test_acc"]])
    assert run.metrics["final_rank_w3_minus_i"] == res["rank_w3_minus_i"][-1] > 0
    assert "first_iter_rank_above_input_dim" not in run.metrics  # n_h = 40 never reaches 784
    assert np.isfinite(res["train_loss"]).all()
    again = train.train(context(cfg, "train", "tiny", {}), "tiny").json["result.json"]
    assert again["train_loss"] == res["train_loss"] and again["rank_w3_minus_i"] == res["rank_w3_minus_i"]
