"""The warm host (pipeline/warm.py) changes where a stage runs, never what it computes: a real host, real stage
commands (``python -m stages.<kind>``) in a temporary workspace, each run once in its own process and once
handed over, compared byte for byte, with their exit status and error line."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.tracking import journal_dir
from pipeline.warm import ENV
from tests.workspace import scratch_workspace

ROOT = Path(__file__).resolve().parent.parent
UNIT = ("train", "superposition", "untied")


def _env(**extra: str) -> dict[str, str]:
    """The host's and the commands' environment (the same import-time part, or the host declines)."""
    env = {k: v for k, v in os.environ.items() if k != ENV}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


@pytest.fixture
def host(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A warm host on a socket of its own; its log, where every command it ran is named."""
    sock, log = tmp_path / "warm.sock", tmp_path / "warm.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "pipeline.warm", "serve", str(sock)], cwd=ROOT, env=_env(),
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not sock.exists():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        yield str(sock), log
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert not sock.exists(), "the host removes its socket when stopped"


def _stage(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)


def _outputs(root: Path) -> dict[str, bytes]:
    kind, study, unit = UNIT
    folder = root / "artifacts" / study / kind / unit
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.pipeline
def test_a_stage_handed_to_the_warm_host_writes_the_same_bytes(tmp_path: Path, data_mirror: Path, host) -> None:
    sock, log = host
    root = scratch_workspace(tmp_path / "ws", data_mirror)
    env = _env(TRAINSCAPE_ROOT=str(root), TRAINSCAPE_JOURNAL=str(journal_dir()), TRAINSCAPE_PROGRESS="off")
    kind, study, unit = UNIT
    args = [f"stages.{kind}", study, unit, "--profile", "smoke"]

    own = _stage(args, env)
    assert own.returncode == 0, own.stderr[-2000:]
    alone = _outputs(root)
    shutil.rmtree(root / "artifacts" / study)
    warm = _stage(args, {**env, ENV: sock})
    assert warm.returncode == 0, warm.stderr[-2000:]
    assert f"ran -m stages.{kind} {study} {unit}" in log.read_text(), log.read_text()
    assert alone and _outputs(root) == alone

    # a bad command: the same status and error line either way
    bad = ["stages.train", "nosuchstudy", "x"]
    own_bad, warm_bad = _stage(bad, env), _stage(bad, {**env, ENV: sock})
    assert own_bad.returncode == warm_bad.returncode == 2
    assert own_bad.stderr == warm_bad.stderr and "nosuchstudy" in warm_bad.stderr
    assert log.read_text().count("ran -m stages.train nosuchstudy x") == 1


def test_a_command_the_host_cannot_run_as_its_own_runs_itself(tmp_path: Path, host) -> None:
    """Another import-time environment (here the thread count the libraries read when loaded) or another
    process context (here the cores it may use) is declined, and a host that is gone is passed by: the command
    runs in its own process, with the same result."""
    sock, log = host
    env = _env()
    args = ["stages.claims", "--help"]
    traces = tmp_path / "own.jsonl", tmp_path / "warm.jsonl"
    own = _stage(args, {**env, "TRAINSCAPE_TRACE_MODULES": str(traces[0])})
    declined = _stage(args, {**env, ENV: sock, "OMP_NUM_THREADS": "7"})
    pinned = subprocess.run(["taskset", "-c", "0", sys.executable, "-m", *args], cwd=ROOT, env={**env, ENV: sock},
                            capture_output=True, text=True, timeout=600)
    gone = _stage(args, {**env, ENV: str(tmp_path / "no-host.sock")})
    warm = _stage(args, {**env, ENV: sock, "TRAINSCAPE_TRACE_MODULES": str(traces[1])})
    # what the libraries set when loaded, as in a command whose parent loaded them (pytest, DVC), and a
    # PYTHONPATH of its own: run there all the same
    inductor = subprocess.run([sys.executable, "-c", "import os, torch._dynamo; "
                               "print(os.environ['TORCHINDUCTOR_CACHE_DIR'])"], capture_output=True, text=True,
                              env=env, check=True).stdout.strip()
    loaded = _stage(args, {**env, ENV: sock, "TORCHINDUCTOR_CACHE_DIR": inductor,
                           "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path / 'more'}"})
    runs = (own, declined, pinned, gone, warm, loaded)
    assert all(r.returncode == 0 and r.stdout == own.stdout for r in runs) and "usage:" in own.stdout
    text = log.read_text()
    assert "declined" in text and "OMP_NUM_THREADS" in text, text
    if len(os.sched_getaffinity(0)) > 1:
        assert "process context differs: cpus" in text, text
    assert text.count("ran -m stages.claims --help") == 2, text
    own_trace, warm_trace = (json.loads(t.read_text()) for t in traces)  # what the module-trace check reads
    assert own_trace["argv"] == warm_trace["argv"] and own_trace["argv"][0].endswith("stages/claims.py")
    assert own_trace["modules"] == warm_trace["modules"]


def _stage_processes(host_pid: int) -> list[int]:
    """The stage processes a host runs now: the children of its handlers."""
    def children(pid: int) -> list[int]:
        path = Path(f"/proc/{pid}/task/{pid}/children")
        return [int(c) for c in path.read_text().split()] if path.exists() else []
    return [g for a in children(host_pid) for g in children(a)]


@pytest.mark.pipeline
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_command_killed_takes_its_stage_process_with_it(tmp_path: Path, data_mirror: Path, host, sig) -> None:
    """SIGTERM is passed on; SIGKILL cannot be, so the host kills the stage process when the command is gone.
    Either way the command ends as a process killed by that signal would."""
    sock, log = host
    root = scratch_workspace(tmp_path / "ws", data_mirror)
    env = _env(TRAINSCAPE_ROOT=str(root), TRAINSCAPE_JOURNAL=str(journal_dir()), TRAINSCAPE_PROGRESS="off")
    host_pid = int(log.read_text().split()[2])
    proc = subprocess.Popen([sys.executable, "-m", "stages.train", "imprint", "random-adam", "--profile", "smoke"],
                            cwd=ROOT, env={**env, ENV: sock}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not (running := _stage_processes(host_pid)):
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    proc.send_signal(sig)
    assert proc.wait(timeout=60) == -sig
    deadline = time.monotonic() + 30
    while Path(f"/proc/{running[0]}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{running[0]}").exists(), "the stage process outlived its command"
    while f"status {-sig}" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert f"ran -m stages.train imprint random-adam --profile smoke in process {running[0]}: status {-sig}" in \
        log.read_text(), log.read_text()
