"""mupc_analysis: params (profiles, validation), the declaration, and the train/extract/render functions on
tiny inputs (a Hessian grid computed for real, synthetic forward-pass and theory arrays)."""

from __future__ import annotations

import concurrent.futures
import copy
import dataclasses
import json
import multiprocessing
import re
from typing import Any

import numpy as np
import pytest
import torch

# skips, rather than breaks, collection where plotly is absent (a bare GPU machine's `pytest -m gpu`): the
# project's plotting module draws the μPC figures with it
pytest.importorskip("plotly")

import plotly.graph_objects as go
from matplotlib.colors import LogNorm
from plotly.colors import sample_colorscale

from pipeline.config import ConfigError, load_section, merge, read_tree, resolve, validate
from pipeline.contract import Context, Output
from pipeline.plotting import plt
from pipeline.studies.mupc.analysis import STUDY, fwdpass
from pipeline.studies.mupc.analysis import cost as analysis_cost
from pipeline.studies.mupc.analysis import figures as figures_module
from pipeline.studies.mupc.analysis import probe as analysis_probe
from pipeline.studies.mupc.analysis import train as train_module
from pipeline.studies.mupc.analysis.config import MupcAnalysisParams
from pipeline.studies.mupc.analysis.extract import extract, spectral_drift
from pipeline.studies.mupc.analysis.families import FAMILIES
from pipeline.studies.mupc.analysis.figures import (
    LAYER_NAMES,
    _phase,
    drawer,
    phase_title,
    pow2,
    pow2_tex,
    render,
)
from pipeline.studies.mupc.analysis.layout import (
    FWD_METRICS,
    fwd_draws,
    fwd_key,
    hessian_configs,
    hessian_key,
    spectrum_routes,
    theory_key,
)
from tests.conftest import ROOT

NAME = "mupc_analysis"
TINY_HESSIAN = {"acts": ["linear", "tanh"],
                "groups": [{"param": "mupc", "inits": ["standard_gauss"], "skips": [True]},
                             {"param": "sp", "inits": ["standard"], "skips": [False]}],
                "widths": [2, 4], "depths": [2, 3], "dense_max_n": 4, "autodiff_check_max_n": 8}


def _raw() -> dict:
    return read_tree(ROOT)


def _cfg(over: dict | None = None, profile: str = "smoke") -> MupcAnalysisParams:
    section = merge(copy.deepcopy(_raw()[NAME]), {"profiles": {profile: over or {}}})
    return validate(MupcAnalysisParams, resolve(section, profile, NAME), NAME)


def _roundtrip(obj: Any) -> Any:
    """What a stage reads back from a JSON file."""
    return json.loads(json.dumps(obj))


class Store:
    """Output files of train units in memory, read back as the runner's readers would."""

    def __init__(self) -> None:
        self.files: dict[tuple[str, str], dict[str, Any]] = {}

    def add(self, unit: str, out: Output) -> None:
        files = self.files.setdefault(unit, {})
        prefix = f"{out.part}/" if out.part else ""
        files.update({prefix + k: _roundtrip(v) for k, v in out.json.items()})
        files.update({prefix + k: {a: np.asarray(b) for a, b in v.items()} for k, v in out.arrays.items()})

    def ctx(self, cfg: MupcAnalysisParams, kind: str, unit: str) -> Context:
        return Context(study=NAME, kind=kind, unit=unit, profile="smoke", cfg=cfg, device="cpu",
                       stage=f"{NAME}_{kind}@{unit}", provenance={},
                       reader=lambda k, u, name: self.files[u][name],
                       own=lambda name: self.files.get(unit, {}).get(name), log=lambda _m: None)


def _run_train(store: Store, cfg: MupcAnalysisParams, unit: str) -> tuple[list[Output], Output]:
    """All parts a train unit yields (each stored at once, as the runner writes them) and its final output."""
    run = getattr(train_module, STUDY.stage("train").function(cfg, unit))  # as the runner picks it
    result = run(store.ctx(cfg, "train", unit), unit)
    parts = []
    while True:
        try:
            part = next(result)
        except StopIteration as stop:
            store.add(unit, stop.value)
            return parts, stop.value
        store.add(unit, part)
        parts.append(part)


# ----------------------------------------------------------------------------- params


def test_auto_spectra_are_dense_on_a_gpu_and_banded_on_the_cpu_in_the_unit_and_its_plan():
    """The paper's full spectra at n = N·H up to 16,384: a dense eigvalsh on the CPU took the plan to 88 h."""
    paper = load_section(MupcAnalysisParams, _raw(), NAME, "paper")
    assert paper.hessian.backend_on("cuda:0") == "dense_torch" and paper.hessian.backend_on("cpu") == "banded"
    fixed = dataclasses.replace(paper.hessian, spectrum_backend="dense_torch")
    assert fixed.backend_on("cpu") == "dense_torch"
    for device, route in (("cpu", "banded"), ("cuda", "dense_torch")):
        methods = {w.shape["method"] for w in analysis_cost.hessian_cost(paper, "hessian_init", device).work}
        assert methods == {"dense", "banded", route}  # the paper's cells below its slices: n ≤ 4,096, the band's
    lanczos = dataclasses.replace(paper, hessian=dataclasses.replace(paper.hessian, band_max_n=1024))
    methods = {w.shape["method"] for w in analysis_cost.hessian_cost(lanczos, "hessian_init", "cpu").work}
    assert methods == {"dense", "banded", "structured"}


def test_every_profile_resolves_to_todays_values():
    raw = _raw()
    values = {p: load_section(MupcAnalysisParams, raw, NAME, p) for p in ("smoke", "gpu_medium", "paper")}
    smoke, gpu, paper = values["smoke"], values["gpu_medium"], values["paper"]
    assert (smoke.threads, gpu.threads, paper.threads) == (1, 4, 4)
    assert smoke.hessian.widths == [2, 4, 8] and smoke.hessian.spectrum_backend == "banded"
    assert smoke.hessian.dense_max_n == 32 and paper.hessian.dense_max_n == 512
    assert gpu.hessian.spectrum_backend == paper.hessian.spectrum_backend == "auto" and gpu.hessian.widths[-1] == 64
    assert [f.inits for f in paper.hessian.groups] == [["one_over_N", "standard_gauss", "standard", "orthogonal"],
                                                         ["standard_gauss"]]
    assert paper.hessian.seeds == [0, 1, 2] and smoke.hessian.seeds == gpu.hessian.seeds == [0]
    assert smoke.fwd_pass.checks == 3 and gpu.fwd_pass.checks == 5 and gpu.fwd_pass.slice_widths == [128, 512]
    assert paper.fwd_pass.depths[-1] == 512 and paper.fwd_pass.train_images is None
    assert smoke.theory_grid.iters == 32 and gpu.theory_grid == paper.theory_grid
    assert (smoke.theory_width.eq_max_steps, gpu.theory_width.eq_max_steps, paper.theory_width.eq_max_steps) == (
        1500, 5000, 20000)
    assert (smoke.theory_width.depth, gpu.theory_width.iters, paper.theory_width.widths[-1]) == (2, 200, 512)


