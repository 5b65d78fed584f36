"""Versioned ranged reads over HTTP(S), and the helpers they share with S3's (see
s3_conditional).

Each response's strong ``ETag`` is the value's version, and a read that must find a
version sends it as ``If-Match``: a server that replaced the file answers 412, which
the store turns into VersionChangedError (as on S3, see FsspecStore); so does an answer
at another ETag than the one asked for (a server that ignores ``If-Match``).  Weak ETags
(``W/"..."``) never match under ``If-Match``, so they count as no version at all; servers
that send no ETag read as before (unchecked).  GCS's versions are generations instead
(see :mod:`shardvol.kvstore.gcs_reads`).

A value sent with a ``Content-Encoding`` (CloudVolume stores chunk files compressed whole
that way in object stores: gzip, br, zstd, xz, bzip2) is decoded here, off the event loop
(:func:`entity`): a store's value is what was stored before that compression.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Protocol

from shardvol.compression import FILE_SUFFIXES, content_coding, decompress
from shardvol.errors import ByteRangeError, StoreError
from shardvol.kvstore.arriving import Arriving, fill
from shardvol.kvstore.http_client import HttpStatusError, client

if TYPE_CHECKING:
    import aiohttp

#: What a content-encoded value may decode to at most (a "bomb" beyond is an error).
MAX_DECODED = 1 << 30
#: The codings a whole read accepts (decoded by :func:`entity`, not by aiohttp).
ACCEPT_ENCODING = "gzip, br, zstd"


def strong_etag(value: str | None) -> str | None:
    """``value`` if it is a strong entity tag, else None (absent or weak)."""
    return value if value and not value.startswith("W/") else None


def range_header(byte_range: tuple[int, int | None]) -> str:
    """The ``Range`` header of ``(start, stop)``: stop exclusive or None; start < 0 a suffix."""
    start, stop = byte_range
    if start < 0:
        return f"bytes={start}"
    return f"bytes={start}-" + ("" if stop is None else str(stop - 1))


ReadResult = tuple[Any, "str | None"]  # (bytes or the exception, ETag or None)


async def entity(body: bytes | memoryview, encoding: str | None, what: str,
                 byte_range: tuple[int, int | None] | None = None
                 ) -> bytes | memoryview | StoreError:
    """The value a response carries: ``body``, decoded (in a worker thread) if it came with
    the ``Content-Encoding`` ``encoding``; a StoreError (to report, not to retry) if it
    cannot be: corrupt, an unknown coding, or a byte range of an encoded value."""
    coding = content_coding(encoding)
    if coding is None:
        return body
    if byte_range is not None:
        return StoreError(f"{what} is stored with Content-Encoding {coding}: a byte range of "
                          "it cannot be decoded")
    if coding not in FILE_SUFFIXES:
        return StoreError(f"{what} is stored with Content-Encoding {coding!r}, which shardvol "
                          f"cannot decode (it reads {', '.join(FILE_SUFFIXES)})")
    loop = asyncio.get_running_loop()
    try:
        return await loop.run_in_executor(
            None, lambda: decompress(body, coding, what, StoreError, max_size=MAX_DECODED))
    except StoreError as e:
        return e


class VersionedReads(Protocol):
    """Reads that return each response's version and may require one (S3's, GCS's,
    HTTP's: ETags, or generations on GCS)."""

    async def read_one(
        self, path: str, byte_range: tuple[int, int | None] | None, etag: str | None
    ) -> ReadResult:
        """``(bytes, or the exception: FileNotFoundError if absent, ByteRangeError; the
        response's version or None)`` of one GET of ``path`` (``byte_range`` of it), which
        must find the object at ``etag`` (a version) if given (else a 412 is raised);
        transient failures are raised, for the caller to retry."""
        ...

    async def read_into(self, path: str, value: Arriving, arrived: Callable[[], None]) -> None:
        """GET the whole of ``path`` into ``value`` (absent: ``missing``), calling
        ``arrived()`` as its bytes come in; an attempt after some came in asks for the
        rest of the same version (412 raised if it changed); transient failures are
        raised, for the caller to retry (and resume)."""
        ...


