"""``make gpu-check`` and ``benchmarks/pc_gpu.py`` where there is no GPU: one line and exit 0; the summary's
parsing of the stage's own log lines (the sweeps', the plan's, the analysis units'); the benchmark's quick
default sized for about two minutes."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from pipeline.paths import repo_root

ROOT = repo_root()


def _module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up while the class is made
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("target", ["gpu-check", "gpu-headline"])
def test_make_gpu_targets_without_cuda_say_so_in_one_line(tmp_path, target):
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "", "HOME": str(tmp_path)}
    out = subprocess.run(["make", "-s", target, f"OUT={tmp_path / 'out'}"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{target}: no CUDA here:"), out.stdout
    assert not (tmp_path / "out").exists()  # nothing measured, nothing written


def test_pc_gpu_without_cuda_measures_nothing():
    out = subprocess.run([sys.executable, "benchmarks/pc_gpu.py"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env={"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": ""})
    assert out.returncode == 0 and out.stdout.startswith("pc_gpu: no CUDA device"), out.stdout + out.stderr


# lines as the train stage and the runner's plan print them (mupc_training train.py, pipeline/plan.py)
S7_LOG = """\
[mupc_training_train@S7] plan: 120 runs in 15 groups, 336 TFLOP; estimate 2 h 24 min (calibrated on cuda: NVIDIA \
H100 80GB HBM3); all 120 runs; tf32; upper bound: runs that stop early cost less
[mupc_training_train@S7] device: cuda (NVIDIA H100 80GB HBM3, CUDA 13.0, driver 580.159.04); torch 2.11.0; float32 \
matmul: tf32
[mupc_training_train@S7] group 1/15: 8 runs N=64 H=8 linear mnist in 10.2 s; {'finished': 8}
[mupc_training_train@S7] group 3/15: 8 runs N=64 H=8 relu mnist in 11.0 s; {'finished': 8}
"""


def test_the_summary_reads_the_stage_log(tmp_path, monkeypatch):
    gc = _module("gpu_check")
    monkeypatch.setattr(gc, "sweep_plan", lambda ws, unit, profile: {"runs": 120, "todo": 120, "groups": [8] * 15,
                                                             "group_flops": [1.0, 3.0, 2.0] + [4.0] * 12,
                                                             "precision": "tf32"})
    monkeypatch.setattr(gc, "run_limited", lambda cmd, log, limit, env=None: (
        log.write_text(S7_LOG), {"rc": -15, "seconds": 30.0, "cut_at_limit": True, "limit_s": limit})[1])
    r = gc.sweep(tmp_path, tmp_path / "ws", {}, "S7", 30)
    assert r["plan_estimate"] == "2 h 24 min" and r["plan_calibrated_on"] == "cuda: NVIDIA H100 80GB HBM3"
    assert [g["group"] for g in r["groups_done"]] == [1, 3] and r["runs_trained_now"] == 16
    assert r["flops_done"] == 3.0 and r["flops_todo"] == 54.0
    assert r["extrapolated_seconds"] == round(21.2 * 54 / 3, 1)
    text = gc.summary_text({"machine": {"git_commit": "abc", "gpu": "G", "capability": "9.0", "memory_gib": 80,
                                        "multiprocessors": 132, "torch": "2.11", "cuda": "13.0", "nvidia_smi": "x"},
                            "seconds": 31.0, "sweeps": {"S7": r}})
    assert "16 trained in 30.0 s (cut at its limit; it resumes)" in text and "plan's estimate 2 h 24 min" in text


def _model_seconds(pc: ModuleType, shapes: list[str], stacks: list[int], f64_shapes: list[str],
                   f64_stacks: list[int], target: float = 0.5) -> float:
    """pc_gpu.py's time on an H100 by its FLOP count: per setting, the eager and the graph timings (each
    ``target`` seconds, at least five iterations), the capture and its check (seven iterations) and 1 s of
    fixed cost; per group, its weights drawn in float64 on one CPU thread (1e8 normals per second). Products
    at half the card's peak: float32 30, TF32 200, float64 30 TFLOP/s (H100 SXM: 67, 495, 67)."""
    rate = {"float32": 30e12, "tf32": 200e12, "float64": 30e12}
    flops = pc.cost_function()
    total = 0.0
    for shapes_, stacks_, precs in ((shapes, stacks, ["float32", "tf32"]), (f64_shapes, f64_stacks, ["float64"])):
        for shape in shapes_:
            N, H, T = (int(v) for v in shape.split(":"))
            for R in stacks_:
                total += R * (pc.D * N + (H - 1) * N * N + pc.D_Y * N) / 1e8
                for p in precs:
                    it = R * flops(N, H, T)[1] / rate[p]
                    total += 2 * max(target, 5 * it) + 7 * it + 1.0
    return total


