"""The training probes as the H100 asked for them: the real stack's shape, replayed where graphs are on."""

import dataclasses

from pipeline.config import load_section, read_tree
from pipeline.paths import repo_root
from pipeline.studies.mupc.training import probe
from pipeline.studies.mupc.training.config import TrainingParams
from pipeline.studies.mupc.training.cost import group_work, iteration_flops
from pipeline.studies.mupc.training.sweep_expansion import expand, stack_groups


def test_cuda_scales_the_runs_per_stack_before_the_layers():
    flops = lambda h, t, r: r * iteration_flops(512, h, t)[1]  # noqa: E731
    assert probe.scaled(flops, 128, 128, 64, 2e12, runs_first=True) == (128, 128, 2)
    assert probe.scaled(flops, 128, 128, 64, 2e12) == (16, 16, 64)  # the CPU's order: layers first


def test_the_work_says_whether_the_probe_replays_a_graph():
    cfg = load_section(TrainingParams, read_tree(repo_root()), "mupc_training", "headline")
    shapes = {}
    for unit in ("S6", "S10", "S13"):
        group = stack_groups(expand(cfg, unit), cfg.max_stack)[0]
        shapes[unit] = group_work(cfg, group, "float32", "cuda")[0].shape
    assert {u: shapes[u]["graphs"] for u in shapes} == {"S6": True, "S10": True, "S13": True}
    off = dataclasses.replace(cfg, cuda_graphs=False)
    assert group_work(off, stack_groups(expand(cfg, "S6"), 1)[0], "float32", "cuda")[0].shape["graphs"] is False
    assert "graphs" not in group_work(cfg, stack_groups(expand(cfg, "S6"), 1)[0], "float32", "cpu")[0].shape


def test_the_pc_probe_runs_the_trainers_iteration():
    step, flops = probe.pc_step(N=16, H=4, T=4, runs=2, act_optim="gd", front=True, precision="float32", threads=1,
                                device="cpu", budget=1e9, graphs=True)  # no capture on the CPU
    step()
    assert flops == 2 * iteration_flops(16, 4, 4)[1]
