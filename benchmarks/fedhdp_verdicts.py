"""Print the verdicts of FedHDP's MNIST tables from the report, as benchmarks/RESULTS.md records them.

    python benchmarks/fedhdp_verdicts.py                       # fedhdp.noniid_mnist: Table 3 (top) and Table 8
    python benchmarks/fedhdp_verdicts.py --experiment skewed_mnist   # Table 3 (bottom) and Table 9
    python benchmarks/fedhdp_verdicts.py --forensic forensic_noniid_r0   # also a forensic sweep's conclusions

Reads what the report reads (fedrepro.report.status.evaluate_paper, the experiment at paper scale: its summary and
seed runs under results/, restored from the archive or made here) and prints Markdown: where the runs came from, the
Table 3 cells (printed, rebuilt mean ± sd over n seeds, the tolerance with its t quantile and degrees of freedom, the
verdict), the status counts of Table 3 and of the experiment's Table 8/9 rows by kind of row, and the variance-floor
table: a client's accuracy measured on n_k local test images has binomial variance p(1 - p)/n_k, so the across-client
variance of the measured accuracies (the paper's unit, 100 x Var of accuracies in [0, 1]) is at least
100 p(1 - p) mean(1/n_k); the printed variance needs at least n = 100 p(1 - p) / printed var images per client.

``--forensic NAME`` adds the per-row conclusions of a forensic sweep built at paper scale (its summary under
results/, as the report reads it), counted by outcome. ``--readings`` adds, for each such sweep, its readings side by
side from the run's history (seed 0's run directory: a forensic sweep is one run over all its seeds; read only when the
summary and its run are sound, as the report checks them): per method the
rows each reading reproduces, leaves inconclusive or deviates, and each method's global-model accuracies (the same in
every λ block) under each reading, mean ± se (n seeds) and outcome.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter

from fedrepro import paths
from fedrepro.config import load_global
from fedrepro.report import verdict as v
from fedrepro.report.status import evaluate_paper, soundness

KINDS = {  # Table 8/9 rows by what they measure (the last part of the metric key), in the order RESULTS.md lists them
    "Acc_g, Acc_g,p, Acc_g,np": lambda m: m.startswith("acc_g") and not m.endswith("_var"),
    "Acc_l,p, Acc_l,np": lambda m: m.startswith("acc_l") and not m.endswith("_var"),
    "variances across clients": lambda m: m.endswith("_var"),
    "Δ_g, Δ_l": lambda m: m.startswith("d_"),
}
STATUSES = (v.REPRODUCED, v.INCONCLUSIVE, v.DEVIATES, v.NOT_COMPARABLE, v.STALE, v.INVALID, v.NOT_RUN)


def _cell(rid: str) -> str:
    return rid.split(".", 2)[2] if rid.count(".") >= 2 else rid


def _num(x: float | None, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--experiment", default="noniid_mnist", choices=["noniid_mnist", "skewed_mnist"])
    ap.add_argument("--forensic", action="append", default=[], metavar="NAME", help="a forensic experiment of fedhdp")
    ap.add_argument("--readings", action="store_true", help="with --forensic: its readings side by side")
    args = ap.parse_args(argv)
    exp_id = f"fedhdp.{args.experiment}"
    cfg = load_global(overrides={"default_scales": {exp_id: "paper"}})
    rows = [r for r in evaluate_paper(cfg, "fedhdp") if r.target.experiment == exp_id and r.target.printed]
    t3 = [r for r in rows if r.target.artifact == "Table 3"]
    other = [r for r in rows if r.target.artifact in ("Table 8", "Table 9")]
    if not t3 and not other:
        print(f"{exp_id}: no printed Table 3/8/9 rows in the registry", file=sys.stderr)
        return 1
    n = next((r.n for r in t3 if r.n), None)
    source = next((r.source for r in t3 if r.source), "") or "made here (results/)"
    print(
        f"`python benchmarks/fedhdp_verdicts.py --experiment {args.experiment}`: {exp_id} at paper scale, {n} seeds; "
        f"runs: {source}"
    )
    print()
    print("| cell | printed | rebuilt mean ± sd (n) | tol (t at df) | verdict |")
    print("|---|---|---|---|---|")
    for r in t3:
        t = r.target
        rebuilt = "—" if r.rebuilt is None else f"{r.rebuilt:.3f} ± {_num(r.rebuilt_std)} ({r.n})"
        tol = "—" if r.tol is None else f"{r.tol:.3f}"
        print(f"| {_cell(t.id)} | {t.value_text} | {rebuilt} | {tol} | {r.status} |")
    print()
    for label, sel in (
        (f"Table 3 ({len(t3)} cells)", t3),
        (f"{other[0].target.artifact if other else 'Table 8'} ({len(other)} rows)", other),
    ):
        c = Counter(r.status for r in sel)
        print(f"**{label}:** " + ", ".join(f"{c[s]} {s}" for s in STATUSES if c[s]))
    print()
    print("| rows by kind | " + " | ".join(s for s in STATUSES[:3]) + " | other |")
    print("|---|" + "---|" * 4)
    for kind, test in KINDS.items():
        sel = [r for r in other if test(r.target.key.rsplit(".", 1)[-1])]
        c = Counter(r.status for r in sel)
        rest = len(sel) - sum(c[s] for s in STATUSES[:3])
        print(f"| {kind} ({len(sel)}) | " + " | ".join(str(c[s]) for s in STATUSES[:3]) + f" | {rest} |")
    _variance_floor(cfg, exp_id, t3)
    return max([0, *(_forensic(cfg, name, args.readings) for name in args.forensic)])


def _forensic(cfg, name: str, readings: bool = False) -> int:
    """The conclusions of forensic experiment ``fedhdp.<name>`` at paper scale, one row each, and their counts;
    ``readings``: then its readings side by side (:func:`_readings`)."""
    path = paths.summary_path(cfg, "fedhdp", name, "paper")
    print()
    if not path.is_file():
        print(f"fedhdp.{name}: not built at paper scale ({path} missing)", file=sys.stderr)
        return 1
    summary = json.loads(path.read_text())
    unsound = soundness(cfg, "fedhdp", name, "paper", summary)  # stale or not its runs': not read, as in the report
    if unsound is not None:
        print(f"fedhdp.{name}: {unsound.status}: {unsound.reason}", file=sys.stderr)
        return 1
    found = {k.split(".", 1)[1]: c for k, c in summary["checks"].items() if k.startswith("conclusion.")}
    outcome = Counter(c["detail"].split(" (", 1)[0].split(";", 1)[0].split(" under ", 1)[0] for c in found.values())
    print(
        f"`fedhdp.{name}` at paper scale (results/fedhdp/{name}/paper): {len(found)} rows; "
        + ", ".join(f"{n} {what}" for what, n in outcome.most_common())
    )
    print()
    print("| row | conclusion |")
    print("|---|---|")
    for rid, c in found.items():
        detail = c["detail"][:220].replace("|", r"\|")  # a pipe would end the Markdown cell
        print(f"| {rid} | {detail} |")
    return _readings(cfg, name) if readings else 0


# a Table 3/8/9 row id: table, block (Table 3's half or Table 8's lambda), method, metric, variance suffix
ROW_ID = re.compile(r"^(T\d+)\.(lam[\d.]+|nonIID|skewed)\.(.+)\.((?:Acc|D)_\w+?)(\.var)?$")
OUTCOMES = ("reproduced", "inconclusive", "deviates")


def _readings(cfg, name: str) -> int:
    """The forensic sweep's readings side by side, from its run's history: per method the rows each reading
    reproduces / leaves inconclusive / deviates, then each method's global-model accuracies under each reading."""
    import pandas as pd

    history = paths.run_dir(cfg, "fedhdp", name, "paper", 0) / "history.parquet"
    if not history.is_file():
        print(f"fedhdp.{name}: no run history at paper scale ({history} missing)", file=sys.stderr)
        return 1
    h = pd.read_parquet(history)
    texts = h.drop_duplicates("reading").set_index("reading")["reading_text"].to_dict()
    first = next(iter(texts))
    print()
    run = paths.relative(cfg, "run_dir", paper="fedhdp", exp=name, scale="paper", seed=0)
    print(f"Readings of `fedhdp.{name}` (from {run}):")
    print()
    for i, text in texts.items():
        print(f"- reading {i}: {text}")
    print()
    parsed = h["row"].map(ROW_ID.match)
    if not parsed.all():
        print(
            f"fedhdp.{name}: rows not of Tables 3/8/9: {sorted(h.loc[~parsed.astype(bool), 'row'])[:3]}",
            file=sys.stderr,
        )
        return 1
    h = h.assign(method=[m[3] for m in parsed], metric=[m[4] + (m[5] or "") for m in parsed])
    print("| method | rows | " + " | ".join(f"reading {i}: " + " / ".join(OUTCOMES) for i in texts) + " |")
    print("|---|---|" + "---|" * len(texts))
    for method, g in h.groupby("method", sort=False):
        counts = [Counter(g.loc[g["reading"] == i, "outcome"]) for i in texts]
        n = (g["reading"] == first).sum()
        print(f"| {method} | {n} | " + " | ".join(" / ".join(str(c[o]) for o in OUTCOMES) for c in counts) + " |")
    # the global model does not depend on lambda: each method's Acc_g, Acc_g,p, Acc_g,np once (its first row)
    global_rows = h[h["metric"].isin(["Acc_g", "Acc_g_p", "Acc_g_np"])].drop_duplicates(["method", "metric"])["row"]
    print()
    print("Global-model accuracy rows (the same in every λ block; each method's first row):")
    print()
    print("| row | printed | " + " | ".join(f"reading {i}" for i in texts) + " |")
    print("|---|---|" + "---|" * len(texts))
    by = h.set_index(["row", "reading"])
    for r in global_rows:
        cells = []
        for i in texts:
            x = by.loc[(r, i)]
            cells.append(f"{x['rebuilt']:.2f} ± {x['se']:.2f} (n={x['n']}) {x['outcome']}")
        print(f"| {r} | {by.loc[(r, first)]['printed']} | " + " | ".join(cells) + " |")
    return 0


