"""Parser for MIT Election Data and Science Lab "County Presidential Election Returns 2000-2020".

File ``countypres_2000-2020.csv`` (catalog id ``election_county_returns``), one row per county x year x candidate
x mode, columns: year, state, state_po, county_name, county_fips, office, candidate, party, candidatevotes,
totalvotes, version, mode. Used by AdaPeD Sec. 4 "Political tendencies on county level" (Ozkara et al. 2023):
per county a 0/1 outcome per election, 1 if the Republican candidate got the most votes in the county.

Cleaning rules (each documented because the paper states none, docs/notes/adaped.md §7.16):
  * rows whose county_fips is missing/NA (e.g. statewide write-ins, overseas/UOCAVA or federal precincts) are
    dropped: they are not counties. county_fips is parsed as an integer (the file has "1001" or "01001" forms).
  * rows whose candidatevotes is missing are dropped (they carry no votes).
  * vote modes: up to 2016 every row has mode TOTAL; in 2020 some states report only per-mode rows (ABSENTEE,
    ELECTION DAY, EARLY VOTE, PROV, ...) and others only TOTAL. Per (county, year, candidate, party): if a TOTAL row
    exists it is used ALONE (so a file listing both a TOTAL and its mode breakdown is not double counted), else the
    mode rows are summed. A missing mode counts as TOTAL; any mode starting with "TOTAL" is a total.
  * the Republican candidate "got the most votes" iff the summed REPUBLICAN votes are strictly larger than every
    other (candidate, party) total in that county and year (a tie is not a win; the file's lumped "OTHER" row is
    one competitor, as published). County-years whose votes sum to 0 are treated as absent.
  * only counties present in ALL requested elections are kept (FIPS changes such as Shannon -> Oglala Lakota SD,
    Bedford city VA or Alaska's districts drop out this way); the number kept is reported, not forced.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from fedrepro.data.catalog import Dataset, RemoteFile, register
from fedrepro.errors import DataError

COLUMNS = (
    "year",
    "state",
    "state_po",
    "county_name",
    "county_fips",
    "office",
    "candidate",
    "party",
    "candidatevotes",
    "totalvotes",
    "version",
    "mode",
)
REQUIRED = ("year", "county_fips", "candidate", "party", "candidatevotes", "mode")
REPUBLICAN = "REPUBLICAN"
TOTAL_MODE = "TOTAL"


@dataclass
class CountyOutcomes:
    """Republican-win indicators: ``outcomes[i, t]`` for county ``fips[i]`` and election ``years[t]``."""

    fips: np.ndarray
    years: tuple[int, ...]
    outcomes: np.ndarray
    stats: dict[str, int] = field(default_factory=dict)


def read_returns(path: str | Path) -> pd.DataFrame:
    """Read the CSV; check its columns; return it with mode/party upper-cased (no rows dropped yet)."""
    path = Path(path)
    try:
        df = pd.read_csv(
            path,
            dtype={"county_fips": str, "candidate": str, "party": str, "mode": str},
            keep_default_na=True,
            low_memory=False,
        )
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read as the MIT county returns CSV: {exc}") from None
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise DataError(
            f"{path}: not the MIT county returns CSV: missing column(s) {', '.join(missing)} "
            f"(expected {', '.join(COLUMNS)})"
        )
    df["mode"] = df["mode"].fillna(TOTAL_MODE).str.strip().str.upper()
    df["party"] = df["party"].fillna("").str.strip().str.upper()
    df["candidate"] = df["candidate"].fillna("").str.strip().str.upper()
    return df


def county_candidate_votes(df: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, int]]:
    """Votes per (fips, year, candidate, party), TOTAL rows preferred over summed modes; plus drop counts."""
    stats = {"rows": int(len(df))}
    fips = pd.to_numeric(df["county_fips"], errors="coerce")
    votes = pd.to_numeric(df["candidatevotes"], errors="coerce")
    keep = fips.notna()
    stats["rows_fips_na"] = int((~keep).sum())
    stats["rows_votes_na"] = int((keep & votes.isna()).sum())
    keep &= votes.notna()
    d = pd.DataFrame(
        {
            "fips": fips[keep].astype(np.int64),
            "year": pd.to_numeric(df.loc[keep, "year"]).astype(int),
            "candidate": df.loc[keep, "candidate"],
            "party": df.loc[keep, "party"],
            "mode": df.loc[keep, "mode"],
            "votes": votes[keep].astype(float),
        }
    )
    key = ["fips", "year", "candidate", "party"]
    is_total = d["mode"].str.startswith(TOTAL_MODE)  # "TOTAL" (and a "TOTAL VOTES" spelling, should one occur)
    has_total = is_total.groupby([d[k] for k in key]).transform("any")
    stats["rows_mode_dropped_total_present"] = int((~is_total & has_total).sum())
    d = d[is_total | ~has_total]
    return d.groupby(key, as_index=False, sort=True)["votes"].sum(), stats


def republican_wins(path: str | Path, years=(2000, 2004, 2008, 2012, 2016, 2020)) -> CountyOutcomes:
    """0/1 outcome per county and election (1 = Republican plurality), counties present in all ``years``."""
    years = tuple(int(y) for y in years)
    votes, stats = county_candidate_votes(read_returns(path))
    votes = votes[votes["year"].isin(years)]
    by_cy = votes.groupby(["fips", "year"])
    total = by_cy["votes"].sum()
    rep = votes[votes["party"] == REPUBLICAN].groupby(["fips", "year"])["votes"].sum()
    rest = votes[votes["party"] != REPUBLICAN].groupby(["fips", "year"])["votes"].max()
    cy = pd.DataFrame({"total": total}).join(rep.rename("rep")).join(rest.rename("best_other")).fillna(0.0)
    stats["county_years_zero_votes"] = int((cy["total"] <= 0).sum())
    cy = cy[cy["total"] > 0]
    win = (cy["rep"] > cy["best_other"]).astype(np.int8).unstack("year")
    stats["counties_any_year"] = int(len(win))
    missing = [y for y in years if y not in win.columns]
    if missing:
        raise DataError(f"{path}: no county has returns for year(s) {missing}")
    win = win[list(years)].dropna()
    stats["counties_all_years"] = int(len(win))
    stats["counties_dropped_incomplete"] = stats["counties_any_year"] - stats["counties_all_years"]
    return CountyOutcomes(
        fips=win.index.to_numpy(dtype=np.int64), years=years, outcomes=win.to_numpy(dtype=np.int8), stats=stats
    )


#: What MIT Election Lab's codebook ("County Presidential Returns 2000-2020.md", in the Dataverse record) states
#: of this file: the columns above, county-level returns of the presidential elections 2000-2020 for the states
#: and DC. The codebook gives no row count per year, so the check asks for what it does state.
ELECTION_YEARS = (2000, 2004, 2008, 2012, 2016, 2020)
STATES_AND_DC = 51
MIN_COUNTIES = 3_000  # county-equivalents with returns, per year (the US has ~3,150; Alaska reports districts)


def check_returns_file(path: Path) -> None:
    """countypres_2000-2020.csv as MIT Election Lab's codebook states it: exactly its 12 columns, office US
    PRESIDENT, the six elections 2000-2020, each with returns of all 50 states and DC and >= 3,000 counties."""
    path = Path(path)
    try:
        header = pd.read_csv(path, nrows=0).columns.tolist()
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read as CSV: {exc}") from None
    if tuple(header) != COLUMNS:
        raise DataError(f"{path}: columns {', '.join(header[:14])} are not the codebook's {', '.join(COLUMNS)}")
    df = read_returns(path)
    offices = set(df["office"].dropna().astype(str).str.upper())
    if offices != {"US PRESIDENT"}:
        raise DataError(f"{path}: office values {sorted(offices)[:5]}, expected only US PRESIDENT")
    years = pd.to_numeric(df["year"], errors="coerce")
    found = sorted(int(y) for y in years.dropna().unique())
    if found != list(ELECTION_YEARS) or years.isna().any():
        raise DataError(f"{path}: election years {found}, expected {list(ELECTION_YEARS)}")
    for y in ELECTION_YEARS:
        rows = df[years == y]
        states = rows["state_po"].nunique()
        counties = pd.to_numeric(rows["county_fips"], errors="coerce").dropna().nunique()
        if states != STATES_AND_DC or counties < MIN_COUNTIES:
            raise DataError(
                f"{path}: {y} has returns of {states} states and {counties} counties, expected {STATES_AND_DC} "
                f"(50 states and DC) and >= {MIN_COUNTIES:,}"
            )


ELECTION = register(
    Dataset(
        id="election_county_returns",
        title="MIT Election Data and Science Lab, County Presidential Election Returns 2000-2020",
        files=(
            RemoteFile(
                name="countypres_2000-2020.csv",
                # Harvard Dataverse, doi:10.7910/DVN/VOQCHQ, file IQNIFU; format=original serves the CSV as deposited.
                url="https://dataverse.harvard.edu/api/access/datafile/:persistentId"
                "?persistentId=doi:10.7910/DVN/VOQCHQ/IQNIFU&format=original",
                # GAP: not pinned. No machine with internet access has fetched this file for fedrepro yet;
                # verified by its content check until then, and `python -m fedrepro data fetch
                # election_county_returns` on one prints the line that pins the sha256 it got. Dataverse lists an
                # MD5 per file (api/datasets/:persistentId), pooch's registry source; not pinned from here.
                sha256=None,
                content_check=check_returns_file,
            ),
        ),
        citation='MIT Election Data and Science Lab, 2018, "County Presidential Election Returns 2000-2020", '
        "https://doi.org/10.7910/DVN/VOQCHQ, Harvard Dataverse",
        licence="CC0 1.0",
    )
)
