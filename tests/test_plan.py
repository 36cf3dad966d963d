"""The cost plan (``make plan``, pipeline/plan.py): FLOP counts against hand counts, every stage of the
graph planned, a stage estimated above 24 h stopped before compute, the calibration cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline import device as devices
from pipeline import graph, plan, registry
from pipeline.config import ConfigError, load_params
from pipeline.contract import Cost, Work
from pipeline.studies.mupc.analysis import cost as analysis_cost
from pipeline.studies.mupc.analysis.cost import fwd_cell_bytes, fwd_peak_bytes
from pipeline.studies.mupc.analysis.layout import fwd_gain
from pipeline.studies.mupc.engine.runs import RunConfig
from pipeline.studies.mupc.training import cost as mupc_cost

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test calibrates into its own cache folder, in an empty workspace of its own: a plan counts the
    runs a workspace has already trained, and the checkout's (after `make repro`) must not change a verdict."""
    workspace = tmp_path / "workspace"
    (workspace / "params").mkdir(parents=True)
    for f in [ROOT / "params.yaml", *(ROOT / "params").glob("*.yaml")]:
        (workspace / f.relative_to(ROOT)).write_text(f.read_text())
    monkeypatch.setenv("TRAINSCAPE_ROOT", str(workspace))
    monkeypatch.setenv(plan.CACHE_ENV, str(tmp_path / "plan-cache"))
    monkeypatch.delenv(plan.ALLOW_LONG_ENV, raising=False)
    return tmp_path / "plan-cache"


def test_pc_iteration_flops_match_a_hand_count():
    # N = 2, H = 3, T = 2, batch 1, D = 4, d_y = 1; a product of m×k by k×n is 2·m·n·k FLOPs
    ffwd = 2 * (4 * 2) + 2 * 2 * (2 * 2) + 2 * (2 * 1)  # W1 x, 2 hidden layers, the read-out: 16 + 16 + 4
    pred = 2 * 2 * (2 * 2) + 2 * (2 * 1)  # the hidden and read-out predictions: 20
    useful = ffwd + 2 * (2 * pred) + pred + ffwd  # T steps of predictions and Jᵀε, final errors, weight grads
    assert useful == 172
    # following the front: step 0 forms only the read-out's Jᵀε (4); step 1 one hidden layer's prediction and
    # Jᵀε plus the read-out's (2·(8 + 4) = 24); the final errors of min(T, H−1) = 2 layers and the read-out
    # (2·8 + 4 = 20); the weight gradients of those layers and the read-out, not W1 (T < H): 20
    executed = ffwd + (4 + 24) + 20 + 20
    assert mupc_cost.iteration_flops(N=2, H=3, T=2, B=1, D=4, d_y=1) == (useful, executed)
    # with activity decay the engine forms every layer
    assert mupc_cost.iteration_flops(N=2, H=3, T=2, B=1, D=4, d_y=1, front=False) == (useful, useful)


def test_the_benchmark_counts_with_the_study_function():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import pc_training
    finally:
        sys.path.pop(0)
    useful, executed = pc_training.flops(128, 8)
    assert round(useful / 1e9, 3) == 0.335  # the mupc README's number
    share = mupc_cost.evaluation_flops(128, 8, pc_training.EVAL_N) / pc_training.EVAL_EVERY
    assert (useful - share, executed - share) == mupc_cost.iteration_flops(128, 8, pc_training.T)


