"""A cost plan before compute: ``make plan`` for a whole profile, and each training stage's plan line.

For every unit of every stage of every study in a profile (a DVC stage each) the plan gives its runs, stacked
groups, the FLOPs of its products counted from the shapes, and an estimated wall time on this machine;
then totals per study and overall. A stage declares its cost per kind of unit (:attr:`~pipeline.contract.Units.cost`):
a light function returning the unit's :class:`~pipeline.contract.Work`, each part naming a probe that times
one step of its shape. Seconds per FLOP come from that probe, run once per distinct shape on this device
and cached in ``.trainscape/plan/<device>.json`` (``TRAINSCAPE_PLAN_CACHE`` names another folder), keyed by
probe, shape (dtype and precision included), torch version and the study's code (:func:`code_digest`: a faster
function is re-probed, not planned at its old rate); a work's estimate is its FLOPs times that
rate. A probe step above :data:`PROBE_FLOPS` is built scaled down by its probe (e.g. fewer layers and
inference steps, the width kept) and the rate extrapolated by FLOPs. Extract and render stages, and every
stage's process start-up, are the fixed :data:`FIXED_SECONDS` (labelled "fixed", not calibrated).

The runner prints a training stage's plan line before it starts and stops a stage estimated above
:data:`LONG_SECONDS` with exit 2, before any compute, unless ``TRAINSCAPE_ALLOW_LONG=1``. torch is imported
only to probe (and by stages, whose code loaded it already).

    python -m pipeline.plan [--profile paper] [--detail]     # make plan [P=paper]
    python -m pipeline.plan --profile headline --stages 'mupc_training_train@S1?' mupc_training_train@B2
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import hashlib
import heapq
import importlib
import importlib.metadata
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline import device as devices
from pipeline import registry
from pipeline.config import PROFILES, ConfigError, load_params, params_file
from pipeline.contract import Cost, Stage, Study, Work
from pipeline.executor import side_by_side
from pipeline.io import write_bytes
from pipeline.paths import repo_root, stage_name, study_dir
from pipeline.writer import read_file

CACHE_ENV = "TRAINSCAPE_PLAN_CACHE"
ALLOW_LONG_ENV = "TRAINSCAPE_ALLOW_LONG"
LONG_SECONDS = 24 * 3600  # a stage estimated above this stops before compute (exit 2)
# Per stage, not calibrated: a process's start-up (imports, params, provenance, tracking) and, for extract
# and render, their small work. The order of what benchmarks/stage_overhead.py measures (README: a whole
# imprint_extract@final process 2.45 s, imprint_render@glyph 10.8 s, on a loaded 2-core machine).
FIXED_SECONDS = {"train": 5.0, "extract": 3.0, "render": 10.0}
# The largest step a probe times; a larger one is built scaled down by its probe (about 0.05 s on one
# CPU thread; on a GPU a 128-layer PC iteration of three runs at N = 512, ≈ 50 ms on an H100: its scaled-down
# stand-ins ran several times slower per FLOP than the real shape).
PROBE_FLOPS = {"cpu": 1e9, "cuda": 2e12}
PROBE_SECONDS = 0.2  # each probe times its step (after one warm-up call) for about this long
RATIO_ROUNDS = 2  # a measured slowdown calls its step and its reference in turn this often (after a warm-up each)
WARM_CALL_SECONDS = 2.0  # a warm-up call this long is taken as the measurement (:func:`_time`)


# ----------------------------------------------------------------------------- the device


def planned_device() -> str:
    """The device stages would compute on here, as :func:`pipeline.device.resolve` decides it; torch is
    imported only where a GPU is visible (whether torch can use it is torch's to say)."""
    asked = os.environ.get(devices.ENV)
    if asked:
        return devices.check_available(asked, devices.ENV, "environment") if "torch" in sys.modules else asked
    if "torch" not in sys.modules and shutil.which("nvidia-smi") is None:
        return "cpu"
    importlib.import_module("torch")
    return devices.resolve()


def device_name(device: str) -> str:
    """``AMD EPYC, 2 CPUs`` or the GPU's name: what the calibration holds for."""
    torch = sys.modules.get("torch")
    if device.startswith("cuda"):
        index = int(device.partition(":")[2] or 0)
        if torch is not None and torch.cuda.is_available():
            return str(torch.cuda.get_device_name(index))
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", str(index)],
                                 capture_output=True, text=True, timeout=20, check=True).stdout.strip()
            if out:
                return out
        return "unknown GPU"
    return f"{devices.describe('cpu')['name']}, {os.cpu_count()} CPUs"


