"""Issue Q, item 9: a training finding that already holds before training is no finding.

Every ``finding`` claim of the four training studies (imprint, superposition, zero_init, mupc_training) is
evaluated on the metrics of the untrained state, the metrics the study's extract would publish if no run ever
moved its initial weights, and must be measured and fail there ('not measured' is not enough). How each study's
untrained metrics are built:

* imprint: the extract itself (``extract.extract``, ``extract.spread_metrics``) on train outputs of runs that
  never update: every epoch's accuracy is the init's (the seed's printed epoch-0 numbers: 8.74 % from the random
  init, 10.32 % from the glyph init), ‖W2‖₂ stays at its initial value (1.15, 45.6), W2 stays the stamped glyph,
  the first-batch loss is the init's (it is taken before any update).
* superposition: the study's own init (``init_batch``) trained by its own loop at lr 0 (``train_batched``: the
  loss and every snapshot stay the init's), then the extract (``extract.extract``, ``extract_summary``).
* zero_init: by construction (W3 of partial identity and ZerO is the identity, so rank(W3 − I) = 0; Random's
  W3 − I is full rank n_h; test accuracy at chance), as ``result.json`` records of a run holding only its
  iteration-0 point, summarised by the extract's ``run_summary``; the ranks of the n_h = 256 inits are checked
  with the study's ``init_matrix``/``residual_rank``.
* mupc_training: the extract (``extract_family``) on sweeps of the paper's and gpu_medium's grids whose runs never
  move their weights: every test accuracy at chance (10 %), every train loss the init's (a function of the net,
  not of the lrs), κ(H_z) constant over training at its init value (growing with depth, as the theory has it).
"""

from __future__ import annotations

import copy
import zlib

import numpy as np
import pytest
import torch

from pipeline import claims
from pipeline.config import load_section, read_tree
from pipeline.contract import Claim, Context
from pipeline.studies.imprint import extract as imprint_extract
from pipeline.studies.imprint import glyph as glyphs
from pipeline.studies.imprint.claims import CLAIMS as IMPRINT
from pipeline.studies.imprint.config import ImprintParams
from pipeline.studies.mupc.engine.runs import RunConfig
from pipeline.studies.mupc.training.claims import CLAIMS as MUPC
from pipeline.studies.mupc.training.claims import fam
from pipeline.studies.mupc.training.families import FAMILIES as TRAINING_FAMILIES
from pipeline.studies.superposition import extract as sp_extract
from pipeline.studies.superposition.claims import CLAIMS as SUPERPOSITION
from pipeline.studies.superposition.config import Superposition
from pipeline.studies.superposition.model import init_batch, train_batched
from pipeline.studies.zero_init.claims import CLAIMS as ZERO_INIT
from pipeline.studies.zero_init.config import ZeroInitParams
from pipeline.studies.zero_init.extract import run_summary
from pipeline.studies.zero_init.model import init_matrix, residual_rank
from pipeline.studies.zero_init.train import run_params
from tests.conftest import ROOT
from tests.mupc_training.test_verdicts import published

FAMILIES = tuple(TRAINING_FAMILIES)  # F7–F25 and the project's F28


def findings(claims_: tuple[Claim, ...]) -> list[Claim]:
    return [c for c in claims_ if c.role == "finding"]


def status(claim: Claim, study: str, profile: str, stages: dict) -> dict:
    return claims.evaluate(claim, study, profile, stages.get)


def ctx_for(study: str, unit: str, profile: str, cfg, read) -> Context:
    return Context(study=study, kind="extract", unit=unit, profile=profile, cfg=cfg, device="cpu",
                   stage=f"{study}_extract@{unit}", provenance={}, reader=read, own=lambda _n: None)


# ----------------------------------------------------------------------------- imprint

# the seed's printed epoch-0 test accuracy and first-batch loss per init, ‖W2‖₂ at init (spec §3, play_15/16_0)
IMPRINT_INIT = {"random": {"acc": 0.0874, "norm": 1.15, "loss": 2.3125},
                "glyph": {"acc": 0.1032, "norm": 45.6, "loss": 3.1094}}


