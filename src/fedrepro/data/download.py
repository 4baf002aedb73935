"""Downloading one dataset file: pooch for the hash-checked transfer, fedrepro's own downloader callable for the rest.

:func:`download` hands the URL to ``pooch.retrieve`` (which downloads into a temporary file beside the destination,
checks the sha256 when one is pinned and only then moves the file into place) with a downloader callable of this
module, :class:`Downloader`, which pooch calls as ``downloader(url, output_file, pooch)``. The callable exists because
pooch's own HTTP downloader neither resumes a cut transfer nor retries within one call (pooch 1.9: ``retrieve`` has no
retries; ``Pooch.fetch``'s retries start over from byte 0 and only after a fixed sleep), and knows nothing of Google
Drive's confirm page or Dataverse's guestbook. It does:

* **Retries with backoff** on what a real server or network does now and then: HTTP 5xx, 408 and 429 (a
  ``Retry-After`` header is honoured, up to :data:`MAX_WAIT_S`), a connection refused or reset, a timeout, a body
  cut short (``http.client.IncompleteRead``, urllib3's ``ProtocolError``, fewer bytes than ``Content-Length``). An
  attempt that received bytes is resumed at once; one that received nothing waits 1, 2, 4, ... s. After
  :data:`RETRIES` retries the error is one :class:`~fedrepro.errors.DataError` line naming the URL, the file and what
  to do.
* **Resume** with an HTTP ``Range`` request from the bytes already in ``<file>.part`` (kept after a failure, so the
  next ``fedrepro data fetch`` continues where the last one stopped), where the server answers ``206 Partial Content``
  with the matching ``Content-Range``; a server that answers 200 instead sends the whole file again and the part is
  started over. Within one call ``If-Range`` pins the part to the ETag first seen, so a file replaced upstream
  mid-transfer is sent whole; across calls the sha256 (or the content check and the recorded sha256) catches a
  mixture.
* **HTML instead of the file** (Google Drive's "can't scan for viruses" page, a login or error page served with
  200): detected from the ``Content-Type`` or the first bytes, reported as such, the part removed.
* **Google Drive** URLs go through ``gdown`` (the confirm token of a large file's virus-scan page, its own retries
  and resume); **Dataverse** access URLs that answer "guestbook response required" (Dataverse >= 6.10 on datasets
  with a guestbook) get one: ``POST`` of ``{"guestbookResponse": {name, email, institution, position}}`` from config
  ``data.guestbook`` to the same access URL, whose JSON answer ``data.signedUrl`` is then downloaded (Dataverse's Data
  Access API guide, "Basic File Access"). pooch's own ``DOIDownloader`` for Dataverse only issues the plain ``GET``.
* **Progress**: a tqdm bar on a terminal, a log line every ~10 % (or 30 s) otherwise, e.g. in a Snakemake log;
  ``FEDREPRO_PROGRESS=0`` silences both.

A cut or failed transfer never leaves a file that looks complete: the bytes are in ``<file>.part`` only, and the file
itself appears (atomically, by pooch's move) only after the whole body arrived and, when pinned, its sha256 matched.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import re
import shutil
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from fedrepro.errors import DataError

RETRIES = 5  # retries after the first attempt
BACKOFF_S = 1.0  # first wait after an attempt that received nothing; doubled each time
MAX_WAIT_S = 60.0
TIMEOUT_S = (30.0, 120.0)  # connect, read (between bytes)
CHUNK = 1 << 20
TRANSIENT_STATUS = {408, 429, 500, 502, 503, 504}
DRIVE_HOSTS = {"drive.google.com", "docs.google.com", "drive.usercontent.google.com"}
USER_AGENT = "fedrepro-data-fetch (python-requests; https://github.com/fatiando/pooch downloader)"


class NotFound(Exception):
    """The server has no such file (404/410): a mirror's layout is tried in turn, then the canonical URL."""


class _Transient(Exception):
    """A failure worth another attempt; ``received`` bytes arrived in the attempt."""

    def __init__(self, why: str, received: int = 0, wait: float | None = None):
        super().__init__(why)
        self.received = received
        self.wait = wait


class _Fatal(Exception):
    """A failure no retry mends (4xx, HTML served, guestbook refused): its text is the reason."""


def is_drive(url: str) -> bool:
    return (urlparse(url).hostname or "") in DRIVE_HOSTS


def is_dataverse_access(url: str) -> bool:
    return "/api/access/datafile/" in urlparse(url).path


def _progress_enabled() -> bool:
    return os.environ.get("FEDREPRO_PROGRESS", "1") != "0"