@pytest.mark.parametrize("edit,needles", [
    (lambda s: s["profiles"]["smoke"]["hessian"].update(acts=["sigmoid"]),
     ["mupc_analysis.hessian.acts[0] = 'sigmoid'", "'linear', 'tanh', 'relu'"]),
    (lambda s: s["profiles"]["smoke"]["fwd_pass"].update(depths=[8, 10]), ["fwd_pass.depths = 10", "multiples of 4"]),
    (lambda s: s["profiles"]["smoke"]["fwd_pass"].update(slice_depth=12), ["fwd_pass.slice_depth = 12"]),
    (lambda s: s["profiles"]["smoke"]["theory_grid"].update(plot_iters=[0, 900]),
     ["theory_grid.plot_iters = 900", "below iters = 32"]),
    (lambda s: s["profiles"]["smoke"]["theory_width"].update(plot_widths=[3]), ["theory_width.plot_widths = 3"]),
    (lambda s: s["profiles"]["smoke"]["hessian"]["groups"][0].update(param="depth_mup"),
     ["hessian.groups[0].param = 'depth_mup'"]),
    (lambda s: s["profiles"]["smoke"]["hessian"].update(widths=[2, 2]), ["without repeated values"]),
    (lambda s: s["hessian"].update(bogus=1), ["mupc_analysis.hessian.bogus is not a known key"]),
    (lambda s: s["profiles"]["smoke"].update(threads=0), ["mupc_analysis.threads = 0"]),
])
def test_params_errors_name_key_value_allowed(edit, needles):
    raw = copy.deepcopy(_raw())
    load_section(MupcAnalysisParams, raw, NAME, "smoke")
    edit(raw[NAME])
    with pytest.raises(ConfigError) as err:
        load_section(MupcAnalysisParams, raw, NAME, "smoke")
    for needle in needles:
        assert needle in str(err.value), str(err.value)


def test_the_hessian_groups_old_name_is_refused_with_its_new_one():
    raw = _raw()
    section = copy.deepcopy(raw[NAME])
    section["hessian"]["families"] = section["hessian"].pop("groups")
    with pytest.raises(ConfigError, match=re.escape("mupc_analysis.hessian.families = [")) as exc:
        validate(MupcAnalysisParams, resolve(section, "paper", NAME), NAME)
    assert "allowed: the same value under its new name, groups (mupc_analysis.hessian.groups)" in str(exc.value)


def test_an_override_applies_to_its_profile_only():
    raw = copy.deepcopy(_raw())
    raw[NAME]["profiles"]["paper"] = {"theory_grid": {"iters": 0}}
    load_section(MupcAnalysisParams, raw, NAME, "smoke")
    with pytest.raises(ConfigError, match=r"theory_grid\.iters = 0"):
        load_section(MupcAnalysisParams, raw, NAME, "paper")


def test_declaration_units_reads_and_keys():
    cfg = _cfg()
    train_f, extract_f, render_f = (STUDY.stage(k) for k in ("train", "extract", "render"))
    assert list(train_f.units(cfg)) == ["hessian_init", "fwd_pass", "theory_grid", "theory_width"]
    assert list(extract_f.units(cfg)) == ["analysis_metrics"]
    assert list(render_f.units(cfg)) == list(FAMILIES)
    assert train_f.resumable and extract_f.metrics
    assert list(train_f.datasets(cfg, "hessian_init")) == [] and list(train_f.datasets(cfg, "fwd_pass")) == ["mnist"]
    assert train_f.keys(cfg, "hessian_init") == ["threads", "legacy_noskip_branch_scale", "hessian"]
    assert {u for _, u in extract_f.reads(cfg, "analysis_metrics")} == set(cfg.train_units)
    for fam, spec in FAMILIES.items():
        assert list(render_f.reads(cfg, fam)) == [("train", spec.sources["source"])]
        assert all(k.split(".")[0] == spec.sources["source"].replace("_init", "") for k in render_f.keys(cfg, fam))
    assert "fwd_pass.checks" in render_f.keys(cfg, "F6") and "fwd_pass.checks" not in render_f.keys(cfg, "F5")
    without = dataclasses.replace(cfg, train_units=["hessian_init", "fwd_pass", "theory_width"])
    assert "F26" not in render_f.units(without) and "F27" in render_f.units(without)  # no train unit, no figure


def test_layout_keys():
    hp = _cfg({"hessian": TINY_HESSIAN}).hessian
    configs = hessian_configs(hp)
    assert len(configs) == 4 and configs[0] == {"act": "linear", "skips": True, "init": "standard_gauss",
                                                "param": "mupc", "activity_decay": 0.0, "seed": 0}
    assert hessian_key(configs[0]) == "linear/skips/standard_gauss_weight_init/mupc_param/activity_decay_0/0"
    assert fwd_key("tanh", "adam", "sp_skips") == "tanh/adam/sp_skips"
    assert theory_key("relu", "mupc", 8, 2) == "relu/mupc/width_8/2_n_hidden"


# ----------------------------------------------------------------------------- hessian_init (real, tiny)


@pytest.fixture(scope="module")
def hessian_store() -> tuple[Store, MupcAnalysisParams, list[Output], Output]:
    cfg = _cfg({"hessian": TINY_HESSIAN})
    store = Store()
    parts, final = _run_train(store, cfg, "hessian_init")
    return store, cfg, parts, final


def test_hessian_unit_yields_one_part_per_cell(hessian_store):
    store, cfg, parts, final = hessian_store
    hp = cfg.hessian
    configs = hessian_configs(hp)
    assert len(parts) == len(configs) * len(hp.widths) * len(hp.depths) == 16
    assert parts[0].part == f"{hessian_key(configs[0])}/width_2/2_n_hidden"
    assert [r.name for r in final.runs] == [hessian_key(c) for c in configs]
    assert set(final.runs[0].metrics) == {f"{m}_N{N}_H{H}"
                                          for m in ("kappa", "lambda_max", "lambda_min", "eig_seconds")
                                          for N in hp.widths for H in hp.depths}
    assert not any("seconds" in key for p in parts for key in p.json["cell.json"]["info"])  # times: MLflow only
    assert final.json["configs.json"] == {"configs": [hessian_key(c) for c in configs]}
    cells = {(c["N"], c["H"]): c for c in final.json[f"{hessian_key(configs[0])}/summary.json"]["cells"]}
    assert cells[(2, 2)]["method_lambda_min"] == "dense"  # n = 4 <= dense_max_n, not a slice
    assert cells[(4, 3)]["method_lambda_min"] == "banded" and cells[(4, 3)]["full_spectrum"]  # slice, n = 12
    assert all(c["kappa"] >= 1 for c in cells.values())
    assert all(c["autodiff_max_abs_diff"] < 1e-10 for c in cells.values() if c["n"] <= 8)  # autodiff_check_max_n
    assert "autodiff_max_abs_diff" not in cells[(4, 3)]
    assert all(c["theory_vs_num_max_abs_diff"] < 1e-10 for c in cells.values())  # linear: H_theory = H_num
    spectra = store.files["hessian_init"][f"{hessian_key(configs[0])}/width_4/3_n_hidden/cell.npz"]
    assert spectra["num_hessian_eigenvals"].shape == (12,) and spectra["kappa"] == cells[(4, 3)]["kappa"]


def test_hessian_unit_resumes_unchanged_cells(hessian_store):
    done, cfg, _, final = hessian_store
    store = Store()
    store.files = copy.deepcopy(done.files)
    again, final2 = _run_train(store, cfg, "hessian_init")
    assert again == [] and final2.json == final.json  # every cell kept
    wider = _cfg({"hessian": {**TINY_HESSIAN, "depths": [2, 3, 4]}})
    parts, _ = _run_train(store, wider, "hessian_init")
    # H = 3 is no longer the slice column (full spectrum -> extremes); N = 2 at H = 2 is unchanged
    redone = {p.part.split("/", 6)[-1] for p in parts}
    assert redone == {"width_2/3_n_hidden", "width_2/4_n_hidden", "width_4/4_n_hidden"}
    assert len(parts) == 4 * 3


def _other_processes_in_reverse(fn, items, **_):
    """A mapper as Ray's: every task pickled to another process, results in another order than submitted."""
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {i: pool.submit(fn, items[i]) for i in reversed(range(len(items)))}
        for i in reversed(range(len(items))):
            yield i, futures[i].result()


