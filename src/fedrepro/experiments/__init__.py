"""Registry of experiment kinds.

An experiment *kind* is a function ``fn(params, rng, ctx) -> RunOutput`` plus the JSON schema of its parameters.
Each paper's experiment file (config/<paper>.yaml) names a kind per experiment; the same kind can serve several
experiments (Fig. 1a, 3a and 3b are one kind with different (m, n)). Modules in this package register their kinds
with :func:`experiment_kind` and are imported on first lookup.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

from fedrepro.errors import ConfigError


@dataclass
class Check:
    """A pass/fail statement a run verifies (a closed form matched, a curve's shape, a paper's claim)."""

    passed: bool
    detail: str
    value: float | None = None
    expected: float | None = None
    tolerance: float | None = None


@dataclass
class RunOutput:
    """What one seeded run of an experiment returns.

    metrics: nested dict whose leaves are numbers (the values targets are compared against).
    history: per-round / per-grid-point rows (written as parquet).
    checks: named pass/fail statements.
    accountant: name+version of the privacy accountant behind any epsilon, or None.
    """

    metrics: dict[str, Any]
    history: pd.DataFrame = field(default_factory=pd.DataFrame)
    checks: dict[str, Check] = field(default_factory=dict)
    accountant: dict[str, str] | None = None


@dataclass(frozen=True)
class RunContext:
    """What a run may need besides its parameters: its id, seed, the verified files of its datasets, the
    directories of the partitioned datasets it trains on (load with fedrepro.data.fedformat.load), where long
    runs keep their round checkpoints (None: no checkpoints; see fedrepro.learning.checkpoint), and the run's
    clock, which those checkpoints carry across a kill (fedrepro.runio.RunClock; None outside `fedrepro run`)."""

    exp_id: str
    seed: int
    data: dict[str, list[Path]] = field(default_factory=dict)
    partitions: dict[str, Path] = field(default_factory=dict)
    checkpoint_dir: Path | None = None
    clock: Any = None


@dataclass(frozen=True)
class Kind:
    name: str
    fn: Callable[[dict, np.random.Generator, RunContext], RunOutput]
    schema: dict
    module: str
    deterministic: bool = False
    stage: str = "estimate"


_KINDS: dict[str, Kind] = {}
_loaded = False


def experiment_kind(name: str, schema: dict, *, deterministic: bool = False, stage: str = "estimate"):
    """Decorator registering ``fn(params, rng, ctx) -> RunOutput`` as experiment kind ``name``.

    deterministic: the function never draws from ``rng`` (closed forms, accountants), so the workflow runs it once
    (the first seed of the scale) instead of once per seed; tests/test_kinds.py checks the claim.
    stage: "privacy" for accounting experiments, whose results the privacy stage also collects into
    results/privacy/<paper>/ (workflow/rules/privacy.smk); "estimate" for everything else.
    """

    def deco(fn):
        if name in _KINDS and _KINDS[name].fn is not fn:
            raise RuntimeError(f"experiment kind {name!r} registered twice")
        _KINDS[name] = Kind(name=name, fn=fn, schema=schema, module=fn.__module__,
                            deterministic=deterministic, stage=stage)
        return fn

    return deco


_DECL = re.compile(r"""@experiment_kind\(\s*["']([A-Za-z0-9_]+)["']""")


def _kind_index() -> dict[str, str]:
    """kind name -> module name, read from the modules' source without importing them.

    A run imports only the module that defines its kind, so one experiment's heavy dependencies (scikit-learn,
    torch) never slow down another's start-up.
    """
    index = {}
    for mod in pkgutil.iter_modules(__path__):
        src = Path(__path__[0], f"{mod.name}.py")
        if src.is_file():
            for name in _DECL.findall(src.read_text(encoding="utf-8")):
                index[name] = f"{__name__}.{mod.name}"
    return index


def _load_all() -> None:
    global _loaded
    if _loaded:
        return
    for mod in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{mod.name}")
    _loaded = True


def get_kind(name: str, source: str = "kind") -> Kind:
    if name not in _KINDS:
        module = _kind_index().get(name)
        if module is not None:
            importlib.import_module(module)
    if name not in _KINDS:
        _load_all()
    if name not in _KINDS:
        raise ConfigError(f"{source}: unknown experiment kind {name!r} (known: {', '.join(sorted(_KINDS))})")
    return _KINDS[name]


def all_kinds() -> dict[str, Kind]:
    _load_all()
    return dict(_KINDS)
