"""TFF Stack Overflow text split as tf.strings.split splits it (fedrepro.data.tokenizer)."""

from __future__ import annotations

from fedrepro.data.tokenizer import split_tags, split_words


def test_words_split_on_runs_of_ascii_whitespace_only():
    assert split_words("the list to the python .") == ["the", "list", "to", "the", "python", "."]
    assert split_words("  to\tto\n\r\v\fx  ") == ["to", "to", "x"]  # runs, ends: no empty words
    assert split_words("") == [] and split_words(" \t ") == []
    assert split_words("Python python") == ["Python", "python"]  # case kept
    assert split_words("é\u00a0to") == ["é\u00a0to"]  # non-ASCII space: not a separator


def test_tags_split_on_every_bar_keeping_empty_pieces():
    assert split_tags("python|java|sql") == ["python", "java", "sql"]
    assert split_tags("c++") == ["c++"]
    assert split_tags("") == [""]
    assert split_tags("a||b|") == ["a", "", "b", ""]
