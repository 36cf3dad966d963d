"""The paper's Figure 1 at the paper's own scale on one GPU: ``make gpu-headline OUT=<dir>``.

The slice is the ``headline`` profile of ``params/mupc_training.yaml`` (N = 512, H = T = 128, the paper's lrs,
batch and datasets; what it cuts against the paper is written there and printed by ``--cuts``). On a bare CUDA
machine with the system's torch (no dvc, mlflow or plotly), in a workspace (``--workspace``, default
``.trainscape/gpu-headline``) with tracking off, reading MNIST and Fashion-MNIST from the idx ``.gz`` files in
``--data`` (default ``gpu-data``: ``<data>/mnist`` and ``<data>/fashion_mnist``, which ``make gpu-data`` writes):

1. trains :data:`TRAIN_UNITS` in that order through the real stage command, each within what is left of
   ``--budget`` seconds; a sweep cut there keeps its finished runs and resumes on the next call;
2. runs the extract units of :data:`EXTRACT_UNITS` whose sweeps are complete;
3. evaluates the claims (``stages.claims --study mupc_training --built``) and reports :data:`CLAIMS`;
4. writes ``summary.txt`` and ``summary.json`` (runs, times against the plan, every claim's verdict with its
   numbers, the cuts) and ``headline.tar.gz``: the slice's train folders (each run's config and arrays, and
   ``runs.csv``), its extract outputs and metrics, ``claims.json``, the params, the plan's cache and the logs.

``tests/mupc_training/fixtures/headline/`` holds what such a run brought back, with its provenance; a test
evaluates the Figure 1 claims on it. Without CUDA the command says so in one line and exits 0.

    python3 benchmarks/gpu_headline.py --out OUT [--budget 420]    # make gpu-headline OUT=<dir>
    python3 benchmarks/gpu_headline.py --cuts                      # the slice against the paper profile
    python benchmarks/gpu_headline.py --rebuild A B --out OUT       # judge and draw trained runs here

``--rebuild`` takes the slice's train folders from bundles unpacked in A, B, ... (a later one's unit replaces an
earlier one's), runs the extract units, the claims and, where plotly is at hand, the render units (HTML, PNG,
PDF of F16–F19 and F28) on this machine, in the workspace, and writes the summary: how the fixture is judged.
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_check as gc  # the first-contact check's workspace, limits, machine and sweep report

ROOT = gc.ROOT
PROFILE = "headline"
STUDY = "mupc_training"
# In the order the Figure 1 claims need them: F19 (S10 and B2), F18 (S6, S12, B2), F16/F17 (S10, S11), F28 (S13)
TRAIN_UNITS = ("B2", "S10", "S6", "S12", "S11", "S13")
EXTRACT_UNITS = ("F19", "F18", "F16", "F17", "F28")
CLAIMS = ("mupc_near_bp_128_layers", "mupc_beats_pc_128_layers", "mupc_deepest_trains_long",
          "pc_fails_at_128_layers_for_any_lr")
DATASETS = ("mnist", "fashion_mnist")


def config(profile: str, root: Path = ROOT) -> Any:
    sys.path.insert(0, str(ROOT))
    from pipeline.config import load_section, read_tree
    from pipeline.studies.mupc.training.config import TrainingParams

    return load_section(TrainingParams, read_tree(root), STUDY, profile)


def cuts(profile: str = PROFILE, against: str = "paper") -> list[str]:
    """What the slice leaves out of the paper profile, sweep by sweep, from the two resolved profiles: the
    values of each grid key that the slice's grids lack (seeds, epochs, lrs, activations, depths...)."""
    sys.path.insert(0, str(ROOT))
    from pipeline.studies.mupc.training.sweep_expansion import expand

    cut, full = config(profile), config(against)
    lines = []
    for unit in TRAIN_UNITS:
        mine, theirs = expand(cut, unit), expand(full, unit)
        parts = []
        for key in ("dataset", "act", "H", "act_lr", "param_lr", "epochs", "seed"):
            have, paper = {getattr(rc, key) for rc in mine}, {getattr(rc, key) for rc in theirs}
            if paper - have:
                parts.append(f"{key} {sorted(have)} (paper {sorted(paper)})")
        runs = f"{len(mine)} of {len(theirs)} runs"
        lines.append(f"{unit}: {runs}" + (f"; {'; '.join(parts)}" if parts else "; as the paper"))
    return lines


