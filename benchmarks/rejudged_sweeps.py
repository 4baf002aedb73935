"""Print the archived forensic sweeps judged under an older verdict rule, judged again under the report's rule from
their histories (fedrepro.report.status.judged_again: no training), as benchmarks/RESULTS.md records them.

    python benchmarks/rejudged_sweeps.py

Per sweep: the rule its run judged under, then per row whose conclusion the report judges again the verdicts that
changed ("reading: old -> new") and the new conclusion's first clause; rows with no verdict changed are counted. Then
the same judgement run on each archived sweep made under the report's rule, against the conclusions its run recorded:
the rows whose text it rebuilds exactly (a stopping-time row is left out: its finding is not in the history).
"""

from __future__ import annotations

from fedrepro.archive.store import entries
from fedrepro.config import load_global, load_paper, resolve_path
from fedrepro.experiments import get_kind
from fedrepro.report import verdict as v
from fedrepro.report.registry import load_registry
from fedrepro.report.status import judged_again
from fedrepro.runio import read_history, read_metrics


def main() -> None:
    cfg = load_global()
    print(f"The report's verdict rule: {v.RULE_VERSION} ({v.RULE_VERSIONS[v.RULE_VERSION]}).")
    print()
    print("| sweep | judged under | row | verdicts changed | conclusion now (first clause) |")
    print("|---|---|---|---|---|")
    found = False
    for e in entries(cfg):
        paper, name = e.experiment.split(".", 1)
        doc = load_paper(cfg, paper)
        entry = doc["experiments"].get(name)
        if entry is None:
            continue
        targets = {t.id: t for t in load_registry(resolve_path(cfg["targets"][paper]), paper)}
        summary = {"metrics": {k: {"mean": x} for k, x in read_metrics(e.dir)["metrics"].items()}}
        again = judged_again(doc, entry, summary, targets, lambda d=e.dir: read_history(d))
        same = 0
        for row, r in again.items():
            if not r.changes:
                same += 1
                continue
            found = True
            head = r.detail.split(";", 1)[0].replace("|", "\\|")  # a cell of a Markdown table
            print(f"| {e.experiment} | rule {r.rule} | {row} | {'; '.join(r.changes)} | {head} |")
        if same:
            found = True
            rule = next(iter(again.values())).rule
            print(f"| {e.experiment} | rule {rule} | {same} other rows | none | as before |")
    if not found:
        print("| (no archived sweep judged under an older rule) | | | | |")
    print()
    print("| sweep judged under the report's rule | rows judged again | the same conclusion text as its run's |")
    print("|---|---|---|")
    for e in entries(cfg):
        paper, name = e.experiment.split(".", 1)
        doc = load_paper(cfg, paper)
        entry = doc["experiments"].get(name)
        kind = get_kind(entry["kind"]) if entry else None
        made = read_metrics(e.dir)
        if kind is None or kind.rejudge is None or made["metrics"].get("verdict_rule") != v.RULE_VERSION:
            continue
        targets = {t.id: t for t in load_registry(resolve_path(cfg["targets"][paper]), paper)}
        again = kind.rejudge(entry["params"], read_history(e.dir), targets, doc)
        same = sum(c.detail == made["checks"][f"conclusion.{row}"]["detail"] for row, (c, _) in again.items())
        print(f"| {e.experiment} | {len(again)} | {same} |")


if __name__ == "__main__":
    main()
