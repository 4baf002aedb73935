"""The compute plan: what each experiment costs at paper scale, from ``config/compute.yaml``, the one source of
``python -m fedrepro plan`` and of the paper-scale cluster resources (:func:`experiment_resources`).

Each experiment's entry gives the CPU seconds of one seed on one thread and its peak memory, with how the number was
obtained (``basis``): measured here, a lower bound, extrapolated (client steps x a measured step of the same model
and batch x the method mix, or ``like`` a measured experiment of the same protocol and sizes), or estimated. The plan
multiplies by the experiment's paper seeds (one for a deterministic kind) and sums, for the experiments whose data
is available here and for all of them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass

from fedrepro.config import (
    RESOURCE_KEYS,
    SCALES,
    load_paper,
    load_schema,
    paper_seeds,
    read_yaml,
    resolve_experiment,
    resolve_path,
    validate,
)
from fedrepro.data.sources import is_available
from fedrepro.errors import ConfigError

#: a GPU is requested for an experiment whose client step, measured on one machine, runs this many times faster on
#: its GPU than on one of its CPU threads (config/compute.yaml's gpu_step); below it the CPU queue is the better use
GPU_WORTH = 4.0


@dataclass(frozen=True)
class Cost:
    """One seed of one experiment at paper scale on one CPU thread."""

    cpu_s: float
    peak_mb: float
    basis: str  # measured | lower_bound | extrapolated | estimated
    how: str  # the arithmetic or the measurement, in words
    gpu: bool = False
    gpu_ratio: float | None = None  # CPU thread / GPU, the client step measured on one machine (gpu_step)
    gpu_from: str = ""

    @property
    def gpu_s(self) -> float | None:
        """GPU seconds of one seed: the CPU cost divided by the measured step ratio (assumes the method mix and
        the evaluations speed up as the FedAvg step does: not measured)."""
        return None if self.gpu_ratio is None else self.cpu_s / self.gpu_ratio


def load_compute(cfg: Mapping) -> dict:
    """config/compute.yaml, validated; {} when the global config names no compute file (e.g. a test's)."""
    if not cfg.get("compute"):
        return {}

    path = resolve_path(cfg["compute"])
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        stamp = None  # read_yaml names the missing file
    return _read_compute(str(path), stamp)


@functools.lru_cache(maxsize=4)
def _read_compute(path: str, _mtime_ns: int | None) -> dict:

    doc = read_yaml(path)
    validate(doc, load_schema("compute.schema.yaml"), source=path)
    for exp_id, e in doc["experiments"].items():
        where = e.get("from", "")
        if where and " " not in where and where not in doc["sources"]:
            raise ConfigError(
                f"{path}: experiments.{exp_id}.from: {where!r} is not one of sources ({', '.join(doc['sources'])}); "
                "name a source or describe the basis in words"
            )
        like = e.get("like")
        if like is not None and ("like" in doc["experiments"].get(like, {"like": 1})):
            raise ConfigError(
                f"{path}: experiments.{exp_id}.like: {like!r} is not an entry with its own numbers; name a measured "
                "experiment"
            )
    doc["path"] = path
    return doc


def cost(doc: Mapping, exp_id: str) -> Cost | None:
    """The paper-scale cost of one seed of ``exp_id``; None when compute.yaml has no entry for it."""
    e = (doc.get("experiments") or {}).get(exp_id)
    if e is None:
        return None
    if "like" in e:
        base = cost(doc, e["like"])
        return Cost(
            base.cpu_s,
            base.peak_mb,
            "extrapolated",
            f"as {e['like']} ({base.how})",
            e.get("gpu", base.gpu),
            base.gpu_ratio,
            base.gpu_from,
        )
    where = e["from"]  # a key of sources (the render lists them) or words
    if e["basis"] == "extrapolated":
        cpu = e["steps"] * e["ms_per_step"] * e["mix"] / 1000
        how = f"{e['steps']:,.0f} steps x {e['ms_per_step']:g} ms x mix {e['mix']:g} ({where})"
    else:
        cpu = e["cpu_s"]
        how = where
    if "gpu_step" in e:  # measured: the GPU is worth requesting where its step is GPU_WORTH times faster
        step = e["gpu_step"]
        ratio = step["cpu_ms"] / step["ms"]
        return Cost(float(cpu), float(e["peak_mb"]), e["basis"], how, ratio >= GPU_WORTH, ratio, step["from"])
    return Cost(float(cpu), float(e["peak_mb"]), e["basis"], how, bool(e.get("gpu", False)))


def paper_resources(doc: Mapping, exp_id: str, threads: int = 1) -> dict:
    """runtime (minutes) and mem_mb of one paper-scale run from its cost, with compute.yaml's margins and floors,
    and gpu (1 where a GPU is worth requesting); {} when there is no entry. A run of ``threads`` threads may train
    in as many one-thread processes (fedrepro.processes: FedHDP's methods, an AdaPeD table's trainings, a sweep's
    points), each holding the run's data and its own training: its memory is one process's peak (``peak_mb``)
    that many times, more than a kind that keeps one process needs."""
    c = cost(doc, exp_id)
    if c is None:
        return {}
    runtime = math.ceil(c.cpu_s / max(1, threads) * doc["margin"]["runtime"] / 60)
    mem = math.ceil(c.peak_mb * max(1, threads) * doc["margin"]["memory"])
    return {
        "runtime": max(doc["min_runtime"], runtime),
        "mem_mb": max(doc["min_mem_mb"], mem),
        "gpu": int(c.gpu),
    }


def experiment_resources(cfg: Mapping, entry: Mapping, scale: str, exp_id: str | None = None) -> dict:
    """Cluster resources of one run (one seed) of an experiment at ``scale``: config.yaml's ``resources.<scale>``
    (threads, mem_mb, runtime in minutes, gpu), then at paper scale those config/compute.yaml gives experiment
    ``exp_id`` (its measured or extrapolated cost with margins: fedrepro.plan.paper_resources), then the
    experiment's own ``resources.<scale>`` in config/<paper>.yaml (``entry`` is its validated entry), key by key.
    Where compute.yaml has the experiment, its own block may not set runtime, mem_mb or gpu at paper scale (one
    source). ``gpu`` defaults to 0; a global config without a ``resources`` block (e.g. a test's) gives
    ``{"threads": 1, "gpu": 0}`` and leaves memory and wall time to the executor's defaults."""

    if scale not in SCALES:
        raise ConfigError(f"scale: {scale!r} is not one of {', '.join(SCALES)}")
    out = {"threads": 1, "gpu": 0}
    out.update((cfg.get("resources") or {}).get(scale) or {})
    own = (entry.get("resources") or {}).get(scale) or {}
    if scale == "paper" and exp_id is not None:
        derived = paper_resources(load_compute(cfg), exp_id, int(own.get("threads", out["threads"])))
        clash = sorted(set(derived) & set(own))
        if clash:
            raise ConfigError(
                f"{exp_id}: resources.paper sets {', '.join(clash)}, which {cfg['compute']} derives from its "
                "paper-scale cost: change the cost there (one source), not the resources"
            )
        out.update(derived)
    out.update(own)
    return {k: out[k] for k in RESOURCE_KEYS if k in out}


@dataclass(frozen=True)
class Row:
    exp_id: str
    cost: Cost
    seeds: int
    offline: bool
    printed: int = 0  # printed registry rows the experiment's runs are judged on
    checks: int = 0  # check and consistency rows

    @property
    def cpu_h(self) -> float:
        return self.cost.cpu_s * self.seeds / 3600

    @property
    def printed_per_cpu_h(self) -> float:
        return self.printed / self.cpu_h if self.cpu_h > 0 else math.inf


def registry_counts(cfg: Mapping) -> dict[str, tuple[int, int]]:
    """experiment id -> (printed rows, other rows) of the configured registries (read as plain CSV: the report
    validates them)."""
    import csv

    out: dict[str, list[int]] = {}
    for path in (cfg.get("targets") or {}).values():
        try:
            with open(resolve_path(path), newline="", encoding="utf-8") as fh:
                for r in csv.DictReader(fh):
                    counts = out.setdefault(r.get("experiment") or "", [0, 0])
                    counts[0 if r.get("row") == "printed" else 1] += 1
        except OSError:
            continue
    return {k: (v[0], v[1]) for k, v in out.items()}


def rows(cfg: Mapping) -> list[Row]:
    """One row per experiment of the configured papers; a ConfigError names an experiment compute.yaml lacks."""

    doc = load_compute(cfg)
    out, missing = [], []
    counts = registry_counts(cfg)
    for paper in cfg["papers"]:
        for name, entry in load_paper(cfg, paper)["experiments"].items():
            exp = resolve_experiment(cfg, f"{paper}.{name}", "paper")
            c = cost(doc, exp.id)
            if c is None:
                missing.append(exp.id)
                continue
            n = 1 if exp.deterministic else len(paper_seeds(cfg, entry, "paper"))
            printed, checks = counts.get(exp.id, (0, 0))
            out.append(Row(exp.id, c, n, all(is_available(cfg, d) for d in exp.datasets), printed, checks))
    if missing:
        raise ConfigError(
            f"{doc.get('path', 'config key compute')}: no paper-scale cost for {', '.join(missing)}; add an entry "
            "under experiments (measure it with benchmarks/paper_scale.py, or extrapolate from a measured step)"
        )
    return out


def _hours(h: float) -> str:
    return f"{h:,.2f}" if h < 10 else f"{h:,.0f}"


def _gpu_cell(r: Row) -> str:
    c = r.cost
    verdict = "worth requesting" if c.gpu else "no"
    if c.gpu_ratio is None:
        return verdict
    return f"{verdict}: step {c.gpu_ratio:.1f}x faster, ~{_hours(c.gpu_s * r.seeds / 3600)} GPU-h ({c.gpu_from})"


def campaign_order(plan: list[Row]) -> list[Row]:
    """The campaign's order: most printed rows judged per CPU-hour first (data here before data elsewhere), then the
    experiments that judge no printed row, cheapest first."""
    return sorted(plan, key=lambda r: (not r.offline, r.printed == 0, -r.printed_per_cpu_h, r.cpu_h))


def render(plan: list[Row], cores: int, sources: Mapping[str, str], remaining: bool = False) -> str:
    """The plan as a Markdown table, in the campaign's order (:func:`campaign_order`), and totals (offline here /
    everything) on ``cores`` cores; ``sources``: the measurements the entries cite by key. ``remaining``: the rows are
    what the results archive still lacks (their seeds: the seeds missing or stale), said in the header."""
    lines = [
        "| experiment | data here | printed rows | check rows | printed rows per CPU-h | basis | CPU-h per seed | "
        f"{'seeds lacking' if remaining else 'seeds'} | CPU-h | peak GB | GPU | how |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in campaign_order(plan):
        bound = "+" if r.cost.basis == "lower_bound" else ""
        rate = "—" if not r.printed else ("∞" if math.isinf(r.printed_per_cpu_h) else f"{r.printed_per_cpu_h:,.1f}")
        lines.append(
            f"| {r.exp_id} | {'yes' if r.offline else 'no'} | {r.printed} | {r.checks} | {rate} | {r.cost.basis} | "
            f"{_hours(r.cost.cpu_s / 3600)}{bound} | {r.seeds} | {_hours(r.cpu_h)}{bound} | "
            f"{r.cost.peak_mb / 1024:.1f} | {_gpu_cell(r)} | {r.cost.how} |"
        )
    lines.append("")
    for label, sel in (("available here", [r for r in plan if r.offline]), ("all experiments", plan)):
        total = sum(r.cpu_h for r in sel)
        longest = max((r.cost.cpu_s / 3600 for r in sel), default=0.0)
        lines.append(
            f"{label} ({len(sel)} experiments): {_hours(total)} CPU-h; on {cores} cores >= "
            f"{_hours(max(total / cores, longest))} h of wall time (the longest single run: {_hours(longest)} h)"
        )
    lines.append(
        "basis: measured here / lower_bound (stopped before the end) / extrapolated (steps x a measured step x "
        "the method mix, or as a measured experiment of the same sizes) / estimated (no measurement applies)"
    )
    lines.append(
        f"GPU: measured where a ratio is shown (the client step on a GPU and on one CPU thread of the same machine; "
        f"worth requesting at >= {GPU_WORTH:g}x; GPU-h = CPU-h / ratio, the method mix assumed to speed up alike), "
        "otherwise as stated in the cost file"
    )
    lines += [f"{key}: {text}" for key, text in sources.items()]
    return "\n".join(lines) + "\n"
