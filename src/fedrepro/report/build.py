"""The replication report: results/report/replication.{md,csv,html}.

One row per registered target: printed value, rebuilt value, difference, tolerance, status, the scale it ran at
and a note (why it deviates or was not run, the command that would run it, known paper issues). Summary counts per
paper and status come first. Nothing time-dependent is written, so the same inputs give byte-identical reports.
"""

from __future__ import annotations

import base64
import csv
import html
import os
from pathlib import Path
from typing import Mapping

from fedrepro import paths
from fedrepro.config import load_paper, resolve_path
from fedrepro.report.gaps import gap_comments
from fedrepro.report.fmt import fmt_pm, fmt_value, printed
from fedrepro.report.registry import K_SIGMA
from fedrepro.report.status import DEVIATES, NOT_RUN, STATUSES, Result, evaluate_paper

CSV_COLUMNS = ["paper", "id", "artifact", "setting", "metric", "printed", "rebuilt", "rebuilt_std", "diff", "tol",
               "status", "scale", "ci", "reason", "command", "note"]


def note_text(r: Result) -> str:
    parts = []
    if r.status in (DEVIATES, NOT_RUN) and r.reason:
        parts.append(r.reason)
    if r.status == NOT_RUN and r.command:
        parts.append(f"run: `{r.command}`")
    if r.target.note:
        parts.append(r.target.note)
    return " — ".join(parts)


def _row_cells(r: Result) -> list[str]:
    t = r.target
    return [
        t.id, t.artifact, t.setting, t.metric, printed(t.value_text, t.pm_text, t.unit),
        fmt_pm(r.rebuilt, r.rebuilt_std, t.value_text), fmt_value(r.diff, t.value_text),
        fmt_value(r.tol, t.value_text), r.status, r.scale, note_text(r),
    ]


HEAD = ["id", "artifact", "setting", "metric", "printed", "rebuilt (mean ± std over seeds)", "diff", "tol", "status",
        "scale", "note"]


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def counts(results: list[Result]) -> dict[str, int]:
    c = {s: 0 for s in STATUSES}
    for r in results:
        c[r.status] += 1
    return c


def by_artifact(results: list[Result]) -> list[tuple[str, list[Result]]]:
    """The results grouped by the paper artifact they rebuild (Table 3, Figure 1a, ...), in registry order."""
    groups: dict[str, list[Result]] = {}
    for r in results:
        groups.setdefault(r.target.artifact or "(no artifact)", []).append(r)
    return list(groups.items())


def _count_text(group: list[Result]) -> str:
    c = counts(group)
    return f"{len(group)} target{'' if len(group) == 1 else 's'}: " + ", ".join(f"{c[s]} {s}" for s in STATUSES if c[s])


