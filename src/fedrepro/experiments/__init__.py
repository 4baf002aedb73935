"""Registry of experiment kinds.

An experiment *kind* is a function ``fn(params, rng, ctx) -> RunOutput`` plus the JSON schema of its parameters.
Each paper's experiment file (config/<paper>.yaml) names a kind per experiment; the same kind can serve several
experiments (Fig. 1a, 3a and 3b are one kind with different (m, n)). A module registers its kinds with
:func:`experiment_kind` into :data:`KINDS` (fedrepro.registry); which module defines which kind is declared, not
discovered: the registry's shared names for the paper-free kinds of this package, and each paper's ``KINDS``
(fedrepro.papers). A lookup imports only the module that defines the kind asked for.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedrepro.experiments.memory import MemoryNeed
from fedrepro.experiments.method_slot import MethodSlot
from fedrepro.files import to_jsonable
from fedrepro.registry import Registry


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
    undefined_ok: glob patterns of metric keys (dotted) that may legitimately be undefined (None) in some seeds and
        defined in others (e.g. "the iteration where curve A first beats curve B" when it never does); any other
        metric undefined in some seeds only fails the aggregate (fedrepro.aggregate).
    arrays: small named numeric arrays worth keeping beside the metrics (``arrays.npz``, read with
        ``allow_pickle=False``), e.g. a small model's final weights, so a result can be re-evaluated under another
        reading without training again. Keep them small: the results archive holds them.
    """

    metrics: dict[str, Any]
    history: pd.DataFrame = field(default_factory=pd.DataFrame)
    checks: dict[str, Check] = field(default_factory=dict)
    accountant: dict[str, str] | None = None
    undefined_ok: tuple[str, ...] = ()
    arrays: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunContext:
    """What a run may need besides its parameters: its id, seed, the verified files of its datasets, the
    directories of the partitioned datasets it trains on (load with fedrepro.data.fedformat.load), where long
    runs keep their round checkpoints (None: no checkpoints; see fedrepro.learning.checkpoint), the run's
    clock, which those checkpoints carry across a kill (fedrepro.runio.RunClock; None outside `fedrepro run`),
    the global configuration, for the kinds that read other experiments and the registry (forensic sweeps), and the
    digests of the input data it read (fedrepro.provenance.input_digests; empty outside `fedrepro run`)."""

    exp_id: str
    seed: int
    data: dict[str, list[Path]] = field(default_factory=dict)
    partitions: dict[str, Path] = field(default_factory=dict)
    checkpoint_dir: Path | None = None
    clock: Any = None
    config: Any = None
    inputs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Kind:
    name: str
    fn: Callable[[dict, np.random.Generator, RunContext], RunOutput]
    schema: dict
    module: str
    deterministic: bool = False
    stage: str = "estimate"
    metrics: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()
    # what the kind reads besides its parameters (another experiment's parameters, registry rows), as a
    # JSON-able dict: fn(params, cfg, exp_id); the workflow reruns the experiment when it changes
    reads: Callable[[dict, Any, str], dict] | None = None
    # what its arrays take at once for given parameters (a lower bound), checked before a run starts
    memory: MemoryNeed | None = None
    # privacy-stage kinds: the rows of results/privacy/<paper>/epsilon.csv from one run,
    # epsilon_rows(exp, metrics, history) -> [row dict]; and, for kinds whose history is an epsilon curve, its panel
    # of the privacy figure, epsilon_panel(ax, exp, metrics, history, targets) (fedrepro.report.privacy)
    epsilon_rows: Callable[[Any, dict, pd.DataFrame], list[dict]] | None = None
    epsilon_panel: Callable[..., None] | None = None
    # how the kind runs a method from outside the package (fedrepro.experiments.method_slot), or why it cannot
    method_slot: MethodSlot | None = None
    no_method_slot: str = ""
    # a forensic kind: its runs conclude per registry row (params.rows, checks conclusion.<row>), which the report
    # links to the rows as their evidence (fedrepro.report.status.forensic_evidence)
    forensic: bool = False
    # the experiment (of the same paper) whose runs at its own scale and seeds this kind reads (e.g. kept final
    # models, a summary), for the given params; None: none. The workflow makes those runs first.
    reads_runs: Callable[[dict], str | None] | None = None
    # whether, for params, it only reads those runs (no training of its own), so that in the default scale mode it
    # runs at the scale the read experiment runs at (paper, where that is restored from the archive); None: always
    reads_only: Callable[[dict], bool] | None = None
    # a kind that judges inside its runs by the report's rule (it records ``verdict_rule``): its conclusions judged
    # again under the current rule from a run's history, rejudge(params, history, targets, paper_doc) -> row id ->
    # (conclusion Check, the readings whose verdict changed) (fedrepro.report.status.judged_again)
    rejudge: Callable[[dict, pd.DataFrame, Any, Any], dict] | None = None
    # parameters that only word what its runs conclude (a forensic sweep's paper_issue, implementation_fix): a run
    # made when they read otherwise is not stale, and the report words its conclusions as the config now does
    annotations: tuple[str, ...] = ()
    # what changed in what the kind computes, one entry per change after its first revision (revision = 1 + their
    # number): a run records the revision that made it, and one made at an earlier revision is stale
    revisions: tuple[str, ...] = ()

    @property
    def revision(self) -> int:
        """The revision of what the kind computes: 1 + the changes listed in ``revisions``."""
        return 1 + len(self.revisions)

    def changes_since(self, revision: int) -> list[str]:
        """What changed in what the kind computes after ``revision`` (the listed changes it predates)."""
        return list(self.revisions[max(revision, 1) - 1 :])

    def follows_read_scale(self, params: dict) -> bool:
        """Whether this kind, for ``params``, reads another experiment's runs without training, and so runs at the scale
        that experiment runs at under the default scale mode."""
        if self.reads_runs is None or self.reads_runs(params) is None:
            return False
        return self.reads_only is None or bool(self.reads_only(params))

    def read_inputs(self, params: dict, cfg: Any, exp_id: str) -> dict | None:
        """What a run of this kind reads besides its parameters (``reads``), as plain values; None: nothing. The run
        records it (``reads_digest``) and fedrepro.staleness compares it with what it is now."""
        if self.reads is None:
            return None
        return to_jsonable(self.reads(params, cfg, exp_id))

    def produces_metric(self, key: str) -> bool:
        """Whether the kind declares a metric key (dotted, as in summary.json) matching ``key``."""
        return any(fnmatch.fnmatchcase(key, pattern) for pattern in self.metrics)

    def produces_check(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.checks)


