"""`python -m stages.download <dataset>`: fetch, verify and write one dataset with checksums."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pipeline.config import ConfigError, load_params
from pipeline.data import DataError, fetch, write_dataset
from pipeline.paths import data_dir
from stages import finish


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m stages.download <dataset>", file=sys.stderr)
        return 2
    name = argv[0]
    try:
        params = load_params()
        if name not in params.data.datasets:
            raise ConfigError(f"params.yaml: data.datasets has no {name!r}; allowed: {sorted(params.data.datasets)}")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    spec = params.data.datasets[name]
    mirror = os.environ.get("TRAINSCAPE_DATA_MIRROR") or params.data.mirror_dir
    try:
        files, source = fetch(name, mirror_dir=Path(mirror) if mirror else None,
                              torchvision_download=spec.torchvision_download,
                              registry_sources=spec.registry_sources)
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    meta = write_dataset(name, files, source, data_dir(name))
    sums = ", ".join(f"{k} md5 {v['md5']}" for k, v in meta["files"].items())
    print(f"[download@{name}] {source}: {sums}")
    return 0


if __name__ == "__main__":
    sys.exit(finish(main(sys.argv[1:])))
