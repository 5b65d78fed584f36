"""An HTTP/1.1 client for GETs whose bodies land straight in the reader's buffer, and for
the PUTs of object stores.

aiohttp hands a body over as the pieces it received, each a fresh bytes object that the
reader then copies into place: two copies of every byte and an allocation per piece.
Here the socket is read with ``recv_into`` (an asyncio BufferedProtocol) directly into
the buffer the value will live in (a shard read whole, a chunk's bytes), so the kernel's
copy is the only one.  On a 2-core machine this roughly halves the CPU time of receiving a
shard.

What it speaks: any method over HTTP/1.1 or HTTP/1.0 (plain or TLS with the system's
certificates); request bodies of a known length, in parts (not joined first), sent as
the server takes them; answers framed by ``Content-Length``, by chunked transfer coding or
by the end of the connection; redirects of requests without a body (up to 10); keep-alive
connections pooled per host and event loop.  What it does not: proxies, cookies, client
certificates, HTTP/2; stores configured with any of those keep fsspec's aiohttp session
(see :mod:`shardvol.kvstore.versioned_reads`).  Bodies are not content-decoded.

Failures the retry policy knows as transient (see :mod:`shardvol.kvstore.retry`):
``ConnectionError`` for a connection refused, unreachable, or closed before the answer or
the body's end; ``TimeoutError`` for ``stall`` seconds without a byte received, or without
one of the request's body taken by the server.  An answer that is
not HTTP/1 is an :class:`HttpProtocolError` (a StoreError: not retried).  A status that the
caller does not want is its :class:`HttpStatusError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import ssl
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from urllib.parse import urljoin, urlsplit

from shardvol._ext import hugeblock
from shardvol.errors import StoreError
from shardvol.kvstore.arriving import Arriving

#: Bytes of a response's status line and headers at most.
MAX_HEAD = 64 << 10
#: Idle connections kept per host.
MAX_IDLE = 64
_SCRATCH = 256 << 10  # the buffer of heads and of bodies not given a buffer of their own
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,15}")
# the blank line that ends a head (RFC 9112 2.2: a bare LF may end a line too)
_HEAD_END = re.compile(rb"\r?\n\r?\n")
#: Request headers not sent on to another origin by a redirect.
_CREDENTIALS = frozenset({"authorization", "cookie", "proxy-authorization"})
_MAX_REDIRECTS = 10
#: Bytes of a request's body handed to the transport at a time (it copies what the socket
#: does not take at once, and says when to wait)
_SEND_PIECE = 256 << 10


class HttpStatusError(Exception):
    """An answer with a status the caller did not ask for (``status``, and the answer's
    ``headers``: a ``Retry-After`` among them is honoured)."""

    def __init__(self, url: str, status: int, reason: str = "",
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(f"{url}: HTTP {status} {reason}".rstrip())
        self.status, self.headers = status, dict(headers or {})


class HttpProtocolError(StoreError):
    """The server's answer is not well-formed HTTP/1.1."""


