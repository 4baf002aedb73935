"""The networked DAG rehearsed offline (issue 29 item 2): per networked dataset, small synthetic files in the source's
exact upstream layout are served by a local HTTP server on 127.0.0.1 (every file answers 503 once, so the retry path
runs too), verified under test-only pins (FEDREPRO_TEST_PINS, ``"synthetic": true``), and `snakemake` at quick scale
with ``data.mirror`` = that server and ``data.online: true`` carries one experiment from fetch to its rows in the
report. The synthetic files live only in this test's temp dir; every run records the test pins it used."""

import csv
import gzip
import json
import lzma
import os
import shutil
import struct
import subprocess
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tff_fixtures
from archives import tar_gz
from fault_server import FaultServer
from nist_fixtures import make_nist_zips
from sliced_workflow import SNAKEMAKE, slice_paper, snakemake_args

from fedrepro.config import REPO_ROOT
from fedrepro.data import cifar, leaf
from fedrepro.data import tff_emnist as em
from fedrepro.data import tff_stackoverflow as so
from fedrepro.data.catalog import TEST_PINS_ENV, get_dataset
from fedrepro.data.stamps import sha256_of

ROOT = REPO_ROOT
FIXTURES = Path(__file__).parents[1] / "fixtures"
pytestmark = [pytest.mark.rehearsal, pytest.mark.slow]  # out of the default run (addopts); CI runs -m rehearsal


def rehearse(
    tmp: Path,
    paper: str,
    exps: list[str],
    files: dict[str, dict[str, Callable[[Path], None]]],
    shorten: dict[str, dict] | None = None,
    extra_methods: dict[str, str] | None = None,
) -> dict:
    """Serve ``files`` ({dataset: {file name: writer(path)}}) over HTTP as <mirror>/<dataset>/<name>, pin them
    test-only, run snakemake (quick scale, online) for the report of ``paper`` sliced to ``exps`` (``shorten``: quick
    params replaced in the sliced copy, see _slice_paper; ``extra_methods``: config extra_methods, whose tables must
    then hold the method's row with numbers); return {target id: report row} of the experiments' registered rows."""
    served = tmp / "served"
    pins = {}
    for ds, writers in files.items():
        names = {f.name for f in get_dataset(ds).files}
        assert set(writers) == names, f"{ds}: the catalog's files are {sorted(names)}"
        for name, write in writers.items():
            p = served / ds / name
            p.parent.mkdir(parents=True, exist_ok=True)
            write(p)
            pins.setdefault(ds, {})[name] = sha256_of(p)
    pins_file = tmp / "test-pins.json"
    pins_file.write_text(json.dumps({"synthetic": True, "datasets": pins}))
    paper_cfg, registry, ids = slice_paper(tmp, paper, exps, shorten=shorten)
    assert ids, f"no registry rows for {exps}"
    server = FaultServer(served, default=["503"])  # each file: one 503 (Retry-After: 0), then the file
    try:
        settings = {
            "seeds": {"quick": [0], "paper": [0]},
            "data": {"dir": f"{tmp}/data", "mirror": server.url, "online": True},
        } | ({"extra_methods": extra_methods} if extra_methods else {})
        args = snakemake_args(tmp, {paper: (paper_cfg, registry)}, **settings)
        report = tmp / "results" / "report" / "replication.csv"
        start = time.monotonic()
        r = subprocess.run(
            [SNAKEMAKE, "--cores", "2", "--nolock", *args, "--", str(report)],
            cwd=ROOT, capture_output=True, text=True, env={**os.environ, TEST_PINS_ENV: str(pins_file)},
            timeout=900,
        )  # fmt: skip
        print(f"rehearsal {paper}.{','.join(exps)}: snakemake {time.monotonic() - start:.0f} s")
        assert r.returncode == 0, (r.stdout + r.stderr)[-5000:]
    finally:
        server.close()
    fetched = {path for method, path, _ in server.log if method == "GET"}
    want = {f"/{ds}/{name}" for ds, writers in files.items() for name in writers}
    assert want <= fetched, f"not fetched from the server: {sorted(want - fetched)}"
    assert sum(1 for m, p, _ in server.log if p in want) >= 2 * len(want)  # the 503, then the retry
    assert "TEST PINS in use: synthetic data, never a result" in r.stderr
    for metrics in (tmp / "results" / paper).rglob("metrics.json"):
        assert json.loads(metrics.read_text())["inputs"]["test_pins"] == str(pins_file)
    with open(report, newline="") as fh:
        rows = {row["id"]: row for row in csv.DictReader(fh) if row.get("paper", paper) == paper}
    missing = [i for i in ids if i not in rows]
    assert not missing, f"registered rows not in the report: {missing}"
    not_run = {i: rows[i] for i in ids if "not run" in json.dumps(rows[i])}
    assert not not_run, f"rows not run: {not_run}"
    # built from synthetic data, so never judged: every row is invalid, saying why
    judged = {
        i: rows[i]["status"] for i in ids if rows[i]["status"] != "invalid" or "synthetic" not in rows[i]["reason"]
    }
    assert not judged, f"rows judged on synthetic data: {judged}"
    for name in extra_methods or {}:
        tables = sorted((tmp / "results" / "extra" / name / paper).glob("*/quick/table.md"))
        assert [t.parts[-3] for t in tables] == exps, f"extra tables of {name}: {tables}"
        for t in tables:
            row = next(line for line in t.read_text().splitlines() if line.startswith(f"| {name} |"))
            assert "yours: not in the paper" in row and "(n=1)" in row and "failed" not in row, row
        assert f"**{paper}." in (tmp / "results" / "report" / "replication.md").read_text()
    return {i: rows[i] for i in ids}


