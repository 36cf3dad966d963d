"""First contact with CUDA in one command: ``make gpu-check OUT=<dir>``.

Runs on a bare CUDA machine with the system's torch (numpy, scipy, pandas, PyYAML, tqdm and pytest beside
it; no dvc, mlflow, ray or plotly, no package index), each step in its own process under its own time limit,
so a failing or slow step is a finding and never the end of the check:

1. the machine: torch, CUDA, the driver, the GPU;
2. the ``gpu``-marked tests (``pytest -m gpu``);
3. the Hessian monitor's dense/Krylov crossover on this device (``hessian_dense_max_n``'s CUDA value);
4. ``benchmarks/pc_gpu.py`` at its quick default (graphs against eager, stacks, TF32, % of peak);
5. two gpu_medium sweeps through the real stage command with tracking off: S7 (TF32, stacked, CUDA graphs)
   and S9 (float64, the Hessian monitor), from MNIST's four idx ``.gz`` files in ``--mnist`` (default
   ``gpu-data/mnist``, which ``make gpu-data`` fills where the project's data module can fetch them), in
   the workspace ``--workspace`` (default ``.trainscape/gpu-check``), where a sweep cut by its limit resumes
   on the next check.

Five more steps run only when named (``--steps tiles routes analysis bp spectra``; routes and analysis each about
what one device call allows):

6. ``tiles``: ``benchmarks/fused_tiles.py``, the fused route's two kernels at the paper's deepest stack under
   each tile setting (within ``--tiles-limit`` seconds);
   ``routes``: ``pc_gpu.py`` at that stack (512:128:128 × 64 runs, TF32) on the engine's two routes, standard
   and fused, side by side, and the fused route again at the sweep's fastest setting where ``tiles`` ran;
7. ``analysis``: the paper's mupc_analysis on this machine, in the workspace ``--analysis-workspace`` at the
   paper profile with theory_width's widths cut to 512: the plan of its train units (the plan cache comes back
   as ``plan-calibration.json``, for ``make plan P=paper CAL=...``), then theory_width (the N = 512 nets) and
   theory_grid (its nets on the CPU, ``TRAINSCAPE_EXECUTOR=processes``) trained through the stage command,
   each within ``--analysis-limit`` seconds (a cut unit resumes), nets trained and seconds beside the plan;
8. ``bp``: ``benchmarks/bp_step.py`` on CUDA, a BP step with the hidden weights sliced per layer against one
   unbind, at the forward-pass study's deepest shapes;
9. ``spectra``: ``benchmarks/hessian_spectrum.py`` at hessian_init's largest spectra (n = 8,192, 16,384): the
   GPU's dense ``eigvalsh`` against the CPU's two-stage band route, alone and on every core at once (the
   processes executor's way), from the ``scipy-openblas32`` package that ``make gpu-data`` copies into
   ``gpu-data/pylib`` (carry it with the data).

Then one summary, ``summary.txt`` and ``summary.json`` in ``OUT``: every timing, the graphs-vs-eager ratios,
% of peak, the ``cuda_graphs`` outcome per group, and the plan's estimate beside the measured time. Each
step's log is in ``OUT`` too. Where torch sees no CUDA it says so in one line and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MNIST_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
               "t10k-labels-idx1-ubyte.gz")
SWEEPS = ("S7", "S9")
PROFILE = "gpu_medium"


def run_limited(cmd: list[str], log: Path, limit: float, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``cmd`` from the repository root with its output in ``log``; past ``limit`` seconds its process
    group gets SIGTERM, then SIGKILL 15 s later. Returns the exit code, the seconds and whether it was cut."""
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        cut = False
        try:
            rc = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            cut = True
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                rc = proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                rc = proc.wait()
    return {"rc": rc, "seconds": round(time.perf_counter() - t0, 2), "cut_at_limit": cut, "limit_s": limit,
            "log": log.name}


def cuda_torch(command: str, nothing: str) -> Any | None:
    """torch where it sees a CUDA device; else None, having said why in one line (``<command>: no CUDA here: …;
    <nothing>``): a command for a GPU machine run elsewhere is a no-op, not an error."""
    try:
        import torch
    except ImportError:
        print(f"{command}: no CUDA here: {sys.executable} has no torch; {nothing}")
        return None
    if not torch.cuda.is_available():
        print(f"{command}: no CUDA here: torch {torch.__version__} sees no CUDA device "
              f"(torch.version.cuda = {torch.version.cuda}); {nothing}")
        return None
    return torch


def tail(path: Path, n: int = 15) -> list[str]:
    return path.read_text(errors="replace").splitlines()[-n:] if path.exists() else []


# ----------------------------------------------------------------------------- 1. the machine


