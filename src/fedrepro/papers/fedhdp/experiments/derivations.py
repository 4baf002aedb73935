"""What FedHDP's forensics by exact derivation read (``fedhdp_variance_floor``, ``fedhdp_collapse_share``): the printed
rows of the registry they judge, and the client list of the partition whose reading they judge. No training."""

from __future__ import annotations

import json
from pathlib import Path

from fedrepro.errors import ConfigError
from fedrepro.experiments import RunContext


def printed_targets(ctx: RunContext) -> tuple[str, dict]:
    """(the paper, its registry rows by id) of the experiment ``ctx`` runs."""
    from fedrepro.config import resolve_path
    from fedrepro.report.registry import load_registry

    if ctx.config is None:
        raise ConfigError(f"{ctx.exp_id}: needs the global configuration (the registry of its rows)")
    paper = ctx.exp_id.split(".", 1)[0]
    return paper, {t.id: t for t in load_registry(resolve_path(ctx.config["targets"][paper]), paper)}


def row_of(ctx: RunContext, targets: dict, rid: str, experiment: str):
    """The registry row ``rid`` of params.rows, which must be a row of ``experiment`` (same paper)."""
    paper = ctx.exp_id.split(".", 1)[0]
    t = targets.get(rid)
    if t is None:
        raise ConfigError(f"{ctx.exp_id}: params.rows: {rid} is no row of config/targets/{paper}.csv")
    if t.experiment != f"{paper}.{experiment}":
        raise ConfigError(f"{ctx.exp_id}: params.rows: {rid} is a row of {t.experiment}, not of {experiment}")
    return t


def partition_clients(ctx: RunContext, partition: str) -> list[dict]:
    """The per-client records of ``partition``'s manifest (its test size, opt-out flag, digit where it has one)."""
    d = ctx.partitions.get(partition) if ctx.partitions else None
    if d is None:
        raise ConfigError(f"{ctx.exp_id}: params.partition={partition!r} must be listed in the experiment's partitions")
    return json.loads((Path(d) / "manifest.json").read_text(encoding="utf-8"))["clients"]
