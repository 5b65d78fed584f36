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
    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    def send_head(self):
        path = self.translate_path(self.path)
        if not os.path.isfile(path):
            self.send_error(404)
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
        f = open(path, "rb")
        f.seek(start)
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(stop - start))
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{size}")
        self.end_headers()
        self._remaining = stop - start
        return f

    def copyfile(self, source, outputfile):
        outputfile.write(source.read(self._remaining))


class StaticServer:
    """Serve ``directory`` on 127.0.0.1 on a free port until ``close()``."""

    def __init__(self, directory: str) -> None:
        handler = lambda *a, **k: RangeHandler(*a, directory=directory, **k)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
