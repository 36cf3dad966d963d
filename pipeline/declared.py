"""Declarations enforced while a stage runs: its params view and its reads.

``dvc.yaml`` lists, per unit, exactly the params keys and the units its stage declares
(:class:`~pipeline.contract.Stage`), so a value read without a declaration would change the result
without DVC rerunning the stage. The runner therefore hands a study a view of its section that holds
only the declared keys (:class:`DeclaredView`) and a reader that opens only the declared units
(:func:`declared_reader`); anything else raises :class:`UndeclaredReadError`, naming the declaration to add.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

Path = tuple[str, ...]


class UndeclaredReadError(RuntimeError):
    """A stage read a params key or a unit its stage does not declare (a bug of the study, not of
    the input; deliberately neither AttributeError nor KeyError, which ``getattr``/``.get`` swallow)."""


def key_paths(keys: Iterable[str]) -> frozenset[Path]:
    """Dotted declared keys as paths; ``*`` (the whole section) is the empty path."""
    return frozenset(() if k == "*" else tuple(k.split(".")) for k in keys)


def _covered(path: Path, keys: frozenset[Path]) -> bool:
    """``path`` is a declared key or lies inside one."""
    return any(path[: len(k)] == k for k in keys)


def _above(path: Path, keys: frozenset[Path]) -> bool:
    """``path`` leads to a declared key (a mapping or a dataclass on the way to it)."""
    return any(len(k) > len(path) and k[: len(path)] == path for k in keys)


class DeclaredView:
    """A read-only view of a resolved params section that returns only declared keys.

    A declared key, and anything inside it, comes back as the plain value; a mapping or dataclass on
    the way to a declared key, and any mapping, comes back as another view: its keys can be listed (they
    are the graph's structure: unit names, which ``dvc.yaml`` lists), only its declared entries read.
    Methods and properties of a schema class run on the whole object: they derive the graph's structure
    (e.g. a study's unit lists), which ``dvc.yaml`` itself depends on.
    """

    __slots__ = ("_obj", "_path", "_keys", "_where")

    def __init__(self, obj: Any, keys: frozenset[Path], path: Path = (), where: str = "") -> None:
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "_keys", keys)
        object.__setattr__(self, "_where", where)

    def _child(self, name: str, value: Any) -> Any:
        path = (*self._path, name)
        if _covered(path, self._keys):
            return value
        if _above(path, self._keys) or isinstance(value, Mapping):  # a mapping's keys are structure
            return DeclaredView(value, self._keys, path, self._where)
        declared = sorted(".".join(k) or "*" for k in self._keys)
        raise UndeclaredReadError(f"{self._where} read params key {'.'.join(path)!r}, which it does not declare "
                             f"(declared: {declared}); add it to the stage's params in the study's __init__.py "
                             "so that dvc.yaml lists it")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        obj = self._obj
        value = getattr(obj, name)
        if dataclasses.is_dataclass(obj) and name not in {f.name for f in dataclasses.fields(obj)}:
            return value  # a method or property of the schema
        return self._child(name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise TypeError(f"{self._where}: the params view is read-only")

    def __getitem__(self, key: Any) -> Any:
        return self._child(str(key), self._obj[key])

    def __iter__(self) -> Iterator[Any]:
        return iter(self._obj)

    def __len__(self) -> int:
        return len(self._obj)

    def __contains__(self, key: Any) -> bool:
        return key in self._obj

    def keys(self) -> Any:
        return self._obj.keys()

    def items(self) -> Iterator[tuple[Any, Any]]:
        return ((k, self[k]) for k in self._obj)

    def values(self) -> Iterator[Any]:
        return (self[k] for k in self._obj)

    def get(self, key: Any, default: Any = None) -> Any:
        return self[key] if key in self._obj else default

    def __repr__(self) -> str:
        return f"DeclaredView({'.'.join(self._path) or '<section>'} of {self._where})"

    def __reduce__(self) -> tuple[Any, ...]:  # executors pickle what a study maps
        return (DeclaredView, (self._obj, self._keys, self._path, self._where))


def declared_reader(reader: Callable[[str, str, str], Any], allowed: Iterable[tuple[str, str]], where: str
                    ) -> Callable[[str, str, str], Any]:
    """``reader`` restricted to the units the stage declares it reads (``Stage.reads``)."""
    units = {tuple(u) for u in allowed}

    def read(kind: str, unit: str, name: str) -> Any:
        if (kind, unit) not in units:
            raise UndeclaredReadError(f"{where} read {name} of {kind} unit {unit!r}, which it does not declare "
                                 f"(declared: {sorted(units)}); add ({kind!r}, {unit!r}) to the stage's reads in "
                                 "the study's __init__.py so that dvc.yaml lists it")
        return reader(kind, unit, name)

    return read
