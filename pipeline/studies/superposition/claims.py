"""superposition's claims (seed 002): the deterministic first epoch, a loss that only falls, the
note's plateau-then-drop near 0.0183, the final level, the feature geometry of W_E and W_U, and the
heat maps of M = W_U·W_E and ReLU(M)."""

from collections.abc import Mapping
from functools import partial
from typing import Any

from pipeline.checks import at, at_least, at_most, close_to, each, each_at, number, within
from pipeline.contract import FINDING, SANITY, Claim

UNTIED, TIED, SUMMARY = ("superposition_extract@untied", "superposition_extract@tied",
                         "superposition_extract@summary")
LOSS_FIG = "loss plot of train() (the note: plateau at epochs 8000–9000)"
GEOMETRY_FIG = "plot_weights_interactive (feature geometry)"
M_FIG = "visualize_matrices_with_slider(matrix_list) (heat map of M = W_U·W_E)"
RELU_M_FIG = "visualize_matrices_with_slider(np_relu(M)) (heat map of ReLU(M))"
SHORT = "smoke trains 2,000 epochs; the plateau sits at epochs 5k–15k"
NOTE_EPOCH_KEY = "m_min_epoch8500"  # extract.NOTE_EPOCH, the note's "compare … 8500 epochs to the final"
# ReLU(M)'s diagonal: the spec's §3 rerun of seed 42 has 16 entries above 0.1 (4 above 0.3, 1 above 0.5); the
# claim asks for half of that, still 4× the n = 2 features a model without superposition reconstructs
DIAGONAL_FLOOR = 8
# a feature W_E embeds has its W_U row within 60° of its W_E column (the tied model, the note's comparison,
# has W_U = W_Eᵀ: cos 1; a random draw has cos ≈ −1 for its worst feature)
ALIGNMENT_FLOOR = 0.5
# M's most negative entry deepens at least 2× from epoch 8,500 to the end: the heat map's common colour range
# (global min to max) then shows the final panel visibly darker than the note's 8,500
M_DEEPENS = 2.0
# where a plateau may sit: the note's "around 0.0183", as the band the tied_level claim already uses. Not the
# spec's [0.0180, 0.0184], a bound on the loss at epochs 8k–9k (measured 0.01808–0.01832) whose top is the
# tied-style 46/2500: the paper run's plateaus sit at 0.01831 (11 seeds, the tied model's 0.0183207) and at
# 0.01839 (seed 16; its flat stretch reaches 0.018402), so 0.0184 was under one detector tolerance (0.1 %,
# 1.8e-5) away. 0.0185 leaves 0.6 % (6 tolerances) above seed 16 and stays below the loss still being shed
# early in training (seed 42: 0.01852 at epoch 1,000), so a shelf of that phase is not taken for the note's
PLATEAU_BAND = (0.0180, 0.0185)
# the paper run: 12 of its 33 untied seeds plateau then drop (11 at 0.01831, seed 16 at 0.01839); a fifth
# (7 of 33) keeps the claim about the model's behaviour over seeds with room for the draw, where "some seed"
# was held by one seed's plateau
PLATEAU_SHARE = 0.2


def falls_never_rises(geometry: Any, first: Any, final: Any, *, rise: float) -> tuple[bool, Any]:
    """Every seed's loss falls over the run (final below epoch 1's) and never rises by more than ``rise`` from
    one epoch to the next; measured: per seed the largest rise and the fall."""
    if not isinstance(geometry, Mapping) or not isinstance(first, Mapping) or not isinstance(final, Mapping):
        return False, None
    ok, measured = bool(geometry), {}
    for seed, row in geometry.items():
        up = number(row.get("max_loss_increase")) if isinstance(row, Mapping) else None
        a, b = number(first.get(seed)), number(final.get(seed))
        fall = None if a is None or b is None else a - b
        ok &= up is not None and up <= rise and fall is not None and fall > 0
        measured[seed] = {"max_rise": up, "fall": fall}
    return ok, measured