def test_a_run_counts_iterations_evaluations_and_the_hessian_monitor():
    cfg = registry.config(registry.load("mupc_training"), load_params(ROOT), "smoke")
    rc = RunConfig(dataset="mnist", N=16, H=4, act="tanh", param="sp", init="standard", skips=False, seed=0,
                   epochs=2, test_every=8, param_lr=1e-3, T=20, act_lr=0.1, metrics="hessian")
    its = 2 * (cfg.data.n_train // 64)  # 64 iterations
    evals = its // 8
    train = its * mupc_cost.iteration_flops(16, 4, 20)[1] + evals * mupc_cost.evaluation_flops(16, 4, 1024)
    n = 16 * 4
    monitor = (1 + evals) * (2 * 4 * 16**3 + 4 * n**3 / 3)  # blocks, dense eigvalsh (n ≤ hessian_dense_max_n)
    assert mupc_cost.run_flops(cfg, rc) == (train, monitor)
    bp = RunConfig(dataset="mnist", N=16, H=4, act="relu", param="depth_mup", init="standard_gauss", skips=True,
                   seed=0, epochs=1, test_every=8, param_lr=1e-3, method="bp")
    f = 2 * 64 * (784 * 16 + 3 * 16 * 16 + 10 * 16)
    assert mupc_cost.run_flops(cfg, bp) == (32 * 3 * f + 4 * f * 1024 / 64, 0.0)


def _fixed_rate(monkeypatch: pytest.MonkeyPatch, rate: float, slowdown: float = 1.0) -> None:
    monkeypatch.setattr(plan.Calibration, "rate", lambda self, module, work, probe=True, shared=False: rate)
    monkeypatch.setattr(plan.Calibration, "slowdown", lambda self, module, work, shared=False: slowdown)


def test_the_smoke_plan_lists_every_stage_of_the_graph(monkeypatch):
    _fixed_rate(monkeypatch, 1e-10)
    profile, plans, _ = plan.plan_profile("smoke", device="cpu", root=ROOT)
    listed = {p.stage for p in plans}
    assert len(listed) == len(plans)
    params = load_params(ROOT)
    units = {f"{name}_{stage.kind}@{unit}" for name in registry.names()
             for stage in registry.load(name).stages
             for unit in stage.units(registry.config(registry.load(name), params, "smoke"))}
    assert listed == units
    if params.profile == "smoke":  # the committed graph is the active profile's
        in_graph = {s for s in graph.committed(ROOT) if graph.study_of(s)}
        assert listed == in_graph
    for p in plans:
        if p.kind == "train":  # every study declares its training cost
            assert p.calibrated and p.runs and p.flops and p.seconds > plan.FIXED_SECONDS["train"], p.stage
        else:
            assert not p.calibrated and p.seconds == plan.FIXED_SECONDS[p.kind]
    text = plan.estimate_table(profile, plans, plan.Calibration("cpu"))
    assert "all studies (total)" in text and "estimate (calibrated on cpu:" in text


def _paper_root(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "params").mkdir(parents=True)
    for f in (ROOT / "params").glob("*.yaml"):
        (root / "params" / f.name).write_text(f.read_text())
    text = (ROOT / "params.yaml").read_text()
    (root / "params.yaml").write_text(text.replace("\nprofile: smoke", "\nprofile: paper"))
    assert load_params(root).profile == "paper"
    return root


def test_a_stage_estimated_above_24_h_stops_before_compute(tmp_path, _cache, monkeypatch):
    root = _paper_root(tmp_path)
    monkeypatch.setenv("TRAINSCAPE_ROOT", str(root))
    # seed the cache at 1 ns per FLOP: the paper's S6 (≈ 3·10¹⁷ FLOPs) is then months, and nothing is probed
    study = registry.load("mupc_training")
    stage = study.stage("train")
    cfg = registry.config(study, load_params(root), "paper")
    cal = plan.Calibration("cpu")
    for w in plan.unit_cost(stage, cfg, "S6", "cpu", None).work:
        cal.entries[cal.key(stage.probe, w)] = {"seconds_per_flop": 1e-9, "step_flops": 1.0, "step_seconds": 1e-9}
    cal._write()
    env = {**os.environ, "TRAINSCAPE_ROOT": str(root), "TRAINSCAPE_DEVICE": "cpu", "TRAINSCAPE_TRACKING": "off",
           plan.CACHE_ENV: str(_cache)}
    proc = subprocess.run([sys.executable, "-m", "stages.train", "mupc_training", "S6", "--profile", "paper"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2, proc.stderr[-2000:]
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: mupc_training_train@S6: estimate "), proc.stderr
    assert "exceeds 24 h" in err[0] and plan.ALLOW_LONG_ENV in err[0] and "GPU" in err[0]
    assert "plan: 1,980 runs in 45 groups" in proc.stdout
    assert not (root / "artifacts").exists()  # stopped before any output folder
    assert json.loads(next(_cache.glob("*.json")).read_text())["entries"].keys() == cal.entries.keys()  # no probe


def test_a_second_calibration_reads_the_cache_and_probes_nothing(_cache):
    work = Work("tiny", "epoch", {"seeds": 2, "f": 5, "n": 2, "tied": False, "dtype": "float32", "threads": 1,
                                  "device": "cpu"}, 1e6)
    module = "pipeline.studies.superposition.probe"
    first = plan.Calibration("cpu")
    rate = first.rate(module, work)
    assert first.probed == [first.key(module, work)] and rate > 0
    second = plan.Calibration("cpu")
    assert second.rate(module, work) == rate and second.probed == []
    assert second.path.parent == _cache and second.path.name.startswith("cpu-")
    other = Work("tiny", "epoch", {**work.shape, "dtype": "float64"}, 1e6)  # keyed by dtype
    assert second.key(module, other) != second.key(module, work)


def test_a_measured_slowdown_multiplies_its_works_estimate_and_is_cached(_cache, monkeypatch):
    """A work whose probe's step cannot show a cost names a second probe: its step against a reference step; the
    estimate is the work's FLOPs × its rate × their time ratio, probed once and read from the cache after."""
    module = "pipeline.studies.mupc.analysis.probe"
    shape = {"variant": "sp_no_skips", "act": "relu", "L": 8, "optims": ["sgd"], "threads": 1}
    work = Work("slowed", "fwd_step", {"N": 16, "L": 8, "optims": ["sgd"], "threads": 1}, 1e9,
                slowdown=("fwd_subnormals", shape))
    monkeypatch.setattr(plan, "_time_side_by_side", lambda step, reference: (3.0, 1.5))
    cal = plan.Calibration("cpu")
    assert cal.slowdown(module, work) == 2.0 and cal.slowdown(module, replace(work, slowdown=None)) == 1.0
    entry = cal.entries[cal.key(module, cal.slowdown_work(work))]
    assert (entry["step_seconds"], entry["reference_seconds"]) == (3.0, 1.5)
    monkeypatch.setattr(plan, "_time_side_by_side", lambda step, reference: pytest.fail("probed again"))
    assert plan.Calibration("cpu").slowdown(module, work) == 2.0  # from the cache
    monkeypatch.setattr(plan.Calibration, "rate", lambda self, module, work, probe=True, shared=False: 1e-9)
    study = registry.load("mupc_analysis")
    cfg = registry.config(study, load_params(), "smoke")
    cost = Cost(runs=1, groups=1, work=(work, replace(work, label="plain", slowdown=None)))
    monkeypatch.setattr(plan, "unit_cost", lambda *a: cost)
    p = plan.plan_stage(study, study.stage("train"), cfg, "fwd_pass", plan.Calibration("cpu"))
    assert [s for _, s in p.work] == [2.0, 1.0] and "1 work at a slowdown measured here, ×2.00–2.00" in p.note


def test_a_failing_probe_leaves_the_work_out_of_the_estimate(monkeypatch):
    cal = plan.Calibration("cpu")
    bad = Work("no such probe", "nothing_here", {"threads": 1}, 1e9)
    assert cal.rate("pipeline.studies.superposition.probe", bad) is None
    assert "AttributeError" in next(iter(cal.failed.values()))


H100 = ROOT / "tests" / "mupc_analysis" / "fixtures" / "h100"


def recorded_newton_steps(calibration: Path) -> dict[str, dict[int, float]]:
    """The Newton steps per equilibrium a recorded calibration's theory probes were keyed with: the cost model
    that card planned with (every sample at every step, before converged samples left the batch; one count an
    activation for every width, as the table :data:`NEWTON_STEPS` holds it)."""
    keys = [json.loads(k) for k in json.loads(calibration.read_text())["entries"]]
    return {k["shape"]["act"]: {1: k["shape"]["eq_steps"]} for k in keys
            if k["probe"].endswith(":theory_step") and k["shape"]["solver"] == "newton" and k["shape"]["eq_steps"]}


# What pipeline.plan printed for the paper's mupc_analysis on that H100 (fixtures/h100/README.md), seconds per unit
H100_PRINTED = {"hessian_init": 17 * 60 + 9, "fwd_pass": 12 * 60 + 9, "theory_grid": 23 * 60 + 9,
                "theory_width": 12 * 60 + 28}


def test_a_recorded_gpu_calibration_plans_that_gpu_here_and_probes_nothing(monkeypatch):
    """The H100's plan cache replayed on this CPU: its device's routes (dense_torch spectra), its rates, the
    estimates that card printed; its workspace trained theory_width at N = 512 only, so the other widths are
    said to be missing, not probed here."""
    monkeypatch.setattr(plan.Calibration, "_write", lambda self: pytest.fail("a recorded calibration is written"))
    recorded = H100 / "plan-calibration.json"
    steps = recorded_newton_steps(recorded)
    assert set(steps) == {"tanh", "relu"} and steps != analysis_cost.NEWTON_STEPS
    monkeypatch.setattr(analysis_cost, "NEWTON_STEPS", steps)
    p = (Path(os.environ["TRAINSCAPE_ROOT"]) / "params" / "mupc_analysis.yaml")
    text = p.read_text()
    every = "    widths: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]\n    plot_widths: [2, 8, 32, 128, 512]"
    assert every in text
    band = "    band_max_n: 4096"  # that card's routes: its cells below the slices took Lanczos extremes then
    assert band in text
    p.write_text(text.replace(every, "    widths: [512]\n    plot_widths: [512]").replace(band, "    band_max_n: 0"))
    _, plans, cal = plan.plan_profile("paper", stages=["mupc_analysis_train@*"], recorded=recorded)
    assert (cal.device, cal.name, cal.probed) == ("cuda", "NVIDIA H100 80GB HBM3", [])
    got = {p.unit: round(p.seconds) for p in plans}
    for unit in ("hessian_init", "theory_width"):  # fwd_pass's spectral norms changed route since that card
        assert got[unit] == pytest.approx(H100_PRINTED[unit], abs=1), unit
    hess = next(p for p in plans if p.unit == "hessian_init")
    assert any(w.label.startswith("dense_torch N=128 H=128") for w, _ in hess.work)
    # theory_grid's nets (N <= 64) train on that machine's CPU since, which the card's calibration never probed
    grid = next(p for p in plans if p.unit == "theory_grid")
    theory = [json.loads(k) for k in cal.failed if k.count("theory_step")]
    assert grid.seconds == plan.FIXED_SECONDS["train"] and len(theory) == 49
    assert all(k["shape"]["device"] == "cpu" for k in theory)
    # fwd_pass's steps with their updates, and its inits, were probed after that card: named, not guessed
    assert {json.loads(k)["probe"].split(":")[1] for k in cal.failed} == {"theory_step", "fwd_step", "fwd_init"}

    p.write_text(text)  # every width: the ones that card did not probe are named, and nothing is probed here
    _, plans, cal = plan.plan_profile("paper", stages=["mupc_analysis_train@theory_width"], recorded=recorded)
    assert cal.probed == [] and len(cal.failed) == 27  # N = 128, 256 on the GPU; N <= 64 on the CPU
    assert plans[0].unestimated == 27
    assert "at least: 27 works not in the estimate" in plan.estimate_table("paper", plans, cal)
    missing = "NOT in the estimate (not in the recorded calibration plan-calibration.json): linear N=1 H=4"
    assert missing in plans[0].note


def test_a_file_that_is_not_a_plan_cache_is_refused(tmp_path):
    bad = tmp_path / "runs.json"
    bad.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="not a plan cache file"):
        plan.Calibration(recorded=bad)


@pytest.mark.parametrize(("seconds", "text"), [(4.2, "4.2 s"), (75, "1 min 15 s"), (3 * 3600 + 300, "3 h 5 min"),
                                               (50 * 3600, "50 h 0 min (≈ 2.1 days)")])
def test_estimates_print_as_h_min_s(seconds, text):
    assert plan.fmt_seconds(seconds) == text


OLD_FLOOR_RATE = 1e7  # FLOP/s: the slowest rate the plan line once assumed for shapes it did not probe


def test_a_small_stage_probes_its_shapes_and_prints_its_estimate_not_a_bound(_cache, monkeypatch):
    """imprint's smoke stages finish in seconds; their plan line once said hours (an upper bound at 10 MFLOP/s
    for shapes too small to probe). A probe is cheap and cached: the line is the estimate, once probed."""
    probed: list[str] = []
    real = plan.Calibration.rate

    def counting(self, module, work, probe=True, shared=False):
        if probe and self.key(module, work, shared) not in self.entries:
            probed.append(work.label)
        return real(self, module, work, probe, shared)

    monkeypatch.setattr(plan.Calibration, "rate", counting)
    study = registry.load("imprint")
    stage = study.stage("train")
    cfg = registry.config(study, load_params(), "smoke")
    lines: list[str] = []
    first = plan.before_stage(study, stage, cfg, "random-adam", "cpu", lines.append)
    assert probed and len(lines) == 1 and "probed now in" in lines[0] and "bound" not in lines[0]
    assert first.seconds < first.flops / OLD_FLOOR_RATE / 10  # not the old bound: orders of magnitude below
    assert f"estimate {plan.fmt_seconds(first.seconds)} (calibrated on cpu: " in lines[0]
    n = len(probed)
    again = plan.before_stage(study, stage, cfg, "random-adam", "cpu", lines.append)
    assert len(probed) == n and again.seconds == first.seconds and "probed now" not in lines[1]  # from the cache


def test_a_stage_estimated_above_24_h_by_its_probes_still_stops(_cache, monkeypatch):
    study = registry.load("mupc_training")
    stage = study.stage("train")
    cfg = registry.config(study, load_params(), "smoke")
    _fixed_rate(monkeypatch, 1.0)  # 1 FLOP/s
    with pytest.raises(ConfigError, match="exceeds 24 h"):
        plan.before_stage(study, stage, cfg, "S9", "cpu", lambda line: None)
    monkeypatch.setenv(plan.ALLOW_LONG_ENV, "1")
    p = plan.before_stage(study, stage, cfg, "S9", "cpu", lambda line: None)
    assert p.seconds == pytest.approx(plan.FIXED_SECONDS["train"] + p.flops)


def test_a_long_first_call_is_the_measurement_and_a_short_one_only_warms(monkeypatch):
    """A probe at a cell's own shape (a band eigen-solve at n = 16,384 takes half a minute) runs once, not twice."""
    clock = iter(range(10_000))
    monkeypatch.setattr(plan.time, "perf_counter", lambda: float(next(clock)) * 3.0)  # every call: 3 s
    calls = []
    assert plan._time(lambda: calls.append(1)) == 3.0 and len(calls) == 1
    ticks = iter(float(i) * 0.125 for i in range(10_000))  # every call: 0.125 s (exact in binary)
    monkeypatch.setattr(plan.time, "perf_counter", lambda: next(ticks))
    calls.clear()
    assert plan._time(lambda: calls.append(1)) == 0.125 and len(calls) == 1 + 2  # a warm-up, then ≥ 0.2 s timed


def test_a_slowdown_is_timed_in_turn_after_a_warm_up_each_the_fastest_call_of_each(monkeypatch):
    calls: list[str] = []
    clock = iter(range(100))
    monkeypatch.setattr(plan.time, "perf_counter", lambda: float(next(clock)))
    # warm-ups untimed; then step, reference, step, reference, each one tick long
    assert plan._time_side_by_side(lambda: calls.append("s"), lambda: calls.append("r"), rounds=2) == (1.0, 1.0)
    assert calls == ["s", "r", "s", "r", "s", "r"]


def test_makespan_takes_the_longest_task_left():
    assert plan.makespan([3, 3, 2, 2, 2], 2) == 7 and plan.makespan([5, 1, 1], 2) == 5
    assert plan.makespan([1.0] * 6, 3) == 2 and plan.makespan([], 2) == 0 and plan.makespan([4, 2], 1) == 6


def test_worker_processes_plan_a_units_tasks_side_by_side_on_their_share_of_the_cores(monkeypatch):
    """TRAINSCAPE_EXECUTOR=processes: the theory nets (ctx.map tasks) planned as a makespan on 2 workers, probed
    under a key of their own (a worker's share of the cores); fwd_pass, one process, still the sum."""
    _fixed_rate(monkeypatch, 1e-10)
    stages = ["mupc_analysis_train@theory_width", "mupc_analysis_train@fwd_pass"]
    _, alone, cal = plan.plan_profile("paper", device="cpu", stages=stages)
    assert cal.workers == 1 and cal.cores is None
    work = Work("w", "probe", {"N": 1}, 1.0)
    local_key = cal.key("m", work)
    monkeypatch.setenv("TRAINSCAPE_EXECUTOR", "processes")
    monkeypatch.setenv("TRAINSCAPE_WORKERS", "2")
    _, pair, cal = plan.plan_profile("paper", device="cpu", stages=stages)
    assert cal.workers == 2 and cal.cores == max(1, plan.devices.cores() // 2)
    assert json.loads(cal.key("m", work, shared=True))["cores"] == cal.cores and cal.key("m", work) == local_key
    by = {p.unit: p for p in alone} | {f"{p.unit}, 2 workers": p for p in pair}
    fixed = plan.FIXED_SECONDS["train"]
    tasks = sum(w.tasks for w, _ in by["theory_width"].work)
    assert tasks == 60 and by["theory_width, 2 workers"].work == by["theory_width"].work
    total, longest = by["theory_width"].seconds - fixed, max(s / w.tasks for w, s in by["theory_width"].work)
    span = by["theory_width, 2 workers"].seconds - fixed
    assert max(total / 2, longest) <= span * (1 + 1e-12) and span <= total / 2 + longest and span < total
    assert "2 worker processes side by side" in by["theory_width, 2 workers"].note
    assert by["fwd_pass, 2 workers"].seconds == by["fwd_pass"].seconds


def test_on_a_gpu_the_host_tasks_go_side_by_side_and_the_devices_one_after_another(monkeypatch):
    """The H100's recorded calibration (tests/mupc_analysis/fixtures/h100/plan-calibration-processes.json)
    replayed with 16 worker processes: theory_grid's nets (on the CPU) are a makespan; hessian_init's numpy and
    LAPACK cells go side by side on the host while its dense_torch spectra share the one GPU, so the unit takes
    at least their sum; fwd_pass (not mapped) stays the sum of its works."""
    calibration = ROOT / "tests" / "mupc_analysis" / "fixtures" / "h100" / "plan-calibration-processes.json"
    stages = ["mupc_analysis_train@hessian_init", "mupc_analysis_train@theory_grid", "mupc_analysis_train@fwd_pass"]
    _, alone, _ = plan.plan_profile("paper", root=ROOT, stages=stages, recorded=calibration)
    monkeypatch.setenv("TRAINSCAPE_EXECUTOR", "processes")
    monkeypatch.setenv("TRAINSCAPE_WORKERS", "16")
    _, side, cal = plan.plan_profile("paper", root=ROOT, stages=stages, recorded=calibration)
    assert cal.workers == 16 and cal.cores is None  # a recorded file keeps the keys it was probed with
    one, many = ({p.unit: p for p in plans} for plans in (alone, side))
    fixed = plan.FIXED_SECONDS["train"]
    h = many["hessian_init"]
    gpu = sum(s for w, s in h.work if not w.host)
    host = [s / w.tasks for w, s in h.work if w.host for _ in range(w.tasks)]
    assert {w.label.split()[0] for w, _ in h.work if not w.host} == {"dense_torch"} and gpu > 0 and host
    assert h.seconds == pytest.approx(fixed + max(gpu, plan.makespan(host + [s / w.tasks for w, s in h.work
                                                                             if not w.host for _ in range(w.tasks)],
                                                                            16)))
    assert gpu + fixed <= h.seconds < one["hessian_init"].seconds and "on the cuda one after another" in h.note
    g = many["theory_grid"]
    assert all(cal.on_cpu(w) for w, _ in g.work) and "one after another" not in g.note
    assert g.seconds < one["theory_grid"].seconds / 8
    assert many["fwd_pass"].seconds == one["fwd_pass"].seconds


def test_a_change_to_a_studys_code_keys_its_probes_anew(tmp_path, monkeypatch):
    """The calibration key holds a digest of the probed study's sources: a faster solver is probed again, not
    planned at the rate its old code was timed at; a file of another study leaves the key as it was."""
    for study in ("a", "b"):
        (tmp_path / "pipeline" / "studies" / study / "inner").mkdir(parents=True)
        (tmp_path / "pipeline" / "studies" / study / "probe.py").write_text("def step(): pass\n")
    monkeypatch.setattr(plan, "repo_root", lambda: tmp_path)
    monkeypatch.setattr(plan, "_DIGESTS", {})
    cal = plan.Calibration("cpu")
    work = Work("w", "step", {"N": 1}, 1.0)
    before = cal.key("pipeline.studies.a.probe", work)
    (tmp_path / "pipeline" / "studies" / "b" / "probe.py").write_text("def step(): return 1\n")
    plan._DIGESTS.clear()
    assert cal.key("pipeline.studies.a.probe", work) == before
    (tmp_path / "pipeline" / "studies" / "a" / "inner" / "solver.py").write_text("FASTER = True\n")
    plan._DIGESTS.clear()
    after = cal.key("pipeline.studies.a.probe", work)
    assert after != before and json.loads(after)["code"] == plan.code_digest("pipeline.studies.a.probe")


def test_a_forward_pass_cells_memory_is_its_weights_gradients_moments_and_saved_activities():
    # N = 2, L = 3 (one hidden-to-hidden matrix), SGD and Adam stacked, batch 1: a run's weights are 2·2 + 784·2 +
    # 10·2 = 1,592 floats; the shared draw, two runs' weights and one run's two moments, 5 × 1,592; three [R, B, N]
    # tensors a layer over L − 1 = 2 layers, 3·2·1·2·2 = 24; two weights' gradients for two runs, the largest
    # weight W_in's 784·2 each, 2·2·1,568 = 6,272; float32
    assert fwd_cell_bytes(2, 3, ["sgd", "adam"], 1) == 4 * (5 * 1592 + 24 + 6272)  # with the group's shared draw
    assert fwd_cell_bytes(2, 3, ["sgd", "sgd"], 1) == 4 * (3 * 1592 + 24 + 6272)  # no Adam, no moments
    assert fwd_cell_bytes(2, 3, ["sgd", "adam"], 1, draws=2) == 4 * (6 * 1592 + 24 + 6272)  # two orthogonal gains


def test_the_forward_pass_memory_line_holds_the_measured_process_peaks():
    # benchmarks/fwd_pass_memory.py on the 2-core build machine (benchmarks/README.md): the cells' process peaked at
    # up to 4.43 GiB (N = 512) and 15.55 GiB (N = 1,024), L = 512, both orthogonal gains kept; the line is above
    # each, by under 5 %
    for N, peak in ((512, 4.43), (1024, 15.55)):
        line = fwd_peak_bytes(N, 512, ["sgd", "adam"], 64, "cpu", draws=2) / 2**30
        assert peak < line < 1.05 * peak
    # a GPU's line is its device memory: the tensors alone
    assert fwd_peak_bytes(1024, 512, ["sgd", "adam"], 64, "cuda", draws=2) == fwd_cell_bytes(1024, 512, ["sgd", "adam"],
                                                                                           64, draws=2)


def test_a_unit_that_would_hold_more_memory_than_its_device_stops_before_compute(monkeypatch):
    study = registry.load("mupc_analysis")
    stage = study.stage("train")
    cfg = registry.config(study, load_params(), "smoke")
    _fixed_rate(monkeypatch, 1e-18)
    lines: list[str] = []
    fp = cfg.fwd_pass
    ok = plan.before_stage(study, stage, cfg, "fwd_pass", "cpu", lines.append)
    gains = {fwd_gain("orthogonal", act) for act in fp.acts} if "orthogonal" in fp.variants else {1.0}
    assert ok.peak_bytes == fwd_peak_bytes(max(fp.widths), max(fp.depths), list(fp.optims), fp.batch_size, "cpu",
                                           len(gains))
    cell = f"a cell of N={max(fp.widths)}, L={max(fp.depths)}"
    assert f"peak memory ≈ {plan.fmt_bytes(ok.peak_bytes)} ({cell})" in lines[0]
    huge = replace(cfg, fwd_pass=replace(fp, widths=[16384], depths=[512]))  # ≈ 3 TiB of weights and moments
    with pytest.raises(ConfigError) as err:
        plan.before_stage(study, stage, huge, "fwd_pass", "cpu", lines.append)
    msg = str(err.value)
    assert msg.startswith("mupc_analysis_train@fwd_pass: would hold ≈ ") and "(a cell of N=16384, L=512)" in msg
    assert f"more than its {plan.fmt_bytes(devices.memory_bytes('cpu'))}" in msg and "params/mupc_analysis.yaml" in msg
