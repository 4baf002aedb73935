"""Where every output lives; shared by the Snakemake rules and the CLI so they never disagree."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from fedrepro.config import resolve_path


def results_root(cfg: Mapping) -> Path:
    return resolve_path(cfg["results_dir"])


def run_dir(cfg: Mapping, paper: str, exp: str, scale: str, seed: int) -> Path:
    return results_root(cfg) / paper / exp / scale / f"seed{seed}"


def summary_path(cfg: Mapping, paper: str, exp: str, scale: str) -> Path:
    return results_root(cfg) / paper / exp / scale / "summary.json"


def figure_path(cfg: Mapping, paper: str, fig: str, ext: str = "pdf") -> Path:
    return resolve_path(cfg["figures_dir"]) / paper / f"{fig}.{ext}"


def tables_dir(cfg: Mapping, paper: str) -> Path:
    return results_root(cfg) / "tables" / paper


def report_dir(cfg: Mapping) -> Path:
    return results_root(cfg) / "report"


def partition_dir(cfg: Mapping, name: str) -> Path:
    """A partitioned federated dataset built by the data stage (rule partition_dataset)."""
    return results_root(cfg) / "data" / name
