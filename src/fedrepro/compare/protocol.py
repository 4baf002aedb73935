"""Run a user's method under an experiment's protocol, beside the paper's methods, over paired seeds.

Each seed's protocol draws everything from ``rng_for(experiment, seed)`` before any method trains (one training seed
shared by every method: initialization, client sampling, minibatch order), so the user's method trained alone with
the experiment's seed meets exactly the data and initialization the paper's methods met in that seed's run. The
paper's methods come either from the workflow's runs of the same experiment and parameters (``baselines``: run
directories, checked against the resolved parameters) or are rebuilt here by the kind itself.

Resume: with ``state_dir``, every finished seed (the paper's cells and curves, the method's, or its failure) is
written there as ``<N>.json`` under a key of everything it depends on (experiment, resolved parameters, the
method file's bytes and class, the input data's digests, the baseline run read, fedrepro's own code). A killed
``compare`` run again reads the finished seeds back instead of training them (the same numbers: every seed is
deterministic) and trains only the rest; a changed method file, parameter, input or code trains the seed again.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from fedrepro.compare.method_file import accepts, failure, guarded, method_name, method_sources, with_args
from fedrepro.config import Experiment, fill_defaults
from fedrepro.data.stamps import sha256_of
from fedrepro.errors import ConfigError, ResultError
from fedrepro.experiments import KINDS, Kind, RunContext, get_kind
from fedrepro.experiments.method_slot import PAPER, YOURS, MethodSlot
from fedrepro.learning import algorithms
from fedrepro.learning.engine import Algorithm, sends_messages
from fedrepro.seeding import rng_for

SEEDS_DIR = ".seeds"  # under compare's --out: the finished seeds a killed run resumes from


@dataclass
class Row:
    """One method's cells per seed (``None`` for a seed where it failed) and its curves."""

    name: str
    origin: str
    cells: list[dict[str, float] | None] = field(default_factory=list)
    curves: list[pd.DataFrame] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


@dataclass
class Comparison:
    experiment: Experiment
    slot: MethodSlot
    seeds: list[int]
    rows: list[Row]
    private: bool
    method_sha256: str = ""  # of the method file the row was trained from
    resumed: list[int] = field(default_factory=list)  # seeds read back from an earlier, killed run
    baseline_runs: dict[int, str] = field(default_factory=dict)  # seed -> run directory the paper's rows came from
    method_sources: dict[str, str] = field(default_factory=dict)  # the method's code: file -> sha256
    method_args: dict = field(default_factory=dict)  # --method-arg: the constructor's keyword arguments
    lr: list[float] = field(default_factory=list)  # --lr: the method's own learning rates ([]: the protocol's)
    privacy_note: str = ""  # how the method's privacy is had under the protocol (MethodSlot.privacy_note)
    by_construction: bool = False  # the protocol released what the method sends (private steps, or its messages)

    @property
    def columns(self) -> list[str]:
        out: list[str] = []
        for row in self.rows:
            for cells in row.cells:
                out += [c for c in (cells or {}) if c not in out]
        return out


def slot_of(exp: Experiment) -> MethodSlot:
    """The kind's method slot, or a one-line refusal saying why this experiment cannot run a user's method."""
    kind = get_kind(exp.kind)
    if kind.method_slot is not None:
        return kind.method_slot
    slots = sorted(name for name, k in KINDS.all().items() if k.method_slot is not None)
    why = kind.no_method_slot or (
        "it trains no federated method (an estimation, accounting or closed-form experiment); methods run under "
        f"the experiments of kind {' or '.join(slots)} (python -m fedrepro list)"
    )
    raise ConfigError(f"{exp.id} (kind {exp.kind}) cannot run a user's Algorithm: {why}")


def _check_method(cls: type[Algorithm], path: Path, name: str, slot: MethodSlot, exp: Experiment) -> bool:
    if name in slot.methods(exp.params):
        raise ConfigError(f"{path}: method name {name!r} is a method of {exp.id}; set the class's `name` to another")
    private = slot.private(exp.params)
    if private and slot.releases_steps and cls.steps_unsampled:
        raise ConfigError(
            f"{path}: {cls.__name__}.steps_unsampled: under {exp.id}'s private protocol the released steps are those "
            "of the round's sampled clients, which its accountant counts (sampling rate K/m); steps of the others "
            "fall outside it"
        )
    if private and not (slot.releases_steps or slot.releases_messages) and not accepts(cls, "dp"):
        raise ConfigError(
            f"{path}: {exp.id} is a private protocol (its rows are DP): {cls.__name__}.__init__ must accept dp= "
            "(the clip and noise multiplier the protocol calibrates; README: Compare your method)"
        )
    if not accepts(cls, "weight_decay"):
        raise ConfigError(f"{path}: {cls.__name__}.__init__ must accept weight_decay= (the protocol's weight decay)")
    return private