def stage_env(ws: Path, data: Path, overrides: dict[str, Any] | None = None) -> dict[str, str]:
    """The workspace's environment; ``overrides`` (dotted keys of the study's section, e.g. ``allow_tf32``)
    are written into its copy of the headline profile, so a variant runs through the same stage commands."""
    env = gc.workspace(ws, data, PROFILE)
    if overrides:
        import yaml

        path = ws / "params" / f"{STUDY}.yaml"
        tree = yaml.safe_load(path.read_text())
        node = tree[STUDY].setdefault("profiles", {}).setdefault(PROFILE, {})
        for key, value in overrides.items():
            *parents, leaf = key.split(".")
            target = node
            for part in parents:
                target = target.setdefault(part, {})
            target[leaf] = value
        path.write_text(yaml.safe_dump(tree, sort_keys=False))
    return env


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs, each VALUE read as YAML (``false``, ``0.1``, ``[0, 1]``)."""
    import yaml

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"gpu-headline: --set {item!r} is not allowed; allowed: KEY=VALUE, e.g. cuda_graphs=false")
        out[key] = yaml.safe_load(value)
    return out


def complete(ws: Path, unit: str) -> bool:
    return gc.sweep_plan(ws, unit, PROFILE)["todo"] == 0


def extract(out: Path, ws: Path, env: dict[str, str], unit: str, limit: float) -> dict[str, Any]:
    return gc.run_limited([sys.executable, "-m", "stages.extract", STUDY, unit, "--profile", PROFILE],
                          out / f"extract_{unit}.log", limit, env)


def verdicts(ws: Path) -> list[dict[str, Any]]:
    """The Figure 1 claims' ledger rows (claims.json of the workspace): verdict, measured numbers, reads."""
    path = ws / "reports" / "claims.json"
    if not path.exists():
        return []
    rows = {r["claim"]: r for r in json.loads(path.read_text())["claims"]}
    return [{"claim": c, "status": rows[c]["status"], "measured": rows[c]["measured"],
             "reads": [{"stage": r["stage"], "path": r["path"], "value": r["value"]} for r in rows[c]["reads"]]}
            if c in rows else {"claim": c, "status": "not measured (its extract units were not built)"}
            for c in CLAIMS]


def bundle(out: Path, ws: Path) -> Path:
    """``headline.tar.gz``: the slice's train and extract folders, metrics, claims, params, plan cache, logs."""
    path = out / "headline.tar.gz"
    keep = [ws / "artifacts" / STUDY / "train" / u for u in TRAIN_UNITS]
    keep += [ws / "artifacts" / STUDY / "extract" / u for u in EXTRACT_UNITS]
    keep += [ws / "reports" / "metrics" / f"{STUDY}_extract@{u}.json" for u in EXTRACT_UNITS]
    keep += [ws / "reports" / "claims.json", ws / "params.yaml", ws / "params" / f"{STUDY}.yaml", ws / "plan"]
    with tarfile.open(path, "w:gz") as tar:
        for p in keep:
            if p.exists():
                tar.add(p, arcname=str(p.relative_to(ws)))
        for log in sorted(out.glob("*.log")):
            tar.add(log, arcname=f"logs/{log.name}")
        info = tarfile.TarInfo("summary.json")
        data = (out / "summary.json").read_bytes()
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    for log in out.glob("*.log"):
        log.unlink()
    return path


