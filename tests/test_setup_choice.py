"""Set-up picks the torch build from nvidia-smi: the CUDA lock where it reports a driver version of at least
580.65.06 (compared in full), the CPU lock elsewhere, with a warning where nvidia-smi exists but fails, prints
no version or an older one. Checked with `make -n` (nothing is installed or downloaded) and a fake nvidia-smi
first on PATH, so the rule is tested on a machine without a GPU, and a GPU machine's own nvidia-smi
never decides a case."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CPU_LOCK, CUDA_LOCK = "requirements.lock", "requirements-cuda.lock"
CPU_SOURCES = ("--find-links", "download.pytorch.org/whl/cpu")  # where the CPU torch comes from

DRIVER = "echo 580.95.05"
TWO_GPUS = "echo 580.95.05; echo 580.95.05"
# a broken driver: nvidia-smi prints its complaint on stdout and exits 9
NO_DRIVER = "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"; exit 9"
NO_DEVICE = 'echo "No devices were found"; exit 6'
NOT_INSTALLED = 'echo "nvidia-smi: command not found" >&2; exit 127'


def _env(tmp_path: Path, nvidia_smi: str | None) -> dict[str, str]:
    """The test's environment without make's own variables or a TORCH choice, with a fake nvidia-smi
    (a shell body) first on PATH; None leaves PATH as it is."""
    env = {k: v for k, v in os.environ.items() if k not in {"TORCH", "MAKEFLAGS", "MFLAGS", "MAKELEVEL"}}
    if nvidia_smi is not None:
        fake = tmp_path / "fakebin"
        fake.mkdir(exist_ok=True)
        script = fake / "nvidia-smi"
        script.write_text(f"#!/bin/sh\n{nvidia_smi}\n")
        script.chmod(0o755)
        env["PATH"] = f"{fake}{os.pathsep}{env.get('PATH', '')}"
    return env


def _make(tmp_path: Path, nvidia_smi: str | None, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """`make -n setup` (-B among ``args``: as if the venv were stale, so the sync shows), which must succeed."""
    proc = subprocess.run(
        ["make", "--no-print-directory", "-n", *args, "setup"],
        cwd=cwd, env=_env(tmp_path, nvidia_smi), capture_output=True, text=True, timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def _dry_run(tmp_path: Path, nvidia_smi: str | None, *args: str, cwd: Path = ROOT) -> list[str]:
    """The commands `make -n setup` would run."""
    return _make(tmp_path, nvidia_smi, *args, cwd=cwd).stdout.splitlines()


def _sync(lines: list[str]) -> list[str] | None:
    """The `uv pip sync` command line, split, or None where set-up would not sync."""
    syncs = [line.split() for line in lines if " pip sync " in line]
    assert len(syncs) <= 1, syncs
    return syncs[0] if syncs else None


def _assert_installs(lines: list[str], lock: str) -> None:
    sync = _sync(lines)
    assert sync is not None, "\n".join(lines)
    assert sync[-1] == lock, " ".join(sync)
    cpu_source = any(s in " ".join(sync) for s in CPU_SOURCES)
    assert cpu_source == (lock == CPU_LOCK), " ".join(sync)  # the CUDA torch comes from PyPI only
    build = "cuda" if lock == CUDA_LOCK else "cpu"
    assert f"touch .venv/.installed-{build}" in lines, "\n".join(lines)


@pytest.mark.parametrize("nvidia_smi", [DRIVER, TWO_GPUS], ids=["driver", "two-gpus"])
def test_a_driver_picks_the_cuda_lock(tmp_path: Path, nvidia_smi: str) -> None:
    _assert_installs(_dry_run(tmp_path, nvidia_smi, "-B"), CUDA_LOCK)


@pytest.mark.parametrize(
    "nvidia_smi", [NO_DRIVER, NO_DEVICE, NOT_INSTALLED, "exit 0"], ids=["no-driver", "no-device", "absent", "silent"]
)
def test_no_driver_picks_the_cpu_lock(tmp_path: Path, nvidia_smi: str) -> None:
    _assert_installs(_dry_run(tmp_path, nvidia_smi, "-B"), CPU_LOCK)


def test_a_driver_too_old_for_the_cuda_13_torch_picks_the_cpu_lock_and_says_so(tmp_path: Path) -> None:
    proc = _make(tmp_path, "echo 550.54.15", "-B")
    _assert_installs(proc.stdout.splitlines(), CPU_LOCK)
    assert "NVIDIA driver 550.54.15 is older than 580.65.06" in proc.stderr


@pytest.mark.parametrize("version", ["580.65.06", "580.95.05", "581.0"])
def test_the_full_driver_version_is_compared_cuda(tmp_path: Path, version: str) -> None:
    proc = _make(tmp_path, f"echo {version}", "-B")
    _assert_installs(proc.stdout.splitlines(), CUDA_LOCK)
    assert "nvidia" not in proc.stderr.lower(), proc.stderr  # no warning


def test_the_full_driver_version_is_compared_cpu(tmp_path: Path) -> None:
    """580.65.05 is a 580 driver, yet older than the 580.65.06 that CUDA 13 needs."""
    proc = _make(tmp_path, "echo 580.65.05", "-B")
    _assert_installs(proc.stdout.splitlines(), CPU_LOCK)
    assert "NVIDIA driver 580.65.05 is older than 580.65.06" in proc.stderr and "TORCH=cuda" in proc.stderr


@pytest.mark.parametrize(
    ("nvidia_smi", "printed"),
    [(NO_DRIVER, "couldn't communicate with the NVIDIA driver"), ("exit 9", "exit 9"), ("echo '[N/A]'", "[N/A]")],
    ids=["no-driver", "exit-9", "n/a"],
)
def test_an_nvidia_smi_without_a_version_picks_the_cpu_lock_and_says_so(
    tmp_path: Path, nvidia_smi: str, printed: str
) -> None:
    proc = _make(tmp_path, nvidia_smi, "-B")
    _assert_installs(proc.stdout.splitlines(), CPU_LOCK)
    warning = proc.stderr
    assert "nvidia-smi" in warning and printed in warning, warning
    assert "CPU build is installed" in warning and "TORCH=cuda" in warning, warning


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has an nvidia-smi")
def test_without_nvidia_smi_the_cpu_lock(tmp_path: Path) -> None:
    proc = _make(tmp_path, None, "-B")
    _assert_installs(proc.stdout.splitlines(), CPU_LOCK)
    assert "nvidia" not in proc.stderr.lower(), proc.stderr  # no nvidia-smi: silently


def test_torch_overrides_the_choice(tmp_path: Path) -> None:
    _assert_installs(_dry_run(tmp_path, DRIVER, "-B", "TORCH=cpu"), CPU_LOCK)
    _assert_installs(_dry_run(tmp_path, NO_DRIVER, "-B", "TORCH=cuda"), CUDA_LOCK)
    proc = subprocess.run(
        ["make", "-n", "setup", "TORCH=rocm"], cwd=ROOT, env=_env(tmp_path, DRIVER),
        capture_output=True, text=True, timeout=30,
    )
    assert proc.returncode != 0 and "use TORCH=cpu or TORCH=cuda" in proc.stderr


def test_switching_builds_syncs_again(tmp_path: Path) -> None:
    """A venv stamped for one build is up to date for that build only."""
    repo = tmp_path / "repo"
    (repo / ".venv" / "bin").mkdir(parents=True)
    for name in ("Makefile", "pyproject.toml", CPU_LOCK, CUDA_LOCK):
        shutil.copy2(ROOT / name, repo / name)
    for tool in ("python", "uv"):
        (repo / ".venv" / "bin" / tool).write_text("#!/bin/sh\nexit 1\n")
        (repo / ".venv" / "bin" / tool).chmod(0o755)
    newer = max((repo / n).stat().st_mtime for n in ("pyproject.toml", CPU_LOCK, CUDA_LOCK)) + 10

    def stamp(build: str) -> None:
        for old in (repo / ".venv").glob(".installed*"):
            old.unlink()
        path = repo / ".venv" / f".installed-{build}"
        path.touch()
        os.utime(path, (newer, newer))

    stamp("cpu")
    assert _sync(_dry_run(tmp_path, NO_DRIVER, cwd=repo)) is None
    _assert_installs(_dry_run(tmp_path, DRIVER, cwd=repo), CUDA_LOCK)
    stamp("cuda")
    assert _sync(_dry_run(tmp_path, DRIVER, cwd=repo)) is None
    _assert_installs(_dry_run(tmp_path, NO_DRIVER, cwd=repo), CPU_LOCK)
    (repo / ".venv" / ".installed-cuda").unlink()
    (repo / ".venv" / ".installed").touch()  # the stamp of a venv set up before the CUDA lock existed
    os.utime(repo / ".venv" / ".installed", (newer, newer))
    _assert_installs(_dry_run(tmp_path, NO_DRIVER, cwd=repo), CPU_LOCK)
