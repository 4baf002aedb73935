"""Image sources (fedrepro.data.mnist / cifar / digits): fixtures written here in the exact upstream byte layout,
parsed back exactly, and fetched through the real data-dir / mirror path of fedrepro.data.sources."""

from __future__ import annotations

import ast
import dataclasses
import gzip
import struct
import tarfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from archives import tar_gz
from catalog_pins import data_cfg as _cfg

from fedrepro.data import catalog, cifar, digits, leaf, mnist
from fedrepro.data.sources import dataset_files, fetch, is_available, sha256_of, stamp_path
from fedrepro.errors import DataError

RNG = np.random.default_rng(20240504)
HEX64 = set("0123456789abcdef")


def _pin_to(monkeypatch, dataset_id: str, mirror_dir: Path) -> catalog.Dataset:
    """Replace the dataset's sha256 pins by those of the fixture files in ``mirror_dir`` (names/URLs unchanged)."""
    ds = catalog.get_dataset(dataset_id)
    pinned = dataclasses.replace(
        ds, files=tuple(dataclasses.replace(f, sha256=sha256_of(mirror_dir / f.name)) for f in ds.files)
    )
    monkeypatch.setitem(catalog.DATASETS, dataset_id, pinned)
    return pinned


# --------------------------------------------------------------------------------------------------------------------
# IDX fixtures (MNIST / Fashion-MNIST)


def _idx_bytes(arr: np.ndarray, magic: int) -> bytes:
    """IDX as specified on the MNIST page: big-endian magic, big-endian uint32 dims, then the bytes row-major."""
    return struct.pack(">I", magic) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.astype(np.uint8).tobytes()


def _write_gz(path: Path, payload: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(payload, mtime=0))
    return path


def _idx_fixture(directory: Path, n_train: int = 5, n_test: int = 3) -> dict[str, np.ndarray]:
    arrays = {
        mnist.TRAIN_IMAGES: RNG.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        mnist.TRAIN_LABELS: RNG.integers(0, 10, n_train).astype(np.uint8),
        mnist.TEST_IMAGES: RNG.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        mnist.TEST_LABELS: RNG.integers(0, 10, n_test).astype(np.uint8),
    }
    for name, arr in arrays.items():
        _write_gz(directory / name, _idx_bytes(arr, mnist.IMAGES_MAGIC if arr.ndim == 3 else mnist.LABELS_MAGIC))
    return arrays


def test_idx_fixture_header_is_the_upstream_byte_layout(tmp_path):
    arrays = _idx_fixture(tmp_path)
    raw = gzip.decompress((tmp_path / mnist.TRAIN_IMAGES).read_bytes())
    assert raw[:16] == bytes.fromhex("00000803000000050000001c0000001c")
    assert raw[16 : 16 + 28] == arrays[mnist.TRAIN_IMAGES][0, 0].tobytes()  # first row of the first image
    assert len(raw) == 16 + 5 * 784
    raw = gzip.decompress((tmp_path / mnist.TEST_LABELS).read_bytes())
    assert raw[:8] == bytes.fromhex("0000080100000003") and len(raw) == 8 + 3


def test_idx_parsed_back_exactly(tmp_path):
    arrays = _idx_fixture(tmp_path)
    data = mnist.load_idx_dir(tmp_path)
    for split, (im, lb) in {
        "train": (mnist.TRAIN_IMAGES, mnist.TRAIN_LABELS),
        "test": (mnist.TEST_IMAGES, mnist.TEST_LABELS),
    }.items():
        assert data[split].images.dtype == np.uint8 and data[split].labels.dtype == np.int64
        np.testing.assert_array_equal(data[split].images, arrays[im])
        np.testing.assert_array_equal(data[split].labels, arrays[lb].astype(np.int64))
    # uncompressed IDX files parse the same
    raw = tmp_path / "raw-idx"
    raw.write_bytes(gzip.decompress((tmp_path / mnist.TRAIN_IMAGES).read_bytes()))
    np.testing.assert_array_equal(mnist.read_images(raw), arrays[mnist.TRAIN_IMAGES])


def test_idx_wrong_magic_is_an_error_naming_the_file(tmp_path):
    _idx_fixture(tmp_path)
    labels = tmp_path / mnist.TRAIN_LABELS
    with pytest.raises(DataError, match=r"0x00000801, expected 0x00000803") as err:
        mnist.read_images(labels)  # a label file where images are expected
    assert str(labels) in str(err.value)
    bad = _write_gz(tmp_path / "bad" / mnist.TEST_IMAGES, _idx_bytes(np.zeros((1, 28, 28), np.uint8), 0x00000804))
    with pytest.raises(DataError, match="magic") as err:
        mnist.read_images(bad)
    assert str(bad) in str(err.value)