def test_hessian_cells_as_tasks_elsewhere_and_out_of_order_give_the_same_unit(hessian_store):
    """The cells are ``ctx.map`` tasks (a cluster computes the paper's spectra side by side): pickled to
    other processes and finished in reverse order, every cell and summary is the same."""
    _, cfg, parts, final = hessian_store
    store = Store()
    ctx = dataclasses.replace(store.ctx(cfg, "train", "hessian_init"), mapper=_other_processes_in_reverse)
    result, elsewhere = train_module.train_hessian(ctx, "hessian_init"), []
    while True:
        try:
            elsewhere.append(next(result))
        except StopIteration as stop:
            final2 = stop.value
            break
    assert [p.part for p in elsewhere] == [p.part for p in parts][::-1]
    by_part = {p.part: p for p in parts}
    for p in elsewhere:
        assert p.json == by_part[p.part].json
        for name, value in p.arrays["cell.npz"].items():
            np.testing.assert_array_equal(value, by_part[p.part].arrays["cell.npz"][name])
    assert final2.json == final.json and [r.params for r in final2.runs] == [r.params for r in final.runs]


@pytest.mark.parametrize("share,host", [(0.0, 0), (0.5, 405), (0.25, 202), (1.0, 810)])
def test_a_share_of_the_gpus_full_spectra_goes_to_the_hosts_band_route(share, host):
    """host_share on the paper grid: of the 810 full spectra above dense_max_n (each of the 90 configs' N = 128
    row and H = 128 column beyond n = 512: 9 cells), ⌊810·share⌋ go to the band route, spread evenly through the
    grid's order; the plan's works split the same way (the band ones on the host); on the CPU every one is
    banded whatever the share."""
    paper = load_section(MupcAnalysisParams, _raw(), NAME, "paper")
    hp = dataclasses.replace(paper.hessian, host_share=share)
    routes = spectrum_routes(hp, "cuda")
    order = list(routes.values())
    assert len(order) == 810 and order.count("banded") == host
    if share == 0.5:
        assert order[:4] == ["dense_torch", "banded", "dense_torch", "banded"]
    assert set(spectrum_routes(hp, "cpu").values()) == {"banded"}
    cfg = dataclasses.replace(paper, hessian=hp)
    works = analysis_cost.hessian_cost(cfg, "hessian_init", "cuda").work
    full = [w for w in works if 128 in (w.shape["N"], w.shape["H"]) and w.shape["method"] != "dense"]
    tasks = {m: sum(w.tasks for w in full if w.shape["method"] == m) for m in ("banded", "dense_torch")}
    assert tasks == {"banded": host, "dense_torch": 810 - host}
    below = [w for w in works if w not in full and w.shape["method"] != "dense"]  # their extremes, from the band
    assert {w.shape["method"] for w in below} == {"banded"} and sum(w.tasks for w in below) == 540
    assert all(w.host == (w.shape["method"] != "dense_torch") for w in works)


def test_cells_on_either_route_give_the_same_spectra(hessian_store, monkeypatch):
    """The hessian unit with every second full spectrum by torch's dense eigvalsh (as a GPU stage would, here
    on the CPU) and the others banded: each cell records its route in its settings and its method, and its
    eigenvalues equal the all-banded unit's to 1e-10."""
    _, cfg, parts, _ = hessian_store
    real = train_module.spectrum_routes

    def split(hp, device):
        return {k: ("dense_torch" if j % 2 == 0 else r) for j, (k, r) in enumerate(real(hp, device).items())}

    monkeypatch.setattr(train_module, "spectrum_routes", split)
    mixed, _ = _run_train(Store(), cfg, "hessian_init")
    by_part = {p.part: p for p in parts}
    routes = [p.json["cell.json"]["settings"]["backend"] for p in mixed]
    assert routes.count("dense_torch") >= 2 and routes.count("banded") >= 2
    for p in mixed:
        info = p.json["cell.json"]["info"]
        if p.json["cell.json"]["settings"]["backend"] == "dense_torch" and info["n"] > TINY_HESSIAN["dense_max_n"]:
            assert "dense_torch" in json.dumps(info)
        for name, value in p.arrays["cell.npz"].items():
            np.testing.assert_allclose(value, by_part[p.part].arrays["cell.npz"][name], rtol=1e-10, atol=1e-10)


TINY_GRID = {"theory_grid": {"widths": [1, 2], "depths": [1, 2], "iters": 4, "train_images": 256,
                             "plot_iters": [0, 3]}}


def _collect(result: Any) -> tuple[list[Output], Output]:
    parts = []
    while True:
        try:
            parts.append(next(result))
        except StopIteration as stop:
            return parts, stop.value


def test_theory_nets_are_parts_that_resume_and_tasks_that_run_anywhere(tmp_path, monkeypatch, data_mirror):
    """Each theory net is a part with its run, written when trained (a stopped paper unit resumes); a net
    trained with the same settings is kept; the nets are ctx.map tasks, pickled to other processes and
    finished in reverse order with the same numbers."""
    (tmp_path / "artifacts").mkdir()
    (tmp_path / "artifacts" / "data").symlink_to(data_mirror)
    monkeypatch.setenv("TRAINSCAPE_ROOT", str(tmp_path))  # the other processes inherit it and read the same MNIST
    cfg = _cfg(TINY_GRID)
    store = Store()
    parts, final = _run_train(store, cfg, "theory_grid")
    keys = [theory_key("linear", p, N, H) for p in ("sp", "mupc") for N in (1, 2) for H in (1, 2)]
    assert [p.part for p in parts] == keys and final.arrays == {} and final.runs == []
    assert all(len(p.runs) == 1 and p.runs[0].name == p.part for p in parts)
    assert len(parts[0].arrays["theory.npz"]["loss_energy_ratios"]) == 4
    again, _ = _run_train(store, cfg, "theory_grid")
    assert again == []  # every net kept
    wider = _cfg({"theory_grid": {**TINY_GRID["theory_grid"], "widths": [1, 2, 4]}})
    more, _ = _run_train(store, wider, "theory_grid")
    assert [p.part for p in more] == [theory_key("linear", p, 4, H) for p in ("sp", "mupc") for H in (1, 2)]
    ctx = dataclasses.replace(Store().ctx(cfg, "train", "theory_grid"), mapper=_other_processes_in_reverse)
    elsewhere, _ = _collect(train_module.train_theory_grid(ctx, "theory_grid"))
    assert [p.part for p in elsewhere] == keys[::-1]
    by_part = {p.part: p for p in parts}
    for p in elsewhere:
        for name, value in p.arrays["theory.npz"].items():
            np.testing.assert_array_equal(value, by_part[p.part].arrays["theory.npz"][name])


# ----------------------------------------------------------------------------- fwd_pass's spectral norms


@pytest.mark.parametrize("shape", [(2, 16, 16), (3, 8, 20), (20, 8), (1, 5)])
def test_spectral_norm_is_the_largest_singular_value(shape):
    """√λ_max of the smaller Gram matrix equals the SVD's σ_max (square, wide, tall, one row: w_out is 10×N)."""
    w = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    got = fwdpass.spectral_norm(w)
    assert got.dtype == torch.float64 and got.shape == shape[:-2]
    np.testing.assert_allclose(got.numpy(), torch.linalg.matrix_norm(w.double(), ord=2).numpy(), rtol=1e-12)


