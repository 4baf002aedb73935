"""County election parser (fedrepro.data.election) and the Sec. 4 political experiment, via the real mirror path."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from catalog_pins import data_cfg as _cfg

from fedrepro.config import REPO_ROOT
from fedrepro.data import catalog
from fedrepro.data.election import COLUMNS, check_returns_file, read_returns, republican_wins
from fedrepro.data.sources import dataset_files, fetch
from fedrepro.errors import DataError
from fedrepro.experiments import RunContext, get_kind

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "countypres_2000-2020_sample.csv"
DS = "election_county_returns"
FILE = "countypres_2000-2020.csv"
YEARS = [2000, 2004, 2008, 2012, 2016, 2020]

# Hand-read from the fixture: Republican plurality per county and election 2000..2020.
EXPECTED = {
    1001: [1, 1, 1, 1, 1, 1],  # Autauga AL
    4013: [1, 1, 1, 1, 1, 0],  # Maricopa AZ
    6037: [0, 0, 0, 0, 0, 0],  # Los Angeles CA
    12103: [0, 1, 0, 0, 1, 1],  # Pinellas FL (2004 and 2020 by a few hundred votes)
    13067: [1, 1, 1, 1, 0, 0],  # Cobb GA: 2020 only by mode; the Republican wins ELECTION DAY but loses the sum
    18167: [1, 1, 0, 0, 1, 1],  # Vigo IN
}  # Kalawao HI (15005) lacks 2008 -> dropped; the NA-fips rows (CT write-in, ME UOCAVA) -> dropped


def sample_check(path: Path) -> None:
    """the test fixture's check: the codebook's columns (the real check also wants every county of six elections)"""
    read_returns(path)


def with_sample_check(monkeypatch) -> None:
    """Stand the real election entry's content check in for one the 150-row fixture passes (test only)."""
    ds = catalog.get_dataset(DS)
    f = dataclasses.replace(ds.files[0], content_check=sample_check)
    monkeypatch.setitem(catalog.DATASETS, DS, dataclasses.replace(ds, files=(f,)))


@pytest.fixture
def mirrored(tmp_path, monkeypatch):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    shutil.copyfile(FIXTURE, mirror / FILE)
    with_sample_check(monkeypatch)
    return _cfg(tmp_path, mirror)


def _full_returns(path: Path, drop_state: str | None = None) -> None:
    """A synthetic file the size the codebook describes: 6 elections x 51 states and DC x 3,060 counties."""
    states = [f"S{i:02d}" for i in range(51)]
    rows = [
        (y, s, s, f"C{c}", 1000 * i + c, "US PRESIDENT", "X", "DEMOCRAT", 1, 2, 20220315, "TOTAL")
        for y in (2000, 2004, 2008, 2012, 2016, 2020)
        for i, s in enumerate(states)
        if not (drop_state == s and y == 2020)
        for c in range(60)
    ]
    pd.DataFrame(rows, columns=list(COLUMNS)).to_csv(path, index=False)


def test_content_check_asks_what_the_codebook_states(tmp_path):
    good = tmp_path / "full.csv"
    _full_returns(good)
    check_returns_file(good)
    with pytest.raises(DataError, match=r"2020 has returns of 50 states"):
        _full_returns(good, drop_state="S07")
        check_returns_file(good)
    with pytest.raises(DataError, match="counties, expected 51"):
        check_returns_file(FIXTURE)  # the 150-row sample is not the published file
    bad = tmp_path / "bad.csv"
    bad.write_text("<!DOCTYPE html><html><body>Guestbook</body></html>\n")
    with pytest.raises(DataError, match="columns"):
        check_returns_file(bad)


def test_fixture_has_the_upstream_columns():
    assert tuple(pd.read_csv(FIXTURE, nrows=1).columns) == COLUMNS


def test_parser_outcomes_on_fixture():
    data = republican_wins(FIXTURE, YEARS)
    assert dict(zip(data.fips.tolist(), data.outcomes.tolist())) == EXPECTED
    assert data.years == tuple(YEARS)
    assert data.stats["rows_fips_na"] == 3
    assert data.stats["counties_any_year"] == 7 and data.stats["counties_all_years"] == 6
    assert data.stats["counties_dropped_incomplete"] == 1


def _rows(fips, year, rows):
    return [
        dict(
            year=year,
            state="GEORGIA",
            state_po="GA",
            county_name="X",
            county_fips=fips,
            office="US PRESIDENT",
            candidate=c,
            party=p,
            candidatevotes=v,
            totalvotes=0,
            version=20220315,
            mode=md,
        )
        for c, p, v, md in rows
    ]


