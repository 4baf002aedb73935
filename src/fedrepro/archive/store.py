"""The archive on disk: one directory per archived seed, its manifest, adding a run, checking and restoring one.

``manifest.json`` (format 1)::

    experiment, kind, scale, seed
    files           {name: {sha256, bytes}} of every archived file (the run's own files, byte for byte)
    made            started_at, wall_time_s, machine (fedrepro.provenance.machine), code_version, versions
    params_digest   the run's (equal to its metrics.json's)
    inputs          the digests of the data it read (its metrics.json's)
    archived_at     when it was added (UTC)
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from fedrepro import paths
from fedrepro.aggregate import flatten
from fedrepro.checkout import REPO_ROOT
from fedrepro.config import resolve_path
from fedrepro.data.stamps import sha256_of
from fedrepro.errors import FedreproError, ResultError
from fedrepro.files import atomic_write
from fedrepro.provenance import params_digest
from fedrepro.runio import ARCHIVED, ARRAYS, CONFIG, HISTORY, METRICS, read_metrics
from fedrepro.staleness import stale_reasons

MANIFEST = "manifest.json"
FORMAT = 1
RUN_FILES = (METRICS, HISTORY, CONFIG)  # what every archived run holds
OPTIONAL_FILES = (ARRAYS,)  # what it holds when the run wrote it
CHECKPOINTS = ".checkpoints"
SCALE = "paper"  # only paper-scale runs are archived


class ArchiveError(FedreproError):
    """A refusal or a damaged archive: one line naming the run or file and what to do."""


def settings(cfg: Mapping) -> dict:
    """config.yaml's ``archive`` block with its defaults: dir, use, budget_mb.run, budget_mb.total."""
    block = dict(cfg.get("archive") or {})
    budget = {"run": 4, "total": 64, **(block.get("budget_mb") or {})}
    return {"dir": block.get("dir", "archive"), "use": block.get("use", True), "budget_mb": budget}


def root(cfg: Mapping) -> Path:
    return resolve_path(settings(cfg)["dir"])


@dataclass(frozen=True)
class Entry:
    """One archived seed: its directory and its manifest."""

    dir: Path
    manifest: dict

    @property
    def experiment(self) -> str:
        return self.manifest["experiment"]

    @property
    def seed(self) -> int:
        return self.manifest["seed"]

    @property
    def paper(self) -> str:
        return self.experiment.split(".", 1)[0]

    @property
    def name(self) -> str:
        return self.experiment.split(".", 1)[1]

    def bytes(self) -> int:
        return sum(f["bytes"] for f in self.manifest["files"].values())


def entry_dir(cfg: Mapping, exp_id: str, seed: int) -> Path:
    paper, name = exp_id.split(".", 1)
    return paths.path(cfg, "archive_run", paper=paper, exp=name, scale=SCALE, seed=seed)


def read_manifest(d: Path) -> dict:
    """The manifest of the archived run in ``d``; a missing or damaged one is an ArchiveError naming it."""
    path = d / MANIFEST
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ArchiveError(f"{path}: missing: {d} is not an archived run (add runs with `archive add`)") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ArchiveError(f"{path}: unreadable ({exc}); restore it with `git checkout -- {d}`") from None
    need = ("format", "experiment", "scale", "seed", "files", "made", "params_digest", "inputs")
    missing = [k for k in need if not isinstance(doc, dict) or k not in doc]
    if missing:
        raise ArchiveError(f"{path}: not an archive manifest (no {', '.join(missing)}); restore it with git")
    if doc["format"] != FORMAT:
        raise ArchiveError(f"{path}: manifest format {doc['format']!r}, this fedrepro reads {FORMAT}")
    return doc


def entries(cfg: Mapping) -> list[Entry]:
    """Every archived seed, sorted by experiment and seed; a directory that holds files but no readable manifest is
    an ArchiveError (an archive is never read around a damaged entry)."""
    base = root(cfg)
    out = []
    for manifest in sorted(base.glob(f"*/*/{SCALE}/seed*/{MANIFEST}")):
        out.append(Entry(manifest.parent, read_manifest(manifest.parent)))
    for d in sorted(base.glob(f"*/*/{SCALE}/seed*")):
        if d.is_dir() and not (d / MANIFEST).exists():
            read_manifest(d)  # raises, naming it
    return sorted(out, key=lambda e: (e.experiment, e.seed))


def damaged(entry: Entry) -> list[str]:
    """What is wrong with an archived run's files: a file of the manifest missing, of another size or sha256, a file
    the manifest does not list, or a manifest that does not agree with the run's metrics.json. [] when sound."""
    d, m = entry.dir, entry.manifest
    problems = []
    for name, rec in m["files"].items():
        f = d / name
        if not f.is_file():
            problems.append(f"{f}: missing")
        elif f.stat().st_size != rec["bytes"] or sha256_of(f) != rec["sha256"]:
            problems.append(f"{f}: sha256 {sha256_of(f)[:16]}…, the manifest says {rec['sha256'][:16]}…")
    extra = sorted(p.name for p in d.iterdir() if p.name not in m["files"] and p.name != MANIFEST)
    problems += [f"{d / name}: not in the manifest" for name in extra]
    if not problems:
        try:
            doc = read_metrics(d)
        except ResultError as exc:
            return [str(exc)]
        for key in ("experiment", "scale", "seed", "params_digest"):
            if doc.get(key) != m[key]:
                problems.append(f"{d / METRICS}: {key} {doc.get(key)!r}, the manifest says {m[key]!r}")
    return problems