def test_fwd_pass_plan_counts_deep_cells_without_skips_on_a_cpu_at_their_measured_slowdown():
    """Nets without skips at depth: their float32 activities and gradients fall below the normal range, and some
    CPUs compute on them many times slower; on a CPU each such cell is a work of its own whose slowdown the probe
    ``fwd_subnormals`` measures (its variant, act and depth), the FLOPs unchanged; on a GPU none."""
    cfg = _cfg(profile="paper")
    cpu, cuda = (analysis_cost.fwd_cost(cfg, "fwd_pass", d) for d in ("cpu", "cuda"))
    slowed = [w for w in cpu.work if w.slowdown]
    # L in {128, 256, 512} x the three no-skip variants x 3 acts x 4 widths
    assert len(slowed) == 108 and "108 cells without skips at L >= 128 counted at the slowdown" in cpu.note
    assert {w.slowdown[1]["variant"] for w in slowed} == {"sp_no_skips", "depth_mup_no_skips", "orthogonal"}
    assert {w.slowdown[1]["L"] for w in slowed} == {128, 256, 512} and {w.shape["L"] for w in slowed} == {128, 256, 512}
    assert all(w.slowdown[0] == "fwd_subnormals" and w.probe == "fwd_step" for w in slowed)
    assert not any(w.slowdown for w in cuda.work) and "slowdown" not in cuda.note
    assert cpu.flops == pytest.approx(cuda.flops, rel=1e-12)
    rest = {w.label: w for w in cpu.work}["BP N=512 L=256, 2 optimisers stacked"]
    assert rest.flops == pytest.approx(6 / 15 * {w.label: w for w in cuda.work}[rest.label].flops, rel=1e-12)
    with_skips = dataclasses.replace(cfg.fwd_pass, variants=["sp_skips", "depth_mup_skips"])
    skips = dataclasses.replace(cfg, fwd_pass=with_skips)
    assert not any(w.slowdown for w in analysis_cost.fwd_cost(skips, "fwd_pass", "cpu").work)


def test_the_subnormal_probe_times_a_cell_without_skips_against_the_rate_probes_net():
    """Both steps run (a short net), the slowed one built from the cell's variant and act at full depth."""
    slowed, reference = analysis_probe.fwd_subnormals(variant="orthogonal", act="relu", L=4, optims=["sgd", "adam"],
                                                      threads=1, device="cpu", budget=1e9)
    slowed()
    reference()


def test_fwd_pass_plan_counts_one_init_draw_per_init_gain_and_shape():
    """The plan's init work: one draw per (init, N, L) for every cell of that init and shape, and for the
    orthogonal init one stream of QRs per width, the deepest net's layers, for every depth and both gains (tanh's
    differs)."""
    cfg = _cfg(profile="paper")
    work = {w.label: w for w in analysis_cost.fwd_cost(cfg, "fwd_pass", "cpu").work}
    orth = work["orthogonal init N=1024, 510 hidden layers for 6 depths and 2 gains"]
    assert orth.probe == "fwd_init" and orth.shape["init"] == "orthogonal" and orth.shape["L"] == 512
    assert orth.flops == pytest.approx(511 * (1024**2 + 8 * 1024**3 / 3), rel=1e-12)
    assert not [label for label in work if label.startswith("orthogonal init") and " L=" in label]
    one = dataclasses.replace(cfg, fwd_pass=dataclasses.replace(cfg.fwd_pass, widths=[64], depths=[8],
                                                                  slice_widths=[64], slice_depth=8))
    labels = [w.label for w in analysis_cost.fwd_cost(one, "fwd_pass", "cpu").work if w.probe == "fwd_init"]
    assert "orthogonal init N=64, 6 hidden layers for 1 depth and 2 gains" in labels
    assert work["standard init N=128 L=16, 1 draw"].flops == 15 * 128**2
    assert work["BP N=128 L=16, 2 optimisers stacked"].shape["optims"] == ["sgd", "adam"]


def test_fwd_pass_cells_that_share_a_draw_are_the_cells_that_draw_their_own():
    """fwd_draws groups every (variant, act) cell once, by init, gain and shape; a cell run from its group's
    one draw (left unchanged by the cells before it) gives the numbers of a cell drawing its own weights."""
    fp = dataclasses.replace(_cfg().fwd_pass, widths=[6], depths=[4], checks=2, batch_size=8)
    groups = fwd_draws(fp)
    cells = [(v, a) for _, group in groups for v, a in group]
    assert sorted(cells) == sorted((v, a) for v in fp.variants for a in fp.acts)
    for (init, gain, N, L), group in groups:
        assert {(fwdpass.net_spec(v, a, N, L).init, fwdpass.net_spec(v, a, N, L).orth_gain) for v, a in group} \
            == {(init, gain)}
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(8, 784, generator=g), torch.eye(10)[torch.randint(0, 10, (8,), generator=g)])
               for _ in range(2)]
    (_, _, N, L), group = next((k, c) for k, c in groups if len(c) > 1)
    initial = fwdpass.initial_weights(fwdpass.net_spec(*group[0], N, L), fp.seed)
    for variant, act in group:
        spec = fwdpass.net_spec(variant, act, N, L)
        shared = fwdpass.run_cell(spec, ["sgd", "adam"], batches, 0.1, initial, "cpu")
        own = fwdpass.run_cell(spec, ["sgd", "adam"], batches, 0.1, fwdpass.initial_weights(spec, fp.seed), "cpu")
        assert torch.equal(shared, own), (variant, act)


# ----------------------------------------------------------------------------- synthetic fwd_pass / theory


def _fwd_store(store: Store, cfg: MupcAnalysisParams) -> None:
    fp, rng = cfg.fwd_pass, np.random.default_rng(0)
    shape = (5, fp.checks, len(fp.widths), len(fp.depths))
    store.files["fwd_pass"] = {f"{fwd_key(a, o, v)}/fwd_pass.npz": {f"{m}_per_N_L": 0.1 + rng.random(shape)
                                                                     for m in FWD_METRICS}
                               for a in fp.acts for o in fp.optims for v in fp.variants}


def _theory_run(rng: np.random.Generator, iters: int, linear: bool) -> dict[str, np.ndarray]:
    energies = 1.0 + rng.random(iters)
    losses = energies * (1.0 + 10 * rng.random(iters))
    out = {"train_losses": losses, "train_energies": energies, "loss_energy_ratios": losses / energies}
    out.update({"closed_form_energies": energies} if linear else {"eq_residuals": 1e-9 * rng.random(iters)})
    return out


def _theory_store(store: Store, cfg: MupcAnalysisParams) -> None:
    tg, tw, rng = cfg.theory_grid, cfg.theory_width, np.random.default_rng(1)
    store.files["theory_grid"] = {f"{theory_key('linear', p, N, H)}/theory.npz": _theory_run(rng, tg.iters, True)
                                  for p in tg.param_lrs for N in tg.widths for H in tg.depths}
    store.files["theory_width"] = {
        f"{theory_key(a, p, N, tw.depth)}/theory.npz": _theory_run(rng, tw.iters, a == "linear")
        for a in tw.acts for p in tw.params for N in tw.widths}
    store.files["theory_width"].update({  # what train_nets records of each net (the render names its solver)
        f"{theory_key(a, p, N, tw.depth)}/net.json": {"settings": {} if a == "linear" else {
            "eq_solver": tw.eq_solver, "eq_tol": tw.eq_tol}} for a in tw.acts for p in tw.params for N in tw.widths})


@pytest.fixture(scope="module")
def full_store(hessian_store) -> tuple[Store, MupcAnalysisParams]:
    store, cfg, _, _ = hessian_store
    _fwd_store(store, cfg)
    _theory_store(store, cfg)
    return store, cfg