class HttpVersionedReads:
    """Ranged GETs over HTTP(S) that return each response's version, sent through a
    :class:`Transport`, which names each value's URL, signs requests if need be and says
    what a version is: plain HTTP(S) (:func:`http_reads`), S3
    (:mod:`shardvol.kvstore.s3_reads`) or GCS (:mod:`shardvol.kvstore.gcs_reads`)."""

    def __init__(self, transport: Transport, stall: float | None = None) -> None:
        """``stall``: seconds without a byte from the server before an attempt fails."""
        self.transport, self.stall = transport, stall

    def _request(self, method: str, url: str, headers: dict[str, str],
                 version: str | None = None) -> AbstractAsyncContextManager[Answer]:
        return self.transport.request(method, url, headers, self.stall, version)

    async def read_one(self, url: str, byte_range: tuple[int, int | None] | None,
                       etag: str | None) -> ReadResult:
        """See VersionedReads (``etag``: a version the transport gave; an answer at
        another version is a 412, as from a server that ignores the condition)."""
        headers = self.transport.headers()
        if byte_range is not None and byte_range[0] == byte_range[1]:  # no bytes: no Range
            headers["Accept-Encoding"] = "identity"  # the true length
            async with self._request("HEAD", url, headers, etag) as r:
                if r.status == 404:
                    return FileNotFoundError(url), None
                r.raise_for_status()
                size = r.headers.get("content-length")
                if size is not None and byte_range[0] > int(size):
                    return ByteRangeError(f"byte range {byte_range} of {url} is past its end"), None
                return b"", self._checked_version(url, r.headers, etag)
        if byte_range is not None:
            headers["Range"] = range_header(byte_range)
        headers.setdefault("Accept-Encoding",
                           ACCEPT_ENCODING if byte_range is None else "identity")
        async with self._request("GET", url, headers, etag) as r:
            if r.status == 404:
                return FileNotFoundError(url), None
            r.raise_for_status()  # 412 (replaced), 416 (past the end): the store maps them
            body = await r.read()
            etag = self._checked_version(url, r.headers, etag)
            encoding = r.headers.get("content-encoding")
            if byte_range is None or content_coding(encoding) is not None:
                return await entity(body, encoding, url, byte_range), etag
            content_range = r.headers.get("content-range")
            return requested_bytes(r.status, content_range, body, byte_range, url), etag

    def _checked_version(self, url: str, headers: Mapping[str, str],
                         wanted: str | None) -> str | None:
        """The version an answer carries; 412 if it is not the one asked for (a server
        that ignored the condition)."""
        version = self.transport.version(headers)
        if wanted is not None and version is not None and version != wanted:
            raise HttpStatusError(url, 412, f"is at version {version}, not {wanted}")
        return version

    async def read_into(self, url: str, value: Arriving, arrived: Callable[[], None]) -> None:
        """GET the whole of ``url`` into ``value``, calling ``arrived()`` as its bytes come
        in.  Once a first answer has given the value's size and version, every later
        attempt requires that version (a 412 is raised if it changed, also when the server
        ignores the condition but answers with another version or size) and, after some
        bytes came in, asks only for the rest (``Range``).  Values sent without a version
        or a Content-Length, or content-encoded, are taken whole (such an attempt starts
        from scratch); transient failures are raised."""
        headers = self.transport.headers()
        started, resume = value.size is not None, value.have
        if resume:
            headers["Range"] = f"bytes={resume}-"
        headers.setdefault("Accept-Encoding", "identity" if resume else ACCEPT_ENCODING)
        async with self._request("GET", url, headers,
                                 str(value.version) if started else None) as r:
            if r.status == 404:
                value.complete(None, None)
                return
            r.raise_for_status()  # 412: replaced since the first attempt
            etag = self.transport.version(r.headers)
            length = (None if "transfer-encoding" in r.headers  # (framed otherwise)
                      else r.headers.get("content-length"))
            encoding = r.headers.get("content-encoding")
            identity = content_coding(encoding) is None
            skip = 0
            if started and (etag != value.version or not identity or (
                    r.status == 200 and length != str(value.size))):
                raise HttpStatusError(url, 412, "changed between two attempts of its read")
            if not started:
                if etag is None or length is None or not identity:
                    decoded = await entity(await r.read(), encoding, url)
                    if isinstance(decoded, StoreError):
                        raise decoded
                    value.complete(decoded, etag)
                    return
                value.start(int(length), etag)
            elif r.status == 200:  # (a server that ignores Range: the rest is after skip)
                skip = resume
            else:
                check_rest(url, r.status, r.headers.get("content-range"), resume, value.size)
            await r.fill(value, arrived, skip)


