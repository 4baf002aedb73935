"""Whether a run's arrays fit in this machine's memory, checked before the run starts.

A kind whose arrays grow with its parameters (Monte Carlo repetitions x clients x dimensions) declares a
:class:`MemoryNeed`: the parameters it grows with and a lower bound on the bytes its arrays hold at once. ``fedrepro
run`` refuses a run whose bound exceeds the machine's memory (physical memory, or the job's cgroup limit when lower)
with one line giving both, instead of a MemoryError, a swapping machine or the kernel's OOM killer later. The bound
counts only arrays the run cannot do without, so it never refuses a run that would fit; a run it lets through may
still need more (temporaries, the interpreter, libraries).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from fedrepro.errors import ResourceError

FLOAT64 = 8  # bytes per element of the float64 arrays most kinds use

# cgroup v2, then v1: a job's memory limit when it runs inside one (SLURM, containers)
_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


@dataclass(frozen=True)
class MemoryNeed:
    """What a kind's arrays take at once: ``keys``, the parameters they grow with (a refusal names them), and
    ``bytes(params)``, a lower bound on their size in bytes."""

    keys: tuple[str, ...]
    bytes: Callable[[Mapping], float]


def machine_memory() -> int:
    """Bytes of memory this process may use: the physical memory, or its cgroup's limit when that is lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit in _CGROUP_LIMITS:
        try:
            text = Path(limit).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def size_text(n: float) -> str:
    """1536 -> '1.5 KiB' (binary units, three significant digits)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.3g} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    raise AssertionError("unreachable")


def _value_text(v) -> str:
    return f"{len(v)} values" if isinstance(v, (list, tuple)) else f"{v}"


def check_memory(exp_id: str, need: MemoryNeed | None, params: Mapping, available: int | None = None) -> None:
    """Raise a ResourceError (one line: the parameters, the estimate and the machine's memory) when the arrays of a
    run of ``exp_id`` with ``params`` cannot fit in ``available`` bytes (default: :func:`machine_memory`)."""
    if need is None:
        return
    estimate = float(need.bytes(params))
    available = machine_memory() if available is None else available
    if not math.isfinite(estimate) or estimate > available:
        given = ", ".join(f"{k}={_value_text(params[k])}" for k in need.keys if k in params)
        raise ResourceError(
            f"{exp_id}: {given}: its arrays need at least {size_text(estimate)} of memory and this machine has "
            f"{size_text(available)}; lower {', '.join(need.keys)} (--set KEY=VALUE) or run it on a larger machine"
        )