@pytest.mark.parametrize("delta", [-1, +1])
def test_idx_size_mismatch_is_an_error_naming_the_file(tmp_path, delta):
    payload = _idx_bytes(RNG.integers(0, 256, (2, 28, 28), dtype=np.uint8), mnist.IMAGES_MAGIC)
    payload = payload[:-1] if delta < 0 else payload + b"\x00"
    path = _write_gz(tmp_path / mnist.TRAIN_IMAGES, payload)
    with pytest.raises(DataError, match="size mismatch") as err:
        mnist.read_images(path)
    assert str(path) in str(err.value) and "2x28x28" in str(err.value)


def test_idx_corrupt_gzip_and_count_mismatch(tmp_path):
    arrays = _idx_fixture(tmp_path)
    gz = (tmp_path / mnist.TRAIN_IMAGES).read_bytes()
    (tmp_path / mnist.TRAIN_IMAGES).write_bytes(gz[: len(gz) // 2])
    with pytest.raises(DataError, match="corrupt gzip") as err:
        mnist.read_images(tmp_path / mnist.TRAIN_IMAGES)
    assert mnist.TRAIN_IMAGES in str(err.value)
    _write_gz(tmp_path / mnist.TRAIN_LABELS, _idx_bytes(arrays[mnist.TRAIN_LABELS][:4], mnist.LABELS_MAGIC))
    _write_gz(tmp_path / mnist.TRAIN_IMAGES, _idx_bytes(arrays[mnist.TRAIN_IMAGES], mnist.IMAGES_MAGIC))
    with pytest.raises(DataError, match="5 images but .* 4 labels"):
        mnist.load_idx_dir(tmp_path)


# --------------------------------------------------------------------------------------------------------------------
# CIFAR fixtures (binary versions)


CIFAR10_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def _cifar10_members(per_batch: int = 2) -> tuple[dict[str, bytes], dict[str, tuple[np.ndarray, np.ndarray]]]:
    members, truth = {}, {}
    for name in (*cifar.CIFAR10_TRAIN, cifar.CIFAR10_TEST):
        images = RNG.integers(0, 256, (per_batch, 3, 32, 32), dtype=np.uint8)
        labels = RNG.integers(0, 10, per_batch).astype(np.uint8)
        # record = <1 label byte><1024 red><1024 green><1024 blue>, each channel row-major
        members[name] = b"".join(bytes([lab]) + img.tobytes() for lab, img in zip(labels, images))
        truth[name] = (images, labels)
    members[cifar.CIFAR10_META] = ("\n".join(CIFAR10_NAMES) + "\n\n").encode()
    members[f"{cifar.CIFAR10_DIR}/readme.html"] = b"<html>fixture</html>\n"
    return members, truth


def _cifar100_members(n_train: int = 4, n_test: int = 3):
    members, truth = {}, {}
    for name, n in ((cifar.CIFAR100_TRAIN, n_train), (cifar.CIFAR100_TEST, n_test)):
        images = RNG.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8)
        coarse = RNG.integers(0, 20, n).astype(np.uint8)
        fine = RNG.integers(0, 100, n).astype(np.uint8)
        members[name] = b"".join(bytes([c, f]) + img.tobytes() for c, f, img in zip(coarse, fine, images))
        truth[name] = (images, coarse, fine)
    members[cifar.CIFAR100_COARSE_NAMES] = "".join(f"superclass_{i}\n" for i in range(20)).encode()
    members[cifar.CIFAR100_FINE_NAMES] = "".join(f"class_{i}\n" for i in range(100)).encode()
    return members, truth


def test_cifar10_binary_parsed_back_exactly(tmp_path):
    members, truth = _cifar10_members()
    archive = tar_gz(tmp_path / cifar.CIFAR10_ARCHIVE, members)
    data = cifar.load_cifar10(archive)
    train_im = np.concatenate([truth[n][0] for n in cifar.CIFAR10_TRAIN])
    train_lb = np.concatenate([truth[n][1] for n in cifar.CIFAR10_TRAIN])
    assert data.train.images.dtype == np.uint8 and data.train.labels.dtype == np.int64
    assert data.train.images.shape == (10, 3, 32, 32) and data.train.coarse_labels is None
    np.testing.assert_array_equal(data.train.images, train_im)
    np.testing.assert_array_equal(data.train.labels, train_lb)
    np.testing.assert_array_equal(data.test.images, truth[cifar.CIFAR10_TEST][0])
    np.testing.assert_array_equal(data.test.labels, truth[cifar.CIFAR10_TEST][1])
    assert data.label_names == tuple(CIFAR10_NAMES)


def test_cifar_record_layout_is_label_then_red_green_blue_row_major(tmp_path):
    rec = bytearray([7]) + bytes(range(256)) * 12  # label 7, then 3072 pixel bytes
    path = tmp_path / "data_batch_1.bin"
    path.write_bytes(bytes(rec) * 2)
    split = cifar.read_cifar10_bin(path)
    assert split.labels.tolist() == [7, 7]
    img = split.images[0]
    assert img[0, 0, 0] == 0 and img[0, 0, 5] == 5 and img[0, 1, 0] == 32  # red, row-major
    assert img[1, 0, 0] == rec[1 + 1024] and img[2, 31, 31] == rec[3072]  # green starts at 1024, blue ends last


def test_cifar100_fine_and_coarse_labels(tmp_path):
    members, truth = _cifar100_members()
    data = cifar.load_cifar100(tar_gz(tmp_path / cifar.CIFAR100_ARCHIVE, members))
    for split, name in (("train", cifar.CIFAR100_TRAIN), ("test", cifar.CIFAR100_TEST)):
        s = getattr(data, split)
        np.testing.assert_array_equal(s.images, truth[name][0])
        np.testing.assert_array_equal(s.coarse_labels, truth[name][1].astype(np.int64))
        np.testing.assert_array_equal(s.labels, truth[name][2].astype(np.int64))
        assert s.coarse_labels.dtype == np.int64 and s.labels.dtype == np.int64
    assert len(data.coarse_label_names) == 20 and len(data.label_names) == 100


def test_cifar_bad_record_size_and_label_range(tmp_path):
    path = tmp_path / "test.bin"
    path.write_bytes(b"\x00" * (3074 * 2 + 1))
    with pytest.raises(DataError, match="3074-byte CIFAR records") as err:
        cifar.read_cifar100_bin(path)
    assert str(path) in str(err.value)
    path.write_bytes(bytes([20, 0]) + b"\x00" * 3072)
    with pytest.raises(DataError, match="coarse label 20"):
        cifar.read_cifar100_bin(path)


def test_cifar_truncated_archive_is_a_data_error(tmp_path):
    members, _ = _cifar10_members()
    archive = tar_gz(tmp_path / cifar.CIFAR10_ARCHIVE, members)
    archive.write_bytes(archive.read_bytes()[:-200])
    with pytest.raises(DataError, match=cifar.CIFAR10_ARCHIVE):
        cifar.load_cifar10(archive)
    archive.write_bytes(b"<html>not a tarball</html>")
    with pytest.raises(DataError, match="cannot open as a tar archive"):
        cifar.load_cifar10(archive)


def _evil(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, linkname, 0o644
    data = b"pwned\n" if kind == tarfile.REGTYPE else None
    info.size = len(data) if data else 0
    return info, data


@pytest.mark.parametrize(
    "member, why",
    [
        (("../evil", tarfile.REGTYPE, ""), "'..' component"),
        (("cifar-10-batches-bin/../../evil", tarfile.REGTYPE, ""), "'..' component"),
        (("/tmp/fedrepro-abs-evil", tarfile.REGTYPE, ""), "absolute path"),
        ((cifar.CIFAR10_TEST, tarfile.SYMTYPE, "/etc/passwd"), "symlink"),
        ((cifar.CIFAR10_TEST, tarfile.LNKTYPE, "cifar-10-batches-bin/data_batch_1.bin"), "hardlink"),
        (("cifar-10-batches-bin/link", tarfile.SYMTYPE, "../../outside"), "symlink"),
    ],
)
def test_cifar_tar_path_traversal_and_links_refused(tmp_path, member, why):
    members, _ = _cifar10_members()
    name, kind, link = member
    if name == cifar.CIFAR10_TEST:
        del members[name]  # the link replaces the expected member
    archive = tar_gz(tmp_path / "a" / cifar.CIFAR10_ARCHIVE, members, extra=[_evil(name, kind, link)])
    out = tmp_path / "x" / "y"
    with pytest.raises(DataError, match="refusing to extract") as err:
        cifar.load_cifar10(archive, extract_to=out)
    assert why in str(err.value) and repr(name) in str(err.value)
    assert not (tmp_path / "x" / "evil").exists() and not (tmp_path / "evil").exists()
    assert not Path("/tmp/fedrepro-abs-evil").exists()
    assert not out.exists() or not any(p.is_file() for p in out.rglob("*"))  # refused before anything was written
    with pytest.raises(DataError, match="refusing"):
        cifar.extract_members(archive, tmp_path / "z", [cifar.CIFAR10_META])  # also when not reading that member


def test_cifar_extracts_only_expected_members_never_through_tar_extract(tmp_path, monkeypatch):
    members, _ = _cifar10_members()
    archive = tar_gz(tmp_path / cifar.CIFAR10_ARCHIVE, members)

    def refuse(*args, **kwargs):
        raise AssertionError("TarFile.extract must not be used")

    monkeypatch.setattr(tarfile.TarFile, "extract", refuse)
    monkeypatch.setattr(tarfile.TarFile, "extractall", refuse)
    out = tmp_path / "out"
    got = cifar.extract_members(archive, out, [cifar.CIFAR10_TEST])
    assert list(got) == [cifar.CIFAR10_TEST] and got[cifar.CIFAR10_TEST].read_bytes() == members[cifar.CIFAR10_TEST]
    assert sorted(
        p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file() and not p.name.startswith(".extracted-")
    ) == [cifar.CIFAR10_TEST]
    with pytest.raises(DataError, match="lacks expected member.*'cifar-10-batches-bin/nope.bin'"):
        cifar.extract_members(archive, out, [f"{cifar.CIFAR10_DIR}/nope.bin"])


# --------------------------------------------------------------------------------------------------------------------
# through the real mirror path: fetch -> verify -> dataset_files -> parser


def _write_fixture(dataset_id: str, directory: Path):
    directory.mkdir(parents=True, exist_ok=True)
    if dataset_id in ("mnist", "fashion_mnist"):
        return _idx_fixture(directory)
    members, truth = _cifar10_members() if dataset_id == "cifar10" else _cifar100_members()
    name = cifar.CIFAR10_ARCHIVE if dataset_id == "cifar10" else cifar.CIFAR100_ARCHIVE
    tar_gz(directory / name, members)
    return truth


def _load(dataset_id: str, files: list[Path]):
    if dataset_id in ("mnist", "fashion_mnist"):
        return mnist.load_idx_dataset(files)
    return (cifar.load_cifar10 if dataset_id == "cifar10" else cifar.load_cifar100)(files[0])


@pytest.mark.parametrize("dataset_id", ["mnist", "fashion_mnist", "cifar10", "cifar100"])
def test_fetch_through_mirror_then_parse(tmp_path, monkeypatch, dataset_id):
    mirror = tmp_path / "mirror"
    truth = _write_fixture(dataset_id, mirror / dataset_id)
    ds = _pin_to(monkeypatch, dataset_id, mirror / dataset_id)
    cfg = _cfg(tmp_path, mirror)
    assert is_available(cfg, dataset_id)
    stamp = fetch(cfg, dataset_id, offline=True)
    assert stamp == stamp_path(cfg, dataset_id)
    assert [ln.split()[1] for ln in stamp.read_text().splitlines()] == [f.name for f in ds.files]
    files = dataset_files(cfg, dataset_id)
    assert [p.name for p in files] == [f.name for f in ds.files]
    data = _load(dataset_id, files)
    if dataset_id in ("mnist", "fashion_mnist"):
        np.testing.assert_array_equal(data["train"].images, truth[mnist.TRAIN_IMAGES])
        np.testing.assert_array_equal(data["test"].labels, truth[mnist.TEST_LABELS])
    elif dataset_id == "cifar10":
        np.testing.assert_array_equal(data.test.images, truth[cifar.CIFAR10_TEST][0])
    else:
        np.testing.assert_array_equal(data.train.coarse_labels, truth[cifar.CIFAR100_TRAIN][1])


@pytest.mark.parametrize("dataset_id", ["mnist", "cifar100"])
def test_one_changed_byte_is_a_checksum_error(tmp_path, monkeypatch, dataset_id):
    mirror = tmp_path / "mirror"
    _write_fixture(dataset_id, mirror)  # flat mirror layout: <mirror>/<file>
    ds = _pin_to(monkeypatch, dataset_id, mirror)
    f = ds.files[-1]
    raw = bytearray((mirror / f.name).read_bytes())
    raw[len(raw) // 2] ^= 0x01
    (mirror / f.name).write_bytes(bytes(raw))
    cfg = _cfg(tmp_path, mirror)
    with pytest.raises(DataError, match="checksum mismatch") as err:
        fetch(cfg, dataset_id, offline=True)
    assert f.sha256 in str(err.value) and f.name in str(err.value)
    assert not (Path(cfg["data"]["dir"]) / dataset_id / f.name).exists()


@pytest.mark.parametrize("dataset_id", ["mnist", "fashion_mnist", "cifar10", "cifar100"])
def test_missing_file_message_names_file_sha_url_and_paths(tmp_path, monkeypatch, dataset_id):
    catalog.get_dataset(dataset_id)  # load the catalog, then hide local providers (the Debian Fashion-MNIST)
    monkeypatch.setattr(catalog, "PROVIDERS", {})
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    cfg = _cfg(tmp_path, mirror)
    f = catalog.get_dataset(dataset_id).files[0]
    assert not is_available(cfg, dataset_id)
    with pytest.raises(DataError) as err:
        fetch(cfg, dataset_id, offline=True)
    msg = str(err.value)
    for part in (
        f.name,
        f.sha256,
        f.url,
        str(Path(cfg["data"]["dir"]) / dataset_id / f.name),
        str(mirror / dataset_id / f.name),
        str(mirror / f.name),
    ):
        assert part in msg


def test_catalog_entries_are_pinned_https_and_named_upstream():
    expect = {
        "mnist": list(mnist.FILE_NAMES),
        "fashion_mnist": list(mnist.FILE_NAMES),
        "cifar10": ["cifar-10-binary.tar.gz"],
        "cifar100": ["cifar-100-binary.tar.gz"],
    }
    for dataset_id, names in expect.items():
        ds = catalog.get_dataset(dataset_id)
        assert [f.name for f in ds.files] == names
        for f in ds.files:
            assert f.url.startswith("https://") and f.url.endswith("/" + f.name)
            assert f.sha256 and len(f.sha256) == 64 and set(f.sha256) <= HEX64
            assert "python" not in f.url  # never the pickled "python version"
    assert catalog.get_dataset("mnist").files[0].url.startswith("https://storage.googleapis.com/cvdf-datasets/")
    assert "zalandoresearch/fashion-mnist" in catalog.get_dataset("fashion_mnist").files[0].url


def test_catalog_refuses_unsafe_file_names():
    for bad in ("../x", "/abs/x", "a/../b", "a//b", "a\\b", ""):
        with pytest.raises(RuntimeError, match="relative POSIX path"):
            catalog.RemoteFile(bad, "https://example.org/x", None)
    assert catalog.RemoteFile("train/x.json", "u", None).name == "train/x.json"


# --------------------------------------------------------------------------------------------------------------------
# Fashion-MNIST from the Debian package


def test_fashion_mnist_from_debian_package(tmp_path):
    src = mnist.debian_fashion_mnist_dir()
    if src is None:
        pytest.skip("Debian package dataset-fashion-mnist not installed (apt-get install dataset-fashion-mnist)")
    for name, sha in mnist.DEBIAN_SHA256.items():
        assert sha256_of(src / name) == sha, f"{src / name}: another version of the Debian package"
    data = mnist.load_idx_dir(src)
    assert data["train"].images.shape == (60000, 28, 28) and data["test"].images.shape == (10000, 28, 28)
    assert data["train"].images.dtype == np.uint8 and data["train"].labels.dtype == np.int64
    assert np.bincount(data["train"].labels).tolist() == [6000] * 10
    assert np.bincount(data["test"].labels).tolist() == [1000] * 10
    # restoring the gzip header gives the upstream bytes: the REAL pins verify, no monkeypatching
    mirror = tmp_path / "mirror"
    assert mnist.debian_fashion_mnist_mirror(mirror) == mirror / "fashion_mnist"
    cfg = _cfg(tmp_path, mirror)
    fetch(cfg, "fashion_mnist", offline=True)
    for f, p in zip(catalog.get_dataset("fashion_mnist").files, dataset_files(cfg, "fashion_mnist")):
        assert sha256_of(p) == f.sha256
        assert gzip.decompress(p.read_bytes()) == gzip.decompress((src / f.name).read_bytes())
    np.testing.assert_array_equal(
        mnist.load_fashion_mnist(dataset_files(cfg, "fashion_mnist"))["test"].images, data["test"].images
    )


def test_pointing_the_mirror_straight_at_debian_files_fails_the_checksum(tmp_path):
    """The Debian gz files are re-compressed-header copies: using them unchanged as a mirror must not pass."""
    if mnist.debian_fashion_mnist_dir() is None:
        pytest.skip("Debian package dataset-fashion-mnist not installed")
    with pytest.raises(DataError, match="checksum mismatch"):
        fetch(_cfg(tmp_path, mnist.DEBIAN_DIR), "fashion_mnist", offline=True)


def test_upstream_gzip_header_restoration_on_a_fixture(tmp_path):
    """RFC 1952 by hand: upstream = header with FNAME + mtime; Debian = same deflate stream, no FNAME, other mtime."""
    payload = _idx_bytes(np.arange(10, dtype=np.uint8), mnist.LABELS_MAGIC)
    comp = zlib.compressobj(6, zlib.DEFLATED, -15)
    body = comp.compress(payload) + comp.flush() + struct.pack("<II", zlib.crc32(payload), len(payload))
    upstream = b"\x1f\x8b\x08\x08" + struct.pack("<I", 1504176627) + b"\x00\x03" + b"t10k-labels-idx1-ubyte\x00" + body
    debianised = b"\x1f\x8b\x08\x00" + struct.pack("<I", 1591347949) + b"\x00\x03" + body
    path = tmp_path / mnist.TEST_LABELS
    path.write_bytes(debianised)
    assert gzip.decompress(debianised) == gzip.decompress(upstream) == payload
    assert mnist.upstream_gzip_bytes(path) == upstream
    path.write_bytes(upstream)  # already has a file name: not a Debian-normalised file
    with pytest.raises(DataError, match="Debian-normalised"):
        mnist.upstream_gzip_bytes(path)


# --------------------------------------------------------------------------------------------------------------------
# digits (bundled with scikit-learn)


def test_digits_bundled_dataset(tmp_path):
    ds = catalog.get_dataset("digits")
    assert ds.files == () and "load_digits" in ds.bundled
    cfg = _cfg(tmp_path, None)
    assert is_available(cfg, "digits")
    assert "bundled" in fetch(cfg, "digits", offline=True).read_text()
    assert dataset_files(cfg, "digits") == []
    d = digits.load_digits()
    assert d.images.shape == (1797, 8, 8) and d.images.dtype == np.uint8 and d.images.max() == 16
    assert d.labels.dtype == np.int64 and sorted(set(d.labels.tolist())) == list(range(10))
    from sklearn.datasets import load_digits

    np.testing.assert_array_equal(d.images, load_digits().images)


def test_a_dataset_without_files_must_name_its_bundled_source():
    with pytest.raises(RuntimeError, match="bundled"):
        catalog.register(catalog.Dataset("nothing_here", "t", (), "c"))
    assert "nothing_here" not in catalog.DATASETS


# --------------------------------------------------------------------------------------------------------------------
# no pickle anywhere


PICKLE_FAMILY = {"pickle", "cPickle", "_pickle", "dill", "joblib", "cloudpickle", "shelve"}


@pytest.mark.parametrize("module", [mnist, cifar, digits, leaf])
def test_no_pickle(module):
    tree = ast.parse(Path(module.__file__).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert not {a.name.split(".")[0] for a in node.names} & PICKLE_FAMILY, ast.dump(node)
        elif isinstance(node, ast.ImportFrom):
            assert (node.module or "").split(".")[0] not in PICKLE_FAMILY, ast.dump(node)
        elif isinstance(node, ast.keyword):
            assert node.arg != "allow_pickle", "numpy pickle loading"
        elif isinstance(node, ast.Name):
            assert node.id not in PICKLE_FAMILY
        elif isinstance(node, ast.Attribute):
            assert (
                node.attr not in {"load", "loads"} or not isinstance(node.value, ast.Name) or node.value.id in ("json",)
            ), f"{module.__name__}: {ast.unparse(node)}"
    assert not PICKLE_FAMILY & set(vars(module))


@pytest.mark.skipif(
    mnist.debian_fashion_mnist_dir() is None, reason="Debian package dataset-fashion-mnist not installed"
)
def test_debian_provider_makes_fashion_mnist_available_and_verified(tmp_path):
    cfg = _cfg(tmp_path, None)
    assert is_available(cfg, "fashion_mnist")
    stamp = fetch(cfg, "fashion_mnist", offline=True)
    pins = {f.name: f.sha256 for f in catalog.get_dataset("fashion_mnist").files}
    assert {line.split()[1]: line.split()[0] for line in stamp.read_text().splitlines()} == pins
