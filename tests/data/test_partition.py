"""Partitioners: determinism, disjointness/coverage, and the papers' client structures (synthetic labels with the
real datasets' class counts; no dataset files needed)."""

from __future__ import annotations

import numpy as np
import pytest

from fedrepro.data.partition import LabelSet, Partition, get_partitioner, partition, partitioners
from fedrepro.errors import ConfigError

MNIST_TRAIN = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
MNIST_TEST = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


def shuffled_labels(counts, seed):
    rng = np.random.default_rng(seed)
    return rng.permutation(np.repeat(np.arange(len(counts)), counts)).astype(np.int64)


@pytest.fixture(scope="module")
def mnist():
    return shuffled_labels(MNIST_TRAIN, 1), shuffled_labels(MNIST_TEST, 2)


@pytest.fixture(scope="module")
def cifar10():
    return shuffled_labels([5000] * 10, 3), shuffled_labels([1000] * 10, 4)


@pytest.fixture(scope="module")
def cifar100():
    fine_to_coarse = np.random.default_rng(5).permutation(np.repeat(np.arange(20), 5))  # 5 fine per superclass
    tr, te = shuffled_labels([500] * 100, 6), shuffled_labels([100] * 100, 7)
    return LabelSet(tr, coarse=fine_to_coarse[tr]), LabelSet(te, coarse=fine_to_coarse[te]), fine_to_coarse


@pytest.fixture(scope="module")
def writers():
    """FEMNIST-like: 400 writers with 20-120 train samples and 2-12 test samples each, 62 classes, string ids."""
    rng = np.random.default_rng(8)
    n_w = 400
    ntr, nte = rng.integers(20, 121, n_w), rng.integers(2, 13, n_w)
    ids = np.array([f"f{i:04d}_{i % 7:02d}" for i in range(n_w)])
    gtr, gte = np.repeat(ids, ntr), np.repeat(ids, nte)
    train = LabelSet(rng.integers(0, 62, len(gtr)), groups=gtr)
    test = LabelSet(rng.integers(0, 62, len(gte)), groups=gte)
    return train, test


def class_sets(p: Partition, labels, split="train"):
    cc = p.class_counts(labels, split)
    return [set(np.flatnonzero(row).tolist()) for row in cc]


# ------------------------------------------------------------------------------------------- all schemes


def _run(name, mnist, writers, seed):
    if name in ("writer_groups", "natural"):
        tr, te = writers
        kw = {"select": "random", "n_clients": 100} if name == "natural" else {}
        return get_partitioner(name)(tr, te, seed=seed, **kw)
    tr, te = mnist
    kw = {"n_clients": 500} if name == "fedhdp_noniid" else {}
    return get_partitioner(name)(tr, te, seed=seed, **kw)


def test_registry_lists_the_five_schemes():
    assert partitioners() == ["dirichlet", "fedhdp_noniid", "natural", "pathological", "writer_groups"]
    with pytest.raises(ConfigError, match="unknown partition scheme"):
        get_partitioner("iid-ish")
    with pytest.raises(ConfigError, match="unknown parameter"):
        partition("pathological", np.zeros(10, np.int64), seed=0, clases_per_client=2)


@pytest.mark.parametrize("name", ["pathological", "writer_groups", "fedhdp_noniid", "natural", "dirichlet"])
def test_deterministic_by_seed(name, mnist, writers):
    a, b, c = (_run(name, mnist, writers, s) for s in (0, 0, 1))
    assert np.array_equal(a.train_client, b.train_client) and np.array_equal(a.test_client, b.test_client)
    assert a.params == b.params and a.params["seed"] == 0
    for k in a.client_meta:
        assert np.array_equal(a.client_meta[k], b.client_meta[k])
    assert not np.array_equal(a.train_client, c.train_client)
    n_train = len(writers[0]) if name in ("writer_groups", "natural") else len(mnist[0])
    assert a.train_client.dtype == np.int64 and len(a.train_client) == n_train


def test_seed_sequence_is_accepted_and_recorded(mnist):
    ss = np.random.SeedSequence(1234, spawn_key=(3,))
    a = partition("pathological", *mnist, seed=ss)
    b = partition("pathological", *mnist, seed=np.random.SeedSequence(1234, spawn_key=(3,)))
    assert np.array_equal(a.train_client, b.train_client)
    assert a.params["seed"] == {"entropy": 1234, "spawn_key": [3]}
    with pytest.raises(TypeError):
        partition("pathological", *mnist, seed=1.5)


def test_csr_offsets_match_indices(mnist):
    p = partition("dirichlet", *mnist, seed=0, n_clients=20, alpha=0.5)
    order, off = p.offsets("train")
    for c in (0, 7, 19):
        assert np.array_equal(order[off[c] : off[c + 1]], p.indices(c))
    assert off[-1] == (p.train_client >= 0).sum()


# ----------------------------------------------------------------------------------------- pathological


