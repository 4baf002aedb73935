"""Formatting shared by the tables and the report pages: rebuilt values one decimal finer than printed, and the cells
of one report row."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedrepro.report import verdict as v

if TYPE_CHECKING:
    from fedrepro.report.status import Result


def decimals(text: str) -> int:
    text = text.strip()
    return len(text.split(".", 1)[1]) if "." in text else 0


def fmt_value(x: float | None, like: str = "", extra: int = 1) -> str:
    if x is None:
        return ""
    if "e" in like.lower():  # printed in scientific notation (1e-10): significant digits, not decimals
        mantissa = like.lower().split("e", 1)[0]
        return f"{x:.{decimals(mantissa) + extra}e}"
    if like:
        return f"{x:.{decimals(like) + extra}f}"
    return f"{x:.4g}"


def fmt_pm(mean: float | None, std: float | None, like: str = "") -> str:
    if mean is None:
        return ""
    s = fmt_value(mean, like)
    return s if std is None else f"{s} ± {fmt_value(std, like)}"


def printed(value_text: str, pm_text: str | None, unit: str = "") -> str:
    if not value_text:
        return ""
    s = value_text if not pm_text else f"{value_text} ± {pm_text}"
    return f"{s}{unit if unit == '%' else ''}"


WAITING = "Not run: waiting for data"  # the report section that says each fetch command once


def note_text(r: Result) -> str:
    return " — ".join(note_parts(r))


def note_parts(r: Result) -> list[str]:
    """The pieces of a row's note, in order: calibration, why it is not judged, how to run it, the evidence, how the
    printed value was read, the registry's note."""
    parts = []
    if r.calibration:
        parts.append(f"calibration: {r.calibration}")
    if r.waits_for:  # the data and its fetch command are said once per group, not per row
        parts.append(f"data unavailable offline: {', '.join(r.waits_for)} (see '{WAITING}')")
    elif r.status not in (v.REPRODUCED, v.CALIBRATED, v.PASSES) and r.reason:
        parts.append(r.reason)
    if r.status in (v.NOT_RUN, v.STALE) and r.command and not r.waits_for:
        parts.append(f"run: `{r.command}`")
    parts += r.evidence
    if r.reading and r.target.pm_reading:  # a printed ±, or a printed single run, and how it was read
        parts.append(r.reading)
    if r.target.note:
        parts.append(r.target.note)
    return parts


def rebuilt_text(r: Result) -> str:
    """mean ± standard error (n seeds), one decimal finer than printed."""
    if r.rebuilt is None:
        return ""
    s = fmt_pm(r.rebuilt, r.rebuilt_se, r.target.value_text)
    return f"{s} (n={r.n})" if r.n is not None else s


HEAD = [
    "id",
    "setting",
    "metric",
    "printed",
    "rebuilt (mean ± se, n seeds)",
    "diff",
    "tol",
    "status",
    "scale",
    "source",
    "note",
]


def cells(r: Result) -> list[str]:
    """A row's cells in the order of HEAD: its values, then its note."""
    return [*value_cells(r), note_text(r)]


def value_cells(r: Result) -> list[str]:
    """A row's cells in the order of HEAD but the note (the page writes the note from its parts)."""
    t = r.target
    return [
        t.id,
        t.setting,
        t.metric,
        printed(t.value_text, t.pm_text, t.unit),
        rebuilt_text(r),
        fmt_value(r.diff, t.value_text),
        fmt_value(r.tol, t.value_text),
        r.status,
        r.scale,
        r.source or ("run here" if r.rebuilt is not None else ""),
    ]
