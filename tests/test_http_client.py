"""shardvol's HTTP/1.1 client (shardvol/kvstore/http_client.py) against a raw socket server
that answers the way real servers may: bodies framed by length, chunked or ended by a
close; heads and bodies split at every byte; HTTP/1.0; 1xx answers; redirects; and the
misbehaviours (garbage, huge heads, bodies cut short, stalls, idle connections closed).
The bytes served are random; each answer is checked against them, and the well-formed
ones against urllib reading the same URL."""

from __future__ import annotations

import asyncio
import hashlib
import socket
import socketserver
import struct
import threading
import time
import urllib.request

import numpy as np
import pytest

from shardvol.errors import StoreError
from shardvol.kvstore.arriving import Arriving
from shardvol.kvstore.http_client import (
    MAX_HEAD,
    HttpProtocolError,
    HttpStatusError,
    client,
)
from shardvol.kvstore.retry import transient


def _body(n: int) -> bytes:
    return np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8).tobytes()


# fixed answers, and whether the connection stays open after each
_CANNED = {
    "continue": (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n"
                 b"abc", True),
    "missing": (b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", True),
    "busy": (b"HTTP/1.1 503 Slow Down\r\nRetry-After: 2\r\nContent-Length: 4\r\n\r\nbusy", True),
    "badchunk": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nabcde\r\n"
                 b"0\r\n\r\n", False),
    # (chunked and a Content-Length: the chunks frame it, the connection is not reused)
    "both": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"
             b"5\r\nabcde\r\n0\r\n\r\n", True),
    "garbage": (b"HELLO THERE\r\n\r\n", False),
    "lf": (b"HTTP/1.1 200 OK\nContent-Length: 3\nX-Mixed: 1\r\n\nabc", True),
    "bighead": (b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * (MAX_HEAD + 10) + b"\r\n\r\n", False),
}


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def _send(self, data: bytes) -> None:
        if self.server.trickle:  # (in pieces of 1-700 bytes: heads split anywhere)
            rng = np.random.default_rng(len(data))
            i = 0
            while i < len(data):
                n = int(rng.integers(1, 700))
                self.request.sendall(data[i:i + n])
                i += n
                if rng.random() < 0.05:
                    time.sleep(0.001)
        else:
            self.request.sendall(data)

    def handle(self) -> None:
        self.server.connections += 1
        pending = b""
        while True:
            while b"\r\n\r\n" not in pending:
                got = self.request.recv(65536)
                if not got:
                    return
                pending += got
            head, pending = pending.split(b"\r\n\r\n", 1)
            lines = head.decode().split("\r\n")
            method, path, _ = lines[0].split(" ")
            self.server.seen.append((method, path, lines[1:]))
            self.pending = pending
            if not self.answer(method, path):
                return
            pending = self.pending

    def _receive(self, n: int) -> bytes:
        """The request's body of ``n`` bytes (in small reads with pauses, trickled)."""
        got, self.pending = self.pending[:n], self.pending[n:]
        rng = np.random.default_rng(n)
        while len(got) < n:
            piece = self.request.recv(min(n - len(got), int(rng.integers(1, 20_000))
                                          if self.server.trickle else 1 << 20))
            if not piece:
                break
            got += piece
            if self.server.trickle and rng.random() < 0.01:
                time.sleep(0.002)
        return got

    def _length(self) -> int:
        return int(next(h.split(":")[1] for h in self.server.seen[-1][2]
                        if h.lower().startswith("content-length:")))

    def answer(self, method: str, path: str) -> bool:
        """Send the answer to ``path``; whether the connection stays open."""
        kind, _, arg = path.lstrip("/").partition("/")
        if kind in _CANNED:
            answer, keep = _CANNED[kind]
            self._send(answer)
            return keep
        n = int(arg) if arg.isdigit() else 0
        body = _body(n)
        if kind == "len":
            head = f"HTTP/1.1 200 OK\r\nContent-Length: {n}\r\nETag: \"e{n}\"\r\n\r\n"
            self._send(head.encode() + (b"" if method == "HEAD" else body))
            return True
        if kind == "chunked":
            rng = np.random.default_rng(n + 1)
            out = [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"]
            i = 0
            while i < n:
                k = int(rng.integers(1, 5000))
                out.append(b"%x;ext=1\r\n" % len(body[i:i + k]) + body[i:i + k] + b"\r\n")
                i += k
            out.append(b"0\r\nX-Trailer: t\r\n\r\n")
            self._send(b"".join(out))
            return True
        if kind == "close":
            self._send(b"HTTP/1.0 200 OK\r\n\r\n" + body)
            return False
        if kind == "http10":
            self._send(f"HTTP/1.0 200 OK\r\nContent-Length: {n}\r\n\r\n".encode() + body)
            return False
        if kind == "redirect":
            target = "/len/5000" if n == 0 else f"/redirect/{n - 1}"
            self._send(f"HTTP/1.1 302 Found\r\nLocation: {target}\r\nContent-Length: 5\r\n"
                       "\r\nmoved".encode())
            return True
        if kind == "reset":  # (a body ended by the connection, cut by a reset)
            self._send(b"HTTP/1.0 200 OK\r\n\r\n" + body[: n // 2])
            self.request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                    struct.pack("ii", 1, 0))
            self.request.close()  # (a reset, no FIN before it)
            return False
        if kind == "auth":  # (says whether the request carried credentials)
            said = b"yes" if any(h.lower().startswith("authorization:")
                                 for h in self.server.seen[-1][2]) else b"no"
            self._send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(said), said))
            return True
        if kind == "away":  # (a redirect to ``arg``: a path, or a URL with its scheme)
            target = arg if "://" in arg else "/" + arg
            self._send(f"HTTP/1.1 307 Moved\r\nLocation: {target}\r\nContent-Length: 0\r\n"
                       "\r\n".encode())
            return True
        if kind == "short":
            head = f"HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n"
            self._send(head.encode() + body[: n // 2])
            return False
        if kind == "stall":
            self._send(f"HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n".encode()
                       + body[:100])
            time.sleep(0.6)
            return False
        if kind == "put":  # (takes the body; answers with its length and SHA-256)
            said = b"%d %s" % (self._length(), hashlib.sha256(self._receive(self._length()))
                                .hexdigest().encode())
            self._send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(said), said))
            return True
        if kind == "refuse":  # (answers before the body, which it never reads, and closes)
            self._send(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 6\r\nConnection: close"
                       b"\r\n\r\ndenied")
            self.request.shutdown(socket.SHUT_WR)
            time.sleep(0.2)  # (then drops the rest, as servers that linger do)
            return False
        if kind == "hold":  # (reads no byte of the body)
            time.sleep(1.0)
            return False
        if kind == "once":  # (answers, then closes the connection while it is idle)
            self._send(f"HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n".encode() + body)
            time.sleep(0.05)
            return False
        raise AssertionError(path)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, trickle: bool) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.trickle = trickle
        self.connections = 0
        self.seen: list[tuple[str, str, list[str]]] = []


