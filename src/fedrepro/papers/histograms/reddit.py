"""Per-user token histograms of LEAF Reddit, as the histograms paper (Setlur et al., Sec. 4) uses them.

The paper: "a vocabulary of 10^3 tokens", "roughly n = 10^5 users", m = 500 train and 2,000 test tokens per user,
and 5,000 users with 1,000 extra validation tokens. It does not say how the vocabulary was chosen, how
out-of-vocabulary tokens were handled, which users were kept or how tokens were split (docs/notes/histograms.md G9).
Defaults, each a parameter:

* tokens of a user: the real tokens of every comment in LEAF's train, val and test files pooled (``target_tokens``
  where ``count_tokens`` = 1, i.e. the comment tokens and its ``<EOS>``), without the markers ``<BOS>``, ``<EOS>``
  and ``<PAD>``;
* vocabulary: the ``vocab_size`` most frequent tokens over all users (ties broken by the token string), OOV tokens
  dropped;
* users: those with at least ``train_tokens + test_tokens`` in-vocabulary tokens; ``val_users`` of those with at
  least ``train_tokens + test_tokens + val_tokens`` also get validation tokens (chosen at random);
* split: a seeded random permutation of each user's in-vocabulary tokens; the first ``train_tokens`` are train,
  the next ``test_tokens`` test, the next ``val_tokens`` validation.

Counting is vectorized (one ``np.bincount`` per split over all users' token ids).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fedrepro.data.leaf import RedditSplit
from fedrepro.errors import DataError

MARKERS = ("<BOS>", "<EOS>", "<PAD>")


@dataclass(frozen=True)
class TokenHistograms:
    """Counts per user over the vocabulary: ``train``/``test`` (n_users, d) int64; ``val`` (n_val, d) for the
    users ``val_index`` (rows of ``users``)."""

    users: tuple[str, ...]
    vocab: tuple[str, ...]
    train: np.ndarray
    test: np.ndarray
    val_index: np.ndarray
    val: np.ndarray


def user_tokens(splits: Mapping[str, RedditSplit]) -> dict[str, list[str]]:
    """Every user's real tokens, pooled over the given LEAF splits in order, markers removed."""
    out: dict[str, list[str]] = {}
    for split in splits.values():
        for u in split.users:
            user = split.data[u]
            toks = user.targets[user.mask > 0]
            out.setdefault(u, []).extend(t for t in toks.tolist() if t not in MARKERS)
    return out


def build_vocab(tokens: Mapping[str, list[str]], size: int) -> tuple[str, ...]:
    """The ``size`` most frequent tokens over all users (ties: by token string)."""
    counts = Counter(t for toks in tokens.values() for t in toks)
    if len(counts) < size:
        raise DataError(f"only {len(counts)} distinct tokens; cannot build a vocabulary of {size}")
    return tuple(t for t, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:size])


def token_histograms(
    splits: Mapping[str, RedditSplit],
    *,
    vocab_size: int = 1000,
    train_tokens: int = 500,
    test_tokens: int = 2000,
    val_users: int = 5000,
    val_tokens: int = 1000,
    seed: int = 0,
) -> TokenHistograms:
    tokens = user_tokens(splits)
    vocab = build_vocab(tokens, vocab_size)
    ids = {t: i for i, t in enumerate(vocab)}
    rng = np.random.default_rng(seed)
    need = train_tokens + test_tokens
    users, seqs = [], []
    for u in sorted(tokens):
        x = np.fromiter((ids[t] for t in tokens[u] if t in ids), dtype=np.int64)
        if len(x) >= need:
            users.append(u)
            seqs.append(rng.permutation(x))
    if not users:
        raise DataError(f"no user has {need} in-vocabulary tokens (train {train_tokens} + test {test_tokens})")
    eligible = np.flatnonzero([len(s) >= need + val_tokens for s in seqs])
    val_index = np.sort(rng.choice(eligible, size=min(val_users, len(eligible)), replace=False))

    def counts(rows: np.ndarray, lo: int, hi: int) -> np.ndarray:
        flat = np.concatenate([seqs[r][lo:hi] for r in rows]) if len(rows) else np.zeros(0, np.int64)
        owner = np.repeat(np.arange(len(rows)), hi - lo)
        return np.bincount(owner * vocab_size + flat, minlength=len(rows) * vocab_size).reshape(len(rows), -1)

    everyone = np.arange(len(users))
    return TokenHistograms(
        tuple(users),
        vocab,
        counts(everyone, 0, train_tokens),
        counts(everyone, train_tokens, need),
        val_index,
        counts(val_index, need, need + val_tokens),
    )
