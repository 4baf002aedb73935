"""LEAF FEMNIST from NIST SD19 (fedrepro.data.nist_sd19), on synthetic zips in NIST's layout (nist_fixtures)."""

import copy
import io
import json
import random
import zipfile

import numpy as np
import pytest
from catalog_pins import pin
from nist_fixtures import make_nist_zips
from PIL import Image

from fedrepro.config import load_global, load_partitions
from fedrepro.data import fedformat
from fedrepro.data import nist_sd19 as ns
from fedrepro.data.leaf import load_femnist, read_femnist_shard, read_leaf_json
from fedrepro.data.prepare import LOADERS, prepare
from fedrepro.data.sources import fetch
from fedrepro.errors import DataError

QUIET = lambda msg: None  # noqa: E731


@pytest.fixture
def fx(tmp_path):
    return make_nist_zips(tmp_path / "leaf_femnist")


def _build(fx, **kw):
    root = fx.by_class.parent
    return ns.build_all_data(fx.by_class, fx.by_write, root / "all_data", log=QUIET, **kw)


def _shard(users, sizes, seed=0):
    rng = np.random.default_rng(seed)
    return ns.Shard(
        list(users),
        [rng.integers(0, 256, (n, 784), dtype=np.uint8) for n in sizes],
        [rng.integers(0, 62, n).astype(np.int64) for n in sizes],
    )


# ---------------------------------------------------------------------------------------------------------------
# get_file_dirs.py, get_hashes.py, match_hashes.py


def test_file_dirs_take_leaf_layout(fx):
    with zipfile.ZipFile(fx.by_class) as zc, zipfile.ZipFile(fx.by_write) as zw:
        cls = ns.class_file_dirs(zc.infolist())
        wr = ns.write_file_dirs(zw.infolist())
    names = [i.filename for _, i in cls]
    assert names == sorted(names) and all("/hsf_" in n and "/train_" not in n and n.endswith(".png") for n in names)
    assert len(names) == len(fx.truth) + len(fx.by_class_only)  # no train_<class> copy, no .mit file
    assert {i.filename: w for w, i in wr} == {m: w for m, (w, _) in fx.truth.items()}
    assert [i.filename for _, i in wr] == sorted(fx.truth)


def test_hash_matching_gives_every_by_write_image_its_writer_and_class(fx):
    table = ns.class_file_hashes(fx.by_class, log=QUIET)
    assert table.n_images == len(fx.truth) + len(fx.by_class_only)
    stats = ns.MatchStats()
    with zipfile.ZipFile(fx.by_write) as zw:
        members = ns.write_file_dirs(zw.infolist())
        got = {f[0]: (w, c) for w, f, c in ns.write_with_class(zw, fx.by_write, members, table, stats, QUIET)}
    assert got == {m: (w, ns.relabel_class(cl)) for m, (w, cl) in fx.truth.items()}
    assert stats.writers == len(fx.writers) and stats.write_images == len(fx.truth)
    assert stats.unmatched_class_images() == len(fx.by_class_only)  # unused, as in LEAF: not an error


def test_equal_by_class_images_take_the_class_of_the_first_in_list_order():
    d1, d2 = bytes(range(16)), bytes(range(1, 17))
    table = ns.ClassHashes.from_lists(d1 + d2 + d1, np.array([5, 6, 7]))  # d1 listed first with class 5, then 7
    labels, found = table.lookup([d1, d2, bytes(16)])
    assert found.tolist() == [True, True, False] and labels[:2].tolist() == [5, 6] and table.n_images == 3


def test_class_hashes_are_cached_beside_the_data(fx, tmp_path, monkeypatch):
    cache = tmp_path / "intermediate" / "class_file_hashes.npz"
    a = ns.class_file_hashes(fx.by_class, cache, QUIET)
    monkeypatch.setattr(ns, "read_member", lambda *a: pytest.fail("hashed again"))
    b = ns.class_file_hashes(fx.by_class, cache, QUIET)
    np.testing.assert_array_equal(a.digests, b.digests)
    np.testing.assert_array_equal(a.labels, b.labels)