def _baseline_docs(dirs: Sequence[Path], exp: Experiment, seeds: list[int], inputs: Mapping | None) -> dict[int, Path]:
    """The run directory of each seed among ``dirs``, checked to be this experiment at these parameters and, where
    ``inputs`` (the digests of the data the method trains on) is given, made from the same data."""
    from fedrepro.provenance import changed_inputs, params_digest
    from fedrepro.runio import read_metrics

    digest, found = params_digest(exp.params), {}
    for d in map(Path, dirs):
        doc = read_metrics(d)
        if doc["experiment"] != exp.id or doc.get("params_digest") != digest:
            raise ResultError(
                f"{d}: a run of {doc['experiment']} with other parameters than {exp.id} at scale {exp.scale}; give "
                "runs of the same experiment and scale, or leave --baselines out to rebuild them"
            )
        changed = [] if inputs is None else changed_inputs(doc.get("inputs") or {}, inputs)
        if changed:
            raise ResultError(
                f"{d}: made from other input data than the method would train on ({', '.join(changed)}): a paired "
                "difference needs the same data; rerun the paper's methods, or leave --baselines out to rebuild them"
            )
        found[int(doc["seed"])] = d
    missing = [s for s in seeds if s not in found]
    if missing:
        raise ResultError(f"--baselines: no run of seed(s) {missing} of {exp.id} among {len(found)} run(s)")
    return found


def compare(
    exp: Experiment,
    cls: type[Algorithm],
    path: Path,
    seeds: list[int],
    context: Callable[[int], RunContext],
    baselines: Sequence[Path] = (),
    inputs: Mapping | None = None,
    state_dir: Path | None = None,
    method_args: Mapping | None = None,
    lr: Sequence[float] | None = None,
) -> Comparison:
    """Train ``cls`` under ``exp``'s protocol for every seed, beside the paper's methods (read from ``baselines``
    or rebuilt); a failure of the user's method marks its row failed in that seed, loudly, and the rest goes on.
    ``inputs``: the digests of the data the method trains on (provenance.input_digests); a baseline run made from
    other data is refused. ``state_dir``: where finished seeds are kept, so that a killed run resumes (above).
    ``method_args``: keyword arguments of the method's constructor (``--method-arg``); ``lr``: the method's own
    learning rates (``--lr``), in place of the protocol's and chosen by its rule (MethodSlot.with_lr)."""
    slot, kind = slot_of(exp), get_kind(exp.kind)
    name = method_name(cls)
    method_args = dict(method_args or {})
    if lr and slot.with_lr is None:
        raise ConfigError(f"--lr: {exp.id}'s protocol takes no learning rate of a method's own")
    if slot.interface is None:  # an engine Algorithm: its privacy and weight decay checked, its training guarded
        private = _check_method(cls, path, name, slot, exp)
        algorithms.register_external(guarded(cls, path, method_args, release=private and slot.releases_steps))
    else:  # another interface (a histogram estimator): registered by the protocol's own registry
        if name in slot.methods(exp.params):
            raise ConfigError(
                f"{path}: method name {name!r} is a method of {exp.id}; set the class's `name` to another"
            )
        private = slot.private(exp.params)
        slot.register(with_args(cls, path, method_args))
    paper_rows = {m: Row(m, PAPER) for m in slot.methods(exp.params)}
    mine = Row(name, YOURS)
    runs = _baseline_docs(baselines, exp, seeds, inputs) if baselines else {}
    only = slot.only(exp.params, name, private)
    if lr:
        only = slot.with_lr(only, name, [float(x) for x in lr])
    only = fill_defaults(only, kind.schema)  # what the kind reads, as a resolved run
    resumed: list[int] = []
    method_sha = sha256_of(Path(path))
    sources = method_sources(Path(path))  # the file and the modules it may import: an edit of either trains again
    for seed in seeds:
        key = _seed_key(
            exp, cls, {"code": sources, "args": method_args, "lr": list(lr or [])}, seed, inputs, runs.get(seed)
        )
        done = _read_seed(state_dir, seed, key)
        if done is None:
            done = _run_seed(kind, exp, slot, seed, context, runs.get(seed), list(paper_rows), only, name, path)
            _write_seed(state_dir, seed, key, done)
        else:
            print(f"[fedrepro] {exp.id} seed={seed}: finished in an earlier run, read from {state_dir}", flush=True)
            resumed.append(seed)
        for row in [*paper_rows.values(), mine]:
            cells, curves = done["rows"][row.name]
            row.cells.append(cells)
            if curves is not None:
                row.curves.append(pd.DataFrame(curves))
        if done["failure"]:
            mine.failures.append(f"seed {seed}: {done['failure']}")
    rows = [*paper_rows.values(), mine]
    baseline_runs = {s: str(d) for s, d in runs.items()}
    note = slot.privacy_note(cls) if private and slot.privacy_note is not None else ""
    # released as the protocol trains it: per step when private (AdaPeD), its messages whenever it sends them (FedHDP)
    constructed = (private and slot.releases_steps) or (slot.releases_messages and sends_messages(cls))
    return Comparison(
        exp,
        slot,
        list(seeds),
        rows,
        private,
        method_sha,
        resumed,
        baseline_runs,
        sources,
        method_args,
        list(lr or []),
        note,
        constructed,
    )


