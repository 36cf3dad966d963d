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
