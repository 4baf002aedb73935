"""PPSGD's Stack Overflow tag-prediction data (Bietti et al. 2022 Sec. 6; docs/notes/ppsgd.md E2).

Paper: "N = 500 users ... bag-of-words format of dimension 5000 ... the 80 most popular tags as labels". The recipe
is the authors' ``create_stackoverflow_data.py`` calling google-research ``stackoverflow_tag_prediction.
get_federated_datasets(word_vocab_size=5000, tag_vocab_size=80)``:

  * :func:`tag_prediction_clients`: which users, which of their examples, in which order;
  * :func:`bag_of_words`: the features (``build_to_ids_fn``'s normalised word counts);
  * :func:`tag_matrix`: the labels (``build_to_ids_fn``'s bag of tags).

The examples come from :mod:`fedrepro.data.tff_stackoverflow` (either release) and are split into words and tags
by :mod:`fedrepro.data.tokenizer`.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from fedrepro.data.tokenizer import split_tags, split_words
from fedrepro.errors import DataError


def bag_of_words(tokens: Sequence[str], titles: Sequence[str], vocab: Sequence[str]):
    """Normalised bag of words, as google-research ``stackoverflow_tag_prediction.build_to_ids_fn``:
    words = whitespace split of ``tokens + ' ' + title``; x[j] = (occurrences of vocab word j) / (number of words,
    out-of-vocabulary ones included); the OOV column is dropped. Returns a scipy CSR matrix, float32, (n, len(vocab)).

    A document with no words at all gets an all-zero row (TF's mean over zero words would give NaN).
    """
    import scipy.sparse as sp

    if len(tokens) != len(titles):
        raise ValueError("tokens and titles differ in length")
    index = {w: j for j, w in enumerate(vocab)}
    if len(index) != len(vocab):
        raise ValueError("vocabulary has duplicate words")
    indptr, cols, data = [0], [], []
    for tok, title in zip(tokens, titles):
        words = split_words(f"{tok} {title}")
        counts = collections.Counter(index[w] for w in words if w in index)
        for j in sorted(counts):
            cols.append(j)
            data.append(counts[j] / len(words))
        indptr.append(len(cols))
    return sp.csr_matrix(
        (np.asarray(data, dtype=np.float32), np.asarray(cols, dtype=np.int64), np.asarray(indptr, dtype=np.int64)),
        shape=(len(tokens), len(vocab)),
    )


def tag_matrix(tags: Sequence[str], tag_vocab: Sequence[str]) -> np.ndarray:
    """Bag of tags, as ``build_to_ids_fn``: split on '|' (empty pieces kept, they are OOV); y[k] = number of times
    vocab tag k occurs (1 for a present tag: a tag is listed once per question); OOV dropped. float32 (n, K)."""
    index = {t: k for k, t in enumerate(tag_vocab)}
    if len(index) != len(tag_vocab):
        raise ValueError("tag vocabulary has duplicates")
    y = np.zeros((len(tags), len(tag_vocab)), dtype=np.float32)
    for i, s in enumerate(tags):
        for t in split_tags(s):
            k = index.get(t)
            if k is not None:
                y[i, k] += 1.0
    return y


@dataclass(frozen=True)
class TagPredictionClient:
    client_id: str
    x_train: object  # scipy.sparse.csr_matrix float32 (n_train, word_vocab_size)
    y_train: np.ndarray  # float32 (n_train, tag_vocab_size)
    x_test: object
    y_test: np.ndarray


def tag_prediction_clients(
    train,
    test,
    word_counts: Mapping[str, int],
    tag_counts: Mapping[str, int],
    num_clients: int = 500,
    word_vocab_size: int = 5000,
    tag_vocab_size: int = 80,
    max_train_per_client: int = 500,
    rng: np.random.Generator | None = None,
) -> list[TagPredictionClient]:
    """PPSGD's Stack Overflow tag-prediction data (paper Sec. 6; [code] create_stackoverflow_data.py):

      * users: the first ``num_clients`` ids of the *test* split's sorted client ids;
      * train: the user's first ``max_train_per_client`` train examples in stored order (``take(500)``), then
        shuffled (``shuffle(500)``; upstream unseeded TF, here ``rng``; ``rng=None`` keeps the stored order);
      * test: all of the user's test examples, stored order;
      * x: :func:`bag_of_words` over the first ``word_vocab_size`` words of ``word_counts``; y: :func:`tag_matrix`
        over the first ``tag_vocab_size`` tags of ``tag_counts`` (sorted by count, see
        :func:`fedrepro.data.tff_stackoverflow.load_tag_counts`).

    ``train``/``test``: :class:`~fedrepro.data.tff_stackoverflow.StackOverflowH5` or
    :class:`~fedrepro.data.tff_stackoverflow.StackOverflowSqlite` splits. A selected user with no train examples is
    an error (upstream's ``create_tf_dataset_for_client`` raises for an unknown client).
    """
    vocab = list(word_counts)[:word_vocab_size]
    tag_vocab = list(tag_counts)[:tag_vocab_size]
    if len(vocab) < word_vocab_size or len(tag_vocab) < tag_vocab_size:
        raise DataError(
            f"word/tag counts have {len(word_counts)}/{len(tag_counts)} entries, fewer than the "
            f"requested vocabularies {word_vocab_size}/{tag_vocab_size}"
        )
    ids = test.client_ids[:num_clients]
    if len(ids) < num_clients:
        raise DataError(f"the test split has {len(test.client_ids)} users, fewer than {num_clients}")
    out = []
    for cid in ids:
        if cid not in train:
            raise DataError(f"user {cid!r} (among the first {num_clients} test users) has no train examples")
        tr = train.client(cid, limit=max_train_per_client)
        order = np.arange(len(tr)) if rng is None else rng.permutation(len(tr))
        te = test.client(cid)
        out.append(
            TagPredictionClient(
                client_id=cid,
                x_train=bag_of_words([tr.tokens[i] for i in order], [tr.title[i] for i in order], vocab),
                y_train=tag_matrix([tr.tags[i] for i in order], tag_vocab),
                x_test=bag_of_words(te.tokens, te.title, vocab),
                y_test=tag_matrix(te.tags, tag_vocab),
            )
        )
    return out