def test_pc_gpu_quick_default_fits_about_two_minutes_and_the_paper_is_one_flag_away():
    pc = _module("pc_gpu")
    quick = _model_seconds(pc, pc.QUICK_SHAPES, pc.QUICK_STACKS, pc.QUICK_FLOAT64_SHAPES, [1, 8])
    paper = _model_seconds(pc, pc.PAPER_SHAPES, pc.PAPER_STACKS, pc.FLOAT64_SHAPES, [1, 8])
    assert quick <= 120, quick
    assert paper > 120, paper  # the paper's shapes would not fit: why they are one flag away, not the default
    assert "512:128:128" in pc.PAPER_SHAPES and "512:128:128" not in pc.QUICK_SHAPES


def test_the_analysis_step_plans_the_paper_units_and_reads_what_the_units_trained(tmp_path, capsys, monkeypatch):
    """The workspace it builds validates at the paper profile with theory_width cut to N = 512; the plan table
    (here the H100's recorded calibration replayed) and the units' log lines are read as they are printed."""
    from pipeline import plan
    from pipeline.config import load_section, read_tree
    from pipeline.studies.mupc.analysis import cost
    from pipeline.studies.mupc.analysis.config import MupcAnalysisParams
    from tests.test_plan import recorded_newton_steps

    gc = _module("gpu_check")
    ws = tmp_path / "ws"
    env = gc.analysis_workspace(ws, tmp_path / "mnist")
    assert env["TRAINSCAPE_ROOT"] == str(ws) and env["TRAINSCAPE_TRACKING"] == "off"
    cfg = load_section(MupcAnalysisParams, read_tree(ws), "mupc_analysis", "paper")
    assert cfg.theory_width.widths == [512] and cfg.theory_grid.widths == [1, 2, 4, 8, 16, 32, 64]

    calibration = ROOT / "tests" / "mupc_analysis" / "fixtures" / "h100" / "plan-calibration.json"
    monkeypatch.setenv("TRAINSCAPE_ROOT", str(ws))
    monkeypatch.setattr(cost, "NEWTON_STEPS", recorded_newton_steps(calibration))  # the steps that card counted
    params = ws / "params" / "mupc_analysis.yaml"  # that card's routes: its cells below the slices took Lanczos
    assert "    band_max_n: 4096" in params.read_text()
    params.write_text(params.read_text().replace("    band_max_n: 4096", "    band_max_n: 0"))
    assert plan.main(["--profile", "paper", "--stages", "mupc_analysis_train@*", "--detail",
                      "--calibration", str(calibration)]) == 0
    rows = gc.plan_rows(capsys.readouterr().out)
    assert set(rows) == {"hessian_init", "fwd_pass", "theory_grid", "theory_width"}
    # as that card printed them; fwd_pass's spectral norms changed route since
    assert {u: rows[u] for u in ("hessian_init", "theory_grid", "theory_width")} == {
        "hessian_init": "17 min 9 s", "theory_grid": "5.0 s", "theory_width": "12 min 28 s"}

    log, unit = tmp_path / "analysis_theory_width.log", tmp_path / "theory_width"
    log.write_text("[mupc_analysis_train@theory_width] 6 nets, 2 kept, 4 to train\n"
                   "[mupc_analysis_train@theory_width] theory across width: 4 nets trained in 250.3 s\n")
    for net in ("relu/mupc", "relu/sp"):
        (unit / net).mkdir(parents=True)
        (unit / net / "theory.npz").write_bytes(b"")
    got = gc.unit_report(log, unit)
    assert (got["nets"], got["kept"], got["trained_in_s"], got["nets_on_disk"]) == (6, 2, 250.3, 2)


