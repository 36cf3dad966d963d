"""Start-up of the project's processes with and without the installed packages' bytecode, side by side.

    .venv/bin/python benchmarks/bytecode.py [--repeats 5]

``make setup`` installs every package with its ``.pyc`` (``uv pip sync --compile-bytecode``). Without
them, Python compiles each imported module from source in every process, and where
``PYTHONDONTWRITEBYTECODE`` is set (it is on some machines) it never caches the result, so every stage,
test and ``dvc`` call pays again. This benchmark times fresh processes in both states, interleaved:

* ``with``: the venv as set-up leaves it;
* ``without``: the same venv as a set-up without ``--compile-bytecode`` leaves it, simulated exactly by
  pointing ``PYTHONPYCACHEPREFIX`` at a folder that holds the standard library's bytecode (which a
  Python installation ships) but none of the venv's or the project's.

Both sides run with ``PYTHONDONTWRITEBYTECODE=1``, so neither writes anything.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
COMMANDS = {
    "python -c pass": [PY, "-c", "pass"],
    "import torch": [PY, "-c", "import torch"],
    "import matplotlib.pyplot": [PY, "-c", "import matplotlib.pyplot"],
    "import pandas": [PY, "-c", "import pandas"],
    "import mlflow": [PY, "-c", "import mlflow"],
    "import dvc.repo": [PY, "-c", "import dvc.repo"],
    "dvc --version": [PY, "-m", "dvc", "--version"],
}


def run(cmd: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def stdlib_only_prefix(tmp: Path, base: dict[str, str]) -> Path:
    """A pycache prefix holding the bytecode of the standard library modules these commands import."""
    prefix = tmp / "pycache"
    env = {**base, "PYTHONPYCACHEPREFIX": str(prefix)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    for cmd in COMMANDS.values():  # writes every imported module's bytecode under the prefix
        subprocess.run(cmd, env=env, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    kept = 0
    for pyc in list(prefix.rglob("*.pyc")):
        source_dir = Path("/") / pyc.parent.relative_to(prefix)  # the prefix mirrors absolute source paths
        in_stdlib = source_dir == stdlib or stdlib in source_dir.parents
        if in_stdlib and "site-packages" not in source_dir.parts:
            kept += 1
        else:
            pyc.unlink()
    print(f"pycache prefix: {kept} standard-library .pyc kept, the venv's and the project's removed")
    return prefix


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    base = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    tmp = Path(tempfile.mkdtemp(prefix="bytecode-"))
    try:
        envs = {"with": base, "without": {**base, "PYTHONPYCACHEPREFIX": str(stdlib_only_prefix(tmp, base))}}
        times: dict[tuple[str, str], list[float]] = {}
        for cmd in COMMANDS.values():  # warm the page cache once
            run(cmd, base)
        for _ in range(a.repeats):
            for name, cmd in COMMANDS.items():
                for side, env in envs.items():
                    times.setdefault((name, side), []).append(run(cmd, env))
        print(f"fresh processes, {a.repeats} interleaved rounds, seconds (min / median)")
        print(f"{'command':<26} {'with bytecode':>15} {'without':>15} {'without/with':>13}")
        for name in COMMANDS:
            w, wo = times[(name, "with")], times[(name, "without")]
            print(f"{name:<26} {min(w):>6.2f} / {statistics.median(w):<6.2f} {min(wo):>6.2f} / "
                  f"{statistics.median(wo):<6.2f} {statistics.median(wo) / statistics.median(w):>12.2f}x")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