def misplaced(cfg: Mapping, entry: Entry) -> str | None:
    """Why the archived run is not where its manifest says it belongs (a run copied to another seed's place)."""
    want = entry_dir(cfg, entry.experiment, entry.seed).resolve()
    if entry.dir.resolve() != want:
        return f"{entry.dir}: holds {entry.experiment} seed {entry.seed}, which belongs in {want}"
    return None


def stale(cfg: Mapping, entry: Entry) -> list[str]:
    """Why the archived run is not what the configuration and the data here ask for ([] when current)."""
    return stale_reasons(cfg, {**entry.manifest, "inputs": entry.manifest["inputs"]}, entry.dir)


# ------------------------------------------------------------------------------------------------------ adding


def _refuse(run_dir: Path, why: str) -> ArchiveError:
    return ArchiveError(f"{run_dir}: not archived: {why}")


def _non_finite(doc: Mapping) -> list[str]:
    """Metrics that are NaN or infinite (a diverged run is never archived); None is a metric the kind leaves
    undefined (no epsilon without noise), which the aggregate checks."""
    return sorted(k for k, v in flatten(doc["metrics"]).items() if isinstance(v, float) and not math.isfinite(v))


def check_addable(cfg: Mapping, run_dir: Path) -> dict:
    """The run's metrics.json when the run may be archived; else the one-line ArchiveError saying why."""
    if not (run_dir / METRICS).is_file():
        why = "no metrics.json (a run that did not finish, or not a run directory)"
        raise _refuse(run_dir, why)
    try:
        doc = read_metrics(run_dir)
    except ResultError as exc:
        raise _refuse(run_dir, str(exc)) from None
    if (run_dir / CHECKPOINTS).exists():
        raise _refuse(run_dir, f"it still holds {CHECKPOINTS}/ (an interrupted run): finish it first")
    missing = [f for f in RUN_FILES if not (run_dir / f).is_file()]
    if missing:
        raise _refuse(run_dir, f"{', '.join(missing)} missing (an incomplete run)")
    if doc["scale"] != SCALE or doc["effective_scale"] != SCALE:
        raise _refuse(
            run_dir,
            f"a {doc['effective_scale']}-scale run (scale {doc['scale']}): only runs at the paper's settings are "
            "archived (a --set run is not the paper's)",
        )
    bad = _non_finite(doc)
    if bad:
        raise _refuse(run_dir, f"metrics not finite: {', '.join(bad[:5])}")
    for key, what in (
        ("params_digest", "its parameter digest"),
        ("code_version", "its code version"),
        ("inputs", "the digests of its input data"),
        ("started_at", "when it started"),
        ("machine", "the machine it ran on"),
    ):
        if key not in doc:
            raise _refuse(run_dir, f"it does not record {what} ({key}; made by an older fedrepro): run it again")
    code = doc["code_version"]
    if code.endswith("-dirty") or code.startswith("fedrepro "):
        raise _refuse(
            run_dir,
            f"made from code no commit holds ({code}): nobody could replay it; commit the code, then run it again",
        )
    if doc["inputs"].get("test_pins"):
        raise _refuse(run_dir, "made from synthetic test data (FEDREPRO_TEST_PINS): never a result")
    try:
        import yaml

        recorded = yaml.safe_load((run_dir / CONFIG).read_text(encoding="utf-8"))["params"]
    except Exception as exc:  # noqa: BLE001 - any damage of the file is one refusal
        raise _refuse(run_dir, f"{CONFIG} unreadable ({exc.__class__.__name__})") from None
    if params_digest(recorded) != doc["params_digest"] and not _lossy_copy_of(cfg, doc, recorded):
        raise _refuse(run_dir, f"{CONFIG}'s parameters do not digest to its metrics.json's params_digest")
    reasons = stale_reasons(cfg, doc, run_dir)
    if reasons:
        raise _refuse(run_dir, f"stale: {'; '.join(reasons)}")
    return doc


def _lossy_copy_of(cfg: Mapping, doc: Mapping, recorded: Any) -> bool:
    """Whether ``recorded`` (a config.yaml's params) is the configuration's current parameters as runs written before
    config.yaml kept infinities wrote them (inf as null), those parameters digesting to the run's params_digest."""
    from fedrepro.config import resolve_experiment
    from fedrepro.files import to_jsonable

    params = resolve_experiment(cfg, doc["experiment"], doc["scale"]).params
    return params_digest(params) == doc["params_digest"] and params_digest(to_jsonable(params)) == params_digest(
        recorded
    )