def imprint_untrained(profile: str = "paper") -> dict[str, dict]:
    cfg = load_section(ImprintParams, read_tree(ROOT), "imprint", profile)
    bitmap = glyphs.rectangles_bitmap()
    read = {}
    for key, spec in cfg.runs.items():
        init = IMPRINT_INIT[spec.init]
        flat = [init["acc"]] * (cfg.epochs + 1)  # no update: every epoch is epoch 0
        read[("train", key, "metrics.json")] = {
            "init": spec.init, "optimizer": spec.optimizer, "precision": cfg.precision,
            "ns_precision": cfg.ns_precision, "epochs": cfg.epochs, "final_test_acc": init["acc"],
            "final_train_acc": init["acc"], "spectral_norm_initial": init["norm"], "spectral_norm_final": init["norm"],
            "test_acc": flat, "train_acc": flat, "first_batch_loss": [init["loss"]] * cfg.epochs,
            "train_loss": [init["loss"]] * cfg.epochs, "init_seed": cfg.init_seed, "data_seed": spec.data_seed,
            "lr": cfg.lr, "momentum": cfg.momentum, "batch_size": cfg.batch_size, "n_train": 60000, "n_test": 10000,
            "glyph": "rectangles", "glyph_scale": cfg.glyph_scale}
        if spec.init == "glyph":
            w2 = cfg.glyph_scale * bitmap
            read[("train", key, "arrays.npz")] = {"w2": np.stack([w2] * (cfg.epochs + 1)), "glyph_bitmap": bitmap}
    final = imprint_extract.extract(ctx_for("imprint", "final", profile, cfg, lambda *k: read[k]), "final").metrics
    sp = cfg.spread
    spread = {"init": sp.init, "precision": cfg.precision, "ns_precision": cfg.ns_precision,
              "data_seed": sp.data_seed, "n_train": 60000, "epochs": sp.epochs,
              "test_acc": {str(s): {opt: [0.09 + 0.001 * i] * (sp.epochs + 1) for opt in ("adam", "muon")}
                           for i, s in enumerate(sp.init_seeds)}}
    return {"imprint_extract@final": final, "imprint_extract@seed_spread": imprint_extract.spread_metrics(spread)}


@pytest.fixture(scope="module")
def imprint_metrics() -> dict[str, dict]:
    return imprint_untrained()


def test_imprint_untrained_metrics_are_the_init(imprint_metrics):
    runs = imprint_metrics["imprint_extract@final"]["runs"]
    assert runs["glyph-adam"]["glyph_contrast_retained"] == pytest.approx(1.0)
    assert runs["glyph-muon"]["test_acc_epoch1"] == runs["glyph-adam"]["test_acc_epoch1"] == 0.1032
    assert imprint_metrics["imprint_extract@seed_spread"]["gap"]["min"] == 0.0


@pytest.mark.parametrize("claim", findings(IMPRINT), ids=lambda c: c.id)
def test_no_imprint_finding_holds_before_training(claim, imprint_metrics):
    row = status(claim, "imprint", "paper", imprint_metrics)
    assert row["status"] == "fails", (claim.id, row["measured"], row["missing"])


# ----------------------------------------------------------------------------- superposition

SP_PROFILE = "gpu_medium"  # 20,000 epochs (a snapshot at the note's 8,500), 9 seeds: the paper's shape, cheaper


@pytest.fixture(scope="module")
def superposition_metrics() -> dict[str, dict]:
    cfg = load_section(Superposition, read_tree(ROOT), "superposition", SP_PROFILE)
    tp = cfg.train
    w_e0, w_u0 = init_batch(tp.seeds, cfg.f, cfg.n)
    histories = {}
    n_snap = tp.epochs // tp.snapshot_every + 1
    for v, var in cfg.variants.items():
        # the study's loop at lr 0 for two snapshots (nothing moves), then the same state over the whole run
        h = train_batched(w_e0, w_u0, epochs=2 * tp.snapshot_every, lr=0.0, tied=var.tied,
                          snapshot_every=tp.snapshot_every, dtype=torch.float32)
        assert (h.losses == h.losses[0]).all() and (h.w_e == h.w_e[0]).all()
        histories[v] = {"seeds": np.asarray(tp.seeds), "losses": np.repeat(h.losses[:1], tp.epochs, axis=0),
                        "snap_epochs": np.arange(n_snap) * tp.snapshot_every,
                        "w_e": np.repeat(h.w_e[:1], n_snap, axis=0), "w_u": np.repeat(h.w_u[:1], n_snap, axis=0)}

    def read(kind: str, unit: str, name: str):
        assert (kind, name) == ("train", "history.npz")
        return histories[unit]

    out = {f"superposition_extract@{v}": sp_extract.extract(ctx_for("superposition", v, SP_PROFILE, cfg, read),
                                                            v).metrics for v in cfg.variants}
    out["superposition_extract@summary"] = sp_extract.extract_summary(
        ctx_for("superposition", "summary", SP_PROFILE, cfg, read), "summary").metrics
    return out


def test_superposition_untrained_loss_is_flat(superposition_metrics):
    untied = superposition_metrics["superposition_extract@untied"]
    assert untied["final_loss"] == untied["loss_epoch1"]


@pytest.mark.parametrize("claim", findings(SUPERPOSITION), ids=lambda c: c.id)
def test_no_superposition_finding_holds_before_training(claim, superposition_metrics):
    row = status(claim, "superposition", SP_PROFILE, superposition_metrics)
    assert row["status"] == "fails", (claim.id, row["measured"], row["missing"])


# ----------------------------------------------------------------------------- zero_init