def summary_text(s: dict[str, Any]) -> str:
    m = s["machine"]
    lines = [f"gpu-headline at {m['git_commit'][:10]}: {m['gpu']}, torch {m['torch']}, CUDA {m['cuda']}; "
             f"total {gc.fmt_seconds(s['seconds'])} (training budget {gc.fmt_seconds(s['budget_s'])})"
             + (f"; variant {s['overrides']}" if s.get("overrides") else ""),
             "", "the slice against the paper profile:", *(f"  {c}" for c in s["cuts"]), ""]
    for unit, r in s.get("train", {}).items():
        p = r["plan"]
        if "skipped" in r:
            lines.append(f"{unit}: not trained ({r['skipped']}): {p['todo']} of {p['runs']} runs to train")
            continue
        state = " (cut at its limit; it resumes)" if r["cut_at_limit"] else f", exit {r['rc']}"
        lines += [f"{unit} ({p['precision']}): {p['todo']} of {p['runs']} runs to train; {r['runs_trained_now']} "
                  f"trained in {gc.fmt_seconds(r['seconds'])}{state}; plan {r['plan_estimate']}, measured "
                  f"{gc.fmt_seconds(r['training_seconds'])} of training; statuses {r['statuses']}; "
                  f"cuda_graphs {r['cuda_graphs_runs']}"]
        lines += [f"  group {g['group']}: {g['runs']} runs N={g['N']} H={g['H']} {g['act']} {g['seconds']:.1f} s"
                  for g in r["groups_done"]]
        if r["rc"] not in (0, None) and not r["cut_at_limit"]:
            lines += [f"  | {ln}" for ln in r["log_tail"]]
    for unit, r in s.get("extract", {}).items():
        lines.append(f"extract {unit}: " + (r if isinstance(r, str) else f"exit {r['rc']} in {r['seconds']} s"))
    lines += ["", "Figure 1 claims:"]
    for v in s.get("claims", []):
        lines.append(f"  {v['claim']}: {v['status']}")
        if "measured" in v:
            lines.append(f"    measured: {json.dumps(v['measured'], default=str)[:1500]}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="folder for the summary and the bundle")
    ap.add_argument("--data", type=Path, default=ROOT / "gpu-data", help="<data>/mnist and <data>/fashion_mnist")
    ap.add_argument("--workspace", type=Path, default=ROOT / ".trainscape" / "gpu-headline")
    ap.add_argument("--budget", type=float, default=420, help="seconds for all the training (a cut sweep resumes)")
    ap.add_argument("--extract-limit", type=float, default=120)
    ap.add_argument("--units", nargs="+", choices=TRAIN_UNITS, help="train only these units (default: the slice)")
    ap.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                    help="a variant: values of the headline profile changed in the workspace (e.g. cuda_graphs=false)")
    ap.add_argument("--cuts", action="store_true", help="print the slice's cuts against the paper profile and stop")
    ap.add_argument("--plan", action="store_true", help="print `make plan` of the slice on this machine and stop")
    ap.add_argument("--rebuild", nargs="+", type=Path, metavar="FOLDER",
                    help="no training: the train folders of these unpacked bundles, extracted, judged and drawn here")
    a = ap.parse_args(argv)
    if a.cuts:
        print("\n".join(cuts()))
        return 0
    if a.plan:  # `make plan` of the slice, as its command line
        stages = [*(f"{STUDY}_train@{u}" for u in TRAIN_UNITS), *(f"{STUDY}_extract@{u}" for u in EXTRACT_UNITS)]
        return subprocess.run([sys.executable, "-m", "pipeline.plan", "--profile", PROFILE, "--stages", *stages],
                              cwd=ROOT).returncode
    if a.rebuild:
        if a.out is None:
            ap.error("--rebuild needs --out")
        return rebuild(a.rebuild, a.out.resolve(), a.data.resolve(), a.workspace.resolve(), a.extract_limit)
    torch = gc.cuda_torch("gpu-headline", "nothing trained")
    if torch is None:
        return 0
    if a.out is None:
        ap.error("--out is required on a CUDA machine (make gpu-headline OUT=<dir>)")
    return run(a.out.resolve(), a.data.resolve(), a.workspace.resolve(), a.budget, a.extract_limit,
               gc.machine(torch), tuple(a.units or TRAIN_UNITS), parse_overrides(a.set))