def _run_seed(kind, exp, slot, seed, context, run_dir, paper_names, only, name, path) -> dict:
    """One seed: {"rows": {row: (cells or None, curves records or None)}, "failure": why the method failed or ""}."""
    metrics, history = _paper_run(kind, exp, seed, context, run_dir)
    has_curves = slot.curves is not None and history is not None and not history.empty
    rows = {m: (slot.cells(metrics, m) or None, _records(slot.curves(history, m)) if has_curves else None)
            for m in paper_names}  # fmt: skip
    print(f"[fedrepro] {exp.id} seed={seed}: {name} ({path})", flush=True)
    try:
        out = kind.fn(only, rng_for(exp.id, seed), context(seed))
    except Exception as exc:  # the user's code: its row fails, loudly; the table is still written
        why = failure(exc, path)
        print(f"fedrepro: method {name} failed in seed {seed}: {why}; its row is marked failed", file=sys.stderr)
        return {"rows": rows | {name: (None, None)}, "failure": why}
    curves = _records(slot.curves(out.history, name)) if slot.curves is not None and not out.history.empty else None
    return {"rows": rows | {name: (slot.cells(out.metrics, name) or None, curves)}, "failure": ""}


def _records(frame: pd.DataFrame) -> dict[str, list]:
    return {c: frame[c].tolist() for c in frame.columns}


def _seed_key(exp: Experiment, cls: type[Algorithm], method: dict, seed: int, inputs, run_dir: Path | None) -> str:
    """What one seed's result depends on, digested: a change to any of them trains the seed again."""
    from fedrepro.provenance import code_files, params_digest
    from fedrepro.runio import METRICS

    parts = {
        "code": code_files(),  # what fedrepro computes (an updated checkout trains again)
        "experiment": exp.id,
        "params": params_digest(exp.params),
        "method": method,  # its code (file and own modules), constructor arguments, lr grid
        "class": cls.__name__,
        "seed": seed,
        "inputs": inputs or {},
        "baseline": sha256_of(run_dir / METRICS) if run_dir else "rebuilt",
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _read_seed(state_dir: Path | None, seed: int, key: str) -> dict | None:
    path = None if state_dir is None else Path(state_dir) / f"{seed}.json"
    if path is None or not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # a torn or foreign file: the seed is trained again
    return doc["result"] if isinstance(doc, dict) and doc.get("key") == key else None


def _write_seed(state_dir: Path | None, seed: int, key: str, result: dict) -> None:
    if state_dir is None:
        return
    from fedrepro.files import atomic_write

    text = json.dumps({"key": key, "result": result}, allow_nan=True)
    atomic_write(Path(state_dir) / f"{seed}.json", lambda p: p.write_text(text, encoding="utf-8"))


def _paper_run(kind: Kind, exp: Experiment, seed: int, context, run_dir: Path | None):
    """(metrics, history) of the paper's methods in one seed: read from the workflow's run, or rebuilt."""
    if run_dir is not None:
        from fedrepro.runio import HISTORY, read_history, read_metrics

        history = read_history(run_dir) if (run_dir / HISTORY).is_file() else None
        return read_metrics(run_dir)["metrics"], history
    print(f"[fedrepro] {exp.id} seed={seed}: the paper's methods", flush=True)
    out = kind.fn(exp.params, rng_for(exp.id, seed), context(seed))
    return out.metrics, out.history