def seeds_share(picked: Any, seeds: Any, *, share: float) -> tuple[bool, Any]:
    """At least ``share`` of the ``seeds`` are among ``picked``; measured: how many of how many."""
    if not isinstance(picked, list | tuple) or not isinstance(seeds, Mapping) or not seeds:
        return False, None
    n = len({str(s) for s in picked} & {str(s) for s in seeds})
    return n >= share * len(seeds), {"seeds": n, "of": len(seeds)}


def plateau_levels(seeds: Any, *, lo: float, hi: float) -> tuple[bool, Any]:
    """Every detected plateau (of any seed) lies at a loss in [lo, hi], and there is one; measured: them."""
    if not isinstance(seeds, Mapping):
        return False, None
    levels = {f"{s}#{i}": p["loss"] for s, r in seeds.items() for i, p in enumerate(r.get("plateaus", []))}
    return bool(levels) and all(lo <= v <= hi for v in levels.values()), levels


def plateau_covers(seeds: Any, *, first: int, last: int) -> tuple[bool, Any]:
    """Some detected plateau (of any seed) spans epochs ``first``–``last``; measured: the (start, end)
    epochs of the plateaus that do."""
    if not isinstance(seeds, Mapping):
        return False, None
    spans = {f"{s}#{i}": [p["start_epoch"], p["end_epoch"]] for s, r in seeds.items()
             for i, p in enumerate(r.get("plateaus", [])) if p["start_epoch"] <= first and p["end_epoch"] >= last}
    return bool(spans), spans


def deepens(row: Any, *, factor: float) -> tuple[bool, Any]:
    """One seed: M's most negative entry at the end is at least ``factor`` times as negative as at the note's
    epoch (both negative); measured: the two values and their ratio."""
    if not isinstance(row, Mapping):
        return False, None
    at_note, final = number(row.get(NOTE_EPOCH_KEY)), number(row.get("m_min"))
    if at_note is None or final is None or at_note >= 0 or final >= 0:
        return False, {"epoch8500": at_note, "final": final}
    return final / at_note >= factor, {"epoch8500": at_note, "final": final, "ratio": final / at_note}