def test_extract_gathers_the_headline_numbers(full_store):
    store, cfg = full_store
    out = extract(store.ctx(cfg, "extract", "analysis_metrics"), "analysis_metrics")
    m = out.metrics
    t = out.tables["runs.csv"]  # one row per Hessian cell, forward-pass cell and theory net
    hp, fp, tg, tw = cfg.hessian, cfg.fwd_pass, cfg.theory_grid, cfg.theory_width
    counts = t["unit"].value_counts().to_dict()
    assert counts == {"hessian_init": len(hessian_configs(hp)) * len(hp.widths) * len(hp.depths),
                      "fwd_pass": len(fp.acts) * len(fp.optims) * len(fp.variants) * len(fp.widths) * len(fp.depths),
                      "theory_grid": len(tg.param_lrs) * len(tg.widths) * len(tg.depths),
                      "theory_width": len(tw.acts) * len(tw.params) * len(tw.widths)}
    assert not t.duplicated(["unit", "run"]).any()
    assert {"status", "kappa", "final_ratio", "rms_final_hidden_L2", "N"} <= set(t.columns)
    assert set(m) == {"profile", "hessian_init", "fwd_pass", "theory_grid", "theory_width"} and m["profile"] == "smoke"
    assert out.json["headline.json"] == m
    # κ and λ_min at the grid corners of the linear configs, F3's κ(D), κ(H_theory), |H_theory − H_num|, and
    # the tanh configs' κ, λ_min, λ_max apart (F1 beyond linear nets)
    configs = ("mupc_standard_gauss_skips", "sp_standard_no_skips")
    assert set(m["hessian_init"]) == ({f"{q}/{c}" for q in ("kappa", "lambda_min", "D_kappa", "H_theory_kappa",
                                                            "theory_vs_num") for c in configs}
                                      | {f"nonlinear_{q}/tanh_{c}" for q in ("kappa", "lambda_min", "lambda_max")
                                         for c in configs}
                                      | {f"autodiff_vs_blocks/{a}_{c}" for a in ("linear", "tanh") for c in configs})
    tanh = next(x for x in hessian_configs(cfg.hessian) if x["act"] == "tanh" and x["param"] == "mupc")
    tanh_cells = store.files["hessian_init"][f"{hessian_key(tanh)}/summary.json"]["cells"]
    assert m["hessian_init"]["nonlinear_kappa/tanh_mupc_standard_gauss_skips"] == {
        f"N{x['N']}_H{x['H']}": x["kappa"] for x in tanh_cells}
    c = hessian_configs(cfg.hessian)[0]
    cells = store.files["hessian_init"][f"{hessian_key(c)}/summary.json"]["cells"]
    assert m["hessian_init"]["kappa/mupc_standard_gauss_skips"] == {f"N{x['N']}_H{x['H']}": x["kappa"] for x in cells}
    assert m["hessian_init"]["lambda_min/mupc_standard_gauss_skips"] == {f"N{x['N']}_H{x['H']}": x["lambda_min"]
                                                                          for x in cells}
    for q, field in (("D_kappa", "D_kappa"), ("H_theory_kappa", "H_theory_kappa"),
                     ("theory_vs_num", "theory_vs_num_max_abs_diff")):
        assert m["hessian_init"][f"{q}/mupc_standard_gauss_skips"] == {f"N{x['N']}_H{x['H']}": x[field]
                                                                        for x in cells}
    # invariants 1–2: the autodiff Hessian against the block builder, at every cell where the unit ran it
    autodiff = {f"N{x['N']}_H{x['H']}": x["autodiff_max_abs_diff"] for x in cells if "autodiff_max_abs_diff" in x}
    assert autodiff and m["hessian_init"]["autodiff_vs_blocks/linear_mupc_standard_gauss_skips"] == autodiff
    assert len(autodiff) == sum(x["N"] * x["H"] <= cfg.hessian.autodiff_check_max_n for x in cells)
    fp = cfg.fwd_pass
    arr = store.files["fwd_pass"][f"{fwd_key('linear', 'sgd', 'sp_skips')}/fwd_pass.npz"]["avg_activity_l2_per_N_L"]
    assert m["fwd_pass"]["rms_t0_hidden_L2/linear_sp_skips"][f"N{fp.widths[1]}_L{fp.depths[0]}"] == arr[2, 0, 1, 0]
    # F6: the raw weight's spectral norm at step 0 and, per optimiser, its largest relative change over the steps
    cell = f"N{fp.widths[1]}_L{fp.depths[-1]}"
    spec = store.files["fwd_pass"][f"{fwd_key('linear', 'sgd', 'depth_mup_skips')}/fwd_pass.npz"][
        "param_spectral_norms_per_N_L"]
    assert m["fwd_pass"]["spectral_t0_hidden_L2/linear_depth_mup_skips"][cell] == spec[2, 0, 1, -1]
    s = spec[2, :, 1, -1]
    assert m["fwd_pass"]["spectral_drift_hidden_L2/linear_sgd_depth_mup_skips"][cell] == pytest.approx(
        max(abs(s[t] / s[0] - 1) for t in range(1, len(s))))
    assert {k for k in m["fwd_pass"] if k.startswith("spectral_drift")} == {
        f"spectral_drift_hidden_L2/linear_{o}_{v}" for o in fp.optims for v in fp.variants}
    assert set(m["theory_grid"]) == {f"ratio_{t}/{p}" for t in ("t0", "final") for p in ("sp", "mupc")}
    assert len(m["theory_grid"]["ratio_t0/sp"]) == len(m["theory_grid"]["ratio_final/mupc"]) == 9
    grid_run = store.files["theory_grid"][f"{theory_key('linear', 'mupc', 2, 2)}/theory.npz"]["loss_energy_ratios"]
    assert m["theory_grid"]["ratio_final/mupc"]["N2_H2"] == grid_run[-1] and len(grid_run) == cfg.theory_grid.iters
    tanh = m["theory_width"]["ratio_t0/tanh_mupc_H2"]
    assert set(tanh) == {f"N{N}{s}" for N in cfg.theory_width.widths for s in ("", "_max_eq_residual")}
    assert "N1_max_eq_residual" not in m["theory_width"]["ratio_t0/linear_sp_H2"]
    assert out.run_metrics["theory_grid/ratio_t0/sp/N1_H1"] == m["theory_grid"]["ratio_t0/sp"]["N1_H1"]


# ----------------------------------------------------------------------------- figures (plotly, as the notebook)


def _panels(fig: go.Figure) -> dict[str, list]:
    """The traces of each subplot, by x axis ("x", "x2", …)."""
    out: dict[str, list] = {}
    for t in fig.data:
        out.setdefault(t.xaxis or "x", []).append(t)
    return out


def _axis(fig: go.Figure, anchor: str, xy: str = "x") -> Any:
    """The layout axis a trace's ``xaxis``/``yaxis`` anchor ("x2") names."""
    return fig.layout[f"{xy}axis{anchor[1:]}"]


def _titles(fig: go.Figure) -> list[str]:
    return [a.text for a in fig.layout.annotations if a.yanchor == "bottom" and a.text]


def _legend(fig: go.Figure) -> list[str]:
    return [t.name for t in fig.data if t.showlegend is not False]


def _plotly_record(f: Any, fam: str, src: str) -> go.Figure:
    """The figure record of a plotly-only figure (kaleido writes its PNG/PDF), with its title and size."""
    assert f.family == fam and f.sources == [("train", src)] and f.mpl is None and f.caption and f.seed_figure
    assert isinstance(f.plotly, go.Figure) and not f.plotly.frames
    assert f.plotly.layout.title.text and f.plotly.layout.width and f.plotly.layout.height
    return f.plotly


def test_phase_diagrams_are_matplotlib_and_every_other_family_plotly(full_store):
    """As the notebook draws them; a family's entry says whether it draws kaleido's images (what it draws shows
    it), and the render stage checks for Chromium before it computes such a family."""
    from pipeline.writer.figures import exports_plotly_images, kaleido_static

    store, cfg = full_store
    for fam, entry in FAMILIES.items():
        out = render(store.ctx(cfg, "render", fam), fam)
        assert any(kaleido_static(f) for f in out.figures) is entry.plotly_images, fam
        assert entry.plotly_images is (fam not in ("F2", "F4", "F26")), fam
        assert exports_plotly_images("mupc_analysis", fam) is entry.plotly_images, fam
    plt.close("all")


def test_grid_labels():
    assert [pow2(v) for v in (1, 2, 8, 3, 0.5)] == ["2<sup>0</sup>", "2<sup>1</sup>", "2<sup>3</sup>", "3",
                                                    "2<sup>-1</sup>"]
    assert [pow2_tex(v) for v in (1, 2, 64)] == ["$2^{0}$", "$2^{1}$", "$2^{6}$"]