def test_total_row_is_not_double_counted_with_its_modes(tmp_path):
    # county 1: TOTAL rows for both and a mode breakdown of the Republican TOTAL. Summing everything would give
    # R = 200 > D = 120; the TOTAL rule gives R = 100 < D = 120.
    both = [
        ("R", "REPUBLICAN", 100, "TOTAL"),
        ("R", "REPUBLICAN", 60, "ELECTION DAY"),
        ("R", "REPUBLICAN", 40, "ABSENTEE"),
        ("D", "DEMOCRAT", 120, "TOTAL"),
    ]
    # county 2: modes only, summed: R = 30 + 30 > D = 50 although D wins the larger single mode
    modes = [
        ("R", "REPUBLICAN", 30, "ELECTION DAY"),
        ("R", "REPUBLICAN", 30, "ABSENTEE"),
        ("D", "DEMOCRAT", 45, "ABSENTEE"),
        ("D", "DEMOCRAT", 5, "ELECTION DAY"),
    ]
    # county 3: a tie is not a Republican win; an NA-vote row is ignored
    tie = [("R", "REPUBLICAN", 10, "TOTAL"), ("D", "DEMOCRAT", 10, "TOTAL"), ("G", "GREEN", None, "TOTAL")]
    rows = []
    for year in (2016, 2020):
        rows += _rows(13001, year, both) + _rows("13003", year, modes) + _rows("013005", year, tie)
    path = tmp_path / "c.csv"
    pd.DataFrame(rows, columns=list(COLUMNS)).to_csv(path, index=False)
    data = republican_wins(path, [2016, 2020])
    assert dict(zip(data.fips.tolist(), data.outcomes.tolist())) == {13001: [0, 0], 13003: [1, 1], 13005: [0, 0]}
    assert data.stats["rows_mode_dropped_total_present"] == 4
    assert data.stats["rows_votes_na"] == 2


def test_parser_rejects_a_file_without_the_columns(tmp_path):
    path = tmp_path / FILE
    path.write_text("a,b\n1,2\n")
    with pytest.raises(DataError, match="county_fips"):
        republican_wins(path)


def _brute_force_gain(y: np.ndarray) -> list[float]:
    """Independent O(m^2) implementation of the CV with eq. (6) as printed (with "-1", sigma2 centred at mu_i)."""
    m, T = y.shape
    n = T - 1
    gains = []
    for k in range(T):
        xbar = [float(np.mean([y[i, t] for t in range(T) if t != k])) for i in range(m)]
        se_loc = se_pers = 0.0
        for i in range(m):
            others = [xbar[l] for l in range(m) if l != i]
            mu = sum(others) / (m - 1)
            s2 = sum((v - mu) ** 2 for v in others) / (m - 2)
            a = n / (mu * (1 - mu) / s2 - 1 + n)
            se_loc += (xbar[i] - y[i, k]) ** 2
            se_pers += (a * xbar[i] + (1 - a) * mu - y[i, k]) ** 2
        gains.append(100 * (se_loc - se_pers) / se_loc)
    return gains


def test_political_kind_through_the_mirror(mirrored):
    stamp = fetch(mirrored, DS, offline=True)
    assert stamp.is_file()
    files = dataset_files(mirrored, DS)
    assert files[0].name == FILE and files[0].read_bytes() == FIXTURE.read_bytes()
    kind = get_kind("political_bernoulli")
    params = {"years": YEARS, "minus_one": True, "centre": "mu_i"}
    out = kind.fn(params, np.random.default_rng(0), RunContext("adaped.political", 0, data={DS: files}))
    y = np.array([EXPECTED[f] for f in sorted(EXPECTED)], dtype=float)
    gains = _brute_force_gain(y)
    assert out.metrics["m"] == len(EXPECTED)
    assert out.metrics["gain_pct"] == pytest.approx(np.mean(gains), rel=1e-10)
    assert out.metrics["gain_pct_fold_std"] == pytest.approx(np.std(gains, ddof=1), rel=1e-10)
    assert out.history["gain_pct"].tolist() == pytest.approx(gains, rel=1e-10)
    assert out.history["held_out_year"].tolist() == YEARS
    # the data are fixed: another seed gives the same numbers
    again = kind.fn(params, np.random.default_rng(1), RunContext("adaped.political", 1, data={DS: files}))
    assert again.metrics == out.metrics


def test_political_kind_needs_its_dataset():
    with pytest.raises(DataError, match=DS):
        get_kind("political_bernoulli").fn(
            {"years": YEARS, "minus_one": True, "centre": "mu_i"},
            np.random.default_rng(0),
            RunContext("adaped.political", 0),
        )


def test_missing_file_names_file_and_url(tmp_path):
    empty = tmp_path / "mirror"
    empty.mkdir()
    cfg = _cfg(tmp_path, empty)
    url = catalog.get_dataset(DS).files[0].url
    with pytest.raises(DataError) as err:
        fetch(cfg, DS, offline=True)
    assert FILE in str(err.value) and url in str(err.value)


def test_checksum_mismatch_is_an_error(mirrored, monkeypatch):
    ds = catalog.get_dataset(DS)
    pinned = dataclasses.replace(ds, files=(dataclasses.replace(ds.files[0], sha256="0" * 64),))
    monkeypatch.setitem(catalog.DATASETS, DS, pinned)
    with pytest.raises(DataError, match="checksum mismatch"):
        fetch(mirrored, DS, offline=True)
    assert not (Path(mirrored["data"]["dir"]) / DS / FILE).exists()  # no unverified copy left behind
    with pytest.raises(DataError):
        dataset_files(mirrored, DS)
