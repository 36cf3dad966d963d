"""A two-node Ray cluster in network namespaces (``cluster/ray-2node``) for the tests; the ``ray_nodes``
fixture (tests/conftest.py) removes every namespace and process it made, also when the test fails."""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "cluster" / "ray-2node"
HEAD_IP, WORKER_IP = "10.77.0.1", "10.77.0.2"
_serial = itertools.count()


def usable() -> str | None:
    """Why namespaces cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2 (ip) is not installed"
    return None


@dataclass
class RayNodes:
    """One two-node cluster: namespaces ``<name>-head`` and ``<name>-worker``."""

    name: str
    env: dict[str, str] = field(default_factory=dict)

    def _script(self, *args: str, check: bool = True, timeout: float = 180) -> subprocess.CompletedProcess:
        env = {**os.environ, **self.env, "TRAINSCAPE_RAY_NAME": self.name, "PY": sys.executable}
        proc = subprocess.run([str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode:
            raise AssertionError(f"ray-2node {' '.join(args)} failed ({proc.returncode}):\n"
                                 f"{proc.stdout}\n{proc.stderr}")
        return proc

    def start(self) -> list[str]:
        """Start both nodes; the nodes the head's GCS then lists, ``<ip> alive|dead``."""
        return sorted(self._script("start").stdout.split("\n")[1:-1])

    def stop(self) -> None:
        self._script("stop", check=False)

    def nodes(self) -> list[str]:
        """``<ip> alive|dead`` per node, as the head's GCS sees them."""
        return sorted(self._script("status").stdout.split("\n")[:-1])

    def head_env(self) -> dict[str, str]:
        """What a stage needs to join: RAY_ADDRESS and the cluster's token."""
        lines = self._script("env").stdout.split()
        return dict(line.split("=", 1) for line in lines)

    def on_head(self, *cmd: str) -> list[str]:
        """``cmd`` prefixed to run in the head's namespace (a login on the head machine)."""
        return ["ip", "netns", "exec", f"{self.name}-head", *cmd]

    def processes(self, node: str) -> dict[int, str]:
        """pid -> command line of every process of ``node`` (``head`` or ``worker``)."""
        pids = subprocess.run(["ip", "netns", "pids", f"{self.name}-{node}"], capture_output=True, text=True).stdout
        out = {}
        for pid in pids.split():
            with contextlib.suppress(OSError):  # the process ended meanwhile
                out[int(pid)] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        return out

    def wait_for_task(self, node: str, name: str, timeout: float = 300,
                      alive: Callable[[], bool] = lambda: True) -> None:
        """Until a Ray worker of ``node`` runs task ``name`` (its process title ``ray::<name>``), while
        ``alive()`` (the stage that submits it still runs)."""
        deadline = time.time() + timeout
        while time.time() < deadline and alive():
            if any(cmd.startswith(f"ray::{name}") for cmd in self.processes(node).values()):
                return
            time.sleep(0.05)
        raise AssertionError(f"no task {name} started on the {node} while the stage ran (at most {timeout} s)")

    def kill(self, node: str) -> str:
        """SIGKILL every Ray process of ``node``, the way a machine dies (a stage started on it stays)."""
        return self._script(f"kill-{node}").stdout.strip()


def reap() -> None:
    """Remove the clusters of test processes that were killed before their fixture could (a timeout)."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for pid, serial in set(re.findall(r"^tsr(\d+)-(\d+)-(?:head|worker)\b", listed, re.M)):
        if not Path(f"/proc/{pid}").exists():
            RayNodes(f"tsr{pid}-{serial}").stop()


def clusters() -> Iterator[Callable[[], RayNodes]]:
    """The ``ray_nodes`` fixture: a factory of started two-node clusters (namespaces named after this
    process, so parallel test workers and leftovers never collide); each is stopped afterwards, whatever
    the test did."""
    why = usable()
    if why:
        pytest.skip(why)
    reap()
    made: list[RayNodes] = []

    def start() -> RayNodes:
        nodes = RayNodes(f"tsr{os.getpid()}-{next(_serial)}")
        made.append(nodes)
        joined = nodes.start()
        assert joined == [f"{HEAD_IP} alive", f"{WORKER_IP} alive"], joined
        return nodes

    try:
        yield start
    finally:
        for nodes in made:
            nodes.stop()