def _images(fig: Any) -> list:
    return [im for ax in fig.axes for im in ax.images]


def _matplotlib_record(f: Any, fam: str, src: str) -> Any:
    assert f.family == fam and f.sources == [("train", src)] and f.plotly is None and f.caption and f.seed_figure
    assert isinstance(f.mpl, plt.Figure) and f.mpl.get_suptitle()
    return f.mpl


@pytest.mark.parametrize("fam", ["F1", "F3"])
def test_histogram_figures(full_store, fam):
    """plot_hessian_eigenvalues_slice: overlaid go.Histogram (probability, 50 bins, opacity 0.75), log y with a
    tick per decade; across H Blues, across N Reds, both sample_colorscale(len(widths) + 3)[3:]."""
    store, cfg = full_store
    hp = cfg.hessian
    figs = drawer(fam)(lambda name: store.files["hessian_init"][name], cfg, "hessian_init")
    rows = len(hp.acts) if fam == "F1" else 3  # F1: one row per act; F3: D, O, H_theory (linear)
    assert [f.id for f in figs] == [f"{fam}_mupc_standard_gauss_skips_decay0_seed0",
                                    f"{fam}_sp_standard_no_skips_decay0_seed0"]
    blues = sample_colorscale("Blues", len(hp.widths) + 3)[3:]
    reds = sample_colorscale("Reds", len(hp.widths) + 3)[3:]
    for f in figs:
        fig = _plotly_record(f, fam, "hessian_init")
        assert fig.layout.barmode == "overlay" and fig.layout.title.text.endswith(f.id[len(fam) + 1:])
        panels = list(_panels(fig).items())
        assert len(panels) == 2 * rows
        titles = _titles(fig)
        assert all("N=4" in t for t in titles[0::2]) and all("H=3" in t for t in titles[1::2])
        for k, (anchor, traces) in enumerate(panels):
            across_h = k % 2 == 0
            assert [t.type for t in traces] == ["histogram"] * len(hp.depths if across_h else hp.widths)
            assert [t.name for t in traces] == (["H=2<sup>1</sup>", "H=3"] if across_h else
                                                ["N=2<sup>1</sup>", "N=2<sup>2</sup>"])
            assert [t.marker.color for t in traces] == (blues if across_h else reds)[: len(traces)]
            assert all(t.histnorm == "probability" and t.nbinsx == 50 and t.opacity == 0.75 for t in traces)
            assert all(len(t.x) and np.isfinite(np.asarray(t.x, dtype=float)).all() for t in traces)
            x, y = _axis(fig, anchor), _axis(fig, "y" + anchor[1:], "y")
            assert x.title.text.startswith("λ(") and (y.type, y.dtick, y.title.text) == ("log", 1, "Density (log)")
        assert sorted(_legend(fig)) == sorted({t.name for t in fig.data})  # each name once


@pytest.mark.parametrize("fam,panels", [("F2", 3 * 2), ("F4", 9)])
def test_phase_diagram_figures(full_store, fam, panels):
    """Phase diagrams as the notebook's plot_metric_phase_diagram: matplotlib imshow, origin lower, bicubic,
    viridis, rows N and columns H ticked 2^k; κ on a LogNorm unless sp without skips (and O's κ, which is 1)."""
    store, cfg = full_store
    hp = cfg.hessian
    figs = drawer(fam)(lambda name: store.files["hessian_init"][name], cfg, "hessian_init")
    assert len(figs) == 2
    for f in figs:
        fig = _matplotlib_record(f, fam, "hessian_init")
        assert fig.get_suptitle().endswith(f.id[len(fam) + 1:])
        ims = _images(fig)
        assert len(ims) == panels
        for im in ims:
            ax = im.axes
            assert im.get_interpolation() == "bicubic" and im.origin == "lower" and im.get_cmap().name == "viridis"
            assert np.asarray(im.get_array()).shape == (2, 2) and np.isfinite(np.asarray(im.get_array())).any()
            assert (ax.get_xlabel(), ax.get_ylabel()) == ("$H$", "$N$")
            assert [t.get_text() for t in ax.get_xticklabels()] == [pow2_tex(h) for h in hp.depths]
            assert [t.get_text() for t in ax.get_yticklabels()] == [pow2_tex(n) for n in hp.widths]
    # the κ panel of H_z (F2) and of H_theory (F4): a LogNorm with mupc and skips, the values with sp no skips
    for f, log in zip(figs, (True, False), strict=True):
        c = next(c for c in hessian_configs(hp) if f.id.endswith(_group(c)) and c["act"] == "linear")
        cells = {(x["N"], x["H"]): x for x in store.files["hessian_init"][f"{hessian_key(c)}/summary.json"]["cells"]}
        key = "kappa" if fam == "F2" else "H_theory_kappa"
        kappa = np.array([[cells[(N, H)][key] for H in hp.depths] for N in hp.widths])
        im = next(im for im in _images(f.mpl) if im.axes.get_title().startswith(
            "linear: $\\kappa$" if fam == "F2" else "H_theory: $\\kappa$"))
        assert np.allclose(np.asarray(im.get_array(), dtype=float), kappa)
        assert isinstance(im.norm, LogNorm) is log


def _group(c: dict) -> str:
    return f"{c['param']}_{c['init']}_{'skips' if c['skips'] else 'no_skips'}_decay0_seed{c['seed']}"


def test_f4_marks_its_kappa_panels_of_d_and_o_as_additions(full_store):
    """The notebook draws λ_max and λ_min of D, O and H_theory and κ of H_theory only: κ(D) and κ(O) are the
    project's, said so in their titles (grey, dashed frame) and the caption; the notebook's panels are unmarked."""
    store, cfg = full_store
    figs = drawer("F4")(lambda name: store.files["hessian_init"][name], cfg, "hessian_init")
    for f in figs:
        panels = [im.axes for im in _images(f.mpl)]
        marked = [ax.get_title().split("\n")[0] for ax in panels if "trainscape addition" in ax.get_title()]
        assert [t.split(": ")[0] for t in marked] == ["D", "O"] and all("$\\kappa$" in t for t in marked)
        for ax in panels:
            added = "trainscape addition" in ax.get_title()
            assert (ax.spines["left"].get_linestyle() == "--") is added
            assert (ax.title.get_color() == "0.4") is added
        assert "κ(D) and κ(O)" in f.caption and "additions" in f.caption


def test_a_phase_diagram_of_one_value_says_so_instead_of_a_rounding_noise_scale():
    """O's κ is 1 in every cell (its spectrum is symmetric): the panel names the value, the scale spans ±5 %."""
    one, two = np.array([[1.0, 1.0 + 2e-16], [1.0 - 1e-16, 1.0]]), np.array([[1.0, 1.5], [2.0, 1.0]])
    assert phase_title("O: κ", one, False) == "O: κ (= 1 in every cell)" and phase_title("D: κ", two, False) == "D: κ"
    assert phase_title("O: κ", one, True) == "O: κ"  # a log scale names no value
    fig, (a, b) = plt.subplots(1, 2)
    _phase(a, one, [2, 4], [2, 4], "O: κ", "κ(O)", False)
    _phase(b, two, [2, 4], [2, 4], "D: κ", "κ(D)", False)
    assert a.images[0].get_clim() == pytest.approx((0.95, 1.05)) and a.get_title() == "O: κ (= 1 in every cell)"
    assert b.images[0].get_clim() == pytest.approx((1.0, 2.0)) and b.get_title() == "D: κ"
    plt.close(fig)