class Answer:
    """A response whose head has been read: ``status``, ``headers`` (lower-case names),
    and its body, to be taken once with :meth:`read` or :meth:`read_into`."""

    def __init__(self, conn: _Connection, url: str, method: str, version: str, status: int,
                 reason: str, headers: dict[str, str]) -> None:
        self._conn, self.url, self.status, self.reason = conn, url, status, reason
        self.headers = headers
        self._length: int | None = None  # body bytes still to come, if framed by length
        self._chunked = False
        connection = _tokens(headers, "connection")
        self.reusable = ("close" not in connection if version == "HTTP/1.1"
                         else "keep-alive" in connection)
        coding = [t.strip().lower() for t in headers.get("transfer-encoding", "").split(",")]
        if "transfer-encoding" in headers and ("content-length" in headers
                                               or version == "HTTP/1.0"):
            self.reusable = False  # (RFC 9112 6.3: framing not to be trusted after it)
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            self._length = 0
            self.reusable = self.reusable and status != 101
        elif "transfer-encoding" in headers:
            self._chunked = coding[-1] == "chunked"  # (else the body ends with the connection)
            self.reusable = self.reusable and self._chunked
        elif "content-length" in headers:
            text = headers["content-length"].strip()
            if not (text.isascii() and text.isdigit()):
                raise HttpProtocolError(f"{url}: Content-Length {text!r}")
            self._length = int(text)
        else:  # (the body ends with the connection)
            self.reusable = False
        self.complete = self._length == 0

    @property
    def length(self) -> int | None:
        """The body's bytes, when its head says (not chunked, not ended by a close)."""
        return self._length

    def raise_for_status(self) -> None:
        if self.status >= 400:
            raise HttpStatusError(self.url, self.status, self.reason, self.headers)

    async def read(self) -> bytes | memoryview:
        """The whole body."""
        conn = self._conn
        if self._chunked:
            body = bytearray()
            while True:
                line = await conn.read_line(self.url)
                size_text = line.split(b";", 1)[0].strip()
                if not _CHUNK_SIZE.fullmatch(size_text):
                    raise HttpProtocolError(f"{self.url}: chunk size {line[:40]!r}")
                size = int(size_text, 16)
                if size == 0:
                    while await conn.read_line(self.url):  # (trailers, to the empty line)
                        pass
                    break
                while size:  # (in pieces: the size is the server's word)
                    piece = min(size, _SCRATCH)
                    body += await conn.read_exact(piece, self.url)
                    size -= piece
                if await conn.read_line(self.url):
                    raise HttpProtocolError(f"{self.url}: no line end after a chunk")
            result: bytes | memoryview = bytes(body)
        elif self._length is None:
            result = bytes(await conn.read_to_end(self.url))
        elif self._length < hugeblock.MIN_BYTES and self._length <= _SCRATCH:
            result = await conn.read_bytes(self._length, self.url)
        else:  # (a block: its pages are reused, not faulted in anew for each body)
            result = hugeblock.buffer(self._length).data
            await self.read_into(result)
        self.complete = True
        return result

    async def read_into(self, into: memoryview, arrived: Callable[[int], None] | None = None,
                        skip: int = 0) -> None:
        """The body, after its first ``skip`` bytes, straight into ``into``, which it must
        fill exactly (a body framed by its length only); ``arrived(n)`` is called after
        more came in, with the bytes of ``into`` filled so far."""
        if self._length is None:
            raise HttpProtocolError(f"{self.url}: a body without Content-Length")
        if self._length != skip + len(into):
            raise HttpProtocolError(f"{self.url}: a body of {self._length} bytes where "
                                    f"{skip + len(into)} are expected")
        if skip:
            await self._conn.read_exact(skip, self.url, keep=False)
        await self._conn.read_into(into, self.url, arrived)
        self.complete = True

    async def fill(self, value: Arriving, arrived: Callable[[], None], skip: int = 0) -> None:
        """The body after its first ``skip`` bytes into the rest of ``value`` (which it
        must fill exactly), calling ``arrived()`` as its bytes come in."""
        base = value.have

        def progress(n: int) -> None:
            value.have = base + n
            arrived()

        await self.read_into(value.rest(), progress, skip)
        value.done = True
        arrived()


def _tokens(headers: Mapping[str, str], name: str) -> set[str]:
    return {t.strip().lower() for t in headers.get(name, "").split(",")}


#: what a pooled connection is for: (scheme, host, port, the CA bundle that verified it)
_Key = tuple[str, str, int, "str | None"]