def machine(torch: Any) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(0)
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,name,memory.total,clocks.max.sm",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        smi = f"nvidia-smi failed: {exc}"
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                timeout=10).stdout.strip() or "unknown"
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                                 capture_output=True, text=True, timeout=30).stdout.strip()
        commit += " (with uncommitted changes)" if changed else ""
    except (OSError, subprocess.SubprocessError):
        commit = "unknown"
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": props.name,
            "capability": f"{props.major}.{props.minor}", "memory_gib": round(props.total_memory / 2**30, 1),
            "multiprocessors": props.multi_processor_count, "devices": torch.cuda.device_count(),
            "nvidia_smi": smi, "python": platform.python_version(), "python_path": sys.executable,
            "git_commit": commit}


# ----------------------------------------------------------------------------- 2. the gpu tests


def gpu_tests(out: Path, limit: float, paths: list[str] | None = None) -> dict[str, Any]:
    xml = out / "tests.xml"
    env = {**os.environ, "TRAINSCAPE_PROGRESS": "off", "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1"}
    res = run_limited([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider",
                       "--durations=10", f"--junitxml={xml}", *(paths or [])], out / "tests.log", limit, env)
    cases: list[dict[str, Any]] = []
    if xml.exists():
        for case in ET.parse(xml).getroot().iter("testcase"):
            outcome, message = "passed", ""
            for child in case:
                if child.tag in ("failure", "error", "skipped"):
                    outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                    message = (child.get("message") or "").splitlines()[0][:300] if child.get("message") else ""
            cases.append({"test": f"{case.get('classname')}::{case.get('name')}", "outcome": outcome,
                          "seconds": float(case.get("time") or 0), "message": message})
        xml.unlink()
    counts: dict[str, int] = {}
    for c in cases:
        counts[c["outcome"]] = counts.get(c["outcome"], 0) + 1
    return {**res, "counts": counts, "cases": cases, "tail": [] if cases else tail(out / "tests.log")}


# ----------------------------------------------------------------------------- 3. the Hessian crossover


def crossover(json_path: Path, budget: float) -> None:
    """Seconds of the dense ``eigvalsh`` route and of the Krylov route per shape on CUDA (float64, μPC ReLU
    nets after inference, 3 stacked runs as S9 stacks them): ``hessian_dense_max_n``'s CUDA value is the
    largest n = N·H where dense is still the faster (run in its own process by the check)."""
    import torch

    sys.path.insert(0, str(ROOT))
    from pipeline.studies.mupc.engine.energy import InferenceConfig, infer
    from pipeline.studies.mupc.engine.model import NetSpec, feedforward, init_weights
    from pipeline.studies.mupc.training import hessian_monitor as hm

    rows: list[dict[str, Any]] = []
    t_start = time.perf_counter()
    for N, H in ((128, 8), (256, 8), (512, 8), (512, 16), (512, 32)):
        if time.perf_counter() - t_start > budget:
            rows.append({"N": N, "H": H, "n": N * H, "note": "not measured: over the step's budget"})
            continue
        spec = NetSpec(D=784, N=N, H=H, d_y=10, act="relu", skips=True, param="mupc", init="standard_gauss")
        w = init_weights(spec, [0, 1, 2], dtype=torch.float64, device="cuda")
        g = torch.Generator(device="cuda").manual_seed(1)
        x = torch.rand(3, 1, 784, generator=g, dtype=torch.float64, device="cuda")
        y = torch.zeros(3, 1, 10, dtype=torch.float64, device="cuda")
        y[..., 3] = 1.0
        z = infer(spec, w, x, y, feedforward(spec, w, x)[0], 0.5, InferenceConfig(steps=H)).z
        row: dict[str, Any] = {"N": N, "H": H, "n": N * H, "runs": 3}
        for route, dense_max_n in (("krylov", 0), ("dense", N * H)):
            if route == "dense" and N * H > 8192:
                row["dense_s"] = None  # 3 × n² float64 above 1.5 GB and minutes of syevd: not a contender
                continue
            try:
                hm.monitor(spec, w, x, y, z, 0.0, dense_max_n=dense_max_n)  # warm-up (cuSOLVER handles, kernels)
                torch.cuda.synchronize()
                t = time.perf_counter()
                lo, hi, _, method = hm.monitor(spec, w, x, y, z, 0.0, dense_max_n=dense_max_n)
                torch.cuda.synchronize()
                row[f"{route}_s"] = round(time.perf_counter() - t, 4)
                row[f"{route}_method"] = method
                row[f"{route}_lambda"] = [float(lo.min()), float(hi.max())]
            except Exception as exc:  # a failing route is a finding
                row[f"{route}_s"] = None
                row[f"{route}_error"] = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"
        rows.append(row)
        del w, z
        torch.cuda.empty_cache()
    faster = [r["n"] for r in rows if r.get("dense_s") is not None and r.get("krylov_s") is not None
              and r["dense_s"] <= r["krylov_s"]]
    json_path.write_text(json.dumps({"rows": rows, "dense_faster_up_to_n": max(faster) if faster else None},
                                    indent=1))


