"""Fault injection (issue 18): each broken file, bad argument and interruption a user can meet, done for real.

Every case asserts the same four things: a non-zero exit, exactly one error line naming the file (and line, key or
argument) at fault, no traceback, and no finished result changed (the bytes of every file compared before and after).
The CLI and Snakemake run as subprocesses on a small private workflow in a temp dir: AdaPeD's Remark 1 (two seeds,
seconds), the county-election experiment on the test fixture, and a partition of scikit-learn's digits.
"""

from __future__ import annotations

import dataclasses
import errno
import gzip
import hashlib
import io
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import zipfile
from functools import partial
from pathlib import Path

import pytest
import yaml

from fedrepro.cli import main
from fedrepro.config import REPO_ROOT, load_global, read_yaml
from fedrepro.data import catalog, leaf, mnist, sources
from fedrepro.data.archive import decompress_file, extract_members
from fedrepro.errors import ConfigError, DataError, ResultError
from fedrepro.report.registry import load_registry
from fedrepro.runio import read_history

ROOT = REPO_ROOT
FIXTURE = REPO_ROOT / "tests" / "fixtures" / "countypres_2000-2020_sample.csv"
ELECTION, ELECTION_FILE = "election_county_returns", "countypres_2000-2020.csv"
PARTITION = "digits_dirichlet_a05"
_BESIDE = Path(sys.executable).parent / "snakemake"
SNAKEMAKE = str(_BESIDE) if _BESIDE.exists() else shutil.which("snakemake")
REGISTRY = """id,artifact,table_row,table_col,setting,metric,unit,value,pm,pm_reading,runs,tolerance,experiment,key,row,ci,needs,note
R1.ex,Remark 1,,,m=1e4,ratio,,0.01,,,,0.005,adaped.remark1,ratio,printed,true,,
"""


# ------------------------------------------------------------------------------------------------------- helpers


def write_config(tmp: Path, seeds=(0, 1)) -> Path:
    """A private workflow under ``tmp``: config.yaml (every path inside ``tmp``; the mirror holds the election
    fixture), adaped.yaml with remark1 and political, a one-row registry and one digits partition."""
    doc = yaml.safe_load((ROOT / "config" / "adaped.yaml").read_text())
    doc["experiments"] = {k: doc["experiments"][k] for k in ("remark1", "political")}
    doc["figures"] = {}
    doc.pop("unexplained", None)  # it names rows of the whole registry; this one has R1.ex only
    (tmp / "adaped.yaml").write_text(yaml.safe_dump(doc))
    (tmp / "adaped.csv").write_text(REGISTRY)
    spec = yaml.safe_load((ROOT / "config" / "partitions.yaml").read_text())["partitions"][PARTITION]
    (tmp / "partitions.yaml").write_text(yaml.safe_dump({"partitions": {PARTITION: spec}}))
    mirror = tmp / "mirror"
    if not (mirror / ELECTION_FILE).is_file():
        mirror.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(FIXTURE, mirror / ELECTION_FILE)
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    cfg.update(
        {
            "results_dir": str(tmp / "results"),
            "figures_dir": str(tmp / "figures"),
            "logs_dir": str(tmp / "logs"),
            "data": {"dir": str(tmp / "data"), "mirror": str(mirror)},
            "papers": {"adaped": str(tmp / "adaped.yaml")},
            "targets": {"adaped": str(tmp / "adaped.csv")},
            "partitions": str(tmp / "partitions.yaml"),
            "seeds": {"quick": list(seeds), "paper": [0, 1]},  # remark1 (no quick overrides) runs at paper scale
            "only_papers": ["adaped"],
        }
    )  # Snakemake merges this file into config/config.yaml's four papers
    (tmp / "config.yaml").write_text(yaml.safe_dump(cfg))
    return tmp / "config.yaml"


def fedrepro(*args, umask: int | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "FEDREPRO_WORKFLOW_CONFIG"}
    return subprocess.run(
        [sys.executable, "-m", "fedrepro", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**env, "FEDREPRO_PROGRESS": "0"},
        preexec_fn=None if umask is None else (lambda: os.umask(umask)),
    )


def fedrepro_here(capsys, *args) -> subprocess.CompletedProcess:
    """The same command through the same ``cli.main`` in this process (no interpreter start): for the further
    variants of a case whose first variant runs as a real process."""
    from fedrepro.cli import main

    try:
        status = main([str(a) for a in args])
    except SystemExit as exc:  # argparse's errors
        status = exc.code
    out = capsys.readouterr()
    return subprocess.CompletedProcess(args, status, out.out, out.err)


