"""A small report model from hand-made summaries (no workflow run): one paper whose Table 3 has a reproduced, a
deviating, a not-comparable and a not-run cell (and a variance sharing a cell with its number), a figure with its
claim and check, a paper inconsistency, an extra table and rows waiting for an offline dataset."""

from __future__ import annotations

import math
import struct
import zlib
from pathlib import Path

from fedrepro.report import model as m
from fedrepro.report.registry import Target
from fedrepro.report.status import evaluate


def target(**kw) -> Target:
    base = dict(
        paper="adaped",
        id="X",
        artifact="Table 3",
        table_row="local",
        table_col="n = 10",
        setting="",
        metric="MSE",
        unit="",
        value=10.0,
        value_text="10.00",
        pm=0.1,
        pm_text="0.10",
        pm_reading="se",
        runs=None,
        tolerance=0.005,
        experiment="adaped.table3",
        key="mse",
        row="printed",
        ci=True,
        needs="",
        note="",
    )
    base.update(kw)
    return Target(**base)


def summary(mean: float, std: float = 0.0, n: int = 5, checks: dict | None = None, scale: str = "paper") -> dict:
    return {
        "effective_scale": scale,
        "deterministic": False,
        "seeds": list(range(n)),
        "metrics": {"mse": {"mean": mean, "std": std, "se": std / math.sqrt(n), "n": n, "values": []}},
        "checks": checks or {},
    }


ENTRY = {"kind": "gaussian_remark1", "params": {}}
OFFLINE = dict(ENTRY, datasets=["election_county_returns"])  # never available in the test's data dir
CLAIM = dict(key="check:a", value=None, value_text="", pm=None, pm_text="", pm_reading="", table_row="", table_col="")
PASS = {"a": {"passed": True, "detail": "fine"}}
FAIL = {"a": {"passed": False, "detail": "the DP curve ends 62% above the personalized line"}}

# id -> (target fields, summary or None, config entry, expected status)
ROWS = {
    "T3.ok": (dict(), summary(10.01, 0.05), ENTRY, "reproduced"),
    "T3.far": (
        dict(table_col="n = 20", value=5.0, value_text="5.00", pm=0.05, pm_text="0.05"),
        summary(6.0, 0.05),
        ENTRY,
        "deviates",
    ),
    "T3.far.var": (
        dict(table_col="n = 20", value=0.13, value_text="0.13", pm=None, pm_text="", pm_reading=""),
        summary(0.13, 0.001),
        ENTRY,
        "reproduced",
    ),
    "T3.quick": (dict(table_row="global"), summary(10.0, scale="quick"), ENTRY, "not comparable"),
    "T3.offline": (
        dict(table_row="global", table_col="n = 20", experiment="adaped.table3_offline"),
        None,
        OFFLINE,
        "not run",
    ),
    "F1a.claim": (
        dict(CLAIM, artifact="Figure 1a", experiment="adaped.fig1a", metric="DP recovers personalized"),
        summary(0, checks=FAIL),
        ENTRY,
        "deviates",
    ),
    "F1a.sim": (
        dict(CLAIM, artifact="Figure 1a", experiment="adaped.fig1a", metric="simulation = closed form", row="check"),
        summary(0, checks=PASS),
        ENTRY,
        "passes",
    ),
    "C.sum": (
        dict(CLAIM, artifact="Sec. 4 text", experiment="adaped.fig1a", metric="gains add up", row="consistency"),
        summary(0, checks=FAIL),
        ENTRY,
        "fails",
    ),
    "X.fm.acc": (
        dict(
            artifact="Extra table: Table 1 protocol on Fashion-MNIST",
            experiment="adaped.table1_fmnist",
            table_row="AdaPeD",
            table_col="acc",
            row="check",
            value=None,
            value_text="",
            pm=None,
            pm_text="",
            pm_reading="",
        ),
        summary(88.0, 0.2),
        ENTRY,
        "shown",
    ),
    "T1.offline": (
        dict(
            artifact="Table 1",
            table_row="FedAvg",
            table_col="CIFAR-10",
            experiment="adaped.table1",
            value=60.86,
            value_text="60.86",
            pm=0.94,
            pm_text="0.94",
        ),
        None,
        OFFLINE,
        "not run",
    ),
}


def png(path: Path, width: int = 60, height: int = 40) -> Path:
    """A small grey PNG (no plotting library needed)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\x00" + bytes([200]) * width for _ in range(height))
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )
    return path


def fixture_report(cfg, tmp_path: Path) -> m.Report:
    results = [
        evaluate(cfg, target(id=rid, **fields), "paper", summ, entry) for rid, (fields, summ, entry, _) in ROWS.items()
    ]
    for r, (rid, (*_, expected)) in zip(results, ROWS.items()):
        assert r.status == expected, (rid, r.status, r.reason)
    fig = m.Figure("fig1a", "Figure 1a", "MSE vs eps0", "adaped.fig1a", png(tmp_path / "fig1a.png"))
    fig.rows = m.figure_rows(fig.artifact, fig.experiment, results)
    paper = m.PaperReport(
        paper="adaped",
        title="A fixture paper",
        config_file="config/adaped.yaml",
        results=results,
        calibrations=[],
        gaps=[("experiments.table3.params.m", "3", "m unstated")],
        figures=[fig],
        tables_dir=tmp_path / "tables",
    )
    return m.Report(mode="default", papers=[paper])


def expected_status(row_id: str) -> str:
    return ROWS[row_id][3]