@pytest.mark.parametrize(
    "code, label", [("30", 0), ("39", 9), ("41", 10), ("5a", 35), ("4A", 19), ("61", 36), ("7a", 61)]
)
def test_relabel_class_as_leaf(code, label):
    assert ns.relabel_class(code) == label


@pytest.mark.parametrize("code", ["2f", "40", "5b", "7b", "zz"])
def test_relabel_class_refuses_codes_that_are_no_character(code):
    with pytest.raises(DataError, match="not the hex ASCII code"):
        ns.relabel_class(code)


# ---------------------------------------------------------------------------------------------------------------
# group_by_writer.py


def test_group_by_writer_repeats_the_first_image_of_every_later_writer_as_leaf_does():
    triples = [("a", "a1", 1), ("a", "a2", 2), ("b", "b1", 3), ("b", "b2", 4), ("c", "c1", 5)]
    assert list(ns.group_by_writer(triples)) == [
        ("a", [("a1", 1), ("a2", 2)]),
        ("b", [("b1", 3), ("b1", 3), ("b2", 4)]),
        ("c", [("c1", 5), ("c1", 5)]),
    ]
    assert list(ns.group_by_writer(triples, duplicate_first=False)) == [
        ("a", [("a1", 1), ("a2", 2)]),
        ("b", [("b1", 3), ("b2", 4)]),
        ("c", [("c1", 5)]),
    ]
    assert list(ns.group_by_writer([])) == []


# ---------------------------------------------------------------------------------------------------------------
# data_to_json.py


def _leaf_recipe(data: bytes, reducing_gap):
    """data_to_json.py's conversion written directly with Pillow: open, convert('L'), thumbnail LANCZOS, / 255."""
    img = Image.open(io.BytesIO(data))
    gray = img.convert("L")
    gray.thumbnail((28, 28), Image.Resampling.LANCZOS, reducing_gap=reducing_gap)
    return (np.asarray(gray).copy().flatten() / 255).tolist()


def test_image_vector_is_leafs_pillow_recipe(fx):
    differs = 0
    for name, data in list(fx.png.items())[:12]:
        for gap in (None, 2.0):
            vec = ns.image_vector(data, name, gap)
            assert vec.dtype == np.uint8 and vec.shape == (784,)
            assert (vec / 255).tolist() == _leaf_recipe(data, gap)
        # gap None = the Pillow LEAF was written for: a direct Lanczos resize of the 128x128 image
        direct = np.asarray(Image.open(io.BytesIO(data)).convert("L").resize((28, 28), Image.Resampling.LANCZOS))
        np.testing.assert_array_equal(ns.image_vector(data, name, None), direct.reshape(-1))
        differs += not np.array_equal(ns.image_vector(data, name, None), ns.image_vector(data, name, 2.0))
    assert differs  # the Pillow version matters: declared as a GAP


def test_image_vector_refuses_a_non_nist_image():
    buf = io.BytesIO()
    Image.new("L", (64, 64), 255).save(buf, format="PNG")
    with pytest.raises(DataError, match="x.png: image is 64x64, NIST SD19 images are 128x128"):
        ns.image_vector(buf.getvalue(), "x.png")
    with pytest.raises(DataError, match="y.png: not a readable PNG image"):
        ns.image_vector(b"not a png", "y.png")


def test_write_shard_is_the_text_of_leafs_json_dump(tmp_path):
    s = _shard(["f0001_01", "w\u00e9", "empty"], [3, 2, 0])
    p = ns.write_shard(tmp_path / "s.json", s)
    doc = {
        "users": s.users,
        "num_samples": s.num_samples,
        "user_data": {u: {"x": (x / 255).tolist(), "y": y.tolist()} for u, x, y in zip(s.users, s.x, s.y)},
    }
    assert p.read_text(encoding="utf-8") == json.dumps(doc)
    back = ns.read_shard(p)
    assert back.users == s.users and all(np.array_equal(a, b) for a, b in zip(back.x, s.x))
    assert all(np.array_equal(a, b) for a, b in zip(back.y, s.y))
    assert ns.PIXEL_TEXT[0] == "0.0" and ns.PIXEL_TEXT[255] == "1.0"


