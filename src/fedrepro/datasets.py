"""``fedrepro data fetch --all`` and ``--dry-run``: every dataset, where it comes from, how it is verified, and what it
unlocks (the experiments of config/<paper>.yaml that read it, directly or through a partition of
config/partitions.yaml). The dry run touches no network."""

from __future__ import annotations

import sys
from collections.abc import Mapping

from fedrepro.config import experiment_datasets, load_paper, load_partitions
from fedrepro.data.catalog import all_datasets, get_dataset, get_provider, verification
from fedrepro.errors import FedreproError


def unlocks(cfg: Mapping) -> dict[str, dict[str, list[str]]]:
    """{dataset: {"experiments": [PAPER.NAME, ...], "partitions": [name, ...]}} over the configured papers."""
    out: dict[str, dict[str, list[str]]] = {}
    for name, spec in load_partitions(cfg).items():
        out.setdefault(spec["dataset"], {"experiments": [], "partitions": []})["partitions"].append(name)
    for paper in cfg["papers"]:
        for name, entry in load_paper(cfg, paper)["experiments"].items():
            for d in experiment_datasets(cfg, entry, f"{paper}.{name}"):
                out.setdefault(d, {"experiments": [], "partitions": []})["experiments"].append(f"{paper}.{name}")
    return out


def _size(cfg: Mapping, ds, f) -> str:
    from fedrepro.data.sources import find_file

    p = find_file(cfg, ds, f)
    return f"{p.stat().st_size / 1e6:.1f} MB (here)" if p is not None else "size unknown until fetched"


def describe(cfg: Mapping, dataset_id: str, used: Mapping | None = None) -> list[str]:
    """The dry-run lines of one dataset."""
    from fedrepro.data.download import is_dataverse_access, is_drive
    from fedrepro.data.sources import find_file, is_url, mirror_candidates, mirror_urls

    ds = get_dataset(dataset_id)
    lines = [f"{ds.id}: {ds.title}"]
    if not ds.files:
        lines.append(f"  bundled: {ds.bundled} (verified: bundled with the installed package)")
    provider = get_provider(ds.id)
    if provider is not None:
        state = "available here" if provider.available() else f"needs {provider.requires or 'its package'}"
        lines.append(f"  local provider: {provider.name} ({state}; its files are checked against the pinned sha256)")
    for f in ds.files:
        here = find_file(cfg, ds, f)
        mirrors = [str(p) for p in mirror_candidates(cfg, ds, f)] + mirror_urls(cfg, ds, f)
        if here is not None:
            source = f"present: {here}"
        elif is_url(f.url):
            how = " (Google Drive, via gdown)" if is_drive(f.url) else ""
            how = (
                " (Dataverse access API; guestbook answered from data.guestbook if asked)"
                if (is_dataverse_access(f.url))
                else how
            )
            source = f"{f.url}{how}"
            if mirrors:
                source = f"mirror ({', '.join(mirrors)}), else {source}"
        else:
            source = f"{f.url}" + (f"; mirror: {', '.join(mirrors)}" if mirrors else "")
        lines.append(f"  {f.name}: {source}; {_size(cfg, ds, f)}; verified by {verification(f)}")
    u = (used or {}).get(ds.id) or {}
    exps, parts = u.get("experiments") or [], u.get("partitions") or []
    what = ", ".join(exps) if exps else "no configured experiment (an alternative release: --all skips it)"
    lines.append(f"  unlocks: {what}" + (f"; partitions: {', '.join(parts)}" if parts else ""))
    return lines


def dry_run(cfg: Mapping, ids: list[str]) -> int:
    """Print the plan for ``ids``; 1 when a dataset cannot be verified (a catalog error), else 0."""
    used = unlocks(cfg)
    bad = 0
    for d in ids:
        for line in describe(cfg, d, used):
            print(line)
        bad += any(not f.sha256 and not f.content_check for f in get_dataset(d).files)
    print(f"{len(ids)} dataset(s); {bad} cannot be verified" if bad else f"{len(ids)} dataset(s), every file verified")
    return 1 if bad else 0


def fetch_all(cfg: Mapping, offline: bool = False) -> int:
    """Fetch every dataset a configured experiment or partition reads, going on past failures; end with one line per
    failure. A dataset nothing reads (an alternative release, e.g. TFF's h5 files beside the sqlite ones the
    experiments read) is skipped, saying so: `data fetch ID` fetches it. 0 when all succeeded, else 1."""
    from fedrepro.data.sources import fetch

    failures = []
    used = unlocks(cfg)
    skipped = sorted(d for d in all_datasets() if d not in used)
    if skipped:
        print(
            f"[fedrepro] skipping {', '.join(skipped)}: no configured experiment or partition reads them "
            "(fetch one with `python -m fedrepro data fetch ID`)",
            file=sys.stderr,
            flush=True,
        )
    ids = sorted(d for d in all_datasets() if d in used)
    for d in ids:
        print(f"[fedrepro] fetching {d}", file=sys.stderr, flush=True)
        try:
            stamp = fetch(cfg, d, offline=offline)
            print(stamp.read_text(), end="")
        except FedreproError as exc:
            first = str(exc).splitlines()[0]
            print(f"fedrepro: error: {first}", file=sys.stderr, flush=True)
            failures.append((d, first))
    print(f"[fedrepro] fetched {len(ids) - len(failures)} of {len(ids)} dataset(s)", file=sys.stderr)
    for d, msg in failures:
        print(f"FAILED {d}: {msg}", file=sys.stderr)
    return 1 if failures else 0