def _variance_floor(cfg, exp_id: str, t3) -> None:
    paper, name = exp_id.split(".", 1)
    from fedrepro.config import load_paper

    partition = load_paper(cfg, paper)["experiments"][name]["params"]["partition"]
    manifest = paths.partition_dir(cfg, partition) / "manifest.json"
    if not manifest.is_file():
        print(f"\n(variance floor: partition {partition} not built here)")
        return
    counts = [c["test"] for c in json.loads(manifest.read_text())["clients"] if c["test"] > 0]
    inv = sum(1 / k for k in counts) / len(counts)
    by_id = {r.target.id: r for r in t3}
    print()
    print(
        f"Variance floor: the partition {partition} gives each client {min(counts)}-{max(counts)} local test images "
        f"(mean 1/n_k = {inv:.3f})."
    )
    print()
    print(
        "| cell | printed mean | printed var | test images per client the printed var needs (>=) | rebuilt var | "
        "floor 100 p(1-p) mean(1/n_k) at the rebuilt mean |"
    )
    print("|---|---|---|---|---|---|")
    for rid, r in by_id.items():
        if not rid.endswith(".var") or rid[: -len(".var")] not in by_id:
            continue
        mean = by_id[rid[: -len(".var")]]
        p_printed = float(mean.target.value) / 100
        need = 100 * p_printed * (1 - p_printed) / float(r.target.value) if r.target.value else float("nan")
        floor = None if mean.rebuilt is None else 100 * (mean.rebuilt / 100) * (1 - mean.rebuilt / 100) * inv
        print(
            f"| {_cell(rid[: -len('.var')])} | {mean.target.value_text} | {r.target.value_text} | {need:.0f} | "
            f"{_num(r.rebuilt)} | {_num(floor)} |"
        )


if __name__ == "__main__":
    sys.exit(main())
