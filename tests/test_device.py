"""The device a stage computes on: checked before compute (exit 2, one line), described in provenance."""

from __future__ import annotations

import json
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
    assert info["float32_matmul_precision"] == torch.get_float32_matmul_precision()
    text = device.line(info)
    assert text.startswith("device: cpu (") and f"torch {torch.__version__}" in text and "precision: highest" in text


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
