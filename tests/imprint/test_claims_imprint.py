"""imprint's claims against the seed notebook's own numbers and against this project's paper run: each holds
on both, and fails when its effect is absent, too small or far larger than the seed's."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from pipeline import claims
from pipeline.config import load_section, read_tree
from pipeline.contract import Claim, Context
from pipeline.data import load_split, normalised
from pipeline.studies.imprint import extract
from pipeline.studies.imprint import glyph as glyphs
from pipeline.studies.imprint.claims import CLAIMS, SEED_INIT_LOSS
from pipeline.studies.imprint.config import ImprintParams
from pipeline.studies.imprint.model import build_mlp, stamp_glyph
from tests.conftest import ROOT


def _run(e0: float, e1: float, final: float, train: float, n0: float, n1: float, loss: float,
         retained: float | None = None) -> dict:
    out = {"test_acc_epoch0": e0, "test_acc_epoch1": e1, "final_test_acc": final, "final_train_acc": train,
           "spectral_norm_initial": n0, "spectral_norm_final": n1, "first_batch_loss": loss}
    return out if retained is None else {**out, "glyph_contrast_retained": retained}


# The seed notebook (GPU, bf16): its printed accuracies and first-batch losses, ‖W2‖₂ read off play_15_0 and
# play_16_0, the glyph contrast kept read back through the colour scale of play_10_0 and play_13_0 (clipped at
# −0.05 and 0.45, so these understate the true shares by ≈ 0.03: this project's W2 read the same way gives 0.85
# for a true 0.88)
SEED = {"profile": "paper", "glyph": {"shape": "droid", "spectral_norm_scaled": 45.609}, "runs": {
    "random-adam": _run(0.0874, 0.9251, 0.9705, 0.9846, 1.15, 2.65, 2.3125),
    "glyph-adam": _run(0.1032, 0.8948, 0.9658, 0.9807, 45.6, 45.3, 3.1094, retained=0.992),
    "glyph-muon": _run(0.1032, 0.9485, 0.9689, 0.9924, 45.6, 42.6, 3.0469, retained=0.863),
    "random-muon": _run(0.0874, 0.9675, 0.9733, 0.9942, 1.15, 3.75, 2.3125)}}
SEED_SPREAD = {"gap": {"min": 0.9485 - 0.8948}, "adam": {"max": 0.8948}}  # the seed's one draw
# this project's paper settings (bf16, 10 epochs, Droid glyph, init seed 4, data seed 1), trained on this CPU
PAPER = {"profile": "paper", "glyph": {"shape": "droid", "spectral_norm_scaled": 45.6094}, "runs": {
    "random-adam": _run(0.0870, 0.9295, 0.9740, 0.9880, 1.137, 2.565, 2.2969),
    "glyph-adam": _run(0.0960, 0.8951, 0.9629, 0.9766, 45.661, 45.278, 3.1250, retained=1.053),
    "glyph-muon": _run(0.0960, 0.9518, 0.9657, 0.9914, 45.661, 42.252, 3.1250, retained=0.884),
    "random-muon": _run(0.0870, 0.9650, 0.9777, 0.9956, 1.137, 3.690, 2.2969)}}
# epoch 1 over init seeds 0-7 (bf16, this CPU, 2026-11-27): glyph+Adam 52.66-89.67 %, glyph+Muon 94.81-95.87 %
PAPER_SPREAD = {"gap": {"min": 0.0544, "median": 0.1239, "max": 0.4291},
                "adam": {"min": 0.5266, "median": 0.8314, "max": 0.8967}}


def _claim(cid: str) -> Claim:
    return next(c for c in CLAIMS if c.id == cid)


def _status(cid: str, metrics: dict, spread: dict = PAPER_SPREAD) -> str:
    stages = {"imprint_extract@final": metrics, "imprint_extract@seed_spread": spread}
    return claims.evaluate(_claim(cid), "imprint", "paper", stages.get)["status"]


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: c.id)
def test_every_claim_holds_on_the_seed_notebook_and_on_the_paper_run(claim):
    assert _status(claim.id, SEED, SEED_SPREAD) == "holds"
    assert _status(claim.id, PAPER) == "holds"


def _moved(base: dict, **edits: float) -> dict:
    """``base`` with run values replaced: ``glyph_adam__test_acc_epoch1=0.8`` → runs['glyph-adam'][…]."""
    out = copy.deepcopy(base)
    for key, value in edits.items():
        run, field = key.split("__")
        out["runs"][run.replace("_", "-")][field] = value
    return out


@pytest.mark.parametrize(("cid", "edits"), [
    # the seed's glyph stays visible under Muon: an erased glyph is not the seed's result
    ("glyph_fades_under_muon", {"glyph_muon__glyph_contrast_retained": 0.3}),
    ("glyph_fades_under_muon", {"glyph_muon__glyph_contrast_retained": 0.79}),
    ("glyph_fades_under_muon", {"glyph_muon__glyph_contrast_retained": 1.04}),  # fades no more than under Adam
    # the slow-down is about the seed's 3 points: 12.9 (the paper run at init seed 0) or none breaks it
    ("glyph_slows_adam", {"glyph_adam__test_acc_epoch1": 0.7983}),
    ("glyph_slows_adam", {"glyph_adam__test_acc_epoch1": 0.9255}),
    # from the random init Muon's ‖W2‖₂ ends well above Adam's, not level with it (smoke: 1.04×)
    ("random_norm_muon_above_adam", {"random_muon__spectral_norm_final": 2.70}),
    ("muon_train_acc_above_adam_glyph", {"glyph_muon__final_train_acc": 0.9780}),
    ("muon_train_acc_above_adam_random", {"random_adam__final_train_acc": 0.9940}),
    ("glyph_raises_first_loss", {"glyph_adam__first_batch_loss": 2.5}),
    ("glyph_init_loss_like_seed", {"glyph_adam__first_batch_loss": 3.7969}),  # init seed 0's draw
    # Muon's early lead fades: one that lasts (5 of its 5.7 points), one more than half kept, one that turns into a
    # 2-point deficit, and no early lead at all break it
    ("muon_lead_fades_glyph", {"glyph_muon__final_test_acc": 0.9629 + 0.05}),
    ("muon_lead_fades_random", {"random_muon__final_test_acc": 0.9740 + 0.0140,
                                "random_muon__test_acc_epoch1": 0.9535}),
    ("muon_lead_fades_glyph", {"glyph_muon__final_test_acc": 0.9429}),
    ("muon_lead_fades_random", {"random_muon__test_acc_epoch1": 0.9295}),
])
def test_a_claim_fails_when_its_effect_is_absent_or_not_the_seeds_size(cid, edits):
    assert _status(cid, PAPER) == "holds"
    assert _status(cid, _moved(PAPER, **edits)) == "fails"


@pytest.mark.parametrize("best_glyph_adam", [0.9250, 0.9400])
def test_the_slowdown_over_init_seeds_fails_where_one_draw_keeps_up_with_the_random_init(best_glyph_adam):
    """One init seed whose glyph+Adam run is within a point of random+Adam (92.95 %), or ahead of it: the
    slowdown is then a draw's, not the glyph's."""
    cid = "glyph_slows_adam_on_every_init_seed"
    assert _status(cid, PAPER) == "holds"
    spread = copy.deepcopy(PAPER_SPREAD)
    spread["adam"]["max"] = best_glyph_adam
    assert _status(cid, PAPER, spread) == "fails"


def test_the_random_figure_is_play_16_0_not_a_copy_of_the_glyph_figure():
    """play_15_1 is play_15_0 shown twice (byte-identical in the seed's repository); the random-init composite
    is play_16_0."""
    random_only = [c for c in CLAIMS if c.figures == ("random",)]
    assert random_only and all(c.seed_figure.startswith("play_16_0") for c in random_only)
    assert not any("play_15_1" in c.seed_figure for c in CLAIMS)


def test_extract_publishes_the_first_batch_loss():
    cfg = load_section(ImprintParams, read_tree(ROOT), "imprint", "smoke")
    read = {}
    for i, (key, spec) in enumerate(cfg.runs.items()):
        read[("train", key, "metrics.json")] = {
            "init": spec.init, "optimizer": spec.optimizer, "precision": "fp32", "ns_precision": "fp32",
            "epochs": 1, "final_test_acc": 0.9, "final_train_acc": 0.91, "spectral_norm_initial": 45.6,
            "spectral_norm_final": 45.0, "test_acc": [0.1, 0.9], "train_acc": [0.1, 0.91],
            "first_batch_loss": [3.1 + i, 0.3], "train_loss": [0.5], "init_seed": 4, "data_seed": 1, "lr": 1e-3,
            "momentum": 0.95, "batch_size": 512, "n_train": 600, "n_test": 100, "glyph": "rectangles",
            "glyph_scale": 0.4}
        if spec.init == "glyph":
            bitmap = glyphs.rectangles_bitmap()
            read[("train", key, "arrays.npz")] = {"w2": np.stack([0.4 * bitmap, 0.3 * bitmap]),
                                                  "glyph_bitmap": bitmap}
    ctx = Context(study="imprint", kind="extract", unit="final", profile="smoke", cfg=cfg, device="cpu",
                  stage="imprint_extract@final", provenance={}, reader=lambda *key: read[key], own=lambda _n: None)
    runs = extract.extract(ctx, "final").metrics["runs"]
    assert {k: r["first_batch_loss"] for k, r in runs.items()} == {k: 3.1 + i for i, k in enumerate(cfg.runs)}


def test_the_init_seed_draws_the_seeds_kind_of_glyph_init(data_mirror):
    """The seed printed its glyph init's first-batch loss (3.05, 3.11): the configured init seed gives that
    loss on the first batch of the runs' data order; init seed 0 (3.80) does not, and its glyph+Adam run is
    10 points behind the seed's after epoch 1."""
    cfg = load_section(ImprintParams, read_tree(ROOT), "imprint", "paper")
    split = load_split("mnist", train=True, root=data_mirror / "mnist")
    idx = torch.randperm(len(split.labels), generator=torch.Generator().manual_seed(cfg.runs["glyph-adam"].data_seed))
    x = normalised(split.images[idx[: cfg.batch_size]], cfg.mean, cfg.std, dtype=torch.bfloat16)
    y = split.labels[idx[: cfg.batch_size]]
    bitmap = glyphs.glyph_info(cfg.glyph, cfg.glyph_scale)["bitmap"]

    def loss(init_seed: int) -> float:
        model = build_mlp(init_seed, torch.bfloat16)
        stamp_glyph(model, bitmap, cfg.glyph_scale)
        with torch.no_grad():
            return float(nn.functional.cross_entropy(model(x), y))

    lo, hi = SEED_INIT_LOSS
    assert lo <= loss(cfg.init_seed) <= hi
    assert not lo <= loss(0) <= hi
