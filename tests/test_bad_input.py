"""Bad input and missing inputs: one clear line and exit 2 before any compute, never a traceback."""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.config import ConfigError, load_params
from pipeline.data import FILES, DataError, fetch
from pipeline.paths import repo_root

ROOT = repo_root()


def _workspace(tmp_path: Path) -> Path:
    """An empty workspace: the params files, no data and no outputs (code stays in the repository)."""
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    shutil.copytree(ROOT / "params", tmp_path / "params")
    return tmp_path


def _stage(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    base = {"PATH": os.environ["PATH"], "TRAINSCAPE_ROOT": str(tmp_path), "TRAINSCAPE_TRACKING": "off",
            "TRAINSCAPE_PROGRESS": "off", "MPLBACKEND": "Agg", "HOME": str(tmp_path)}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env={**base, **env}, capture_output=True, text=True,
                          timeout=300)


def _one_error_line(out: subprocess.CompletedProcess, *needles: str) -> str:
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    assert "Traceback" not in out.stderr, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def test_a_corrupt_gz_in_the_mirror_is_that_source_failing(tmp_path):
    for name in FILES:
        (tmp_path / f"{name}.gz").write_bytes(gzip.compress(b"not idx"))
    (tmp_path / f"{FILES[0]}.gz").write_bytes(gzip.compress(os.urandom(4000))[:2000])  # truncated: EOFError in gzip
    said: list[str] = []
    with pytest.raises(DataError) as err:  # not BadGzipFile/EOFError: the next source would be tried
        fetch("mnist", mirror_dir=tmp_path, torchvision_download=False, registry_sources=False, log=said.append)
    assert len(said) == 1 and said[0].startswith("[download] mnist: mirror ") and "not a readable gzip" in said[0]
    assert FILES[0] in said[0] and "no source worked" in str(err.value)
    (tmp_path / f"{FILES[1]}.gz").write_bytes(b"\x1f\x8b garbage")  # a bad header: BadGzipFile
    (tmp_path / f"{FILES[0]}.gz").unlink()
    (tmp_path / FILES[0]).write_bytes(b"plain")
    with pytest.raises(DataError, match="not a readable gzip"):
        fetch("mnist", mirror_dir=tmp_path, torchvision_download=False, registry_sources=False, log=said.append)


def test_a_yaml_syntax_error_names_the_file_and_line(tmp_path):
    ws = _workspace(tmp_path)
    path = ws / "params" / "imprint.yaml"
    path.write_text(path.read_text().replace("  lr: 0.001", "  lr: [0.001", 1))
    with pytest.raises(ConfigError) as err:
        load_params(ws)
    msg = str(err.value)
    assert msg.startswith("params/imprint.yaml: line ") and "not valid YAML" in msg and "\n" not in msg
    out = _stage(ws, "-m", "pipeline.graph")  # what `make dag` runs
    _one_error_line(out, "params/imprint.yaml: line ", "not valid YAML")
    assert not (ws / "dvc.yaml").exists()


@pytest.mark.parametrize("value", ["abc", "0", "100000"])
def test_a_bad_dpi_stops_a_render_before_it_draws(tmp_path, value):
    out = _stage(_workspace(tmp_path), "-m", "stages.render", "imprint", "glyph", TRAINSCAPE_DPI=value)
    _one_error_line(out, f"TRAINSCAPE_DPI = {value!r} is not allowed", "an integer from 10 to 2400")


def test_a_missing_upstream_output_is_one_line_naming_the_stage_to_run(tmp_path):
    ws = _workspace(tmp_path)
    out = _stage(ws, "-m", "stages.render", "imprint", "glyph")
    _one_error_line(out, "imprint: train unit", "has not been built", "run `dvc repro graph/imprint/train/")
    assert not (ws / "reports").exists() and not (ws / "artifacts").exists()


def test_data_not_downloaded_is_one_line_naming_the_download(tmp_path):
    ws = _workspace(tmp_path)
    out = _stage(ws, "-m", "stages.train", "imprint", "glyph-adam")
    _one_error_line(out, "dataset 'mnist' is not downloaded", "checksums.json is missing",
                    "run `dvc repro download@mnist`")
    assert not (ws / "artifacts" / "imprint").exists()