def run(out: Path, data: Path, ws: Path, budget: float, extract_limit: float, machine: dict[str, Any],
        units: tuple[str, ...] = TRAIN_UNITS, overrides: dict[str, Any] | None = None) -> int:
    """Train, extract, judge and write the summary and the bundle (the steps of the module docstring)."""
    sys.path.insert(0, str(ROOT))
    from pipeline.data import DataError, dataset_info, from_folder

    missing = []
    for name in DATASETS:
        try:
            from_folder(dataset_info(name), data)
        except DataError as exc:
            missing.append(str(exc))
    if missing:
        print(f"gpu-headline: --data {data}: {'; '.join(missing)}; `make gpu-data` writes them", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    s: dict[str, Any] = {"machine": machine, "profile": PROFILE, "budget_s": budget, "cuts": cuts(), "train": {},
                         "extract": {}, "overrides": overrides or {}}
    print(f"gpu-headline: {machine['gpu']}, torch {machine['torch']}; budget {budget:.0f} s", flush=True)

    def save() -> None:
        s["seconds"] = round(time.perf_counter() - t0, 1)
        (out / "summary.json").write_text(json.dumps(s, indent=1, default=str))
        (out / "summary.txt").write_text(summary_text(s))

    env = stage_env(ws, data, overrides)
    for name in DATASETS:
        gc.run_limited([sys.executable, "-m", "stages.download", name], out / f"download_{name}.log", 120, env)
    t_train = time.perf_counter()
    for unit in units:
        left = budget - (time.perf_counter() - t_train)
        if left < 20:
            plan = gc.sweep_plan(ws, unit, PROFILE)
            s["train"][unit] = {"skipped": "no training budget left",
                                "plan": {k: v for k, v in plan.items() if k != "group_flops"}}
            continue
        s["train"][unit] = gc.sweep(out, ws, env, unit, left, PROFILE)
        save()
        r = s["train"][unit]
        print(f"{unit}: {r['runs_trained_now']} runs trained in {r['seconds']} s"
              + (" (cut)" if r["cut_at_limit"] else ""), flush=True)
    judge(s, out, ws, env, {u for u in TRAIN_UNITS if complete(ws, u)}, extract_limit, save)
    bundle(out, ws)
    save()
    print(summary_text(s), end="")
    return 0


def judge(s: dict[str, Any], out: Path, ws: Path, env: dict[str, str], done: set[str], extract_limit: float,
          save: Any, draw: bool = False) -> None:
    """The extract units whose sweeps are ``done``, the claims, and (``draw``) the render units, into ``s``."""
    sys.path.insert(0, str(ROOT))
    from pipeline.studies.mupc.training.families import FAMILIES

    for unit in EXTRACT_UNITS:
        lacking = [sw for sw in FAMILIES[unit].reads() if sw not in done]
        s["extract"][unit] = (f"not run: {', '.join(lacking)} incomplete" if lacking
                              else extract(out, ws, env, unit, extract_limit))
        save()
    (ws / "reports" / "claims.json").unlink(missing_ok=True)  # a failed claims stage shows no earlier verdicts
    s["claims_run"] = gc.run_limited([sys.executable, "-m", "stages.claims", "--study", STUDY, "--built"],
                                     out / "claims.log", 120, env)
    s["claims"] = verdicts(ws)
    if draw:
        s["render"] = {u: gc.run_limited([sys.executable, "-m", "stages.render", STUDY, u, "--profile", PROFILE],
                                         out / f"render_{u}.log", 300, env)
                       for u in EXTRACT_UNITS if not isinstance(s["extract"][u], str) and s["extract"][u]["rc"] == 0}
    save()


def rebuild(folders: list[Path], out: Path, data: Path, ws: Path, extract_limit: float, draw: bool = True) -> int:
    """``--rebuild``: the train folders of ``folders`` (later ones replace earlier ones' units) judged and, with
    ``draw`` where plotly is at hand, drawn here; the summary names the folder each unit came from."""
    import importlib.util
    import shutil

    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(ws / "artifacts", ignore_errors=True)
    shutil.rmtree(ws / "reports", ignore_errors=True)
    env = stage_env(ws, data)
    source: dict[str, str] = {}
    for folder in folders:
        for unit in TRAIN_UNITS:
            src = folder / "artifacts" / STUDY / "train" / unit
            if src.is_dir():
                dst = ws / "artifacts" / STUDY / "train" / unit
                shutil.rmtree(dst, ignore_errors=True)
                shutil.copytree(src, dst)
                source[unit] = str(folder)
    machine = {"git_commit": "rebuild", "gpu": "none (runs trained elsewhere)", "torch": "", "cuda": None}
    s: dict[str, Any] = {"machine": machine, "profile": PROFILE, "budget_s": 0, "cuts": cuts(), "train": {},
                         "extract": {}, "rebuilt_from": source}

    def save() -> None:
        (out / "summary.json").write_text(json.dumps(s, indent=1, default=str))

    plotly = importlib.util.find_spec("plotly") is not None
    judge(s, out, ws, env, set(source), extract_limit, save, draw=draw and plotly)
    s["seconds"] = 0
    (out / "summary.txt").write_text(summary_text(s))
    print(summary_text(s), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
