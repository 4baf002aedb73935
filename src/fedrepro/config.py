"""Load and validate the global config and the per-paper experiment files.

Every validation failure is raised as :class:`ConfigError` whose message names the offending key as a dotted
path (e.g. ``experiments.fig1a.params.m``), the file it came from, and what was expected.
"""

from __future__ import annotations

import copy
import functools
import importlib.resources
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from fedrepro.checkout import REPO_ROOT, ROOT_ENV, resolve_path
from fedrepro.errors import ConfigError, FedreproError

DEFAULT_CONFIG = REPO_ROOT / "config" / "config.yaml"
SCALES = ("quick", "paper")  # the parameter sets a run uses (results/<paper>/<exp>/<scale>/)
MODES = ("default", "quick", "paper")  # config `scale`: default = each experiment's default_scale


def _key_path(path) -> str:
    parts = [str(p) if not isinstance(p, int) else f"[{p}]" for p in path]
    return ".".join(parts).replace(".[", "[") or "<top level>"


def _finite_number(checker, instance: Any) -> bool:
    return jsonschema.Draft202012Validator.TYPE_CHECKER.is_type(instance, "number") and math.isfinite(instance)


# JSON schema validation where "number" means a finite one: a NaN or an infinity given for a parameter (`--set
# delta=.nan`, `sigma_x: .inf`) is refused before any work; a schema that allows inf says so ({"const": inf},
# fedrepro.experiments.params.INF). "integer" already excludes them.
_FiniteValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("number", _finite_number),
)


def validate(
    instance: Any,
    schema: Mapping,
    *,
    source: str,
    prefix: tuple = (),
    error: type[FedreproError] = ConfigError,
    fix: str = "",
    finite: bool = True,
) -> None:
    """Validate ``instance`` against a JSON schema; raise ``error`` (ConfigError unless the caller validates another
    kind of file) naming ``source`` and the first bad key, followed by ``fix`` (what to do) when given. ``finite``:
    a "number" must be finite (configuration and parameters); False keeps JSON schema's own reading, which lets NaN
    and inf through (result files, whose non-finite values the report judges row by row)."""
    validator = (_FiniteValidator if finite else jsonschema.Draft202012Validator)(schema)
    errors = sorted(validator.iter_errors(instance), key=lambda e: (len(e.absolute_path), str(e.absolute_path)))
    if not errors:
        return
    err = errors[0]
    path = list(prefix) + list(err.absolute_path)
    tail = f"; {fix}" if fix else ""
    if finite and isinstance(err.instance, float) and not math.isfinite(err.instance):
        raise error(f"{source}: {_key_path(path)}: {err.instance} is not a finite number; give a finite value{tail}")
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        allowed = sorted(err.schema.get("properties", {}))
        extra = sorted(set(err.instance) - set(allowed))
        key = _key_path(path + extra[:1])
        hint = f"unknown key (allowed here: {', '.join(allowed)})" if allowed else "unknown key"
        raise error(f"{source}: {key}: {hint}{tail}")
    if err.validator == "required":
        missing = err.message.split("'")[1] if "'" in err.message else err.message
        raise error(f"{source}: {_key_path(path + [missing])}: required key is missing{tail}")
    raise error(f"{source}: {_key_path(path)}: {err.message}{tail}")


def fill_defaults(instance: Any, schema: Mapping) -> Any:
    """A copy of ``instance`` with every key its JSON schema gives a ``default`` for and the instance lacks set to
    that default, at every depth the schema describes an object (``properties``, ``additionalProperties``,
    ``items``): the values a run uses are the ones its resolved config.yaml records, not defaults kept in code.
    A default is filled in before its own defaults (an absent ``opt_out: {default: {}}`` gets its ``fraction``)."""
    if isinstance(instance, dict):
        out = dict(instance)
        props = schema.get("properties") or {}
        for key, sub in props.items():
            if key not in out and "default" in sub:
                out[key] = copy.deepcopy(sub["default"])
        extra = schema.get("additionalProperties")
        for key, value in out.items():
            sub = props.get(key, extra if isinstance(extra, Mapping) else None)
            if sub is not None:
                out[key] = fill_defaults(value, sub)
        return out
    if isinstance(instance, list) and isinstance(schema.get("items"), Mapping):
        return [fill_defaults(v, schema["items"]) for v in instance]
    return instance


def resolve_params(given: Mapping, schema: Mapping, *, source: str = "params", prefix: tuple = ()) -> dict:
    """A kind's parameters as it runs with them: ``given`` with the schema's defaults filled in, validated."""
    params = fill_defaults(dict(given), schema)
    validate(params, schema, source=source, prefix=prefix)
    return params


