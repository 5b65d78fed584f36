"""A small threaded HTTP server for tests: static files with single-range Range support.

Independent of shardvol's own code so that it can act as an oracle peer.
"""

from __future__ import annotations

import os
import re
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


class RangeHandler(SimpleHTTPRequestHandler):
    weak_etags = False  # send ETag: W/"..." and refuse If-Match (weak tags never match it)
    if_match_seen: list[str]
    heads: list[dict[str, str]]

    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    def send_head(self):
        self.heads.append(dict(self.headers))
        path = self.translate_path(self.path)
        if not os.path.isfile(path):
            self.send_error(404)
            return None
        if self.weak_etags and self.headers.get("If-Match"):
            self.if_match_seen.append(self.headers["If-Match"])
            if self.headers["If-Match"].strip() != "*":  # RFC 9110 13.1.1: strong comparison
                self.send_error(412)
                return None
        size = os.path.getsize(path)
        header = self.headers.get("Range")
        start, stop = 0, size
        status = 200
        if header:
            m = _RANGE.match(header.strip())
            if not m or (not m.group(1) and not m.group(2)):
                self.send_error(400)
                return None
            if m.group(1):
                start = int(m.group(1))
                stop = min(size, int(m.group(2)) + 1) if m.group(2) else size
            else:
                start, stop = max(0, size - int(m.group(2))), size
            if start >= size or stop <= start:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            status = 206
        f = open(path, "rb")  # noqa: SIM115 - returned to the caller, which closes it
        f.seek(start)
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(stop - start))
        self.send_header("Accept-Ranges", "bytes")
        if self.weak_etags:
            st = os.stat(path)
            self.send_header("ETag", f'W/"{st.st_mtime_ns:x}-{size:x}"')
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{size}")
        self.end_headers()
        self._remaining = stop - start
        return f

    def copyfile(self, source, outputfile):
        outputfile.write(source.read(self._remaining))


class Serving:
    """``handler`` (a request handler class, or a callable making one) served on 127.0.0.1
    on a free port, in a thread, until ``close()``; ``url`` is its address + ``path``."""

    def __init__(self, handler, path: str = "") -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class StaticServer(Serving):
    """Serve ``directory`` on 127.0.0.1 on a free port until ``close()``."""

    def __init__(self, directory: str, weak_etags: bool = False) -> None:
        self.if_match_seen: list[str] = []  # If-Match headers received (weak_etags only)
        self.heads: list[dict[str, str]] = []  # the headers of every request, in order
        attrs = {"weak_etags": weak_etags, "if_match_seen": self.if_match_seen,
                 "heads": self.heads}
        handler_class = type("Handler", (RangeHandler,), attrs)

        def handler(*a, **k):
            return handler_class(*a, directory=directory, **k)

        super().__init__(handler)
