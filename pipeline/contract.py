"""The study contract: what a study declares, what it is given, and what it returns.

A study is a folder under ``pipeline/studies/`` whose ``__init__.py`` defines ``STUDY`` (a
:class:`Study`). Its stage functions take a :class:`Context` and return an :class:`Output`; they
compute and never write: the framework (``pipeline.stage`` and ``pipeline.writer``) writes every
file atomically, ``meta.json``, ``reports/metrics/*.json``, the figure files and the MLflow runs.
Studies import this module and the ground floor (config, data, plotting), never the runner or the
writers. ``make dag`` reads the declarations to write ``dvc.yaml`` (``pipeline.graph``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal["train", "extract", "render"]
KINDS: tuple[Kind, ...] = ("train", "extract", "render")
ClaimRole = Literal["finding", "sanity"]
CLAIM_ROLES: tuple[ClaimRole, ...] = ("finding", "sanity")
FINDING: ClaimRole = "finding"  # what the paper or notebook reports about the world
SANITY: ClaimRole = "sanity"  # a theorem, a property of the code, a golden value

# A params key list: keys of the study's *resolved* section (profile overrides applied), dotted.
Keys = Sequence[str] | Callable[[Any, str], Sequence[str]]


Reads = Callable[[Any, str], Sequence[tuple[str, str]]]
Datasets = Callable[[Any, str], Sequence[str]]


@dataclass(frozen=True)
class Units:
    """One group of a stage's units, alike: which units there are, what each reads, and the function computing
    them.

    ``names`` lists the units of this group the profile runs; ``params`` are the resolved keys a unit reads
    (``"*"``: the whole section; ``{unit}`` stands for the unit), ``reads`` the units of the study whose
    outputs it reads, ``datasets`` the datasets it loads. ``run`` names the function of the stage's entry
    module (default: the stage's kind), ``cost`` the ``"module:function"`` that counts what a unit computes
    (:class:`Cost`, for ``make plan`` and the runner's plan line, which stops a stage estimated above 24 h
    before it starts), given the device it would run on and ``previous`` (a file of the unit's earlier,
    maybe interrupted, run; None when absent), so a resumable unit counts only what is left; it lives in a
    light module, so planning imports no training code. ``precision`` names the ``"module:function"`` that
    says, given ``(cfg, unit, device)``, how the unit's float32 products compute (``tf32``, else full precision):
    the runner sets it before it records the device, so ``meta.json`` and the MLflow tags say what ran.
    """

    names: Callable[[Any], Sequence[str]]
    params: Keys = ("*",)
    reads: Reads = lambda cfg, unit: ()
    datasets: Datasets = lambda cfg, unit: ()
    run: str | None = None
    cost: str | None = None
    precision: str | None = None


@dataclass(frozen=True, init=False)
class Stage:
    """One stage of a study: DVC stage ``<study>_<kind>``, one ``foreach`` key per unit.

    ``entry`` is the module holding the functions that compute its units; the stage's code dependencies
    are that module's project imports, so keep renderers out of training modules. A stage whose units
    are alike declares them inline (``units``, ``params``, ``reads``, ``datasets``, ``cost``: the fields of
    :class:`Units`); one with units of different sorts (a study's runs and its summary) declares one
    :class:`Units` group per sort in ``groups``, each with its own function, so no code asks which unit it runs.
    ``resumable``: the output folder survives a failed or killed run, and the study may yield
    :class:`Output` parts that are written as they come (see :class:`Output.part`). ``probe`` is the module
    whose functions time one :class:`Work` step on this machine; it is imported only to calibrate (and by
    the stage, whose training code is loaded already), so it and the cost modules are code deps of the
    stage's units. A render stage declares its units by the study's figure table (``figure_table``: the resolved
    config -> render unit -> :class:`FigureEntry`), each unit reading its entry's keys after the stage's own
    ``params`` and computed by its entry's function.
    """

    kind: Kind
    entry: str
    groups: tuple[Units, ...]
    resumable: bool
    metrics: bool  # the stage writes reports/metrics/<stage>.json (Output.metrics)
    tables: tuple[str, ...]  # the .csv tables (Output.tables) each unit writes; listed in the manifest
    probe: str | None
    figure_table: FigureTable | None  # a render stage's figure table

    def __init__(self, kind: Kind, entry: str, units: Callable[[Any], Sequence[str]] | None = None,
                 params: Keys | None = None, reads: Reads = lambda cfg, unit: (),
                 datasets: Datasets = lambda cfg, unit: (), cost: str | None = None, precision: str | None = None, *,
                 groups: Sequence[Units] = (), figure_table: FigureTable | None = None, resumable: bool = False,
                 metrics: bool = False, tables: tuple[str, ...] = (), probe: str | None = None) -> None:
        if sum((units is not None, bool(groups), figure_table is not None)) != 1:
            raise TypeError(f"Stage({kind!r}): declare its units inline (units=...), in groups (groups=...) or, "
                            "for a render stage, by its figure table (figure_table=...): one of them")
        if (figure_table is not None) != (kind == "render"):
            raise TypeError(f"Stage({kind!r}): a render stage, and only a render stage, is declared by its study's "
                            "figure table (figure_table=...)")
        if figure_table is not None:
            groups = (figure_units(figure_table, () if params is None else params),)
        elif units is not None:
            groups = (Units(units, ("*",) if params is None else params, reads, datasets, cost=cost,
                            precision=precision),)
        for name, value in (("kind", kind), ("entry", entry), ("groups", tuple(groups)), ("resumable", resumable),
                            ("metrics", metrics), ("tables", tables), ("probe", probe), ("figure_table", figure_table)):
            object.__setattr__(self, name, value)

    def units(self, cfg: Any) -> list[str]:
        """Every unit of the stage the profile runs, group by group."""
        return [u for g in self.groups for u in g.names(cfg)]

    def of(self, cfg: Any, unit: str) -> Units:
        """The group ``unit`` is in."""
        for g in self.groups:
            if unit in g.names(cfg):
                return g
        raise KeyError(f"{self.kind} unit {unit!r} is not among {self.units(cfg)}")

    def keys(self, cfg: Any, unit: str) -> list[str]:
        params = self.of(cfg, unit).params
        keys = params(cfg, unit) if callable(params) else params
        return [k.replace("{unit}", unit) for k in keys]

    def reads(self, cfg: Any, unit: str) -> Sequence[tuple[str, str]]:
        return self.of(cfg, unit).reads(cfg, unit)

    def datasets(self, cfg: Any, unit: str) -> Sequence[str]:
        return self.of(cfg, unit).datasets(cfg, unit)

    def function(self, cfg: Any, unit: str) -> str:
        """The name of the entry module's function that computes ``unit``."""
        if self.figure_table is not None:
            return self.figure_table(cfg)[unit].function
        return self.of(cfg, unit).run or self.kind

    def cost(self, cfg: Any, unit: str) -> str | None:
        return self.of(cfg, unit).cost

    def precision(self, cfg: Any, unit: str, device: str) -> str | None:
        """How ``unit``'s float32 products compute on ``device``; None: as torch's defaults leave them."""
        declared = self.of(cfg, unit).precision
        if declared is None:
            return None
        module, _, name = declared.partition(":")
        return getattr(importlib.import_module(module), name)(cfg, unit, device)

    def modules(self) -> tuple[str, ...]:
        """The study modules a unit of this stage loads: its entry, and its cost and probe modules."""
        light = (f.partition(":")[0] for g in self.groups for f in (g.cost, g.precision) if f)
        return tuple(dict.fromkeys(m for m in (self.entry, *light, self.probe) if m))


@dataclass(frozen=True)
class Work:
    """One homogeneous part of a unit's compute: ``flops`` FLOPs of steps of one shape.

    ``probe`` names a function of the stage's probe module; called as ``probe(device=..., **shape)`` it
    builds one step of this work on random data (at the shape, or scaled down where a full step would be
    slow to time) and returns ``(step, flops)``: a callable that runs the step once, and the FLOPs of the
    step it built. The planner times the step: seconds per FLOP on this device, cached per device and keyed
    by probe, shape (dtype included) and torch version; the work's estimate is ``flops`` times that rate.

    ``slowdown``, where a probe's step cannot show a cost (a scaled-down step, or one on other data), names a
    second probe and its shape: it returns ``(step, reference)``, the work's own step and one that runs at the
    first probe's rate, and the estimate is multiplied by their time ratio (cached as rates are).
    """

    label: str  # what it is, e.g. "pc N=512 H=128 T=128, 5 runs per group"
    probe: str
    shape: Mapping[str, Any]  # JSON values only (the calibration key)
    flops: float  # FLOPs of all of this work's steps, counted from the shapes
    tasks: int = 1  # the equal ``ctx.map`` tasks it is made of, where its unit's cost is ``parallel``
    host: bool = False  # it computes on the CPU whatever the stage's device (numpy, LAPACK): side by side there
    slowdown: tuple[str, Mapping[str, Any]] | None = None  # (probe, shape) of a measured factor, see above


@dataclass(frozen=True)
class Cost:
    """What one unit computes: runs, stacked groups and its work (FLOPs counted from the shapes). ``parallel``:
    the works' tasks are the unit's ``ctx.map`` tasks, which an executor with several workers runs side by side
    (the plan then gives their makespan, not their sum)."""

    runs: int
    groups: int
    work: tuple[Work, ...] = ()
    note: str = ""  # what is counted, e.g. "12 of 132 runs already trained, not counted"
    parallel: bool = False
    # the most memory one task holds at once (bytes, counted from the shapes; 0: not counted); a parallel unit
    # holds it once per worker
    peak_bytes: float = 0.0
    peak_what: str = ""  # the task that holds it, e.g. "cell N=1024 L=512"

    @property
    def flops(self) -> float:
        return sum(w.flops for w in self.work)


@dataclass(frozen=True)
class Claim:
    """One claim a seed figure makes, as a check over published metrics (the claims ledger).

    ``reads`` are metric paths ``(stage, key, key, …)`` into ``reports/metrics/<stage>.json``
    (``stage`` = ``<study>_<kind>@<unit>``). ``check`` is a pure function of the values read, in
    that order, returning ``(holds, measured)``: whether the claim holds and the number(s) it
    turned on (a margin, a ratio, a crossing iteration). ``fails_on`` names the profiles on which
    the claim is *not* expected to hold, each with the reason (a smoke grid too small to show it):
    say so rather than loosen the check. ``figures`` are the render units of the study that draw it.
    ``role`` (keyword, required): ``"finding"``, what the paper or notebook reports about the world
    (it could have come out otherwise), or ``"sanity"``, a theorem, a property of the code or a golden
    value; the ledger and the gallery count and show them apart.
    """

    id: str  # unique within the study; the ledger id is "<study>/<id>"
    seed_figure: str
    sentence: str
    reads: tuple[tuple[str, ...], ...]
    check: Callable[..., tuple[bool, Any]]
    figures: tuple[str, ...] = ()
    fails_on: Mapping[str, str] = field(default_factory=dict)
    role: ClaimRole = field(kw_only=True)

    def __post_init__(self) -> None:
        if self.role not in CLAIM_ROLES:
            raise ValueError(f"claim {self.id!r}: role = {self.role!r} is not allowed; allowed: {CLAIM_ROLES}")

    def expected(self, profile: str) -> bool:
        return profile not in self.fails_on


@dataclass(frozen=True)
class Study:
    """A study's declaration: its name (= its folder path, ``/`` as ``_``), params schema, stages.

    ``claims`` names the module whose ``CLAIMS`` (a sequence of :class:`Claim`) the ``claims``
    stage checks; a name, not an import, so editing a claim reruns no training.
    """

    name: str
    schema: type
    stages: tuple[Stage, ...]
    title: str = ""
    claims: str | None = None

    def stage(self, kind: str) -> Stage | None:
        return next((f for f in self.stages if f.kind == kind), None)


Series = tuple[Sequence[int], Sequence[float]] | tuple[Sequence[int], Sequence[float], Sequence[float]]


@dataclass
class Run:
    """One MLflow child run under the stage's run (one training configuration, one seed...)."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    # key -> (steps, values) or (steps, values, wall times in s since the epoch: MLflow's per-step timestamps)
    series: dict[str, Series] = field(default_factory=dict)
    artifacts: list[str] = field(default_factory=list)  # files of the Output (by name) to attach
    failed: str | None = None  # reason, when the run diverged or stopped learning


@dataclass(frozen=True)
class FigureEntry:
    """One entry of a study's figure table: a render unit, what it reads and the function that draws it. Every
    study declares its render stage by such a table (``Stage("render", figure_table=...)``), so adding a figure is
    one entry plus the function that draws it; where the study has them, its extract units read the same table.

    ``draw`` names the function of the render module that draws it, called as ``draw(ctx, unit)`` and
    returning an :class:`Output`; ``sources`` maps each role to the train unit (or units) it reads, in the
    order its DVC deps list them; ``keys`` are the params keys it reads besides the render stage's own
    (``{unit}`` stands for the unit); ``extract``: it also reads the extract unit of its name (the numbers it
    draws). ``run`` names the render module's function the stage calls instead, where ``draw`` takes the
    study's own inputs (the μPC families: their ``render`` hands ``draw`` the sources and ``args`` as keyword
    arguments, as their extract hands them to the metrics function).
    ``metrics`` names the function of the study's metrics module that computes its headline numbers (default:
    ``draw``'s name); ``derived``: a study-level name for part of the headline and the metrics function that
    takes it out. ``plotly_images``: it draws plotly figures whose PNG and PDF kaleido writes, so its render
    checks for a Chromium, and starts it, before it computes.
    """

    draw: str
    sources: Mapping[str, str | tuple[str, ...]]
    keys: tuple[str, ...] = ()
    args: Mapping[str, Any] = field(default_factory=dict)
    metrics: str | None = None
    derived: tuple[str, str] | None = None
    extract: bool = False
    run: str | None = None
    plotly_images: bool = False

    @property
    def measure(self) -> str:
        """The metrics function that computes the entry's headline numbers."""
        return self.metrics or self.draw

    @property
    def function(self) -> str:
        """The render module's function the stage calls for this unit."""
        return self.run or self.draw

    def reads(self) -> tuple[str, ...]:
        """The train units the entry reads, in role order, each once."""
        out: list[str] = []
        for src in self.sources.values():
            out += [src] if isinstance(src, str) else list(src)
        return tuple(dict.fromkeys(out))

    def deps(self, unit: str) -> list[tuple[str, str]]:
        """The units of the study the render unit ``unit`` reads: its train units, then its extract unit."""
        return [*(("train", s) for s in self.reads()), *([("extract", unit)] if self.extract else [])]


FigureTable = Callable[[Any], Mapping[str, FigureEntry]]  # the resolved config -> render unit -> its entry


def figure_units(table: FigureTable, params: Keys = ()) -> Units:
    """A render stage's units from its figure table: one per entry, reading the stage's ``params`` then the
    entry's keys, and the units its entry names."""
    def keys(cfg: Any, unit: str) -> list[str]:
        return [*(params(cfg, unit) if callable(params) else params), *table(cfg)[unit].keys]

    return Units(lambda cfg: list(table(cfg)), keys, lambda cfg, unit: table(cfg)[unit].deps(unit))


@dataclass
class Figure:
    """One published figure: a matplotlib figure (PNG + PDF) and/or a plotly one (HTML)."""

    id: str  # unique within the study; the manifest id is "<study>/<id>"
    caption: str
    seed_figure: str  # the figure of the seed notebook it reproduces
    mpl: Any = None
    plotly: Any = None
    sources: list[tuple[str, str]] = field(default_factory=list)  # (kind, unit) of this study it read
    family: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Output:
    """What a stage function returns; the framework writes it into the unit's folder.

    ``json`` and ``arrays`` are files by name (``.json`` / ``.npz``), ``tables`` pandas DataFrames
    written as ``.csv`` (the per-run tables a stage declares in :attr:`Stage.tables`); ``metrics`` go to
    ``reports/metrics/<stage>.json`` (stages declared with ``metrics=True``); ``run_metrics`` are
    logged on the stage's MLflow run, ``runs`` become its child runs; ``meta`` joins ``meta.json``.
    A part (``part`` set) is a sub-folder of a resumable unit, written as soon as it is yielded.

    Files and ``meta`` hold only what the inputs determine, so a rerun writes them byte for byte:
    wall-clock times belong in ``run_metrics`` or a :class:`Run`'s metrics and series (MLflow only),
    and what this execution did (e.g. which runs of a resumed sweep it trained) in ``execution``, which
    goes to the stage's untracked run record (:mod:`pipeline.tracking.records`) and never into an output.
    """

    json: dict[str, Any] = field(default_factory=dict)
    arrays: dict[str, dict[str, Any]] = field(default_factory=dict)
    figures: list[Figure] = field(default_factory=list)
    metrics: dict[str, Any] | None = None
    run_metrics: dict[str, float] = field(default_factory=dict)
    runs: list[Run] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    part: str | None = None
    tables: dict[str, Any] = field(default_factory=dict)  # file name (.csv) -> pandas DataFrame
    execution: dict[str, Any] = field(default_factory=dict)


StageResult = Output | Iterator[Output]


@dataclass
class Context:
    """What a stage function is given: the unit, its resolved config, and readers of earlier outputs.

    The readers are supplied by the runner, so a study reads through its context and never opens
    another stage's files itself.
    """

    study: str
    kind: str
    unit: str
    profile: str
    cfg: Any
    device: str
    stage: str
    provenance: dict[str, Any]
    reader: Callable[[str, str, str], Any]  # (kind, unit, file name) -> JSON object or npz arrays
    own: Callable[[str], Any]  # a file of this unit's (resumable) folder, None when absent
    log: Callable[[str], None] = print
    progress: Callable[..., Iterable[Any]] = field(default=lambda iterable, **_: iterable)
    mapper: Callable[..., Iterator[tuple[int, Any]]] = field(
        default=lambda fn, items, **_: ((i, fn(item)) for i, item in enumerate(items)))

    def read(self, kind: str, unit: str, name: str) -> Any:
        """A file another unit of this study wrote (``.json`` → object, ``.npz`` → arrays)."""
        return self.reader(kind, unit, name)

    def track(self, iterable: Iterable[Any], *, total: float | None = None, desc: str = "", unit: str = "it",
              weight: Callable[[Any], float] | None = None, note: Callable[[Any], str] | None = None
              ) -> Iterable[Any]:
        """``iterable`` with a progress bar (epochs, runs of a sweep, cells of an analysis): done / total,
        rate and ETA; one line per update when the output is not a terminal (DVC pipes it). ``weight``:
        each item advances the bar by ``weight(item)`` (e.g. its FLOPs, with ``total`` their sum) instead of 1;
        ``note(item)`` is shown after the bar (e.g. runs done)."""
        if weight is None and note is None:
            return self.progress(iterable, total=total, desc=desc, unit=unit)
        return self.progress(iterable, total=total, desc=desc, unit=unit, weight=weight, note=note)

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any], *, gpus: float = 0,
            where: dict[int, dict[str, Any]] | None = None) -> Iterator[tuple[int, Any]]:
        """``(index, fn(item))`` for every item, as the tasks finish: in this process, or as Ray tasks
        (``TRAINSCAPE_EXECUTOR=ray``); ``fn`` must be a module-level function, ``gpus`` what a task
        needs. Results are the same either way; only where (and in which order) they are computed differs.
        ``where`` (optional) gets, for each index before it is yielded, where its task ran (executor,
        Ray node and attempt): provenance for the run records and MLflow, never for an output."""
        if where is None:
            return self.mapper(fn, items, gpus=gpus)
        return self.mapper(fn, items, gpus=gpus, where=where)

    def previous(self, name: str) -> Any:
        """A file this unit wrote on an earlier, maybe interrupted, run (resumable stages)."""
        return self.own(name)