def hessian_crossover(out: Path, limit: float) -> dict[str, Any]:
    path = out / "crossover.json"
    res = run_limited([sys.executable, str(Path(__file__).resolve()), "--crossover", str(path),
                       "--crossover-budget", str(0.6 * limit)], out / "crossover.log", limit)
    data = json.loads(path.read_text()) if path.exists() else {"rows": [], "tail": tail(out / "crossover.log")}
    path.unlink(missing_ok=True)
    if res["rc"] == 0:  # its numbers are in the summary; a failure keeps its log
        (out / "crossover.log").unlink(missing_ok=True)
    return {**res, **data}


# ----------------------------------------------------------------------------- 4. pc_gpu.py


def pc_bench(out: Path, limit: float, extra: list[str], name: str = "pc_gpu") -> dict[str, Any]:
    path = out / f"{name}.json"
    res = run_limited([sys.executable, "benchmarks/pc_gpu.py", "--json", str(path), *extra], out / f"{name}.log",
                      limit, {**os.environ, "PYTHONUNBUFFERED": "1"})
    data = json.loads(path.read_text()) if path.exists() else {}
    path.unlink(missing_ok=True)  # its rows are in the summary
    return {**res, **data}


# ----------------------------------------------------------------------------- 5. two sweeps


def workspace(ws: Path, mnist: Path, profile: str = PROFILE) -> dict[str, str]:
    """A workspace on ``profile`` (params copied from the checkout, tracking off), reading the datasets from
    ``mnist`` (the idx files themselves, or a folder per dataset); returns the stages' environment."""
    ws.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(ws / "params", ignore_errors=True)
    shutil.copytree(ROOT / "params", ws / "params")
    text = (ROOT / "params.yaml").read_text()
    text, n = re.subn(r"(?m)^profile:\s*\S+", f"profile: {profile}", text)
    if n != 1:
        raise SystemExit("gpu-check: params.yaml has no top-level `profile:` line to set")
    (ws / "params.yaml").write_text(text)
    return {**os.environ, "TRAINSCAPE_ROOT": str(ws), "TRAINSCAPE_TRACKING": "off",
            "TRAINSCAPE_DATA_MIRROR": str(mnist), "TRAINSCAPE_PLAN_CACHE": str(ws / "plan"),
            "TRAINSCAPE_JOURNAL": str(ws / "journal"),
            "TRAINSCAPE_PROGRESS": "off", "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg"}


def sweep_plan(ws: Path, unit: str, profile: str = PROFILE) -> dict[str, Any]:
    """What the stage will train (as it decides: the runs without a matching record in the workspace), in
    its stacked groups, with each group's FLOPs."""
    sys.path.insert(0, str(ROOT))
    from pipeline.config import load_section, read_tree
    from pipeline.studies.mupc.training.config import TrainingParams
    from pipeline.studies.mupc.training.cost import group_flops
    from pipeline.studies.mupc.training.sweep_expansion import (
        CONFIG_FILE,
        expand,
        is_done,
        resume_settings,
        run_part,
        stack_groups,
    )

    cfg = load_section(TrainingParams, read_tree(ws), "mupc_training", profile)
    folder = ws / "artifacts" / "mupc_training" / "train" / unit
    settings = resume_settings(cfg, unit, "cuda")

    def previous(rc: Any) -> dict[str, Any] | None:
        path = folder / run_part(rc) / CONFIG_FILE
        return json.loads(path.read_text()) if path.exists() else None

    runs = expand(cfg, unit)
    todo = [rc for rc in runs if not is_done(previous(rc), rc, settings)]
    groups = stack_groups(todo, cfg.max_stack)
    return {"runs": len(runs), "todo": len(todo), "groups": [len(g) for g in groups],
            "group_flops": [group_flops(cfg, g, "cuda") for g in groups], "precision": settings["precision"]}


GROUP_LINE = re.compile(r"group (\d+)/(\d+): (\d+) runs N=(\d+) H=(\d+) (\w+) \w+ in ([\d.]+) s")