CLAIMS = (
    Claim("epoch1_loss_seed42", LOSS_FIG,
          "The run is deterministic: seed 42's epoch-1 loss is 0.0204067 ± 1e-7 (CPU, the faithful run).",
          ((UNTIED, "loss_epoch1", "42"),), partial(close_to, target=0.0204067, tol=1e-7), figures=("summary",),
          role=SANITY),
    Claim("loss_never_rises", LOSS_FIG,
          "The untied loss only falls: for every seed it ends below its epoch-1 value and never rises by more "
          "than 1e-6 from one epoch to the next (a loss that never moved would never rise either).",
          ((UNTIED, "final_geometry"), (UNTIED, "loss_epoch1"), (UNTIED, "final_loss")),
          partial(falls_never_rises, rise=1e-6), figures=("summary",), role=FINDING),
    Claim("plateau_then_drop", LOSS_FIG,
          "Plateau then drop (the note's 'plateau … then look at what happens afterwards') is common behaviour "
          "of the model, not one seed's: at least a fifth of the untied seeds show it (the paper run: 12 of 33; "
          "the note's seed 42 no longer does on this torch).",
          ((SUMMARY, "variants", "untied", "plateau_seeds"), (SUMMARY, "variants", "untied", "seeds")),
          partial(seeds_share, share=PLATEAU_SHARE), figures=("summary",), fails_on={"smoke": SHORT}, role=FINDING),
    Claim("plateau_level", LOSS_FIG,
          "The plateaus sit near the note's 0.0183: every detected plateau lies in [0.0180, 0.0185] (the paper "
          "run: 0.01831 in 11 seeds, the tied model's level, and 0.01839 in seed 16).",
          ((SUMMARY, "variants", "untied", "seeds"),), partial(plateau_levels, lo=PLATEAU_BAND[0], hi=PLATEAU_BAND[1]),
          figures=("summary",), fails_on={"smoke": SHORT}, role=FINDING),
    Claim("final_loss_level", LOSS_FIG,
          "After the run the untied loss of every seed lies in [0.0176, 0.0181], below the tied-style "
          "solution's 46/2500 = 0.0184.",
          ((UNTIED, "final_loss"),), partial(each, check=partial(within, lo=0.0176, hi=0.0181)),
          figures=("summary", "untied"), fails_on={"smoke": "smoke trains 2,000 of the 50,000 epochs"}, role=FINDING),
    Claim("superposition", GEOMETRY_FIG,
          "In 2 hidden dimensions W_E embeds more than 2 features (column norm > 0.1): superposition.",
          ((UNTIED, "final_geometry", "42", "represented_features"),), partial(at_least, threshold=3),
          figures=("untied",), role=SANITY),
    Claim("features_grow_above_init", GEOMETRY_FIG,
          "Training puts more features than hidden dimensions into W_E: every seed ends with at least 3 "
          "(> n = 2) features whose W_E column is longer than the longest column at init (0 at init by "
          "construction; the untrained draw already has ≈ 30 columns above 0.1).",
          ((UNTIED, "final_geometry"),),
          each_at("features_above_init", partial(at_least, threshold=3)),
          figures=("untied",), role=FINDING),
    Claim("plateau_at_note_epochs", LOSS_FIG,
          "The note's plateau is where it says: some untied seed's detected plateau covers epochs 8,000–9,000.",
          ((SUMMARY, "variants", "untied", "seeds"),), partial(plateau_covers, first=8000, last=9000),
          figures=("summary",), fails_on={"smoke": SHORT}, role=FINDING),
    Claim("geometry_collapses", GEOMETRY_FIG,
          "By the end, the embedded features of seed 42 lie on at most 5 directions of the hidden plane "
          "(torch 2.13, 50,000 epochs: 19 features on 4 directions).",
          ((UNTIED, "final_geometry", "42", "directions"),), partial(at_most, threshold=5),
          figures=("untied",), fails_on={"smoke": "after 2,000 epochs the columns have not gathered yet"},
          role=FINDING),
    Claim("tied_level", "the note: 'similar to the tied case?'",
          "The tied model settles near the note's plateau level: its median final loss lies in [0.0180, 0.0185].",
          ((TIED, "final_loss_median"),), partial(within, lo=0.0180, hi=0.0185), figures=("tied", "summary"),
          role=FINDING),
    Claim("unembedding_follows_embedding", GEOMETRY_FIG + ", W_U panel",
          "W_U's rows point where W_E's columns do, as in the tied case the note compares with (W_U = W_Eᵀ): for "
          "every seed, each feature W_E embeds (column norm > 0.1) ends with its W_U row within 60° of its W_E "
          "column (cosine ≥ 0.5; the random init's worst feature is at ≈ −1).",
          ((UNTIED, "final_geometry"),),
          each_at("w_u_alignment_min", partial(at_least, threshold=ALIGNMENT_FLOOR)),
          figures=("untied",), role=FINDING),
    Claim("relu_m_diagonal_spread", RELU_M_FIG,
          "ReLU(M) reconstructs many features partially: every seed ends with at least 8 diagonal entries of "
          "ReLU(W_U·W_E) above 0.1 (the spec's rerun of seed 42: 16; at init 0–3), 4× the n = 2 a model without "
          "superposition reconstructs.",
          ((UNTIED, "final_geometry"),),
          each_at("relu_m_diagonal_above", partial(at, key="0.1", check=partial(at_least, threshold=DIAGONAL_FLOOR))),
          figures=("untied",), role=FINDING),
    Claim("m_deepens_after_note_epoch", M_FIG,
          "The note's comparison of M at epoch 8,500 with the end: after 8,500 the untied model pushes M's "
          "interference negative, where the ReLU cuts it: for every seed M's most negative entry at the end is "
          "at least 2× as negative as at epoch 8,500 (the paper run: 3.3–22×; seed 42 −2.5 → −8.6).",
          ((UNTIED, "final_geometry"),), partial(each, check=partial(deepens, factor=M_DEEPENS)),
          figures=("untied",),
          fails_on={"smoke": "smoke trains 2,000 epochs: no snapshot at epoch 8,500",
                    "gpu_medium": "gpu_medium stops at 20,000 epochs, where seed 42's M is 1.9× as negative as at "
                                  "8,500 (3.4× by the paper's 50,000)"},
          role=FINDING),
)
