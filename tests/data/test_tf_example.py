"""Serialized tf.train.Example records (fedrepro.data.tf_example): hand-serialized golden bytes, every encoding a
writer may choose, and malformed input."""

from __future__ import annotations

import numpy as np
import pytest

from tff_fixtures import _pb_ld, _pb_varint, encode_example

from fedrepro.data.tf_example import parse_tf_example
from fedrepro.errors import DataError


def test_tf_example_wire_format():
    # Hand-serialized Example{features{feature{key:"score" value{int64_list{value:-1}}}
    #                                  feature{key:"type" value{bytes_list{value:"answer"}}}}}
    golden = bytes.fromhex(
        "0a2d"                                    # Example.features (field 1, LEN 45)
        "0a17" "0a05" + b"score".hex()            # map entry (LEN 23): key "score"
        + "120e" "1a0c" "0a0a" + "ff" * 9 + "01"  # value: Feature.int64_list: packed [-1] (10-byte varint)
        + "0a12" "0a04" + b"type".hex()           # map entry (LEN 18): key "type"
        + "120a" "0a08" "0a06" + b"answer".hex()  # value: Feature.bytes_list: ["answer"]
    )
    assert encode_example({"score": -1, "type": b"answer"}) == golden
    assert parse_tf_example(golden) == {"score": [-1], "type": [b"answer"]}
    # unpacked int64, float list (packed and unpacked), an unknown field and a repeated key (last wins)
    unpacked = _pb_ld(3, bytes([0x08]) + _pb_varint(2**63 - 1) + bytes([0x08]) + _pb_varint(-5))
    floats = _pb_ld(2, _pb_ld(1, np.array([0.5, -2.0], "<f4").tobytes()) + bytes([0x0D]) +
                    np.array([3.25], "<f4").tobytes())
    entry = lambda k, feat: _pb_ld(1, _pb_ld(1, k) + _pb_ld(2, feat))  # noqa: E731
    msg = _pb_ld(1, entry(b"a", unpacked) + entry(b"f", floats) + entry(b"a", _pb_ld(1, _pb_ld(1, b"z")))
                 + entry(b"b", unpacked)) + bytes([0x10, 0x07])  # Example field 2 (varint): unknown, skipped
    assert parse_tf_example(msg) == {"a": [b"z"], "f": [0.5, -2.0, 3.25], "b": [2**63 - 1, -5]}
    with pytest.raises(DataError):
        parse_tf_example(golden[:-3])
    with pytest.raises(DataError):
        parse_tf_example(bytes([0x0B]))  # wire type 3 (group)
