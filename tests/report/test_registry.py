"""The registry loader (fedrepro.report.registry): what a row may say about its printed value's uncertainty."""

import pytest

from fedrepro.errors import ConfigError
from fedrepro.report import verdict as v
from fedrepro.report.registry import COLUMNS, load_registry


def write(tmp_path, *rows: dict):
    base = dict.fromkeys(COLUMNS, "")
    base.update(artifact="Table 8", value="88.64", tolerance="0.005", experiment="p.e", key="acc", row="printed")
    base["ci"] = "false"
    lines = [",".join(COLUMNS)] + [",".join(dict(base, **r)[c] for c in COLUMNS) for r in rows]
    path = tmp_path / "p.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_single_is_read(tmp_path):
    (t,) = load_registry(write(tmp_path, dict(id="a", pm_reading="single")), "p")
    assert t.pm_reading == v.SINGLE and t.pm is None and t.runs is None


@pytest.mark.parametrize("column, text", [("pm", "0.5"), ("runs", "3")])
def test_a_single_run_with_a_pm_or_runs_is_rejected_naming_file_row_and_column(tmp_path, column, text):
    path = write(tmp_path, dict(id="ok", pm_reading="single"), {"id": "bad", "pm_reading": "single", column: text})
    with pytest.raises(ConfigError) as err:
        load_registry(path, "p")
    msg = str(err.value)
    assert "1 bad registry row(s)" in msg
    (line,) = [ln.strip() for ln in msg.splitlines() if "(bad)" in ln]
    assert line.startswith(f"{path}:3 (bad): {column}: a printed single run (pm_reading single) is one draw")
    assert f"empty {column}, or give the printed ± its reading" in line


def test_single_needs_a_printed_value_and_a_reading_needs_a_pm(tmp_path):
    path = write(
        tmp_path, dict(id="novalue", pm_reading="single", value="", key="check:c"), dict(id="nopm", pm_reading="se")
    )
    with pytest.raises(ConfigError) as err:
        load_registry(path, "p")
    msg = str(err.value)
    assert "(novalue): value: pm_reading single (a printed single run) without a printed value" in msg
    assert "(nopm): pm_reading: 'se' given without a printed ± (pm): give pm, write single" in msg
