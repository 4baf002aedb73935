"""Deterministic random streams: one independent stream per (experiment id, seed)."""

from __future__ import annotations

import zlib

import numpy as np


def rng_for(exp_id: str, seed: int) -> np.random.Generator:
    """A PCG64 generator keyed by the experiment id and the seed (stable across Python processes)."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), zlib.crc32(exp_id.encode())]))