class Answer(Protocol):
    """A response whose head is in, as HttpVersionedReads reads it (header names in lower
    case)."""

    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    def raise_for_status(self) -> None: ...

    async def read(self) -> bytes | memoryview: ...

    async def fill(self, value: Arriving, arrived: Callable[[], None], skip: int) -> None:
        """The body after its first ``skip`` bytes into ``value`` (see arriving.fill)."""
        ...


class Transport(Protocol):
    """How HttpVersionedReads sends a request for the value at ``path``, and what a
    value's version is in its answers."""

    def headers(self) -> dict[str, str]:
        """The headers every request starts from (a read's own ones replace them, but
        for the Accept-Encoding of a GET)."""
        ...

    def request(self, method: str, path: str, headers: dict[str, str], stall: float | None,
                version: str | None) -> AbstractAsyncContextManager[Answer]:
        """The request, which must find the value at ``version`` (one :meth:`version`
        gave) if given: else 412."""
        ...

    def version(self, headers: Mapping[str, str]) -> str | None:
        """The version of the value an answer with these headers carries, if it says."""
        ...


#: fsspec HTTPFileSystem options that change neither requests nor answers
_NEUTRAL = frozenset({"simple_links", "block_size", "same_scheme", "size_policy", "cache_type",
                      "cache_options", "skip_instance_cache", "use_listings_cache",
                      "listings_expiry_time", "max_paths"})


def http_plain(options: Mapping[str, Any]) -> bool:
    """Whether reads of an fsspec HTTP(S) filesystem with these options can go through
    shardvol's client, which follows ``headers`` and ``encoded`` (not ``client_kwargs``,
    ``get_client``, a loop, or other request options)."""
    given = {k for k, v in options.items() if k != "client_kwargs" or v}
    return given <= _NEUTRAL | {"headers", "encoded"}


def http_reads(options: Mapping[str, Any], fs: Callable[[], Any],
               stall: float | None) -> HttpVersionedReads:
    """The versioned reads of an fsspec HTTP(S) filesystem with ``options``: through
    shardvol's client (:mod:`shardvol.kvstore.http_client`: bodies received straight into
    their buffers) if :func:`http_plain`, else through the aiohttp session of the
    filesystem ``fs()`` gives."""
    if http_plain(options):
        transport: Transport = _Direct(options.get("headers") or {},
                                       bool(options.get("encoded", False)))
    else:
        transport = _Aiohttp(fs())
    return HttpVersionedReads(transport, stall)


async def error_body(r: Any, limit: int = 64 << 10) -> bytes:
    """The body of an error answer, if it says its length and that is at most ``limit``
    bytes (for the code and message in it); else nothing."""
    return bytes(await r.read()) if r.length is not None and 0 < r.length <= limit else b""


def etag_condition(headers: dict[str, str], version: str | None) -> dict[str, str]:
    """``headers`` that require the value's strong ETag ``version`` (``If-Match``)."""
    return headers if version is None else {**headers, "If-Match": version}


def etag_version(headers: Mapping[str, str]) -> str | None:
    """The version of a value sent with ``headers``: its strong ETag (weak ones never
    match under ``If-Match``)."""
    return strong_etag(headers.get("etag"))


class _Direct:
    """shardvol's client (bodies straight into their buffers), for an HTTP(S) filesystem's
    ``headers`` and URLs quoted as it quotes them (``encoded``: as they are); versions are
    strong ETags."""

    version = staticmethod(etag_version)

    def __init__(self, headers: Mapping[str, str], encoded: bool) -> None:
        import yarl  # (quoting as fsspec's HTTPFileSystem.encode_url; ImportError without)

        self._headers, self._encoded, self._url = dict(headers), encoded, yarl.URL

    def headers(self) -> dict[str, str]:
        return dict(self._headers)

    def url(self, path: str) -> str:
        return str(self._url(path, encoded=self._encoded))

    def request(self, method: str, path: str, headers: dict[str, str], stall: float | None,
                version: str | None) -> AbstractAsyncContextManager[Answer]:
        return client().request(method, self.url(path), etag_condition(headers, version),
                                stall)


