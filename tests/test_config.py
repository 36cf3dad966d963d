"""The config loader: typed validation with errors naming key path, value and what is allowed."""

from dataclasses import dataclass
from typing import Literal

import pytest
import yaml

from pipeline.config import ConfigError, bounded, check, flatten, load_params, parse_params, validate
from tests.conftest import ROOT


@dataclass(frozen=True)
class Inner:
    lr: float = bounded(0.0, None, lo_open=True)
    kind: Literal["adam", "muon"] = "adam"


@dataclass(frozen=True)
class Outer:
    name: str
    epochs: int = bounded(0, 100)
    widths: list[int] = bounded(1, None, default=None)
    inner: dict[str, Inner] | None = None
    flag: bool = False

    def check(self, path: str) -> None:
        check(self.name != "forbidden", f"{path}.name", self.name, "any name but 'forbidden'")


def good() -> dict:
    return {"name": "a", "epochs": 3, "widths": [2, 4], "inner": {"x": {"lr": 0.1, "kind": "muon"}}}


def test_valid_mapping_builds_typed_objects():
    obj = validate(Outer, good(), "s")
    assert obj.inner["x"].kind == "muon" and obj.inner["x"].lr == 0.1 and obj.widths == [2, 4]
    assert validate(Outer, {"name": "a", "epochs": 0}, "s").inner is None


@pytest.mark.parametrize(
    "patch, expected",
    [
        ({"epochs": -1}, "s.epochs = -1 is not allowed; allowed: a value in [0, 100]"),
        ({"epochs": 2.5}, "s.epochs = 2.5 is not allowed; allowed: an integer"),
        ({"epochs": True}, "s.epochs = True is not allowed; allowed: an integer"),
        ({"widths": [2, 0]}, "s.widths = 0 is not allowed; allowed: a value in [1, None]"),
        ({"inner": {"x": {"lr": 0.0}}}, "s.inner.x.lr = 0.0 is not allowed; allowed: a value in (0.0, None]"),
        ({"inner": {"x": {"lr": 1, "kind": "sgd"}}}, "s.inner.x.kind = 'sgd' is not allowed; allowed: one of"),
        ({"flag": "yes"}, "s.flag = 'yes' is not allowed; allowed: true/false"),
        ({"name": "forbidden"}, "s.name = 'forbidden' is not allowed; allowed: any name but 'forbidden'"),
        ({"extra": 1}, "s.extra is not a known key; allowed keys: ['epochs', 'flag', 'inner', 'name', 'widths']"),
    ],
)
def test_errors_name_key_value_and_allowed(patch, expected):
    data = {**good(), **patch}
    with pytest.raises(ConfigError) as exc:
        validate(Outer, data, "s")
    assert expected in str(exc.value)


def test_literal_error_lists_choices():
    with pytest.raises(ConfigError, match=r"s.kind = 'sgd' is not allowed; allowed: one of 'adam', 'muon'"):
        validate(Inner, {"lr": 1.0, "kind": "sgd"}, "s")


def test_missing_key_is_named():
    with pytest.raises(ConfigError, match=r"s.name is missing"):
        validate(Outer, {"epochs": 1}, "s")


def test_repository_params_validate():
    params = load_params(ROOT / "params.yaml")
    assert params.profile in ("smoke", "gpu_medium", "paper")
    assert set(params.data.datasets) == {"mnist", "fashion_mnist"}


def test_bad_profile_is_rejected_with_allowed_values():
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["profile"] = "nonsense"
    with pytest.raises(ConfigError) as exc:
        parse_params(raw)
    assert str(exc.value) == ("params.yaml: profile = 'nonsense' is not allowed; "
                              "allowed: one of 'smoke', 'gpu_medium', 'paper'")


def test_unknown_top_level_key_and_dataset():
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    with pytest.raises(ConfigError, match="typo is not a known key"):
        parse_params({**raw, "typo": 1})
    raw["data"] = {**raw["data"], "datasets": {"cifar": {}}}
    with pytest.raises(ConfigError, match=r"data.datasets = 'cifar' is not allowed"):
        parse_params(raw)


def test_params_hash_depends_on_section_and_profile():
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    a = parse_params(raw)
    b = parse_params({**raw, "profile": "paper"})
    assert a.section_hash("data") != b.section_hash("data")
    assert a.section_hash("data") == parse_params(raw).section_hash("data")


def test_flatten():
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": None}) == {"a.b": 1, "a.c": [1, 2], "d": None}