def test_all_data_shards_have_leafs_schema_and_content(fx, monkeypatch):
    monkeypatch.setattr(ns, "MAX_WRITERS", 3)
    shards = _build(fx)
    assert [p.name for p in shards] == ["all_data_0.json", "all_data_1.json"]  # 3 writers, then the rest
    users, first = [], True
    for p in shards:
        doc = read_leaf_json(p)
        assert list(doc) == ["users", "num_samples", "user_data"] and list(doc["user_data"]) == doc["users"]
        us, xs, ys = read_femnist_shard(p)
        for u, x, y in zip(us, xs, ys):
            mine = sorted(m for m, (w, _) in fx.truth.items() if w == u)
            order = ([mine[0]] if not first else []) + mine  # LEAF's group_by_writer repeats later writers' first
            first = False
            np.testing.assert_array_equal(y, [ns.relabel_class(fx.truth[m][1]) for m in order])
            np.testing.assert_array_equal(x, np.array([_leaf_recipe(fx.png[m], None) for m in order], np.float32))
        users += us
    assert users == list(dict.fromkeys(w for _, (w, _) in sorted(fx.truth.items())))  # hsf_0's, then hsf_1's
    marker = json.loads((shards[0].parent / ns.MARKER).read_text())
    assert marker["counts"] == {
        "by_class_images": len(fx.truth) + 1,
        "by_write_images": len(fx.truth),
        "writers": len(fx.writers),
        "by_class_digests_without_by_write_twin": 1,
    }


def test_all_data_without_leafs_duplicate(fx):
    shards = _build(fx, options=ns.BuildOptions(duplicate_first=False))
    assert sum(read_leaf_json(shards[0])["num_samples"]) == len(fx.truth)


def test_leaf_before_2021_left_the_last_partial_shard_out(fx, monkeypatch):
    monkeypatch.setattr(ns, "MAX_WRITERS", 3)
    shards = _build(fx, options=ns.BuildOptions(last_partial_shard=False))
    assert [p.name for p in shards] == ["all_data_0.json"] and len(read_leaf_json(shards[0])["users"]) == 3


