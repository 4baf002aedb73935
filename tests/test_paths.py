"""fedrepro.paths is the one place output paths are spelled: rules keep wildcards, the library resolves them."""

import re

from fedrepro import paths
from fedrepro.config import REPO_ROOT, resolve_path


def test_rule_pattern_fills_directories_and_given_fields_and_keeps_wildcards(cfg):
    assert paths.rule_pattern(cfg, "summary", paper="adaped") == f"{cfg['results_dir']}/adaped/{{exp}}/{{scale}}/summary.json"
    assert paths.rule_pattern(cfg, "partition_plot") == f"{cfg['figures_dir']}/data/{{name}}.png"


def test_library_paths_resolve_every_field(cfg):
    run = paths.run_dir(cfg, "ppsgd", "fig1a_synthetic", "paper", 3)
    assert run == resolve_path(cfg["results_dir"]) / "ppsgd" / "fig1a_synthetic" / "paper" / "seed3"
    assert paths.summary_path(cfg, "ppsgd", "fig1a_synthetic", "paper").parent == run.parent
    assert paths.relative({**cfg, "results_dir": "results"}, "report", ext="csv") == "results/report/replication.csv"


def test_no_rule_or_module_spells_a_results_layout_itself():
    """The layout fragments of the patterns appear nowhere else in the rules or the library."""
    spelled = re.compile(r"seed\{|/summary\.json|replication\.\{|/\.verified")
    offenders = []
    for path in [*(REPO_ROOT / "workflow" / "rules").glob("*.smk"), *(REPO_ROOT / "src" / "fedrepro").rglob("*.py")]:
        if path.name == "paths.py":
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if spelled.search(line) and not line.lstrip().startswith("#") and '"""' not in line:
                offenders.append(f"{path.relative_to(REPO_ROOT)}:{i}: {line.strip()}")
    assert offenders == []