def _copy(src: Path) -> Callable[[Path], None]:
    return lambda p: shutil.copyfile(src, p)


def test_rehearsal_election_returns_adaped_political(tmp_path):
    rows = rehearse(
        tmp_path,
        "adaped",
        ["political"],
        {"election_county_returns": {"countypres_2000-2020.csv": _copy(FIXTURES / "countypres_2000-2020_sample.csv")}},
    )
    assert "S4.pol" in rows, rows
    print(rows["S4.pol"])


def _tar_gz(members: dict[str, bytes]) -> Callable[[Path], None]:
    return lambda path: tar_gz(path, members)


SYNTHETIC_README = b"<html>synthetic fedrepro test data, not the dataset</html>\n"


def cifar10_archive(per_batch: int) -> Callable[[Path], None]:
    """cifar-10-binary.tar.gz in CIFAR's layout (records <label><1024 R><1024 G><1024 B>), random images, each
    batch cycling through the 10 labels."""
    rng = np.random.default_rng(10)
    members = {}
    for name in (*cifar.CIFAR10_TRAIN, cifar.CIFAR10_TEST):
        images = rng.integers(0, 256, (per_batch, 3, 32, 32), dtype=np.uint8)
        members[name] = b"".join(bytes([i % 10]) + img.tobytes() for i, img in enumerate(images))
    members[cifar.CIFAR10_META] = ("\n".join(f"synthetic_{i}" for i in range(10)) + "\n\n").encode()
    members[f"{cifar.CIFAR10_DIR}/readme.html"] = SYNTHETIC_README
    return _tar_gz(members)