def test_the_bp_step_benchmark_runs_its_two_ways_and_gpu_check_names_its_shapes(capsys):
    gc, bp = _module("gpu_check"), _module("bp_step")
    assert gc.BP_ARGS[:2] == ["--device", "cuda"]
    assert bp.main(["--shapes", "8:4", "6:9", "--seconds", "0.01"]) == 0
    rows = [ln.split("|") for ln in capsys.readouterr().out.splitlines() if ln.strip().startswith(("8 ", "6 "))]
    assert len(rows) == 2 and all(r[-1].strip() == "0.0e+00" for r in rows)  # the same gradients both ways


def test_the_spectra_step_names_the_gpu_and_band_routes_and_a_worker_per_core(capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # the spawned workers import the script by name
    gc, hs = _module("gpu_check"), _module("hessian_spectrum")
    args = gc.spectra_args(16)
    assert args[args.index("--routes") + 1:args.index("--routes") + 3] == ["2-stage N", "dense cuda"]
    assert args[-2:] == ["--workers", "16"] and set(args[args.index("--routes") + 1:][:2]) <= set(hs.ROUTES)
    assert hs.main(["--shapes", "6:3", "8:4", "--routes", "2-stage N", "eig_banded 2N-1", "--workers", "2"]) == 0
    out = capsys.readouterr().out
    rows = [ln.split("|") for ln in out.splitlines() if ln.strip().startswith(("6 ", "8 "))]
    assert len(rows) == 2 and all(float(r[-1]) < 1e-12 for r in rows)  # the same eigenvalues both ways
    assert "2-stage N on 2 processes at once, N:H = 8:4" in out


def test_fused_tiles_without_cuda_measures_nothing_and_sweeps_todays_setting_first():
    out = subprocess.run([sys.executable, "benchmarks/fused_tiles.py"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env={"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": ""})
    assert out.returncode == 0 and out.stdout.startswith("fused_tiles: no CUDA device"), out.stdout + out.stderr
    from pipeline.studies.mupc.engine.fused import Tiles

    labels = _module("fused_tiles").settings()
    assert labels[0] == Tiles().label() and len(labels) == len(set(labels)) > 20
    assert all(Tiles.parse(t) for t in labels)


def test_the_routes_step_adds_the_sweeps_fastest_setting():
    gc = _module("gpu_check")
    from pipeline.studies.mupc.engine.fused import Tiles

    assert gc.routes_args(None) == gc.ROUTES_ARGS
    assert gc.routes_args({"best": Tiles().label()}) == gc.ROUTES_ARGS  # today's: nothing to add
    assert gc.routes_args({"best": "128:32:8:3"}) == [*gc.ROUTES_ARGS, "fused@128:32:8:3"]


@pytest.mark.parametrize("engine,ok", [("standard", True), ("fused", True), ("fused@128:64:8:3", True),
                                       ("standard@64:32:4:3", False), ("fused@96:32:4:3", False), ("fast", False)])
def test_pc_gpu_names_the_fused_route_with_its_tiles(engine, ok):
    pc = _module("pc_gpu")
    if ok:
        assert pc.engine_arg(engine) == engine
    else:
        with pytest.raises(Exception, match="fused|standard|power of two"):
            pc.engine_arg(engine)