@pytest.fixture(params=[False, True], ids=["whole", "trickled"])
def server(request):
    srv = _Server(request.param)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv, f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


async def _get(url: str, method: str = "GET", stall: float | None = 5.0
               ) -> tuple[int, dict[str, str], bytes]:
    async with client().request(method, url, {}, stall) as answer:
        body = bytes(await answer.read())
        return answer.status, answer.headers, body


def _run(coro):
    async def run():
        try:
            return await coro
        finally:
            client().close()  # (the pool ends with this test's loop)

    return asyncio.run(run())


@pytest.mark.parametrize("path,n", [("len", 0), ("len", 1), ("len", 70_000),
                                    ("len", 600_000), ("chunked", 0), ("chunked", 123_457),
                                    ("close", 0), ("close", 300_001), ("http10", 40_000)])
def test_bodies_however_framed_are_the_bytes_sent(server, path, n):
    _, base = server
    status, _, body = _run(_get(f"{base}/{path}/{n}"))
    assert status == 200 and body == _body(n)
    with urllib.request.urlopen(f"{base}/{path}/{n}") as r:
        assert r.read() == body  # (an independent client agrees)


def test_a_body_lands_in_the_given_buffer_and_a_connection_serves_many_requests(server):
    srv, base = server
    sizes = [0, 5, 300_000, 17, 2_000_000, 65_536]
    progress: dict[int, list[int]] = {n: [] for n in sizes}

    async def main():
        out = []
        for n in sizes:
            value = Arriving()
            async with client().request("GET", f"{base}/len/{n}", {}, 5.0) as answer:
                value.start(int(answer.headers["content-length"]), answer.headers["etag"])
                await answer.fill(value, lambda v=value, n=n: progress[n].append(v.have))
            out.append(value)
        return out

    values = _run(main())
    for n, value in zip(sizes, values):
        assert value.done and value.have == n and bytes(value.view()) == _body(n)
        seen = progress[n]  # (told as the bytes came in, never going back)
        assert seen[-1] == n and seen == sorted(seen)
    assert srv.connections == 1  # (one kept-alive connection for every request)


