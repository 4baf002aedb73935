"""Serialized ``tf.train.Example`` records (the rows of TFF's sqlite releases), decoded without TensorFlow.

Messages (tensorflow/core/example/example.proto, feature.proto)::

    Example   { Features features = 1; }
    Features  { map<string, Feature> feature = 1; }   # on the wire: repeated entry { string key = 1; Feature value = 2; }
    Feature   { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }
    BytesList { repeated bytes value = 1; }
    FloatList { repeated float value = 1 [packed = true]; }
    Int64List { repeated int64 value = 1 [packed = true]; }

Wire format (protobuf encoding spec): each field is a varint key (field_number << 3 | wire_type); wire types
0 varint, 1 fixed64, 2 length-delimited (varint length + bytes), 5 fixed32 (3/4, deprecated groups, are refused).
int64 values are two's-complement varints (negative numbers take 10 bytes); floats are little-endian fixed32.
Repeated scalars are accepted packed (one length-delimited field) or unpacked, as parsers must. Unknown fields are
skipped; a map key given twice keeps the last value and, within a oneof, the last kind wins (protobuf semantics).
"""

from __future__ import annotations

import struct

from fedrepro.errors import DataError


class ProtoError(DataError):
    """A serialized tf.train.Example that cannot be decoded."""


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ProtoError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ProtoError("varint longer than 10 bytes")


def _fields(buf: bytes):
    """Yield (field_number, wire_type, value) where value is an int (types 0, 1, 5) or bytes (type 2)."""
    pos, n = 0, len(buf)
    while pos < n:
        key, pos = _varint(buf, pos)
        field, wt = key >> 3, key & 7
        if field == 0:
            raise ProtoError("field number 0")
        if wt == 0:
            value, pos = _varint(buf, pos)
        elif wt == 1:
            if pos + 8 > n:
                raise ProtoError("truncated fixed64")
            value, pos = int.from_bytes(buf[pos:pos + 8], "little"), pos + 8
        elif wt == 2:
            length, pos = _varint(buf, pos)
            if pos + length > n:
                raise ProtoError("truncated length-delimited field")
            value, pos = bytes(buf[pos:pos + length]), pos + length
        elif wt == 5:
            if pos + 4 > n:
                raise ProtoError("truncated fixed32")
            value, pos = int.from_bytes(buf[pos:pos + 4], "little"), pos + 4
        else:
            raise ProtoError(f"unsupported wire type {wt}")
        yield field, wt, value


def _signed64(v: int) -> int:
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >= 1 << 63 else v


def _feature(buf: bytes) -> list:
    values: list = []
    for field, wt, value in _fields(buf):
        if field == 1 and wt == 2:  # BytesList
            values = [v for f, w, v in _fields(value) if f == 1 and w == 2]
        elif field == 2 and wt == 2:  # FloatList
            floats: list[float] = []
            for f, w, v in _fields(value):
                if f != 1:
                    continue
                if w == 2:
                    if len(v) % 4:
                        raise ProtoError("packed float list length not a multiple of 4")
                    floats.extend(struct.unpack(f"<{len(v) // 4}f", v))
                elif w == 5:
                    floats.append(struct.unpack("<f", v.to_bytes(4, "little"))[0])
            values = floats
        elif field == 3 and wt == 2:  # Int64List
            ints: list[int] = []
            for f, w, v in _fields(value):
                if f != 1:
                    continue
                if w == 2:
                    p = 0
                    while p < len(v):
                        x, p = _varint(v, p)
                        ints.append(_signed64(x))
                elif w == 0:
                    ints.append(_signed64(v))
            values = ints
    return values


def parse_tf_example(buf: bytes) -> dict[str, list]:
    """Decode a serialized ``tf.train.Example``: {feature name: list of bytes | float | int}."""
    out: dict[str, list] = {}
    for field, wt, features in _fields(bytes(buf)):
        if field != 1 or wt != 2:
            continue
        for f, w, entry in _fields(features):
            if f != 1 or w != 2:
                continue
            key, value = b"", b""
            for ef, ew, ev in _fields(entry):
                if ef == 1 and ew == 2:
                    key = ev
                elif ef == 2 and ew == 2:
                    value = ev
            try:
                name = key.decode("utf-8")
            except UnicodeDecodeError:
                raise ProtoError(f"feature name {key!r} is not UTF-8") from None
            out[name] = _feature(value)
    return out
