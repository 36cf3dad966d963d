"""The device a stage computes on: checked before compute (exit 2, one line), described in provenance."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest

from pipeline import device
from pipeline.config import ConfigError
from pipeline.paths import repo_root


def test_resolve_without_torch_never_imports_it(monkeypatch):
    monkeypatch.delenv("TRAINSCAPE_DEVICE", raising=False)
    monkeypatch.setitem(sys.modules, "torch", None)  # as if the stage's code never imported it
    assert device.resolve() == "cpu"
    monkeypatch.setenv("TRAINSCAPE_DEVICE", "cuda:1")  # moot for code without torch, but the form is checked
    assert device.resolve() == "cpu"
    monkeypatch.setenv("TRAINSCAPE_DEVICE", "gpu")
    with pytest.raises(ConfigError, match=r"TRAINSCAPE_DEVICE = 'gpu' is not allowed; allowed: 'cpu', 'cuda'"):
        device.resolve()


def test_cuda_where_torch_sees_none_is_bad_input(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("TRAINSCAPE_DEVICE", "cuda")
    with pytest.raises(ConfigError) as err:
        device.resolve()
    msg = str(err.value)
    assert "TRAINSCAPE_DEVICE = 'cuda' is not allowed here" in msg and "sees 0 CUDA device" in msg
    monkeypatch.setenv("TRAINSCAPE_DEVICE", "cpu")
    assert device.resolve() == "cpu"
    monkeypatch.delenv("TRAINSCAPE_DEVICE")
    assert device.resolve() == "cpu"


def test_describe_names_the_cpu_torch_and_the_matmul_precision():
    import torch

    info = device.describe("cpu")
    assert info["device"] == "cpu" and info["torch"] == torch.__version__ and info["name"]
    assert info["float32_matmul"] == "ieee"
    text = device.line(info)
    assert text.startswith("device: cpu (") and f"torch {torch.__version__}" in text and "float32 matmul: ieee" in text


@pytest.mark.gpu
def test_describe_a_gpu():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    info = device.describe("cuda")
    assert info["name"] == torch.cuda.get_device_name(0) and info["cuda"] == torch.version.cuda
    assert info["driver"] != "unknown" and "CUDA" in device.line(info)


def test_a_training_stage_asked_for_missing_cuda_exits_2_with_one_line(tmp_path):
    """The real stage command: no traceback, nothing written, before any compute."""
    env = {"PATH": "/usr/bin:/bin", "TRAINSCAPE_DEVICE": "cuda", "TRAINSCAPE_TRACKING": "off",
           "TRAINSCAPE_PROGRESS": "off", "CUDA_VISIBLE_DEVICES": ""}
    out = subprocess.run([sys.executable, "-m", "stages.train", "superposition", "untied"], cwd=repo_root(),
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: environment: TRAINSCAPE_DEVICE = 'cuda'"), out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""


def test_a_study_device_param_asking_for_missing_cuda_exits_2(monkeypatch, capsys):
    """superposition's own ``device`` param is checked at the start of its stage: exit 2, one line."""
    import torch

    from pipeline import stage
    from pipeline.studies.superposition.train import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"superposition.device = 'cuda' is not allowed here") as err:
        resolve_device(SimpleNamespace(device="cuda"), "cpu")

    def study_refuses(*_: object) -> None:
        raise err.value

    monkeypatch.setattr(stage, "execute", study_refuses)
    monkeypatch.setenv("TRAINSCAPE_TRACKING", "off")
    assert stage.main("train", ["superposition", "untied"]) == 2
    assert capsys.readouterr().err.strip() == f"error: {err.value}"
    assert json.dumps(device.describe("cpu"))  # provenance is JSON


# ----------------------------------------------------------------------------- float32 matmul precision


