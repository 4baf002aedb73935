"""PPSGD's Stack Overflow tag-prediction data (fedrepro.papers.ppsgd.stackoverflow_tags) on fixtures in the upstream
TFF formats (tests/helpers/tff_fixtures.py): known bag-of-words and tag values, user selection, order and caps."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("h5py")

from tff_fixtures import SO_DATA, TAG_COUNT, WORD_COUNT, _write_so_h5  # noqa: E402

from fedrepro.data import tff_stackoverflow as so  # noqa: E402
from fedrepro.errors import DataError  # noqa: E402
from fedrepro.papers.ppsgd.stackoverflow_tags import bag_of_words, tag_matrix, tag_prediction_clients  # noqa: E402


def test_bag_of_words_and_tags_known_counts():
    vocab = ["the", "python", "to"]
    rows = SO_DATA["train"]["00000017"]
    x = bag_of_words([r[0] for r in rows], [r[1] for r in rows], vocab).toarray()
    assert x.dtype == np.float32
    np.testing.assert_array_equal(
        x,
        np.array(
            [
                [2 / 8, 2 / 8, 1 / 8],  # the list to the python . python list: 8 words
                [0, 0, 1],  # "  to\tto  " + "": 2 words, both "to"
                [0, 0, 0],  # no words at all: zeros (TF: NaN)
                [0, 0, 0],  # "java Python": case-sensitive, both OOV
                [1 / 3, 0, 1 / 3],  # "to the t"
            ],
            dtype=np.float32,
        ),
    )
    y = tag_matrix([r[2] for r in rows], ["python", "java"])
    np.testing.assert_array_equal(y, np.array([[1, 1], [0, 0], [0, 0], [0, 2], [0, 0]], dtype=np.float32))


def test_tag_prediction_clients(tmp_path):
    paths = {s: _write_so_h5(tmp_path / so.H5_MEMBERS[s], SO_DATA[s]) for s in SO_DATA}
    wc = tmp_path / so.WORD_COUNT_FILE
    wc.write_text(WORD_COUNT)
    tc = tmp_path / so.TAG_COUNT_FILE
    tc.write_text(json.dumps(TAG_COUNT))
    counts = so.load_word_counts(wc), so.load_tag_counts([tc])
    with so.open_split(paths["train"], "train") as train, so.open_split(paths["train"], "test") as test:
        out = tag_prediction_clients(
            train, test, *counts, num_clients=2, word_vocab_size=3, tag_vocab_size=2, max_train_per_client=4
        )
        assert [c.client_id for c in out] == ["00000003", "00000017"]  # first 2 sorted *test* ids
        u17 = out[1]
        assert u17.x_train.shape == (4, 3) and u17.y_train.shape == (4, 2)  # capped at 4, stored order
        np.testing.assert_array_equal(u17.x_train.toarray()[0], [0.25, 0.25, 0.125])
        np.testing.assert_array_equal(u17.y_train[:, 1], [1, 0, 0, 2])
        np.testing.assert_array_equal(u17.x_test.toarray(), [[0, 0.5, 0.5]])  # "python to" + ""
        np.testing.assert_array_equal(out[0].y_test, [[1, 1]])
        shuffled = tag_prediction_clients(
            train,
            test,
            *counts,
            num_clients=2,
            word_vocab_size=3,
            tag_vocab_size=2,
            max_train_per_client=4,
            rng=np.random.default_rng(3),
        )
        a, b = u17.x_train.toarray(), shuffled[1].x_train.toarray()
        assert sorted(map(tuple, a)) == sorted(map(tuple, b))  # same 4 documents, permuted
        with pytest.raises(DataError, match="00000099"):  # a test user without train data
            tag_prediction_clients(train, test, *counts, num_clients=3, word_vocab_size=3, tag_vocab_size=2)
        with pytest.raises(DataError, match="fewer"):
            tag_prediction_clients(train, test, *counts, num_clients=2, word_vocab_size=50, tag_vocab_size=2)