def test_answers_that_fill_the_scratch_buffer_before_they_are_read(server):
    """Whole answers already in the socket when the reader gets to them: the head and the
    first 256 KiB fill the buffer at once (reading pauses until the reader takes them)."""
    srv, base = server
    sizes = [3_000_000, 262_000]

    async def main():
        loop = asyncio.get_running_loop()
        out = []
        for n in sizes:
            loop.call_later(0.01, time.sleep, 0.2)  # (the loop busy while the answer comes)
            out.append(await _get(f"{base}/len/{n}"))
            loop.call_later(0.01, time.sleep, 0.2)
            async with client().request("GET", f"{base}/len/{n}", {}, 5.0) as answer:
                value = Arriving()
                value.start(n, None)
                await answer.fill(value, lambda: None)
                out.append((answer.status, answer.headers, bytes(value.view())))
        return out

    got = _run(main())
    for (status, _, body), n in zip(got, [n for n in sizes for _ in (0, 1)]):
        assert status == 200 and body == _body(n)
    assert srv.connections == 1


def test_a_head_request_has_no_body_and_keeps_the_connection(server):
    srv, base = server

    async def main():
        first = await _get(f"{base}/len/1000", "HEAD")
        second = await _get(f"{base}/len/1000")
        return first, second

    (status, headers, body), (_, _, body2) = _run(main())
    assert status == 200 and headers["content-length"] == "1000" and body == b""
    assert body2 == _body(1000) and srv.connections == 1


def test_informational_answers_are_skipped_and_redirects_followed(server):
    _, base = server
    assert _run(_get(f"{base}/continue"))[2] == b"abc"
    status, headers, body = _run(_get(f"{base}/lf"))  # (lines ended by a bare LF)
    assert status == 200 and headers["x-mixed"] == "1" and body == b"abc"
    status, _, body = _run(_get(f"{base}/redirect/3"))
    assert status == 200 and body == _body(5000)
    with pytest.raises(StoreError, match="redirects"):
        _run(_get(f"{base}/redirect/11"))


def test_statuses_are_given_to_the_caller_with_their_headers(server):
    _, base = server

    async def main():
        async with client().request("GET", f"{base}/busy", {}, 5.0) as answer:
            answer.raise_for_status()

    with pytest.raises(HttpStatusError) as e:
        _run(main())
    assert e.value.status == 503 and e.value.headers["retry-after"] == "2"
    assert _run(_get(f"{base}/missing/"))[0] == 404


@pytest.mark.parametrize("path,error,match", [
    ("short/100000", ConnectionResetError, "ended after"),
    ("stall/100000", TimeoutError, "no byte"),
    ("reset/100000", ConnectionResetError, "without its FIN"),
])
def test_connections_cut_or_stalled_are_errors_the_retries_take_again(server, path, error,
                                                                        match):
    _, base = server

    async def main():
        async with client().request("GET", f"{base}/{path}", {}, 0.3) as answer:
            if answer.length is None:
                return await answer.read()
            value = Arriving()
            value.start(answer.length, None)
            await answer.fill(value, lambda: None)

    with pytest.raises(error, match=match) as e:
        _run(main())
    assert transient(e.value)


@pytest.mark.parametrize("path,match", [
    ("garbage", "not an HTTP"),
    ("bighead", "head of over"),
    ("badchunk", "chunk size"),
])
def test_answers_that_are_not_http_fail_at_once(server, path, match):
    _, base = server
    with pytest.raises(HttpProtocolError, match=match) as e:
        _run(_get(f"{base}/{path}"))
    assert not transient(e.value) and isinstance(e.value, StoreError)


