"""The config loader: typed validation with errors naming key path, value and what is allowed."""

import re
from dataclasses import dataclass
from typing import Literal

import pytest
import yaml

from pipeline.config import (
    FRAMEWORK_KEYS,
    ConfigError,
    bounded,
    check,
    flatten,
    params_file,
    params_hash,
    parse_params,
    read_tree,
    resolve,
    sources_of,
    validate,
)
from tests.conftest import ROOT


@dataclass(frozen=True)
class Inner:
    lr: float = bounded(0.0, None, lo_open=True)
    optim: Literal["adam", "muon"] = "adam"


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
    return {"name": "a", "epochs": 3, "widths": [2, 4], "inner": {"x": {"lr": 0.1, "optim": "muon"}}}


def test_valid_mapping_builds_typed_objects():
    obj = validate(Outer, good(), "s")
    assert obj.inner["x"].optim == "muon" and obj.inner["x"].lr == 0.1 and obj.widths == [2, 4]
    assert validate(Outer, {"name": "a", "epochs": 0}, "s").inner is None


@pytest.mark.parametrize(
    "patch, expected",
    [
        ({"epochs": -1}, "s.epochs = -1 is not allowed; allowed: a value in [0, 100]"),
        ({"epochs": 2.5}, "s.epochs = 2.5 is not allowed; allowed: an integer"),
        ({"epochs": True}, "s.epochs = True is not allowed; allowed: an integer"),
        ({"widths": [2, 0]}, "s.widths = 0 is not allowed; allowed: a value in [1, None]"),
        ({"inner": {"x": {"lr": 0.0}}}, "s.inner.x.lr = 0.0 is not allowed; allowed: a value in (0.0, None]"),
        ({"inner": {"x": {"lr": 1, "optim": "sgd"}}}, "s.inner.x.optim = 'sgd' is not allowed; allowed: one of"),
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
    with pytest.raises(ConfigError, match=r"s.optim = 'sgd' is not allowed; allowed: one of 'adam', 'muon'"):
        validate(Inner, {"lr": 1.0, "optim": "sgd"}, "s")


def test_missing_key_is_named():
    with pytest.raises(ConfigError, match=r"s.name is missing"):
        validate(Outer, {"epochs": 1}, "s")


def test_bad_profile_is_rejected_with_allowed_values():
    raw = read_tree(ROOT)
    raw["profile"] = "nonsense"
    with pytest.raises(ConfigError) as exc:
        parse_params(raw)
    assert str(exc.value) == ("params.yaml: profile = 'nonsense' is not allowed; "
                              "allowed: one of 'smoke', 'gpu_medium', 'paper', 'headline'")


def test_unknown_top_level_key_and_dataset():
    raw = read_tree(ROOT)
    with pytest.raises(ConfigError, match="typo is not a known key"):
        parse_params({**raw, "typo": 1}, studies=[k for k in raw if k not in FRAMEWORK_KEYS])
    raw["data"] = {**raw["data"], "datasets": {"cifar": {}}}
    with pytest.raises(ConfigError, match=r"data.datasets = 'cifar' is not allowed"):
        parse_params(raw)


def test_figure_formats_are_per_profile_and_a_bad_list_is_named():
    """Smoke builds write no PDF (the first build's time); every other profile adds it beside the PNG."""
    raw = read_tree(ROOT)
    figures = parse_params(raw).figures
    assert figures.of("smoke") == ("png",)
    assert figures.of("paper") == figures.of("gpu_medium") == figures.of("headline") == ("png", "pdf")
    for formats, expected in (
        ({**raw["figures"]["formats"], "smoke": ["pdf"]}, "params.yaml: figures.formats.smoke = ['pdf'] is not "
                                                          "allowed; allowed: a list of distinct formats"),
        ({**raw["figures"]["formats"], "smoke": ["png", "svg"]}, "figures.formats.smoke[1] = 'svg' is not allowed"),
        ({k: v for k, v in raw["figures"]["formats"].items() if k != "paper"}, "missing ['paper']"),
        ({**raw["figures"]["formats"], "draft": ["png"]}, "figures.formats = 'draft' is not allowed"),
    ):
        with pytest.raises(ConfigError, match=re.escape(expected)):
            parse_params({**raw, "figures": {"formats": formats}})


SECTION = {"lr": 0.1, "grid": {"widths": [1, 2], "depth": 4}, "runs": {"a": {"seed": 1}},
           "profiles": {"smoke": {"grid": {"widths": [8]}, "runs": {"b": {"seed": 2}}}, "paper": {"lr": 0.5}}}


def test_resolve_merges_mappings_and_replaces_the_rest():
    smoke = resolve(SECTION, "smoke", "s")
    assert smoke == {"lr": 0.1, "grid": {"widths": [8], "depth": 4}, "runs": {"a": {"seed": 1}, "b": {"seed": 2}}}
    assert resolve(SECTION, "paper", "s")["lr"] == 0.5
    assert resolve(SECTION, "gpu_medium", "s") == {k: v for k, v in SECTION.items() if k != "profiles"}
    assert SECTION["grid"]["widths"] == [1, 2], "resolve must not modify the section"


def test_resolve_rejects_unknown_profile_names():
    with pytest.raises(ConfigError, match=r"s.profiles = 'papr' is not allowed; allowed: one of 'smoke'"):
        resolve({**SECTION, "profiles": {"papr": {}}}, "smoke", "s")


def test_sources_of_names_exactly_where_each_resolved_value_comes_from():
    assert sources_of(SECTION, "smoke", "grid.widths") == ["profiles.smoke.grid.widths"]  # replaced
    assert sources_of(SECTION, "smoke", "grid.depth") == ["grid.depth"]
    assert sources_of(SECTION, "smoke", "grid") == ["profiles.smoke.grid.widths", "grid.depth"]
    assert sources_of(SECTION, "smoke", "runs") == ["runs.a", "profiles.smoke.runs.b"]
    assert sources_of(SECTION, "paper", "grid.widths") == ["grid.widths"]
    assert sources_of(SECTION, "paper", "lr") == ["profiles.paper.lr"]
    assert sources_of(SECTION, "smoke", "missing") == []
    assert sources_of(SECTION, "smoke", "*") == ["lr", "profiles.smoke.grid.widths", "grid.depth", "runs.a",
                                                  "profiles.smoke.runs.b"]
    assert sources_of(SECTION, "gpu_medium", "*") == ["lr", "grid", "runs"]


def test_params_hash_follows_resolved_values_only():
    assert params_hash(resolve(SECTION, "smoke", "s")) != params_hash(resolve(SECTION, "paper", "s"))
    other = {**SECTION, "profiles": {**SECTION["profiles"], "paper": {"lr": 0.9}}}
    assert params_hash(resolve(other, "smoke", "s")) == params_hash(resolve(SECTION, "smoke", "s"))


def test_flatten():
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": None}) == {"a.b": 1, "a.c": [1, 2], "d": None}


def _tree(tmp_path, root: dict, studies: dict[str, dict]):
    (tmp_path / "params").mkdir()
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(root))
    for name, doc in studies.items():
        (tmp_path / "params" / f"{name}.yaml").write_text(yaml.safe_dump(doc))
    return tmp_path


def test_params_files_merge_into_one_tree_and_each_key_names_its_file(tmp_path):
    root = _tree(tmp_path, {"profile": "smoke", "data": {"mirror_dir": None, "datasets": {}}},
                 {"toy": {"toy": {"lr": 0.1, "profiles": {"smoke": {"lr": 0.2}}}}})
    raw = read_tree(root)
    assert raw == {"profile": "smoke", "data": {"mirror_dir": None, "datasets": {}},
                   "toy": {"lr": 0.1, "profiles": {"smoke": {"lr": 0.2}}}}
    assert params_file("toy.profiles.smoke.lr") == "params/toy.yaml"
    assert params_file("data.datasets.mnist") == params_file("profile") == "params.yaml"
    with pytest.raises(ConfigError) as exc:
        validate(int, "x", "toy.lr")
    assert str(exc.value) == "params/toy.yaml: toy.lr = 'x' is not allowed; allowed: an integer"
    with pytest.raises(ConfigError) as exc:
        parse_params(raw).section("other")
    assert str(exc.value) == "params/other.yaml is missing; every study needs its section there"


def test_a_section_in_the_wrong_file_is_refused(tmp_path):
    root = _tree(tmp_path, {"profile": "smoke", "toy": {"lr": 0.1}}, {})
    with pytest.raises(ConfigError) as exc:
        read_tree(root)
    assert str(exc.value) == ("params.yaml: toy is not allowed here; allowed keys: ['profile', 'data', 'tracking', "
                              "'figures'] (a study's section lives in params/toy.yaml)")
    (root / "params.yaml").write_text("profile: smoke\n")
    (root / "params" / "toy.yaml").write_text("other: {lr: 0.1}\n")
    with pytest.raises(ConfigError, match=r"params/toy.yaml: top-level keys \['other'\] are not allowed; "
                                          r"allowed: exactly one, 'toy'"):
        read_tree(root)


def test_an_edit_of_a_base_value_the_profile_overrides_is_named(tmp_path):
    """``make dag`` says when an edited base value changes nothing under the active profile."""
    import shutil
    import subprocess

    from pipeline.config import overridden, read_tree, read_tree_at, silent_edits

    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    shutil.copytree(ROOT / "params", tmp_path / "params")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([*git, "add", "."], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "params"], cwd=tmp_path, check=True)
    tree = read_tree(tmp_path)
    assert ("imprint.epochs", 10, 3) in overridden(tree["imprint"], "smoke", "imprint")
    assert silent_edits(read_tree_at("HEAD", tmp_path), tree, "smoke") == []
    path = tmp_path / "params" / "imprint.yaml"
    text = path.read_text().replace("\n  epochs: 10", "\n  epochs: 12", 1)
    path.write_text(text.replace("\n  lr: 0.001", "\n  lr: 0.002"))  # lr: smoke reads the base value
    notes = silent_edits(read_tree_at("HEAD", tmp_path), read_tree(tmp_path), "smoke")
    assert notes == ["note: params/imprint.yaml: imprint.epochs changed (10 -> 12) but profile 'smoke' overrides "
                     "it (profiles.smoke.epochs = 3): the edit changes nothing under this profile"]
    assert silent_edits(read_tree_at("HEAD", tmp_path), read_tree(tmp_path), "paper") == []  # paper reads it
    assert read_tree_at("HEAD", tmp_path / "nowhere") is None
