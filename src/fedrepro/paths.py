"""Where every output lives: one pattern per kind of file, the single source for the Snakemake rules and the CLI.

A pattern is a format string over the configured directories ``{results}``, ``{figures}``, ``{logs}``, ``{data}``
(config.yaml's results_dir, figures_dir, logs_dir, data.dir) and the fields of one file (``{paper}``, ``{exp}``,
``{scale}``, ``{seed}``, ...). The rules fill in the directories and keep the other fields as Snakemake wildcards
(:func:`rule_pattern`, e.g. ``results/{paper}/{exp}/{scale}/summary.json``); the library fills in everything and
resolves relative directories against the project root (:func:`path`).
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from pathlib import Path

from fedrepro.config import SCALES, resolve_path

PATTERNS = {
    # one run of one experiment (metrics.json, history.parquet, config.yaml) and the summary over its seeds
    "run_dir": "{results}/{paper}/{exp}/{scale}/seed{seed}",
    "run_file": "{results}/{paper}/{exp}/{scale}/seed{seed}/{file}",
    "summary": "{results}/{paper}/{exp}/{scale}/summary.json",
    # the paper's artifacts and the report
    "figure": "{figures}/{paper}/{fig}.{ext}",
    "table": "{results}/tables/{paper}/{table}.{ext}",
    "privacy_table": "{results}/privacy/{paper}/{name}.csv",
    "report": "{results}/report/replication.{ext}",
    # a method from outside the papers (config extra_methods) as one more row of an experiment's table
    "extra_table": "{results}/extra/{method}/{paper}/{exp}/{scale}/table.{ext}",
    # a paper-scale run kept in the repository (fedrepro.archive), restored into run_dir by the workflow
    "archive_run": "{archive}/{paper}/{exp}/{scale}/seed{seed}",
    "archive_file": "{archive}/{paper}/{exp}/{scale}/seed{seed}/{file}",
    # data
    "dataset_stamp": "{data}/{dataset}/.verified",
    "partition": "{results}/data/{name}",
    "partition_plot": "{figures}/data/{name}.png",
    # one log per job
    "run_log": "{logs}/run/{paper}/{exp}/{scale}/seed{seed}.log",
    "aggregate_log": "{logs}/aggregate/{paper}/{exp}/{scale}.log",
    "figure_log": "{logs}/figures/{paper}/{fig}.log",
    "table_log": "{logs}/tables/{paper}/{table}.log",
    "privacy_log": "{logs}/privacy/{paper}/{name}.log",
    "report_log": "{logs}/report.log",
    "extra_log": "{logs}/extra/{method}/{paper}/{exp}/{scale}.log",
    "dataset_log": "{logs}/data/{dataset}.log",
    "partition_log": "{logs}/data/partition/{name}.log",
    "partition_plot_log": "{logs}/data/plot/{name}.log",
    "restore_log": "{logs}/restore/{paper}/{exp}/{scale}/seed{seed}.log",
}


def _dirs(cfg: Mapping) -> dict[str, str]:
    return {
        "results": cfg["results_dir"],
        "figures": cfg["figures_dir"],
        "logs": cfg.get("logs_dir", "logs"),
        "data": cfg["data"]["dir"],
        "archive": (cfg.get("archive") or {}).get("dir", "archive"),
    }


class _KeepMissing(dict):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def rule_pattern(cfg: Mapping, name: str, /, **fields) -> str:
    """The pattern ``name`` with the configured directories and the given fields filled in, every other field kept
    as a ``{wildcard}`` (for Snakemake rules): rule_pattern(cfg, "summary") -> 'results/{paper}/{exp}/{scale}/...'."""
    return string.Formatter().vformat(PATTERNS[name], (), _KeepMissing(_dirs(cfg) | fields))


def relative(cfg: Mapping, name: str, /, **fields) -> str:
    """The file as configured (relative directories stay relative), every field given."""
    return PATTERNS[name].format(**_dirs(cfg), **fields)


def path(cfg: Mapping, name: str, /, **fields) -> Path:
    """The file, resolved against the project root."""
    return resolve_path(relative(cfg, name, **fields))


def place(path: str | Path, name: str, /) -> dict[str, str] | None:
    """The fields a result file or directory's place gives it: the last components of ``path`` read as the part
    of pattern ``name`` under ``{results}`` (e.g. ``.../adaped/fig1a/paper/seed3`` as "run_dir" -> paper adaped,
    exp fig1a, scale paper, seed 3); None when ``path`` is not laid out so (a ``{scale}`` not one of the scales, a
    ``{seed}`` not a number), so that a file kept elsewhere is not read as placed."""
    parts = PATTERNS[name].split("/")
    if parts[0] != "{results}":
        raise ValueError(f"pattern {name!r} is not under {{results}}")
    parts = parts[1:]
    components = Path(path).parts[-len(parts) :]
    if len(components) < len(parts):
        return None
    fields: dict[str, str] = {}
    for pattern, component in zip(parts, components):
        regex = "".join(
            re.escape(literal) + (f"(?P<{field}>{r'[0-9]+' if field == 'seed' else '.+'})" if field else "")
            for literal, field, _, _ in string.Formatter().parse(pattern)
        )
        m = re.fullmatch(regex, component)
        if m is None:
            return None
        fields.update(m.groupdict())
    if fields.get("scale", SCALES[0]) not in SCALES:
        return None
    return fields


def run_dir(cfg: Mapping, paper: str, exp: str, scale: str, seed: int) -> Path:
    return path(cfg, "run_dir", paper=paper, exp=exp, scale=scale, seed=seed)


def summary_path(cfg: Mapping, paper: str, exp: str, scale: str) -> Path:
    return path(cfg, "summary", paper=paper, exp=exp, scale=scale)


def figure_path(cfg: Mapping, paper: str, fig: str, ext: str = "pdf") -> Path:
    return path(cfg, "figure", paper=paper, fig=fig, ext=ext)


def report_name(ext: str) -> str:
    """The file name of the report in format ``ext`` (md, csv, html), in whatever directory it is written to."""
    return PATTERNS["report"].rsplit("/", 1)[1].format(ext=ext)


def partition_dir(cfg: Mapping, name: str) -> Path:
    """A partitioned federated dataset built by the data stage (rule partition_dataset)."""
    return path(cfg, "partition", name=name)
