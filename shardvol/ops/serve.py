"""A read-only HTTP server for volumes that Neuroglancer (or any HTTP client) reads directly.

Built on the standard library's :class:`http.server.ThreadingHTTPServer` (one thread per
connection, HTTP/1.1 keep-alive): it needs no dependency beyond Python, and serving local
files is blocking I/O that threads handle well.  What it adds to the standard handler:

- ``Range: bytes=a-b`` / ``a-`` / ``-n`` (one range) answered with 206 and ``Content-Range``;
  416 with ``Content-Range: bytes */SIZE`` when unsatisfiable; several ranges at once are
  answered with the whole file (200), which HTTP allows.
- CORS: every response (errors included, so a browser can see a 404 as "missing") carries
  ``Access-Control-Allow-Origin: *`` and exposes ``Content-Range``, ``Content-Length``,
  ``Content-Encoding`` and ``Accept-Ranges``; ``OPTIONS`` preflights are answered with 204
  (allowing Chrome's private-network preflight, so a hosted Neuroglancer can read it).
- A strong ``ETag`` for plain files (inode, modification time and size: a file replaced by
  rename gets a new one), and ``If-Match``: a request whose tags do not include it gets 412,
  so a reader that relies on an earlier read of the file notices that it was replaced.
- A file stored as ``NAME.gz`` (CloudVolume's gzip chunks) is served under ``NAME`` when
  ``NAME`` is absent: whole with ``Content-Encoding: gzip`` if the client accepts gzip, else
  decompressed; a Range request on it gets the range of the decompressed bytes.
- Read-only (405 for ``POST``/``PUT``/``DELETE``/...), and nothing outside the root: ``..``,
  ``.``, encoded slashes or backslashes, NUL bytes and symlinks that leave the root are 404.
"""

from __future__ import annotations

import io
import mimetypes
import os
import re
import socket
import sys
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import BinaryIO, Literal, cast

from shardvol.compression import gzip_decompress
from shardvol.errors import ChunkDecodeError

_RANGE = re.compile(r"bytes=(\d{0,19})-(\d{0,19})$")  # (more digits: no offset of a file)
_CORS = (
    ("Access-Control-Allow-Origin", "*"),
    ("Access-Control-Expose-Headers",
     "Content-Range, Content-Length, Content-Encoding, Accept-Ranges, ETag"),
)
_ALLOWED = "GET, HEAD, OPTIONS"
_PREFLIGHT_MAX_AGE = "86400"
# Markers of volumes (directory -> Neuroglancer data source scheme).
_VOLUME_MARKERS = (("info", "precomputed"), ("zarr.json", "zarr3"))
_MAX_SCAN_DEPTH = 4


@dataclass(frozen=True)
class Access:
    """One answered request, as passed to the server's ``on_request`` callback."""

    client: str
    method: str
    path: str
    range: str | None
    status: int
    length: int


def resolve(root: str, request_path: str) -> str | None:
    """The real path of an existing regular file ``request_path`` names below ``root``, or None.

    ``root`` must be a real (symlink-free, absolute) path.  Rejected (None): a ``.`` or
    ``..`` segment, a segment holding ``/``, ``\\`` or NUL once percent-decoded, anything
    that resolves (through symlinks) outside ``root``, directories and missing files.
    """
    path = request_path.split("?", 1)[0].split("#", 1)[0]
    if "://" in path:  # absolute-form request target: http://host/path
        path = urllib.parse.urlsplit(path).path
    parts = []
    for raw in path.split("/"):
        if not raw:
            continue
        seg = urllib.parse.unquote(raw, errors="strict") if "%" in raw else raw
        if seg in (".", "..") or any(c in seg for c in "/\\\0"):
            return None
        parts.append(seg)
    if not parts:
        return None
    real = os.path.realpath(os.path.join(root, *parts))
    if os.path.commonpath((root, real)) != root or not os.path.isfile(real):
        return None
    return real


def _if_match(header: str | None, etag: str) -> bool:
    """Whether an ``If-Match`` header (absent, ``*``, or a list of entity tags) lets a request
    of a file whose strong tag is ``etag`` through (weak tags never match: RFC 9110 13.1.1)."""
    if header is None or header.strip() == "*":
        return True
    return etag in (t.strip() for t in header.split(","))