@pytest.mark.parametrize("ds,m,k", [("mnist", 50, 3), ("cifar10", 50, 4), ("cifar10", 30, 4)])
def test_pathological_k_classes_per_client(request, ds, m, k):
    tr, te = request.getfixturevalue(ds)
    p = partition("pathological", tr, te, seed=0, n_clients=m, classes_per_client=k)
    assert p.n_clients == m
    tr_sets, te_sets = class_sets(p, tr), class_sets(p, te, "test")
    assigned = [set(row.tolist()) for row in p.client_meta["classes"]]
    assert all(len(s) == k for s in tr_sets) and tr_sets == assigned and te_sets == assigned
    # every class used, by the same number of clients (balanced assignment)
    per_class = np.bincount(p.client_meta["classes"].ravel(), minlength=10)
    assert (per_class == m * k // 10).all()
    # every train and test sample used exactly once; a class's samples split evenly among its holders
    assert (p.train_client >= 0).all() and (p.test_client >= 0).all()
    cc = p.class_counts(tr)
    for c in range(10):
        held = cc[:, c][cc[:, c] > 0]
        assert held.max() - held.min() <= 1
    if ds == "mnist":  # notes §7.2: ≈1200 per client (≈400 per class and client)
        assert 1100 <= p.counts().min() and p.counts().max() <= 1300


def test_pathological_class_combinations_are_random(mnist):
    p = partition("pathological", *mnist, seed=0, n_clients=50, classes_per_client=3)
    combos = {tuple(r) for r in p.client_meta["classes"].tolist()}
    assert len(combos) > 25  # not a cyclic pattern repeating a handful of class triples


def test_pathological_cifar100_two_superclasses(cifar100):
    tr, te, f2c = cifar100
    p = partition("pathological", tr, te, seed=0, n_clients=50, classes_per_client=2, on="coarse")
    coarse_sets = class_sets(p, tr.coarse)
    assert all(len(s) == 2 for s in coarse_sets)
    fine_sets = class_sets(p, tr.labels)
    for cs, fs in zip(coarse_sets, fine_sets):  # all 5 fine classes of both superclasses; labels stay 100-way
        assert fs == set(np.flatnonzero(np.isin(f2c, list(cs))).tolist())
    assert (np.bincount(p.client_meta["classes"].ravel(), minlength=20) == 5).all()
    assert class_sets(p, te.coarse, "test") == coarse_sets
    with pytest.raises(ConfigError, match="coarse"):
        partition("pathological", tr.labels, seed=0, on="coarse")


def test_pathological_uneven_slots_still_use_every_class():
    y = shuffled_labels([100] * 7, 0)
    p = partition("pathological", y, seed=3, n_clients=5, classes_per_client=2)  # 10 slots over 7 classes
    per_class = np.bincount(p.client_meta["classes"].ravel(), minlength=7)
    assert per_class.min() >= 1 and per_class.max() - per_class.min() <= 1
    assert all(len(s) == 2 for s in class_sets(p, y))


# ----------------------------------------------------------------------------------------- writer groups


def test_writer_groups_three_writers_per_client(writers):
    tr, te = writers
    p = partition("writer_groups", tr, te, seed=0, n_writers=198, writers_per_client=3)
    assert p.n_clients == 66 and p.client_meta["writers"].shape == (66, 3)
    ws = p.client_meta["writers"]
    assert len(np.unique(ws)) == 198  # distinct writers
    for c in range(66):
        for split, ls in (("train", tr), ("test", te)):
            got = set(ls.groups[p.indices(c, split)].tolist())
            assert got == set(ws[c].tolist())  # exactly its 3 writers, per-writer LEAF split kept
    chosen = np.isin(tr.groups, ws.ravel())
    assert ((p.train_client >= 0) == chosen).all()  # all samples of chosen writers, none of the others
    assert ((p.test_client >= 0) == np.isin(te.groups, ws.ravel())).all()
    other = partition("writer_groups", tr, te, seed=1)
    assert set(other.client_meta["writers"].ravel()) != set(ws.ravel())  # the subset depends on the seed


def test_writer_groups_digits_only_and_errors(writers):
    tr, te = writers
    p = partition("writer_groups", tr, te, seed=0, n_writers=30, writers_per_client=3, n_classes=10)
    used = p.train_client >= 0
    assert p.n_clients == 10 and (tr.labels[used] < 10).all()
    with pytest.raises(ConfigError, match="writers"):
        partition("writer_groups", tr, te, seed=0, n_writers=1000)
    with pytest.raises(ConfigError, match="groups"):
        partition("writer_groups", tr.labels, seed=0)


# ----------------------------------------------------------------------------------------------- FedHDP


def test_fedhdp_noniid_single_digit_clients(mnist):
    tr, te = mnist
    p = partition("fedhdp_noniid", tr, te, seed=0)
    assert p.n_clients == 2000 and p.params["clients_per_digit"] == [200] * 10
    counts = p.counts()
    assert (counts == counts[0]).all() and counts[0] == 27  # fixed size, the largest that fits disjointly
    sets = class_sets(p, tr)
    assert all(s == {d} for s, d in zip(sets, p.client_meta["digit"]))
    test_sets = class_sets(p, te, "test")
    assert all(s <= {d} for s, d in zip(test_sets, p.client_meta["digit"]))
    assert (p.test_client >= 0).all()  # the server test set is all of MNIST test
    opt = p.client_meta["opt_out"]
    assert opt.sum() == 100 and len(set(p.client_meta["digit"][opt].tolist())) > 1


def test_fedhdp_skewed_opt_out_clients_hold_only_sevens(mnist):
    tr, te = mnist
    plain = partition("fedhdp_noniid", tr, te, seed=0)
    skew = partition("fedhdp_noniid", tr, te, seed=0, skewed=True)
    opt = skew.client_meta["opt_out"]
    assert opt.sum() == 100 and (skew.client_meta["digit"][opt] == 7).all()
    for c in np.flatnonzero(opt):
        assert (tr[skew.indices(c)] == 7).all() and (te[skew.indices(c, "test")] == 7).all()
    # same seed: same clients and samples, only the opt-out set differs
    assert np.array_equal(plain.train_client, skew.train_client)
    assert not np.array_equal(plain.client_meta["opt_out"], opt)


def test_fedhdp_assignment_options(mnist):
    tr, te = mnist
    prop = partition("fedhdp_noniid", tr, te, seed=0, digit_assignment="proportional")
    assert prop.params["samples_per_client"] == 29 and sum(prop.params["clients_per_digit"]) == 2000
    rnd = partition("fedhdp_noniid", tr, te, seed=0, digit_assignment="random")
    assert sum(rnd.params["clients_per_digit"]) == 2000 and (rnd.counts() == rnd.counts()[0]).all()
    ex = partition("fedhdp_noniid", tr, te, seed=0, clients_per_digit=[197, 197] + [196] * 5 + [234, 196, 196])
    assert (ex.client_meta["digit"] == 7).sum() == 234
    with pytest.raises(ConfigError, match="do not fit"):
        partition("fedhdp_noniid", tr, te, seed=0, samples_per_client=30)


# ---------------------------------------------------------------------------------------------- natural


def test_natural_one_client_per_user(writers):
    tr, te = writers
    p = partition("natural", tr, te)
    assert p.n_clients == 400 and (p.train_client >= 0).all() and (p.test_client >= 0).all()
    for c in (0, 123, 399):
        w = p.client_meta["writer"][c]
        assert np.array_equal(p.indices(c), np.flatnonzero(tr.groups == w))
        assert np.array_equal(p.indices(c, "test"), np.flatnonzero(te.groups == w))
    first = partition("natural", tr, te, n_clients=50)
    assert first.client_meta["writer"].tolist() == p.client_meta["writer"][:50].tolist()  # first-appearance order
    top = partition("natural", tr, te, n_clients=50, select="top")
    n = top.counts()
    assert (np.diff(n) <= 0).all() and n.min() >= np.sort(p.counts())[-50]


def test_natural_filters(writers):
    tr, te = writers
    p = partition("natural", tr, te, min_train=10, max_train_per_client=12, n_classes=10)
    assert 10 <= p.counts().min() and p.counts().max() <= 12 and 0 < p.n_clients < 400
    used = p.train_client >= 0
    assert (tr.labels[used] < 10).all() and (te.labels[p.test_client >= 0] < 10).all()
    for c in (0, 5):  # the cap keeps the user's first samples (array order)
        w = p.client_meta["writer"][c]
        mine = np.flatnonzero((tr.groups == w) & (tr.labels < 10))
        assert np.array_equal(p.indices(c), mine[:12])
    with pytest.raises(ConfigError, match="only"):
        partition("natural", tr, te, n_clients=10_000)


# -------------------------------------------------------------------------------------------- Dirichlet


def _mean_tv_to_global(p, labels):
    cc = p.class_counts(labels).astype(float)
    cc = cc[cc.sum(1) > 0]
    dist = cc / cc.sum(1, keepdims=True)
    glob = np.bincount(labels, minlength=cc.shape[1]) / len(labels)
    return 0.5 * np.abs(dist - glob).sum(1).mean()


@pytest.mark.parametrize("variant", ["hsu", "per_class"])
def test_dirichlet_alpha_controls_heterogeneity(mnist, variant):
    tr, te = mnist
    tv = {
        a: _mean_tv_to_global(partition("dirichlet", tr, te, seed=0, n_clients=50, alpha=a, variant=variant), tr)
        for a in (0.05, 1.0, 100.0, float("inf"))
    }
    assert tv[0.05] > tv[1.0] > tv[100.0] >= tv[float("inf")] - 0.02
    assert tv[float("inf")] < 0.06 and tv[0.05] > 0.6  # IID vs concentrated
    p = partition("dirichlet", tr, te, seed=0, n_clients=50, alpha=0.05, variant=variant)
    cc = p.class_counts(tr)
    share = cc.max(1) / np.maximum(cc.sum(1), 1)
    assert np.median(share) > 0.7
    # test labels follow the client's train labels
    assert all(t <= s for t, s in zip(class_sets(p, te, "test"), class_sets(p, tr)))
    if variant == "hsu":
        assert (p.counts() == len(tr) // 50).all()
    else:
        assert (p.train_client >= 0).all()
