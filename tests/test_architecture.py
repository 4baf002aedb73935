"""The package's shape: declarations match what modules register, no import cycles, no kind imports another kind,
and the shared layers know no paper."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest

import fedrepro
from fedrepro.data.partition import SCHEMES
from fedrepro.experiments import KINDS, all_kinds, kind_modules
from fedrepro.learning.algorithms import algorithm_modules, get_algorithm
from fedrepro.learning.engine import Algorithm
from fedrepro.learning.models import MODELS
from fedrepro.papers import DECLARATIONS, PAPERS, declared
from fedrepro.plots import PLOTS, get_plot

SRC = Path(fedrepro.__file__).parent


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def imports_of(module: str) -> set[str]:
    """fedrepro modules ``module`` imports anywhere (module level or inside functions), resolved to modules."""
    out = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module for a in node.names
            ]
        else:
            continue
        out |= {n for n in names if n in MODULES and n != module}
    return out


GRAPH = {m: imports_of(m) for m in MODULES}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_module_import_cycles():
    assert cycles(GRAPH) == []


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def kinds_importing_kinds(graph: dict[str, set[str]], kind_mods: set[str]) -> dict[str, list[str]]:
    return {m: sorted(graph[m] & kind_mods) for m in kind_mods if graph[m] & kind_mods}


# The layers of fedrepro/__init__.py's drawing, highest first: a package imports its own modules and lower layers.
LAYERS = (
    {"__main__"},
    {"papers"},
    {"cli", "audit", "compare", "archive"},
    {"report", "plots", "learning", "aggregate", "staleness"},
    {"runio"},
    {"paths", "plan", "datasets", "run_inputs"},
    {"config", "provenance", "processes"},
    {"data", "experiments"},
    {"privacy", "files", "registry"},
    {"errors", "checkout", "seeding", "progress", "fedrepro"},
)
# The one import that goes up: the registry loads the papers' declarations.
LOADS_DECLARATIONS = ("fedrepro.registry", "fedrepro.papers")


def package(module: str) -> str:
    """The package a module belongs to: the first component under fedrepro (fedrepro itself for its __init__)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer(pkg: str) -> int:
    return next(i for i, names in enumerate(LAYERS) if pkg in names)


def upward_imports(graph: dict[str, set[str]], allowed: set[tuple[str, str]]) -> list[str]:
    """Imports of a module from a higher layer than its own, other than ``allowed``."""
    return sorted(
        f"{m} -> {d}"
        for m, deps in graph.items()
        for d in deps
        if (m, d) not in allowed and layer(package(d)) < layer(package(m))
    )


