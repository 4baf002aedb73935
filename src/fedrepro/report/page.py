"""The replication report as one self-contained HTML page (no network: inline CSS, figures as data URIs), rendered
from the report model (fedrepro.report.model), the same one the Markdown report is rendered from."""

from __future__ import annotations

import base64
import html

from fedrepro.report import model as m
from fedrepro.report import verdict as v
from fedrepro.report.fmt import HEAD, cells

CSS = """body{font-family:sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top}th{background:#eee}
.reproduced,.passes,.reproduced-after-calibration{background:#d9f2d9}.deviates,.fails{background:#fde2c8}
.inconclusive,.fitted{background:#fff5cc}.not-run,.not-comparable,.shown{background:#eee}
figure{display:inline-block;margin:1em;max-width:45%}img{max-width:100%}"""


def _e(s: object) -> str:
    return html.escape(str(s))


def _table(rows: list, header: list[str]) -> str:
    out = ["<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in header) + "</tr>"]
    for r in rows:
        out.append(f"<tr id='{_e(r.target.paper)}.{_e(r.target.id)}' class='{r.status.replace(' ', '-')}'>"
                   + "".join(f"<td>{_e(c)}</td>" for c in cells(r)) + "</tr>")
    return "".join(out) + "</table>"


def render_page(report: m.Report) -> str:
    out = ["<!doctype html><html><head><meta charset='utf-8'><title>fedrepro replication report</title>",
           f"<style>{CSS}</style></head><body><h1>fedrepro replication report</h1>",
           f"<p>Scale mode: <b>{_e(report.mode)}</b>.</p><p>{_e(v.RULE_TEXT)}</p>",
           "<h2>Printed numbers and statements</h2><table><tr><th>paper</th><th>printed rows</th>"
           + "".join(f"<th>{s}</th>" for s in v.PRINTED_STATUSES) + "</tr>"]
    for p in report.papers:
        c = m.count(p.printed, v.PRINTED_STATUSES)
        out.append(f"<tr><td>{_e(p.paper)}</td><td>{len(p.printed)}</td>"
                   + "".join(f"<td>{c[s]}</td>" for s in v.PRINTED_STATUSES) + "</tr>")
    out.append("</table>")
    for p in report.papers:
        out.append(f"<h2>{_e(p.paper)}: {_e(p.title)}</h2>")
        for row_type in ("printed", "consistency", "check"):
            for g in p.groups(row_type):
                out.append(f"<details{' open' if row_type == 'printed' else ''}><summary><b>{_e(g.artifact)}</b> "
                           f"({_e(row_type)}, {len(g.rows)} rows)</summary>{_table(g.rows, HEAD)}</details>")
        for f in p.figures:
            data = base64.b64encode(f.png.read_bytes()).decode()
            out.append(f"<figure><img alt='{_e(f.artifact)}' src='data:image/png;base64,{data}'>"
                       f"<figcaption><b>{_e(f.artifact)}</b>: {_e(f.caption)}</figcaption></figure>")
    out.append("</body></html>")
    return "\n".join(out)