def torch_version() -> str:
    """torch's version without importing it (a calibration holds for one build)."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "none"


# ----------------------------------------------------------------------------- calibration


_DIGESTS: dict[str, str] = {}


def code_digest(module: str) -> str:
    """The digest of the code a probe times: the sources of its study's folder (``pipeline.studies.<study>``;
    else the module's own file). A change there keys the study's probes anew: the plan once kept the rate of a
    solver made 2x faster until its entries were deleted by hand."""
    if module not in _DIGESTS:
        parts = module.split(".")
        root = repo_root()
        folder = root.joinpath(*parts[:3]) if parts[:2] == ["pipeline", "studies"] and len(parts) > 3 else None
        files = sorted(folder.rglob("*.py")) if folder is not None and folder.is_dir() else \
            [root.joinpath(*parts).with_suffix(".py")]
        h = hashlib.sha256()
        for f in files:
            if f.is_file():
                h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
        _DIGESTS[module] = h.hexdigest()[:16]
    return _DIGESTS[module]


def cache_dir() -> Path:
    return Path(os.environ[CACHE_ENV]) if os.environ.get(CACHE_ENV) else repo_root() / ".trainscape" / "plan"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _time(step: Callable[[], None]) -> float:
    """Seconds per call of ``step``: one warm-up call, then the fastest of the calls made in about
    ``PROBE_SECONDS`` (at least one): the machine's speed, as the repository's benchmarks take it (a
    loaded machine is slower; the probes are too short to average the load). A first call of
    :data:`WARM_CALL_SECONDS` or more is the measurement itself: warming (allocations, lazy set-up) is a
    small part of it, and a probe timed at a cell's own shape (a band eigen-solve at n = 16,384: half a minute) is not
    run twice."""
    t0 = time.perf_counter()
    step()
    first = time.perf_counter() - t0
    if first >= WARM_CALL_SECONDS:
        return first
    calls: list[float] = []
    while sum(calls) < PROBE_SECONDS and len(calls) < 1000:
        t0 = time.perf_counter()
        step()
        calls.append(time.perf_counter() - t0)
    return min(calls)


def _time_side_by_side(step: Callable[[], None], reference: Callable[[], None],
                       rounds: int = RATIO_ROUNDS) -> tuple[float, float]:
    """Seconds per call of two steps whose ratio is wanted: each warmed once, then called in turn ``rounds``
    times, the fastest of each (the same call timed twice a few seconds apart varied by up to 1.7x here, and a
    drift shared by both sides cancels)."""
    step()
    reference()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(rounds):
        for fn, out in ((step, times[0]), (reference, times[1])):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    return min(times[0]), min(times[1])


@contextlib.contextmanager
def _torch_state(device: str) -> Iterator[None]:
    """A probe leaves torch as it found it: RNG, thread count, the float32 matmul precision (a stage probes
    before it trains)."""
    torch = importlib.import_module("torch")
    threads = torch.get_num_threads()
    precision = devices.matmul_precision(device)
    index = [int(device.partition(":")[2] or 0)] if device.startswith("cuda") else []
    try:
        with torch.random.fork_rng(devices=index):
            yield
    finally:
        torch.set_num_threads(threads)
        devices.set_matmul_precision(device, precision)


@contextlib.contextmanager
def _core_share(cores: int | None) -> Iterator[None]:
    """Probe as a worker with ``cores`` of the machine's cores would run (``device.cpu_threads``)."""
    before = devices.core_share()
    devices.share_cores(cores or before)
    try:
        yield
    finally:
        devices.share_cores(before)


