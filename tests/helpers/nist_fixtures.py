"""Synthetic zips in NIST Special Database 19's layout (``by_class.zip``, ``by_write.zip``), for the FEMNIST tests.

The layout is the one LEAF's ``data/femnist/preprocess/get_file_dirs.py`` walks after unzipping NIST's archives:

* ``by_class/<class>/hsf_<p>/hsf_<p>_<nnnnn>.png``: ``<class>`` the character's ASCII code in lower-case hex
  (30-39, 41-5a, 61-7a); beside each ``hsf_<p>`` directory a ``hsf_<p>.mit`` file, and a ``train_<class>/`` copy of
  the images (both skipped by LEAF);
* ``by_write/hsf_<p>/<writer>/<type><form>/<type><form>_<nnnnn>.png``: ``<writer>`` ``f<form>_<template>``, the
  type ``d`` (digits), ``u`` (upper case), ``l`` (lower case) or ``c`` (the constitution paragraph);

the same PNG bytes under both, which is how LEAF learns an image's class and writer. Zips carry directory entries
as ``zip -r`` writes them. The images are clearly synthetic (random black strokes on white, 128x128 RGB), the writer
ids are ``f9<...>`` forms, and each archive's comment says it is a synthetic test fixture; the files are written into
a test's temporary directory only.
"""

from __future__ import annotations

import io
import random
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image, ImageDraw

COMMENT = b"fedrepro synthetic test fixture in NIST SD19's layout; not NIST data"
DIGITS = [f"{c:x}" for c in range(0x30, 0x3A)]
UPPER = [f"{c:x}" for c in range(0x41, 0x5B)]
LOWER = [f"{c:x}" for c in range(0x61, 0x7B)]


def glyph_png(rng: random.Random) -> bytes:
    """A 128x128 RGB PNG: white, with a few random black strokes (NIST's images are black ink on white)."""
    img = Image.new("RGB", (128, 128), (255, 255, 255))
    draw = ImageDraw.Draw(img)
    for _ in range(rng.randint(2, 5)):
        pts = [(rng.randint(20, 108), rng.randint(20, 108)) for _ in range(rng.randint(2, 4))]
        draw.line(pts, fill=(0, 0, 0), width=rng.randint(4, 9))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


@dataclass
class NistFixture:
    """The two archives and what they hold: per by_write member its writer and class code, and its bytes."""

    by_class: Path
    by_write: Path
    truth: dict[str, tuple[str, str]] = field(default_factory=dict)  # by_write member -> (writer, class hex)
    png: dict[str, bytes] = field(default_factory=dict)  # by_write member -> PNG bytes
    writers: list[str] = field(default_factory=list)  # sorted
    by_class_only: list[str] = field(default_factory=list)  # by_class members with no by_write twin


def _dirs(name: str) -> list[str]:
    parts = name.split("/")[:-1]
    return ["/".join(parts[: i + 1]) + "/" for i in range(len(parts))]


def _write_zip(
    path: Path,
    members: list[tuple[str, bytes]],
    shuffle: random.Random | None,
    extra: tuple[tuple[str, bytes], ...] = (),
) -> None:
    seen: set[str] = set()
    entries: list[tuple[str, bytes | None]] = []
    for name, data in members:
        for d in _dirs(name):
            if d not in seen:
                seen.add(d)
                entries.append((d, None))
        entries.append((name, data))
    entries.extend(extra)  # as given: no directory entries
    if shuffle is not None:
        shuffle.shuffle(entries)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.comment = COMMENT
        for name, data in entries:
            if data is None:
                zf.writestr(zipfile.ZipInfo(name), b"")
            else:
                zf.writestr(name, data)


def make_nist_zips(
    dest: Path,
    n_writers: int = 4,
    digits: int = 4,
    upper: int = 2,
    lower: int = 2,
    const: int = 1,
    seed: int = 0,
    by_class_only: int = 1,
    orphan_write: bool = False,
    extra_members: tuple[tuple[str, bytes], ...] = (),
    shuffle: bool = True,
) -> NistFixture:
    """Write ``dest/by_class.zip`` and ``dest/by_write.zip`` for ``n_writers`` synthetic writers spread over two
    partitions (hsf_0, hsf_1); each writer has ``digits`` digit, ``upper`` upper-case, ``lower`` lower-case and
    ``const`` constitution-box images of random classes. ``by_class_only`` extra by_class images have no by_write
    twin; ``orphan_write`` adds a by_write image with no by_class twin; ``extra_members`` are added to by_write as
    given (e.g. unsafe names). ``shuffle`` writes the members in random order (the reader must not rely on it)."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    fx = NistFixture(dest / "by_class.zip", dest / "by_write.zip")
    class_members: list[tuple[str, bytes]] = []
    write_members: list[tuple[str, bytes]] = []
    counters: dict[tuple[str, int], int] = {}
    seen_png: set[bytes] = set()

    def fresh_png() -> bytes:
        while True:
            data = glyph_png(rng)
            if data not in seen_png:
                seen_png.add(data)
                return data

    def add_class_image(cl: str, p: int, data: bytes) -> str:
        k = counters.get((cl, p), 0)
        counters[cl, p] = k + 1
        name = f"by_class/{cl}/hsf_{p}/hsf_{p}_{k:05d}.png"
        class_members.append((name, data))
        class_members.append((f"by_class/{cl}/train_{cl}/train_{cl}_{p}{k:05d}.png", data))  # skipped by LEAF
        return name

    for wi in range(n_writers):
        p = wi % 2
        form = 9000 + wi
        writer = f"f{form:04d}_{wi % 100:02d}"
        fx.writers.append(writer)
        plan = [("d", DIGITS, digits), ("u", UPPER, upper), ("l", LOWER, lower), ("c", UPPER + LOWER, const)]
        for wtype, pool, n in plan:
            for k in range(n):
                cl = rng.choice(pool)
                data = fresh_png()
                tdir = f"{wtype}{form:04d}_{wi % 100:02d}"
                name = f"by_write/hsf_{p}/{writer}/{tdir}/{tdir}_{k:05d}.png"
                write_members.append((name, data))
                fx.truth[name] = (writer, cl)
                fx.png[name] = data
                add_class_image(cl, p, data)
    for _ in range(by_class_only):
        fx.by_class_only.append(add_class_image(rng.choice(DIGITS), 0, fresh_png()))
    for p in (0, 1):
        for cl in sorted({n.split("/")[1] for n, _ in class_members}):
            class_members.append((f"by_class/{cl}/hsf_{p}.mit", b"synthetic .mit listing\n"))
    if orphan_write:
        name = "by_write/hsf_0/f9999_99/d9999_99/d9999_99_00000.png"
        write_members.append((name, fresh_png()))
    shuffler = random.Random(seed + 1) if shuffle else None
    _write_zip(fx.by_class, class_members, shuffler)
    _write_zip(fx.by_write, write_members, shuffler, extra_members)
    fx.writers.sort()
    return fx
