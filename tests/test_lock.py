"""The environment is locked: the venv holds exactly requirements.lock, and the lock covers pyproject."""

from __future__ import annotations

import importlib.metadata as md
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTSIDE_LOCK = {"trainscape", "uv", "pip"}  # the project itself (editable) and the installers


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _lock() -> dict[str, str]:
    text = (ROOT / "requirements.lock").read_text()
    return {_norm(n): v for n, v in re.findall(r"^([A-Za-z0-9_.\-]+)==(\S+)", text, re.M)}


def test_every_lock_entry_has_a_hash():
    blocks = re.split(r"\n(?=[A-Za-z0-9])", (ROOT / "requirements.lock").read_text().strip())
    assert len(blocks) == len(_lock()) > 50
    for block in blocks:
        assert "--hash=sha256:" in block, block.splitlines()[0]


def test_lock_pins_every_declared_dependency():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    lock = _lock()
    for req in declared:
        name = _norm(re.match(r"[A-Za-z0-9_.\-]+", req).group(0))
        assert name in lock, f"{req} is not in requirements.lock (run `make lock`)"
    assert lock["torch"].startswith("2.13.0")


def test_installed_environment_is_exactly_the_lock():
    lock = _lock()
    installed = {_norm(d.metadata["Name"]): d.version for d in md.distributions()}
    extra = {k: v for k, v in installed.items() if k not in lock and k not in OUTSIDE_LOCK}
    differ = {k: (v, installed.get(k)) for k, v in lock.items() if installed.get(k) != v}
    assert not extra, f"installed but not locked: {extra}"
    assert not differ, f"locked vs installed: {differ}"