def cifar100_archive(n_train: int, n_test: int) -> Callable[[Path], None]:
    """cifar-100-binary.tar.gz in CIFAR's layout (records <coarse><fine><3072 pixels>), random images, coarse labels
    cycling through the 20 superclasses, each fine label one of its superclass's."""
    rng = np.random.default_rng(100)
    members = {}
    for name, n in ((cifar.CIFAR100_TRAIN, n_train), (cifar.CIFAR100_TEST, n_test)):
        images = rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8)
        members[name] = b"".join(
            bytes([i % 20, (i % 20) * 5 + i // 20 % 5]) + img.tobytes() for i, img in enumerate(images)
        )
    members[cifar.CIFAR100_COARSE_NAMES] = "".join(f"synthetic_super_{i}\n" for i in range(20)).encode()
    members[cifar.CIFAR100_FINE_NAMES] = "".join(f"synthetic_{i}\n" for i in range(100)).encode()
    return _tar_gz(members)


def emnist_sqlite(n_writers: int, n_train: int, n_test: int) -> Callable[[Path], None]:
    """emnist_all.sqlite.lzma as TFF ships it (tf.train.Example rows per client and split), synthetic writers."""

    def write(path: Path) -> None:
        clients = {f"f{i:04d}_00": (n_train, n_test) for i in range(n_writers)}
        arrays = {True: tff_fixtures._emnist_arrays(0, 10, clients), False: tff_fixtures._emnist_arrays(1, 62, clients)}
        db = tff_fixtures.write_tff_sqlite(path.parent / em.SQLITE_FILE, tff_fixtures.emnist_sqlite_rows(arrays))
        path.write_bytes(lzma.compress(db.read_bytes(), format=lzma.FORMAT_XZ))
        db.unlink()

    return write


def test_rehearsal_tff_emnist_fedhdp_fmnist(tmp_path):
    # 1,400 writers: its clients per round (q = 0.03) must exceed 40 for the clipped count's noise (0.05 per client)
    # to leave z_eff = 4 a positive update noise (a few writers give "needs z_count > z_eff / 2")
    rehearse(tmp_path, "fedhdp", ["fmnist"], {em.SQLITE_ID: {em.SQLITE_ARCHIVE: emnist_sqlite(1400, 2, 1)}})


def test_rehearsal_cifar10_adaped_table1(tmp_path):
    rehearse(tmp_path, "adaped", ["table1_cifar10"], {"cifar10": {cifar.CIFAR10_ARCHIVE: cifar10_archive(200)}})


def so_files(n_users: int, n_words: int, n_tags: int) -> dict[str, dict[str, Callable[[Path], None]]]:
    """Stack Overflow as TFF ships it: stackoverflow.sqlite.lzma (tf.train.Example rows per client and split) and
    the word/tag count archives; synthetic words ``synthetic_w<i>`` and tags ``synthetic_t<i>``."""
    rng = np.random.default_rng(7)
    words = [f"synthetic_w{i}" for i in range(n_words)]
    tags = [f"synthetic_t{i}" for i in range(n_tags)]

    def doc(day: int) -> tuple:
        toks = " ".join(rng.choice(words, 6))
        tg = "|".join(sorted(set(rng.choice(tags, 2))))
        return (toks, "synthetic", tg, "question", f"2010-01-{day % 28 + 1:02d}00:00:00 UTC", 1)

    clients = [f"{i:08d}" for i in range(n_users)]
    data = {
        "train": {c: [doc(i) for i in range(10)] for c in clients},  # a user with < m = 10 is never sampled
        "held_out": {clients[0]: [doc(0)]},
        "test": {c: [doc(i) for i in range(2)] for c in clients},
    }
    rows = {
        so.SQL_SPLIT[split]: {
            c: [{k: (v if k == "score" else v.encode()) for k, v in zip(tff_fixtures.COLS, r)} for r in docs]
            for c, docs in cl.items()
        }
        for split, cl in data.items()
    }

    def sqlite(path: Path) -> None:
        db = tff_fixtures.write_tff_sqlite(path.parent / so.SQLITE_FILE, rows)
        path.write_bytes(lzma.compress(db.read_bytes(), format=lzma.FORMAT_ALONE))
        db.unlink()

    word_count = "".join(f"{w} {n_words - i}\n" for i, w in enumerate(words)).encode()
    tag_count = json.dumps({t: n_tags - i for i, t in enumerate(tags)}).encode()
    return {
        so.SQLITE_ID: {so.SQLITE_ARCHIVE: sqlite},
        so.COUNTS_ID: {
            so.WORD_COUNT_ARCHIVE: lambda p: tff_fixtures.tar_bz2(p, {so.WORD_COUNT_FILE: word_count}),
            so.TAG_COUNT_ARCHIVE: lambda p: tff_fixtures.tar_bz2(p, {so.TAG_COUNT_FILE: tag_count}),
        },
    }


def mnist_files(n_train: int, n_test: int) -> dict[str, Callable[[Path], None]]:
    """MNIST's four IDX files (gzip), labels cycling through the digits, random strokes on a black background."""
    rng = np.random.default_rng(3)

    def images(n: int) -> bytes:
        pix = np.zeros((n, 28, 28), dtype=np.uint8)
        pix[:, 8:20, 10:18] = rng.integers(0, 256, (n, 12, 8), dtype=np.uint8)
        return struct.pack(">IIII", 0x803, n, 28, 28) + pix.tobytes()

    def labels(n: int) -> bytes:
        return struct.pack(">II", 0x801, n) + (np.arange(n) % 10).astype(np.uint8).tobytes()

    def gz(make: Callable[[int], bytes], n: int) -> Callable[[Path], None]:
        return lambda p: p.write_bytes(gzip.compress(make(n), mtime=0))

    return {
        "train-images-idx3-ubyte.gz": gz(images, n_train),
        "train-labels-idx1-ubyte.gz": gz(labels, n_train),
        "t10k-images-idx3-ubyte.gz": gz(images, n_test),
        "t10k-labels-idx1-ubyte.gz": gz(labels, n_test),
    }


def test_rehearsal_cifar100_adaped_table1(tmp_path):
    # Table 1's CIFAR-100 column trains its CNN at batch 25 for 4 epochs of 40 iterations even at quick scale
    # (a run stopped at 10 min on 2 cores, unfinished), so this rehearsal shortens the schedule in its copy of
    # config/adaped.yaml to one round of 2 local epochs of 2 iterations. Fetch, archive checks, the superclass
    # partition, all seven methods, the table and the report rows run as registered; only the number of steps differs.
    rows = rehearse(
        tmp_path,
        "adaped",
        ["table1_cifar100"],
        {"cifar100": {cifar.CIFAR100_ARCHIVE: cifar100_archive(1000, 200)}},
        shorten={"table1_cifar100": {"epochs": 2, "iters_per_epoch": 2, "tau": 4}},
    )
    assert rows


def test_rehearsal_stackoverflow_ppsgd_fig1b(tmp_path):
    # Fig. 1b's sizes are fixed in its params: the first 500 test-split users, 5,000 words, 80 tags
    # with a method from outside (config extra_methods): its row on the multi-label tags, beside PPSGD's rows
    extra = {"fedprox": "examples/fedprox.py:FedProx"}
    rehearse(tmp_path, "ppsgd", ["fig1b_stackoverflow"], so_files(500, 5000, 80), extra_methods=extra)


def test_rehearsal_mnist_fedhdp_noniid(tmp_path):
    # 2,000 single-digit clients (200 per digit): 3 train and 1 test images each
    rehearse(tmp_path, "fedhdp", ["noniid_mnist"], {"mnist": mnist_files(6000, 2000)})


def nist_zips(tmp: Path) -> dict[str, Callable[[Path], None]]:
    """NIST SD19's by_class.zip and by_write.zip (tests/helpers/nist_fixtures.py): 240 synthetic writers, mostly
    digits, so that >= 90 keep a digit in both their LEAF train and test split (as the partition end-to-end test)."""
    fx = make_nist_zips(tmp / "nist", n_writers=240, digits=12, upper=1, lower=1, const=0, shuffle=False)
    return {"by_class.zip": _copy(fx.by_class), "by_write.zip": _copy(fx.by_write)}


def test_rehearsal_full_femnist_adaped_table4(tmp_path):
    # LEAF's pipeline on the NIST-layout zips -> femnist_digits_m30 (90 writers in 30 clients of 3) -> Table 4
    rehearse(tmp_path, "adaped", ["table4_femnist"], {"leaf_femnist": nist_zips(tmp_path)})


def _leaf_reddit_comment(words: list[str], meta: dict) -> tuple[list[list[str]], dict]:
    """One comment as LEAF's data/reddit/source/preprocess.py (create_seqs, SEQ_LEN = 10) writes it: <BOS> tokens
    <EOS> cut into 10-token sequences padded with <PAD>, target_tokens shifted by one, count_tokens 1 for real."""
    c = ["<BOS>", *words, "<EOS>"]
    t = [*words, "<EOS>", "<PAD>"]
    counts = [1.0] * len(c)

    def cut(seq: list, fill) -> list[list]:
        seq = seq + [fill] * (-len(seq) % leaf.REDDIT_SEQ_LEN)
        return [seq[i : i + leaf.REDDIT_SEQ_LEN] for i in range(0, len(seq), leaf.REDDIT_SEQ_LEN)]

    return cut(c, "<PAD>"), dict(meta, target_tokens=cut(t, "<PAD>"), count_tokens=cut(counts, 0.0))


def reddit_zip(n_users: int, n_words: int, tokens: int) -> Callable[[Path], None]:
    """reddit_subsampled.zip in LEAF's layout (new_small_data/{train,val,test}_data.json): ``n_users`` synthetic
    users (``synthetic_u<i>``) drawn from 10 clusters of word frequencies over ``synthetic_w<i>`` words, each with
    ``tokens`` train tokens in 50-word comments (Table 1 keeps users with >= 500 + 2,000 in-vocabulary tokens and
    gives validation tokens to those with 1,000 more) and a short comment in val and test."""
    rng = np.random.default_rng(11)
    words = np.array([f"synthetic_w{i}" for i in range(n_words)])
    clusters = rng.dirichlet(np.full(n_words, 0.3), 10)
    users = [f"synthetic_u{i}" for i in range(n_users)]

    def comments(u: int, n: int, length: int) -> tuple[list, list]:
        drawn = rng.choice(words, (n, length), p=clusters[u % 10]).tolist()
        meta = {"subreddit": "synthetic", "created_utc": 1512086400 + u, "score": 1}
        return tuple(zip(*(_leaf_reddit_comment(w, meta) for w in drawn)))

    def write(path: Path) -> None:
        per = {"train": (tokens // 50, 50), "val": (1, 20), "test": (1, 20)}
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
            for split, member in leaf.REDDIT_MEMBERS.items():
                doc = {"users": users, "num_samples": [tokens // 50 + 2] * n_users, "user_data": {}}
                for i, u in enumerate(users):
                    xs, ys = comments(i, *per[split])
                    doc["user_data"][u] = {"x": list(xs), "y": list(ys)}
                zf.writestr(member, json.dumps(doc))

    return write


def test_rehearsal_leaf_reddit_histograms_table1(tmp_path):
    # Table 1's quick scale keeps its paper sizes but for 2 runs and max_users: 1,000-token vocabulary (1,100 words
    # drawn here), users with >= 3,500 tokens; 300 users suffice for every row, private ones included
    rows = rehearse(tmp_path, "histograms", ["table1"], {"reddit": {leaf.REDDIT_ARCHIVE: reddit_zip(300, 1100, 4000)}})
    assert {f"T1.r{i}.c2" for i in range(1, 10)} <= set(rows), sorted(rows)  # the private column