def ok(r: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return r


def one_error(r: subprocess.CompletedProcess, *names) -> str:
    """The failed command's single error line, which must name each of ``names``; no traceback anywhere."""
    out = r.stdout + r.stderr
    assert r.returncode != 0, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    errors = [line for line in r.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, r.stderr[-3000:]
    for name in names:
        assert str(name) in errors[0], (name, errors[0])
    return errors[0]


def snapshot(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` (hidden ones too)."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(autouse=True)
def _outside_snakemake(monkeypatch):
    monkeypatch.delenv("FEDREPRO_WORKFLOW_CONFIG", raising=False)  # set only inside a workflow job


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The private workflow's results, built once by the CLI: two Remark 1 runs, their summary, the report and the
    digits partition. Tests work on copies (see ``work``)."""
    base = tmp_path_factory.mktemp("built")
    cfg = write_config(base)
    runs = base / "results" / "adaped" / "remark1" / "paper"  # no quick overrides: runs at paper scale
    for seed in (0, 1):
        ok(
            fedrepro(
                "run",
                "adaped.remark1",
                "--seed",
                seed,
                "--scale",
                "quick",
                "--out",
                runs / f"seed{seed}",
                "--config",
                cfg,
            )
        )
    ok(fedrepro("aggregate", "--runs", runs / "seed0", runs / "seed1", "--out", runs / "summary.json"))
    ok(fedrepro("report", "--out-dir", base / "results" / "report", "--scale", "quick", "--config", cfg))
    ok(fedrepro("data", "partition", PARTITION, "--out", base / "results" / "data" / PARTITION, "--config", cfg))
    return base


@pytest.fixture
def work(built, tmp_path) -> tuple[Path, Path]:
    """(a private copy of the built workflow, its config)."""
    dst = tmp_path / "w"
    shutil.copytree(built, dst)
    return dst, write_config(dst)


def _runs(w: Path) -> Path:
    return w / "results" / "adaped" / "remark1" / "paper"


CORRUPTIONS = {
    "garbage": lambda text: "\x00\x01 not json at all",
    "truncated": lambda text: text[: len(text) // 2],
    "empty object": lambda text: "{}",
    "wrong type": lambda text: json.dumps({**json.loads(text), "metrics": 5, "seeds": "0,1"}),
}


# ------------------------------------------------------------------------------------------------- result files


@pytest.mark.parametrize("how", [*CORRUPTIONS, "deleted"])
def test_broken_seed_metrics_stops_aggregate_naming_it(work, how, capsys):
    w, _ = work
    fedrepro_ = fedrepro if how == "garbage" else partial(fedrepro_here, capsys)
    bad = _runs(w) / "seed1" / "metrics.json"
    if how == "deleted":
        bad.unlink()
    else:
        bad.write_text(CORRUPTIONS[how](bad.read_text()))
    before = snapshot(w)
    r = fedrepro_("aggregate", "--runs", _runs(w) / "seed0", _runs(w) / "seed1", "--out", _runs(w) / "summary.json")
    line = one_error(r, bad)
    assert {"empty object": "required key is missing", "wrong type": "metrics", "deleted": "not found"}.get(
        how, "not a valid run metrics file"
    ) in line
    assert snapshot(w) == before


@pytest.mark.parametrize("how", CORRUPTIONS)
def test_broken_summary_stops_report_naming_it(work, how, capsys):
    w, cfg = work
    fedrepro_ = fedrepro if how == "garbage" else partial(fedrepro_here, capsys)
    bad = _runs(w) / "summary.json"
    bad.write_text(CORRUPTIONS[how](bad.read_text()))
    before = snapshot(w)
    line = one_error(fedrepro_("report", "--out-dir", w / "results" / "report", "--config", cfg), bad)
    if how == "empty object":
        assert "effective_scale" in line or "required key" in line
    assert snapshot(w) == before


def test_broken_history_and_replication_report_are_named(work, capsys):
    w, _ = work
    hist = _runs(w) / "seed0" / "history.parquet"
    hist.write_bytes(hist.read_bytes()[:100])
    with pytest.raises(ResultError, match="not a valid parquet file") as err:
        read_history(hist.parent)
    assert str(hist) in str(err.value)
    csv = w / "results" / "report" / "replication.csv"
    for text in ("garbage\n", csv.read_text().splitlines()[0] + "\nR1.ex,adaped\n"):
        csv.write_text(text)
        one_error(fedrepro_here(capsys, "ci-check", "--report", csv), csv)


def _report_row(w: Path, row_id: str = "R1.ex") -> dict:
    import csv

    with open(w / "results" / "report" / "replication.csv", newline="", encoding="utf-8") as fh:
        return next(r for r in csv.DictReader(fh) if r["id"] == row_id)


NON_FINITE = {  # how the summary or the runs are spoiled -> what the row's reason says (a summary edited after its
    # runs is not what they give: invalid before its numbers are even looked at)
    "NaN mean": "has mean nan, its seed runs give",
    "inf mean": "has mean inf, its seed runs give",
    "NaN in every seed": "undefined",
    "metric missing": "is not in the summary",
}


@pytest.mark.parametrize("how", NON_FINITE)
def test_a_non_finite_rebuild_is_never_judged_and_fails_ci(work, how, capsys):
    """The row (printed, ci=true, reproduced as built) turns invalid naming the summary; ci-check fails on it."""
    w, cfg = work
    summary = _runs(w) / "summary.json"
    if how == "NaN in every seed":  # every seed's metric null: aggregates to mean None, n 0, without an error
        for seed in (0, 1):
            f = _runs(w) / f"seed{seed}" / "metrics.json"
            f.write_text(json.dumps({**json.loads(f.read_text()), "metrics": {"ratio": None, "a": 0.5}}))
        ok(fedrepro_here(capsys, "aggregate", "--runs", _runs(w) / "seed0", _runs(w) / "seed1", "--out", summary))
    else:
        doc = json.loads(summary.read_text())
        if how == "metric missing":
            del doc["metrics"]["ratio"]
        else:
            doc["metrics"]["ratio"]["mean"] = math.nan if how == "NaN mean" else math.inf
        summary.write_text(json.dumps(doc))  # Python writes NaN / Infinity, which json.loads reads back
    assert _report_row(w)["status"] == "reproduced"
    ok(fedrepro_here(capsys, "report", "--out-dir", w / "results" / "report", "--scale", "quick", "--config", cfg))
    row = _report_row(w)
    assert row["status"] == "invalid" and NON_FINITE[how] in row["reason"]
    assert "adaped/remark1/paper/summary.json" in row["reason"]
    r = fedrepro_here(capsys, "ci-check", "--report", w / "results" / "report" / "replication.csv")
    assert r.returncode == 1 and "FAIL adaped.R1.ex" in r.stdout and "invalid" in r.stdout


def test_a_metric_that_is_not_a_number_stops_aggregate_naming_file_and_key(work, capsys):
    w, _ = work
    bad = _runs(w) / "seed1" / "metrics.json"
    bad.write_text(json.dumps({**json.loads(bad.read_text()), "metrics": {"ratio": "abc", "a": 0.5}}))
    before = snapshot(w)
    r = fedrepro("aggregate", "--runs", _runs(w) / "seed0", _runs(w) / "seed1", "--out", _runs(w) / "summary.json")
    assert "'abc', not a number" in one_error(r, bad, "metrics.ratio")
    assert snapshot(w) == before


PARTITION_DAMAGE = {  # id: (file, damage)
    "manifest cut short": ("manifest.json", lambda p: p.write_text(p.read_text()[:200])),
    "manifest incomplete": (
        "manifest.json",
        lambda p: p.write_text('{"format": "fedrepro.fedformat", "format_version": 1}'),
    ),
    "features cut short": ("features.npy", lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])),
    "index garbage": ("index.parquet", lambda p: p.write_bytes(b"PAR1" + b"\x00" * (p.stat().st_size - 4))),
    "features one byte flipped": ("features.npy", lambda p: _flip_byte(p, p.stat().st_size // 2)),
}


def _flip_byte(path: Path, at: int) -> None:
    """One bit of one byte changed in place: same size, same file, a new mtime."""
    with open(path, "r+b") as fh:
        fh.seek(at)
        byte = fh.read(1)
        fh.seek(at)
        fh.write(bytes([byte[0] ^ 0x10]))


def test_a_flipped_byte_in_a_partition_stops_the_run_that_reads_it(tmp_path, capsys):
    """A training run on a partition whose features.npy lost one bit stops before training, naming the file; so
    does one on a partition written without a verification state (earlier code), after its first clean use."""
    from kill_resume_project import run_cmd, write_project

    cfg = write_project(tmp_path)
    part = tmp_path / "results" / "data" / "synthetic_quadrants"
    (part / ".verified.json").unlink()  # as built before partitions recorded one: still loads, and is then recorded
    r = fedrepro_here(capsys, *run_cmd(cfg, tmp_path / "ok", "--set", "epochs=1")[3:])
    ok(r)
    assert (part / ".verified.json").is_file()
    _flip_byte(part / "features.npy", 1000)
    before = snapshot(tmp_path)
    r = fedrepro(*run_cmd(cfg, tmp_path / "bad")[3:])
    assert "checksum mismatch: changed after the partition was written" in one_error(r, part / "features.npy")
    assert snapshot(tmp_path) == before and not (tmp_path / "bad" / "metrics.json").exists()


def test_bit_rot_with_its_mtime_restored_stops_the_run(tmp_path, capsys):
    """Bit rot keeps a file's size and mtime: a run hashes its inputs by content, so one flipped bit of features.npy
    with the old mtime put back still stops it, naming the file (the cheap size-and-mtime check would pass it)."""
    from kill_resume_project import run_cmd, write_project

    cfg = write_project(tmp_path)
    part = tmp_path / "results" / "data" / "synthetic_quadrants"
    ok(fedrepro_here(capsys, *run_cmd(cfg, tmp_path / "ok", "--set", "epochs=1")[3:]))
    features = part / "features.npy"
    st = features.stat()
    _flip_byte(features, 1000)
    os.utime(features, ns=(st.st_atime_ns, st.st_mtime_ns))
    r = fedrepro_here(capsys, *run_cmd(cfg, tmp_path / "bad", "--set", "epochs=1")[3:])
    assert "checksum mismatch: changed after the partition was written" in one_error(r, features)
    assert not (tmp_path / "bad").exists()  # and the refused run left no directory behind


@pytest.mark.parametrize("damage", PARTITION_DAMAGE)
def test_damaged_partition_file_is_named(work, damage, capsys):
    w, cfg = work
    fedrepro_ = fedrepro if damage == "manifest cut short" else partial(fedrepro_here, capsys)
    part = w / "results" / "data" / PARTITION
    name, spoil = PARTITION_DAMAGE[damage]
    bad = part / name
    spoil(bad)
    before = snapshot(w)
    one_error(fedrepro_("data", "plot", PARTITION, "--input", part, "--out", w / "plot.png", "--config", cfg), bad)
    assert snapshot(w) == before and not (w / "plot.png").exists()


# ----------------------------------------------------------------------------------------------------- config


def test_yaml_syntax_errors_name_file_and_line(tmp_path, capsys):
    cfg = write_config(tmp_path)
    broken = tmp_path / "broken.yaml"
    broken.write_text("scale: quick\nseeds:\n  quick: [0, 1\n  paper: [0]\n")
    one_error(fedrepro("list", "--config", broken), f"{broken}:4:", "started at line 3")
    paper = tmp_path / "adaped.yaml"
    paper.write_text(paper.read_text() + "experiments:\n\tbad: 1\n")
    lines = paper.read_text().count("\n")
    one_error(fedrepro_here(capsys, "list", "--config", cfg), f"{paper}:{lines}:1", "not valid YAML")
    broken.write_bytes(b"scale: \xff\xfe quick\n")
    one_error(fedrepro_here(capsys, "list", "--config", broken), broken, "cannot read")


@pytest.mark.slow
def test_snakemake_names_the_yaml_file_and_line(tmp_path):
    # config/config.yaml itself: Snakemake's own message named neither file nor line. --directory makes tmp_path the
    # working directory, so the Snakefile reads tmp_path/config/config.yaml.
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text("scale: quick\npapers:\n  adaped: [x\n")
    r = subprocess.run(
        [SNAKEMAKE, "-n", "--nolock", "--snakefile", ROOT / "Snakefile", "--directory", tmp_path],
        capture_output=True,
        text=True,
    )
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "config/config.yaml:4:1: not valid YAML" in out, out[-3000:]
    # a paper's file, through the workflow's own config validation
    cfg = write_config(tmp_path)
    paper = tmp_path / "adaped.yaml"
    paper.write_text("paper: adaped\nexperiments: {remark1: [\n")
    r = subprocess.run(
        [SNAKEMAKE, "-n", "--nolock", "--configfile", ROOT / "config" / "config.yaml", cfg],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    out = r.stdout + r.stderr
    assert r.returncode != 0 and f"{paper}:3:1: not valid YAML" in out, out[-3000:]


# ------------------------------------------------------------------------------------------------------- data


def _tar_gz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.mark.parametrize("keep", [0.0001, 0.01, 0.5, 0.99])  # 0.0001: 40 bytes, cut in the first block
def test_truncated_archives_are_named(tmp_path, keep):
    payload = os.urandom(200_000)  # incompressible: the cut falls inside the data, not after it
    cut = lambda raw: raw[: max(1, int(len(raw) * keep))]  # noqa: E731
    tgz = tmp_path / "a.tar.gz"
    tgz.write_bytes(cut(_tar_gz({"d/x.bin": payload, "d/y.bin": payload})))
    with pytest.raises(DataError, match="corrupt or truncated") as err:
        extract_members(tgz, tmp_path / "out", ["d/x.bin", "d/y.bin"])
    assert str(tgz) in str(err.value)
    assert not [p for p in (tmp_path / "out").rglob("*") if p.is_file() and not p.name.startswith(".")]
    gz = tmp_path / "b.gz"
    gz.write_bytes(cut(gzip.compress(payload)))
    for read in (lambda: decompress_file(gz, tmp_path / "gz", "b", "gz"), lambda: mnist.read_idx(gz)):
        with pytest.raises(DataError) as err:
            read()
        assert str(gz) in str(err.value)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for member in leaf.REDDIT_MEMBERS.values():
            zf.writestr(member, payload)
    zp = tmp_path / "c.zip"
    zp.write_bytes(cut(buf.getvalue()))
    with pytest.raises(DataError) as err:
        leaf.load_reddit(zp)
    assert str(zp) in str(err.value)


@pytest.fixture
def pinned_mirror(tmp_path, monkeypatch):
    """A one-file dataset pinned to the election fixture's sha256, in a mirror: (config, dataset, mirror file)."""
    mirror = tmp_path / "mirror" / "faulttest"
    mirror.mkdir(parents=True)
    shutil.copyfile(FIXTURE, mirror / "returns.csv")
    ds = catalog.Dataset(
        "faulttest",
        "fault-injection fixture",
        (catalog.RemoteFile("returns.csv", "https://example.org/returns.csv", sources.sha256_of(FIXTURE)),),
        citation="test",
    )
    catalog.all_datasets()  # load the real catalog first, then add the fixture to it
    monkeypatch.setitem(catalog.DATASETS, ds.id, ds)
    cfg = {"data": {"dir": str(tmp_path / "data"), "mirror": str(tmp_path / "mirror")}}
    return cfg, ds, mirror / "returns.csv"


def test_corrupt_mirror_file_is_named_not_the_deleted_copy(pinned_mirror):
    cfg, ds, mirrored = pinned_mirror
    raw = bytearray(mirrored.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    mirrored.write_bytes(bytes(raw))
    with pytest.raises(DataError) as err:
        sources.fetch(cfg, ds.id, offline=True)
    msg = str(err.value)
    copy = sources.data_dir(cfg, ds.id) / "returns.csv"
    assert f"the mirror file {mirrored} " in msg and ds.files[0].sha256 in msg and "\n" not in msg
    assert str(copy) not in msg and not copy.exists()


def test_data_file_corrupted_after_fetch_is_caught_on_use(pinned_mirror, monkeypatch):
    cfg, ds, mirrored = pinned_mirror
    sources.fetch(cfg, ds.id, offline=True)
    stamp = sources.stamp_path(cfg, ds.id)
    stamp_bytes, stamp_mtime = stamp.read_bytes(), stamp.stat().st_mtime_ns
    copy = sources.data_dir(cfg, ds.id) / "returns.csv"
    hashed = []
    monkeypatch.setattr(sources, "sha256_of", lambda p: hashed.append(p) or hashlib.sha256(p.read_bytes()).hexdigest())
    [v] = sources.verified_files(cfg, ds.id)
    assert (v.path, v.sha256, v.pinned) == (copy, ds.files[0].sha256, True)
    assert hashed == []  # unchanged size and mtime: not hashed again
    os.utime(copy, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert sources.dataset_files(cfg, ds.id) == [copy]  # touched, same bytes: hashed once, still fine
    assert hashed == [copy]
    raw = bytearray(copy.read_bytes())
    raw[10] ^= 0x01
    copy.write_bytes(bytes(raw))
    with pytest.raises(DataError, match="checksum mismatch") as err:
        sources.dataset_files(cfg, ds.id)
    msg = str(err.value)
    assert str(copy) in msg and ds.files[0].sha256 in msg and f"mirror {mirrored}" in msg and "\n" not in msg
    # the check never rewrites the fetch rule's output (that would rerun everything downstream)
    assert stamp.read_bytes() == stamp_bytes and stamp.stat().st_mtime_ns == stamp_mtime
    copy.unlink()
    with pytest.raises(DataError, match="is missing although") as err:
        sources.dataset_files(cfg, ds.id)
    assert str(copy) in str(err.value)


def test_checksum_messages_name_where_the_file_came_from(pinned_mirror):
    cfg, ds, mirrored = pinned_mirror
    f = dataclasses.replace(ds.files[0], sha256="0" * 64)
    for origin, names in {
        "download https://example.org/returns.csv": ["https://example.org/returns.csv", f"downloaded to {mirrored}"],
        "written by debian-package": ["written by debian-package", "local provider"],
        f"mirror {mirrored}": [f"the mirror file {mirrored}"],
        "": [f"{mirrored} (in the data dir)"],
    }.items():
        with pytest.raises(DataError, match="checksum mismatch") as err:
            sources.verify(mirrored, f, ds, origin=origin)
        assert all(n in str(err.value) for n in names) and "0" * 64 in str(err.value), str(err.value)


def test_corrupted_data_stops_the_run_that_reads_it(work, capsys, monkeypatch):
    """Through the CLI: the election data fetched unpinned (the 150-row fixture, verified by a test-only stand-in
    for the real content check, in this process), corrupted afterwards; the next run (a real process) names it."""
    w, cfg = work
    ds = catalog.get_dataset(ELECTION)
    sample = dataclasses.replace(ds.files[0], content_check=lambda path: None)
    monkeypatch.setitem(catalog.DATASETS, ELECTION, dataclasses.replace(ds, files=(sample,)))
    ok(fedrepro_here(capsys, "data", "fetch", ELECTION, "--offline", "--config", cfg))
    ok(fedrepro("run", "adaped.political", "--out", w / "political0", "--config", cfg))
    data = w / "data" / ELECTION / ELECTION_FILE
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0x01  # one bit, same size
    data.write_bytes(bytes(raw))
    before = snapshot(w)
    line = one_error(
        fedrepro("run", "adaped.political", "--out", w / "political1", "--config", cfg),
        data,
        sources.sha256_of(FIXTURE),
    )
    assert "changed after it was verified" in line and "mirror" in line
    assert snapshot(w) == before and not (w / "political1" / "metrics.json").exists()


# -------------------------------------------------------------------------------------------------- arguments


def test_cli_arguments_are_checked_before_any_work(work, capsys):
    w, cfg = work
    run = ("run", "adaped.remark1", "--config", cfg)
    taken = w / "a_file"
    taken.write_text("mine")
    locked = Path("/proc/fedrepro-test") if os.geteuid() == 0 else w / "locked" / "out"
    if os.geteuid() != 0:
        locked.parent.mkdir()
        locked.parent.chmod(0o500)
    before = snapshot(w)
    one_error(fedrepro(*run, "--seed", "-1", "--out", w / "x"), "--seed", "-1")
    here = partial(fedrepro_here, capsys)
    one_error(here(*run, "--seed", "one", "--out", w / "x"), "--seed", "'one'")
    one_error(fedrepro(*run, "--out", taken), "--out", taken, "not a directory")
    one_error(here(*run, "--out", locked), "--out", locked, "cannot write")
    one_error(here("run", "adaped.nope", "--out", w / "x", "--config", cfg), "experiments.nope", "remark1")
    one_error(here("aggregate", "--runs", _runs(w) / "seed0", "--out", _runs(w)), "--out", "not a file")
    for value in (".nan", ".inf", "-.inf", "1e999"):  # NaN/inf parameters used to run to "done" with null metrics
        line = one_error(here(*run, "--set", f"sigma_x2={value}", "--out", w / "x"), "params.sigma_x2")
        assert "not a finite number" in line
    assert snapshot(w) == before and not (w / "x").exists()


def test_a_closed_pipe_is_quiet():
    proc = subprocess.Popen(
        [sys.executable, "-m", "fedrepro", "list"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    proc.stdout.close()  # the reader goes away before the first line, as `| head -0` would
    err = proc.stderr.read().decode()
    assert proc.wait() == 141 and "Traceback" not in err and "BrokenPipeError" not in err, err


def test_results_honour_the_umask(work, tmp_path):
    w, cfg = work
    out = tmp_path / "run"
    ok(fedrepro("run", "adaped.remark1", "--scale", "quick", "--out", out, "--config", cfg, umask=0o022))
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in out.iterdir()} == {
        "metrics.json": "0o644",
        "history.parquet": "0o644",
        "config.yaml": "0o644",
    }
    part = tmp_path / "part"
    ok(fedrepro("data", "partition", PARTITION, "--out", part, "--config", cfg, umask=0o027))
    assert oct(part.stat().st_mode & 0o777) == "0o750"
    assert {oct(p.stat().st_mode & 0o777) for p in part.iterdir()} == {"0o640"}


# ------------------------------------------------------------------------------------------------ disk full

ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _fills_the_disk(write):
    """A stand-in for a writer that writes some bytes and then finds the disk full (as a real one would)."""

    def full(self, path, *a, **k):
        Path(path).write_bytes(b"partial")
        raise ENOSPC

    return full


def _temporaries(root: Path) -> list[str]:
    return [p.name for p in root.rglob(".*") if ".tmp" in p.name]


@pytest.mark.parametrize("command", ["run", "aggregate", "report"])
def test_a_full_disk_ends_in_one_line_naming_the_file(work, command, capsys, monkeypatch, tmp_path):
    """Each writer of the three commands finds the disk full mid-file: one line naming the file and "disk full", the
    file that was there untouched, and no temporary file left."""
    import pandas as pd

    from fedrepro.report import build

    w, cfg = work
    run_out = tmp_path / "run"
    if command == "run":
        monkeypatch.setattr(pd.DataFrame, "to_parquet", _fills_the_disk(pd.DataFrame.to_parquet))
        args, bad = ("run", "adaped.remark1", "--out", run_out, "--config", cfg), run_out / "history.parquet"
    elif command == "aggregate":
        monkeypatch.setattr(Path, "write_text", lambda self, *a, **k: _fills_the_disk(None)(None, self))
        bad = _runs(w) / "summary.json"
        args = ("aggregate", "--runs", _runs(w) / "seed0", _runs(w) / "seed1", "--out", bad)
    else:
        monkeypatch.setattr(build, "write_csv", lambda path, report: _fills_the_disk(None)(None, path))
        bad = w / "results" / "report" / "replication.csv"
        args = ("report", "--out-dir", bad.parent, "--config", cfg)
    before = snapshot(w)
    line = one_error(fedrepro_here(capsys, *args), bad, "disk full")
    assert "No space left on device" in line
    assert snapshot(w) == before and _temporaries(w) == [] and _temporaries(tmp_path) == []
    assert not (run_out / "metrics.json").exists()


@pytest.fixture
def full_tmpfs(tmp_path):
    """A real, tiny filesystem (tmpfs, 128 KiB) with one page left: root only; skipped where mount is refused."""
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.decode().strip() or 'not root'})")
    try:
        with open(mnt / "filler", "wb") as fh:  # leave room for one small file only
            fh.write(b"\0" * (128 * 1024 - 4096))
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_really_full_disk_ends_in_one_line(work, full_tmpfs):
    """The same on a real full filesystem, for the three commands as processes."""
    w, cfg = work
    big = {"x" * 100: list(range(4000))}  # a summary too large for what is left
    runs = _runs(w)
    for seed in (0, 1):
        f = runs / f"seed{seed}" / "metrics.json"
        f.write_text(json.dumps({**json.loads(f.read_text()), "versions": big}))
    out = full_tmpfs / "summary.json"
    one_error(fedrepro("aggregate", "--runs", runs / "seed0", runs / "seed1", "--out", out), out, "disk full")
    one_error(
        fedrepro("report", "--out-dir", full_tmpfs / "report", "--config", cfg), full_tmpfs / "report", "disk full"
    )
    one_error(
        fedrepro("run", "adaped.remark1", "--out", full_tmpfs / "run", "--config", cfg), full_tmpfs / "run", "disk full"
    )
    assert _temporaries(full_tmpfs) == [] and not (full_tmpfs / "run" / "metrics.json").exists()
    assert sorted(p.name for p in full_tmpfs.iterdir() if p.is_file()) == ["filler"]


# ----------------------------------------------------------------------------------------------- interruptions


@pytest.mark.parametrize(
    "sig, status, word",
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated (SIGTERM)")],
    ids=["ctrl-c", "sigterm"],
)
def test_a_signal_during_a_run_ends_in_one_line_with_its_status(tmp_path, sig, status, word):
    """SIGINT (what Ctrl-C sends) or SIGTERM (a scheduler's stop) in the middle of a run: exit 130 / 143, one line on
    stderr, no traceback, no metrics."""
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "fedrepro", "run", "ppsgd.fig1a_synthetic", "--scale", "quick"]
    cmd += ["--set", "niter=100000", "--set", "n_users=20", "--out", str(out)]
    env = {**os.environ, "FEDREPRO_PROGRESS": "0", "OMP_NUM_THREADS": "1"}
    env.pop("FEDREPRO_WORKFLOW_CONFIG", None)
    # the child starts with SIGINT at its default, as from a terminal: a test suite started in the background (`cmd
    # &` in a script) inherits SIGINT ignored, and Python then leaves it ignored, as it should for such a job
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdout.readline().startswith("[fedrepro] ppsgd.fig1a_synthetic")  # the run has started
    time.sleep(1.0)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == status, err[-3000:]
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err[-3000:]
    assert word in err and "`run`" in err
    assert not (out / "metrics.json").exists() and _temporaries(tmp_path) == []


def test_ctrl_c_while_a_result_is_written_leaves_nothing_half_written(work, capsys, monkeypatch, tmp_path):
    import pandas as pd

    def interrupted(self, path, *a, **k):
        Path(path).write_bytes(b"partial")
        raise KeyboardInterrupt

    w, cfg = work
    out = tmp_path / "run"
    monkeypatch.setattr(pd.DataFrame, "to_parquet", interrupted)
    r = fedrepro_here(capsys, "run", "adaped.remark1", "--out", out, "--config", cfg)
    assert r.returncode == 130 and r.stderr.count("\n") == 1 and "interrupted" in r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["config.yaml"]  # written before; no history, no metrics


@pytest.mark.slow
def test_killed_run_resumes_with_the_time_of_both_attempts(tmp_path):
    """kill -9 in the middle of a training run (reusing the kill-and-resume test's experiment), then the same
    command again: it completes, its wall_time_s counts the killed attempt up to its last checkpoint and the resumed
    attempt, wall_time_resumed_s the latter, and the finished partition it read is unchanged."""
    from kill_resume_project import run_cmd as _cmd
    from kill_resume_project import write_project as _setup

    cfg = _setup(tmp_path)
    finished = snapshot(tmp_path / "results")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "FEDREPRO_PROGRESS": "0"}
    out = tmp_path / "killed"
    t0 = time.perf_counter()
    proc = subprocess.Popen(_cmd(cfg, out), cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while time.perf_counter() - t0 < 120 and proc.poll() is None:
        if len(list(out.glob(".checkpoints/*.pt"))) >= 2:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    lived = time.perf_counter() - t0
    assert not (out / "metrics.json").exists()
    ok(subprocess.run(_cmd(cfg, out), cwd=ROOT, env=env, capture_output=True, text=True))
    m = json.loads((out / "metrics.json").read_text())
    before = m["wall_time_s"] - m["wall_time_resumed_s"]
    assert 0 < before < lived and m["wall_time_resumed_s"] > 0
    assert not (out / ".checkpoints").exists()
    assert snapshot(tmp_path / "results") == finished


@pytest.mark.slow
def test_workflow_runs_where_paths_have_spaces_and_non_ascii_letters(tmp_path):
    """Every rule's shell command quotes its paths: results, logs and data under 'dir with spaces é/'."""
    home = tmp_path / "dir with spaces é"
    home.mkdir()
    cfg = write_config(home)
    cfg_text = yaml.safe_load(cfg.read_text())
    cfg_text["data"]["mirror"] = None  # political's data (unpinned): left out
    cfg.write_text(yaml.safe_dump(cfg_text))
    args = [SNAKEMAKE, "--cores", "2", "--nolock", "--configfile", ROOT / "config" / "config.yaml", cfg]
    r = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert (home / "results" / "report" / "replication.csv").is_file()
    assert (home / "figures" / "data" / f"{PARTITION}.png").is_file()
    assert _report_row(home)["status"] == "reproduced"


@pytest.mark.slow
def test_workflow_notices_a_deleted_seed_and_names_a_garbage_one(tmp_path):
    """Snakemake on the private workflow: the default target warns once about the experiment left out for want of
    data; a deleted seed is rebuilt (identical metrics) and nothing else finished is touched; a garbage seed stops
    the aggregate job with the file named on the console."""
    cfg = write_config(tmp_path)
    cfg_text = yaml.safe_load(cfg.read_text())
    cfg_text["data"]["mirror"] = None  # political's data: unavailable, left out
    cfg.write_text(yaml.safe_dump(cfg_text))
    args = [SNAKEMAKE, "--cores", "2", "--nolock", "--configfile", ROOT / "config" / "config.yaml", cfg]
    snake = lambda *extra: subprocess.run([*args, *extra], cwd=ROOT, capture_output=True, text=True)  # noqa: E731
    r = ok(snake())
    assert (r.stdout + r.stderr).count("left out of the default target") == 1
    assert f"{ELECTION}: adaped.political" in r.stdout + r.stderr
    seed0, seed1 = _runs(tmp_path) / "seed0", _runs(tmp_path) / "seed1"
    kept, metrics = snapshot(seed0), json.loads((seed1 / "metrics.json").read_text())
    (seed1 / "metrics.json").unlink()
    dry = ok(snake("-n"))
    assert "Nothing to be done" not in dry.stdout + dry.stderr and "seed1/metrics.json" in dry.stdout
    ok(snake())
    again = json.loads((seed1 / "metrics.json").read_text())
    assert again["metrics"] == metrics["metrics"] and again["checks"] == metrics["checks"]
    assert snapshot(seed0) == kept
    # a deleted history (which the figures and the privacy stage read): the message says the workflow rebuilds it,
    # and it does (its run is redone: the default target asks for every file of every run)
    (seed1 / "history.parquet").unlink()
    with pytest.raises(ResultError, match=r"run history not found; run the workflow again \(`snakemake --cores 2`\)"):
        read_history(seed1)
    dry = ok(snake("-n"))
    assert "seed1/history.parquet" in dry.stdout, dry.stdout[-3000:]
    ok(snake())
    assert (seed1 / "history.parquet").is_file() and snapshot(seed0) == kept
    (seed0 / "metrics.json").write_text("{ garbage")
    kept1 = snapshot(seed1)
    r = snake()
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "Traceback" not in out, out[-3000:]
    shown = [line for line in out.splitlines() if line.startswith("fedrepro: error:")]
    assert len(shown) == 1 and f"{seed0 / 'metrics.json'}: not a valid run metrics file" in shown[0], out[-3000:]
    assert snapshot(seed1) == kept1


# ------------------------------------------------ nothing destroyed, nothing misread (output paths, strict reading)


def _fail(capsys, *args) -> str:
    rc = main([str(a) for a in args])
    err = capsys.readouterr().err
    assert rc != 0 and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    "out, why",
    [
        ("", "is empty"),
        (".", "is the checkout"),
        ("..", "a directory holding the checkout"),
        ("config", "inside config/, a directory of the checkout that git tracks"),
        ("config/config.yaml", "inside config/"),
        ("src/x", "inside src/"),
        (".git/x", "inside .git/"),
        ("README.md", "inside README.md, a file of the checkout"),
        ("archive/x", "inside archive/"),
        ("x" * 300, "longer than the file system allows"),
        ("/dev/null", "a device or other special file"),
    ],
)
def test_run_refuses_an_output_path_it_must_not_write(capsys, out, why):
    before = snapshot(ROOT / "config")
    err = _fail(capsys, "run", "adaped.fig3b", "--set", "reps=2", "--out", out)
    assert why in err and "--out" in err
    assert snapshot(ROOT / "config") == before


@pytest.mark.parametrize("command", [["report", "--out-dir"], ["tables", "adaped", "--out-dir"]])
def test_report_and_tables_refuse_the_checkout(capsys, command):
    assert "is empty" in _fail(capsys, *command, "")
    assert "is the checkout" in _fail(capsys, *command, ".")


def test_a_partition_is_never_written_over_what_fedrepro_did_not_make(capsys, tmp_path):
    """`data partition --out DIR` at a directory holding other files leaves every file in place."""
    d = tmp_path / "mine"
    (d / "sub").mkdir(parents=True)
    (d / "notes.txt").write_text("keep me")
    (d / "sub" / "x.bin").write_bytes(b"\1\2")
    before = snapshot(d)
    err = _fail(capsys, "data", "partition", "digits_dirichlet_a05", "--out", d)
    assert "is not a partition fedrepro made" in err and "notes.txt" in err
    assert snapshot(d) == before and sorted(p.name for p in tmp_path.iterdir()) == ["mine"]
    # a partition fedrepro made is replaced; with a stranger file beside it, it is not
    part = tmp_path / "part"
    assert main(["data", "partition", "digits_dirichlet_a05", "--out", str(part)]) == 0
    assert main(["data", "partition", "digits_dirichlet_a05", "--out", str(part)]) == 0
    (part / "mine.txt").write_text("x")
    capsys.readouterr()
    assert "holds files that are not a partition's: mine.txt" in _fail(
        capsys, "data", "partition", "digits_dirichlet_a05", "--out", part
    )
    assert (part / "mine.txt").read_text() == "x"


def test_a_failing_command_leaves_no_empty_output_directory(capsys, tmp_path):
    out = tmp_path / "a" / "b" / "run"
    _fail(capsys, "run", "adaped.fig3b", "--set", "reps=-1", "--out", out)
    assert not (tmp_path / "a").exists()
    keep = tmp_path / "kept"
    keep.mkdir()
    _fail(capsys, "run", "adaped.fig3b", "--set", "reps=-1", "--out", keep)
    assert keep.is_dir()  # it was there before: not removed


def test_a_full_disk_while_a_partition_is_written_ends_in_one_line(full_tmpfs):
    """No SIGBUS (the features file is allocated before it is mapped), no temporaries left."""
    before = sorted(p.name for p in full_tmpfs.iterdir())
    r = fedrepro("data", "partition", "digits_dirichlet_a05", "--out", full_tmpfs / "part")
    one_error(r, "disk full")
    assert r.returncode == 2 and sorted(p.name for p in full_tmpfs.iterdir()) == before


def test_duplicate_yaml_keys_are_refused_naming_file_line_and_key(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("scale: default\nseeds: {quick: [0], paper: [0]}\nscale: paper\n")
    with pytest.raises(ConfigError, match=r"c\.yaml:3:1: .*duplicate key 'scale' \(first at line 1\)"):
        read_yaml(f)
    f.write_text("experiments:\n  a:\n    params: {n: 14, m: 2}\n  a:\n    params: {n: 40}\n")
    with pytest.raises(ConfigError, match=r":4:3: .*duplicate key 'a'"):
        read_yaml(f)
    f.write_text("params:\n  n: 14\n  m: 1\n  n: 40\n")
    with pytest.raises(ConfigError, match=r":4:3: .*duplicate key 'n'"):
        read_yaml(f)
    # a key merged in with << may be overridden: not a duplicate
    f.write_text("base: &b {n: 14, m: 1}\nexp:\n  <<: *b\n  n: 40\n")
    assert read_yaml(f)["exp"] == {"n": 40, "m": 1}
    # every configuration file of the project reads strictly
    cfg = load_global()
    for key in ("papers", "targets"):
        assert cfg[key]
    for paper in cfg["papers"]:
        read_yaml(REPO_ROOT / cfg["papers"][paper])


def test_a_misshapen_registry_row_is_refused_naming_file_and_line(tmp_path):
    lines = (REPO_ROOT / "config" / "targets" / "adaped.csv").read_text().splitlines(keepends=True)
    for bad, why in (
        ('"' + lines[5], "fields where the header has 18"),  # a stray quote swallows fields
        (lines[5].replace(",", ",,", 1), "19 fields where the header has 18"),  # a stray comma
        (lines[5].rstrip("\n") + ',"\n', "a quoted field runs on to line"),  # an unclosed quote
    ):
        f = tmp_path / "r.csv"
        f.write_text("".join([*lines[:5], bad, *lines[6:]]))
        with pytest.raises(ConfigError, match=rf"r\.csv:6: .*{why}"):
            load_registry(f, "adaped")
    assert len(load_registry(REPO_ROOT / "config" / "targets" / "adaped.csv", "adaped")) > 100


def test_out_of_memory_ends_in_one_line(capsys, monkeypatch, tmp_path):
    """A size no memory bound covers (--set batch_size=100000000 under FedHDP's protocol ends in numpy's MemoryError):
    one line naming the allocation, no traceback, no output directory left."""

    def oom(args):
        from fedrepro.cli import _writable

        _writable(args.out, "--out", is_dir=True)
        raise MemoryError("Unable to allocate 74.5 GiB for an array with shape (100, 100000000) and data type float64")

    monkeypatch.setattr("fedrepro.cli.cmd_run", oom)
    err = _fail(capsys, "run", "fedhdp.noniid_mnist", "--out", tmp_path / "out")
    assert "out of memory in `run` (Unable to allocate 74.5 GiB" in err and "--set batch_size" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "key, value, why",
    [
        ("results_dir", ".", "is the checkout"),
        ("figures_dir", "src", "is inside src/"),
        ("logs_dir", "config/logs", "is inside config/"),
        ("data.dir", ".git", "is inside .git/"),
    ],
)
def test_a_configured_output_directory_inside_the_checkouts_sources_is_refused(capsys, key, value, why):
    err = _fail(capsys, "list", "--config-set", f"{key}={value}")
    assert f"{key}: {value!r} {why}" in err
