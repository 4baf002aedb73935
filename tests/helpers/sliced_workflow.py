"""Snakemake on a slice of the papers, for the workflow tests: a copy of config/<paper>.yaml holding some of its
experiments, the registry rows of those experiments, and an override that puts every output under a temp dir."""

from __future__ import annotations

import csv
import fnmatch
import io
import shutil
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml

from fedrepro.config import REPO_ROOT

_BESIDE = Path(sys.executable).parent / "snakemake"  # the snakemake installed with this interpreter, if any
SNAKEMAKE = str(_BESIDE) if _BESIDE.exists() else shutil.which("snakemake")


def slice_paper(
    tmp: Path,
    paper: str,
    exps: Iterable[str],
    *,
    shorten: Mapping[str, dict] | None = None,
    add: Mapping[str, dict] | None = None,
    figures: bool = True,
    registry: str | None = None,
) -> tuple[Path, Path, list[str]]:
    """``tmp/<paper>.yaml``: config/<paper>.yaml with only ``exps`` (plus ``add``, {name: experiment entry}),
    ``shorten`` ({experiment: {param: value}}) laid over their quick params, and the figures of the experiments kept
    (none without ``figures``); ``tmp/<paper>.csv``: the rows of those experiments of config/targets/<paper>.csv, or of
    ``registry`` (a CSV text of the same columns); the paper's ``unexplained:`` listing cut to the patterns naming a
    kept row. Returns (config copy, registry copy, the kept rows' ids)."""
    exps = list(exps)
    doc = yaml.safe_load((REPO_ROOT / "config" / f"{paper}.yaml").read_text())
    doc["experiments"] = {k: doc["experiments"][k] for k in exps} | dict(add or {})
    for exp, params in (shorten or {}).items():
        doc["experiments"][exp]["quick"] = {**(doc["experiments"][exp].get("quick") or {}), **params}
    kept = set(doc["experiments"])
    doc["figures"] = {k: v for k, v in (doc.get("figures") or {}).items() if figures and v["experiment"] in kept}
    text = registry if registry is not None else (REPO_ROOT / "config" / "targets" / f"{paper}.csv").read_text()
    reader = csv.DictReader(io.StringIO(text))
    rows = [r for r in reader if r["experiment"] in {f"{paper}.{e}" for e in kept}]
    reg = tmp / f"{paper}.csv"
    with open(reg, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=reader.fieldnames)
        w.writeheader()
        w.writerows(rows)
    # the unexplained listing keeps the patterns that name a kept row (one naming no row of the registry is refused)
    ids = [r["id"] for r in rows]
    listing = []
    for entry in doc.get("unexplained") or ():
        patterns = [p for p in entry["rows"] if any(fnmatch.fnmatchcase(i, p) for i in ids)]
        if patterns:
            listing.append({**entry, "rows": patterns})
    doc.pop("unexplained", None)
    if listing:
        doc["unexplained"] = listing
    cfg = tmp / f"{paper}.yaml"
    cfg.write_text(yaml.safe_dump(doc))
    return cfg, reg, ids


def snakemake_args(tmp: Path, papers: Mapping[str, tuple[Path, Path]], **settings) -> list[str]:
    """The config arguments of a run on ``papers`` ({paper: (config, registry)}, e.g. from :func:`slice_paper`):
    config/config.yaml, then ``tmp/override.yaml`` with every output under ``tmp``, only those papers, quick scale, and
    ``settings`` (config keys) on top."""
    override = {
        "results_dir": f"{tmp}/results",
        "figures_dir": f"{tmp}/figures",
        "logs_dir": f"{tmp}/logs",
        "papers": {p: str(files[0]) for p, files in papers.items()},
        "targets": {p: str(files[1]) for p, files in papers.items()},
        "only_papers": list(papers),
        "scale": "quick",
    } | settings
    (tmp / "override.yaml").write_text(yaml.safe_dump(override))
    return ["--configfile", str(REPO_ROOT / "config" / "config.yaml"), str(tmp / "override.yaml")]