def sweep(out: Path, ws: Path, env: dict[str, str], unit: str, limit: float, profile: str = PROFILE
          ) -> dict[str, Any]:
    plan = sweep_plan(ws, unit, profile)
    log = out / f"{unit}.log"
    res = run_limited([sys.executable, "-m", "stages.train", "mupc_training", unit, "--profile", profile], log,
                      limit, env)
    text = log.read_text(errors="replace")
    estimate = re.search(r"plan: .*?; estimate (.+?) \(calibrated on (.+?)\); ", text)
    groups = [{"group": int(m[1]), "runs": int(m[3]), "N": int(m[4]), "H": int(m[5]), "act": m[6],
               "seconds": float(m[7])} for m in GROUP_LINE.finditer(text)]
    done_flops = sum(plan["group_flops"][g["group"] - 1] for g in groups if g["group"] <= len(plan["group_flops"]))
    total_flops = sum(plan["group_flops"])
    train_s = sum(g["seconds"] for g in groups)
    records = sorted((ws / "artifacts" / "mupc_training" / "train" / unit / "runs").glob("*/config.json"))
    graphs: dict[str, int] = {}
    reasons: dict[str, int] = {}
    statuses: dict[str, int] = {}
    for path in records:
        rec = json.loads(path.read_text())
        key = {True: "on", False: "off"}.get(rec.get("cuda_graphs"), "not recorded")
        graphs[key] = graphs.get(key, 0) + 1
        statuses[rec.get("status", "?")] = statuses.get(rec.get("status", "?"), 0) + 1
        if rec.get("cuda_graphs_off"):
            reasons[rec["cuda_graphs_off"]] = reasons.get(rec["cuda_graphs_off"], 0) + 1
    return {**res, "plan": {k: v for k, v in plan.items() if k != "group_flops"},
            "plan_estimate": estimate[1].strip() if estimate else None,
            "plan_calibrated_on": estimate[2] if estimate else None,
            "groups_done": groups, "runs_trained_now": sum(g["runs"] for g in groups),
            "training_seconds": round(train_s, 2), "flops_done": done_flops, "flops_todo": total_flops,
            "extrapolated_seconds": round(train_s * total_flops / done_flops, 1) if done_flops else None,
            "run_records": len(records), "statuses": statuses, "cuda_graphs_runs": graphs,
            "cuda_graphs_off_reasons": reasons, "log_tail": tail(log, 8)}


# ----------------------------------------------------------------------------- 6. the engine's routes

def tiles_bench(out: Path, limit: float) -> dict[str, Any]:
    """``benchmarks/fused_tiles.py`` within ``limit`` (its own sweep stops 15 s before, to write its JSON)."""
    path = out / "fused_tiles.json"
    res = run_limited([sys.executable, "benchmarks/fused_tiles.py", "--limit", str(max(limit - 15, 10)), "--json",
                       str(path)], out / "fused_tiles.log", limit, {**os.environ, "PYTHONUNBUFFERED": "1"})
    return {**res, **(json.loads(path.read_text()) if path.exists() else {})}


def routes_args(tiles: dict[str, Any] | None) -> list[str]:
    """:data:`ROUTES_ARGS`, plus the fused route at the tile sweep's fastest setting where it is not today's."""
    sys.path.insert(0, str(ROOT))
    from pipeline.studies.mupc.engine.fused import Tiles

    best = (tiles or {}).get("best")
    return ROUTES_ARGS + ([f"fused@{best}"] if best and best != Tiles().label() else [])


ROUTES_ARGS = ["--shapes", "512:128:128", "--stacks", "64", "--tf32", "on", "--no-float64", "--graph-max-stack", "8",
               "--engine", "standard", "fused"]


# ----------------------------------------------------------------------------- 7. mupc_analysis at paper scale

ANALYSIS_UNITS = {"theory_width": {}, "theory_grid": {"TRAINSCAPE_EXECUTOR": "processes"}}
EVERY_WIDTH = "    widths: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]\n    plot_widths: [2, 8, 32, 128, 512]"
PLAN_ROW = re.compile(r"^\s+mupc_analysis_train@(\w+)\s+[\d,]+\s+[\d,]+\s+\S+ \S+\s+(.+?)(?:\s{2}|$)", re.M)
NETS_LINE = re.compile(r"(\d+) nets, (\d+) kept, (\d+) to train")
TRAINED_LINE = re.compile(r"(\d+) nets trained in ([\d.]+) s")


def analysis_workspace(ws: Path, mnist: Path) -> dict[str, str]:
    """:func:`workspace` at the paper profile, theory_width's widths cut to 512 (its largest nets, which the
    unit's time is made of); the stages' environment."""
    env = workspace(ws, mnist, "paper")
    path = ws / "params" / "mupc_analysis.yaml"
    text = path.read_text()
    if EVERY_WIDTH not in text:
        raise SystemExit(f"gpu-check: {path} has no theory_width widths line as {EVERY_WIDTH!r} to cut")
    path.write_text(text.replace(EVERY_WIDTH, "    widths: [512]\n    plot_widths: [512]"))
    return env


