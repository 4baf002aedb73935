"""What a result was made from, recorded in every run's ``metrics.json`` and checked wherever a result is read.

A run records, beside its experiment id, scale and seed:

    params_digest   sha256 (first 16 hex digits) of the resolved parameters, numbers read by value (``0`` is
                    ``0.0``): runs whose parameters resolve alike share it, and a ``--set`` run does not
    code_version    ``git describe --always --dirty --tags`` of the checkout the package runs from, or
                    ``fedrepro <version>`` when it is not run from a git checkout (never an error)
    inputs          the input data it read: per dataset the sha256 of each verified file, per partition the sha256
                    of its ``manifest.json`` (which holds the sha256 of the partition's data files and its source's)

``fedrepro.aggregate`` refuses runs whose provenance disagrees with their siblings (seed, parameters, input data) or
with the place they sit in, and the report a ``summary.json`` whose experiment or scale is not the one of its place.
A run's checkpoints are kept only while its input data is unchanged (fedrepro.cli), and each checkpoint only while
the source files it was made with are: it records :func:`loaded_code`, the package's files the process that saved it
had imported (with those of the process that started it), and is ignored when one of them has changed since
(:func:`changed_code`). A commit that touches only other files leaves a run's checkpoints valid. Results written before
these fields existed lack them: what they do hold (experiment, scale, seed) is checked, and the missing fields are
never a reason to refuse them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import fedrepro


def _canonical(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {k: _canonical(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_canonical(v) for v in x]
    if isinstance(x, float) and x.is_integer():
        return int(x)
    return x


def params_digest(params: Mapping) -> str:
    """A short digest of resolved parameters: parameters that resolve alike share it (and a forensic sweep's
    readings that do share one run and its cache file). A number is read by its value (a grid's ``0`` is the
    config's ``0.0``)."""
    text = json.dumps(_canonical(params), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@functools.cache
def code_version() -> str:
    """``git describe --always --dirty --tags`` of the checkout this package runs from; ``fedrepro <version>`` when
    the package is not inside its own git checkout (an installed copy) or git is unavailable."""
    root = Path(fedrepro.__file__).resolve().parents[2]  # src/fedrepro/__init__.py -> the checkout
    fallback = f"fedrepro {fedrepro.__version__}"

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=20, check=False
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    if not top or Path(top).resolve() != root:  # e.g. site-packages inside some other repository
        return fallback
    return git("describe", "--always", "--dirty", "--tags") or fallback


_PACKAGE = Path(fedrepro.__file__).resolve().parent
_LOADED: dict[str, str] = {}  # relative path -> digest, as this process first saw each of its imported files
_SEEN: set[str] = set()  # the names in sys.modules loaded_code has looked at


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


@functools.cache
def code_files() -> dict[str, str]:
    """The source of the package this runs from, file by file: relative path -> sha256 (first 16 hex digits) of every
    ``.py`` and ``.c`` file under ``src/fedrepro``. Unlike :func:`code_version` it changes with what the code computes
    and with nothing else (not with README or config edits, which parameters and inputs already cover)."""
    files = [*_PACKAGE.rglob("*.py"), *_PACKAGE.rglob("*.c")]
    return {p.relative_to(_PACKAGE).as_posix(): _digest(p) for p in sorted(files)}


def loaded_code() -> dict[str, str]:
    """The package's source files this process has imported, file by file (relative path -> sha256, first 16 hex
    digits, read when first seen here), with those of the process that started it (:func:`inherit_loaded_code`).
    What a process computed so far can depend on these files only: a checkpoint records them, and a resume with all
    of them unchanged continues exactly where a run started from the present code would be at that point."""
    for key in sys.modules.keys() - _SEEN:  # a checkpoint every few rounds: only modules imported since
        _SEEN.add(key)
        name = getattr(sys.modules.get(key), "__file__", None)
        if not name:
            continue
        path = Path(name).resolve()
        if path.suffix == ".py" and path.is_relative_to(_PACKAGE):
            for file in (path, path.with_suffix(".c")):  # a module's compiled kernel (learning/native_cnn.c)
                rel = file.relative_to(_PACKAGE).as_posix()
                if rel not in _LOADED and file.is_file():
                    _LOADED[rel] = _digest(file)
    return dict(sorted(_LOADED.items()))


def inherit_loaded_code(parent: Mapping[str, str]) -> None:
    """Count the files the starting process had imported (its :func:`loaded_code`) as this worker's too: what a
    worker is handed was computed with them (fedrepro.processes)."""
    for rel, digest in parent.items():
        _LOADED.setdefault(rel, digest)


def changed_code(recorded: Mapping[str, str]) -> list[str]:
    """The files of a :func:`loaded_code` record that differ from the code this process runs (as it first saw each
    file, else as it is on disk now; a file gone counts as changed), sorted."""
    loaded_code()  # the files imported so far, as they are now if not seen before
    changed = []
    for rel, digest in recorded.items():
        path = _PACKAGE / rel
        now = _LOADED.get(rel) or (_digest(path) if path.is_file() else None)
        if now != digest:
            changed.append(rel)
    return sorted(changed)


def changed_code_text(changed: list[str]) -> str:
    """``changed`` (package-relative files) in one phrase: at most three named, the rest counted."""
    more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
    return f"src/fedrepro/{', src/fedrepro/'.join(changed[:3])}{more} changed"


def made_by_this_code(code: Any, what: Path | str) -> bool:
    """Whether a checkpoint or cached result (``what``) whose record of the source files it was made with
    (fedrepro.provenance.loaded_code) is ``code`` may be resumed from: every one of those files unchanged. Otherwise
    one line says which changed (or that it carries no record: an older fedrepro made it) and the caller starts
    that piece over."""
    if not isinstance(code, dict) or not code:
        why = "carries no record of its code (an older fedrepro made it)"
    else:
        changed = changed_code(code)
        if not changed:
            return True
        why = f"was made by other code ({changed_code_text(changed)})"
    print(f"[fedrepro] {what}: {why}: starting it over", flush=True)
    return False


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    """The machine a run ran on, as its metrics.json records it (and the archive's manifest shows): CPU model, logical
    CPUs and those this process may use, torch's thread count, the batched CNN's kernel (native or torch, where the
    engine was imported), the GPUs torch sees (only when torch was already imported: never imported for this), the
    platform and the 1/5/15-minute load average at the time of the call (a busy machine explains a slow run)."""
    torch = sys.modules.get("torch")
    native = sys.modules.get("fedrepro.learning.native_cnn")
    gpus: list[str] = []
    if torch is not None and torch.cuda.is_available():
        gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    try:
        allowed = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        allowed = os.cpu_count()
    return {
        "cpu": _cpu_model(),
        "logical_cpus": os.cpu_count(),
        "cpus_allowed": allowed,
        "torch_threads": torch.get_num_threads() if torch is not None else None,
        # which kernel the batched CNN's SGD steps ran (fedrepro.learning.native_cnn), where the engine was loaded
        "cnn_kernel": native.kernel() if native is not None else None,
        "gpus": gpus,
        "platform": platform.platform(),
        "load_avg": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
    }


def machine_text(m: Mapping[str, Any]) -> str:
    """A :func:`machine` record in words, e.g. ``Intel(R) Xeon(R) Processor (1 thread of 2 CPUs)``: what the archive's
    listing and benchmarks/archive_runs.py print (no thread count for a run without torch)."""
    n = m.get("torch_threads")
    threads = f"{n} thread{'s' if n != 1 else ''} of " if n else ""
    gpu = f", {', '.join(m['gpus'])}" if m.get("gpus") else ""
    return f"{m.get('cpu', '?')} ({threads}{m.get('cpus_allowed', '?')} CPUs{gpu})"


def input_digests(datasets: Mapping[str, Iterable[tuple[str, str]]], partitions: Mapping[str, str]) -> dict:
    """The ``inputs`` record of a run: ``datasets``: id -> (file name, verified sha256) pairs; ``partitions``:
    name -> sha256 of its manifest.json (fedrepro.data.fedformat.manifest_digest); ``test_pins``: the test pins
    file the catalog used (fedrepro.data.catalog.test_pins: synthetic test data, never a result), only when set."""
    from fedrepro.data.catalog import test_pins

    record = {
        "datasets": {d: dict(sorted(files)) for d, files in sorted(datasets.items())},
        "partitions": dict(sorted(partitions.items())),
    }
    if test_pins():
        record["test_pins"] = test_pins()
    return record


def changed_inputs(a: Mapping, b: Mapping) -> list[str]:
    """The inputs two ``inputs`` records (:func:`input_digests`) disagree on, e.g. ``["partition mnist_m50"]``."""
    return sorted(
        f"{group[:-1]} {name}"
        for group in ("datasets", "partitions")
        for name in set(a.get(group, {})) | set(b.get(group, {}))
        if a.get(group, {}).get(name) != b.get(group, {}).get(name)
    )


def misplaced(doc: Mapping, place: Mapping[str, str]) -> str | None:
    """What a result (a metrics.json or summary.json document) records that its place contradicts (``place``: the
    fields fedrepro.paths.place read from where it sits), e.g. "records experiment 'adaped.fig3a' (its place says
    'adaped.fig1a')"; None when nothing does. A field the document lacks is not compared."""
    want: dict[str, Any] = {"experiment": f"{place['paper']}.{place['exp']}", "scale": place["scale"]}
    if "seed" in place:
        want["seed"] = int(place["seed"])
    bad = [f"{k} {doc[k]!r} (its place says {v!r})" for k, v in want.items() if k in doc and doc[k] != v]
    return f"records {', '.join(bad)}" if bad else None
