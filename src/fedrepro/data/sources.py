"""Locate, fetch and verify dataset files: data dir, then mirror, then local provider, then canonical URL.

Lookup order for a file ``NAME`` of dataset ``ID``:
  1. ``<data.dir>/<ID>/NAME`` (already fetched),
  2. the mirror: ``<data.mirror>/<ID>/NAME`` or ``<data.mirror>/NAME``; a directory or file:// URL is read in place,
     an http(s) URL is downloaded like a canonical URL (a 404 tries the next name, then the canonical URL),
  3. the dataset's local provider (:func:`fedrepro.data.catalog.register_provider`), when a file is in neither and
     the provider is available here: it writes all the dataset's files into the data dir; a provider that fails
     stops the fetch with its own one-line error,
  4. the canonical URL.
Downloads (steps 2 and 4) go through :mod:`fedrepro.data.download` (pooch, retries, resume, HTML detection, Google
Drive via gdown, Dataverse guestbook); ``offline`` (``--offline``) never touches the network.
Every file is verified (:mod:`fedrepro.data.catalog`): against its pinned sha256, or, where none is published, by
its content check, whose first pass records the sha256 in ``.verified.json`` (``"pinned": false``) and prints the
catalog line that pins it; a later different sha256 in the same data dir is an error. A mismatch or failed check is
an error, never a warning, naming the file that is wrong where it came from (the mirror file, the URL, the local
provider that wrote it or the data dir), and a file that failed is removed from the data dir.
``NAME`` may contain a subdirectory (``train/x.json``); a bundled dataset (no files) is always available.

Data is verified again where it is used: :func:`verified_files` (and :func:`dataset_files`), which partitioning and
every run call, compare each file with the sha256 it was verified against (pinned, or recorded at its first fetch).
Cheaply (fedrepro.data.stamps): ``<data.dir>/<ID>/.verified.json`` records each file's size, mtime and origin when
it was last hashed, and a file is hashed again only when these changed. ``.verified`` itself (the fetch rule's
output) is never rewritten on use, so a check does not rerun the workflow.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from fedrepro.checkout import resolve_path
from fedrepro.data.catalog import Dataset, RemoteFile, get_dataset, get_provider
from fedrepro.data.stamps import STATE, file_stat, read_state, sha256_of, unchanged, write_state
from fedrepro.errors import DataError

STAMP = ".verified"
# STATE (fedrepro.data.stamps): per file, sha256, origin, size and mtime when last hashed (the cheap check on use)
CATALOG = "src/fedrepro/data/catalog.py"


def data_dir(cfg: Mapping, dataset_id: str) -> Path:
    return resolve_path(cfg["data"]["dir"]) / dataset_id


def is_url(text: str | None) -> bool:
    return bool(text) and urlparse(text).scheme in ("http", "https")


def mirror_url(cfg: Mapping) -> str | None:
    """The mirror when it is an http(s) URL (ending in ``/``), else None."""
    mirror = cfg["data"].get("mirror")
    return (mirror.rstrip("/") + "/") if is_url(mirror) else None


def mirror_root(cfg: Mapping) -> Path | None:
    """The mirror when it is a directory or file:// URL, else None."""
    mirror = cfg["data"].get("mirror")
    if not mirror or is_url(mirror):
        return None
    if mirror.startswith("file://"):
        return Path(urlparse(mirror).path)
    return resolve_path(mirror)


def mirror_candidates(cfg: Mapping, ds: Dataset, f: RemoteFile) -> list[Path]:
    root = mirror_root(cfg)
    return [] if root is None else [root / ds.id / f.name, root / f.name]


def mirror_urls(cfg: Mapping, ds: Dataset, f: RemoteFile) -> list[str]:
    root = mirror_url(cfg)
    return [] if root is None else [f"{root}{ds.id}/{f.name}", f"{root}{f.name}"]


def stamp_path(cfg: Mapping, dataset_id: str) -> Path:
    return data_dir(cfg, dataset_id) / STAMP


def _missing_message(cfg: Mapping, ds: Dataset, f: RemoteFile, why: str) -> str:
    searched = [str(data_dir(cfg, ds.id) / f.name)] + [str(p) for p in mirror_candidates(cfg, ds, f)]
    searched += mirror_urls(cfg, ds, f)
    return (
        f"dataset {ds.id} ({ds.title}): file {f.name} is not available ({why}).\n"
        f"  verified by:     {_verified_by(f)}\n"
        f"  canonical URL:   {f.url}\n"
        f"  searched:        {', '.join(searched)}\n"
        f"  fix: download it on a networked machine and put it at {searched[0]}, or into the mirror directory "
        f"(config key data.mirror) as <mirror>/{ds.id}/{f.name}"
    )