def yaml_syntax_error(path: str | Path, exc: yaml.YAMLError) -> ConfigError:
    """One line naming the file, line and column of a YAML syntax error (PyYAML's own message spans several lines
    and names the parsed string, not the file)."""
    mark = getattr(exc, "problem_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    context, cmark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context and cmark is not None and mark is not None and cmark.line != mark.line:
        context = f"{context} started at line {cmark.line + 1}"
    what = ", ".join(str(x) for x in (context, getattr(exc, "problem", None)) if x)
    return ConfigError(f"{where}: not valid YAML ({what or str(exc).splitlines()[0]}); fix the syntax there")


# PyYAML's safe loader, parsed by libyaml where PyYAML was built with it (the wheels are)
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class StrictLoader(SAFE_LOADER):
    """PyYAML's safe loader refusing a key written twice in one mapping (PyYAML keeps the last one silently: a
    parameter, ``scale:`` or a whole experiment block given twice would be half ignored). Keys merged in with ``<<:``
    may be overridden by the mapping's own keys, as YAML says. Based on :data:`SAFE_LOADER` (libyaml): a workflow's
    DAG reads the papers' configs hundreds of times."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "in a mapping",
                        node.start_mark,
                        f"duplicate key {key!r} (first at line {seen[key] + 1}); keep one",
                        key_node.start_mark,
                    )
                seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


def strict_yaml(text: str) -> Any:
    """YAML text read with :class:`StrictLoader` (safe: no Python objects; a duplicate key is an error). A text read
    before is not parsed again (the cache is keyed by the text itself, so an edited file is always read anew); each
    call gets its own copy to change."""
    return copy.deepcopy(_parsed(text))


@functools.lru_cache(maxsize=32)
def _parsed(text: str) -> Any:
    return yaml.load(text, Loader=StrictLoader)  # noqa: S506 - StrictLoader is a SafeLoader


def read_yaml(path: str | Path) -> Any:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        return strict_yaml(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise yaml_syntax_error(path, exc) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read ({exc}); is it a text file?") from None


def load_schema(name: str) -> dict:
    """A JSON schema shipped with the package (fedrepro/schemas/, package data: found without a checkout)."""
    return copy.deepcopy(_schema(name))


@functools.cache
def _schema(name: str) -> dict:
    text = importlib.resources.files("fedrepro").joinpath("schemas", name).read_text(encoding="utf-8")
    return yaml.load(text, Loader=SAFE_LOADER)  # noqa: S506 - a safe loader


def parse_overrides(items: list[str] | None) -> dict:
    """Turn ``["n=7", "eps0=[0.1,0.2]", "gmm.k=3"]`` into a nested dict; values are parsed as YAML."""
    out: dict = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE")
        key, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError:
            value = raw
        if isinstance(value, str):  # PyYAML (YAML 1.1) reads "1e-5" as a string; a number is meant
            try:
                value = float(value)
            except ValueError:
                pass
            else:  # "1e6" is the integer 10**6 (as `reps: 1000000` would be), not a float a count cannot use
                value = int(value) if value.is_integer() else value
        node = out
        parts = key.strip().split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def deep_merge(base: Mapping, over: Mapping) -> dict:
    out = copy.deepcopy(dict(base))
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


BOOL_TEXT = {"true": True, "false": False}
BOOL_KEYS = (("data", "online"), ("archive", "use"))  # nested booleans a user sets with Snakemake's --config


def validate_global(cfg: Mapping, source: str = "config") -> dict:
    """The validated global config; ``only_papers`` (when set) narrows ``papers`` and ``targets`` to those papers.

    ``data.online`` and ``archive.use`` given as the text ``true``/``false`` (Snakemake's ``--config 'data={online:
    true}'`` parses nested values as text) are taken as the booleans."""
    for block, key in BOOL_KEYS:
        node = cfg.get(block)
        if isinstance(node, Mapping) and isinstance(node.get(key), str) and node[key].lower() in BOOL_TEXT:
            cfg = {**cfg, block: {**node, key: BOOL_TEXT[node[key].lower()]}}
    validate(cfg, load_schema("config.schema.yaml"), source=source)
    cfg = dict(cfg)
    _check_output_dirs(cfg, source)
    unknown = sorted({k.split(".", 1)[0] for k in cfg.get("default_scales") or {}} - set(cfg["papers"]))
    if unknown:
        raise ConfigError(
            f"{source}: default_scales: no paper {', '.join(map(repr, unknown))} "
            f"(configured: {', '.join(sorted(cfg['papers']))}); keys are PAPER.NAME"
        )
    only = cfg.pop("only_papers", None)
    if only:
        unknown = [p for p in only if p not in cfg["papers"]]
        if unknown:
            raise ConfigError(
                f"{source}: only_papers: {', '.join(map(repr, unknown))} not in papers "
                f"(configured: {', '.join(sorted(cfg['papers']))})"
            )
        cfg["papers"] = {p: f for p, f in cfg["papers"].items() if p in only}
        cfg["targets"] = {p: f for p, f in (cfg.get("targets") or {}).items() if p in only}
    return cfg


def _check_output_dirs(cfg: Mapping, source: str) -> None:
    """The configured output directories (results_dir, figures_dir, logs_dir, data.dir) are directories the project
    may write: not the checkout, not inside what git tracks there (config/, src/, .git, archive/...), not a file or
    device (fedrepro.files.output_problem)."""
    from fedrepro.files import output_problem

    for key, value in (
        ("results_dir", cfg["results_dir"]),
        ("figures_dir", cfg["figures_dir"]),
        ("logs_dir", cfg["logs_dir"]),
        ("data.dir", cfg["data"]["dir"]),
    ):
        problem = output_problem(str(resolve_path(value)), True, REPO_ROOT)
        if problem:
            raise ConfigError(f"{source}: {key}: {value!r} {problem}")


def load_global(path: str | Path | None = None, overrides: Mapping | None = None) -> dict:
    if not path and not DEFAULT_CONFIG.is_file():
        raise ConfigError(
            f"no fedrepro checkout here: {DEFAULT_CONFIG} does not exist; run from the checkout (the directory with "
            f"the Snakefile and config/), or set {ROOT_ENV} to it"
        )
    path = Path(path) if path else DEFAULT_CONFIG
    cfg = deep_merge(read_yaml(path), overrides or {})
    return validate_global(cfg, source=str(path))


@dataclass(frozen=True)
class Experiment:
    """One experiment of one paper, with parameters resolved for a scale."""

    paper: str
    name: str
    kind: str
    description: str
    params: dict
    paper_params: dict
    scale: str
    datasets: tuple[str, ...]
    deterministic: bool = False
    partitions: tuple[str, ...] = ()
    stage: str = "estimate"

    @property
    def id(self) -> str:
        return f"{self.paper}.{self.name}"

    @property
    def effective_scale(self) -> str:
        """``paper`` whenever the parameters equal the paper's, whatever scale was asked for; ``custom`` for paper
        scale with --set overrides (not the paper's settings either); else ``quick``."""
        if self.params == self.paper_params:
            return "paper"
        return "custom" if self.scale == "paper" else self.scale


def load_paper(cfg: Mapping, paper: str) -> dict:
    if paper not in cfg["papers"]:
        raise ConfigError(f"papers.{paper}: no such paper (configured: {', '.join(sorted(cfg['papers']))})")
    path = resolve_path(cfg["papers"][paper])
    doc = read_yaml(path)
    validate(doc, load_schema("paper.schema.yaml"), source=str(path))
    if doc["paper"] != paper:
        raise ConfigError(f"{path}: paper: is {doc['paper']!r} but config.yaml lists it as {paper!r}")
    for name, fig in (doc.get("figures") or {}).items():
        if fig["experiment"] not in doc["experiments"]:
            raise ConfigError(f"{path}: figures.{name}.experiment: unknown experiment {fig['experiment']!r}")
    for exp_id, scale in (cfg.get("default_scales") or {}).items():
        owner, name = exp_id.split(".", 1)
        if owner != paper:
            continue
        if name not in doc["experiments"]:
            raise ConfigError(
                f"config: default_scales.{exp_id}: {path} has no experiment {name!r} "
                f"(known: {', '.join(sorted(doc['experiments']))})"
            )
        doc["experiments"][name]["default_scale"] = scale  # the command line's choice over the file's
    return doc


def resolve_experiment(
    cfg: Mapping, exp_id: str, scale: str | None = None, overrides: Mapping | None = None
) -> Experiment:
    """Resolve ``paper.name`` to an :class:`Experiment` with validated parameters for ``scale``."""
    from fedrepro.experiments import get_kind  # local import: the registry imports the experiment modules

    if "." not in exp_id:
        raise ConfigError(f"experiment id {exp_id!r}: expected PAPER.NAME (experiment NAME of config/PAPER.yaml)")
    paper, name = exp_id.split(".", 1)
    doc = load_paper(cfg, paper)
    if name not in doc["experiments"]:
        known = ", ".join(sorted(doc["experiments"]))
        raise ConfigError(f"{cfg['papers'][paper]}: experiments.{name}: no such experiment (known: {known})")
    entry = doc["experiments"][name]
    scale = run_scale(entry, scale or cfg["scale"])
    kind = get_kind(entry["kind"], source=f"{cfg['papers'][paper]}: experiments.{name}.kind")
    given = dict(entry["params"])
    params = deep_merge(given, entry.get("quick") or {}) if scale == "quick" else dict(given)
    params = deep_merge(params, overrides or {})
    source, prefix = str(cfg["papers"][paper]), ("experiments", name, "params")
    # the schema's defaults are filled in after the overrides: effective_scale compares what runs, and the run's
    # config.yaml records every value it ran with
    paper_params = resolve_params(given, kind.schema, source=source, prefix=prefix)
    params = resolve_params(params, kind.schema, source=source + " (after quick/--set overrides)", prefix=prefix)
    return Experiment(
        paper=paper,
        name=name,
        kind=entry["kind"],
        description=entry["description"],
        params=params,
        paper_params=paper_params,
        scale=scale,
        datasets=experiment_datasets(cfg, entry, f"{source}: experiments.{name}"),
        partitions=tuple(entry.get("partitions") or ()),
        deterministic=kind.deterministic,
        stage=kind.stage,
    )


def run_scale(entry: Mapping, mode: str) -> str:
    """The scale (quick | paper) an experiment runs at under ``mode``: ``default`` takes the experiment's
    ``default_scale`` (quick when unset); an experiment without quick overrides runs at paper scale under every mode,
    so its runs, seeds and verdicts are the paper scale's (quick would repeat the paper's settings under a quick
    label)."""
    if mode not in MODES:
        raise ConfigError(f"scale: {mode!r} is not one of {', '.join(MODES)}")
    scale = entry.get("default_scale", "quick") if mode == "default" else mode
    return "paper" if scale == "quick" and not entry.get("quick") else scale


def experiment_scale(cfg: Mapping, paper: str, exp: str, mode: str | None = None) -> str:
    """The scale experiment ``paper.exp`` runs at under ``mode`` (default: the config's scale)."""
    return run_scale(load_paper(cfg, paper)["experiments"][exp], mode or cfg["scale"])


def experiment_datasets(cfg: Mapping, entry: Mapping, where: str = "experiment") -> tuple[str, ...]:
    """Datasets an experiment reads: its ``datasets`` plus the source dataset of each of its ``partitions``
    (config/partitions.yaml), in order, without repeats."""
    out = list(entry.get("datasets") or ())
    if entry.get("partitions"):
        specs = load_partitions(cfg)
        for name in entry["partitions"]:
            if name not in specs:
                raise ConfigError(
                    f"{where}.partitions: unknown partition {name!r} "
                    f"(known: {', '.join(specs) or 'none'}; see {cfg.get('partitions')})"
                )
            out.append(specs[name]["dataset"])
    return tuple(dict.fromkeys(out))


RESOURCE_KEYS = ("threads", "mem_mb", "runtime", "gpu")


def paper_seeds(cfg: Mapping, entry: Mapping, scale: str) -> list[int]:
    """The seeds an experiment runs at ``scale``: its own ``seeds.<scale>`` where it sets them, else config.yaml's."""
    return list(((entry.get("seeds") or {}).get(scale)) or cfg["seeds"][scale])


def list_experiments(cfg: Mapping, paper: str) -> list[str]:
    return list(load_paper(cfg, paper)["experiments"])


def load_partitions(cfg: Mapping) -> dict:
    """The partition specs of config/partitions.yaml, validated (dataset and scheme must exist)."""
    if not cfg.get("partitions"):
        return {}
    from fedrepro.data.catalog import all_datasets
    from fedrepro.data.partition import partitioners

    path = resolve_path(cfg["partitions"])
    doc = read_yaml(path)
    validate(doc, load_schema("partitions.schema.yaml"), source=str(path))
    datasets, schemes = all_datasets(), partitioners()
    for name, spec in doc["partitions"].items():
        if spec["dataset"] not in datasets:
            raise ConfigError(
                f"{path}: partitions.{name}.dataset: unknown dataset {spec['dataset']!r} "
                f"(known: {', '.join(sorted(datasets))})"
            )
        if spec["scheme"] not in schemes:
            raise ConfigError(
                f"{path}: partitions.{name}.scheme: unknown scheme {spec['scheme']!r} (known: {', '.join(schemes)})"
            )
    return doc["partitions"]