class Progress:
    """Bytes received of one file: a tqdm bar on a terminal, else a line every ~10 % or 30 s (a Snakemake log)."""

    def __init__(self, label: str, stream=None):
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = _progress_enabled()
        self.bar = None
        self.total: int | None = None
        self.done = 0
        self.last_line = (-1.0, 0.0)  # (fraction, time) of the last log line

    def start(self, done: int, total: int | None) -> None:
        self.done, self.total = done, total
        if not self.enabled:
            return
        if self.stream.isatty():
            from tqdm import tqdm

            if self.bar is not None:
                self.bar.close()
            self.bar = tqdm(total=total, initial=done, unit="B", unit_scale=True, desc=self.label, file=self.stream)
        else:
            self._line(force=True)

    def update(self, n: int) -> None:
        self.done += n
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(n)
        else:
            self._line()

    def _line(self, force: bool = False) -> None:
        now = time.monotonic()
        frac = self.done / self.total if self.total else 0.0
        last_frac, last_t = self.last_line
        if not (force or frac - last_frac >= 0.1 or now - last_t >= 30):
            return
        self.last_line = (frac, now)
        of = f" of {self.total / 1e6:.1f} MB ({100 * frac:.0f}%)" if self.total else " MB"
        print(f"[fetch] {self.label}: {self.done / 1e6:.1f}{of}", file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        elif self.enabled and self.total and self.done >= self.total and self.last_line[0] < 1.0:
            self._line(force=True)


def _html_title(head: bytes) -> str:
    m = re.search(rb"<title[^>]*>(.*?)</title>", head, re.I | re.S)
    return m.group(1).decode("utf-8", "replace").strip()[:80] if m else ""


def looks_like_html(head: bytes, content_type: str = "") -> bool:
    """Whether a body that should be a data file is an HTML page (by its Content-Type or its first bytes)."""
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    return content_type.split(";")[0].strip().lower() in ("text/html", "application/xhtml+xml") or start.startswith(
        (b"<!doctype html", b"<html", b"<head", b"<!--")
    )


@dataclass
class Downloader:
    """pooch downloader callable ``(url, output_file, pooch)`` with retries, Range resume, HTML detection, Google
    Drive (gdown) and Dataverse guestbook support; the bytes go to ``part`` until complete, then to ``output_file``.

    ``name`` is the catalog file name (an ``.html`` file is never taken for an error page); ``guestbook`` the config's
    ``data.guestbook`` mapping (name, email, institution, position) for a Dataverse that asks for one.
    """

    part: Path
    name: str
    guestbook: Mapping | None = None
    retries: int = RETRIES
    attempts: int = 0
    content_type: str = ""
    notes: list[str] = field(default_factory=list)

    # -- pooch's interface -------------------------------------------------------------------------------------
    def __call__(self, url: str, output_file, pooch=None) -> None:  # noqa: ARG002 (pooch's signature)
        self.part.parent.mkdir(parents=True, exist_ok=True)
        if is_drive(url):
            self._drive(url)
        else:
            self._http(url)
        head = _read_head(self.part)
        if not self.name.lower().endswith((".html", ".htm")) and looks_like_html(head, self.content_type):
            title = _html_title(head)
            self.part.unlink(missing_ok=True)
            raise _Fatal(
                f"it served an HTML page{f' ({title!r})' if title else ''} instead of the file: a Google Drive "
                "virus-scan/confirm page, a login page or an error page"
            )
        os.replace(self.part, output_file)

    # -- plain HTTP(S) ---------------------------------------------------------------------------------------------
    def _http(self, url: str) -> None:
        import requests

        session = requests.Session()
        session.headers["User-Agent"] = USER_AGENT
        session.headers["Accept-Encoding"] = "identity"  # byte offsets must be those on disk
        progress = Progress(self.name)
        etag = None
        target = url
        wait = 1.0
        try:
            for attempt in range(self.retries + 1):
                self.attempts = attempt + 1
                try:
                    target, etag = self._attempt(session, url, target, etag, progress)
                    return
                except _Transient as exc:
                    if attempt == self.retries:
                        raise _Fatal(f"{exc} (gave up after {self.attempts} attempts)") from None
                    if exc.received:
                        self.notes.append(f"attempt {self.attempts}: {exc}; resuming")
                        continue
                    pause = min(MAX_WAIT_S, exc.wait if exc.wait is not None else wait * BACKOFF_S)
                    self.notes.append(f"attempt {self.attempts}: {exc}; retrying in {pause:g} s")
                    print(f"[fetch] {self.name}: {exc}; retrying in {pause:g} s", file=sys.stderr, flush=True)
                    time.sleep(pause)
                    wait *= 2
        finally:
            progress.close()
            session.close()

    def _attempt(self, session, url: str, target: str, etag: str | None, progress: Progress):
        """One request; appends to the part. Returns (the URL to use next time, the ETag)."""
        import requests
        import urllib3

        have = self.part.stat().st_size if self.part.is_file() else 0
        headers = {"Range": f"bytes={have}-"} if have else {}
        if have and etag:
            headers["If-Range"] = etag
        try:
            resp = session.get(target, headers=headers, stream=True, timeout=TIMEOUT_S, allow_redirects=True)
        except requests.exceptions.RequestException as exc:
            raise _Transient(f"request failed ({_reason(exc)})") from None
        with resp:
            if resp.status_code == 416 and have:  # the part is not a prefix the server knows: start over
                self.part.unlink()
                raise _Transient("the server refused to resume (416); starting over", received=1)
            if resp.status_code in (400, 401, 403) and is_dataverse_access(target) and target == url:
                body = resp.content[:4000]
                if b"guestbook" in body.lower():
                    return self._attempt(session, url, self._guestbook_url(session, url), etag, progress)
                raise _Fatal(f"HTTP {resp.status_code} {_server_message(body)}")
            if resp.status_code in (404, 410):
                raise NotFound(f"HTTP {resp.status_code}")
            if resp.status_code in TRANSIENT_STATUS:
                raise _Transient(f"HTTP {resp.status_code} {resp.reason}", wait=_retry_after(resp))
            if resp.status_code >= 400:
                raise _Fatal(f"HTTP {resp.status_code} {resp.reason}")
            self.content_type = resp.headers.get("Content-Type", "")
            etag = etag or resp.headers.get("ETag")
            length = _int(resp.headers.get("Content-Length"))
            if resp.status_code == 206 and have:
                start, total = _content_range(resp.headers.get("Content-Range", ""))
                if start != have:
                    self.part.unlink()
                    raise _Transient(f"the server resumed at byte {start}, not {have}; starting over", received=1)
                mode = "ab"
            else:
                if have:
                    self.notes.append(f"the server does not resume (HTTP {resp.status_code} to a Range request)")
                start, total, mode = 0, length, "wb"
            progress.start(start, total)
            received = 0
            try:
                with open(self.part, mode) as out:
                    # read1: what has arrived, so a cut body keeps every byte received (iter_content would drop
                    # the last partial chunk with the exception)
                    while chunk := resp.raw.read1(CHUNK):
                        out.write(chunk)
                        received += len(chunk)
                        progress.update(len(chunk))
            except (
                requests.exceptions.RequestException,
                urllib3.exceptions.HTTPError,
                http.client.HTTPException,
                OSError,
            ) as exc:
                if isinstance(exc, OSError) and not isinstance(exc, ConnectionError) and exc.errno is not None:
                    raise  # the disk, not the network: the caller names the file
                raise _Transient(
                    f"the body was cut after {start + received} bytes ({_reason(exc)})", received
                ) from None
            if length is not None and received < length:
                raise _Transient(f"the body was cut after {start + received} of {start + length} bytes", received)
        return target, etag

    def _guestbook_url(self, session, url: str) -> str:
        """Dataverse asks for a guestbook response: POST one (config ``data.guestbook``), get the signed URL."""
        import requests

        gb = dict(self.guestbook or {})
        if not gb.get("name") or not gb.get("email"):
            raise _Fatal(
                "the Dataverse dataset asks for a guestbook response (name, email; sent to the depositor) before "
                "download: set data.guestbook.name and data.guestbook.email (and institution, position) in "
                "config/config.yaml or with --config-set, then fetch again"
            )
        body = {"guestbookResponse": {k: str(gb.get(k) or "") for k in ("name", "email", "institution", "position")}}
        try:
            resp = session.post(url, json=body, timeout=TIMEOUT_S)
        except requests.exceptions.RequestException as exc:
            raise _Transient(f"guestbook POST failed ({_reason(exc)})") from None
        if resp.status_code in TRANSIENT_STATUS:
            raise _Transient(f"guestbook POST: HTTP {resp.status_code}", wait=_retry_after(resp))
        try:
            signed = resp.json()["data"]["signedUrl"]
        except (ValueError, KeyError, TypeError):
            raise _Fatal(
                f"the guestbook response was refused (HTTP {resp.status_code} {_server_message(resp.content)}); "
                "the dataset's guestbook may have required questions: download the file in a browser and put it "
                "into the mirror"
            ) from None
        self.notes.append("Dataverse guestbook answered")
        return signed

    # -- Google Drive ----------------------------------------------------------------------------------------------
    def _drive(self, url: str) -> None:
        import gdown
        import requests
        from gdown.exceptions import DownloadError as GdownError

        progress = Progress(self.name)
        started = []

        def cb(done: int, total: int | None) -> None:
            if not started:
                started.append(1)
                progress.start(0, total)
            progress.update(done - progress.done)

        out = self.part.with_name(self.part.name + ".gdown")
        try:
            gdown.download(
                url,
                str(out),
                quiet=True,
                resume=True,
                retries=self.retries,
                timeout=TIMEOUT_S,
                progress=cb,
                use_cookies=False,
            )
        except (GdownError, requests.exceptions.RequestException, http.client.HTTPException, OSError) as exc:
            if isinstance(exc, OSError) and not isinstance(exc, ConnectionError) and exc.errno is not None:
                raise
            raise _Fatal(f"Google Drive download through gdown failed ({_reason(exc)})") from None
        finally:
            progress.close()
        self.content_type = ""
        os.replace(out, self.part)


def _read_head(path: Path, n: int = 4096) -> bytes:
    with open(path, "rb") as fh:
        return fh.read(n)


def _int(text) -> int | None:
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def _content_range(text: str) -> tuple[int | None, int | None]:
    m = re.match(r"\s*bytes\s+(\d+)-(\d+)/(\d+|\*)", text or "")
    if not m:
        return None, None
    return int(m.group(1)), (int(m.group(3)) if m.group(3) != "*" else None)


def _retry_after(resp) -> float | None:
    v = resp.headers.get("Retry-After")
    try:
        return max(0.0, float(v)) if v is not None else None
    except ValueError:
        return None


def _server_message(body: bytes) -> str:
    try:
        doc = json.loads(body)
        msg = doc.get("message") if isinstance(doc, dict) else None
        if isinstance(msg, dict):
            msg = msg.get("message")
        if msg:
            return f"({str(msg)[:200]})"
    except ValueError:
        pass
    return ""


def _reason(exc: BaseException) -> str:
    """A short one-line reason for a requests / http.client / urllib3 exception."""
    text = str(exc).replace("\n", " ")
    for pat, short in (
        (r"IncompleteRead", "connection closed before the whole body arrived (IncompleteRead)"),
        (r"Connection refused", "connection refused"),
        (r"Connection reset|ConnectionResetError", "connection reset"),
        (r"timed out|Timeout", "timed out"),
        (
            r"Name or service not known|nodename nor servname|getaddrinfo|Temporary failure in name resolution",
            "host name not resolved",
        ),
    ):
        if re.search(pat, text):
            return short
    return f"{type(exc).__name__}: {text[:200]}"


def download(url: str, dest: Path, *, sha256: str | None, label: str, guestbook: Mapping | None = None) -> Downloader:
    """Download ``url`` to ``dest`` through pooch with :class:`Downloader`; returns the downloader (its notes).

    ``sha256``: pooch checks it before the file is moved into place (None: checked afterwards by the caller's
    content check). Raises :class:`NotFound` for a 404/410 and :class:`DataError` (one line: ``label``, the URL, the
    file, the reason and what to do) for any other failure; on a failure ``dest`` does not exist, and the bytes
    received so far stay in ``<dest>.part`` for the next call to resume.
    """
    import pooch

    pooch.get_logger().setLevel(logging.WARNING)  # its "known_hash" advice would contradict the catalog's
    dest = Path(dest)
    print(f"[fetch] {url} -> {dest}", file=sys.stderr, flush=True)
    part = dest.with_name(dest.name + ".part")
    dl = Downloader(part=part, name=dest.name, guestbook=guestbook, retries=RETRIES)
    try:
        pooch.retrieve(
            url,
            known_hash=f"sha256:{sha256}" if sha256 else None,
            fname=dest.name,
            path=str(dest.parent),
            downloader=dl,
            progressbar=False,
        )
    except NotFound:
        raise
    except _Fatal as exc:
        kept = (
            f"; the {part.stat().st_size} bytes received are kept in {part} and the next fetch resumes"
            if (part.is_file())
            else ""
        )
        raise DataError(
            f"{label}: download of {url} to {dest} failed: {exc}{kept}; check the network and the URL, or put the "
            "file into the mirror (data.mirror)"
        ) from None
    except ValueError as exc:
        if "hash" not in str(exc).lower():
            raise
        got = re.search(r"but got ([0-9a-f]{64})", str(exc))
        raise DataError(
            f"{label}: checksum mismatch: {url} (downloaded to {dest}) has sha256 {got.group(1) if got else '?'}, "
            f"expected {sha256} (pinned in the catalog): a corrupt download or a changed upstream file; it was "
            "deleted; fetch again, and if it persists compare the upstream file before pinning its new hash"
        ) from None
    finally:
        for leftover in (part.with_name(part.name + ".gdown"),):
            leftover.unlink(missing_ok=True)
    if not dest.is_file():  # pragma: no cover (pooch moved it into place)
        raise DataError(f"{label}: download of {url} produced no file at {dest}")
    return dl


def copy_atomic(src: Path, dest: Path) -> None:
    """Copy a mirror file into the data dir under ``.part``, renamed into place when complete."""
    tmp = dest.with_name(dest.name + ".part")
    shutil.copyfile(src, tmp)
    tmp.replace(dest)