def test_framing_that_cannot_be_trusted_ends_the_connection(server):
    srv, base = server

    async def main():
        return await _get(f"{base}/both"), await _get(f"{base}/len/10")

    (_, _, a), (_, _, b) = _run(main())
    assert a == b"abcde" and b == _body(10)
    assert srv.connections == 2  # (the first answer's connection was not reused)


def test_an_error_answer_already_in_keeps_its_connection(server):
    srv, base = server

    async def main():
        for _ in range(3):
            with pytest.raises(HttpStatusError):
                async with client().request("GET", f"{base}/busy", {}, 5.0) as answer:
                    answer.raise_for_status()
        return await _get(f"{base}/len/10")

    assert _run(main())[2] == _body(10)
    if not srv.trickle:  # (a trickled body may not be in yet: its connection is closed)
        assert srv.connections == 1


def test_credentials_do_not_follow_a_redirect_to_another_origin(server):
    srv, base = server
    port = srv.server_address[1]
    auth = {"Authorization": "Bearer secret"}

    async def main():
        async def said(url):
            async with client().request("GET", url, auth, 5.0) as answer:
                return bytes(await answer.read())

        return (await said(f"{base}/away/auth"),
                await said(f"{base}/away/http://localhost:{port}/auth"))

    assert _run(main()) == (b"yes", b"no")


def test_a_pooled_connection_closed_by_the_server_is_replaced_unseen(server):
    srv, base = server

    async def main():
        first = await _get(f"{base}/once/10")
        await asyncio.sleep(0.2)  # (the server has closed the pooled connection)
        return first, await _get(f"{base}/len/20")

    (_, _, a), (_, _, b) = _run(main())
    assert a == _body(10) and b == _body(20) and srv.connections == 2


def test_headers_with_line_breaks_are_refused(server):
    _, base = server

    async def main():
        async with client().request("GET", f"{base}/len/1", {"X": "a\r\nHost: evil"}, 1.0):
            pass

    with pytest.raises(ValueError, match="line break"):
        _run(main())


def test_a_refused_connection_is_a_transient_error():
    with socket.socket() as s:  # (a port nobody listens on)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectionError) as e:
        _run(_get(f"http://127.0.0.1:{port}/len/1"))
    assert transient(e.value)


def _send(url: str, parts: list, stall: float | None = 5.0,
          method: str = "PUT") -> tuple[int, bytes]:
    async def main():
        async with client().request(method, url, {}, stall, body=parts) as answer:
            return answer.status, bytes(await answer.read())

    return _run(main())


@pytest.mark.parametrize("sizes", [[0], [1], [300_001], [5 << 20, 0, 123, 3 << 20]])
def test_request_bodies_arrive_whole_in_order_and_keep_the_connection(server, sizes):
    """Bodies in parts (bytes, memoryviews of other item sizes), taken by the server in
    small reads with pauses (trickled) or large ones."""
    srv, base = server
    rng = np.random.default_rng(sum(sizes))
    parts = [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in sizes]
    parts[-1:] = [memoryview(np.frombuffer(parts[-1], np.uint8)) if sizes[-1] % 4
                  else memoryview(np.frombuffer(parts[-1], np.uint32))]
    whole = b"".join(bytes(p) for p in parts)

    async def main():
        said = []
        for _ in range(2):
            async with client().request("PUT", f"{base}/put", {}, 5.0, body=parts) as answer:
                said.append(bytes(await answer.read()))
        return said

    expected = b"%d %s" % (len(whole), hashlib.sha256(whole).hexdigest().encode())
    assert _run(main()) == [expected, expected] and srv.connections == 1


def test_an_answer_before_the_whole_body_is_the_answer(server):
    """A server that refuses a request without reading its body: its answer, not a
    connection error."""
    _, base = server
    assert _send(f"{base}/refuse", [bytes(32 << 20)]) == (403, b"denied")


def test_a_server_that_takes_no_byte_of_a_body_times_out():
    srv = _Server(False)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        t0 = time.monotonic()
        with pytest.raises(TimeoutError) as e:
            _send(f"http://127.0.0.1:{srv.server_address[1]}/hold", [bytes(64 << 20)], 0.3)
        assert transient(e.value) and time.monotonic() - t0 < 0.9
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_request_with_a_body_is_not_redirected(server):
    _, base = server
    assert _send(f"{base}/redirect/0", [b"x" * 10])[0] == 302
