"""A read-only HTTP server for volumes that Neuroglancer (or any HTTP client) reads directly.

Built on the standard library's :class:`http.server.ThreadingHTTPServer` (one thread per
connection, HTTP/1.1 keep-alive): it needs no dependency beyond Python, and serving local
files is blocking I/O that threads handle well.  What it adds to the standard handler:

- ``Range: bytes=a-b`` / ``a-`` / ``-n`` (one range) answered with 206 and ``Content-Range``;
  416 with ``Content-Range: bytes */SIZE`` when unsatisfiable; several ranges at once are
  answered with the whole file (200), which HTTP allows.
- CORS: every response (errors included, so a browser can see a 404 as "missing") carries
  ``Access-Control-Allow-Origin`` (``*`` unless the server is given one origin, or none)
  and exposes ``Content-Range``, ``Content-Length``, ``Content-Encoding`` and
  ``Accept-Ranges``; ``OPTIONS`` preflights are answered with 204 (allowing Chrome's
  private-network preflight, so a hosted Neuroglancer can read it).  With ``*``, any web
  page open in the user's browser can read what is served, also from a server on
  127.0.0.1: give the one origin that should (``cors_origin``) where that matters.
- A strong ``ETag`` for plain files (inode, modification time and size: a file replaced by
  rename gets a new one), and ``If-Match``: a request whose tags do not include it gets 412,
  so a reader that relies on an earlier read of the file notices that it was replaced.
- A file stored as ``NAME.gz``, ``NAME.br`` or ``NAME.zstd`` (CloudVolume's compressed
  chunks) is served under ``NAME`` when ``NAME`` is absent: whole with that
  ``Content-Encoding`` if the client accepts it; a gzip file is else inflated as it is sent
  (a Range request gets the range of the inflated bytes), the others are 406 Not
  Acceptable (see :mod:`shardvol.ops.serve_encoded`).
- Limits: a request's line and headers must arrive within ``header_timeout`` seconds of
  the wait for it (an idle keep-alive connection is closed then too); at most
  ``max_connections`` connections are served at once (by default about half the file
  descriptors the process may open), and one more is answered 503 and closed; a request
  that carries a body (which no GET needs) is answered, then its connection closed, so
  the body is never read as a request.  A client that goes away mid-answer is a line in
  the log, not a traceback.
- Read-only (405 for ``POST``/``PUT``/``DELETE``/...), and nothing outside the root: ``..``,
  ``.``, encoded slashes or backslashes, NUL bytes and symlinks that leave the root are 404.
"""

from __future__ import annotations

import errno
import io
import mimetypes
import os
import re
import resource
import socket
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, BinaryIO, Literal, cast

from shardvol.errors import InvalidArgumentError
from shardvol.ops.serve_encoded import CorruptFile, accepts, inflated_size, send_range, siblings

_RANGE = re.compile(r"bytes=(\d{0,19})-(\d{0,19})$")  # (more digits: no offset of a file)
_EXPOSED = "Content-Range, Content-Length, Content-Encoding, Accept-Ranges, ETag"
_ORIGIN = re.compile(r"\*|https?://[A-Za-z0-9.-]+(:\d{1,5})?|https?://\[[0-9A-Fa-f:.]+\](:\d{1,5})?")
HEADER_TIMEOUT = 30.0  # seconds for a request's line and headers, from the wait for it
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\n"
         b"Connection: close\r\n\r\n")
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


class _DeadlineReader(io.RawIOBase):
    """A connection's bytes, each wait for them bounded by the handler's deadline (while it
    has one) or its timeout: a client sending a byte at a time cannot stretch its headers
    past the deadline, as it could a timeout per read."""

    def __init__(self, handler: VolumeRequestHandler) -> None:
        self.handler = handler

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        h = self.handler
        wait: float = h.timeout
        if h.deadline is not None:
            wait = min(wait, h.deadline - time.monotonic())
            if wait <= 0:
                raise TimeoutError("the request's headers took too long")
        h.connection.settimeout(wait)
        return h.connection.recv_into(buffer)