def test_a_rerun_reuses_all_data_and_a_changed_input_rebuilds_it(fx, monkeypatch):
    shards = _build(fx)
    text = shards[0].read_text()
    calls = []
    real = ns.class_file_hashes
    monkeypatch.setattr(ns, "class_file_hashes", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert _build(fx) == shards and calls == []
    _build(fx, options=ns.BuildOptions(reducing_gap=2.0))  # other options: rebuilt
    assert calls == [1] and shards[0].read_text() != text
    _build(fx)
    assert calls == [1, 1] and shards[0].read_text() == text
    (shards[0].parent / ns.MARKER).unlink()  # as after a killed build
    _build(fx)
    assert len(calls) == 3


def test_a_killed_build_leaves_no_complete_looking_output(fx, monkeypatch):
    monkeypatch.setattr(ns, "MAX_WRITERS", 1)
    real = ns.write_shard

    def dies_at_the_third(path, shard):
        if path.name == "all_data_2.json":
            raise KeyboardInterrupt
        return real(path, shard)

    monkeypatch.setattr(ns, "write_shard", dies_at_the_third)
    with pytest.raises(KeyboardInterrupt):
        _build(fx)
    out = fx.by_class.parent / "all_data"
    assert not (out / ns.MARKER).exists() and sorted(p.name for p in out.iterdir()) == [
        "all_data_0.json",
        "all_data_1.json",
    ]
    monkeypatch.setattr(ns, "write_shard", real)
    assert len(_build(fx)) == len(fx.writers) and (out / ns.MARKER).is_file()


def test_atomic_shard_write_leaves_no_partial_file(tmp_path, monkeypatch):
    s = _shard(["a", "b"], [2, 2])
    monkeypatch.setattr(ns, "_rows_text", lambda x: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        ns.write_shard(tmp_path / "all_data_0.json", s)
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------------------------
# errors: one DataError line naming the file


def _one_line(exc_info, *names):
    msg = str(exc_info.value)
    assert "\n" not in msg and all(n in msg for n in names), msg


def test_a_by_write_image_without_by_class_twin_is_a_data_error(tmp_path):
    fx = make_nist_zips(tmp_path / "d", orphan_write=True)
    with pytest.raises(DataError, match="has no image with the same bytes in by_class.zip") as e:
        _build(fx)
    _one_line(e, str(fx.by_write), "by_write/hsf_0/f9999_99/d9999_99/d9999_99_00000.png")
    assert not (tmp_path / "d" / "all_data" / ns.MARKER).exists()


@pytest.mark.parametrize("which", ["by_class", "by_write"])
def test_a_cut_short_zip_is_a_data_error(fx, which):
    path = getattr(fx, which)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(DataError, match="not a readable zip archive") as e:
        _build(fx)
    _one_line(e, str(path), "fetch it again")


def test_a_corrupt_member_is_a_data_error_naming_it(fx):
    with zipfile.ZipFile(fx.by_write) as zf:
        info = next(i for i in zf.infolist() if i.filename.endswith(".png"))
        start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    raw = bytearray(fx.by_write.read_bytes())
    for k in range(start, start + min(info.compress_size, 40)):
        raw[k] ^= 0x5A
    fx.by_write.write_bytes(bytes(raw))
    with pytest.raises(DataError, match="corrupt or truncated archive") as e:
        _build(fx)
    _one_line(e, str(fx.by_write), info.filename)


@pytest.mark.parametrize(
    "name, why",
    [
        ("../evil.png", "'..' component"),
        ("/etc/evil.png", "absolute path"),
        ("by_write\\hsf_0\\x.png", "backslash"),
        ("by_write/hsf_0/f1/d1/../../../../x.png", "'..' component"),
    ],
)
def test_unsafe_member_names_refuse_the_archive(tmp_path, name, why):
    fx = make_nist_zips(tmp_path / "d", extra_members=((name, b"x"),))
    with pytest.raises(DataError, match="refusing archive") as e:
        _build(fx)
    _one_line(e, str(fx.by_write), repr(name), why)


def test_a_symlink_member_refuses_the_archive(fx):
    info = zipfile.ZipInfo("by_write/hsf_0/f9000_00/d9000_00/link.png")
    info.external_attr = 0o120777 << 16
    with zipfile.ZipFile(fx.by_write, "a") as zf:
        zf.writestr(info, "/etc/passwd")
    with pytest.raises(DataError, match="is a symlink") as e:
        _build(fx)
    _one_line(e, str(fx.by_write))


def test_a_zip_without_nist_layout_is_a_data_error(tmp_path):
    fx = make_nist_zips(tmp_path / "d")
    with zipfile.ZipFile(fx.by_class, "w") as zf:
        zf.writestr("readme.txt", "no images")
    with pytest.raises(DataError, match="no by_class/<class>/hsf_\\*/ images") as e:
        _build(fx)
    _one_line(e, str(fx.by_class))


def test_missing_archive_names_the_fetch(tmp_path):
    with pytest.raises(DataError, match="by_write.zip not among the dataset's files"):
        ns.load_splits([tmp_path / "by_class.zip"])
    fx = make_nist_zips(tmp_path / "d")
    fx.by_write.unlink()
    with pytest.raises(DataError, match="by_write.zip: missing; fetch it"):
        _build(fx)


# ---------------------------------------------------------------------------------------------------------------
# sample.py, remove_users.py, split_data.py


def test_sample_niid_takes_whole_shuffled_users_then_a_part_of_the_last(tmp_path):
    s = _shard(["a", "b", "c", "d"], [5, 3, 4, 6])
    got = ns.sample_niid(s, random.Random(7), 0.5)
    # LEAF's semantics, step by step: shuffle users; take them until int(0.5 * 18) = 9 samples; the crossing user
    # contributes its first (9 - taken) samples in an rng.sample order
    r = random.Random(7)
    order = [0, 1, 2, 3]
    r.shuffle(order)
    taken, users, sizes = 0, [], []
    for u in order:
        if taken >= 9:
            break
        n = min(s.num_samples[u], 9 - taken)
        users.append(u)
        sizes.append(n)
        taken += n
    last = users[-1]
    perm = r.sample(range(sizes[-1]), sizes[-1]) if sizes[-1] < s.num_samples[last] else None
    assert got.users == [s.users[u] for u in users] and got.num_samples == sizes and sum(got.num_samples) == 9
    for k, u in enumerate(users[:-1]):
        np.testing.assert_array_equal(got.x[k], s.x[u])
    if perm is not None:
        np.testing.assert_array_equal(got.x[-1], s.x[last][perm])
        np.testing.assert_array_equal(got.y[-1], s.y[last][perm])
    full = ns.sample_niid(s, random.Random(7), 1.0)  # sf 1.0: every user, whole, in shuffled order
    assert sorted(full.users) == s.users and sum(full.num_samples) == 18


def test_sample_iid_pools_and_deals_samples():
    s = _shard(["a", "b", "c"], [4, 4, 4])
    out, count = ns.sample_iid(s, random.Random(1), 0.5, 0.67, 10)
    assert out.users == ["10", "11"] and count == 12 and out.num_samples == [3, 3]
    idx = random.Random(1).sample(range(12), 6)
    np.testing.assert_array_equal(np.concatenate(out.x), np.concatenate(s.x)[idx])
    assert ns.iid_divide(7, 3) == [(0, 2), (2, 4), (4, 7)] and ns.iid_divide(6, 3) == [(0, 2), (2, 4), (4, 6)]


def test_remove_users_keeps_those_with_enough_samples():
    s = _shard(["a", "b", "c"], [1, 5, 3])
    assert ns.remove_users(s, 3).users == ["b", "c"] and ns.remove_users(s, 0).users == ["a", "b", "c"]


def test_split_by_sample_as_leaf():
    s = _shard(["one", "two", "ten"], [1, 2, 10])
    train, test = ns.split_by_sample(s, random.Random(3), 0.9)
    assert train.users == test.users == ["two", "ten"]  # a single-sample writer is dropped
    assert train.num_samples == [1, 9] and test.num_samples == [1, 1]
    r = random.Random(3)  # no draw for the dropped writer; then one rng.sample per writer
    tr2, tr10 = set(r.sample(range(2), 1)), set(r.sample(range(10), 9))
    np.testing.assert_array_equal(train.x[1], s.x[2][sorted(tr10)])
    np.testing.assert_array_equal(test.x[1], s.x[2][[j for j in range(10) if j not in tr10]])
    np.testing.assert_array_equal(train.x[0], s.x[1][sorted(tr2)])
    train1, test1 = ns.split_by_sample(s, random.Random(3), 1.0)  # nothing left for test but where n == 2 (1 + 1)
    assert train1.users == test1.users == ["two"]


def test_split_by_user_partitions_the_writers(tmp_path):
    files = [
        ns.write_shard(tmp_path / f"all_data_{k}.json", _shard([f"u{k}{j}" for j in range(4)], [2] * 4, k))
        for k in range(3)
    ]
    dirs = {s: tmp_path / s for s in ("train", "test")}
    out = ns.split_by_user(files, random.Random(5), 0.75, dirs, "_niid_0")
    got = {s: [u for p in ps for u in ns.read_shard(p).users] for s, ps in out.items()}
    everyone = [f"u{k}{j}" for k in range(3) for j in range(4)]
    chosen = set(random.Random(5).sample(range(12), 9))
    assert got["train"] == [u for i, u in enumerate(everyone) if i in chosen]
    assert got["test"] == [u for i, u in enumerate(everyone) if i not in chosen]
    assert out["train"][0].name == "all_data_0_niid_0_train_75.json"


def test_leaf_file_names():
    assert ns.LEAF_FEMNIST.suffix() == "_niid_0_keep_0"  # str(1.0)[2:] == "0", as LEAF names it
    assert ns.LeafOptions(1, 2, fraction=0.05, min_samples=0).suffix() == "_niid_05_keep_0"  # the shared sample
    assert ns.LeafOptions(1, 2, sample="iid", fraction=0.1, iid_users=0.01).suffix() == "_iid_01_1"
    with pytest.raises(ValueError, match="sampling_seed must be an integer"):
        ns.LeafOptions(-1, 2)


def test_preprocess_is_deterministic_under_its_seeds_and_loads_with_leaf(fx, tmp_path, monkeypatch):
    monkeypatch.setattr(ns, "MAX_WRITERS", 2)
    shards = _build(fx)
    opts = ns.LeafOptions(11, 12, sample="niid", fraction=0.7, min_samples=2)
    a = ns.preprocess(shards, tmp_path / "a", opts, QUIET)
    b = ns.preprocess(shards, tmp_path / "b", opts, QUIET)
    c = ns.preprocess(shards, tmp_path / "c", ns.LeafOptions(13, 12, sample="niid", fraction=0.7, min_samples=2), QUIET)
    names = [p.name for p in a["train"]]
    assert names == ["all_data_0_niid_7_keep_2_train_9.json", "all_data_1_niid_7_keep_2_train_9.json"]
    assert [p.read_bytes() for p in a["train"] + a["test"]] == [p.read_bytes() for p in b["train"] + b["test"]]
    assert [p.read_bytes() for p in a["train"]] != [p.read_bytes() for p in c["train"]]
    leaf = load_femnist([*a["train"], *a["test"]])
    for s in ("train", "test"):
        mine = ns.read_split(a[s])
        assert mine.users == leaf[s].users
        for f in ("x", "y", "client"):
            np.testing.assert_array_equal(getattr(mine, f), getattr(leaf[s], f))
        assert mine.x.dtype == leaf[s].x.dtype == np.float32
    total = sum(sum(ns.read_shard(p).num_samples) for p in shards)
    assert len(leaf["train"]) + len(leaf["test"]) <= int(0.7 * total) + 2


def test_preprocess_output_is_reused(fx, tmp_path, monkeypatch):
    shards = _build(fx)
    a = ns.preprocess(shards, tmp_path / "o", ns.LEAF_FEMNIST, QUIET)
    monkeypatch.setattr(ns, "read_shard", lambda p: pytest.fail("recomputed"))
    assert ns.preprocess(shards, tmp_path / "o", ns.LEAF_FEMNIST, QUIET) == a


# ---------------------------------------------------------------------------------------------------------------
# the loader and the partitions of AdaPeD


def test_leaf_femnist_has_an_array_loader():
    assert "leaf_femnist" in LOADERS


def test_adaped_partitions_built_end_to_end_from_nist_layout_zips(tmp_path, monkeypatch):
    """femnist_digits_m66 and _m30 as config/partitions.yaml defines them, from synthetic zips in NIST's layout
    fetched through the real fetch layer (a mirror directory; the zips pinned test-only, as NIST's content check
    wants NIST's real counts) and the registered loader ``leaf_femnist`` (LEAF pipeline with LEAF_FEMNIST)."""
    mirror = tmp_path / "mirror"
    # 240 writers, mostly digits, so that >= 198 keep a digit in both their train and test split
    fx = make_nist_zips(mirror / "leaf_femnist", n_writers=240, digits=12, upper=1, lower=1, const=0, shuffle=False)
    cfg = copy.deepcopy(load_global())
    cfg["data"] = {"dir": str(tmp_path / "data"), "mirror": str(mirror)}
    pin(monkeypatch, "leaf_femnist", mirror / "leaf_femnist")
    fetch(cfg, "leaf_femnist", offline=True)
    specs = load_partitions(load_global())
    for name, n_clients in (("femnist_digits_m66", 66), ("femnist_digits_m30", 30)):
        ds = fedformat.load(prepare(cfg, name, specs[name], tmp_path / name), verify=True)
        assert ds.n_clients == n_clients and ds.n_classes == 62
        assert ds.manifest["source"]["dataset"] == "leaf_femnist"
        assert set(ds.manifest["source"]["files"]) == {"by_class.zip", "by_write.zip"}
        writers = np.asarray(ds.client_meta("writers")).reshape(-1)
        assert len(set(writers.tolist())) == 3 * n_clients and set(writers.tolist()) <= set(fx.writers)
        assert (ds.counts("train") > 0).all() and (ds.counts("test") > 0).all()
    built = tmp_path / "data" / "leaf_femnist"
    assert (built / "all_data" / ns.MARKER).is_file()
    assert (built / "leaf" / ns.LEAF_FEMNIST.tag() / "train" / "all_data_0_niid_0_keep_0_train_9.json").is_file()
