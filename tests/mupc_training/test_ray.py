"""A sweep on a local Ray cluster gives the local executor's results bit for bit (CPU)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline.executor import ray_map
from pipeline.studies.mupc.training.sweep_expansion import expand
from tests.mupc_training.test_training import context, drive, tiny_raw, training_cfg

# skips, rather than breaks, collection where Ray is absent (a bare GPU machine's `pytest -m gpu`)
ray = pytest.importorskip("ray")


@pytest.mark.cluster
def test_ray_executor_matches_local_bit_for_bit(tmp_path, monkeypatch, data_mirror):
    ws = tmp_path / "ws"
    (ws / "artifacts").mkdir(parents=True)
    (ws / "artifacts/data").symlink_to(data_mirror)
    monkeypatch.setenv("TRAINSCAPE_ROOT", str(ws))  # Ray's workers inherit it and read the same data
    cfg = training_cfg(tiny_raw())
    runs = expand(cfg, "S9")
    outs = {}
    try:
        for name in ("local", "ray"):
            out = tmp_path / name
            out.mkdir()
            ctx = context(out, cfg, "S9")
            if name == "ray":
                ray.init(num_cpus=2, include_dashboard=False, configure_logging=False)
                ctx.mapper = ray_map
            parts, final = drive(ctx, out)
            assert final.execution["n_trained"] == len(runs) == 3
            outs[name] = out
    finally:
        ray.shutdown()
    for rc in runs:
        part = f"runs/{rc.hash()}"
        local, remote = (np.load(outs[n] / part / "arrays.npz") for n in ("local", "ray"))
        assert sorted(local.files) == sorted(remote.files) and "test_accs" in local.files
        for key in local.files:
            assert np.array_equal(local[key], remote[key], equal_nan=True), (rc.hash(), key)
        status = [json.loads((outs[n] / part / "config.json").read_text())["status"] for n in outs]
        assert status[0] == status[1]
    assert (outs["local"] / "index.json").read_text() == (outs["ray"] / "index.json").read_text()
