"""Atomic writes: temp file in the same folder, then rename, so no artifact is ever half-written.

Every file the framework writes goes through :func:`atomic_path`; an ``OSError`` there (a full disk, a
read-only folder) becomes a :class:`WriteError` naming the file, which the runner turns into one line.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np


class WriteError(OSError):
    """A file that could not be written (``errno``, ``strerror`` and ``filename`` as the cause's): the
    temporary file is removed and the file it would have replaced, if any, is left as it was."""

    def __init__(self, path: str | Path, cause: OSError):
        super().__init__(cause.errno, cause.strerror or str(cause), str(path))
        self.path = Path(path)

    def __reduce__(self) -> tuple[Any, ...]:  # pickled whole, as a worker process would send it back
        return type(self), (self.path, OSError(self.errno, self.strerror))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it over ``path`` only on success. An ``OSError``
    while creating, filling or renaming the temporary file is raised as a :class:`WriteError` for ``path``."""
    path = Path(path)
    tmp_path: Path | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        tmp_path = Path(tmp)
        os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp makes 0600; outputs get the usual mode
        yield tmp_path
        os.replace(tmp_path, path)
    except WriteError:
        raise
    except OSError as exc:
        raise WriteError(path, exc) from exc
    finally:
        if tmp_path is not None and tmp_path.exists():
            tmp_path.unlink()


def write_bytes(path: str | Path, data: bytes) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_json(path: str | Path, obj: Any) -> Path:
    text = json.dumps(obj, indent=2, sort_keys=True, default=_json_default, allow_nan=True)
    return write_bytes(path, (text + "\n").encode())


def read_json(path: str | Path) -> Any:
    with open(path) as fh:
        return json.load(fh)


def write_npz(path: str | Path, **arrays: Any) -> Path:
    buf = io.BytesIO()
    np.savez_compressed(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    return write_bytes(path, buf.getvalue())


def read_npz(path: str | Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def write_csv(path: str | Path, table: Any) -> Path:
    """A pandas DataFrame as CSV: no index, ``\n`` line ends, floats as Python writes them (shortest
    round trip), so the same table is the same bytes. pandas is the caller's import, not this module's."""
    return write_bytes(path, table.to_csv(index=False, lineterminator="\n").encode())


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Build a whole output folder in a sibling temp folder, then swap it in (files inside are written
    with :func:`atomic_path`; a folder that cannot be made is a :class:`WriteError` too)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700
    except OSError as exc:
        raise WriteError(path, exc) from exc
    try:
        try:
            yield tmp
        except WriteError as exc:  # name the file the folder would have held, not its temporary twin
            if not exc.path.is_relative_to(tmp):
                raise
            raise WriteError(path / exc.path.relative_to(tmp), exc) from exc
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _json_default(o: Any) -> Any:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return o.as_posix()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
