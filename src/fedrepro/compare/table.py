"""The experiment's table with a user's method as one more row: Markdown, CSV, the paired differences and, where the
experiment has a figure, the curves of every method.

Cells are mean ± standard error over the seeds (fedrepro.aggregate.stats); the user's row is labelled as such and is
never judged against a printed value. A row whose method failed in a seed shows ``failed`` and the reason below the
table (its other seeds are not averaged: a failed seed is never averaged away).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from fedrepro.aggregate import stats
from fedrepro.compare.paired import RULE, holm, paired_difference
from fedrepro.compare.protocol import Comparison, Row
from fedrepro.experiments.method_slot import ORIGIN, YOURS
from fedrepro.runio import atomic_write


def _values(row: Row, column: str) -> list[float]:
    return [math.nan if c is None else float(c.get(column, math.nan)) for c in row.cells]


def _cell(row: Row, column: str, digits: int = 2) -> tuple[str, dict]:
    vals = _values(row, column)
    if any(c is None for c in row.cells):
        return "failed", {"mean": math.nan, "se": math.nan, "n": 0}
    s = stats(vals)
    if s["n"] == 0:
        return "—", {"mean": math.nan, "se": math.nan, "n": 0}
    return f"{s['mean']:.{digits}f} ± {s['se']:.{digits}f} (n={s['n']})", s


def _digits(values: list[float]) -> int:
    """Decimals of a column: 2 for accuracies in % (values >= 1), 4 for the small numbers of other metrics (a mean
    KL of 0.14)."""
    finite = [abs(v) for v in values if math.isfinite(v)]
    return 2 if not finite or max(finite) >= 1 else 4


def _epsilons(comp: Comparison) -> dict | None:
    """Each row's ε per column that states one (the protocol's accountant; equal over seeds), or None."""
    out = {}
    for row in comp.rows:
        for col in comp.columns:
            if col.startswith("ε"):
                vals = [c[col] for c in row.cells if c is not None and col in c]
                if vals:
                    out.setdefault(row.name, {})[col] = vals[0]
    return out or None


def _strict(obj):
    """``obj`` as strict JSON takes it (no NaN or Infinity tokens): an infinite number as the text "inf" / "-inf"
    (PPSGD's alpha Q = inf is a setting, not a missing value), NaN as null."""
    if isinstance(obj, dict):
        return {k: _strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_strict(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    return obj


def write_comparison(comp: Comparison, out: Path, figure: bool) -> list[Path]:
    """table.md, table.csv, differences.csv and (``figure``) figure.png under ``out``; returns the paths written."""
    out = Path(out)
    exp, cols = comp.experiment, comp.columns
    mine = comp.rows[-1]
    digits = {c: _digits([v for row in comp.rows for v in _values(row, c)]) for c in cols}
    records, body = [], []
    for row in comp.rows:
        cells = []
        for col in cols:
            text, s = _cell(row, col, digits[col])
            cells.append(text)
            records.append(
                dict(
                    method=row.name,
                    origin=row.origin,
                    column=col,
                    mean=s["mean"],
                    se=s["se"],
                    n=s["n"],
                    seeds=" ".join(map(str, comp.seeds)),
                    failed="; ".join(row.failures),
                )
            )
        body.append([row.name, ORIGIN[row.origin], *cells])
    pairs = []
    for row in comp.rows[:-1]:
        same = comp.slot.paired(exp.params, row.name, comp.by_construction)
        has = {c for cells in row.cells for c in (cells or {})}  # columns the baseline has (DP-FedAvg: no np)
        # an epsilon column is what the protocol's accountant gives a row, not a seed's outcome: never paired
        for col in [c for c in cols if c in has and (same is None or c in same) and not c.startswith("ε")]:
            pairs.append((row.name, col, paired_difference(_values(mine, col), _values(row, col))))
    judged = holm([d for _, _, d in pairs])  # the table's comparisons as one family
    diffs = [
        dict(
            method=mine.name,
            baseline=name,
            column=col,
            diff=d.mean,
            se=d.se,
            n=d.n,
            p_value=d.p_value,
            resolved=d.resolved,
            more_seeds=d.more_seeds,
        )
        for (name, col, _), d in zip(pairs, judged)
    ]
    lines = [
        f"# {exp.id} with {mine.name}",
        "",
        f"{exp.description}",
        "",
        f"Scale {exp.scale}; seeds {', '.join(map(str, comp.seeds))}; every cell is the mean ± standard error over "
        f"the seeds of the {comp.slot.what}"
        + (comp.slot.private_text if comp.private else "")
        + f". The row {mine.name} is a method from outside the papers: it is never judged against a printed value.",
        "",
        *_md(["method", "row", *cols], body),
    ]
    if comp.privacy_note:
        lines += ["", f"{mine.name}: {comp.privacy_note}."]
    if comp.method_args:
        lines += ["", f"{mine.name}'s arguments: " + ", ".join(f"{k}={v!r}" for k, v in comp.method_args.items()) + "."]
    if comp.lr:
        lines += ["", f"{mine.name}'s learning rates: {', '.join(f'{x:g}' for x in comp.lr)}: {comp.slot.lr_text}."]
    if mine.failures:
        lines += ["", f"**{mine.name} failed** ({len(mine.failures)} of {len(comp.seeds)} seeds):", ""]
        lines += [f"- {f}" for f in mine.failures]
    lines += ["", f"## {mine.name} minus each baseline", "", f"Rule: {RULE} ({len(diffs)} comparisons here)."]
    lines += [f"Columns: {comp.slot.paired_text}.", ""] if comp.slot.paired_text else [""]
    dbody = [
        [
            r["baseline"],
            r["column"],
            "—"
            if r["n"] == 0
            else f"{r['diff']:+.{digits[r['column']]}f} ± {r['se']:.{digits[r['column']]}f} (n={r['n']})",
            "—" if math.isnan(r["p_value"]) else f"{r['p_value']:.3g}",
            "yes" if r["resolved"] else ("no" + (f": run {r['more_seeds']} more seed(s)" if r["more_seeds"] else "")),
        ]
        for r in diffs
    ]
    lines += _md(["baseline", "column", "difference", "p (paired t)", "resolved (Holm)"], dbody)
    written = [out / "table.md", out / "table.csv", out / "differences.csv"]
    text = "\n".join(lines) + "\n"
    atomic_write(written[0], lambda p: p.write_text(text, encoding="utf-8"))
    atomic_write(written[1], lambda p: pd.DataFrame(records).to_csv(p, index=False))
    atomic_write(written[2], lambda p: pd.DataFrame(diffs).to_csv(p, index=False))
    if figure and any(row.curves for row in comp.rows):
        written.append(out / "figure.png")
        _figure(comp, written[-1])
    return written


def write_record(comp: Comparison, out: Path, spec: str, inputs, wall_s: float) -> Path:
    """``compare.json``: what the table was made from, as a run's metrics.json records it (experiment, scale, seeds,
    resolved parameters and their digest, the method file's bytes and class, the interface version, fedrepro's code,
    the input data's digests, the baseline runs read or "rebuilt", the seeds resumed from a killed run, wall time)."""
    import json

    from fedrepro.learning.engine import ALGORITHM_API_VERSION
    from fedrepro.provenance import code_version, params_digest

    exp = comp.experiment
    record = {
        "experiment": exp.id,
        "scale": exp.scale,
        "seeds": comp.seeds,
        "params": exp.params,
        "params_digest": params_digest(exp.params),
        "method": {
            "spec": spec,
            "row": comp.rows[-1].name,
            "file_sha256": comp.method_sha256,
            "sources": comp.method_sources,  # the method's code: the file and the modules it may import
            "args": comp.method_args,
            "lr": comp.lr or "the protocol's",
            "algorithm_api_version": ALGORITHM_API_VERSION,
        },
        "private": comp.private,
        "privacy": comp.privacy_note or None,
        "by_construction": comp.by_construction,
        "epsilon": _epsilons(comp),
        "code_version": code_version(),
        "inputs": inputs or {},
        "baselines": {str(s): d for s, d in comp.baseline_runs.items()} or "rebuilt",
        "resumed_seeds": comp.resumed,
        "failed_seeds": len(comp.rows[-1].failures),
        "wall_s": round(wall_s, 3),
    }
    path = Path(out) / "compare.json"
    text = json.dumps(_strict(record), indent=2, sort_keys=True, default=str, allow_nan=False) + "\n"
    atomic_write(path, lambda p: p.write_text(text, encoding="utf-8"))
    return path


def _md(header: list[str], body: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(r) + " |" for r in body),
    ]


def _figure(comp: Comparison, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for row in comp.rows:
        if not row.curves:
            continue
        # mean over seeds and its standard error (sample std / sqrt(n), ddof 1), drawn as a band of ± 1 se
        curve = pd.concat(row.curves).groupby(["series", "x"], as_index=False)["y"].agg(["mean", "std", "count"])
        curve["se"] = (curve["std"] / curve["count"].pow(0.5)).fillna(0.0)
        for i, (series, g) in enumerate(curve.groupby("series")):
            label = f"{row.name} {series}".strip()
            dashes = ("-", "--", ":", "-.")[i % 4]  # your row's series (e.g. one per epsilon or sigma) told apart
            mine = dict(linewidth=2.5, color="black", linestyle=dashes)
            line = ax.plot(
                g["x"], g["mean"], label=label, **(mine if row.origin == YOURS else dict(linewidth=1, alpha=0.8))
            )
            ax.fill_between(
                g["x"], g["mean"] - g["se"], g["mean"] + g["se"], color=line[0].get_color(), alpha=0.15, lw=0
            )
    ax.set_xlabel(comp.slot.x_label)
    ax.set_ylabel(comp.slot.y_label)
    ax.set_title(
        f"{comp.experiment.id} ({comp.experiment.scale}), mean ± standard error over {len(comp.seeds)} seed(s)",
        fontsize=9,
    )
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    atomic_write(path, lambda p: fig.savefig(p, format="png", dpi=120, metadata={"Software": None}))
    plt.close(fig)
