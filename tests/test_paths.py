"""fedrepro.paths is the one place output paths are spelled: rules keep wildcards, the library resolves them."""

import ast
import re

from fedrepro import paths
from fedrepro.config import REPO_ROOT, resolve_path


def test_rule_pattern_fills_directories_and_given_fields_and_keeps_wildcards(cfg):
    assert (
        paths.rule_pattern(cfg, "summary", paper="adaped")
        == f"{cfg['results_dir']}/adaped/{{exp}}/{{scale}}/summary.json"
    )
    assert paths.rule_pattern(cfg, "partition_plot") == f"{cfg['figures_dir']}/data/{{name}}.png"


def test_library_paths_resolve_every_field(cfg):
    run = paths.run_dir(cfg, "ppsgd", "fig1a_synthetic", "paper", 3)
    assert run == resolve_path(cfg["results_dir"]) / "ppsgd" / "fig1a_synthetic" / "paper" / "seed3"
    assert paths.summary_path(cfg, "ppsgd", "fig1a_synthetic", "paper").parent == run.parent
    assert paths.relative({**cfg, "results_dir": "results"}, "report", ext="csv") == "results/report/replication.csv"


LAYOUT = re.compile(r"seed\{|/summary\.json|replication\.\{|/\.verified")


def code_strings(path) -> list[tuple[int, str]]:
    """(line, text) of the string literals of a module's code: docstrings are prose, not paths."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    docs = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.JoinedStr):  # an f-string, as written: its pieces alone would hide "seed{"
            out.append((n.lineno, ast.get_source_segment(source, n)))
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
            out.append((n.lineno, n.value))
    return out


def layout_spellings(files) -> list[str]:
    out = []
    for path in files:
        if path.name == "paths.py":
            continue
        if path.suffix == ".py":
            found = [(i, s) for i, s in code_strings(path) if LAYOUT.search(s)]
        else:
            found = [
                (i, line)
                for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                if LAYOUT.search(line) and not line.lstrip().startswith("#")
            ]
        out += [f"{path.name}:{i}: {s.strip()}" for i, s in found]
    return out


def test_no_rule_or_module_spells_a_results_layout_itself():
    """The layout fragments of the patterns appear nowhere else in the rules' or the library's code."""
    files = [*(REPO_ROOT / "workflow" / "rules").glob("*.smk"), *(REPO_ROOT / "src" / "fedrepro").rglob("*.py")]
    assert layout_spellings(files) == []


def test_the_layout_check_finds_a_spelling(tmp_path):
    (tmp_path / "m.py").write_text('"""Writes results/x/seed{k}/summary.json."""\nOUT = f"{root}/seed{s}/m.json"\n')
    (tmp_path / "r.smk").write_text('# seed{s} in a comment is fine\nrule a:\n    output: "results/x/summary.json"\n')
    assert layout_spellings([tmp_path / "m.py", tmp_path / "r.smk"]) == [
        'm.py:2: f"{root}/seed{s}/m.json"',
        'r.smk:3: output: "results/x/summary.json"',
    ]


def test_place_reads_a_results_path_and_nothing_else(cfg):
    run = paths.run_dir(cfg, "adaped", "fig1a", "paper", 3)
    assert paths.place(run, "run_dir") == {"paper": "adaped", "exp": "fig1a", "scale": "paper", "seed": "3"}
    summary = paths.summary_path(cfg, "adaped", "fig1a", "quick")
    assert paths.place(summary, "summary") == {"paper": "adaped", "exp": "fig1a", "scale": "quick"}
    # kept elsewhere: no place, so nothing is read into it
    assert paths.place("/tmp/s0", "run_dir") is None
    assert paths.place("/tmp/x/summary.json", "summary") is None
    assert paths.place("a/b/paper/seedx", "run_dir") is None
    assert paths.place("a/b/huge/seed0", "run_dir") is None


def test_the_report_is_named_by_its_pattern(cfg):
    """report/build.py writes the names paths.PATTERNS gives (the workflow's targets)."""
    for ext in ("md", "csv", "html"):
        assert paths.report_name(ext) == paths.path(cfg, "report", ext=ext).name == f"replication.{ext}"