def _accepts_gzip(header: str) -> bool:
    """Whether an ``Accept-Encoding`` header accepts gzip: with q > 0, named (gzip, x-gzip)
    or else through ``*`` (RFC 9110 12.5.3)."""
    weights: dict[str, float] = {}
    for item in header.lower().split(","):
        coding, _, params = item.partition(";")
        q = 1.0
        for param in params.split(";"):
            name, _, value = param.partition("=")
            if name.strip() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        weights[coding.strip()] = q
    named = [weights[c] for c in ("gzip", "x-gzip") if c in weights]
    return max(named) > 0 if named else weights.get("*", 0.0) > 0


def parse_range(header: str, size: int) -> tuple[int, int] | Literal[False] | None:
    """``(start, stop)`` of a single-range ``Range`` header for a body of ``size`` bytes.

    None: ignore the header (malformed or several ranges: serve the whole body);
    False: unsatisfiable (416).
    """
    m = _RANGE.match(header.strip())
    if m is None or (not m.group(1) and not m.group(2)):
        return None
    first, last = m.group(1), m.group(2)
    if first:
        start = int(first)
        if last and int(last) < start:
            return None
        stop = min(size, int(last) + 1) if last else size
    else:
        suffix = int(last)
        if suffix == 0:
            return False
        start, stop = max(0, size - suffix), size
    if start >= size:
        return False
    return start, stop