def write_csv(path: Path, by_paper: Mapping[str, list[Result]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(CSV_COLUMNS)
        for paper, results in by_paper.items():
            for r in results:
                t = r.target
                w.writerow([paper, t.id, t.artifact, t.setting, t.metric, printed(t.value_text, t.pm_text),
                            "" if r.rebuilt is None else repr(r.rebuilt),
                            "" if r.rebuilt_std is None else repr(r.rebuilt_std),
                            "" if r.diff is None else repr(r.diff), "" if r.tol is None else repr(r.tol),
                            r.status, r.scale, str(t.ci).lower(), r.reason, r.command, t.note])


PRIVACY_FIGURE = {"artifact": "Privacy accounting",
                  "caption": "epsilon vs rounds per accountant or noise level (privacy stage); every epsilon with its "
                             "library and version is in results/privacy/<paper>/epsilon.csv"}


def _figures(cfg: Mapping, paper: str) -> list[tuple[str, dict, Path]]:
    figs = load_paper(cfg, paper).get("figures") or {}
    out = [(name, spec, paths.figure_path(cfg, paper, name, "png")) for name, spec in figs.items()]
    return out + [("privacy_epsilon", PRIVACY_FIGURE, paths.figure_path(cfg, paper, "privacy_epsilon", "png"))]


def markdown(cfg: Mapping, scale: str, by_paper: Mapping[str, list[Result]], out_dir: Path) -> str:
    lines = ["# fedrepro replication report", "",
             f"Configured scale: **{scale}** (the `scale` column gives the scale each target actually ran at: an "
             "experiment whose quick settings equal the paper's runs at `paper` either way).", "",
             "## Summary", "", "| paper | " + " | ".join(STATUSES) + " | total |",
             "|---|" + "---|" * (len(STATUSES) + 1)]
    for paper, results in by_paper.items():
        c = counts(results)
        lines.append(f"| {paper} | " + " | ".join(str(c[s]) for s in STATUSES) + f" | {len(results)} |")
    lines += ["", "## Datasets", "", "| " + " | ".join(DATASET_HEAD) + " |", "|" + "---|" * len(DATASET_HEAD)]
    lines += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in dataset_rows(cfg, by_paper)]
    lines += ["", "## Tolerance rule", "",
              f"A numeric target is **reproduced** when |rebuilt mean − printed| ≤ max(floor, {K_SIGMA:g}·√(printed ±² "
              "+ rebuilt std²)); the floor is half a unit of the last printed digit. Rows judged by checks "
              "(figures, claims) are reproduced when every named check passes. `reference` rows are rebuilt numbers "
              "the paper does not print.", ""]
    for paper, results in by_paper.items():
        doc = load_paper(cfg, paper)
        lines += [f"## {paper}: {doc['title']}", ""]
        for artifact, group in by_artifact(results):
            lines += [f"### {artifact} — {_count_text(group)}", "", "| " + " | ".join(HEAD) + " |",
                      "|" + "---|" * len(HEAD)]
            lines += ["| " + " | ".join(_md_escape(c) for c in _row_cells(r)) + " |" for r in group]
            lines.append("")
        gaps = gap_comments(resolve_path(cfg["papers"][paper]))
        if gaps:
            lines += ["", f"### Defaults chosen where the paper is silent ({cfg['papers'][paper]}, `# GAP:` comments)",
                      "", "| key | value | why |", "|---|---|---|"]
            lines += [f"| `{k}` | {_md_escape(v)} | {_md_escape(c)} |" for k, v, c in gaps]
        figs = [(n, s, p) for n, s, p in _figures(cfg, paper) if p.is_file()]
        if figs:
            lines += ["", f"### Figures ({paper})", ""]
            for name, spec, png in figs:
                rel = Path(os.path.relpath(png, out_dir.resolve())).as_posix()
                lines += [f"**{spec['artifact']}** — {spec['caption']}", "", f"![{spec['artifact']}]({rel})", ""]
        lines.append("")
    return "\n".join(lines)


CSS = """body{font-family:sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top}th{background:#eee}
.reproduced{background:#d9f2d9}.deviates{background:#fde2c8}.not-run{background:#eee}.reference{background:#e3ecfa}
figure{display:inline-block;margin:1em;max-width:45%}img{max-width:100%}"""


def html_report(cfg: Mapping, scale: str, by_paper: Mapping[str, list[Result]]) -> str:
    e = html.escape
    out = ["<!doctype html><html><head><meta charset='utf-8'><title>fedrepro replication report</title>",
           f"<style>{CSS}</style></head><body><h1>fedrepro replication report</h1>",
           f"<p>Configured scale: <b>{e(scale)}</b>. Tolerance: |rebuilt − printed| ≤ max(floor, {K_SIGMA:g}·√(±² + "
           "std²)).</p><h2>Summary</h2><table><tr><th>paper</th>"
           + "".join(f"<th>{s}</th>" for s in STATUSES) + "<th>total</th></tr>"]
    for paper, results in by_paper.items():
        c = counts(results)
        out.append(f"<tr><td>{e(paper)}</td>" + "".join(f"<td>{c[s]}</td>" for s in STATUSES)
                   + f"<td>{len(results)}</td></tr>")
    out.append("</table><h2>Datasets</h2><table><tr>" + "".join(f"<th>{e(h)}</th>" for h in DATASET_HEAD) + "</tr>")
    out += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in dataset_rows(cfg, by_paper)]
    out.append("</table>")
    for paper, results in by_paper.items():
        out.append(f"<h2>{e(paper)}: {e(load_paper(cfg, paper)['title'])}</h2>")
        for artifact, group in by_artifact(results):
            out.append(f"<details open><summary><b>{e(artifact)}</b> — {e(_count_text(group))}</summary><table><tr>"
                       + "".join(f"<th>{e(h)}</th>" for h in HEAD) + "</tr>")
            for r in group:
                cls = r.status.replace(" ", "-")
                out.append(f"<tr class='{cls}'>" + "".join(f"<td>{e(c)}</td>" for c in _row_cells(r)) + "</tr>")
            out.append("</table></details>")
        gaps = gap_comments(resolve_path(cfg["papers"][paper]))
        if gaps:
            out.append("<h3>Defaults chosen where the paper is silent</h3><table><tr><th>key</th><th>value</th>"
                       "<th>why</th></tr>" + "".join(f"<tr><td><code>{e(k)}</code></td><td>{e(v)}</td><td>{e(c)}</td>"
                                                    "</tr>" for k, v, c in gaps) + "</table>")
        for name, spec, png in _figures(cfg, paper):
            if png.is_file():
                data = base64.b64encode(png.read_bytes()).decode()
                out.append(f"<figure><img alt='{e(spec['artifact'])}' src='data:image/png;base64,{data}'>"
                           f"<figcaption><b>{e(spec['artifact'])}</b>: {e(spec['caption'])}</figcaption></figure>")
    out.append("</body></html>")
    return "\n".join(out)


