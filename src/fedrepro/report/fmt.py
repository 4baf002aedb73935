"""Number formatting shared by the tables and the report: rebuilt values shown one decimal finer than printed."""

from __future__ import annotations


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