class VolumeRequestHandler(BaseHTTPRequestHandler):
    """Serves the files below ``server.root``; see the module docstring."""

    protocol_version = "HTTP/1.1"
    server_version = "shardvol-serve"
    timeout = 120  # seconds an idle keep-alive connection may hold its thread
    server: VolumeServer

    # ---------------------------------------------------------------- plumbing
    def end_headers(self) -> None:
        for name, value in _CORS:
            self.send_header(name, value)
        super().end_headers()

    def log_message(self, format: str, *args: object) -> None:
        self.server.log(f"{self.address_string()} {format % args}")

    def _end_headers_logged(self, status: int, length: int) -> None:
        """Record the request, then send the headers (so a client that has the response
        finds it in the log).  Also called for malformed requests (no command/headers)."""
        headers = getattr(self, "headers", None)
        self.server.record(Access(
            self.address_string(), self.command or "-", getattr(self, "path", ""),
            headers.get("Range") if headers else None, int(status), length,
        ))
        self.end_headers()

    def _send_empty(self, status: int, headers: tuple[tuple[str, str], ...] = ()) -> None:
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", "0")
        self._end_headers_logged(status, 0)

    def send_response(self, code: int, message: str | None = None) -> None:
        # The standard handler logs here, before the length is known: _end_headers_logged
        # logs instead.
        self.send_response_only(code, message)
        self.send_header("Server", self.version_string())
        self.send_header("Date", self.date_time_string())

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        body = f"{code} {message or HTTPStatus(code).phrase}\n".encode()
        self.send_response(code, message)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        if code in (HTTPStatus.BAD_REQUEST, HTTPStatus.REQUEST_URI_TOO_LONG,
                    HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE):
            self.send_header("Connection", "close")
            self.close_connection = True
        self._end_headers_logged(code, len(body))
        if self.command != "HEAD" and code >= 200 and code not in (204, 304):
            self.wfile.write(body)

    # ----------------------------------------------------------------- methods
    def do_OPTIONS(self) -> None:
        requested = self.headers.get("Access-Control-Request-Headers")
        headers = [
            ("Allow", _ALLOWED),
            ("Access-Control-Allow-Methods", _ALLOWED),
            ("Access-Control-Allow-Headers", requested or "Range"),
            ("Access-Control-Max-Age", _PREFLIGHT_MAX_AGE),
        ]
        if self.headers.get("Access-Control-Request-Private-Network") == "true":
            # Chrome asks before a public page (e.g. a hosted Neuroglancer) reads a local server
            headers.append(("Access-Control-Allow-Private-Network", "true"))
        self._send_empty(HTTPStatus.NO_CONTENT, tuple(headers))

    def do_GET(self) -> None:
        self._serve(body=True)

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def _not_allowed(self) -> None:
        self.send_response(HTTPStatus.METHOD_NOT_ALLOWED)
        self.send_header("Allow", _ALLOWED)
        self.send_header("Content-Length", "0")
        self.send_header("Connection", "close")  # any request body is left unread
        self.close_connection = True
        self._end_headers_logged(HTTPStatus.METHOD_NOT_ALLOWED, 0)

    do_POST = do_PUT = do_DELETE = do_PATCH = do_TRACE = do_CONNECT = _not_allowed

    # ----------------------------------------------------------------- serving
    def _serve(self, body: bool) -> None:
        try:
            path = resolve(self.server.root, self.path)
        except UnicodeDecodeError:
            path = None
        encoded = False
        if path is None:
            path = self._gz_sibling()
            encoded = path is not None
        if path is None:
            self.send_error(HTTPStatus.NOT_FOUND)
            return
        try:
            with open(path, "rb") as f:
                if encoded:
                    if self.headers.get("If-Match", "*").strip() != "*":
                        # NAME.gz responses carry no ETag: no tag a client holds is current
                        self._send_empty(HTTPStatus.PRECONDITION_FAILED)
                        return
                    self._serve_gz(f, body)
                    return
                st = os.fstat(f.fileno())
                etag = f'"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}"'
                if not _if_match(self.headers.get("If-Match"), etag):
                    self._send_empty(HTTPStatus.PRECONDITION_FAILED, (("ETag", etag),))
                    return
                self._send_file(f, st.st_size, body, self._content_type(path),
                                (("ETag", etag),))
        except FileNotFoundError:  # removed since resolve() saw it
            self.send_error(HTTPStatus.NOT_FOUND)

    def _gz_sibling(self) -> str | None:
        """The real path of ``PATH.gz`` for a request of ``PATH`` (which does not exist)."""
        target = self.path.split("?", 1)[0].split("#", 1)[0].rstrip("/")
        if not target or target.endswith(".gz"):
            return None
        try:
            return resolve(self.server.root, target + ".gz")
        except UnicodeDecodeError:
            return None

    def _serve_gz(self, f: BinaryIO, body: bool) -> None:
        rng = self.headers.get("Range")
        accepts = _accepts_gzip(self.headers.get("Accept-Encoding", ""))
        if accepts and rng is None:
            self._send_file(f, os.fstat(f.fileno()).st_size, body, "application/octet-stream",
                            (("Content-Encoding", "gzip"), ("Vary", "Accept-Encoding")))
            return
        try:
            data = gzip_decompress(f.read(), self.path, ChunkDecodeError)
        except ChunkDecodeError as e:
            self.log_error("%s", e)
            self.send_error(HTTPStatus.INTERNAL_SERVER_ERROR, "corrupt gzip file")
            return
        self._send_file(io.BytesIO(data), len(data), body, "application/octet-stream",
                        (("Vary", "Accept-Encoding"),))

    @staticmethod
    def _content_type(path: str) -> str:
        kind, _ = mimetypes.guess_type(path)
        if kind is None and os.path.basename(path) in ("info", "zarr.json"):
            return "application/json"
        return kind or "application/octet-stream"

    def _send_file(self, f: BinaryIO, size: int, body: bool, content_type: str,
                   extra: tuple[tuple[str, str], ...] = ()) -> None:
        start, stop, status = 0, size, HTTPStatus.OK
        header = self.headers.get("Range")
        if header is not None:
            rng = parse_range(header, size)
            if rng is False:
                self._send_empty(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE,
                                 (("Content-Range", f"bytes */{size}"),))
                return
            if rng is not None:
                start, stop = rng
                status = HTTPStatus.PARTIAL_CONTENT
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(stop - start))
        self.send_header("Accept-Ranges", "bytes")
        if status == HTTPStatus.PARTIAL_CONTENT:
            self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{size}")
        for name, value in extra:
            self.send_header(name, value)
        self._end_headers_logged(status, stop - start)
        if body and stop > start:
            self._copy(f, start, stop - start)

    def _copy(self, f: BinaryIO, offset: int, count: int) -> None:
        self.wfile.flush()
        if isinstance(f, io.BytesIO):
            self.wfile.write(f.getbuffer()[offset:offset + count])
        elif self.connection.sendfile(f, offset, count) < count:
            # the file shrank while being sent: the body is shorter than its Content-Length,
            # so the connection cannot carry another response
            self.log_error("%s shrank while being sent", self.path)
            self.close_connection = True