def dataset_rows(cfg: Mapping, by_paper: Mapping[str, list[Result]]) -> list[list[str]]:
    """Per catalog dataset: availability here, pinning, and which experiments/targets/partitions it unlocks."""
    from fedrepro.config import load_partitions
    from fedrepro.data.catalog import all_datasets
    from fedrepro.data.sources import is_available

    users: dict[str, list[str]] = {}
    for paper in cfg["papers"]:
        for name, e in load_paper(cfg, paper)["experiments"].items():
            n_targets = sum(r.target.experiment == f"{paper}.{name}" for r in by_paper.get(paper, []))
            for d in e.get("datasets") or []:
                users.setdefault(d, []).append(f"{paper}.{name} ({n_targets} targets)")
    for name, spec in load_partitions(cfg).items():
        users.setdefault(spec["dataset"], []).append(f"partition {name}")
    rows = []
    for ds_id, ds in sorted(all_datasets().items()):
        pinned = "bundled" if not ds.files else ("yes" if all(f.sha256 for f in ds.files) else "no")
        rows.append([ds_id, ds.title, "yes" if is_available(cfg, ds_id) else "no", pinned,
                     "; ".join(users.get(ds_id, [])) or "(later issues)"])
    return rows


DATASET_HEAD = ["dataset", "title", "available here", "sha256 pinned", "unlocks"]


def write_report(cfg: Mapping, out_dir: Path, scale: str | None = None) -> dict[str, list[Result]]:
    scale = scale or cfg["scale"]
    out_dir.mkdir(parents=True, exist_ok=True)
    by_paper = {paper: evaluate_paper(cfg, paper, scale) for paper in cfg.get("targets", {})}
    from fedrepro.runio import atomic_write

    atomic_write(out_dir / "replication.csv", lambda p: write_csv(p, by_paper))
    md = markdown(cfg, scale, by_paper, out_dir)
    atomic_write(out_dir / "replication.md", lambda p: p.write_text(md, encoding="utf-8"))
    page = html_report(cfg, scale, by_paper)
    atomic_write(out_dir / "replication.html", lambda p: p.write_text(page, encoding="utf-8"))
    return by_paper
