"""TFF Stack Overflow's text, split as TensorFlow splits it (no TensorFlow).

The dataset ships its text already tokenized: ``tokens`` is the body's tokens joined by single spaces, ``title``
the raw title, ``tags`` the tags joined by ``|`` (TFF ``stackoverflow.py`` docstring). Consumers split them again
with ``tf.strings.split``; these functions give the same pieces:

  * :func:`split_words`: ``tf.strings.split(text)`` (``sep=None``): runs of ASCII whitespace separate words, no
    empty words, nothing else is touched (case, punctuation and non-ASCII text are kept as they are).
  * :func:`split_tags`: ``tf.strings.split(tags, sep='|')``: every ``|`` separates, so empty pieces are kept
    (``'' -> ['']``, ``'a||b' -> ['a', '', 'b']``).
"""

from __future__ import annotations

import re

_WHITESPACE = re.compile(r"[ \t\n\v\f\r]+")  # the ASCII whitespace tf.strings.split(sep=None) splits on
TAG_SEPARATOR = "|"


def split_words(text: str) -> list[str]:
    """The words of ``text``: ``tf.strings.split(text)``."""
    return [w for w in _WHITESPACE.split(text) if w]


def split_tags(tags: str) -> list[str]:
    """The tags of one example's ``tags`` string: ``tf.strings.split(tags, sep='|')``, empty pieces kept."""
    return tags.split(TAG_SEPARATOR)
