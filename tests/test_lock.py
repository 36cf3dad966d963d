"""The environment is locked: the venv holds exactly the lock set-up picks (requirements.lock, the CPU
torch, or requirements-cuda.lock, PyPI's CUDA torch), both locks cover pyproject, and they differ
only in torch and the CUDA wheels."""

from __future__ import annotations

import importlib.metadata as md
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CPU_LOCK, CUDA_LOCK = "requirements.lock", "requirements-cuda.lock"
LOCKS = [CPU_LOCK, CUDA_LOCK]
OUTSIDE_LOCK = {"trainscape", "uv", "pip"}  # the project itself (editable) and the installers
CUDA_ONLY = re.compile(r"^(nvidia-.+|cuda-.+)$")  # what PyPI's CUDA torch adds (its triton is in both locks)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _lock(name: str) -> dict[str, str]:
    text = (ROOT / name).read_text()
    return {_norm(n): v for n, v in re.findall(r"^([A-Za-z0-9_.\-]+)==(\S+)", text, re.M)}


def _chosen_lock() -> str:
    """The lock `make setup` installs here, asked of the Makefile so that its rule (nvidia-smi, or a
    TORCH override, which make passes on to the tests it runs) is written once."""
    out = subprocess.run(
        ["make", "-s", "--no-print-directory", "--eval", "print-lock: ; @echo $(LOCK)", "print-lock"],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=30,
    ).stdout.split()
    assert len(out) == 1 and out[0] in LOCKS, out
    return out[0]


@pytest.mark.parametrize("name", LOCKS)
def test_every_lock_entry_has_a_hash(name: str) -> None:
    blocks = re.split(r"\n(?=[A-Za-z0-9])", (ROOT / name).read_text().strip())
    assert len(blocks) == len(_lock(name)) > 50
    for block in blocks:
        assert "--hash=sha256:" in block, block.splitlines()[0]


@pytest.mark.parametrize("name", LOCKS)
def test_lock_pins_every_declared_dependency(name: str) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    lock = _lock(name)
    for req in declared:
        match = re.match(r"[A-Za-z0-9_.\-]+", req)
        assert match, req
        assert _norm(match.group(0)) in lock, f"{req} is not in {name} (run `make lock`)"


def test_torch_builds() -> None:
    """The CPU lock holds the +cpu wheel, the CUDA lock PyPI's build with its CUDA wheels; torchvision
    0.28.0 (the one that pins torch 2.13.0) is the same PyPI wheel in both, and so is the triton the CUDA torch
    pins (the CPU build runs the fused route's kernel tests under its interpreter)."""
    cpu, cuda = _lock(CPU_LOCK), _lock(CUDA_LOCK)
    assert cpu["torch"] == "2.13.0+cpu"
    assert cuda["torch"] == "2.13.0"
    assert cpu["torchvision"] == cuda["torchvision"] == "0.28.0"
    assert any(n.startswith("nvidia-") for n in cuda)
    assert cpu["triton"] == cuda["triton"]
    assert not [n for n in cpu if CUDA_ONLY.match(n)]


def test_locks_pin_the_same_version_of_every_shared_package() -> None:
    """Switching builds changes torch and adds the CUDA wheels, nothing else (`make lock` resolves
    the CUDA lock under the CPU lock's pins)."""
    cpu, cuda = _lock(CPU_LOCK), _lock(CUDA_LOCK)
    differ = {n: (v, cuda[n]) for n, v in cpu.items() if n in cuda and n != "torch" and cuda[n] != v}
    assert not differ, f"CPU vs CUDA lock: {differ} (run `make lock`)"
    assert set(cpu) <= set(cuda), f"only in the CPU lock: {sorted(set(cpu) - set(cuda))}"
    extra = sorted(n for n in set(cuda) - set(cpu) if not CUDA_ONLY.match(n))
    assert not extra, f"only in the CUDA lock, yet no CUDA wheel: {extra}"


def test_installed_environment_is_exactly_the_lock() -> None:
    name = _chosen_lock()
    lock = _lock(name)
    installed = {_norm(d.metadata["Name"]): d.version for d in md.distributions()}
    extra = {k: v for k, v in installed.items() if k not in lock and k not in OUTSIDE_LOCK}
    differ = {k: (v, installed.get(k)) for k, v in lock.items() if installed.get(k) != v}
    hint = f"set-up installs {name} here (`make setup`; `make setup TORCH=cpu|cuda` to choose)"
    assert not extra, f"installed but not in {name}: {extra}; {hint}"
    assert not differ, f"{name} vs installed: {differ}; {hint}"
