"""LEAF sources (fedrepro.data.leaf): FEMNIST and Reddit json shards written here in LEAF's exact schema, the real
105-writer FEMNIST sample from the project's shared data, and the mirror path with subdirectory file names."""

from __future__ import annotations

import dataclasses
import json
import zipfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from catalog_pins import data_cfg as _cfg

from fedrepro.config import REPO_ROOT
from fedrepro.data import catalog, leaf
from fedrepro.data.sources import dataset_files, fetch, is_available, sha256_of, verified_files
from fedrepro.errors import DataError

SHARED = REPO_ROOT.parent / "shared" / "data"
SAMPLE = SHARED / "leaf_femnist_sf005"
DS = "leaf_femnist_sf005"
RNG = np.random.default_rng(7)


# --------------------------------------------------------------------------------------------------------------------
# FEMNIST fixture: what LEAF's data_to_json.py + split_data.py write


def _femnist_user(n: int) -> tuple[list[list[float]], list[int], np.ndarray, np.ndarray]:
    grey = RNG.integers(0, 256, (n, 28, 28))
    grey[:, :3, :] = 255  # white background as in LEAF's FEMNIST
    vec = (grey.reshape(n, -1) / 255).tolist()  # data_to_json.py: arr.flatten() / 255, .tolist()
    y = RNG.integers(0, 62, n).tolist()
    return vec, y, np.asarray(vec, dtype=np.float32), np.asarray(y, dtype=np.int64)


def _write_shard(path: Path, users: dict[str, int], truth: dict) -> None:
    doc = {"users": list(users), "num_samples": list(users.values()), "user_data": {}}
    for u, n in reversed(list(users.items())):  # LEAF's user_data order need not follow 'users'
        x, y, xa, ya = _femnist_user(n)
        doc["user_data"][u] = {"x": x, "y": y}
        truth[u] = (xa, ya)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        json.dump(doc, fh)  # LEAF writes with json.dump defaults


SHARDS = {  # relative name -> users (LEAF's file names; 2 sorts before 10 naturally, not lexically)
    "train/all_data_10_niid_05_keep_0_train_9.json": {"f0100_11": 3, "f0101_12": 2},
    "train/all_data_2_niid_05_keep_0_train_9.json": {"f0200_21": 4},
    "test/all_data_10_niid_05_keep_0_test_9.json": {"f0100_11": 1, "f0101_12": 1},
    "test/all_data_2_niid_05_keep_0_test_9.json": {"f0200_21": 1},
}


def _femnist_fixture(root: Path) -> dict[str, dict]:
    truth = {"train": {}, "test": {}}
    for name, users in SHARDS.items():
        _write_shard(root / name, users, truth[name.split("/")[0]])
    return truth


def _check_split(split: leaf.FederatedSplit, truth: dict, order: list[str]) -> None:
    assert split.users == tuple(order)
    assert split.x.dtype == np.float32 and split.y.dtype == np.int64 and split.client.dtype == np.int64
    assert split.x.shape == (sum(len(truth[u][1]) for u in order), 784)
    for k, u in enumerate(order):
        x, y = split.client_data(u)
        np.testing.assert_array_equal(x, truth[u][0])
        np.testing.assert_array_equal(y, truth[u][1])
        assert split.num_samples[k] == len(truth[u][1])