class _Connection(asyncio.BufferedProtocol):
    """One connection: bytes received go to ``_sink`` if a body is being read into one,
    else to the scratch buffer (``[_start, _end)`` not taken yet)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, key: _Key,
                 stall: float | None) -> None:
        self.loop, self.key, self.stall = loop, key, stall
        self.transport: asyncio.Transport | None = None
        self._scratch = bytearray(_SCRATCH)
        self._view = memoryview(self._scratch)
        self._start = self._end = 0
        self._sink: memoryview | None = None
        self._sunk = 0
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False
        self._drained: asyncio.Future[None] | None = None  # (while writing is paused)
        self.lost: BaseException | None = None  # (set once the connection is gone)
        self.eof = False
        self.received = 0  # bytes received since the last request was sent

    # -- the protocol's side, on the event loop ----------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = exc or ConnectionResetError("the connection was closed")
        self._wake()
        self.resume_writing()

    def pause_writing(self) -> None:
        if self._drained is None:
            self._drained = self.loop.create_future()

    def resume_writing(self) -> None:
        if self._drained is not None:
            if not self._drained.done():
                self._drained.set_result(None)
            self._drained = None

    def buffered(self) -> int:
        """Bytes received and not taken yet."""
        return self._end - self._start

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False  # (the transport closes itself)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._sink is not None:
            return self._sink[self._sunk:]
        if self._end == len(self._scratch):
            self._compact()
        return self._view[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        self.received += nbytes
        if self._sink is not None:
            self._sunk += nbytes
            if self._sunk == len(self._sink):
                self._sink = None
        else:
            self._end += nbytes
            if self._end == len(self._scratch) and self._start == 0 and self.transport:
                self.transport.pause_reading()  # (until the reader takes some)
                self._paused = True
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _compact(self) -> None:
        n = self._end - self._start
        self._view[:n] = self._view[self._start:self._end]
        self._start, self._end = 0, n
        if self._paused and self._end < len(self._scratch) and self.transport:
            self._paused = False
            self.transport.resume_reading()

    # -- the reader's side --------------------------------------------------------------
    async def _more(self, url: str, at_end: bool = False) -> None:
        """Wait for more bytes (or, ``at_end``, for the connection's end);
        ConnectionResetError if none will come, TimeoutError after ``stall`` seconds without
        one."""
        if not at_end and (self.lost is not None or self.eof):
            raise ConnectionResetError(f"{url}: the server closed the connection early")
        if self._paused:  # (the scratch buffer was full: make room, receive again)
            self._compact()
        self._waiter = waiter = self.loop.create_future()
        timer = None
        if self.stall is not None:
            timer = self.loop.call_later(self.stall, _time_out, waiter, self.stall, url)
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    def _take(self, n: int) -> memoryview:
        """The next ``n`` bytes of the scratch buffer, as a view to copy at once (the
        buffer is compacted when more bytes are awaited)."""
        view = self._view[self._start:self._start + n]
        self._start += n
        return view

    async def read_head(self, url: str) -> tuple[str, int, str, dict[str, str]]:
        """``(version, status, reason, headers)`` of the next answer (interim 1xx answers
        skipped; 101 is final)."""
        while True:
            searched = 0
            while True:
                m = _HEAD_END.search(self._scratch, self._start + max(searched - 3, 0),
                                     self._end)
                searched = (self._end if m is None else m.end()) - self._start
                if searched > MAX_HEAD:
                    raise HttpProtocolError(f"{url}: an answer's head of over {MAX_HEAD} bytes")
                if m is not None:
                    break
                await self._more(url)
            head = bytes(self._take(m.end() - self._start))
            version, status, reason, headers = _parse_head(head, url)
            if not 100 <= status < 200 or status == 101:
                return version, status, reason, headers

    async def read_line(self, url: str) -> bytes:
        """The next line of the body (without its CRLF)."""
        while (at := self._scratch.find(b"\r\n", self._start, self._end)) < 0:
            if self._end - self._start > MAX_HEAD:
                raise HttpProtocolError(f"{url}: a line of over {MAX_HEAD} bytes")
            await self._more(url)
        line = bytes(self._take(at - self._start))
        self._start += 2
        return line

    async def read_bytes(self, n: int, url: str) -> bytes:
        """The next ``n`` bytes (at most the scratch buffer's size)."""
        while self._end - self._start < n:
            await self._more(url)
        return bytes(self._take(n))

    async def read_exact(self, n: int, url: str, keep: bool = True) -> bytearray:
        """The next ``n`` bytes (dropped if not ``keep``)."""
        out = bytearray(n if keep else 0)
        got = 0
        while got < n:
            if self._end == self._start:
                self._start = self._end = 0
                await self._more(url)
                continue
            step = min(n - got, self._end - self._start)
            piece = self._take(step)
            if keep:
                out[got:got + step] = piece
            got += step
        return out

    async def read_to_end(self, url: str) -> bytearray:
        """Every byte until the server ends the connection (an end other than its FIN, a
        reset, is a ConnectionResetError: the body may be cut short)."""
        out = bytearray()
        while True:
            out += self._take(self._end - self._start)
            self._start = self._end = 0
            if self.eof:
                return out
            if self.lost is not None:
                raise ConnectionResetError(f"{url}: the connection ended without its FIN "
                                           f"after {len(out)} bytes of the body")
            await self._more(url, at_end=True)

    async def read_into(self, into: memoryview, url: str,
                        arrived: Callable[[int], None] | None) -> None:
        """Fill ``into`` with the next ``len(into)`` bytes: those in the scratch buffer
        first, the rest received straight into it."""
        have = min(len(into), self._end - self._start)
        into[:have] = self._take(have)
        rest = len(into) - have
        if rest:
            self._start = self._end = 0
            self._sink, self._sunk = into[have:], 0
            if self._paused and self.transport:
                self._paused = False
                self.transport.resume_reading()
        try:
            while self._sunk < rest:
                if self.lost is not None or self.eof:
                    raise ConnectionResetError(f"{url}: the body ended after "
                                               f"{have + self._sunk} of {len(into)} bytes")
                await self._more(url)
                if arrived is not None:
                    arrived(have + self._sunk)
        finally:
            self._sink, self._sunk = None, 0
        if arrived is not None and not rest:
            arrived(have)

    def send(self, request: bytes) -> None:
        assert self.transport is not None
        self.received = 0
        self.transport.write(request)

    async def send_body(self, parts: Sequence[bytes | memoryview], url: str) -> bool:
        """Write a request's body as the server takes it: a piece at a time, waiting
        while the transport's buffer is full (TimeoutError after ``stall`` seconds in
        which the server took nothing).  Stops early once the server has answered or
        closed the connection (an error it sends before the whole body); whether the
        whole body was sent."""
        assert self.transport is not None
        for part in parts:
            view = memoryview(part).cast("B")
            for at in range(0, len(view), _SEND_PIECE):
                if self.lost is not None or self.eof or self._end > self._start:
                    return False
                self.transport.write(view[at:at + _SEND_PIECE])
                drained = self._drained
                if drained is not None:
                    timer = None
                    if self.stall is not None:
                        timer = self.loop.call_later(self.stall, _time_out, drained,
                                                     self.stall, url)
                    try:
                        await drained
                    finally:
                        if timer is not None:
                            timer.cancel()
        return True

    def close(self) -> None:
        self._sink = None
        if self.transport is not None:
            self.transport.abort()

    @property
    def idle_ok(self) -> bool:
        """Whether the connection can take another request."""
        return (self.lost is None and not self.eof and self._start == self._end
                and self.transport is not None and not self.transport.is_closing())


def _time_out(waiter: asyncio.Future[None], stall: float, url: str) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError(f"{url}: no byte from the server for {stall} s"))


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme.lower(), (parts.hostname or "").lower(), parts.port


def _parse_head(head: bytes, url: str) -> tuple[str, int, str, dict[str, str]]:
    try:
        lines = [line.removesuffix("\r") for line in
                 head.decode("latin-1").rstrip("\r\n").split("\n")]
        version, status_text, *reason = lines[0].split(" ", 2)
        status = int(status_text)
    except (ValueError, IndexError):
        raise HttpProtocolError(f"{url}: not an HTTP answer: {head[:60]!r}") from None
    if version not in ("HTTP/1.1", "HTTP/1.0") or not 100 <= status <= 999:
        raise HttpProtocolError(f"{url}: not an HTTP/1 answer: {lines[0][:60]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise HttpProtocolError(f"{url}: a header line {line[:60]!r}")
        name, value = name.lower(), value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return version, status, reason[0] if reason else "", headers


class Client:
    """Pooled connections of one event loop, by (scheme, host, port, CA bundle)."""

    def __init__(self) -> None:
        self._idle: dict[_Key, list[_Connection]] = {}
        self._ssl: dict[str | None, ssl.SSLContext] = {}

    async def _connect(self, key: _Key, stall: float | None) -> _Connection:
        loop = asyncio.get_running_loop()
        scheme, host, port, cafile = key
        tls = None
        if scheme == "https":
            tls = self._ssl.get(cafile)
            if tls is None:
                try:
                    tls = self._ssl[cafile] = ssl.create_default_context(cafile=cafile)
                except (OSError, ssl.SSLError) as e:
                    raise StoreError(f"cannot load the CA bundle {cafile}: {e}") from e
        connecting = loop.create_connection(lambda: _Connection(loop, key, stall), host, port,
                                            ssl=tls)
        try:
            _, conn = await (connecting if stall is None
                             else asyncio.wait_for(connecting, stall))
        except asyncio.TimeoutError:
            raise TimeoutError(f"{scheme}://{host}:{port}: no connection in {stall} s") from None
        except (ssl.SSLError, socket.gaierror, ConnectionError):
            raise  # (the retry policy knows these)
        except OSError as e:  # (unreachable, every address refused, no local port, ...)
            raise ConnectionError(f"{scheme}://{host}:{port}: cannot connect: {e}") from e
        return conn

    @contextlib.asynccontextmanager
    async def request(self, method: str, url: str, headers: Mapping[str, str],
                      stall: float | None, cafile: str | None = None,
                      body: Sequence[bytes | memoryview] | None = None
                      ) -> AsyncIterator[Answer]:
        """The answer to ``method url`` once its head is in (redirects followed, for a
        request without a ``body``: its parts, sent in turn with their total length); its
        connection goes back to the pool if its body was read whole.  ``cafile``: the
        certificates that verify https servers (default: the system's)."""
        for _ in range(_MAX_REDIRECTS + 1):
            conn, answer = await self._exchange(method, url, headers, stall, cafile, body)
            if (answer.status in _REDIRECTS and "location" in answer.headers
                    and body is None):
                await self._finish(conn, answer, drain=True)
                target = urljoin(url, answer.headers["location"])
                here, there = _origin(url), _origin(target)
                if there != here:  # (credentials stay with their origin)
                    if here[0] == "https" and there[0] != "https":
                        raise StoreError(f"{url}: redirected to {target}, not over https")
                    headers = {k: v for k, v in headers.items()
                               if k.lower() not in _CREDENTIALS}
                url = target
                continue
            try:
                yield answer
            finally:
                await self._finish(conn, answer, drain=False)
            return
        raise StoreError(f"{url}: more than {_MAX_REDIRECTS} redirects")

    async def _exchange(self, method: str, url: str, headers: Mapping[str, str],
                        stall: float | None, cafile: str | None,
                        body: Sequence[bytes | memoryview] | None
                        ) -> tuple[_Connection, Answer]:
        parts = urlsplit(url)
        scheme, host = parts.scheme.lower(), parts.hostname or ""
        if scheme not in ("http", "https") or not host:
            raise StoreError(f"{url}: not an http(s) URL")
        port = parts.port or (443 if scheme == "https" else 80)
        authority = f"[{host}]" if ":" in host else host
        if parts.port is not None:
            authority += f":{port}"
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        fields = {"Host": authority, "Accept": "*/*", **headers}
        if body is not None:
            fields["Content-Length"] = str(sum(memoryview(p).nbytes for p in body))
        for name, value in fields.items():
            if any(c in f"{name}{value}" for c in "\r\n\0"):
                raise ValueError(f"{url}: header {name!r} holds a line break or NUL")
        request = (f"{method} {target} HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in fields.items()) + "\r\n").encode("latin-1")
        key = (scheme, host, port, cafile)
        idle = self._idle.get(key, [])
        while True:
            reused = bool(idle)
            conn = idle.pop() if reused else await self._connect(key, stall)
            if reused and not conn.idle_ok:
                conn.close()
                continue
            conn.stall = stall
            try:
                conn.send(request)
                sent = body is None or await conn.send_body(body, url)
                version, status, reason, fields_in = await conn.read_head(url)
                answer = Answer(conn, url, method, version, status, reason, fields_in)
                answer.reusable = answer.reusable and sent  # (the server's next read: ours)
                return conn, answer
            except ConnectionResetError:
                conn.close()
                if reused and conn.received == 0:  # (closed by the server while idle)
                    continue
                raise
            except BaseException:
                conn.close()
                raise

    async def _finish(self, conn: _Connection, answer: Answer, drain: bool) -> None:
        """Pool the connection if its answer was read whole (``drain``: read it now; a
        short body already received, as of an error status, is dropped)."""
        length = answer.length
        if not answer.complete and length is not None and (
                conn.buffered() >= length or (drain and length <= _SCRATCH)):
            try:
                await conn.read_exact(length, answer.url, keep=False)
                answer.complete = True
            except BaseException:
                conn.close()
                raise
        if answer.complete and answer.reusable and conn.idle_ok:
            idle = self._idle.setdefault(conn.key, [])
            if len(idle) < MAX_IDLE:
                idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Close the pooled connections."""
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()


_clients: dict[int, tuple[asyncio.AbstractEventLoop, Client]] = {}
_inherited: list[object] = []  # (a forked child's copies of its parent's connections)


def client() -> Client:
    """The running event loop's client (connections belong to one loop)."""
    loop = asyncio.get_running_loop()
    entry = _clients.get(id(loop))
    if entry is None or entry[0] is not loop:
        entry = _clients[id(loop)] = (loop, Client())
    return entry[1]


def _after_fork_in_child() -> None:
    # (the parent's loops do not run here: their connections are kept, never used, rather
    # than collected with warnings; the child's loops get clients of their own)
    _inherited.append(dict(_clients))
    _clients.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