def _verified_by(f: RemoteFile) -> str:
    from fedrepro.data.catalog import verification

    return f"sha256 {f.sha256}" if f.sha256 else verification(f)


def _expected_where(f: RemoteFile) -> str:
    return f"pinned in {CATALOG}" if f.sha256 else "recorded when it was first fetched and passed its content check"


def pin_line(f: RemoteFile, digest: str) -> str:
    """The catalog line that pins an unpinned file to ``digest`` (in the module that defines its content check)."""
    module = getattr(f.content_check, "__module__", "") or "fedrepro.data.catalog"
    return f"src/{module.replace('.', '/')}.py: RemoteFile({f.name!r}, {f.url!r}, sha256={digest!r}, ...)"


def _what_is_wrong(path: Path, origin: str, f: RemoteFile) -> str:
    if origin.startswith("mirror "):
        return f"the mirror file {origin[len('mirror ') :]}"
    if origin.startswith("download "):
        return f"{origin[len('download ') :]} (downloaded to {path})"
    if origin.startswith("written by "):
        return f"{path} ({origin}, the dataset's local provider)"
    return f"{path} (in the data dir)"


def verify(
    path: Path,
    f: RemoteFile,
    ds: Dataset,
    origin: str = "",
    recorded: str | None = None,
    digest: str | None = None,
) -> str:
    """The file's sha256, checked: against the pinned one, or for an unpinned file by its content check and against
    ``recorded`` (the sha256 an earlier fetch into this data dir recorded, if any). ``origin`` says where ``path``
    just came from: "mirror <file>", "download <url>", "written by <provider>", or "" for a file already in the data
    dir; the error names that as the thing that is wrong. ``digest``: the sha256 if already known (pooch checked it)."""
    digest = digest or sha256_of(path)
    if f.sha256 is None:
        if f.content_check is None:
            raise DataError(
                f"dataset {ds.id}: catalog error: {f.name} is not pinned (no sha256) and has no content check, so "
                f"it cannot be verified; add one of them to its RemoteFile ({CATALOG} explains both)"
            )
        try:
            f.content_check(path)
        except DataError as exc:
            raise DataError(
                f"dataset {ds.id}: content check failed: {_what_is_wrong(path, origin, f)} is not the file its "
                f"publisher describes ({' '.join(str(exc).split())}); source: {f.url}"
            ) from None
        if recorded and digest != recorded:
            raise DataError(
                f"dataset {ds.id}: checksum mismatch: {_what_is_wrong(path, origin, f)} has sha256 {digest}, but "
                f"the first fetch into {path.parent} recorded {recorded} (in {STATE}): the upstream file changed or "
                f"one copy is corrupt; compare them, then pin the right one in the catalog or delete "
                f"{data_dir_of(path, f)} to start over"
            )
        return digest
    if digest != f.sha256:
        if origin.startswith("mirror "):
            what = (
                f"the mirror file {origin[len('mirror ') :]} has sha256 {digest}, expected {f.sha256} "
                f"({_expected_where(f)}): the mirror copy is corrupt or another version; replace it with a good "
                f"copy (source: {f.url})"
            )
        elif origin.startswith("download "):
            what = (
                f"{origin[len('download ') :]} (downloaded to {path}) has sha256 {digest}, expected {f.sha256} "
                f"({_expected_where(f)}): a corrupt download or a changed upstream file; fetch again, and if it "
                "persists compare the upstream file before pinning its new hash"
            )
        elif origin.startswith("written by "):
            what = (
                f"{path} ({origin}, the dataset's local provider) has sha256 {digest}, expected {f.sha256} "
                f"({_expected_where(f)}): the provider did not reproduce the pinned upstream file (another version "
                "of its package or of a tool its recipe runs); fetch the file on a networked machine (source: "
                f"{f.url}) and put it at {path} or into the mirror"
            )
        else:
            what = (
                f"{path} (in the data dir) has sha256 {digest}, expected {f.sha256} ({_expected_where(f)}): it "
                "is corrupt or another version; delete it and fetch again"
            )
        raise DataError(f"dataset {ds.id}: checksum mismatch: {what}")
    return digest


def data_dir_of(path: Path, f: RemoteFile) -> Path:
    """The dataset directory holding ``path`` (``f.name`` may have subdirectories)."""
    return Path(path).parents[len(Path(f.name).parts) - 1]


