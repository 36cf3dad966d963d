"""The executor choice is checked before any compute; the local mapper keeps order and indices; the process
pool runs tasks elsewhere and hands them back as they finish."""

from __future__ import annotations

import os

import pytest

from pipeline.config import ConfigError
from pipeline.executor import TaskError, executor_name, local_map, mapper, process_map, ray_map


def test_executor_name_defaults_to_local_and_rejects_unknown(monkeypatch):
    monkeypatch.delenv("TRAINSCAPE_EXECUTOR", raising=False)
    assert executor_name() == "local"
    monkeypatch.setenv("TRAINSCAPE_EXECUTOR", "ray")
    assert executor_name() == "ray" and mapper("ray") is ray_map
    monkeypatch.setenv("TRAINSCAPE_EXECUTOR", "processes")
    assert executor_name() == "processes" and mapper("processes") is process_map
    monkeypatch.setenv("TRAINSCAPE_WORKERS", "0")
    with pytest.raises(ConfigError, match=r"TRAINSCAPE_WORKERS = '0' is not allowed; allowed: a whole number"):
        executor_name()
    monkeypatch.setenv("TRAINSCAPE_EXECUTOR", "dask")
    with pytest.raises(ConfigError, match=r"TRAINSCAPE_EXECUTOR = 'dask' is not allowed; allowed: "
                                          r"\['local', 'processes', 'ray'\]"):
        executor_name()


def test_local_map_yields_index_and_result_in_order():
    assert list(local_map(lambda x: x * x, [3, 1, 2])) == [(0, 9), (1, 1), (2, 4)]


def test_local_map_says_where_each_task_ran():
    where: dict[int, dict] = {}
    for i, _ in local_map(lambda x: x, ["a", "b"], where=where):
        assert set(where) == set(range(i + 1))  # known before the result is handed on
    assert [w["executor"] for w in where.values()] == ["local", "local"] and where[0]["host"]


def _square_slowly_first(x: int) -> int:
    """A task whose first item finishes last (a worker pool hands results back as they finish)."""
    import time

    time.sleep(0.6 if x == 3 else 0.0)
    if x < 0:
        raise ValueError(f"no square of {x} today")
    return x * x


def test_process_map_runs_tasks_in_other_processes_and_yields_them_as_they_finish(monkeypatch):
    monkeypatch.setenv("TRAINSCAPE_WORKERS", "2")
    where: dict[int, dict] = {}
    got = list(process_map(_square_slowly_first, [3, 1, 2], where=where))
    assert sorted(got) == [(0, 9), (1, 1), (2, 4)] and got[-1] == (0, 9)
    assert {w["executor"] for w in where.values()} == {"processes"}
    assert all(w["pid"] != os.getpid() for w in where.values()) and len({w["pid"] for w in where.values()}) <= 2
    assert list(process_map(_square_slowly_first, [])) == []
    with pytest.raises(ValueError, match="no square of -1 today"):
        list(process_map(_square_slowly_first, [2, -1]))


def _threads_for(requested: int) -> int:
    from pipeline import device

    return device.cpu_threads(requested)


def test_a_worker_process_gets_its_share_of_the_cores(monkeypatch):
    """Two workers on this machine's cores: each caps a task's torch threads at half of them (at least one),
    where the stage's own process caps them at all of them."""
    from pipeline import device

    monkeypatch.setenv("TRAINSCAPE_WORKERS", "2")
    share = max(1, device.cores() // 2)
    assert [r for _, r in sorted(process_map(_threads_for, [64, 64]))] == [share, share]
    assert device.cpu_threads(64) == device.cores() and device.cpu_threads(1) == 1 and device.cpu_threads(0) == 1


class _UnpicklableError(Exception):
    """An error whose class does not survive pickling (its __init__ wants more than its args), as scipy's
    ArpackNoConvergence."""

    def __init__(self, msg: str, eigenvalues: list) -> None:
        super().__init__(msg)
        self.eigenvalues = eigenvalues


def _stall(x: int) -> int:
    if x < 0:
        raise _UnpicklableError(f"no convergence at {x}", [])
    return x


def test_a_tasks_error_that_cannot_be_pickled_reaches_the_stage_by_name(monkeypatch):
    """Before, the pool broke on unpickling it (TypeError: __init__() missing arguments) and the cause was lost."""
    monkeypatch.setenv("TRAINSCAPE_WORKERS", "2")
    with pytest.raises(TaskError, match=r"_UnpicklableError: no convergence at -3(.|\n)*_stall"):
        list(process_map(_stall, [1, -3]))