@pytest.fixture
def fp32_switches():
    """torch's fp32_precision switches as they were, afterwards."""
    import torch

    switches = (torch.backends.cuda.matmul, torch.backends.cudnn.conv, torch.backends.mkldnn.matmul)
    before = [s.fp32_precision for s in switches]
    with pytest.MonkeyPatch.context() as mp:  # a CPU build cannot fork CUDA's RNG: the probe's guard, minus that
        mp.setattr(torch.random, "fork_rng", lambda devices=(): contextlib.nullcontext())
        yield
    for s, v in zip(switches, before):
        s.fp32_precision = v


def _prepared_on_cuda(monkeypatch, unit: str):
    """The real gpu_medium train unit ``unit`` of mupc_training, prepared as on a GPU (CPU torch, CUDA faked)."""

    import torch

    from pipeline import stage
    from pipeline.config import parse_params, read_tree

    tree = read_tree()
    tree["profile"] = "gpu_medium"
    monkeypatch.setattr(device, "resolve", lambda: "cuda")  # the unit's precision is resolved for its device
    p = stage.prepare("train", "mupc_training", unit, params=parse_params(tree))
    props = SimpleNamespace(name="NVIDIA H100 80GB HBM3", major=9, minor=0, total_memory=80 * 2**30)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index=0: props)
    monkeypatch.setattr(device, "_driver", lambda: "580.65.06")
    assert p.device == "cuda"
    return p


def test_a_tf32_sweeps_device_record_says_tf32(monkeypatch, fp32_switches):
    """The record is made after the unit's declared precision is set: S7 trains in TF32 on CUDA, S9 in float64
    (full-precision products), whatever torch's flags were before, and a plan probe in between (which
    restores the flags it found) changes nothing."""
    import torch

    from pipeline import plan as planning
    from pipeline import stage

    seen: list[tuple[str, str]] = []
    real = device.set_matmul_precision
    monkeypatch.setattr(device, "set_matmul_precision", lambda d, prec: (seen.append((d, prec)), real(d, prec))[1])
    torch.backends.cuda.matmul.fp32_precision = "ieee"  # torch's default state on a fresh process
    s7 = _prepared_on_cuda(monkeypatch, "S7")
    with planning._torch_state("cuda"):  # the runner's plan line probes first
        torch.backends.cuda.matmul.fp32_precision = "tf32"
    assert seen == [("cuda", "ieee")] and device.matmul_precision("cuda") == "ieee"  # the probe restored it
    seen.clear()
    record = stage.device_record(s7)
    assert seen == [("cuda", "tf32")]
    assert record["float32_matmul"] == "tf32" and torch.backends.cuda.matmul.fp32_precision == "tf32"
    assert "float32 matmul: tf32" in device.line(record) and "CUDA" in device.line(record)
    record = stage.device_record(_prepared_on_cuda(monkeypatch, "S9"))
    assert record["float32_matmul"] == "ieee" and seen[-1] == ("cuda", "float64")


def test_precision_switches_never_mix_torchs_legacy_and_new_apis(fp32_switches):
    """torch raises ("mix of legacy and new APIs") when its legacy TF32 flags are read after the new
    ``fp32_precision`` switches were set: every place that sets or reads them goes through pipeline.device."""
    import torch

    from pipeline import plan as planning
    from pipeline.studies.mupc.training import train as train_mod

    torch.backends.cuda.matmul.fp32_precision = "ieee"  # as a library using the new API would leave it
    with planning._torch_state("cuda"):
        train_mod.set_precision("cuda", "tf32")
        assert device.matmul_precision("cuda") == "tf32"
        assert device.describe("cpu")["float32_matmul"] == "ieee"
    assert device.matmul_precision("cuda") == "ieee"  # the probe restored what it found
    legacy = re.compile(r"allow_tf32\s*=|backends\.cud\w*(\.matmul)?\.allow_tf32|float32_matmul_precision\(")
    offenders = [f"{path}:{n}" for top in ("pipeline", "stages", "benchmarks")
                 for path in sorted((repo_root() / top).rglob("*.py"))
                 for n, text in enumerate(path.read_text().splitlines(), 1) if legacy.search(text)]
    assert offenders == []
