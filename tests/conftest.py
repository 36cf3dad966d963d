"""Shared fixtures: a temporary MLflow store, tiny data, and a throw-away copy of the repository
for smoke slices of the real pipeline (``dvc repro`` on the smoke profile)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from pipeline.config import params_file, read_tree
from pipeline.device import cores
from pipeline.tracking import run_map
from pipeline.tracking.records import fingerprint
from pipeline.warm import ENV as WARM_ENV
from tests.ray_nodes import RayNodes, clusters

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


SLOW_MARKS = ("pipeline", "cluster", "browser", "gpu")


def pytest_configure(config: pytest.Config) -> None:
    """Under ``pytest -n`` (``make test``), each worker process's torch computes on its share of the cores: with
    torch's default (every core) in each worker, two workers ran twice as many threads as cores, and threads
    that wait by spinning lost the difference (the fused-engine, Newton and Hessian tests, ``-n 2`` on 2 cores:
    74.2 → 64.2 s). The stage commands the tests start set their own threads (their params)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        import torch

        torch.set_num_threads(max(1, cores() // workers))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """``unit``: the fast tests, i.e. every test that carries none of :data:`SLOW_MARKS` (``pytest -m unit``)."""
    for item in items:
        if not any(item.get_closest_marker(m) for m in SLOW_MARKS):
            item.add_marker(pytest.mark.unit)


@pytest.fixture(scope="session", autouse=True)
def _warm_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A warm host (pipeline/warm.py) for the test process, as ``make repro`` has one: the stage commands its
    tests start, in repository copies and scratch workspaces, hand themselves over (a command in another
    environment or process context runs itself, so no test depends on it)."""
    sock = tmp_path_factory.mktemp("warm") / "warm.sock"
    env = {k: v for k, v in os.environ.items() if k != WARM_ENV}
    env["MPLBACKEND"] = "Agg"  # what every test's commands run with (_isolated_tracking, repo_copy)
    with (sock.parent / "warm.log").open("w") as log:
        host = subprocess.Popen([sys.executable, "-m", "pipeline.warm", "serve", str(sock)], cwd=ROOT, env=env,
                                stdout=log, stderr=subprocess.STDOUT)
    os.environ[WARM_ENV] = str(sock)
    try:
        yield
    finally:
        os.environ.pop(WARM_ENV, None)
        host.terminate()
        host.wait(timeout=60)


@pytest.fixture(scope="session")
def mlflow_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One temporary sqlite store for the session (creating one runs migrations: seconds)."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


@pytest.fixture(autouse=True)
def _isolated_tracking(monkeypatch: pytest.MonkeyPatch, mlflow_uri: str, tmp_path: Path) -> None:
    """Tests never write to the repository's mlflow.db, nor journal into its tracking journal."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_uri)
    monkeypatch.setenv("TRAINSCAPE_JOURNAL", str(tmp_path / "journal"))
    monkeypatch.delenv("TRAINSCAPE_TRACKING", raising=False)
    monkeypatch.setenv("MPLBACKEND", "Agg")


@dataclass
class RepoCopy:
    path: Path
    env: dict[str, str]

    def run(self, *args: str, check: bool = True, timeout: float = 2400) -> subprocess.CompletedProcess:
        proc = subprocess.run(list(args), cwd=self.path, env=self.env, capture_output=True, text=True,
                              timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n"
                                 f"{proc.stderr[-4000:]}")
        return proc

    def dvc(self, *args: str, check: bool = True, timeout: float = 2400) -> subprocess.CompletedProcess:
        return self.run(str(BIN / "dvc"), *args, check=check, timeout=timeout)

    def sync(self) -> dict[str, str]:
        """Replay the copy's tracking journals into its MLflow store (what its gallery stage does);
        returns run key → MLflow run id."""
        self.run(sys.executable, "-m", "pipeline.tracking", "sync", "--on-error", "fail")
        return {k: v["run_id"] for k, v in run_map(self.path / ".trainscape" / "journal").items()}

    def run_record(self, stage: str, output: str | None = None, *, part: str | None = None) -> dict:
        """The run record (:mod:`pipeline.tracking.records`) of the execution that wrote ``output`` (a unit's
        ``meta.json`` or a render's sidecar, relative to the copy), or of a resumable unit's ``part``."""
        runs = self.path / ".trainscape" / "runs"
        if part is not None:
            return json.loads((runs / f"{stage}.parts" / f"{part}.json").read_text())
        data = json.loads((runs / f"{stage}.json").read_text())
        return data["runs"][fingerprint(json.loads((self.path / str(output)).read_text()))]

    def params(self) -> dict:
        return read_tree(self.path)

    def set_params(self, updates: dict, *, regenerate: bool = True) -> None:
        """Deep-merge ``updates`` into the copy's params files, then rewrite its dvc.yaml (``make dag``)."""
        data = self.params()

        def merge(dst: dict, src: dict) -> None:
            for k, v in src.items():
                if isinstance(v, dict) and isinstance(dst.get(k), dict):
                    merge(dst[k], v)
                else:
                    dst[k] = v

        merge(data, updates)
        files: dict[str, dict] = {}
        for key, value in data.items():
            files.setdefault(params_file(key), {})[key] = value
        for name, doc in files.items():
            (self.path / name).write_text(yaml.safe_dump(doc, sort_keys=False))
        if regenerate:
            self.run(sys.executable, "-m", "pipeline.graph")


def _source_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [f for f in out.split("\0") if f and (ROOT / f).is_file()]


@pytest.fixture(scope="session")
def data_mirror(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with both datasets in the ``artifacts/data`` layout, fetched once per session."""
    from pipeline.data import DATASETS, fetch, write_dataset

    local = ROOT / "artifacts" / "data"
    if all((local / name / "checksums.json").exists() for name in DATASETS):
        return local
    mirror = tmp_path_factory.mktemp("data")
    for name in DATASETS:
        files, source = fetch(name, mirror_dir=local if local.is_dir() else None, log=lambda _m: None)
        write_dataset(name, files, source, mirror / name)
    return mirror


@pytest.fixture
def repo_copy(tmp_path: Path, mlflow_uri: str, data_mirror: Path) -> RepoCopy:
    """A fresh git+DVC copy of the working tree (tracked and untracked-not-ignored files).

    Data comes through the mirror source from :func:`data_mirror`, so copies never re-download.
    """
    dst = tmp_path / "repo"
    for rel in _source_files():
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "MLFLOW_TRACKING_URI": mlflow_uri, "MPLBACKEND": "Agg", "TRAINSCAPE_DPI": "60",
           "TRAINSCAPE_PROGRESS": "off",
           "DVC_NO_ANALYTICS": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    for var in ("TRAINSCAPE_ROOT", "DVC_ROOT", "TRAINSCAPE_JOURNAL"):  # the copy journals into its own folder
        env.pop(var, None)
    env["TRAINSCAPE_DATA_MIRROR"] = str(data_mirror)
    copy = RepoCopy(dst, env)
    copy.run("git", "init", "-q")
    copy.run("git", "add", "-A")
    copy.run("git", "commit", "-q", "-m", "copy")
    if not (dst / ".dvc").is_dir():
        copy.dvc("init", "-q")
    return copy


@pytest.fixture
def ray_nodes() -> Iterator[Callable[[], RayNodes]]:
    """Two-node Ray clusters in network namespaces (:mod:`tests.ray_nodes`), each removed afterwards."""
    yield from clusters()