def plan_rows(text: str) -> dict[str, str]:
    """Each mupc_analysis train unit's estimate, from ``pipeline.plan``'s table."""
    return {m[1]: m[2].strip() for m in PLAN_ROW.finditer(text)}


def unit_report(log: Path, folder: Path) -> dict[str, Any]:
    """What a theory unit's log says it trained, and the nets whose files are in its folder."""
    text = log.read_text(errors="replace") if log.exists() else ""
    nets, trained = NETS_LINE.search(text), TRAINED_LINE.search(text)
    return {"nets": int(nets[1]) if nets else None, "kept": int(nets[2]) if nets else None,
            "trained_in_s": float(trained[2]) if trained else None,
            "nets_on_disk": len(list(folder.glob("**/theory.npz"))), "moved_to_cpu": "train on the CPU" in text,
            "log_tail": tail(log, 6)}


def analysis(out: Path, ws: Path, mnist: Path, limit: float, units: list[str] | None = None) -> dict[str, Any]:
    env = analysis_workspace(ws, mnist)
    r: dict[str, Any] = {"download": run_limited([sys.executable, "-m", "stages.download", "mnist"],
                                                 out / "download.log", 120, env)}
    plan_log = out / "analysis_plan.log"
    r["plan"] = run_limited([sys.executable, "-m", "pipeline.plan", "--profile", "paper", "--stages",
                             "mupc_analysis_train@*", "--detail"], plan_log, limit, env)
    r["plan"]["estimates"] = plan_rows(plan_log.read_text(errors="replace"))
    for cache in (ws / "plan").glob("cuda-*.json"):
        shutil.copyfile(cache, out / "plan-calibration.json")
    r["units"] = {}
    for unit in units or list(ANALYSIS_UNITS):
        extra = ANALYSIS_UNITS[unit]
        log = out / f"analysis_{unit}.log"
        res = run_limited([sys.executable, "-m", "stages.train", "mupc_analysis", unit, "--profile", "paper"], log,
                          limit, {**env, **extra})
        r["units"][unit] = {**res, **extra, **unit_report(log, ws / "artifacts" / "mupc_analysis" / "train" / unit)}
    return r


BP_ARGS = ["--device", "cuda", "--shapes", "1024:512", "512:512", "512:128", "--seconds", "2"]


def bp_bench(out: Path, limit: float) -> dict[str, Any]:
    log = out / "bp_step.log"
    res = run_limited([sys.executable, "benchmarks/bp_step.py", *BP_ARGS], log, limit,
                      {**os.environ, "PYTHONUNBUFFERED": "1"})
    return {**res, "lines": tail(log, 8)}


def spectra_args(cores: int) -> list[str]:
    return ["--shapes", "128:64", "128:128", "--routes", "2-stage N", "dense cuda", "--dense-max-n", "16384",
            "--workers", str(cores)]


def spectra_bench(out: Path, limit: float, pylib: Path) -> dict[str, Any]:
    log = out / "hessian_spectrum.log"
    path = os.pathsep.join(p for p in (str(pylib), os.environ.get("PYTHONPATH", "")) if p)
    res = run_limited([sys.executable, "benchmarks/hessian_spectrum.py", *spectra_args(os.cpu_count() or 1)], log,
                      limit, {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path})
    return {**res, "lines": tail(log, 8)}


def write_pylib(folder: Path) -> None:
    """The ``scipy-openblas32`` package (its module and shared library) into ``folder/pylib``, for a machine
    whose Python lacks it and reaches no package index: the two-stage band route needs it."""
    import scipy_openblas32

    src = Path(scipy_openblas32.__file__).parent
    dst = folder / "pylib" / "scipy_openblas32"
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("include", "cmake", "pkgconfig", "__pycache__"))
    print(f"gpu-data: scipy-openblas32 {scipy_openblas32.get_openblas_config().split()[1]} copied to {dst}")


def write_data(folder: Path, names: tuple[str, ...] = ("mnist", "fashion_mnist")) -> None:
    """Each dataset's four idx files, gzipped, into ``folder/<name>`` from the project's data module (checksums
    verified), so that they can travel to a machine that reaches no dataset source."""
    import gzip

    sys.path.insert(0, str(ROOT))
    from pipeline.data import fetch
    from pipeline.io import write_bytes

    local = ROOT / "artifacts" / "data"
    for name in names:
        files, source = fetch(name, mirror_dir=local / name if (local / name).is_dir() else None)
        for file, raw in files.items():
            write_bytes(folder / name / f"{file}.gz", gzip.compress(raw, 9, mtime=0))
        print(f"gpu-data: {name} from {source} written to {folder / name}")