def test_forward_pass_figures(full_store):
    """plot_metric_per_iv: one go.Scatter per layer (width 2, opacity 0.8), Reds (activities) / Greens (weights)
    sample_colorscale(5 + 3)[3:]; across N and L log x ticked 2^k, lines+markers; log y for the activities of sp
    (dtick 1 across N, 10 across L); over steps lines with three x ticks."""
    store, cfg = full_store
    fp = cfg.fwd_pass
    read = store.files["fwd_pass"].__getitem__
    f5 = drawer("F5")(read, cfg, "fwd_pass")
    assert len(f5) == len(fp.acts) * len(fp.optims) * 2 * len(fp.plot_ts) == 12
    assert f5[0].id == "F5_linear_sgd_avg_activity_l1_t0"
    f6 = drawer("F6")(read, cfg, "fwd_pass")
    assert [f.id for f in f6] == [f"F6_{a}_{o}_{k}" for a in fp.acts for o in fp.optims
                                  for k in [*(f"t{t}" for t in fp.plot_ts), "over_t"]]
    ns = len(fp.slice_widths)
    for f, fam, scale, ncol, steps in [(f5[0], "F5", "Reds", 1 + ns, False), (f6[0], "F6", "Greens", 1 + ns, False),
                                       (f6[len(fp.plot_ts)], "F6", "Greens", ns, True)]:
        fig = _plotly_record(f, fam, "fwd_pass")
        panels = list(_panels(fig).items())
        assert len(panels) == len(fp.variants) * ncol
        assert _legend(fig) == list(LAYER_NAMES)  # each layer once
        for anchor, traces in panels:
            row, col = divmod(int(anchor[1:] or 1) - 1, ncol)  # subplots are numbered row by row
            assert [t.type for t in traces] == ["scatter"] * 5 and [t.name for t in traces] == list(LAYER_NAMES)
            assert [t.line.color for t in traces] == sample_colorscale(scale, 8)[3:]
            assert all(t.line.width == 2 and t.opacity == 0.8 for t in traces)
            assert all(np.isfinite(np.asarray(t.y, dtype=float)).all() for t in traces)
            x, y = _axis(fig, anchor), _axis(fig, "y" + anchor[1:], "y")
            over_t = steps
            want = "Training iteration" if over_t else ("Width" if col == 0 else "Depth")
            assert x.title.text == want and y.title.text
            if over_t:
                assert all(t.mode == "lines" for t in traces) and list(traces[0].x) == list(range(fp.checks))
                assert x.type is None and list(x.tickvals) == [0.0, 1.0, 2.0]
            else:
                grid = fp.widths if col == 0 else fp.depths
                assert all(t.mode == "lines+markers" for t in traces) and list(traces[0].x) == grid
                assert x.type == "log" and list(x.tickvals) == grid and x.ticktext[0].startswith("2<sup>")
            logy = fam == "F5" and fp.variants[row].startswith("sp")
            assert (y.type == "log") == logy
            if logy:
                assert y.dtick == (1 if col == 0 else 10)


def _coded_fwd_store(cfg: MupcAnalysisParams) -> Store:
    """fwd_pass arrays whose every value names its cell: 1000·(layer + 1) + 100·t + 10·i_N + j_L."""
    fp = cfg.fwd_pass
    k, t, i, j = np.meshgrid(*(np.arange(n) for n in (5, fp.checks, len(fp.widths), len(fp.depths))), indexing="ij")
    coded = (1000.0 * (k + 1) + 100 * t + 10 * i + j)
    store = Store()
    store.files["fwd_pass"] = {f"{fwd_key(a, o, v)}/fwd_pass.npz": {f"{m}_per_N_L": coded for m in FWD_METRICS}
                               for a in fp.acts for o in fp.optims for v in fp.variants}
    return store


def test_f6_draws_every_plot_step_and_its_curves_over_training_at_the_slice_depth():
    """The notebook's F6: per width at ``depth_idx = 0`` and per depth at each slice width for every t of
    ``plot_ts`` (``params_spectral_norm_per_N_at_t{t}`` / ``_per_L_at_t{t}``), and over training at the same
    slice depth (``_over_t_N_{N}``), not at the deepest net."""
    cfg = _cfg({"fwd_pass": {"checks": 3, "plot_ts": [0, 2], "depths": [8, 16, 32], "slice_depth": 8}})
    fp = cfg.fwd_pass
    read = _coded_fwd_store(cfg).files["fwd_pass"].__getitem__
    figs = {f.id: f.plotly for f in drawer("F6")(read, cfg, "fwd_pass") if f.id.startswith("F6_tanh_adam")}
    assert list(figs) == ["F6_tanh_adam_t0", "F6_tanh_adam_t2", "F6_tanh_adam_over_t"]
    j = fp.depths.index(fp.slice_depth)
    assert j == 0 and fp.slice_depth != max(fp.depths)
    ns = len(fp.slice_widths)
    for t in fp.plot_ts:
        fig = figs[f"F6_tanh_adam_t{t}"]
        panels = list(_panels(fig).values())
        assert len(panels) == len(fp.variants) * (1 + ns)
        assert _titles(fig)[: 1 + ns] == [f"{fp.variants[0]}: L={fp.slice_depth}, t={t}",
                                          *(f"{fp.variants[0]}: N={N}, t={t}" for N in fp.slice_widths)]
        for n, traces in enumerate(panels):
            col = n % (1 + ns)
            for k, tr in enumerate(traces):
                y = np.asarray(tr.y, dtype=float)
                if col == 0:  # across N at the slice depth
                    want = 1000 * (k + 1) + 100 * t + 10 * np.arange(len(fp.widths)) + j
                else:  # across L at the slice width
                    want = 1000 * (k + 1) + 100 * t + 10 * fp.widths.index(fp.slice_widths[col - 1]) + np.arange(
                        len(fp.depths))
                np.testing.assert_array_equal(y, want)
    over = figs["F6_tanh_adam_over_t"]
    panels = list(_panels(over).values())
    assert len(panels) == len(fp.variants) * ns
    assert _titles(over)[:ns] == [f"{fp.variants[0]}: over t, N={N}, L={fp.slice_depth}" for N in fp.slice_widths]
    for n, traces in enumerate(panels):
        i = fp.widths.index(fp.slice_widths[n % ns])
        for k, tr in enumerate(traces):
            assert list(tr.x) == list(range(fp.checks))
            np.testing.assert_array_equal(np.asarray(tr.y, dtype=float),
                                          1000 * (k + 1) + 100 * np.arange(fp.checks) + 10 * i + j)


