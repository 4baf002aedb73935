"""scikit-learn's bundled 8x8 digits (``sklearn.datasets.load_digits``): no download, nothing to verify.

The data ship inside scikit-learn (``sklearn/datasets/data/digits.csv.gz``, the test part of the UCI "Optical
Recognition of Handwritten Digits" data set: 1,797 images, 10 classes, pixel counts 0..16). The catalog entry
``digits`` therefore has no remote files and ``bundled`` set: it is always available, ``fetch`` only writes its
stamp, and ``dataset_files`` returns ``[]``. scikit-learn is imported inside :func:`load_digits` only.
"""

from __future__ import annotations

import numpy as np

from fedrepro.data.catalog import Dataset, register
from fedrepro.data.mnist import ImageSplit
from fedrepro.errors import DataError

N_IMAGES = 1797


def load_digits() -> ImageSplit:
    """All 1,797 digits: images uint8 (1797, 8, 8) with values 0..16 (as in the source), labels int64 0..9."""
    try:
        from sklearn.datasets import load_digits as _load
    except ImportError as exc:  # pragma: no cover - scikit-learn is a dependency
        raise DataError(f"dataset digits is bundled with scikit-learn, which cannot be imported: {exc}") from None
    bunch = _load()
    images = np.asarray(bunch.images)
    if images.shape != (N_IMAGES, 8, 8) or images.min() < 0 or images.max() > 16 or np.any(images != np.round(images)):
        raise DataError(
            f"sklearn.datasets.load_digits returned unexpected images {images.shape}, "
            f"range {images.min()}..{images.max()}"
        )
    return ImageSplit(images.astype(np.uint8), np.asarray(bunch.target, dtype=np.int64))


DIGITS = register(
    Dataset(
        id="digits",
        title="scikit-learn digits, 8x8 (1,797 images, 10 classes; bundled, no download)",
        files=(),
        citation="E. Alpaydin, C. Kaynak, Optical Recognition of Handwritten Digits, UCI Machine Learning "
        "Repository, 1998, https://doi.org/10.24432/C50P49; as bundled by scikit-learn (sklearn.datasets.load_digits)",
        licence="CC BY 4.0 (UCI); bundled with scikit-learn (BSD-3-Clause)",
        bundled="scikit-learn: sklearn.datasets.load_digits()",
    )
)