def _files(run_dir: Path) -> list[str]:
    return [*RUN_FILES, *(f for f in OPTIONAL_FILES if (run_dir / f).is_file())]


def add(cfg: Mapping, run_dir: Path) -> tuple[Entry, bool]:
    """Archive one run (refusing with one line what may not be archived); returns its entry and whether it was new
    (False: the identical run was archived already)."""
    run_dir = Path(run_dir)
    doc = check_addable(cfg, run_dir)
    names = _files(run_dir)
    files = {n: {"sha256": sha256_of(run_dir / n), "bytes": (run_dir / n).stat().st_size} for n in names}
    budget = settings(cfg)["budget_mb"]
    size = sum(f["bytes"] for f in files.values())
    if size > budget["run"] * 2**20:
        raise _refuse(
            run_dir, f"{size / 2**20:.1f} MB, over the per-run budget of {budget['run']} MB (archive.budget_mb)"
        )
    target = entry_dir(cfg, doc["experiment"], doc["seed"])
    if (target / MANIFEST).exists():
        old = Entry(target, read_manifest(target))
        if {n: r["sha256"] for n, r in old.manifest["files"].items()} == {n: r["sha256"] for n, r in files.items()}:
            return old, False
        raise _refuse(
            run_dir,
            f"another run of {doc['experiment']} seed {doc['seed']} is archived in {target} (made "
            f"{old.manifest['made'].get('started_at')}): remove it with `git rm -r {target}` first",
        )
    total = sum(e.bytes() for e in entries(cfg)) + size
    if total > budget["total"] * 2**20:
        raise _refuse(
            run_dir, f"the archive would hold {total / 2**20:.1f} MB, over its budget of {budget['total']} MB"
        )
    manifest = {
        "format": FORMAT,
        "experiment": doc["experiment"],
        "kind": doc["kind"],
        "scale": doc["scale"],
        "seed": doc["seed"],
        "files": files,
        "made": {
            "started_at": doc["started_at"],
            "wall_time_s": doc["wall_time_s"],
            "wall_time_resumed_s": doc.get("wall_time_resumed_s"),
            **({"earlier_attempts": doc["earlier_attempts"]} if doc.get("earlier_attempts") else {}),
            "machine": doc["machine"],
            "code_version": doc["code_version"],
            "versions": doc["versions"],
        },
        "params_digest": doc["params_digest"],
        **({"reads_digest": doc["reads_digest"]} if "reads_digest" in doc else {}),
        **({"kind_revision": doc["kind_revision"]} if "kind_revision" in doc else {}),
        "inputs": doc["inputs"],
        "archived_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    tmp = target.with_name(f".{target.name}.adding")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        for n in names:
            shutil.copy2(run_dir / n, tmp / n)
        text = json.dumps(manifest, indent=1, sort_keys=True) + "\n"
        atomic_write(tmp / MANIFEST, lambda p: p.write_text(text, encoding="utf-8"))
        bad = damaged(Entry(tmp, manifest))  # the copy is what was hashed
        if bad:
            raise _refuse(run_dir, f"its files changed while being archived: {'; '.join(bad)}")
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return Entry(target, manifest), True


# --------------------------------------------------------------------------------------------------- restoring


def restore(cfg: Mapping, exp_id: str, seed: int, out: Path) -> Entry:
    """Copy the archived run of ``exp_id`` ``seed`` into the run directory ``out`` (results/), after checking its
    files against the manifest and that it is current; ``archived.json`` beside it says where it came from."""
    d = entry_dir(cfg, exp_id, seed)
    entry = Entry(d, read_manifest(d))
    bad = damaged(entry)
    if bad:
        raise ArchiveError(
            f"archived run {d} is damaged, not restored: {bad[0]}; restore it with `git checkout -- {d}`"
        )
    why = stale(cfg, entry)
    if why:
        raise ArchiveError(
            f"archived run {d} is stale, not restored: {'; '.join(why)}; rebuild it with `snakemake --cores 2 "
            "--config 'archive={use: false}'`"
        )
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name in entry.manifest["files"]:
        atomic_write(out / name, lambda p, src=d / name: shutil.copyfile(src, p))
    marker = source_record(cfg, entry)
    atomic_write(out / ARCHIVED, lambda p: p.write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8"))
    return entry


def source_record(cfg: Mapping, entry: Entry) -> dict[str, Any]:
    """What ``archived.json`` says of a restored run: the archive directory it came from (relative to the checkout),
    the machine and the time it was made, and its code version."""
    try:
        where = entry.dir.resolve().relative_to(REPO_ROOT.resolve()).as_posix()
    except ValueError:
        where = entry.dir.name
    made = entry.manifest["made"]
    return {
        "archived": where,
        "started_at": made["started_at"],
        "machine": made["machine"],
        "code_version": made["code_version"],
        "archived_at": entry.manifest.get("archived_at"),
    }