def package_graph(graph: dict[str, set[str]], ignored: set[tuple[str, str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {package(m): set() for m in graph}
    for m, deps in graph.items():
        out[package(m)] |= {package(d) for d in deps if (m, d) not in ignored and package(d) != package(m)}
    return out


def test_every_package_has_a_layer():
    assert sorted(p for p in {package(m) for m in MODULES} if not any(p in names for names in LAYERS)) == []


def test_no_import_goes_up():
    assert upward_imports(GRAPH, {LOADS_DECLARATIONS}) == []


def test_no_package_cycles():
    """Two packages never import each other, at module level or inside functions (the upward edges aside)."""
    assert cycles(package_graph(GRAPH, {LOADS_DECLARATIONS})) == []


def test_only_the_registry_loads_the_papers():
    """Outside fedrepro.papers, only fedrepro.registry imports the papers package (its declarations), never a
    paper."""
    assert {
        m: sorted(d for d in deps if package(d) == "papers")
        for m, deps in GRAPH.items()
        if package(m) != "papers" and any(package(d) == "papers" for d in deps)
    } == {"fedrepro.registry": ["fedrepro.papers"]}


def test_no_kind_imports_another_kind():
    assert kinds_importing_kinds(GRAPH, set(kind_modules().values())) == {}


def test_layer_checks_find_offenders():
    graph = {
        "fedrepro.papers.a.experiments.x": {"fedrepro.papers.a.experiments.y"},
        "fedrepro.papers.a.experiments.y": set(),
        "fedrepro.report.build": {"fedrepro.papers.a.plots", "fedrepro.config"},
        "fedrepro.config": {"fedrepro.data.catalog"},
        "fedrepro.data.catalog": set(),
        "fedrepro.data.sources": {"fedrepro.config"},  # inside a function or not: imports_of reads both
    }
    kinds = {"fedrepro.papers.a.experiments.x", "fedrepro.papers.a.experiments.y"}
    assert kinds_importing_kinds(graph, kinds) == {
        "fedrepro.papers.a.experiments.x": ["fedrepro.papers.a.experiments.y"]
    }
    assert upward_imports(graph, set()) == [
        "fedrepro.data.sources -> fedrepro.config",
        "fedrepro.report.build -> fedrepro.papers.a.plots",
    ]
    assert cycles(package_graph(graph, set())) == [["config", "data"]]
    assert cycles(package_graph(graph, {("fedrepro.data.sources", "fedrepro.config")})) == []


def test_imports_inside_functions_count(tmp_path, monkeypatch):
    source = "import os\n\ndef f():\n    from fedrepro.config import load_global\n    import fedrepro.errors\n"
    (tmp_path / "m.py").write_text(source)
    monkeypatch.setitem(MODULES, "fedrepro.m", tmp_path / "m.py")
    assert imports_of("fedrepro.m") == {"fedrepro.config", "fedrepro.errors"}


def test_every_paper_has_a_home():
    for paper in PAPERS:
        home = SRC / "papers" / paper
        assert (home / "experiments").is_dir() and (home / "privacy.py").is_file(), paper


def test_kind_declarations_match_registrations():
    kinds = all_kinds()
    assert set(kinds) == set(kind_modules())
    assert {n: k.module for n, k in kinds.items()} == kind_modules()


def test_every_kind_is_declared():
    """A module that registers a kind nobody declared would be unreachable: import every module and compare."""
    for m in MODULES:
        if m.startswith(("fedrepro.papers", "fedrepro.experiments")):
            importlib.import_module(m)
    assert set(KINDS.registered()) == set(kind_modules())


def test_plot_declarations_match_registrations():
    for name, module in PLOTS.modules().items():
        assert get_plot(name).__module__ == module


def test_partition_declarations_match_registrations():
    for name, module in SCHEMES.modules().items():
        assert SCHEMES.get(name).__module__ == module


def test_model_declarations_match_registrations():
    for name, module in MODELS.modules().items():
        assert MODELS.get(name).__module__ == module


def test_algorithms_are_keyed_by_their_name():
    for name, module in algorithm_modules().items():
        cls = get_algorithm(name)
        assert cls.name == name and cls.__module__ == module
    # every concrete algorithm class in the package is reachable by its name
    for m in MODULES:
        if m.startswith(("fedrepro.learning", "fedrepro.papers")) and not m.endswith("__init__"):
            for obj in vars(importlib.import_module(m)).values():
                if (
                    inspect.isclass(obj)
                    and issubclass(obj, Algorithm)
                    and not inspect.isabstract(obj)
                    and "name" in obj.__dict__
                ):
                    assert algorithm_modules().get(obj.name) == obj.__module__, obj


def test_a_wrong_declaration_is_caught(monkeypatch):
    from fedrepro.papers import adaped

    monkeypatch.setitem(adaped.KINDS, "not_registered_anywhere", ".experiments.gaussian")
    with pytest.raises(
        RuntimeError, match="declared in fedrepro.papers.adaped.experiments.gaussian but not registered"
    ):
        from fedrepro.experiments import get_kind

        get_kind("not_registered_anywhere")


def test_every_kind_declares_what_it_produces():
    """Registry keys are validated against these declarations (fedrepro.report.registry.check_keys)."""
    assert [n for n, k in all_kinds().items() if not k.metrics] == []


def test_every_privacy_kind_declares_its_epsilon_rows():
    """The privacy stage (fedrepro.report.privacy) knows no kind: each privacy-stage kind says what its run gives."""
    assert [n for n, k in all_kinds().items() if k.stage == "privacy" and k.epsilon_rows is None] == []
    assert [n for n, k in all_kinds().items() if k.stage != "privacy" and (k.epsilon_rows or k.epsilon_panel)] == []


def paper_words() -> tuple[set[str], set[str]]:
    """The papers' names, and every name a paper declares (its kinds, plots, algorithms, partitions, models)."""
    declared_names = {n for what in DECLARATIONS for n in declared(what)}
    return set(PAPERS), declared_names


def names_a_paper(source: str, papers: set[str], declared_names: set[str]) -> list[str]:
    """What in ``source`` (code, not docstrings or comments) names a paper: an identifier containing a paper's
    name, a string that is a paper's name, or a string holding a name a paper declares."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    words = re.compile(r"\b(" + "|".join(map(re.escape, sorted(declared_names))) + r")\b")
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if node.value in papers or words.search(node.value):
                out.append(repr(node.value))
            continue
        for ident in (
            getattr(node, attr, None)
            for attr in ("id", "attr", "name", "arg", "asname")
            if not isinstance(node, ast.Constant)
        ):
            if isinstance(ident, str) and any(p in ident.lower() for p in papers):
                out.append(ident)
    return out


def test_shared_layers_name_no_paper():
    """Everything outside fedrepro.papers is paper-free: a paper plugs in through its declarations only."""
    papers, declared_names = paper_words()
    offenders = {
        m: found
        for m, path in MODULES.items()
        if not m.startswith("fedrepro.papers")
        and (found := names_a_paper(path.read_text(encoding="utf-8"), papers, declared_names))
    }
    assert offenders == {}


def test_paper_names_are_found():
    papers, declared_names = {"acme"}, {"acme_kind"}
    source = (
        '"""acme in a docstring is fine."""\n'
        "class AcmeNet: pass\n"
        'x = {"k": "acme_kind"}\n'
        'y = "acme"\n'
        'z = "e.g. acme.fig1"\n'
    )
    assert sorted(names_a_paper(source, papers, declared_names)) == ["'acme'", "'acme_kind'", "AcmeNet"]
