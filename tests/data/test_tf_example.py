"""Serialized tf.train.Example records (fedrepro.data.tf_example), encoded by hand or by the fixtures' independent
encoder (tests/helpers/tff_fixtures.py): golden bytes, every encoding a writer may choose, protobuf's merge rules,
malformed input."""

from __future__ import annotations

import numpy as np
import pytest
from tff_fixtures import COLS, SO_DATA, _pb_ld, _pb_varint, encode_example

from fedrepro.data.tf_example import parse_tf_example
from fedrepro.errors import DataError


def test_tf_example_wire_format():
    # Hand-serialized Example{features{feature{key:"score" value{int64_list{value:-1}}}
    #                                  feature{key:"type" value{bytes_list{value:"answer"}}}}}
    golden = bytes.fromhex(
        "0a2d"  # Example.features (field 1, LEN 45)
        "0a17"
        "0a05"
        + b"score".hex()  # map entry (LEN 23): key "score"
        + "120e"
        "1a0c"
        "0a0a"
        + "ff" * 9
        + "01"  # value: Feature.int64_list: packed [-1] (10-byte varint)
        + "0a12"
        "0a04"
        + b"type".hex()  # map entry (LEN 18): key "type"
        + "120a"
        "0a08"
        "0a06" + b"answer".hex()  # value: Feature.bytes_list: ["answer"]
    )
    assert encode_example({"score": -1, "type": b"answer"}) == golden
    assert parse_tf_example(golden) == {"score": [-1], "type": [b"answer"]}
    # unpacked int64, float list (packed and unpacked), an unknown field and a repeated key (last wins)
    unpacked = _pb_ld(3, bytes([0x08]) + _pb_varint(2**63 - 1) + bytes([0x08]) + _pb_varint(-5))
    floats = _pb_ld(
        2, _pb_ld(1, np.array([0.5, -2.0], "<f4").tobytes()) + bytes([0x0D]) + np.array([3.25], "<f4").tobytes()
    )
    entry = lambda k, feat: _pb_ld(1, _pb_ld(1, k) + _pb_ld(2, feat))  # noqa: E731
    msg = _pb_ld(
        1, entry(b"a", unpacked) + entry(b"f", floats) + entry(b"a", _pb_ld(1, _pb_ld(1, b"z"))) + entry(b"b", unpacked)
    ) + bytes([0x10, 0x07])  # Example field 2 (varint): unknown, skipped
    assert parse_tf_example(msg) == {"a": [b"z"], "f": [0.5, -2.0, 3.25], "b": [2**63 - 1, -5]}
    with pytest.raises(DataError):
        parse_tf_example(golden[:-3])
    with pytest.raises(DataError):
        parse_tf_example(bytes([0x0B]))  # wire type 3 (group)


def _entry(key: bytes, feature: bytes) -> bytes:
    return _pb_ld(1, _pb_ld(1, key) + _pb_ld(2, feature))


def test_protobuf_semantics_where_a_wire_parser_may_differ():
    one, two = _pb_ld(1, _pb_ld(1, b"x")), _pb_ld(1, _pb_ld(1, b"y"))  # Feature.bytes_list ["x"], ["y"]
    ints = _pb_ld(3, _pb_ld(1, _pb_varint(7)))
    # a message field given twice is merged (the spec), not replaced: the two lists concatenate
    assert parse_tf_example(_pb_ld(1, _entry(b"k", one + two))) == {"k": [b"x", b"y"]}
    # a oneof given two kinds keeps the last; a feature with no kind is an empty list
    assert parse_tf_example(_pb_ld(1, _entry(b"k", one + ints))) == {"k": [7]}
    assert parse_tf_example(_pb_ld(1, _entry(b"k", b""))) == {"k": []}
    # two Example.features fields are merged into one map
    assert parse_tf_example(_pb_ld(1, _entry(b"a", one)) + _pb_ld(1, _entry(b"b", ints))) == {"a": [b"x"], "b": [7]}
    assert parse_tf_example(b"") == {}
    # the most negative int64 (a 10-byte varint), unpacked
    assert parse_tf_example(_pb_ld(1, _entry(b"i", _pb_ld(3, b"\x08" + _pb_varint(-(2**63)))))) == {"i": [-(2**63)]}


@pytest.mark.parametrize(
    "record",
    [
        _pb_ld(1, _entry(b"\xff", _pb_ld(3, _pb_ld(1, b"\x01")))),  # a feature name (proto3 string) that is not UTF-8
        b"\x00\x00",  # field number 0
        b"\x0a\x05\x0a\x03",  # a length beyond the end
        b"\x0a",  # a key with no value
    ],
)
def test_malformed_records_are_refused(record):
    with pytest.raises(DataError, match="not a valid tf.train.Example"):
        parse_tf_example(record)


def test_stackoverflow_fixture_rows_read_back_exactly():
    for clients in SO_DATA.values():
        for rows in clients.values():
            for row in rows:
                feats = {c: (v if c == "score" else v.encode()) for c, v in zip(COLS, row)}
                assert parse_tf_example(encode_example(feats)) == {k: [v] for k, v in feats.items()}


def test_messages_live_in_a_private_pool():
    """A TensorFlow installed beside registers tensorflow.Example in the default pool: ours must not be there."""
    from google.protobuf import descriptor_pool

    parse_tf_example(encode_example({"a": 1}))
    with pytest.raises(KeyError):
        descriptor_pool.Default().FindMessageTypeByName("tensorflow.Example")