def find_file(cfg: Mapping, ds: Dataset, f: RemoteFile) -> Path | None:
    """Where a file can be read from without the network, or None."""
    for p in [data_dir(cfg, ds.id) / f.name, *mirror_candidates(cfg, ds, f)]:
        if p.is_file():
            return p
    return None


def is_available(cfg: Mapping, dataset_id: str) -> bool:
    """True when every file is in the data dir or a local mirror, or an installed local provider can write them
    (no network: an http(s) mirror is not asked)."""
    ds = get_dataset(dataset_id)
    if all(find_file(cfg, ds, f) is not None for f in ds.files):
        return True
    provider = get_provider(dataset_id)
    return provider is not None and provider.available()


def can_fetch(cfg: Mapping, dataset_id: str) -> bool:
    """True when a networked machine can get the dataset: it is available here, or every missing file has an
    http(s) canonical URL or there is an http(s) mirror (asked only when fetching)."""
    if is_available(cfg, dataset_id):
        return True
    ds = get_dataset(dataset_id)
    return all(find_file(cfg, ds, f) is not None or is_url(f.url) or mirror_url(cfg) is not None for f in ds.files)


def _read_state(cfg: Mapping, ds: Dataset) -> dict:
    """``.verified.json``: {file name: {sha256, origin, size, mtime_ns[, pinned]}}; {} when absent or unreadable
    (then every file is hashed once more and the state written anew)."""
    return read_state(data_dir(cfg, ds.id) / STATE)


def _write_state(cfg: Mapping, ds: Dataset, state: dict) -> None:
    write_state(data_dir(cfg, ds.id) / STATE, state)


def _stamp_digests(stamp: Path) -> dict[str, str]:
    """{file name: sha256} from the lines ``<sha256>  <name>[  (...)]`` of a ``.verified`` stamp."""
    out = {}
    for line in stamp.read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) >= 2 and len(parts[0]) == 64:
            out[parts[1]] = parts[0]
    return out


def _download(cfg: Mapping, ds: Dataset, f: RemoteFile, dest: Path, offline: bool) -> tuple[str, str | None]:
    """Fetch a file from the http(s) mirror or the canonical URL into ``dest``: (origin, sha256 pooch checked)."""
    from fedrepro.data.download import NotFound, download

    guestbook = cfg["data"].get("guestbook")
    label = f"dataset {ds.id}"
    urls = [(u, "mirror") for u in mirror_urls(cfg, ds, f)] + ([(f.url, "canonical")] if is_url(f.url) else [])
    if offline or not urls:
        why = "offline: not in the data dir or mirror" if offline else "not downloadable: no http(s) URL or mirror"
        raise DataError(_missing_message(cfg, ds, f, why))
    not_found = []
    for url, kind in urls:
        try:
            download(url, dest, sha256=f.sha256, label=label, guestbook=guestbook)
        except NotFound as exc:
            not_found.append(f"{url} ({exc})")
            continue
        return (f"mirror {url}" if kind == "mirror" else f"download {url}"), f.sha256
    raise DataError(_missing_message(cfg, ds, f, f"not found: {'; '.join(not_found)}"))


def fetch(cfg: Mapping, dataset_id: str, offline: bool = False) -> Path:
    """Make every file of the dataset present and verified in the data dir; return the stamp file."""
    ds = get_dataset(dataset_id)
    target_dir = data_dir(cfg, ds.id)
    target_dir.mkdir(parents=True, exist_ok=True)
    lines, pins = [], []
    previous = _read_state(cfg, ds)
    state = {}
    provider = get_provider(ds.id)
    provided = False
    if provider is not None and any(find_file(cfg, ds, f) is None for f in ds.files) and provider.available():
        provider.write(target_dir)  # verified below against the pinned sha256, like a download
        provided = True
    if not ds.files:
        lines.append(f"bundled: {ds.bundled}")
    for f in ds.files:
        dest = target_dir / f.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        src = find_file(cfg, ds, f)
        known = None
        if src is None:
            origin, known = _download(cfg, ds, f, dest, offline)
        elif src != dest:
            from fedrepro.data.download import copy_atomic

            copy_atomic(src, dest)
            origin = f"mirror {src}"
        elif provided:
            origin = f"written by {provider.name}"
        else:
            origin = ""
        before = previous.get(f.name) if isinstance(previous.get(f.name), dict) else {}
        recorded = before.get("sha256") if f.sha256 is None and before.get("pinned") is False else None
        try:
            if not origin and recorded and unchanged(before, dest, recorded):
                digest = recorded  # passed its content check when recorded, and unchanged since
            else:
                digest = verify(dest, f, ds, origin, recorded=recorded, digest=known)
        except DataError:
            if origin:
                dest.unlink(missing_ok=True)  # never leave an unverified copy in the data dir
            raise
        lines.append(f"{digest}  {f.name}{'  (unpinned: content check passed)' if f.sha256 is None else ''}")
        entry = {"sha256": digest, "origin": origin or before.get("origin") or "the data dir", **file_stat(dest)}
        if f.sha256 is None:
            entry["pinned"] = False
            if recorded is None:
                pins.append(
                    f"[fedrepro] {ds.id}/{f.name} is not pinned; it passed its content check and has sha256 {digest} "
                    f"(recorded in {target_dir / STATE}); pin it: {pin_line(f, digest)}"
                )
        state[f.name] = entry
    _write_state(cfg, ds, state)
    stamp = stamp_path(cfg, ds.id)
    tmp = stamp.with_name(STAMP + ".part")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(stamp)
    for line in pins:
        print(line, file=sys.stderr, flush=True)
    return stamp