def test_theory_figures_through_render(full_store):
    """F26: ℒ/F* phase diagrams as the notebook's plot_loss_energy_ratio_phase_diagram: imshow (bicubic, origin
    lower) on a LogNorm over the fixed range [1, color_max], inferno; μPC cells written in white (two decimals).
    F27: lines per width, Purples (energy, with the widest net's loss in #EF553B, width 1), Reds (loss), Viridis
    (ratio), (n + 3)[3:], linear axes."""
    store, cfg = full_store
    out = render(store.ctx(cfg, "render", "F26"), "F26")
    tg = cfg.theory_grid
    assert [f.id for f in out.figures] == ["F26_sp", "F26_mupc"]
    for f in out.figures:
        fig = _matplotlib_record(f, "F26", "theory_grid")
        ims = _images(fig)
        assert len(ims) == len(tg.plot_iters) and [im.axes.get_title() for im in ims] == [
            f"t = {t}" for t in tg.plot_iters]
        for im in ims:
            z = np.asarray(im.get_array(), dtype=float)
            assert z.shape == (3, 3) and np.nanmin(z) >= 1.0  # ℒ/F* >= 1
            assert im.get_cmap().name == "inferno" and im.get_interpolation() == "bicubic" and im.origin == "lower"
            assert isinstance(im.norm, LogNorm) and (im.norm.vmin, im.norm.vmax) == (1.0, tg.color_max[f.id[4:]])
        texts = [t for ax in fig.axes for t in ax.texts]
        assert len(texts) == (len(tg.plot_iters) * 9 if f.id == "F26_mupc" else 0)  # μPC cells annotated
    ratio = store.files["theory_grid"][f"{theory_key('linear', 'mupc', 1, 1)}/theory.npz"]["loss_energy_ratios"]
    assert texts[0].get_text() == f"{ratio[tg.plot_iters[0]]:.2f}" and texts[0].get_color() == "white"
    out = render(store.ctx(cfg, "render", "F27"), "F27")
    tw = cfg.theory_width
    n = len(tw.plot_widths)
    assert [f.id for f in out.figures] == [f"F27_{a}_{p}" for a in tw.acts for p in tw.params]
    for f in out.figures:
        fig = _plotly_record(f, "F27", "theory_width")
        (ea, energy), (la, loss), (ra, ratio) = _panels(fig).items()
        assert [t.line.color for t in energy] == [*sample_colorscale("Purples", n + 3)[3:], "#EF553B"]
        assert energy[-1].line.width == 1 and energy[-1].legendrank == 0 and energy[-1].name.startswith("loss")
        assert [t.line.color for t in loss] == sample_colorscale("Reds", n + 3)[3:]
        assert [t.line.color for t in ratio] == sample_colorscale("Viridis", n + 3)[3:]
        for anchor, traces, ytitle in ((ea, energy, "Equilib. energy"), (la, loss, "Loss"), (ra, ratio, "Ratio")):
            assert all(t.type == "scatter" and t.mode == "lines" and len(t.y) == tw.iters for t in traces)
            x, y = _axis(fig, anchor), _axis(fig, "y" + anchor[1:], "y")
            assert x.title.text == "Training iteration" and y.title.text == ytitle and x.type is None and y.type is None
            assert list(x.tickvals) == [0.0, float((tw.iters - 1) // 2), float(tw.iters - 1)]
        assert ("max residual" in fig.layout.title.text) == (not f.id.startswith("F27_linear"))
        # the caption names the solver that found the equilibria; the legend (3 curves per width + a loss) fits
        assert ("Newton" in f.caption) == (not f.id.startswith("F27_linear")) and "gradient descent on" not in f.caption


def test_f27_grows_its_panels_so_that_every_legend_entry_fits(full_store):
    """Every width plotted (13 legend entries: F*, ℒ, ℒ/F* per width and the widest net's loss): at the
    paper's four plotted widths the fixed 350 px panel cut the last entries off."""
    store, cfg = full_store
    tw = dataclasses.replace(cfg.theory_width, plot_widths=list(cfg.theory_width.widths))
    figs = figures_module.render_f27(lambda name: store.files["theory_width"][name],
                                     dataclasses.replace(cfg, theory_width=tw), "theory_width")
    entries = 3 * len(tw.plot_widths) + 1
    for f in figs:
        assert sum(bool(t.showlegend) for t in f.plotly.data) == entries
        assert f.plotly.layout.height >= 30 * entries + 160  # the plot area (height − 160 px) holds them all


def test_spectral_drift_is_the_largest_relative_change_and_keeps_overflow():
    assert spectral_drift(np.array([2.0, 2.1, 1.7])) == pytest.approx(0.15)
    assert spectral_drift(np.array([2.0])) == 0.0
    assert np.isnan(spectral_drift(np.array([2.0, np.inf, np.nan])))


def test_narrow_theory_nets_train_and_are_planned_on_the_cpu_of_a_gpu_machine():
    """On a GPU machine theory nets of N <= 64 are latency-bound (the H100's calibration, config.py): the cost
    model plans them on the CPU, as train.py trains them; on a CPU machine nothing moves but their threads."""
    from pipeline.studies.mupc.analysis import cost
    from pipeline.studies.mupc.analysis.config import THEORY_CPU_MAX_WIDTH, theory_device, theory_threads

    paper = load_section(MupcAnalysisParams, _raw(), NAME, "paper")
    assert theory_device(64, "cuda") == "cpu" and theory_device(128, "cuda:1") == "cuda:1"
    assert theory_device(512, "cpu") == "cpu"
    for unit, fn in (("theory_grid", cost.theory_grid_cost), ("theory_width", cost.theory_width_cost)):
        on_gpu = fn(paper, unit, "cuda").work
        widths = {w.shape["N"]: w.shape.get("device", "cuda") for w in on_gpu}
        assert widths == {N: "cpu" if N <= THEORY_CPU_MAX_WIDTH else "cuda" for N in widths}
        assert all("device" not in w.shape for w in fn(paper, unit, "cpu").work)
    assert max(w.shape["N"] for w in cost.theory_width_cost(paper, "theory_width", "cuda").work) == 512
    # and with one thread: latency-bound, the paper's 4 threads made them 3x slower on two cores
    assert (theory_threads(64, 4), theory_threads(128, 4)) == (1, 4)
    threads = {w.shape["N"]: w.shape["threads"] for w in cost.theory_width_cost(paper, "theory_width", "cpu").work}
    assert threads == {N: 1 if N <= THEORY_CPU_MAX_WIDTH else paper.threads for N in threads} and paper.threads == 4


def test_newton_steps_are_measured_at_every_paper_width_and_looked_up_by_the_nearest():
    """The cost model's Newton steps per equilibrium come from whole runs of the paper's own nets (every width
    of theory_width); another profile's width takes the nearest measured one's, on a log scale."""
    paper = load_section(MupcAnalysisParams, _raw(), NAME, "paper")
    assert paper.theory_width.eq_tol == analysis_cost.NEWTON_TOL  # the tolerance the table was measured at
    for act in ("tanh", "relu"):
        table = analysis_cost.NEWTON_STEPS[act]
        assert set(table) == set(paper.theory_width.widths)
        assert all(0 < s < paper.theory_width.newton_max_steps for s in table.values())
        assert analysis_cost.newton_steps(act, 512) == table[512]
        assert analysis_cost.newton_steps(act, 3) == table[4] and analysis_cost.newton_steps(act, 5) == table[4]
        assert analysis_cost.newton_steps(act, 4096) == table[512]
    works = {w.shape["N"]: w for w in analysis_cost.theory_width_cost(paper, "theory_width", "cpu").work
             if w.shape["act"] == "relu"}
    assert {N: w.shape["eq_steps"] for N, w in works.items()} == analysis_cost.NEWTON_STEPS["relu"]
    assert works[512].flops == 2 * 937 * analysis_cost.theory_flops("relu", 512, 4, 64, works[512].shape["eq_steps"],
                                                                     "newton", paper.theory_width.cg_iters)


def test_the_newton_theory_probe_times_an_iteration_counted_with_the_steps_it_took(monkeypatch):
    """The probe solves to the tolerance the cost model's steps were measured at (the paper's eq_tol), so
    converged samples leave and no step is taken past convergence (at tolerance 0 a converged net's steps tried
    every step size: narrow nets planned up to 7.8x over their whole runs); its FLOPs are the iteration's with the
    full-batch steps it took."""
    from pipeline.studies.mupc.analysis import newton

    taken = []
    solve = newton.newton_equilibrium

    def counted(*a, **kw):
        eq = solve(*a, **kw)
        taken.append((eq, kw))
        return eq

    monkeypatch.setattr(newton, "newton_equilibrium", counted)
    step, flops = analysis_probe.theory_step(act="relu", N=8, H=3, batch=16, eq_steps=4.0, threads=1,
                                             device="cpu", budget=1e9, solver="newton")
    eq, kw = taken[-1]
    assert eq.converged and eq.steps >= 1 and kw["tol"] == analysis_cost.NEWTON_TOL == 1e-8
    assert kw["fallback_max_steps"] == 0
    full = eq.sample_steps / 16
    assert 0 < full <= eq.steps
    assert flops == analysis_cost.theory_flops("relu", 8, 3, 16, full, "newton", 3)
    step()
    assert taken[-1][0].sample_steps == eq.sample_steps  # the timed calls repeat the counted one
