"""The executor choice is checked before any compute; the local mapper keeps order and indices."""

from __future__ import annotations

import pytest

from pipeline.config import ConfigError
from pipeline.executor import executor_name, local_map, mapper, ray_map


def test_executor_name_defaults_to_local_and_rejects_unknown(monkeypatch):
    monkeypatch.delenv("TRAINSCAPE_EXECUTOR", raising=False)
    assert executor_name() == "local"
    monkeypatch.setenv("TRAINSCAPE_EXECUTOR", "ray")
    assert executor_name() == "ray" and mapper("ray") is ray_map
    monkeypatch.setenv("TRAINSCAPE_EXECUTOR", "dask")
    with pytest.raises(ConfigError, match=r"TRAINSCAPE_EXECUTOR = 'dask' is not allowed; allowed: \['local', 'ray'\]"):
        executor_name()


def test_local_map_yields_index_and_result_in_order():
    assert list(local_map(lambda x: x * x, [3, 1, 2])) == [(0, 9), (1, 1), (2, 4)]


def test_local_map_says_where_each_task_ran():
    where: dict[int, dict] = {}
    for i, _ in local_map(lambda x: x, ["a", "b"], where=where):
        assert set(where) == set(range(i + 1))  # known before the result is handed on
    assert [w["executor"] for w in where.values()] == ["local", "local"] and where[0]["host"]