@dataclass(frozen=True)
class VerifiedFile:
    """A dataset file as it is used: its catalog name, path, and the sha256 it matched (the catalog's pin, or for an
    unpinned file the hash recorded when its first fetch passed its content check)."""

    name: str
    path: Path
    sha256: str
    pinned: bool


def verified_files(cfg: Mapping, dataset_id: str, by_content: bool = False) -> list[VerifiedFile]:
    """The dataset's files, verified again now (after :func:`fetch`): a file whose size or mtime changed since it
    was last hashed is hashed again and must still match, and with ``by_content`` every file is hashed (bit rot
    leaves size and mtime as they were); a mismatch is a DataError naming the file, where it came from and the
    expected sha256."""
    ds = get_dataset(dataset_id)
    if not ds.files:
        return []  # bundled with an installed package: nothing to fetch
    stamp = stamp_path(cfg, ds.id)
    if not stamp.is_file():
        f = ds.files[0]
        raise DataError(
            _missing_message(cfg, ds, f, f"not fetched/verified yet: run `python -m fedrepro data fetch {ds.id}`")
        )
    refetch = (
        f"delete {data_dir(cfg, ds.id)} and run the workflow again (`snakemake --cores 2`) or `python -m "
        f"fedrepro data fetch {ds.id}` to fetch and verify it anew"
    )
    state, recorded = _read_state(cfg, ds), None
    out, changed = [], False
    for f in ds.files:
        path = data_dir(cfg, ds.id) / f.name
        rec = state.get(f.name) if isinstance(state.get(f.name), dict) else {}
        if f.sha256 is None and recorded is None:
            recorded = _stamp_digests(stamp)
        expected = f.sha256 or recorded.get(f.name)
        if not path.is_file() or expected is None:
            raise DataError(
                f"dataset {ds.id}: {path} is {'missing' if expected else 'not recorded in ' + str(stamp)}"
                f" although {stamp} marks the dataset verified; {refetch}"
            )
        if by_content or not unchanged(rec, path, expected):
            digest = sha256_of(path)
            if digest != expected:
                origin = rec.get("origin")
                raise DataError(
                    f"dataset {ds.id}: checksum mismatch: {path} changed after it was verified: sha256 "
                    f"{digest}, expected {expected} ({_expected_where(f)})"
                    f"{f'; it came from {origin}' if origin else ''}; {refetch}"
                )
            state[f.name] = {**rec, "sha256": digest, **file_stat(path)}
            changed = True
        out.append(VerifiedFile(f.name, path, expected, f.sha256 is not None))
    if changed:
        try:
            _write_state(cfg, ds, state)
        except OSError:
            pass  # a read-only data dir: the files were verified all the same, and will be hashed again next time
    return out


def expected_digests(cfg: Mapping, dataset_id: str) -> dict[str, str]:
    """What each of the dataset's files must hash to here, without reading the data: the catalog's pin, or for an
    unpinned file the sha256 recorded when its first fetch here passed its content check (absent when it was never
    fetched here). A run's recorded inputs are compared with these (fedrepro.staleness)."""
    ds = get_dataset(dataset_id)
    stamp = stamp_path(cfg, ds.id)
    recorded = _stamp_digests(stamp) if stamp.is_file() else {}
    out = {f.name: f.sha256 or recorded.get(f.name) for f in ds.files}
    return {name: digest for name, digest in out.items() if digest}


def dataset_files(cfg: Mapping, dataset_id: str) -> list[Path]:
    """Paths of the dataset's files, verified again now (see :func:`verified_files`)."""
    return [v.path for v in verified_files(cfg, dataset_id)]