def makespan(seconds: list[float], workers: int) -> float:
    """When the last of these tasks ends on ``workers`` workers, each taking the longest task left (a pool that
    takes them in the unit's own order ends at most one longest task later)."""
    loads = [0.0] * max(1, workers)
    for s in sorted(seconds, reverse=True):
        heapq.heapreplace(loads, loads[0] + s)
    return max(loads)


class Calibration:
    """Seconds per FLOP of each probed shape on one device, read from and written to its cache file; or, with
    ``recorded``, a cache file brought from another machine (a GPU's), read only: the plan of that machine
    here, probing nothing."""

    def __init__(self, device: str | None = None, recorded: Path | None = None):
        self.recorded = recorded
        if recorded is not None:
            doc = self._doc(recorded)
            if not doc or not {"device", "name", "torch", "entries"} <= set(doc):
                raise ConfigError(f"--calibration {recorded}: not a plan cache file (a JSON object with device, "
                                  f"name, torch and entries, as .trainscape/plan/<device>.json)")
            self.device, self.name, self.torch, self.path = doc["device"], doc["name"], doc["torch"], recorded
        else:
            self.device = device or planned_device()
            self.name = device_name(self.device)
            self.torch = torch_version()
            self.path = cache_dir() / f"{_slug(f'{self.device} {self.name}')}.json"
        # with TRAINSCAPE_EXECUTOR=processes, a unit's tasks run side by side: those on the CPU on their share of
        # the cores (probed there, under a key of their own), those on a GPU one after another on its one device;
        # planned as a makespan (plan_stage). A recorded calibration keeps the keys it was probed with.
        self.workers = side_by_side()
        self.cores = max(1, devices.cores() // self.workers) if self.workers > 1 and recorded is None else None
        self.entries: dict[str, dict[str, Any]] = self._read()
        self.probed: list[str] = []  # keys measured by this object (a warm cache measures none)
        self.failed: dict[str, str] = {}  # keys whose probe raised (or, recorded, that the file lacks), and why
        self.probe_seconds = 0.0

    @staticmethod
    def _doc(path: Path) -> dict[str, Any]:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _read(self) -> dict[str, dict[str, Any]]:
        entries = self._doc(self.path).get("entries", {})
        if self.recorded is None:
            return entries
        # a recorded calibration was probed at its own commit: its keys are read without their code
        return {json.dumps({k: v for k, v in json.loads(key).items() if k != "code"}, sort_keys=True): e
                for key, e in entries.items()}

    def on_cpu(self, work: Work) -> bool:
        """Whether ``work`` computes on the CPU: on the host by its nature, or by its own ``device`` (else the
        calibration's)."""
        return work.host or str(work.shape.get("device", self.device)) == "cpu"

    def key(self, module: str, work: Work, shared: bool = False) -> str:
        """``shared``: the work is a unit's ``ctx.map`` tasks, probed on a worker's share of the cores (the ones
        that run on the CPU)."""
        cores = {"cores": self.cores} if shared and self.cores and self.on_cpu(work) else {}
        code = {"code": code_digest(module)} if self.recorded is None else {}
        return json.dumps({"probe": f"{module}:{work.probe}", "shape": dict(work.shape), "torch": self.torch,
                           **cores, **code}, sort_keys=True)

    def rate(self, module: str, work: Work, probe: bool = True, shared: bool = False) -> float | None:
        """Seconds per FLOP of ``work``'s step on this device: cached, else probed now and cached (``probe``)
        or None; None when the probe fails (the plan then says so: an estimate never makes a stage crash)."""
        def measure(built: tuple[Callable[[], None], float]) -> dict[str, float]:
            step, flops = built
            seconds = _time(step)
            return {"seconds_per_flop": seconds / flops, "step_flops": flops, "step_seconds": seconds}

        entry = self._entry(module, work, shared, probe, measure)
        return None if entry is None else float(entry["seconds_per_flop"])

    def slowdown(self, module: str, work: Work, shared: bool = False) -> float | None:
        """The factor ``work.slowdown`` measures on this device (1 without one): the time of its probe's step over
        its reference's; cached, else probed now; None when the probe fails or a recorded calibration lacks it."""
        if work.slowdown is None:
            return 1.0

        def measure(built: tuple[Callable[[], None], Callable[[], None]]) -> dict[str, float]:
            seconds, reference_seconds = _time_side_by_side(*built)
            return {"slowdown": seconds / reference_seconds, "step_seconds": seconds,
                    "reference_seconds": reference_seconds}

        entry = self._entry(module, self.slowdown_work(work), shared, True, measure)
        return None if entry is None else float(entry["slowdown"])

    @staticmethod
    def slowdown_work(work: Work) -> Work:
        """The probe a work's ``slowdown`` names, as a work of its own (its calibration key)."""
        name, shape = work.slowdown or ("", {})
        return Work(work.label, name, shape, 0.0, host=work.host)

    def _entry(self, module: str, work: Work, shared: bool, probe: bool,
               measure: Callable[[Any], dict[str, float]]) -> dict[str, Any] | None:
        """The cached entry of ``work``'s probe, else (``probe``) its probe's result measured now and cached."""
        key = self.key(module, work, shared)
        if key not in self.entries and self.recorded is not None:
            self.failed[key] = f"not in the recorded calibration {self.recorded.name}"
            return None
        if key not in self.entries and not probe:
            return None
        if key not in self.entries:
            t0 = time.perf_counter()
            device = str(work.shape.get("device", self.device))
            kwargs = {"device": device, "budget": PROBE_FLOPS["cuda" if device.startswith("cuda") else "cpu"],
                      **work.shape}
            try:
                fn = getattr(importlib.import_module(module), work.probe)
                with _torch_state(device), _core_share(self.cores if shared and self.on_cpu(work) else None):
                    entry = measure(fn(**kwargs))
            except Exception as exc:  # reported in the plan, not raised
                self.failed[key] = f"{type(exc).__name__}: {exc}"
                return None
            finally:
                self.probe_seconds += time.perf_counter() - t0
            self.entries[key] = {**entry, "measured": time.strftime("%Y-%m-%dT%H:%M:%S")}
            self.probed.append(key)
            self._write()
        return self.entries[key]

    def _write(self) -> None:
        """Merge into the file (another stage may have added shapes meanwhile); written atomically."""
        merged = {**self._read(), **self.entries}
        doc = {"device": self.device, "name": self.name, "torch": self.torch, "entries": merged}
        write_bytes(self.path, (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode())


# ----------------------------------------------------------------------------- stage plans


@dataclass
class StagePlan:
    """One stage's line of the plan."""

    study: str
    kind: str
    unit: str
    runs: int | None = None
    groups: int | None = None
    flops: float | None = None
    seconds: float = 0.0  # fixed part included
    calibrated: bool = False  # False: only the fixed estimate (no cost declared, or extract/render)
    note: str = ""
    work: list[tuple[Work, float]] = field(default_factory=list)  # (work, its estimated seconds)
    unestimated: int = 0  # works left out of the estimate (probe failed, or not in a recorded calibration)
    peak_bytes: float = 0.0  # the most memory the unit holds at once (every worker's task), 0: not counted
    peak_what: str = ""  # what holds it

    @property
    def stage(self) -> str:
        return stage_name(self.study, self.kind, self.unit)


def previous_reader(study: str, kind: str, unit: str) -> Callable[[str], Any]:
    """A file of the unit's own folder as the stage would read it (``Context.previous``); None when absent."""
    base = study_dir(study, kind, unit)

    def read(name: str) -> Any:
        path = base / name
        return read_file(path) if path.exists() else None

    return read


def unit_cost(stage: Stage, cfg: Any, unit: str, device: str, previous: Callable[[str], Any] | None) -> Cost:
    module, _, name = (stage.cost(cfg, unit) or "").partition(":")
    return getattr(importlib.import_module(module), name)(cfg, unit, device, previous)


def plan_stage(study: Study, stage: Stage, cfg: Any, unit: str, calibration: Calibration,
               previous: Callable[[str], Any] | None = None) -> StagePlan:
    """The plan of one unit: its cost, each work's estimate on the calibration's device (a shape missing
    from the cache is probed now), the fixed part."""
    plan = StagePlan(study.name, stage.kind, unit, seconds=FIXED_SECONDS[stage.kind])
    if not stage.cost(cfg, unit):
        plan.note = "fixed: process start-up and small work" if stage.kind != "train" else "no cost declared"
        return plan
    cost = unit_cost(stage, cfg, unit, calibration.device, previous)
    plan.runs, plan.groups, plan.flops, plan.note, plan.calibrated = cost.runs, cost.groups, cost.flops, cost.note, True
    failed: dict[str, list[str]] = {}  # why -> the works it left out
    factors: list[float] = []  # the measured slowdowns applied
    module = stage.probe or ""
    for w in cost.work:
        rate = calibration.rate(module, w, shared=cost.parallel) if w.flops else 0.0
        factor = calibration.slowdown(module, w, shared=cost.parallel) if w.flops else 1.0
        for value, probed in ((rate, w), (factor, calibration.slowdown_work(w))):
            if value is None:
                failed.setdefault(calibration.failed[calibration.key(module, probed, cost.parallel)], []
                                  ).append(w.label)
        if rate is None or factor is None:
            plan.unestimated += 1
        elif w.slowdown:
            factors.append(factor)
        seconds = w.flops * (rate or 0.0) * (factor or 0.0)
        plan.work.append((w, seconds))
        plan.seconds += seconds
    if factors:
        plan.note += (f"; {_count(len(factors), 'work')} at a slowdown measured here, "
                      f"×{min(factors):.2f}–{max(factors):.2f}")
    if cost.parallel and calibration.workers > 1:
        tasks = [seconds / w.tasks for w, seconds in plan.work for _ in range(w.tasks)]
        gpu = sum(seconds for w, seconds in plan.work if not calibration.on_cpu(w))  # one device: one at a time
        plan.seconds = FIXED_SECONDS[stage.kind] + max(makespan(tasks, calibration.workers), gpu)
        share = f", {_count(calibration.cores, 'core')} each" if calibration.cores else ""
        plan.note += (f"; {calibration.workers} worker processes side by side (TRAINSCAPE_EXECUTOR=processes"
                      f"{share}): the tasks' sum {fmt_seconds(sum(tasks))}"
                      + (f", {fmt_seconds(gpu)} of it on the {calibration.device} one after another" if gpu else ""))
    if cost.peak_bytes:
        held = calibration.workers if cost.parallel and calibration.workers > 1 else 1
        plan.peak_bytes = held * cost.peak_bytes
        plan.peak_what = cost.peak_what + (f", once in each of {held} workers" if held > 1 else "")
        plan.note += f"; peak memory ≈ {fmt_bytes(plan.peak_bytes)} ({plan.peak_what})"
    for why, labels in failed.items():
        if calibration.recorded is not None:
            plan.note += f"; NOT in the estimate ({why}): {', '.join(labels)}"
        else:
            plan.note += f"; NOT in the estimate (probe failed): {'; '.join(f'{label}: {why}' for label in labels)}"
    return plan


def plan_profile(profile: str | None = None, device: str | None = None, root: str | Path | None = None,
                 stages: Collection[str] | None = None, recorded: Path | None = None
                 ) -> tuple[str, list[StagePlan], Calibration]:
    """Every stage of ``profile`` (default: the active one), study by study, stage by stage; with
    ``stages``, only those whose name matches one of these shell patterns (a slice built on its own); with
    ``recorded``, on the device of that cache file and from its rates alone."""
    params = load_params(root)
    profile = profile or params.profile
    calibration = Calibration(device, recorded)
    plans = []
    for name in registry.names():
        study = registry.load(name)
        cfg = registry.config(study, params, profile)
        for stage in study.stages:
            for unit in stage.units(cfg):
                name_ = stage_name(name, stage.kind, unit)
                if stages is not None and not any(fnmatch.fnmatchcase(name_, pat) for pat in stages):
                    continue
                prev = previous_reader(name, stage.kind, unit) if stage.resumable else None
                plans.append(plan_stage(study, stage, cfg, unit, calibration, prev))
    return profile, plans, calibration


# ----------------------------------------------------------------------------- the runner's check


def before_stage(study: Study, stage: Stage, cfg: Any, unit: str, device: str,
                 log: Callable[[str], None]) -> StagePlan | None:
    """The runner's check: log the stage's plan line, and stop a stage estimated above 24 h (a
    :class:`ConfigError`: one line, exit 2) unless ``TRAINSCAPE_ALLOW_LONG=1``, or one that would hold more
    memory at once than its device has (it would be killed, or swap, hours in). None when the stage declares
    no cost. Shapes the cache lacks are probed now, however small the stage: a probe costs a fraction of a
    second once per machine, while a bound at a guessed slowest rate read as hours for stages of seconds.
    The probe module is loaded whether or not the cache holds the stage's shapes, so the stage loads
    exactly its code deps either way."""
    if not stage.cost(cfg, unit):
        return None
    if stage.probe:
        importlib.import_module(stage.probe)
    cal = Calibration(device)
    prev = previous_reader(study.name, stage.kind, unit) if stage.resumable else None
    plan = plan_stage(study, stage, cfg, unit, cal, prev)
    log(plan_line(plan, cal))
    if plan.seconds > LONG_SECONDS and os.environ.get(ALLOW_LONG_ENV, "") != "1":
        gpu = "" if device.startswith("cuda") else "run it on a GPU (TRAINSCAPE_DEVICE=cuda), or "
        raise ConfigError(f"{plan.stage}: estimate {fmt_seconds(plan.seconds)} on this machine ({device}: "
                          f"{cal.name}) exceeds 24 h ({_count(plan.runs or 0, 'run')}, {fmt_flops(plan.flops or 0)}); "
                          f"{gpu}set {ALLOW_LONG_ENV}=1 to go on anyway (`make plan` shows every stage)")
    memory = devices.memory_bytes(device)
    if plan.peak_bytes > memory:
        raise ConfigError(f"{plan.stage}: would hold ≈ {fmt_bytes(plan.peak_bytes)} at once on {device} "
                          f"({plan.peak_what}), more than its {fmt_bytes(memory)}; shrink the unit's largest shapes in "
                          f"{params_file(study.name)} (`make plan` shows every stage)")
    return plan


# ----------------------------------------------------------------------------- output


def plan_line(plan: StagePlan, cal: Calibration) -> str:
    """A training stage's plan line: counts, FLOPs, the estimate, where it was calibrated, what was probed
    for it now and the cost's note (``benchmarks/gpu_check.py`` reads ``estimate … (calibrated on …); ``)."""
    probed = [f"{_count(len(cal.probed), 'shape')} probed now in {cal.probe_seconds:.1f} s"] if cal.probed else []
    return (f"plan: {_count(plan.runs or 0, 'run')} in {_count(plan.groups or 0, 'group')}, "
            f"{fmt_flops(plan.flops or 0)}; estimate {fmt_seconds(plan.seconds)} "
            f"(calibrated on {cal.device}: {cal.name}); {'; '.join([*probed, plan.note] if plan.note else probed)}")


def fmt_bytes(b: float) -> str:
    """``512 MiB``, ``12.9 GiB``."""
    return f"{b / 2**20:.0f} MiB" if b < 2**30 else f"{b / 2**30:.1f} GiB"


def fmt_seconds(s: float) -> str:
    """``12 s``, ``4 min 10 s``, ``3 h 5 min`` (``≈ 2.1 days`` added from 48 h)."""
    s = max(0.0, s)
    if s < 60:
        return f"{s:.0f} s" if s >= 10 else f"{s:.1f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60)} s"
    h, m = divmod(int(round(s / 60)), 60)
    out = f"{h:,} h {m} min"
    return out + (f" (≈ {s / 86400:,.1f} days)" if s >= 48 * 3600 else "")


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def fmt_flops(f: float) -> str:
    if f <= 0:
        return "0 FLOP"
    exp = min(6, max(0, int(math.floor(math.log10(f) / 3))))
    return f"{f / 10 ** (3 * exp):.3g} {['', 'k', 'M', 'G', 'T', 'P', 'E'][exp]}FLOP"


def _row(name: str, runs: Any, groups: Any, flops: Any, est: str, note: str = "") -> str:
    return f"  {name:<44} {runs:>7} {groups:>7} {flops:>13} {est:>24}  {note}".rstrip()


def estimate_table(profile: str, plans: list[StagePlan], cal: Calibration, detail: bool = False) -> str:
    where = f"{cal.device}: {cal.name}; torch {cal.torch}"
    out = [f"plan of profile {profile!r}: {len(plans)} stages; estimate (calibrated on {where})",
           _row("stage", "runs", "groups", "FLOPs", "estimate")]
    studies: dict[str, list[StagePlan]] = {}
    for p in plans:
        studies.setdefault(p.study, []).append(p)
    for name, ps in studies.items():
        for p in ps:
            flag = " > 24 h: the stage stops (TRAINSCAPE_ALLOW_LONG=1 runs it)" if p.seconds > LONG_SECONDS else ""
            if p.calibrated:
                out.append(_row(p.stage, f"{p.runs:,}", f"{p.groups:,}", fmt_flops(p.flops or 0),
                                fmt_seconds(p.seconds), p.note + flag))
                if detail:
                    out += [_row(f"    {w.label}", "", "", fmt_flops(w.flops), fmt_seconds(s)) for w, s in p.work]
            else:
                out.append(_row(p.stage, "-", "-", "-", fmt_seconds(p.seconds), p.note))
        out.append(_total(f"{name} (total)", ps))
    out.append(_total("all studies (total)", plans))
    probed = (f"{len(cal.probed)} shapes probed now in {cal.probe_seconds:.1f} s" if cal.probed
              else "every shape from the recorded calibration" if cal.recorded and not cal.failed
              else f"{len(cal.failed)} shapes missing from the recorded calibration" if cal.recorded
              else "every shape from the cache")
    out.append(f"estimate (calibrated on {where}); {probed} ({cal.path}). FLOPs: the products counted from the "
               f"shapes; fixed: {', '.join(f'{k} {v:g} s' for k, v in FIXED_SECONDS.items())} per stage")
    return "\n".join(out)


def _total(name: str, plans: list[StagePlan]) -> str:
    runs = sum(p.runs or 0 for p in plans)
    groups = sum(p.groups or 0 for p in plans)
    flops = sum(p.flops or 0 for p in plans)
    left_out = sum(p.unestimated for p in plans)
    return _row(name, f"{runs:,}", f"{groups:,}", fmt_flops(flops), fmt_seconds(sum(p.seconds for p in plans)),
                f"at least: {left_out} works not in the estimate" if left_out else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipeline.plan", description=__doc__.splitlines()[0])
    ap.add_argument("--profile", choices=PROFILES, help="the profile to plan (default: the active one)")
    ap.add_argument("--detail", action="store_true", help="also each stage's work, shape by shape")
    ap.add_argument("--stages", nargs="+", metavar="PATTERN",
                    help="only the stages whose name matches one of these shell patterns (default: every stage)")
    ap.add_argument("--calibration", type=Path, metavar="FILE",
                    help="plan for the machine whose plan cache this is (e.g. a GPU's, brought back), probing nothing")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        profile, plans, cal = plan_profile(args.profile, stages=args.stages, recorded=args.calibration)
        if not plans:
            raise ConfigError(f"--stages {' '.join(args.stages or [])}: no stage of profile {profile!r} matches; "
                              f"allowed: patterns of stage names such as mupc_training_train@S10")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(estimate_table(profile, plans, cal, args.detail))
    print(f"(planned in {time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
