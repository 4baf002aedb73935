"""Every value a run uses is in its resolved parameters (and so in its config.yaml): the kinds keep no defaults in
code. The keys a kind reads are found statically, from its function and every function it hands its parameters to."""

import ast
import importlib
import inspect
import textwrap
import types
from functools import cache

import pytest
import yaml

from fedrepro.config import SCALES, fill_defaults, list_experiments, load_global, resolve_experiment
from fedrepro.experiments import RunOutput, all_kinds, get_kind


def _function_node(fn) -> ast.FunctionDef:
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    return next(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.Lambda)))


def _is_param(node: ast.AST, name: str) -> bool:
    """``node`` is the parameters themselves: the name, or the name merged with more (``p | {...}``)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _is_param(node.left, name)
    return isinstance(node, ast.Name) and node.id == name


def _rooted(node: ast.AST, name: str) -> bool:
    """``node`` is the parameters or a value inside them (``p["a"]["b"]``)."""
    while isinstance(node, ast.Subscript):
        node = node.value
    return _is_param(node, name)


def _callee(call: ast.Call, fn):
    """The fedrepro function (or one of ``fn``'s module) a call names, looked up where ``fn`` was defined; None for
    anything else."""
    scope = fn.__globals__
    target = call.func
    if isinstance(target, ast.Name):
        obj = scope.get(target.id)
    elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
        obj = getattr(scope.get(target.value.id), target.attr, None)
    else:
        return None
    obj = inspect.unwrap(obj) if callable(obj) else obj
    return (
        obj
        if isinstance(obj, types.FunctionType)
        and (obj.__module__.startswith("fedrepro") or obj.__module__ == fn.__module__)
        else None
    )


def scan(fn, name: str | None = None, seen: set | None = None) -> tuple[set[str], list[str]]:
    """(top-level keys ``fn`` reads from its parameters ``name`` (default: its first argument), what it does that
    keeps a value out of them: ``.get(key, default)`` or ``"key" in params``), following every call that passes the
    parameters on to another fedrepro function."""
    seen = set() if seen is None else seen
    node = _function_node(fn)
    args = [a.arg for a in node.args.args]
    name = name or args[0]
    if (fn, name) in seen:
        return set(), []
    seen.add((fn, name))
    keys, faults = set(), []
    where = f"{fn.__module__}.{fn.__qualname__}"
    for n in ast.walk(node):
        if isinstance(n, ast.Subscript) and _is_param(n.value, name) and isinstance(n.slice, ast.Constant):
            keys.add(n.slice.value)
        elif isinstance(n, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in n.ops):
            if isinstance(n.left, ast.Constant) and any(_is_param(c, name) for c in n.comparators):
                faults.append(f"{where}: {n.left.value!r} in {name}")
        elif isinstance(n, ast.Call):
            f = n.func
            if isinstance(f, ast.Attribute) and f.attr == "get" and _rooted(f.value, name) and n.args:
                key = n.args[0].value if isinstance(n.args[0], ast.Constant) else "?"
                if _is_param(f.value, name):
                    keys.add(key)
                if len(n.args) > 1 or n.keywords:
                    faults.append(f"{where}: {ast.unparse(n)} keeps a default in code")
                continue
            callee = _callee(n, fn)
            if callee is None:
                continue
            params = list(inspect.signature(callee).parameters)
            passed = [params[i] for i, a in enumerate(n.args) if i < len(params) and _is_param(a, name)]
            passed += [k.arg for k in n.keywords if k.arg and _is_param(k.value, name)]
            for p in passed:
                k, f_ = scan(callee, p, seen)
                keys |= k
                faults += f_
    return keys, faults


def module_faults(module: str) -> list[str]:
    """The faults of every function of ``module`` that takes parameters named ``p`` or ``params``: those the kind
    hands on in a way the call scan does not follow (a training function passed to a shared grid runner)."""
    mod = importlib.import_module(module)
    fns = [f for f in vars(mod).values() if isinstance(f, types.FunctionType) and f.__module__ == module]
    out = []
    for f in fns:
        for name in set(inspect.signature(f).parameters) & {"p", "params"}:
            out += scan(f, name)[1]
    return out


@cache
def kind_reads(kind_name: str) -> tuple[frozenset, tuple]:
    """(keys the kind reads, faults of its call graph and of its module)."""
    kind = get_kind(kind_name)
    keys, faults = scan(kind.fn)
    if kind.reads is not None:
        more, more_faults = scan(kind.reads)
        keys, faults = keys | more, faults + more_faults
    return frozenset(keys), tuple(dict.fromkeys(faults + module_faults(kind.module)))


@pytest.mark.parametrize("kind_name", sorted(all_kinds()))
def test_a_kind_keeps_no_parameter_default_in_code(kind_name):
    keys, faults = kind_reads(kind_name)
    assert keys, f"{kind_name}: the scan found no parameter it reads"
    assert list(faults) == []


def _experiments():
    cfg = load_global()
    return [
        (f"{paper}.{name}", scale)
        for paper in cfg["papers"]
        for name in list_experiments(cfg, paper)
        for scale in SCALES
    ]


# Optional blocks a kind reads only when a run sets them, with no default: a default would add the key to every run's
# resolved parameters and so change the parameter digest of every run made before the option existed (archived
# paper-scale runs among them), making them stale for a value they never used. Each is read as p.get(key) once.
OPTIONAL_BLOCKS = {
    # fedrepro.papers.fedhdp.test_readings; local_readings: absent, the run keeps its personal models' accuracies
    # under the test-set readings (arrays.npz shows it), false in the quick wiring checks
    "fedhdp_training": {"reevaluate", "local_readings"},
    # fedrepro.experiments.only_methods; absent, every method trains (runs made before the option keep their digest)
    "adaped_fl_training": {"only_methods"},
    "histograms_synthetic": {"estimator"},  # fedrepro.papers.histograms.estimator (compare)
    "forensic_sweep": {"reading_names"},  # absent, the readings are named by the parameters they set
}


@pytest.mark.parametrize("exp_id, scale", _experiments())
def test_every_key_the_kind_reads_is_in_the_resolved_params(exp_id, scale):
    exp = resolve_experiment(load_global(), exp_id, scale)
    keys, _ = kind_reads(exp.kind)
    assert sorted(keys - set(exp.params) - OPTIONAL_BLOCKS.get(exp.kind, set())) == []


def test_an_optional_block_has_no_default_and_is_not_recorded_unless_set():
    from fedrepro.experiments import get_kind

    for kind, keys in OPTIONAL_BLOCKS.items():
        for key in keys:
            assert "default" not in get_kind(kind).schema["properties"][key]
    exp = resolve_experiment(load_global(), "fedhdp.noniid_mnist", "paper")
    assert "reevaluate" not in exp.params


# A kind written the old way: a default kept in code, a setting read from the absence of a key, both in a helper
# it hands its parameters to.
def _helper(q: dict) -> float:
    return q.get("x", 1.0) + q["y"] + ("z" in q)


def _old_style_kind(p: dict, rng, ctx) -> float:
    return _helper(p) + p["w"]


def test_the_scan_finds_what_a_helper_reads_and_the_defaults_it_keeps():
    keys, faults = scan(_old_style_kind)
    assert keys == {"w", "x", "y"}
    assert sorted(faults) == [
        f"{__name__}._helper: 'z' in q",
        f"{__name__}._helper: q.get('x', 1.0) keeps a default in code",
    ]
    assert sorted(module_faults(__name__)) == sorted(faults)  # the module-wide scan finds them without the call
    resolved = fill_defaults({"w": 1}, {"properties": {"y": {"default": 2}}})
    assert sorted(keys - set(resolved)) == ["x"]  # what the test above reports for such a kind


def test_fill_defaults_fills_every_depth_the_schema_describes_and_keeps_what_is_given():
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "number", "default": 1},
            "b": {"type": "object", "default": {}, "properties": {"c": {"default": [1, 2]}}},
            "methods": {"additionalProperties": {"properties": {"private": {"default": False}}}},
            "runs": {"items": {"properties": {"seed": {"default": 0}}}},
            "none": {"type": ["object", "null"], "default": None, "properties": {"d": {"default": 3}}},
        },
    }
    given = {"a": 5, "methods": {"m": {}, "n": {"private": True}}, "runs": [{}, {"seed": 4}]}
    out = fill_defaults(given, schema)
    assert out == {
        "a": 5,
        "b": {"c": [1, 2]},
        "methods": {"m": {"private": False}, "n": {"private": True}},
        "runs": [{"seed": 0}, {"seed": 4}],
        "none": None,
    }
    assert given == {"a": 5, "methods": {"m": {}, "n": {"private": True}}, "runs": [{}, {"seed": 4}]}  # untouched
    out["b"]["c"].append(3)
    assert schema["properties"]["b"]["properties"]["c"]["default"] == [1, 2]  # defaults are copied, not shared


def test_the_runs_config_yaml_records_the_schema_defaults(tmp_path):
    from fedrepro.runio import CONFIG, write_run

    exp = resolve_experiment(load_global(), "ppsgd.theorems", "paper")
    write_run(tmp_path, exp, 0, RunOutput(metrics={"x": 1.0}), 0.0)
    doc = yaml.safe_load((tmp_path / CONFIG).read_text())
    assert {k: doc["params"][k] for k in ("c", "c1", "c2")} == {"c": 1.0, "c1": 1.0, "c2": 1.0}
    assert doc["params"] == doc["paper_params"] and doc["effective_scale"] == "paper"