# the test accuracy of an untrained net: the identity-like inits (partial identity, ZerO) pass the first 10 pixels,
# all 0 in MNIST, to the logits, which are then equal: every image is class 0 (980 of the 10,000 test images);
# the random init is at chance
ZERO_INIT_ACC = {"partial_identity": 9.8, "zero": 9.8, "one": 9.8, "random": 10.0, "spray": 10.0}


def initial_rank(init: str, n_h: int) -> int:
    """rank(W3 − I) of the square n_h × n_h W3 at init: 0 for the identity-like inits (partial identity, ZerO and
    OnE are I when square), n_h for Random, n_h − 1 for Spray ((J − I)/(n_h − 1) − I: J's one eigenvalue n_h
    cancels)."""
    return {"random": n_h, "spray": n_h - 1}.get(init, 0)


def zero_init_untrained(profile: str = "paper") -> dict[str, dict]:
    cfg = load_section(ZeroInitParams, read_tree(ROOT), "zero_init", profile)
    runs = {}
    for key in cfg.train_runs():
        p = run_params(cfg, profile, key)
        p.update(train_images=p["train_subset"] or 60000, test_images=p["test_subset"] or 10000)
        r0 = initial_rank(p["init"], p["n_h"])
        runs[key] = run_summary({
            "params": p, "iterations": 0, "rank_w3_minus_i": [r0], "rank_w3_minus_w3_0": [0],
            "test": [{"epoch": 0, "test_acc": ZERO_INIT_ACC[p["init"]], "lr": p["lr"], "rank_w3_minus_i": r0}],
            "first_iter_rank_above_input_dim": 0 if r0 > cfg.input_dim_line else None, "diverged": False})
    return {"zero_init_extract@summary": {"profile": profile, "input_dim": cfg.input_dim_line, "runs": runs}}


def test_zero_init_initial_ranks_are_the_studys():
    for init in ZERO_INIT_ACC:
        gen = torch.Generator().manual_seed(0)
        assert residual_rank(init_matrix(init, 256, 256, gen=gen), 1e-6) == initial_rank(init, 256), init


@pytest.mark.parametrize("claim", findings(ZERO_INIT), ids=lambda c: c.id)
def test_no_zero_init_finding_holds_before_training(claim):
    row = status(claim, "zero_init", "paper", zero_init_untrained())
    assert row["status"] == "fails", (claim.id, row["measured"], row["missing"])


# ----------------------------------------------------------------------------- mupc_training

CHANCE = 10.0


def init_loss(rc: RunConfig) -> float:
    """The train loss of the untrained net: a function of the net and its seed, never of the learning rates."""
    net = f"{rc.method}/{rc.dataset}/{rc.N}/{rc.H}/{rc.act}/{rc.param}/{rc.init}/{rc.skips}/{rc.seed}"
    return 2.3 + 0.1 * (zlib.crc32(net.encode()) % 1000) / 1000


def mupc_untrained(rc: RunConfig) -> dict[str, np.ndarray]:
    """A run whose weights never move: every evaluation at chance, every batch loss the init's, κ(H_z) its init
    value throughout (growing with depth: 10·H² for SP, 10·H for μPC)."""
    n = 3 * rc.epochs
    out = {"test_accs": np.full(n, CHANCE), "test_losses": np.full(n, init_loss(rc))}
    out["train_losses" if rc.method == "bp" else "batch_train_losses"] = np.full(4, init_loss(rc))
    if rc.metrics == "hessian":
        kappa = 10.0 * rc.H ** (2 if rc.param == "sp" else 1)
        out.update(lambda_min=np.full(n + 1, 0.1), lambda_max=np.full(n + 1, 0.1 * kappa),
                   cond_nums=np.full(n + 1, kappa))
    return out


@pytest.fixture(scope="module", params=("gpu_medium", "paper"))
def mupc_metrics(request) -> tuple[str, dict[str, dict]]:
    return request.param, published(request.param, FAMILIES, mupc_untrained)


@pytest.mark.parametrize("claim", findings(MUPC), ids=lambda c: c.id)
def test_no_mupc_training_finding_holds_before_training(claim, mupc_metrics):
    profile, metrics = mupc_metrics
    row = status(claim, "mupc_training", profile, metrics)
    assert row["status"] == "fails", (claim.id, row["measured"], row["missing"])


def test_mupc_untrained_metrics_are_at_chance(mupc_metrics):
    _, metrics = mupc_metrics
    assert set(metrics[fam("F15")]["best_final_acc"].values()) == {CHANCE}
    assert metrics[fam("F8")]["kappa_final"] == metrics[fam("F8")]["kappa_init"]


def test_the_untrained_metrics_are_not_mutated_by_the_checks(imprint_metrics):
    before = copy.deepcopy(imprint_metrics)
    for c in findings(IMPRINT):
        status(c, "imprint", "paper", imprint_metrics)
    assert imprint_metrics == before
