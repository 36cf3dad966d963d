"""The params view and the reader a stage gets hold exactly what its family declares."""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field

import pytest

from pipeline.declared import DeclaredView, UndeclaredReadError, declared_reader, key_paths


@dataclass(frozen=True)
class Inner:
    a: int = 1
    b: int = 2


@dataclass(frozen=True)
class Section:
    lr: float = 0.1
    seed: int = 0
    runs: dict[str, Inner] = field(default_factory=lambda: {"x": Inner(), "y": Inner(3, 4)})

    def units(self) -> list[str]:
        return sorted(self.runs)


def view(*keys: str) -> DeclaredView:
    return DeclaredView(Section(), key_paths(keys), where="s_train@x")


def test_declared_keys_and_what_lies_inside_them_read_plainly():
    v = view("lr", "runs.x")
    assert v.lr == 0.1 and v.runs["x"] == Inner() and v.runs["x"].b == 2
    assert list(v.runs) == ["x", "y"] and "y" in v.runs and len(v.runs) == 2  # the structure is visible
    assert v.units() == ["x", "y"]  # a schema method derives structure on the whole section
    assert dict(view("runs").runs.items())["y"] == Inner(3, 4)
    assert sorted(view("lr").runs) == ["x", "y"]  # an undeclared mapping's keys are structure, its values not


@pytest.mark.parametrize("read", [lambda v: v.seed, lambda v: v.runs["y"], lambda v: v.runs.get("y"),
                                  lambda v: list(v.runs.values()), lambda v: getattr(v, "seed", None)])
def test_an_undeclared_key_fails_naming_it(read):
    with pytest.raises(UndeclaredReadError, match=r"s_train@x read params key '(seed|runs\.y)'.*declared: \['lr', "
                                                  r"'runs\.x'\]"):
        read(view("lr", "runs.x"))


def test_the_whole_section_and_a_pickled_view():
    assert view("*").seed == 0 and view("*").runs["y"].a == 3
    v = pickle.loads(pickle.dumps(view("runs.x")))
    assert v.runs["x"].a == 1
    with pytest.raises(UndeclaredReadError):
        _ = v.lr
    with pytest.raises(TypeError, match="read-only"):
        v.lr = 1.0


def test_the_reader_opens_only_declared_units():
    read = declared_reader(lambda kind, unit, name: (kind, unit, name), [("train", "x")], "s_render@f")
    assert read("train", "x", "a.json") == ("train", "x", "a.json")
    with pytest.raises(UndeclaredReadError, match=r"s_render@f read a.json of train unit 'y'.*add \('train', 'y'\)"):
        read("train", "y", "a.json")