def _printable(text: str) -> str:
    """``text`` with control characters escaped (a client's bytes must not drive the terminal
    the log is read on), as the standard library's request log does."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class VolumeServer(ThreadingHTTPServer):
    """A threaded server of the files below ``root``.

    ``on_request(access)`` is called after every answered request (from the handler's
    thread); ``log`` receives access-log lines (None: no log).
    """

    daemon_threads = True
    request_queue_size = 128

    def __init__(
        self,
        root: str,
        host: str = "127.0.0.1",
        port: int = 8080,
        log: Callable[[str], None] | None = None,
        on_request: Callable[[Access], None] | None = None,
    ) -> None:
        self.root = os.path.realpath(root)
        if not os.path.isdir(self.root):
            raise NotADirectoryError(f"{root!r} is not a directory")
        self._log = log
        self._log_lock = threading.Lock()  # handler threads must not interleave lines
        self._on_request = on_request
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__((host, port), VolumeRequestHandler)

    def log(self, line: str) -> None:
        if self._log is not None:
            with self._log_lock:
                self._log(line)

    def record(self, access: Access) -> None:
        if self._on_request is not None:
            self._on_request(access)
        path, rng = _printable(access.path), _printable(access.range or "")
        self.log(f'{access.client} "{access.method} {path}"'
                 f'{" Range=" + rng if rng else ""} '
                 f"{access.status} {access.length}")

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT`` as clients should write it."""
        # (the stubs allow a bytes host; this server binds the str it is given)
        host, port = cast("tuple[str, int]", self.server_address[:2])
        if host in ("0.0.0.0", "::"):
            host = socket.gethostname()
        elif ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{port}"

    def start(self) -> threading.Thread:
        """Serve from a daemon thread (stop with ``shutdown()`` then ``server_close()``)."""
        thread = threading.Thread(target=self.serve_forever, name="shardvol-serve", daemon=True)
        thread.start()
        return thread


def find_volumes(root: str, max_depth: int = _MAX_SCAN_DEPTH) -> Iterator[tuple[str, str]]:
    """``(scheme, relative path)`` of the volumes below ``root`` (sorted, shallow first per branch).

    A directory holding an ``info`` file is a precomputed volume, one holding ``zarr.json``
    a Zarr v3 node; the scan does not descend into a volume (its scales may hold millions
    of chunk files) nor deeper than ``max_depth``.
    """
    root = os.path.realpath(root)
    stack = [("", 0)]
    while stack:
        rel, depth = stack.pop()
        here = os.path.join(root, rel)
        try:
            entries = sorted(os.scandir(here), key=lambda e: e.name, reverse=True)
        except OSError:
            continue
        names = {e.name for e in entries if e.is_file()}
        marker = next((scheme for name, scheme in _VOLUME_MARKERS
                       if name in names or f"{name}.gz" in names), None)
        if marker is not None:
            yield marker, rel
            continue
        if depth < max_depth:
            stack.extend((os.path.join(rel, e.name), depth + 1) for e in entries
                         if e.is_dir(follow_symlinks=False) and not e.name.startswith("."))


def source_url(base_url: str, scheme: str, rel: str) -> str:
    """The Neuroglancer data source for a volume at ``rel`` below the served root."""
    path = urllib.parse.quote(rel.replace(os.sep, "/"))
    return f"{scheme}://{base_url}/{path}".rstrip("/")


def serve(root: str, host: str = "127.0.0.1", port: int = 8080, quiet: bool = False,
          out: Callable[[str], None] = print) -> None:
    """Serve ``root`` until interrupted, printing the Neuroglancer sources found there."""
    log = None if quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    with VolumeServer(root, host, port, log=log) as server:
        volumes = list(find_volumes(server.root))
        out(f"serving {server.root} at {server.base_url}/ (Ctrl-C to stop)")
        if volumes:
            out("Neuroglancer sources (paste into a layer's source box):")
            for scheme, rel in volumes:
                out(f"  {source_url(server.base_url, scheme, rel)}")
        else:
            out("no volumes found (directories with an 'info' or 'zarr.json' file)")
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