# ----------------------------------------------------------------------------- the summary


def fmt_seconds(s: float | None) -> str:
    return "—" if s is None else (f"{s:.1f} s" if s < 120 else f"{s / 60:.1f} min")


def summary_text(s: dict[str, Any]) -> str:
    m = s["machine"]
    lines = [f"gpu-check at {m['git_commit'][:10]}: {m['gpu']} (capability {m['capability']}, {m['memory_gib']} GiB, "
             f"{m['multiprocessors']} SMs), torch {m['torch']}, CUDA {m['cuda']}; nvidia-smi: {m['nvidia_smi']}",
             f"total {fmt_seconds(s['seconds'])}"]
    t = s.get("tests")
    if t:
        lines += ["", f"gpu tests: {t['counts']} in {fmt_seconds(t['seconds'])}"
                  + (" (cut at its limit)" if t["cut_at_limit"] else "") + f", exit {t['rc']}"]
        lines += [f"  {c['outcome']:>7} {c['seconds']:6.1f} s  {c['test']}" + (f": {c['message']}" if c["message"]
                                                                              else "") for c in t["cases"]]
        lines += [f"  | {ln}" for ln in t.get("tail", [])]
    h = s.get("crossover")
    if h:
        lines += ["", "Hessian monitor, dense vs Krylov on this GPU (float64, 3 runs), in "
                  f"{fmt_seconds(h['seconds'])}:"]
        for r in h.get("rows", []):
            lines.append(f"  N={r['N']} H={r['H']} n={r['n']}: dense {fmt_seconds(r.get('dense_s'))}, "
                         f"Krylov {fmt_seconds(r.get('krylov_s'))}" + "".join(
                             f"; {k}: {r[k]}" for k in ("note", "dense_error", "krylov_error") if r.get(k)))
        lines.append(f"  dense is faster up to n = {h.get('dense_faster_up_to_n')}")
        lines += [f"  | {ln}" for ln in h.get("tail", [])]
    b = s.get("pc_gpu")
    if b:
        cut = " (cut at its limit)" if b["cut_at_limit"] else ""
        lines += ["", f"pc_gpu.py (default) in {fmt_seconds(b['seconds'])}{cut}, exit {b['rc']}"]
        if b.get("peak_tflops"):
            lines.append("  matmul peak: " + ", ".join(f"{k} {v:.1f} TFLOP/s" for k, v in b["peak_tflops"].items()))
        for r in b.get("rows", []):
            ratio = f"{r['graph_over_eager']:.2f}x" if r.get("graph_over_eager") else "—"
            lines.append(f"  {r['N']}:{r['H']}:{r['T']} R={r['R']} {r['precision']}: "
                         f"eager {r['eager_its'] or 0:.1f} it/s, "
                         f"graph {r['graph_its'] or 0:.1f} it/s ({ratio}), {r['tflops'] or 0:.2f} TFLOP/s = "
                         f"{r['pct_peak'] or 0:.1f} % of peak; setup {r['setup_s'] or 0:.2f} s, capture "
                         f"{r['capture_s'] or 0:.2f} s {r['note']}")
        lines += [f"  {ln}" for ln in b.get("paper_estimate", [])]
        if not b.get("rows"):
            lines += [f"  | {ln}" for ln in tail(Path(s["out"]) / "pc_gpu.log")]
    b = s.get("tiles")
    if b:
        cut = " (cut at its limit)" if b["cut_at_limit"] else ""
        lines += ["", f"fused_tiles.py at {b.get('shape')} x {b.get('runs')} runs, B = {b.get('batch')}, TF32, in "
                  f"{fmt_seconds(b['seconds'])}{cut}, exit {b['rc']}; copy {b.get('copy_tb_per_s') or 0:.2f} TB/s; "
                  f"fastest pair {b.get('best')}"]
        ranked = sorted((r for r in b.get("kernels", []) if "s" in r), key=lambda r: (r["kernel"], r["s"]))
        for kernel in ("errors", "step", "step_wt"):
            rows = [r for r in ranked if r["kernel"] == kernel]
            lines += [f"  {kernel} {r['tiles']}: {r['s'] * 1e3:.2f} ms, {r['tb_per_s']:.2f} TB/s, "
                      f"{r['pct_copy']:.0f} % of copy" for r in rows[:4]]
        lines += [f"  failed {r['kernel']} {r['tiles']}: {r['failed']}" for r in b.get("kernels", []) if "failed" in r]
        if not b.get("kernels"):
            lines += [f"  | {ln}" for ln in tail(Path(s["out"]) / "fused_tiles.log")]
    b = s.get("routes")
    if b:
        cut = " (cut at its limit)" if b["cut_at_limit"] else ""
        lines += ["", f"the engine's routes at 512:128:128 x 64, TF32, in {fmt_seconds(b['seconds'])}{cut}, "
                  f"exit {b['rc']}"]
        lines += [f"  {r.get('engine', 'standard')}: {r['eager_its'] or 0:.1f} it/s, "
                  f"{r.get('gb_per_it') or 0:,.1f} GB/it, {r.get('tb_per_s') or 0:.2f} TB/s, "
                  f"{r.get('pct_bandwidth') or 0:.0f} % of copy bandwidth, "
                  f"{r.get('pct_floor') or 0:.1f} % of the memory floor" for r in b.get("rows", [])]
    a = s.get("analysis")
    if a:
        lines += ["", "mupc_analysis, paper profile (theory_width at N = 512): plan of the train units "
                  f"(exit {a['plan']['rc']}, {fmt_seconds(a['plan']['seconds'])})"]
        lines += [f"  {u}: {e}" for u, e in a["plan"]["estimates"].items()]
        for unit, u in a["units"].items():
            how = f" ({u['TRAINSCAPE_EXECUTOR']} executor)" if "TRAINSCAPE_EXECUTOR" in u else ""
            lines.append(f"  {unit}{how}: {u['nets_on_disk']} of {u['nets']} nets on disk, trained in "
                         f"{fmt_seconds(u['trained_in_s'])}" + (" (cut at its limit; it resumes)" if u["cut_at_limit"]
                                                                 else f", exit {u['rc']}"))
            lines += [f"  | {ln}" for ln in u["log_tail"]]
    b = s.get("bp")
    if b:
        lines += ["", f"bp_step.py on CUDA in {fmt_seconds(b['seconds'])}, exit {b['rc']}"]
        lines += [f"  {ln}" for ln in b["lines"]]
    b = s.get("spectra")
    if b:
        lines += ["", f"hessian_spectrum.py (GPU dense, CPU band) in {fmt_seconds(b['seconds'])}, exit {b['rc']}"]
        lines += [f"  {ln}" for ln in b["lines"]]
    for unit, r in s.get("sweeps", {}).items():
        p = r["plan"]
        lines += ["", f"{unit} ({p['precision']}): {p['todo']} of {p['runs']} runs to train in "
                  f"{len(p['groups'])} groups; {r['runs_trained_now']} trained in {fmt_seconds(r['seconds'])}"
                  + (" (cut at its limit; it resumes)" if r["cut_at_limit"] else f", exit {r['rc']}"),
                  f"  plan's estimate {r['plan_estimate']} (calibrated on {r['plan_calibrated_on']}); measured: "
                  f"{fmt_seconds(r['training_seconds'])} of training for {r['flops_done']:.3g} of "
                  f"{r['flops_todo']:.3g} FLOPs, extrapolated {fmt_seconds(r['extrapolated_seconds'])}",
                  f"  cuda_graphs per run: {r['cuda_graphs_runs']}; statuses {r['statuses']}"]
        lines += [f"  graphs off ({n} runs): {why}" for why, n in r["cuda_graphs_off_reasons"].items()]
        lines += [f"  group {g['group']}: {g['runs']} runs N={g['N']} H={g['H']} {g['act']} {g['seconds']:.1f} s"
                  for g in r["groups_done"]]
        lines += [f"  | {ln}" for ln in r["log_tail"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="folder for the summary and the logs")
    ap.add_argument("--mnist", type=Path, default=ROOT / "gpu-data" / "mnist", help="MNIST's four idx .gz files")
    ap.add_argument("--workspace", type=Path, default=ROOT / ".trainscape" / "gpu-check")
    ap.add_argument("--steps", nargs="+", default=["tests", "crossover", "pc_gpu", "sweeps"],
                    choices=["tests", "crossover", "pc_gpu", "sweeps", "tiles", "routes", "analysis", "bp", "spectra"])
    ap.add_argument("--analysis-workspace", type=Path, default=ROOT / ".trainscape" / "gpu-analysis")
    ap.add_argument("--analysis-limit", type=float, default=150, help="seconds for the plan and for each unit")
    ap.add_argument("--sweeps", nargs="+", default=list(SWEEPS))
    ap.add_argument("--tests-limit", type=float, default=120)
    ap.add_argument("--tests-paths", nargs="+", help="test files for the tests step (default: every gpu test)")
    ap.add_argument("--tiles-limit", type=float, default=130, help="seconds for the fused route's tile sweep")
    ap.add_argument("--analysis-units", nargs="+", choices=list(ANALYSIS_UNITS), default=list(ANALYSIS_UNITS),
                    help="the mupc_analysis train units the analysis step trains after its plan")
    ap.add_argument("--crossover-limit", type=float, default=60)
    ap.add_argument("--pc-gpu-limit", type=float, default=150)
    ap.add_argument("--sweep-limit", type=float, default=100, help="seconds per sweep (a cut sweep resumes)")
    ap.add_argument("--pc-gpu-args", default="", help="arguments for pc_gpu.py (default: its quick default)")
    ap.add_argument("--write-data", type=Path, help="write MNIST's and Fashion-MNIST's idx .gz files into "
                    "<this>/mnist and <this>/fashion_mnist (where the project's data module can fetch them), the "
                    "scipy-openblas32 package into <this>/pylib, and stop: what `make gpu-data` does")
    ap.add_argument("--crossover", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--crossover-budget", type=float, default=40, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.crossover:
        crossover(a.crossover, a.crossover_budget)
        return 0
    if a.write_data:
        write_data(a.write_data)
        write_pylib(a.write_data)
        return 0
    torch = cuda_torch("gpu-check", "nothing checked")
    if torch is None:
        return 0
    if a.out is None:
        ap.error("--out is required on a CUDA machine (make gpu-check OUT=<dir>)")
    missing = ([f for f in MNIST_FILES if not (a.mnist / f).is_file()]
               if {"sweeps", "analysis"} & set(a.steps) else [])
    if missing:
        print(f"gpu-check: --mnist {a.mnist} lacks {missing}; `make gpu-data` writes them (run it where the "
              f"project's data module can fetch MNIST), or name another folder, or leave out the sweeps step",
              file=sys.stderr)
        return 2
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    s: dict[str, Any] = {"out": str(out), "machine": machine(torch)}
    m = s["machine"]
    print(f"gpu-check: {m['gpu']}, torch {m['torch']}, CUDA {m['cuda']}, nvidia-smi: {m['nvidia_smi']}", flush=True)

    def save() -> None:
        s["seconds"] = round(time.perf_counter() - t0, 1)
        (out / "summary.json").write_text(json.dumps(s, indent=1))
        (out / "summary.txt").write_text(summary_text(s))

    if "tests" in a.steps:
        s["tests"] = gpu_tests(out, a.tests_limit, a.tests_paths)
        save()
        print(f"gpu tests: {s['tests']['counts']} in {s['tests']['seconds']} s", flush=True)
    if "crossover" in a.steps:
        s["crossover"] = hessian_crossover(out, a.crossover_limit)
        save()
        print(f"Hessian crossover: dense faster up to n = {s['crossover'].get('dense_faster_up_to_n')}", flush=True)
    if "pc_gpu" in a.steps:
        s["pc_gpu"] = pc_bench(out, a.pc_gpu_limit, a.pc_gpu_args.split())
        save()
        print(f"pc_gpu.py: {len(s['pc_gpu'].get('rows', []))} settings in {s['pc_gpu']['seconds']} s", flush=True)
    if "sweeps" in a.steps:
        ws = a.workspace.resolve()
        env = workspace(ws, a.mnist.resolve())
        s["download"] = run_limited([sys.executable, "-m", "stages.download", "mnist"], out / "download.log", 120, env)
        if s["download"]["rc"] == 0:
            (out / "download.log").unlink()
        s["sweeps"] = {}
        for unit in a.sweeps:
            s["sweeps"][unit] = sweep(out, ws, env, unit, a.sweep_limit)
            save()
            r = s["sweeps"][unit]
            print(f"{unit}: {r['runs_trained_now']} runs trained in {r['seconds']} s; cuda_graphs "
                  f"{r['cuda_graphs_runs']}", flush=True)
    if "tiles" in a.steps:
        s["tiles"] = tiles_bench(out, a.tiles_limit)
        save()
        print(f"fused_tiles.py: fastest {s['tiles'].get('best')} in {s['tiles']['seconds']} s", flush=True)
    if "routes" in a.steps:
        s["routes"] = pc_bench(out, a.pc_gpu_limit, routes_args(s.get("tiles")), "routes")
        save()
    if "analysis" in a.steps:
        s["analysis"] = analysis(out, a.analysis_workspace.resolve(), a.mnist.resolve(), a.analysis_limit,
                                 a.analysis_units)
        save()
    if "bp" in a.steps:
        s["bp"] = bp_bench(out, 120)
    if "spectra" in a.steps:
        s["spectra"] = spectra_bench(out, 400, a.mnist.parent / "pylib")
        save()
    save()
    print(summary_text(s), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