def experiment_kind(
    name: str,
    schema: dict,
    *,
    deterministic: bool = False,
    stage: str = "estimate",
    metrics: tuple[str, ...] = (),
    checks: tuple[str, ...] = (),
    reads: Callable[[dict, Any, str], dict] | None = None,
    memory: MemoryNeed | None = None,
    epsilon_rows: Callable[[Any, dict, pd.DataFrame], list[dict]] | None = None,
    epsilon_panel: Callable[..., None] | None = None,
    method_slot: MethodSlot | None = None,
    no_method_slot: str = "",
    forensic: bool = False,
    reads_runs: Callable[[dict], str | None] | None = None,
    reads_only: Callable[[dict], bool] | None = None,
    rejudge: Callable[[dict, pd.DataFrame, Any, Any], dict] | None = None,
    annotations: tuple[str, ...] = (),
    revisions: tuple[str, ...] = (),
):
    """Decorator registering ``fn(params, rng, ctx) -> RunOutput`` as experiment kind ``name``.

    deterministic: the function never draws from ``rng`` (closed forms, accountants), so the workflow runs it once
    (the first seed of the scale) instead of once per seed; tests/experiments/test_kinds.py checks the claim.
    stage: "privacy" for accounting experiments, whose results the privacy stage also collects into
    results/privacy/<paper>/ (workflow/rules/privacy.smk); "estimate" for everything else.
    metrics, checks: glob patterns of the metric keys (dotted, as in summary.json) and the check names the kind
    produces, so that a registry row naming anything else is refused when the registry is loaded; tests check every
    kind's runs against them (tests/test_architecture.py, tests/experiments/test_kinds.py).
    reads: for kinds that read more than their parameters (forensic sweeps read the swept experiment and registry
    rows): ``reads(params, cfg, exp_id)`` returns what they read, so a change there reruns them (workflow
    resolved_params).
    memory: for kinds whose arrays grow with their parameters, the parameters they grow with and a lower bound on
    their bytes (fedrepro.experiments.memory), so that `run` refuses sizes the machine cannot hold before any work.
    epsilon_rows, epsilon_panel: for privacy-stage kinds, what the privacy stage makes of a run (the rows of the
    paper's epsilon.csv; the panel of its epsilon-vs-rounds figure, for epsilon curves): the stage itself knows no
    kind (fedrepro.report.privacy).
    method_slot: for kinds that train engine Algorithms, how `compare` runs a user's method under the kind's protocol
    (fedrepro.experiments.method_slot); no_method_slot: for a training kind that cannot, why (its refusal).
    forensic: its runs conclude per registry row (``conclusion.<row>`` checks over ``params.rows``), the rows'
    evidence in the report. reads_runs: the experiment whose runs (at its own scale and seeds) it reads, for params;
    reads_only: whether it then trains nothing of its own (default: yes), so that it follows that experiment's scale.
    rejudge: for a kind whose runs judge rows by the report's rule and record which (``verdict_rule``), how a run made
    under an older rule is judged again from its history, so the report need not know the kind.
    annotations: parameters that only word its conclusions (a forensic sweep's paper_issue): editing them leaves its
    runs current (fedrepro.staleness), and a kind with ``rejudge`` has its conclusions worded again by the report.
    revisions: what changed in what the kind computes (a fixed bug, another numeric path), one entry per change, the
    newest last: runs record the kind's revision (1 + their number), and runs made before a change are stale
    (fedrepro.staleness), in results/ and in the archive alike. A change that leaves every result as it was (a
    refactoring, a speed-up that replays bit for bit) is not one.
    """

    def deco(fn):
        KINDS.add(
            name,
            Kind(
                name=name,
                fn=fn,
                schema=schema,
                module=fn.__module__,
                deterministic=deterministic,
                stage=stage,
                metrics=tuple(metrics),
                checks=tuple(checks),
                reads=reads,
                memory=memory,
                epsilon_rows=epsilon_rows,
                epsilon_panel=epsilon_panel,
                method_slot=method_slot,
                no_method_slot=no_method_slot,
                forensic=forensic,
                reads_runs=reads_runs,
                reads_only=reads_only,
                rejudge=rejudge,
                annotations=tuple(annotations),
                revisions=tuple(revisions),
            ),
        )
        return fn

    return deco


# Paper-free kinds: epsilon curves of any mechanism (used by several papers' accounting experiments).
KINDS: Registry[Kind] = Registry(
    "experiment kind",
    {
        "privacy_curve": "fedrepro.experiments.privacy_curves",
        "privacy_grid": "fedrepro.experiments.privacy_curves",
        "forensic_sweep": "fedrepro.audit.forensics",  # deviation forensics of any paper's experiment
        "printed_relations": "fedrepro.audit.consistency",  # a paper's printed numbers checked against each other
    },
    "KINDS",
)


def kind_modules() -> dict[str, str]:
    """kind name -> the module that registers it: the shared kinds and every paper's declared ``KINDS``."""
    return KINDS.modules()


def get_kind(name: str, source: str = "kind") -> Kind:
    return KINDS.get(name, source)


def all_kinds() -> dict[str, Kind]:
    """Every declared kind (imports every kind module)."""
    return KINDS.all()
