"""Benchmark of the tf.train.Example reader (fedrepro.data.tf_example) against other readers of the same records.

Not a test. Records: Stack Overflow-shaped ``tf.train.Example`` messages as TFF's sqlite release stores them (the six
features of :mod:`fedrepro.data.tff_stackoverflow`; body 5-300 words, title 2-20 words, from a 20,000-word
vocabulary: about 1.2 kB each, synthetic), encoded by the independent encoder of tests/helpers/tff_fixtures.py, plus
every record the tests decode. Each reader must give the same dict as fedrepro's on every record (the first
difference is reported, with its record); then each decodes all records ``--repeats`` times (the best is kept).
Results go to benchmarks/results/tf_example.json (not committed).

    python benchmarks/tf_example.py                       # fedrepro's reader alone, 250,000 records
    python benchmarks/tf_example.py --against old.py      # also a file defining parse_tf_example(buf)
    python benchmarks/tf_example.py --tfrecord            # also PyPI tfrecord's example_pb2 (pip install tfrecord)

The hand-written wire-format parser that the protobuf runtime replaced is ``git show
a6ecf01:src/fedrepro/data/tf_example.py > old.py`` (``git log -S'def _varint' -- src/fedrepro/data/tf_example.py``
finds the commit if it was rewritten); run with ``PYTHONPATH=src``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "helpers"))

from tff_fixtures import COLS, SO_DATA, _pb_ld, _pb_varint, encode_example  # noqa: E402

from fedrepro.data.tf_example import TfExampleError, parse_tf_example  # noqa: E402


def synthetic(n: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    vocab = np.array([f"w{i}" for i in range(20_000)])
    out = []
    for _ in range(n):
        body = " ".join(vocab[rng.integers(0, len(vocab), int(rng.integers(5, 301)))])
        title = " ".join(vocab[rng.integers(0, len(vocab), int(rng.integers(2, 21)))])
        out.append(
            encode_example(
                {
                    "tokens": body.encode(),
                    "title": title.encode(),
                    "tags": b"python|java",
                    "type": b"question",
                    "creation_date": b"2010-01-08 09:34:05 UTC",
                    "score": int(rng.integers(-10, 1000)),
                }
            )
        )
    return out


def test_records() -> list[bytes]:
    """The records tests/data/test_tf_example.py and test_tff.py decode (valid and malformed)."""
    entry = lambda key, feat: _pb_ld(1, _pb_ld(1, key) + _pb_ld(2, feat))  # noqa: E731
    ints = _pb_ld(3, b"\x08" + _pb_varint(2**63 - 1) + b"\x08" + _pb_varint(-5))
    floats = _pb_ld(2, _pb_ld(1, np.array([0.5, -2.0], "<f4").tobytes()) + b"\x0d" + np.array([3.25], "<f4").tobytes())
    one, two = _pb_ld(1, _pb_ld(1, b"x")), _pb_ld(1, _pb_ld(1, b"y"))
    golden = encode_example({"score": -1, "type": b"answer"})
    records = [
        golden,
        golden[:-3],
        b"\x0b",
        b"",
        b"\x00\x00",
        b"\x0a\x05\x0a\x03",
        b"\x0a",
        _pb_ld(1, entry(b"a", ints) + entry(b"f", floats) + entry(b"a", one) + entry(b"b", ints)) + b"\x10\x07",
        _pb_ld(1, entry(b"k", one + ints)),
        _pb_ld(1, entry(b"k", b"")),
        _pb_ld(1, entry(b"\xff", ints)),
        _pb_ld(1, entry(b"k", one + two)),  # a message field given twice: merged by the spec
        _pb_ld(1, entry(b"a", one)) + _pb_ld(1, entry(b"b", ints)),
    ]
    for clients in SO_DATA.values():
        for rows in clients.values():
            records += [encode_example({c: (v if c == "score" else v.encode()) for c, v in zip(COLS, r)}) for r in rows]
    return records


def decode(parse, record: bytes):
    try:
        return parse(record)
    except TfExampleError:
        return "refused"
    except Exception as exc:  # another reader's own error type
        return "refused" if type(exc).__name__ in ("DecodeError", "ProtoError") else f"{type(exc).__name__}: {exc}"


def from_file(path: Path):
    spec = importlib.util.spec_from_file_location(f"against_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.parse_tf_example


def tfrecord_reader():
    from tfrecord import example_pb2

    def parse(buf: bytes) -> dict:
        example = example_pb2.Example.FromString(buf)
        return {
            name: (list(getattr(f, f.WhichOneof("kind")).value) if f.WhichOneof("kind") else [])
            for name, f in example.features.feature.items()
        }

    return parse


def import_seconds(statement: str) -> float:
    """Wall time of ``statement`` (imports and a first decode) in a fresh interpreter, best of 3."""
    code = f"import time; t = time.perf_counter(); {statement}; print(time.perf_counter() - t)"
    return min(
        float(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout)
        for _ in range(3)
    )


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--records",
        type=int,
        default=250_000,
        help="synthetic records (PPSGD's run: 500 users x up to 500 training documents, plus test documents)",
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--against", type=Path, action="append", default=[], help="a .py file with parse_tf_example")
    ap.add_argument("--tfrecord", action="store_true", help="also PyPI tfrecord's generated example_pb2")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "tf_example.json")
    args = ap.parse_args(argv)

    import google.protobuf
    from google.protobuf.internal import api_implementation

    readers = {"fedrepro (protobuf)": parse_tf_example}
    for path in args.against:
        readers[path.name] = from_file(path)
    if args.tfrecord:
        readers["tfrecord.example_pb2"] = tfrecord_reader()

    fixtures = test_records()
    records = synthetic(args.records, args.seed)
    result: dict = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "protobuf": google.protobuf.__version__,
        "protobuf_implementation": api_implementation.Type(),
        "records": len(records),
        "mean_record_bytes": float(np.mean([len(r) for r in records])),
        "import_and_first_decode_s": {
            "fedrepro (protobuf)": import_seconds("from fedrepro.data.tf_example import parse_tf_example as p; p(b'')")
        },
        "readers": {},
    }
    if args.tfrecord:
        result["import_and_first_decode_s"]["tfrecord.example_pb2"] = import_seconds(
            "from tfrecord import example_pb2; example_pb2.Example.FromString(b'')"
        )
    reference = [decode(parse_tf_example, r) for r in fixtures]
    reference_synthetic = [parse_tf_example(r) for r in records]
    for name, parse in readers.items():
        entry: dict = {}
        diffs = [
            (i, fixtures[i].hex(), ref, got)
            for i, ref in enumerate(reference)
            if (got := decode(parse, fixtures[i])) != ref
        ]
        entry["fixture_records"] = len(fixtures)
        entry["fixture_differences"] = [{"record": d[1], "fedrepro": repr(d[2]), "this": repr(d[3])} for d in diffs]
        entry["synthetic_identical"] = all(parse(r) == ref for r, ref in zip(records, reference_synthetic))
        times = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            for r in records:
                parse(r)
            times.append(time.perf_counter() - t)
        entry["best_s"] = min(times)
        entry["records_per_s"] = len(records) / min(times)
        result["readers"][name] = entry
        print(
            f"{name}: {entry['records_per_s']:,.0f} records/s, synthetic identical: {entry['synthetic_identical']}, "
            f"fixture differences: {len(diffs)}",
            file=sys.stderr,
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