class _Aiohttp:
    """fsspec's aiohttp session (for options shardvol's client does not speak)."""

    version = staticmethod(etag_version)

    def __init__(self, fs: Any) -> None:
        self.fs = fs

    def headers(self) -> dict[str, str]:
        return dict(self.fs.kwargs.get("headers") or {})

    @contextlib.asynccontextmanager
    async def request(self, method: str, path: str, headers: dict[str, str],
                      stall: float | None, version: str | None) -> AsyncIterator[Answer]:
        import aiohttp

        session = await self.fs.set_session()
        headers = etag_condition(headers, version)
        kwargs = {k: v for k, v in self.fs.kwargs.items() if k != "headers"}
        kwargs.setdefault("timeout", aiohttp.ClientTimeout(total=None, sock_connect=stall,
                                                           sock_read=stall))
        url = str(self.fs.encode_url(path))
        async with session.request(method, url, headers=headers, auto_decompress=False,
                                   **kwargs) as r:
            yield _AiohttpAnswer(r, url)


class _AiohttpAnswer:
    def __init__(self, r: aiohttp.ClientResponse, url: str) -> None:
        self._r, self.url, self.status, self.headers = r, url, r.status, r.headers

    def raise_for_status(self) -> None:
        if self.status >= 400:
            raise HttpStatusError(self.url, self.status, self._r.reason or "", self.headers)

    async def read(self) -> bytes:
        return await self._r.read()

    async def fill(self, value: Arriving, arrived: Callable[[], None], skip: int) -> None:
        await fill(value, self._r.content.iter_any(), arrived, self.url, skip)


def check_rest(url: str, status: int, content_range: str | None, start: int,
                size: int | None) -> None:
    """A resumed read's answer must hold the value from ``start`` to its end (``size``)."""
    m = _CONTENT_RANGE.fullmatch((content_range or "").strip())
    if status != 206 or m is None or (int(m[1]), int(m[2]) + 1) != (start, size) or (
            m[3] != "*" and int(m[3]) != size):
        raise StoreError(f"{url}: asked for bytes {start}- of {size}, the answer was "
                         f"{status} with Content-Range {content_range!r}")


_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


def requested_bytes(
    status: int,
    content_range: str | None,
    body: bytes | memoryview,
    byte_range: tuple[int, int | None],
    url: str,
) -> bytes | memoryview | Exception:
    """The bytes ``byte_range`` asked for, out of a response: a 206's body holds what its
    ``Content-Range`` says (which may be more than was asked), any other status the whole
    value (a server that ignores Range). ByteRangeError if the value ends first."""
    first = 0
    total: int | None = len(body)
    start, stop = byte_range
    if status == 206:
        m = _CONTENT_RANGE.fullmatch((content_range or "").strip())
        if m is None or int(m[2]) - int(m[1]) + 1 != len(body):
            if m is not None and m[3] != "*" and (
                    -start > int(m[3]) if start < 0 else max(start, stop or 0) > int(m[3])):
                # (a range past the end answered 206 with no bytes, as GCS's emulator does)
                return ByteRangeError(f"byte range [{start}, {stop}) of {url} is past its "
                                      f"end ({m[3]} bytes)")
            return StoreError(
                f"{url}: partial content with Content-Range {content_range!r} for {len(body)} bytes"
            )
        first, total = int(m[1]), None if m[3] == "*" else int(m[3])
    end = first + len(body)  # of what the body holds
    if start < 0:
        if total is None or -start > total:
            return ByteRangeError(f"the last {-start} bytes of {url} (it has {total})")
        start, stop = total + start, total
    elif stop is None:
        stop = end if total is None else total
    if start > stop or (stop > end and (total is None or stop > total)):
        return ByteRangeError(f"byte range [{start}, {stop}) of {url} is past its end")
    if start < first or stop > end:
        return StoreError(f"{url}: response holds bytes [{first}, {end}), not [{start}, {stop})")
    part = body[start - first : stop - first]
    # (part of a body received into its own buffer: copied, else the view keeps all of it)
    return part if isinstance(part, bytes) or len(part) == len(body) else bytes(part)