class VolumeRequestHandler(BaseHTTPRequestHandler):
    """Serves the files below ``server.root``; see the module docstring."""

    protocol_version = "HTTP/1.1"
    server_version = "shardvol-serve"
    timeout = 120  # seconds a response may wait on a client that does not read
    server: VolumeServer
    deadline: float | None = None  # (monotonic) when the headers being read must be in
    _has_body = False  # the request carries a body (left unread: the connection closes)

    # ---------------------------------------------------------------- plumbing
    def setup(self) -> None:
        super().setup()
        self.rfile = io.BufferedReader(_DeadlineReader(self))

    def handle_one_request(self) -> None:
        self.deadline = time.monotonic() + self.server.header_timeout
        self._has_body = False
        super().handle_one_request()

    def parse_request(self) -> bool:
        ok = super().parse_request()
        self.deadline = None
        self.connection.settimeout(self.timeout)
        if ok and (self.headers.get("Transfer-Encoding")
                   or self.headers.get("Content-Length", "0").strip() not in ("", "0")):
            # a body: answered, never read (nor taken for the next request)
            self._has_body = self.close_connection = True
        return ok

    def end_headers(self) -> None:
        origin = self.server.cors_origin
        if origin is not None:
            self.send_header("Access-Control-Allow-Origin", origin)
            self.send_header("Access-Control-Expose-Headers", _EXPOSED)
            if origin != "*":
                self.send_header("Vary", "Origin")
        if self._has_body:
            self.send_header("Connection", "close")
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
        if (self.server.cors_origin is not None
                and self.headers.get("Access-Control-Request-Private-Network") == "true"):
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
        coding = None
        if path is None:
            coding, path = self._sibling()
        if path is None:
            self.send_error(HTTPStatus.NOT_FOUND)
            return
        try:
            with open(path, "rb") as f:
                if coding is not None:
                    if self.headers.get("If-Match", "*").strip() != "*":
                        # NAME.gz responses carry no ETag: no tag a client holds is current
                        self._send_empty(HTTPStatus.PRECONDITION_FAILED)
                        return
                    self._serve_encoded(f, coding, body)
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

    def _sibling(self) -> tuple[str | None, str | None]:
        """The coding and real path of a compressed copy (``PATH.gz``, ...) of ``PATH``,
        which does not exist; (None, None) if there is none."""
        target = self.path.split("?", 1)[0].split("#", 1)[0].rstrip("/")
        if not target:
            return None, None
        for coding, name in siblings(target):
            try:
                path = resolve(self.server.root, name)
            except UnicodeDecodeError:
                return None, None
            if path is not None:
                return coding, path
        return None, None

    def _serve_encoded(self, f: BinaryIO, coding: str, body: bool) -> None:
        vary = ("Vary", "Accept-Encoding")
        rng = self.headers.get("Range")
        if rng is None and accepts(self.headers.get("Accept-Encoding", ""), coding):
            self._send_file(f, os.fstat(f.fileno()).st_size, body, "application/octet-stream",
                            (("Content-Encoding", coding), vary))
            return
        if coding != "gzip":
            self.send_error(HTTPStatus.NOT_ACCEPTABLE,
                            f"stored {coding}-compressed: ask for all of it, with "
                            f"Accept-Encoding: {coding}")
            return
        try:
            size = inflated_size(f)
        except CorruptFile as e:
            self.log_error("%s: %s", self.path, e)
            self.send_error(HTTPStatus.INTERNAL_SERVER_ERROR, "corrupt gzip file")
            return
        span = self._send_headers(size, "application/octet-stream", (vary,))
        if span is None or not body or span[0] == span[1]:
            return
        self.wfile.flush()
        try:
            send_range(f, *span, self.wfile.write)
        except CorruptFile as e:  # (changed since it was measured): the body is cut short
            self.log_error("%s: %s", self.path, e)
            self.close_connection = True

    @staticmethod
    def _content_type(path: str) -> str:
        kind, _ = mimetypes.guess_type(path)
        if kind is None and os.path.basename(path) in ("info", "zarr.json"):
            return "application/json"
        return kind or "application/octet-stream"

    def _send_file(self, f: BinaryIO, size: int, body: bool, content_type: str,
                   extra: tuple[tuple[str, str], ...] = ()) -> None:
        span = self._send_headers(size, content_type, extra)
        if span is not None and body and span[1] > span[0]:
            self._copy(f, span[0], span[1] - span[0])

    def _send_headers(self, size: int, content_type: str,
                      extra: tuple[tuple[str, str], ...] = ()) -> tuple[int, int] | None:
        """The status and headers of a body of ``size`` bytes, or of the range of it the
        request asks for: ``(start, stop)`` of what to send, None if answered (416)."""
        start, stop, status = 0, size, HTTPStatus.OK
        header = self.headers.get("Range")
        if header is not None:
            rng = parse_range(header, size)
            if rng is False:
                self._send_empty(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE,
                                 (("Content-Range", f"bytes */{size}"),))
                return None
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
        return start, stop

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
    thread); ``log`` receives access-log lines (None: no log).  ``cors_origin``: the
    ``Access-Control-Allow-Origin`` of every response (``*``: any page; None: no CORS
    headers, so browsers let no other origin read).  ``max_connections`` (default: about
    half the file descriptors this process may open) and ``header_timeout``: see the
    module's doc.
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
        cors_origin: str | None = "*",
        max_connections: int | None = None,
        header_timeout: float = HEADER_TIMEOUT,
    ) -> None:
        self.root = os.path.realpath(root)
        if not os.path.isdir(self.root):
            raise NotADirectoryError(f"{root!r} is not a directory")
        self._log = log
        self._log_lock = threading.Lock()  # handler threads must not interleave lines
        self._on_request = on_request
        if cors_origin is not None and not _ORIGIN.fullmatch(cors_origin):
            raise InvalidArgumentError(
                f"cors_origin must be '*' or an origin such as https://host[:port], "
                f"got {cors_origin!r}")
        self.cors_origin = cors_origin
        self.header_timeout = header_timeout
        self.max_connections = max_connections or _default_max_connections()
        self._slots = threading.BoundedSemaphore(self.max_connections)
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__((host, port), VolumeRequestHandler)

    def get_request(self) -> tuple[socket.socket, Any]:
        try:
            return super().get_request()
        except OSError as e:
            if e.errno in (errno.EMFILE, errno.ENFILE):
                time.sleep(0.05)  # (out of descriptors: wait for some to close, not spin)
            raise

    def process_request(self, request: Any, client_address: Any) -> None:
        """A thread for the connection while there are fewer than ``max_connections``; else
        503 and close."""
        if not self._slots.acquire(blocking=False):
            try:
                request.setblocking(False)
                request.send(_BUSY)
            except OSError:
                pass
            self.log(f"{client_address[0]} refused: {self.max_connections} connections open")
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client gone (or too slow) is a log line; anything else a traceback as usual."""
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            self.log(f"{client_address[0]} connection ended: {error}")
            return
        super().handle_error(request, client_address)

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


def _default_max_connections() -> int:
    """About half the descriptors left to the process (each connection may hold a socket
    and a file), at most 512."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 512
    return max(1, min(512, (soft - 32) // 2))


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
          out: Callable[[str], None] = print, cors_origin: str | None = "*") -> None:
    """Serve ``root`` until interrupted, printing the Neuroglancer sources found there."""
    log = None if quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    with VolumeServer(root, host, port, log=log, cors_origin=cors_origin) as server:
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