def test_femnist_fixture_parsed_back_exactly(tmp_path):
    truth = _femnist_fixture(tmp_path)
    data = leaf.load_femnist_dir(tmp_path)
    order = ["f0200_21", "f0100_11", "f0101_12"]  # shard 2 first, then shard 10, users in 'users' order
    _check_split(data["train"], truth["train"], order)
    _check_split(data["test"], truth["test"], order)
    assert 0.0 <= data["train"].x.min() and data["train"].x.max() <= 1.0
    # float32 of k/255 exactly as numpy would compute from the json doubles; x*255 recovers the grey levels
    assert np.array_equal(np.round(data["train"].x * 255), np.round(data["train"].x.astype(np.float64) * 255))


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda d: d.pop("num_samples"), "missing key"),
        (lambda d: d["num_samples"].__setitem__(0, 99), "num_samples says 99"),
        (lambda d: d["user_data"]["f0200_21"]["x"][0].pop(), "image 0 has 783 values, expected 784"),
        (lambda d: d["user_data"]["f0200_21"]["y"].__setitem__(0, 62), "labels outside 0..61"),
        (lambda d: d["user_data"]["f0200_21"]["x"][1].__setitem__(0, 1.5), r"outside \[0, 1\]"),
        (lambda d: d["user_data"].pop("f0200_21"), "no user_data"),
        (lambda d: d["user_data"]["f0200_21"]["y"].pop(), "4 x but 3 y"),
        (lambda d: d["user_data"]["f0200_21"]["y"].__setitem__(1, 3.5), "not all integers"),
        (lambda d: d["user_data"]["f0200_21"]["x"][1].__setitem__(5, None), "not finite"),
    ],
)
def test_femnist_schema_errors_name_the_file(tmp_path, mutate, match):
    _femnist_fixture(tmp_path)
    path = tmp_path / "train/all_data_2_niid_05_keep_0_train_9.json"
    doc = json.loads(path.read_text())
    mutate(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(DataError, match=match) as err:
        leaf.load_femnist_dir(tmp_path)
    assert str(path) in str(err.value)


def test_femnist_writer_in_two_shards_of_a_split_is_an_error(tmp_path):
    truth: dict = {}
    _write_shard(tmp_path / "train/all_data_0.json", {"w1": 2}, truth)
    _write_shard(tmp_path / "train/all_data_1.json", {"w1": 1}, truth)
    with pytest.raises(DataError, match="writer 'w1' also appears"):
        leaf.load_femnist_split(sorted((tmp_path / "train").glob("*.json")))
    with pytest.raises(DataError, match="'train' or 'test' directory"):
        leaf.load_femnist([tmp_path / "train/all_data_0.json", tmp_path / "x.json"])


def _fixture_entry(monkeypatch, mirror_ds_dir: Path) -> catalog.Dataset:
    """The leaf_femnist_sf005 entry with the fixture's relative names (train/..., test/...) and sha256."""
    ds = catalog.get_dataset(DS)
    url = ds.files[0].url
    files = tuple(catalog.RemoteFile(name, url, sha256_of(mirror_ds_dir / name)) for name in SHARDS)
    entry = dataclasses.replace(ds, files=files)
    monkeypatch.setitem(catalog.DATASETS, DS, entry)
    return entry


@pytest.mark.parametrize("layout", ["per-dataset", "flat"])
def test_femnist_through_mirror_with_subdirectory_names(tmp_path, monkeypatch, layout):
    mirror = tmp_path / "mirror"
    root = mirror / DS if layout == "per-dataset" else mirror  # <mirror>/<id>/<name> or <mirror>/<name>
    truth = _femnist_fixture(root)
    _fixture_entry(monkeypatch, root)
    cfg = _cfg(tmp_path, mirror)
    assert is_available(cfg, DS)
    stamp = fetch(cfg, DS, offline=True)
    assert [ln.split()[1] for ln in stamp.read_text().splitlines()] == list(SHARDS)
    files = dataset_files(cfg, DS)
    assert [p.relative_to(Path(cfg["data"]["dir"]) / DS).as_posix() for p in files] == list(SHARDS)
    assert all(p.is_file() for p in files)
    data = leaf.load_femnist(files)
    _check_split(data["train"], truth["train"], ["f0200_21", "f0100_11", "f0101_12"])


def test_femnist_changed_byte_is_a_checksum_error(tmp_path, monkeypatch):
    mirror = tmp_path / "mirror"
    _femnist_fixture(mirror / DS)
    entry = _fixture_entry(monkeypatch, mirror / DS)
    f = entry.files[1]  # train/all_data_2_...
    path = mirror / DS / f.name
    raw = bytearray(path.read_bytes())
    raw[raw.index(b"[") + 3] ^= 0x01  # one digit of the first list changes
    path.write_bytes(bytes(raw))
    cfg = _cfg(tmp_path, mirror)
    with pytest.raises(DataError, match="checksum mismatch") as err:
        fetch(cfg, DS, offline=True)
    assert f.sha256 in str(err.value) and f.name in str(err.value)
    assert not (Path(cfg["data"]["dir"]) / DS / f.name).exists()


def test_femnist_missing_file_names_file_sha_url_and_paths(tmp_path):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    cfg = _cfg(tmp_path, mirror)
    f = catalog.get_dataset(DS).files[0]
    assert "/" in f.name and not is_available(cfg, DS)
    with pytest.raises(DataError) as err:
        fetch(cfg, DS, offline=True)
    msg = str(err.value)
    for part in (
        f.name,
        f.sha256,
        f.url,
        str(Path(cfg["data"]["dir"]) / DS / f.name),
        str(mirror / DS / f.name),
        str(mirror / f.name),
    ):
        assert part in msg


def test_catalog_leaf_entries():
    sample = catalog.get_dataset(DS)
    assert "SAMPLE" in sample.title and "105" in sample.title
    assert len(sample.files) == 40 and all(f.sha256 and len(f.sha256) == 64 for f in sample.files)
    assert {f.name.split("/")[0] for f in sample.files} == {"train", "test"}
    assert not sample.files[0].url.startswith("https://")  # not downloadable: fetch never tries a URL
    full = catalog.get_dataset("leaf_femnist")
    assert [f.url for f in full.files] == [
        "https://s3.amazonaws.com/nist-srd/SD19/by_class.zip",
        "https://s3.amazonaws.com/nist-srd/SD19/by_write.zip",
    ]
    assert all(f.sha256 is None for f in full.files)
    reddit = catalog.get_dataset("reddit")
    assert [f.name for f in reddit.files] == ["reddit_subsampled.zip"]
    assert "1ISzp69JmaIJqBpQCX-JJ8-kVyUns8M7o" in reddit.files[0].url and reddit.files[0].sha256 is None


# --------------------------------------------------------------------------------------------------------------------
# the real 105-writer sample


@pytest.fixture(scope="module")
def real_sample(tmp_path_factory):
    if not SAMPLE.is_dir():
        pytest.skip(f"shared LEAF FEMNIST sample not present at {SAMPLE}")
    tmp = tmp_path_factory.mktemp("leaf_real")
    cfg = _cfg(tmp, SHARED)  # the shared data dir is a mirror: <mirror>/leaf_femnist_sf005/train/...
    fetch(cfg, DS, offline=True)  # verifies all 40 sha256 of the catalog against the real files
    return leaf.load_femnist(dataset_files(cfg, DS))


def test_catalog_carries_exactly_the_shared_sha256sums():
    if not SAMPLE.is_dir():
        pytest.skip(f"shared LEAF FEMNIST sample not present at {SAMPLE}")
    listed = [tuple(reversed(line.split())) for line in (SAMPLE / "SHA256SUMS").read_text().splitlines() if line]
    assert [(f.name, f.sha256) for f in catalog.get_dataset(DS).files] == listed


def test_real_femnist_sample(real_sample):
    train, test = real_sample["train"], real_sample["test"]
    assert len(train.users) == 105 and len(test.users) == 105 and set(train.users) == set(test.users)
    assert len(train) == 14708 and len(test) == 1685
    assert train.x.shape == (14708, 784) and test.x.shape == (1685, 784)
    assert len(np.unique(train.y)) == 62 and train.y.min() == 0 and train.y.max() == 61
    assert np.unique(np.concatenate([train.y, test.y])).tolist() == list(range(62))
    for s in (train, test):
        assert s.x.dtype == np.float32 and 0.0 <= s.x.min() and s.x.max() <= 1.0
        assert np.all(s.num_samples > 0)
        assert np.allclose(s.x * 255, np.round(s.x * 255), atol=1e-3)  # k/255 grey levels


# --------------------------------------------------------------------------------------------------------------------
# Reddit fixture: what LEAF's data/reddit/source/preprocess.py writes (create_seqs, SEQ_LEN = 10)


def _create_seqs(comment: str, meta: dict) -> tuple[list[list[str]], dict]:
    """LEAF's create_seqs for one comment (independent re-implementation: pad with <PAD> to a multiple of 10)."""
    c = ["<BOS>"] + comment.split() + ["<EOS>"]
    t = comment.split() + ["<EOS>", "<PAD>"]
    counts = [1.0] * len(c)

    def pad(seq, fill):
        return seq + [fill] * (-len(seq) % 10)

    c, t, counts = pad(c, "<PAD>"), pad(t, "<PAD>"), pad(counts, 0.0)
    cut = lambda s: [s[i : i + 10] for i in range(0, len(s), 10)]  # noqa: E731
    return cut(c), dict(meta, target_tokens=cut(t), count_tokens=cut(counts))


REDDIT_USERS = {
    "1": [
        ("i like this game a lot", "gaming", 1512086400, 3),
        ("<url> is where the patch notes are , read them before you post again please", "gaming", 1512090000, 1),
        ("ok", "AskReddit", 1512100000, -2),
    ],
    "2": [("what a time to be alive", "AskReddit", 1512200000, 12)],
}


def _reddit_zip(path: Path, members=None) -> dict:
    truth = {}
    docs = {}
    for split in ("train", "val", "test"):
        doc = {"users": list(REDDIT_USERS), "num_samples": [len(c) + 2 for c in REDDIT_USERS.values()], "user_data": {}}
        for u, comments in REDDIT_USERS.items():
            xs, ys = zip(
                *(
                    _create_seqs(text, {"subreddit": sub, "created_utc": t, "score": sc})
                    for text, sub, t, sc in comments
                )
            )
            doc["user_data"][u] = {"x": list(xs), "y": list(ys)}
            truth[(split, u)] = (list(xs), list(ys))
        docs[f"new_small_data/{split}_data.json"] = json.dumps(doc)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, text in docs.items():
            if members is None or name in members:
                zf.writestr(name, text)
    return truth


def test_reddit_fixture_parsed_back_exactly(tmp_path):
    truth = _reddit_zip(tmp_path / "reddit_subsampled.zip")
    data = leaf.load_reddit(tmp_path / "reddit_subsampled.zip")
    assert set(data) == {"train", "val", "test"}
    for split, s in data.items():
        assert s.users == ("1", "2")
        assert s.num_samples == {"1": 5, "2": 3}  # LEAF's total-count quirk: kept, not checked against len(x)
        for u in s.users:
            xs, ys = truth[(split, u)]
            user = s.data[u]
            assert user.num_comments == len(xs)
            assert user.inputs.tolist() == [seq for c in xs for seq in c]
            assert user.targets.tolist() == [seq for y in ys for seq in y["target_tokens"]]
            assert user.mask.dtype == np.float32 and user.mask.tolist() == [m for y in ys for m in y["count_tokens"]]
            assert user.comment.tolist() == [i for i, c in enumerate(xs) for _ in c]
            assert [m["subreddit"] for m in user.meta] == [c[1] for c in REDDIT_USERS[u]]
            assert all(set(m) == {"subreddit", "created_utc", "score"} for m in user.meta)
    u1 = data["train"].data["1"]
    assert u1.inputs.shape == (4, 10)  # comment 2: 15 tokens + <BOS> + <EOS> = 17 -> two sequences
    assert u1.inputs[0, 0] == "<BOS>" and u1.targets[0, 0] == "i" and u1.mask[0].sum() == 8.0


def test_reddit_errors(tmp_path):
    path = tmp_path / "reddit_subsampled.zip"
    _reddit_zip(path, members={"new_small_data/train_data.json", "new_small_data/test_data.json"})
    with pytest.raises(DataError, match="new_small_data/val_data.json' is missing"):
        leaf.load_reddit(path)
    path.write_text("<!DOCTYPE html><html>Google Drive can't scan this file for viruses</html>")
    with pytest.raises(DataError, match="not a zip archive"):
        leaf.load_reddit(path)
    bad = tmp_path / "train_data.json"
    doc = {
        "users": ["1"],
        "num_samples": [1],
        "user_data": {"1": {"x": [[["a"] * 9]], "y": [{"target_tokens": [["a"] * 9], "count_tokens": [[1.0] * 9]}]}},
    }
    bad.write_text(json.dumps(doc))
    with pytest.raises(DataError, match="10-token sequences") as err:
        leaf.read_reddit_json(bad)
    assert str(bad) in str(err.value) and "user '1' comment 0" in str(err.value)


def test_reddit_through_the_mirror(tmp_path, monkeypatch):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    truth = _reddit_zip(mirror / "reddit_subsampled.zip")
    cfg = _cfg(tmp_path, mirror)
    fetch(cfg, "reddit", offline=True)  # unpinned: verified by its content check, the sha256 recorded
    [v] = verified_files(cfg, "reddit")
    assert (v.sha256, v.pinned) == (sha256_of(mirror / "reddit_subsampled.zip"), False)
    (tmp_path / "data" / "reddit" / "reddit_subsampled.zip").unlink()
    (tmp_path / "data" / "reddit" / ".verified.json").unlink()
    good = (mirror / "reddit_subsampled.zip").read_bytes()
    (mirror / "reddit_subsampled.zip").write_text("<!DOCTYPE html><html>Google Drive can't scan this file</html>")
    with pytest.raises(DataError, match="content check failed: the mirror file .* not a zip archive"):
        fetch(cfg, "reddit", offline=True)
    (mirror / "reddit_subsampled.zip").write_bytes(good)
    ds = catalog.get_dataset("reddit")
    monkeypatch.setitem(
        catalog.DATASETS,
        "reddit",
        dataclasses.replace(
            ds, files=(dataclasses.replace(ds.files[0], sha256=sha256_of(mirror / "reddit_subsampled.zip")),)
        ),
    )
    fetch(cfg, "reddit", offline=True)
    data = leaf.load_reddit(dataset_files(cfg, "reddit")[0])
    assert data["test"].data["2"].inputs.tolist() == truth[("test", "2")][0][0]


# --------------------------------------------------------------------------------------------------------------------
# per-user token histograms (histograms paper, Sec. 4) from the Reddit fixture


def test_reddit_token_histograms_counts_split_and_vocab(tmp_path):
    from fedrepro.papers.histograms.reddit import token_histograms, user_tokens

    _reddit_zip(tmp_path / "r.zip")
    splits = leaf.load_reddit(tmp_path / "r.zip")
    toks = user_tokens(splits)
    words1 = " ".join(c[0] for c in REDDIT_USERS["1"]).split()
    assert toks["1"] == words1 * 3  # pooled over train, val, test; markers dropped
    counts = Counter(t for u in toks for t in toks[u])
    expected_vocab = tuple(sorted(counts, key=lambda t: (-counts[t], t))[:12])
    kw = dict(vocab_size=12, train_tokens=10, test_tokens=15, val_users=1, val_tokens=3, seed=1)
    h = token_histograms(splits, **kw)
    assert h.vocab == expected_vocab and h.vocab[:3] == ("a", ",", "<url>")
    assert h.users == ("1",)  # user 1: 30 in-vocabulary tokens; user 2: 9 < 25
    assert h.train.shape == (1, 12) and h.train.sum() == 10 and h.test.sum() == 15
    assert h.val_index.tolist() == [0] and h.val.sum() == 3
    total = np.array([toks["1"].count(t) for t in h.vocab])
    assert np.all(h.train + h.test + h.val <= total)  # disjoint slices of one permutation
    again = token_histograms(splits, **kw)
    assert np.array_equal(again.train, h.train) and np.array_equal(again.test, h.test)
    other = token_histograms(splits, **dict(kw, seed=2))
    assert not np.array_equal(other.train, h.train)  # the split is random (seeded)


def test_reddit_token_histograms_errors(tmp_path):
    from fedrepro.papers.histograms.reddit import token_histograms

    _reddit_zip(tmp_path / "r.zip")
    splits = leaf.load_reddit(tmp_path / "r.zip")
    with pytest.raises(DataError, match="vocabulary of 1000"):
        token_histograms(splits)
    with pytest.raises(DataError, match="no user has 1000 in-vocabulary tokens"):
        token_histograms(splits, vocab_size=5, train_tokens=500, test_tokens=500)


# --------------------------------------------------------------------------------------------------------------------
# content checks of the NIST SD19 archives (small synthetic archives in the upstream layout)


def _nist_zip(path: Path, top: str, names: list[str]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for n in names:
            zf.writestr(f"{top}/{n}", b"\x89PNG" if n.endswith(".png") else b"")
    return path


def test_nist_checks_ask_for_the_layout_and_counts(tmp_path, monkeypatch):
    monkeypatch.setattr(leaf, "NIST_MIN_IMAGES", 62)
    monkeypatch.setattr(leaf, "NIST_MIN_WRITERS", 2)
    classes = sorted(leaf.NIST_CLASSES)
    assert len(classes) == 62 and {"30", "39", "41", "5a", "61", "7a"} <= set(classes)
    by_class = [f"{c}/hsf_0/hsf_0_00000.png" for c in classes] + [f"{c}/train_{c}/x.png" for c in classes]
    leaf.check_nist_by_class(_nist_zip(tmp_path / "by_class.zip", "by_class", by_class + ["4a/hsf_0.mit"]))
    with pytest.raises(DataError, match="no hsf_\\* PNG images for class\\(es\\) 7a"):
        leaf.check_nist_by_class(_nist_zip(tmp_path / "c2.zip", "by_class", by_class[:61]))
    with pytest.raises(DataError, match="'by_class/zz/"):
        leaf.check_nist_by_class(_nist_zip(tmp_path / "c3.zip", "by_class", by_class + ["zz/hsf_0/a.png"]))
    monkeypatch.setattr(leaf, "NIST_MIN_IMAGES", 10**6)
    with pytest.raises(DataError, match="62 PNG images, SD19 has 814,255"):
        leaf.check_nist_by_class(tmp_path / "by_class.zip")
    monkeypatch.setattr(leaf, "NIST_MIN_IMAGES", 62)
    by_write = [f"hsf_{i % 3}/f{i:04d}_14/d{i:04d}_14/d{i:04d}_14_{k:05d}.png" for i in range(2) for k in range(31)]
    leaf.check_nist_by_write(_nist_zip(tmp_path / "by_write.zip", "by_write", by_write))
    with pytest.raises(DataError, match="1 writers' forms"):
        leaf.check_nist_by_write(_nist_zip(tmp_path / "w2.zip", "by_write", [n for n in by_write if "f0001" not in n]))
    with pytest.raises(DataError, match="not under by_write/hsf_"):
        leaf.check_nist_by_write(_nist_zip(tmp_path / "w3.zip", "by_class", by_write))


def test_zip_names_reads_the_central_directory_alone(tmp_path):
    from fedrepro.data.archive import zip_names

    path = _nist_zip(tmp_path / "a.zip", "top", [f"d/{i}.png" for i in range(300)] + ["ü.txt"])
    with zipfile.ZipFile(path) as zf:
        assert list(zip_names(path)) == zf.namelist()
    raw = path.read_bytes()
    (tmp_path / "cut.zip").write_bytes(raw[: len(raw) - 30])
    with pytest.raises(DataError, match="not a complete zip archive"):
        list(zip_names(tmp_path / "cut.zip"))
    (tmp_path / "page.zip").write_text("<!DOCTYPE html><html>login</html>")
    with pytest.raises(DataError, match="not a complete zip archive"):
        list(zip_names(tmp_path / "page.zip"))
