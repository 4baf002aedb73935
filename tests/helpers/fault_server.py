"""A local HTTP server on 127.0.0.1 with per-path fault scripts, for the download tests (issue 28).

``FaultServer(root)`` serves the files under ``root`` (threaded ``http.server``, port chosen by the OS). Each path
has a script, a list of steps consumed one request at a time; when it is used up (or for a path without one) the
``default`` script is copied for that path, and when that is used up too, the file is served normally. Steps:

``"ok"``           the file, honouring ``Range: bytes=N-`` with ``206 Partial Content``
``"norange"``      the file, whole, with 200, even to a Range request
``"503"``          ``503 Service Unavailable`` with ``Retry-After: 0``
``"cut"``          200 (or 206) with the full ``Content-Length``, but only half the body, then the connection closes
``"html"``         200 ``text/html``: a Google-Drive-like "can't scan for viruses" page
``"404"``          404
``"redirect:/p"``  302 to ``/p`` (``"redirect301:/p"``: 301)
``"guestbook"``    400 with Dataverse's JSON "Guestbook Response entry is required" message; a POST with a
                   ``guestbookResponse`` answers ``{"data": {"signedUrl": "<this server>/signed<path>"}}`` and
                   ``/signed<path>`` serves the file

``server.log`` lists ``(method, path, Range header)`` of every request; ``server.posts`` the POSTed JSON bodies.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

DRIVE_PAGE = (
    b"<!DOCTYPE html><html><head><title>Google Drive - Virus scan warning</title></head><body>"
    b"Google Drive can't scan this file for viruses.<form action='/uc?export=download&confirm=t'></form></body></html>"
)


class FaultServer:
    def __init__(self, root: Path, default: list[str] | None = None):
        self.root = Path(root)
        self.default = list(default or [])
        self.scripts: dict[str, list[str]] = {}
        self.log: list[tuple[str, str, str | None]] = []
        self.posts: list[dict] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):  # noqa: N802
                server._get(self)

            def do_POST(self):  # noqa: N802
                server._post(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def script(self, path: str, steps: list[str]) -> None:
        with self.lock:
            self.scripts[path] = list(steps)

    def _step(self, path: str) -> str:
        with self.lock:
            if path not in self.scripts:
                self.scripts[path] = list(self.default)
            steps = self.scripts[path]
            return steps.pop(0) if steps else "ok"

    def _get(self, h: BaseHTTPRequestHandler) -> None:
        path = h.path.split("?")[0]
        rng = h.headers.get("Range")
        with self.lock:
            self.log.append(("GET", h.path, rng))
        signed = path.startswith("/signed/")
        step = "ok" if signed else self._step(path)
        file = self.root / (path[len("/signed/") :] if signed else path.lstrip("/"))
        if step == "503":
            return self._send(h, 503, b"busy", {"Retry-After": "0"})
        if step == "404" or not file.is_file():
            return self._send(h, 404, b"not found")
        if step == "html":
            return self._send(h, 200, DRIVE_PAGE, {"Content-Type": "text/html; charset=utf-8"})
        if step.startswith("redirect"):
            code = 301 if step.startswith("redirect301") else 302
            return self._send(h, code, b"", {"Location": step.split(":", 1)[1]})
        if step == "guestbook":
            body = json.dumps(
                {
                    "status": "ERROR",
                    "message": "Problem trying download with guestbook response on "
                    f"{path} : Guestbook Response entry is required but not present (Name,Email).",
                }
            ).encode()
            return self._send(h, 400, body, {"Content-Type": "application/json"})
        data = file.read_bytes()
        start = 0
        if rng and step != "norange" and rng.startswith("bytes="):
            start = int(rng[len("bytes=") :].split("-")[0])
        part = data[start:]
        headers = {"Content-Type": "application/octet-stream", "ETag": '"v1"', "Accept-Ranges": "bytes"}
        code = 200
        if start:
            code = 206
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        if step == "cut":
            h.send_response(code)
            for k, v in headers.items():
                h.send_header(k, v)
            h.send_header("Content-Length", str(len(part)))
            h.send_header("Connection", "close")
            h.end_headers()
            h.wfile.write(part[: len(part) // 2])
            h.wfile.flush()
            h.close_connection = True
            return
        self._send(h, code, part, headers)

    def _post(self, h: BaseHTTPRequestHandler) -> None:
        n = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(n)
        with self.lock:
            self.log.append(("POST", h.path, None))
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = None
        gb = (doc or {}).get("guestbookResponse") if isinstance(doc, dict) else None
        if not isinstance(gb, dict) or not gb.get("name") or not gb.get("email"):
            return self._send(h, 400, b'{"status":"ERROR","message":"Guestbook Response entry is required"}')
        with self.lock:
            self.posts.append(doc)
        path = h.path.split("?")[0]
        body = json.dumps({"status": "OK", "data": {"signedUrl": f"{self.url}signed{path}?token=abc"}}).encode()
        self._send(h, 200, body, {"Content-Type": "application/json"})

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, code: int, body: bytes, headers: dict | None = None) -> None:
        h.send_response(code)
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)


@pytest.fixture
def fault_server(tmp_path):
    """A :class:`FaultServer` serving ``tmp_path / "served"`` (create the files there), shut down after the test."""
    root = tmp_path / "served"
    root.mkdir()
    server = FaultServer(root)
    yield server
    server.close()
