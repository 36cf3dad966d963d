"""Stage commands in their own process against the same commands handed to a warm host (pipeline/warm.py),
side by side in one run.

    python benchmarks/warm_host.py [--repeats 5]      # from the repository root, after `make repro`

Real stages of the imprint study (a train, an extract and a render unit), run as ``dvc repro`` runs them
(``python -m stages.<kind> …``) in a scratch workspace, interleaved: own process, then handed over, ``--repeats``
times. Prints each command's median wall time both ways, what the host saves per command and the ratio, and
the host's own start-up (its imports, paid once a build). Needs the imprint training outputs
(``dvc repro -R graph/imprint/train``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
STAGES = [("train", "imprint", "random-adam"), ("extract", "imprint", "final"), ("render", "imprint", "glyph")]


def workspace(tmp: Path) -> Path:
    """A scratch copy holding what the imprint stages read, so the benchmark leaves the repository as is."""
    ws = tmp / "ws"
    train = ROOT / "artifacts/imprint/train"
    if not train.is_dir():
        sys.exit("the imprint training outputs are missing: run `dvc repro -R graph/imprint/train` first")
    (ws / "artifacts/imprint").mkdir(parents=True)
    shutil.copytree(train, ws / "artifacts/imprint/train")
    (ws / "artifacts/data").symlink_to(ROOT / "artifacts/data")
    shutil.copy(ROOT / "params.yaml", ws / "params.yaml")
    shutil.copytree(ROOT / "params", ws / "params")
    subprocess.run(["git", "init", "-q"], cwd=ws, check=True)
    subprocess.run(["git", "add", "params.yaml", "params"], cwd=ws, check=True)
    subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-qm", "ws"],
                   cwd=ws, check=True)
    return ws


def timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DVC_", "MLFLOW_", "TRAINSCAPE_"))}
    base.update(PYTHONPATH=str(ROOT), MPLBACKEND="Agg")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        ws = workspace(tmp)
        env = {**base, "TRAINSCAPE_ROOT": str(ws), "TRAINSCAPE_PROGRESS": "off"}
        sock = tmp / "warm.sock"
        start = time.perf_counter()
        log = tmp / "warm.log"
        with log.open("w") as out:
            host = subprocess.Popen([PY, "-m", "pipeline.warm", "serve", str(sock)], cwd=ROOT, env=base, stdout=out,
                                    stderr=subprocess.STDOUT)
        while True:  # ready when it accepts a connection
            try:
                with socket.socket(socket.AF_UNIX) as probe:
                    probe.connect(str(sock))
                break
            except OSError:
                time.sleep(0.02)
        host_start = time.perf_counter() - start
        warm = {**env, "TRAINSCAPE_WARM_HOST": str(sock)}
        rows: dict[str, tuple[list[float], list[float]]] = {}
        try:
            for _ in range(args.repeats):
                for kind, study, unit in STAGES:
                    cmd = [PY, "-m", f"stages.{kind}", study, unit, "--profile", "smoke"]
                    own, handed = rows.setdefault(f"{study}_{kind}@{unit}", ([], []))
                    own.append(timed(cmd, env))
                    handed.append(timed(cmd, warm))
        finally:
            host.terminate()
            host.wait()
        ran = log.read_text().count("warm host: ran ")
        if ran != args.repeats * len(STAGES):  # a declined command runs itself: its time would be no comparison
            sys.exit(f"the host ran {ran} of {args.repeats * len(STAGES)} commands:\n{log.read_text()}")

    print(f"warm host start-up (its imports, once a build): {host_start:.2f} s\n")
    print(f"{'stage command (median of ' + str(args.repeats) + ')':40s} {'own s':>7s} {'warm s':>7s} {'saved s':>8s} "
          f"{'own ÷ warm':>10s}")
    saved = []
    for name, (own, handed) in rows.items():
        a, b = statistics.median(own), statistics.median(handed)
        saved.append(a - b)
        print(f"{name:40s} {a:7.2f} {b:7.2f} {a - b:8.2f} {a / b:9.2f}×")
    print(f"\nsaved per stage command, mean of the {len(saved)} above: {statistics.mean(saved):.2f} s")


if __name__ == "__main__":
    main()
