"""Remote stores through fsspec: ``http(s)://`` (read-only), ``gs://``, ``s3://`` and others.

Ranged reads become HTTP ``Range`` requests (or the object store's equivalent);
``get_many`` issues them concurrently through fsspec's async machinery.
Object stores replace whole objects on write, which is atomic per key.
On S3 and GCS, writes can be conditional (``set_if``, ``delete_if``: ``If-Match`` /
``If-None-Match``; GCS's ``ifGenerationMatch``), so read-modify-write cycles are
compare-and-swaps that need no lock (see :mod:`shardvol.kvstore.cas`); ``lock(key)`` also
holds across processes and machines there (a lease object per key, see
:mod:`shardvol.kvstore.lease`).  On other protocols (and gs stores whose requests keep
gcsfs's, see :mod:`shardvol.kvstore.gcs_reads`) it orders writers inside this process only
(see KVStore.lock).  On S3, GCS and HTTP(S), reads
are versioned (get_many_versioned, get_many_if): each response's ETag (on GCS, its
generation) is the value's version, and reads that must find a version ask for it
(``If-Match``, ``ifGenerationMatch``), so no separate metadata requests are needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import queue
from collections.abc import Awaitable, Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar, cast

import fsspec
import fsspec.asyn

from shardvol.errors import (
    ByteRangeError,
    StoreError,
    UnsupportedSchemeError,
    VersionChangedError,
)
from shardvol.kvstore.arriving import Arriving
from shardvol.kvstore.base import (
    DEFAULT_WINDOW,
    HIDDEN_PREFIX,
    ByteRange,
    KVStore,
    Request,
    check_key,
    check_prefix,
    normalize_request,
    process_lock,
    url_scheme,
)
from shardvol.kvstore.conditional import ConditionalCalls
from shardvol.kvstore.gcs_reads import GcsfsAuth, GcsTransport, GoogleAuth, without_gcsfs
from shardvol.kvstore.gcs_reads import plain as gcs_plain
from shardvol.kvstore.gcs_writes import GcsDirectObjects
from shardvol.kvstore.lease import (
    ConditionalObjects,
    Lease,
    acquire,
    default_lease_ttl,
    lease_path,
)
from shardvol.kvstore.limits import io_concurrency as io_concurrency_limit
from shardvol.kvstore.remote import Requests, exiting, run_on, start_on
from shardvol.kvstore.retry import RetryPolicy, retry_sync, status_of
from shardvol.kvstore.s3_conditional import S3ConditionalObjects
from shardvol.kvstore.s3_multipart import BotocoreParts, PartCalls, check_part_size, upload
from shardvol.kvstore.s3_reads import S3Reads, ToBotocore
from shardvol.kvstore.s3_reads import plain as s3_plain
from shardvol.kvstore.s3_writes import S3DirectObjects
from shardvol.kvstore.versioned_reads import (
    HttpVersionedReads,
    VersionedReads,
    http_plain,
    http_reads,
    strong_etag,
)

T = TypeVar("T")
READ_ONLY_PROTOCOLS = {"http", "https"}
_DELETE_BATCH = 1024  # keys whose deletes are on the I/O loop at once (see delete_many)
# what changes when an object is rewritten, by backend (s3fs, gcsfs, HTTP, others)
_VERSION_FIELDS = ("ETag", "generation", "etag", "mtime", "LastModified", "last_modified")
S3_PROTOCOLS = {"s3", "s3a"}
GCS_PROTOCOLS = {"gs", "gcs"}  # (see shardvol.kvstore.gcs_filesystem)
_MAX_PUT = 5 << 30  # bytes of one S3 PUT at most (conditional replacements are one PUT)


class _Shared:
    """A GET in flight, how many reads wait for its answer, and, for a value streamed in
    (see iter_get_arriving), the value and the reads to tell as its bytes arrive."""

    __slots__ = ("listeners", "task", "value", "waiting")

    def __init__(self, value: Arriving | None = None) -> None:
        self.task: asyncio.Future | None = None
        self.waiting = 0
        self.value = value
        self.listeners: list[Callable[[], None]] = []

    def arrived(self) -> None:
        for listener in list(self.listeners):
            listener()


# what names a GET in flight: (path, range, ETag required, whether streamed)
_Flight = tuple[str, "ByteRange | None", "str | None", bool]


class FsspecStore(KVStore):
    """Values as objects below an fsspec URL.

    ``lease_ttl`` and ``lock_timeout`` (seconds; None waits for ever) set the cross-process
    locks of S3 and GCS stores: a crashed holder's lock is taken over after ``lease_ttl``
    (default 30 s, or ``SHARDVOL_LEASE_TTL``).
    ``lock_timeout`` also bounds how long a compare-and-swap update (S3 and GCS, with
    versioned reads: ``conditional_writes``) is redone while other writers keep changing
    its value.
    ``check_versions``: :meth:`version` asks the store for each object's ETag (or
    generation) with a metadata request, so shard readers notice files rewritten by other
    writers (see ShardReader) at the cost of those requests; else it returns None.
    ``versioned_reads`` (S3, GCS, HTTP(S)): reads return the version of each response
    (ETag; generation on GCS), and reads that rely on an earlier one require it (no extra
    requests); False reads without conditions, for servers whose replicas give one file
    different ETags.

    Every request is retried on transient failures (408, 429, 5xx, dropped or refused
    connections, timeouts, bodies cut short): at most ``retries`` more times, all within
    ``timeout`` seconds; an attempt whose connection brings nothing for ``stall`` seconds
    is retried (HTTP(S), S3, GCS; see :mod:`shardvol.kvstore.retry`).  ``io_concurrency``: this
    store's requests in flight at most, within the process's budget; a call's own limit
    (:func:`shardvol.io_limit`, or the ``io_concurrency`` keyword of a read or write) may
    lower it for that call (see :mod:`shardvol.kvstore.remote`).

    S3 writes of ``multipart_threshold`` bytes or more (default 64 MiB) are multipart
    uploads of ``part_size`` parts (default 16 MiB), sent concurrently within the same
    budgets (see :mod:`shardvol.kvstore.s3_multipart`); so are conditional creates, while a
    conditional replacement stays one PUT (up to 5 GiB).  GCS writes of that size are
    gcsfs's resumable uploads; smaller ones, and S3's, go through shardvol's client
    (:mod:`shardvol.kvstore.s3_writes`, :mod:`shardvol.kvstore.gcs_writes`) unless the
    store's options keep the filesystem's.
    """

    def __init__(self, url: str, lease_ttl: float | None = None,
                 lock_timeout: float | None = 600.0,
                 check_versions: bool = False, versioned_reads: bool = True,
                 retries: int = 10, timeout: float | None = 120.0, stall: float = 30.0,
                 io_concurrency: int | None = None, part_size: int = 16 << 20,
                 multipart_threshold: int = 64 << 20, **storage_options) -> None:
        policy = RetryPolicy(retries, timeout, stall=stall)
        self.part_size, self.multipart_threshold = check_part_size(part_size, multipart_threshold)
        self.requests = Requests(policy, io_concurrency)
        self._fs_of = partial(_filesystem, url, policy, io_concurrency, storage_options)
        self._fs: Any = None  # (made at first use: see fs)
        scheme = url_scheme(url)
        if scheme in READ_ONLY_PROTOCOLS and http_plain(storage_options):
            protocols, root = {scheme}, url  # (fsspec's HTTP paths are the URLs)
        elif (scheme in S3_PROTOCOLS and s3_plain(storage_options)) or (
                scheme in GCS_PROTOCOLS and without_gcsfs(storage_options)):
            package, extra = ("s3fs", "s3") if scheme in S3_PROTOCOLS else ("gcsfs", "gcs")
            if importlib.util.find_spec(package) is None:  # (needed by all but reads)
                raise UnsupportedSchemeError(
                    f"{url}: {package} is not installed (pip install shardvol[{extra}])")
            protocols, root = {scheme}, url.split("://", 1)[1]  # (as s3fs's, gcsfs's paths)
        else:
            self._fs, root = self._fs_of()
            protocols = ({self._fs.protocol} if isinstance(self._fs.protocol, str)
                         else set(self._fs.protocol))
        self.read_only = bool(protocols & READ_ONLY_PROTOCOLS)
        self.root = root.rstrip("/")
        self.url = url.rstrip("/")
        self.lease_ttl, self.lock_timeout = lease_ttl or default_lease_ttl(), lock_timeout
        self.conflict_timeout = lock_timeout
        self._objects: ConditionalObjects | None = None  # for leases
        self._cas: ConditionalCalls | None = None  # for set_if, delete_if
        # the GETs of S3, GCS and HTTP(S) reads, which read the status and Content-Range
        # and return versions: (url, range, version) -> (value, version); else fsspec's
        self._gets: VersionedReads | None = None
        self._versions_field = "ETag"  # (the metadata field of the versions reads give)
        # S3's and GCS's writes through shardvol's client (else: the filesystem's)
        self._direct: S3DirectObjects | GcsDirectObjects | None = None
        fs = partial(getattr, self, "fs")  # (the filesystem, made at first use)
        self._s3 = bool(protocols & S3_PROTOCOLS)
        if self._s3:
            # lease requests outside the process's budget: a renewal must not wait behind
            # bulk reads (its holder would lose the lease)
            leases = S3ConditionalObjects(fs, Requests(policy, process_budget=False))
            cas = S3ConditionalObjects(fs, self.requests)
            self._gets, self._objects, self._cas = leases, leases, cas
            if s3_plain(storage_options):
                reads = S3Reads(storage_options, leases, policy.stall)
                loop = partial(getattr, self, "_loop")
                self._gets = reads
                self._direct = S3DirectObjects(reads, cas, loop, self._written)
                self._objects = S3DirectObjects(reads, leases, loop, self._written)
                self._cas = self._direct
            if not versioned_reads:  # (the versions set_if compares are the reads' ETags)
                self._cas = None
        elif protocols & GCS_PROTOCOLS and (self._fs is None or gcs_plain(self._fs)):
            gcs = GcsTransport(GoogleAuth(storage_options) if self._fs is None
                               else GcsfsAuth(self._fs))
            loop = partial(getattr, self, "_loop")
            self._gets = HttpVersionedReads(gcs, policy.stall)
            self._direct = GcsDirectObjects(gcs, self.requests, policy.stall, loop,
                                            self._written)
            self._objects = GcsDirectObjects(gcs, Requests(policy, process_budget=False),
                                             policy.stall, loop, self._written)
            self._cas = self._direct if versioned_reads else None
            self._versions_field = "generation"
        elif self.read_only:
            try:
                self._gets = http_reads(storage_options, fs, policy.stall)
            except ImportError as e:  # (yarl, of the http extra)
                raise UnsupportedSchemeError(f"{url}: {e}") from e
        # reads that return versions and may require one
        self._reads = self._gets if versioned_reads else None
        self.locks_across_processes = self._objects is not None
        self.conditional_writes = self._cas is not None
        self._leases: dict[str, Lease] = {}
        self.check_versions = check_versions
        self._async = bool(getattr(self._fs, "async_impl", True))
        # GETs in flight, by (path, range, ETag): an identical GET waits for the same answer
        # (concurrent reads of one shard ask for its index once); touched on the I/O loop only
        self._in_flight: dict[_Flight, _Shared] = {}

    @property
    def fs(self) -> Any:
        """The fsspec filesystem, made at first use (plain reads of HTTP(S), S3 and GCS
        need none: gcsfs, s3fs and fsspec's HTTP filesystem import aiohttp, gcsfs
        google-cloud's libraries and s3fs aiobotocore too, a fresh process's largest
        imports)."""
        if self._fs is None:
            self._fs = self._fs_of()[0]
        return self._fs

    @property
    def _loop(self) -> asyncio.AbstractEventLoop:
        """The I/O loop: the filesystem's (fsspec's, unless it was given another)."""
        return fsspec.asyn.get_loop() if self._fs is None else self._fs.loop

    def _run(self, what: str, coro: Callable[[], Awaitable[T]], call: Callable[[], T]) -> T:
        """One request, retried: ``coro()`` on the I/O loop for asynchronous filesystems,
        else ``call()`` in this thread."""
        if self._async:
            return run_on(self._loop, self.requests.one(coro, what))
        return retry_sync(call, self.requests.policy, what)

    def _path(self, key: str) -> str:
        return f"{self.root}/{check_key(key)}"

    def _finish(self, key: str, byte_range: ByteRange | None, result) -> bytes | None:
        """Turn one fetched result (bytes or exception) into the contract's answer, bytes."""
        value = self._answer(key, byte_range, result)
        return None if value is None else bytes(value)

    def _answer(self, key: str, byte_range: ByteRange | None,
                result) -> bytes | memoryview | None:
        """:meth:`_finish`'s answer, where a body received into a buffer of its own is a
        read-only view of it (streamed reads: bytes would copy every chunk, holding the
        GIL).  Such a body holds the requested bytes only: a range cut out of a larger
        answer was copied out already (versioned_reads.requested_bytes)."""
        if isinstance(result, FileNotFoundError):
            return None
        if isinstance(result, ByteRangeError):
            raise ByteRangeError(
                f"byte range {byte_range} of {key!r} in {self.url} is past its end ({result})"
            ) from result
        if isinstance(result, BaseException):
            if status_of(result) == 412:
                raise VersionChangedError(
                    f"{key!r} in {self.url} was replaced since it was last read", key
                ) from result
            if status_of(result) == 416:
                raise ByteRangeError(
                    f"byte range {byte_range} of {key!r} is past its end"
                ) from result
            raise StoreError(f"cannot read {key!r} from {self.url}: {result}") from result
        data = result if isinstance(result, bytes) else memoryview(result).toreadonly()
        if byte_range is None:
            return data
        start, stop = byte_range
        if start < 0:
            if len(data) > -start:  # server ignored Range and sent it all
                data = data[start:]
            if len(data) != -start:
                raise ByteRangeError(
                    f"suffix of {-start} bytes requested from {key!r}, which has only {len(data)}"
                )
            return data
        if stop is None:
            return data
        want = stop - start
        if len(data) > want and len(data) >= stop:  # server ignored Range and sent it all
            data = data[start:stop]
        if len(data) != want:
            raise ByteRangeError(
                f"byte range [{start}, {stop}) of {key!r} reaches past its end "
                f"(got {len(data)} of {want} bytes)"
            )
        return data

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes | None:
        return self.get_many([(key, byte_range)])[0]

    def get_many(self, requests: Iterable[Request]) -> list[bytes | None]:
        reqs = _checked(requests)
        return [self._finish(k, r, res) for (k, r), (res, _) in zip(reqs, self._fetch(reqs, {}))]

    def get_many_versioned(
        self, requests: Iterable[Request]
    ) -> Sequence[tuple[bytes | memoryview | None, Hashable | None]]:
        if self._reads is None:
            return super().get_many_versioned(requests)
        reqs = _checked(requests)
        return [(self._finish(k, r, res), etag)
                for (k, r), (res, etag) in zip(reqs, self._fetch(reqs, {}))]

    def get_many_if(
        self, requests: Iterable[Request], versions: Mapping[str, Hashable | None]
    ) -> Sequence[bytes | memoryview | None]:
        if self._reads is None:
            return super().get_many_if(requests, versions)
        reqs = _checked(requests)
        return [self._finish(k, r, res) for (k, r), (res, _) in zip(reqs, self._fetch(reqs,
                                                                                   versions))]

    def iter_get_many_if(
        self, requests: Iterable[Request], versions: Mapping[str, Hashable | None],
        window: int = DEFAULT_WINDOW, sizes: Sequence[int | None] | None = None,
    ) -> Iterator[tuple[int, bytes | memoryview | None]]:
        """Every request sent at once (within the budgets, and with at most ``window``
        bytes asked for but not yet taken by the caller), the values yielded as they
        arrive."""
        if not self._async or (self._reads is None and any(
                v is not None for v in versions.values())):
            yield from super().iter_get_many_if(requests, versions, window, sizes)
            return
        for i, value, _ in self._iter_fetch(_checked(requests), versions, window, sizes):
            yield i, value

    def iter_get_many_versioned(
        self, requests: Iterable[Request], window: int = DEFAULT_WINDOW,
        sizes: Sequence[int | None] | None = None,
    ) -> Iterator[tuple[int, bytes | memoryview | None, Hashable | None]]:
        if not self._async or self._reads is None:
            yield from super().iter_get_many_versioned(requests, window, sizes)
            return
        yield from self._iter_fetch(_checked(requests), {}, window, sizes)

    def iter_get_arriving(
        self, keys: Sequence[str], window: int = DEFAULT_WINDOW,
        sizes: Sequence[int | None] | None = None,
    ) -> Iterator[tuple[int, Arriving]]:
        """HTTP(S), S3 and GCS values stream into their buffers as their bytes arrive; every GET
        is sent at once, within the window."""
        if not self._async or self._reads is None:
            yield from super().iter_get_arriving(keys, window, sizes)
            return
        keys = [check_key(k) for k in keys]
        values: list[Arriving | None] = [None] * len(keys)  # (set by each op as it starts)
        ops = [self._arrive_one(k, partial(values.__setitem__, i)) for i, k in enumerate(keys)]
        events = _stream(self._loop, ops, list(sizes or [None] * len(keys)), window)
        del ops  # (a value's bytes are kept only until the caller has taken it whole)
        for i, failed, final in events:
            if final and failed is not None:
                self._finish(keys[i], None, failed)  # (raises: 412 VersionChangedError, ...)
            yield i, cast(Arriving, values[i])
            if final:
                values[i] = None

    def _arrive_one(
        self, key: str, found: Callable[[Arriving], None]
    ) -> Callable[[Callable[[int | None], None]], Awaitable[Exception | None]]:
        """The op of one streamed GET of a whole value, retried within the budgets (an
        attempt after some bytes came in asks for the rest), shared with concurrent reads
        of the same value (``found`` is given the value it fills; its arrivals report
        its size once known): None, or the exception that failed it."""
        path, reads = self._path(key), self._reads
        assert reads is not None

        async def fetch(shared: _Shared) -> Exception | None:
            value = cast(Arriving, shared.value)
            try:
                await self.requests.one(partial(reads.read_into, path, value, shared.arrived),
                                        _what(self.url, key, None))
                return None
            except Exception as e:  # reported with the value (missing, 412, given up)
                return e

        async def one(arrived: Callable[[int | None], None]) -> Exception | None:
            flight = (path, None, None, True)
            shared = self._join(flight, fetch)
            value = cast(Arriving, shared.value)
            found(value)
            result: Exception | None = await self._wait(flight, shared,
                                                        lambda: arrived(value.size))
            return result

        return one

    def _iter_fetch(
        self, reqs: list[tuple[str, ByteRange | None]], versions: Mapping[str, Hashable | None],
        window: int, sizes: Sequence[int | None] | None,
    ) -> Iterator[tuple[int, bytes | memoryview | None, Hashable | None]]:
        ops = [_ignoring_arrivals(self._fetch_one(k, r, versions.get(k))) for k, r in reqs]
        estimates = [_size_of(r) if s is None else s
                     for (_, r), s in zip(reqs, sizes or [None] * len(reqs))]
        for i, got, _ in _stream(self._loop, ops, estimates, window):
            res, version = cast("tuple[Any, Hashable | None]", got)
            yield i, self._answer(reqs[i][0], reqs[i][1], res), version

    def _fetch(self, reqs: list[tuple[str, ByteRange | None]],
               versions: Mapping[str, Hashable | None]) -> list[tuple[Any, Hashable | None]]:
        """(bytes or the exception that failed it, version) of each request: all sent at
        once, each retried."""
        if not reqs:
            return []
        if self._async:
            ops = [self._fetch_one(k, r, versions.get(k)) for k, r in reqs]
            return run_on(self._loop, _gather(ops))
        out: list[tuple[Any, Hashable | None]] = []
        for k, r in reqs:
            path = self._path(k)
            call = partial(self.fs.cat_file, path, start=None if r is None else r[0],
                           end=None if r is None else r[1])
            try:
                out.append((retry_sync(call, self.requests.policy, _what(self.url, k, r)), None))
            except Exception as e:  # reported per request, as the asynchronous path does
                out.append((e, None))
        return out

    def _fetch_one(self, key: str, byte_range: ByteRange | None,
                   version: Hashable | None) -> Callable[[], Awaitable[tuple[Any, Any]]]:
        """The coroutine function of one GET, retried within the budgets: (bytes or the
        exception that failed it, the response's version)."""
        path = self._path(key)
        reads = self._gets
        # the versions are tokens this store's own versioned reads returned (ETags, or
        # generations on GCS)
        etag = cast("str | None", version)

        async def attempt() -> tuple[Any, Any]:
            if reads is not None:
                return await reads.read_one(path, byte_range, etag)
            start, end = (None, None) if byte_range is None else byte_range
            return await self.fs._cat_file(path, start=start, end=end), None

        async def fetch(_: _Shared) -> tuple[Any, Any]:
            try:
                return await self.requests.one(attempt, _what(self.url, key, byte_range))
            except Exception as e:  # reported per request (missing, 412, 416, given up)
                return e, None

        async def one() -> tuple[Any, Any]:
            flight = (path, byte_range, etag, False)
            result: tuple[Any, Any] = await self._wait(flight, self._join(flight, fetch))
            return result

        return one

    def _join(self, flight: _Flight, fetch: Callable[[_Shared], Awaitable[Any]]) -> _Shared:
        """The GET ``flight`` names in flight: ``fetch``, sent now unless an identical GET
        is in flight already (concurrent reads of a shard ask for its index once; a
        streamed one shares the value it fills)."""
        shared = self._in_flight.get(flight)
        if shared is None:
            streamed = flight[3]
            shared = self._in_flight[flight] = _Shared(Arriving() if streamed else None)
            task = shared.task = asyncio.ensure_future(fetch(shared))

            def landed(done: asyncio.Future) -> None:
                entry = self._in_flight.get(flight)
                if entry is not None and entry.task is done:  # (not one sent after a write)
                    self._in_flight.pop(flight, None)

            task.add_done_callback(landed)
        return shared

    async def _wait(self, flight: _Flight, shared: _Shared,
                    listener: Callable[[], None] | None = None) -> Any:
        """The answer of a GET joined with the other reads waiting for it; ``listener()``
        is called now and as more of a streamed value arrives."""
        task = cast(asyncio.Future, shared.task)
        if listener is not None:
            shared.listeners.append(listener)
            listener()  # (the bytes already in)
        shared.waiting += 1
        try:
            # (shielded: one reader giving up does not cancel the others' answer)
            return await asyncio.shield(task)
        finally:
            shared.waiting -= 1
            if listener is not None:
                shared.listeners.remove(listener)
            if not shared.waiting and not task.done():
                task.cancel()  # (every reader gave up: the request goes too)
                if self._in_flight.get(flight) is shared:
                    self._in_flight.pop(flight, None)

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        with process_lock(self.url, key):
            if self._objects is None:
                yield
                return
            lease = acquire(
                self._objects, lease_path(self._path(key)), self.lease_ttl, self.lock_timeout
            )
            self._leases[key] = lease
            finished = False
            try:
                yield
                finished = True
            finally:
                del self._leases[key]
                try:
                    lease.release()
                except StoreError:  # LockLostError, or the store unreachable
                    if finished:  # else the body's own exception is the one to see
                        raise

    def _check_lease(self, key: str) -> None:
        lease = self._leases.get(key)
        if lease is not None:
            lease.check()

    def _leased(self, key: str, op: Callable[[], Awaitable[T]]) -> Callable[[], Awaitable[T]]:
        """``op`` as an attempt of a write under ``key``'s lease, if this store holds one:
        every attempt first checks the lease (LockLostError, never retried, once it may
        have run out), and is cut off when the lease could run out while it is under way."""

        async def attempt() -> T:
            lease = self._leases.get(key)
            if lease is None:
                return await op()
            lease.check()
            try:
                return await asyncio.wait_for(op(), lease.valid_for())
            except asyncio.TimeoutError:
                lease.check()  # (raises once the lease may have run out)
                raise

        return attempt

    def set(self, key: str, value: bytes) -> None:
        self._put(key, [bytes(value)])

    def set_parts(self, key: str, parts: Sequence[bytes | memoryview]) -> None:
        """The parts joined, as one object (sent without joining them, but to a
        filesystem)."""
        self._put(key, list(parts))

    def _put(self, key: str, parts: list[bytes | memoryview]) -> None:
        self._require_writable(key)
        self._check_lease(key)
        path = self._path(key)
        size = sum(memoryview(p).nbytes for p in parts)
        # (GCS values from multipart_threshold bytes: gcsfs's resumable uploads, in pieces)
        direct = self._direct if self._s3 or size < self.multipart_threshold else None
        try:
            if self._multipart(key, size):
                self._upload(path, parts)
                return
            put: Callable[[], Awaitable[Any]]
            if direct is not None:
                put = partial(direct.put, path, parts, direct.checksum(parts))
            else:
                data = b"".join(parts)  # (a filesystem takes bytes)
                put = lambda: self.fs._pipe_file(path, data)  # noqa: E731
            self._run(f"PUT {self.url}/{key}", self._leased(key, put),
                      lambda: self.fs.pipe_file(path, b"".join(parts)))
        except StoreError:
            raise
        except Exception as e:
            raise StoreError(f"cannot write {key!r} to {self.url}: {e}") from e
        finally:
            self._forget_in_flight(path)

    def _written(self, path: str) -> None:
        """After a write of ``path`` not through the filesystem: its listings cached are
        stale."""
        if self._fs is not None:
            self._fs.invalidate_cache(path)

    def _multipart(self, key: str, size: int) -> bool:
        """Whether a value of ``size`` bytes goes to S3 as a multipart upload (values
        written under a lease, small metadata, stay one PUT checked against the lease)."""
        return self._s3 and size >= self.multipart_threshold and key not in self._leases

    def _upload(self, path: str, data: Sequence[bytes | memoryview],
                if_none_match: bool = False) -> str | None:
        """A multipart upload (see :mod:`shardvol.kvstore.s3_multipart`), through
        shardvol's client unless the store's requests take botocore."""
        def through(calls: PartCalls) -> str | None:
            return run_on(self._loop, upload(calls, self.requests, path, data, self.part_size,
                                             if_none_match))

        try:
            if isinstance(self._direct, S3DirectObjects):
                with contextlib.suppress(ToBotocore):  # (from the first request: nothing made)
                    return through(self._direct.parts(path))
            return through(BotocoreParts(self.fs, path))
        except StoreError:
            raise
        except Exception as e:  # botocore's or S3's: access denied, no such bucket, ...
            raise StoreError(f"cannot upload {path} in parts: {e}") from e
        finally:
            self._written(path)

    def set_if(self, key: str, value: bytes | memoryview, version: Hashable | None) -> bool:
        """One PUT with ``If-Match: <version>`` (``If-None-Match: *`` for None: on S3 a
        multipart upload from ``multipart_threshold`` bytes; on GCS an upload with
        ``ifGenerationMatch``, 0 for None), retried on transient failures; a failed
        condition is False (also 404: the object went)."""
        return self.set_parts_if(key, [bytes(value)], version)

    def set_parts_if(self, key: str, parts: Sequence[bytes | memoryview],
                     version: Hashable | None) -> bool:
        """:meth:`set_if` of the concatenation of ``parts``, sent without joining them
        through shardvol's client (but for a multipart upload)."""
        self._require_writable(key)
        cas = self._conditional(key)
        path = self._path(key)
        size = sum(memoryview(p).nbytes for p in parts)
        body = list(parts)  # (sent unjoined through shardvol's client; botocore joins them)
        try:
            if version is None:
                if self._multipart(key, size):
                    return self._upload(path, parts, if_none_match=True) is not None
                return cas.create(path, body) is not None
            if self._s3 and size > _MAX_PUT:
                raise StoreError(f"cannot replace {key!r} in {self.url} conditionally: "
                                 f"{size:,} bytes is more than one PUT takes")
            return cas.replace(path, body, str(version)) is not None
        finally:
            self._forget_in_flight(path)

    def delete_if(self, key: str, version: Hashable | None) -> bool:
        """One DELETE with ``If-Match: <version>`` (GCS: ``ifGenerationMatch``), retried on
        transient failures; an absent object is done, a repeat that finds another version
        is not (see ConditionalCalls.delete)."""
        self._require_writable(key)
        cas = self._conditional(key)
        if version is None:
            return True
        path = self._path(key)
        try:
            return cas.delete(path, str(version), repeat_is_done=False)
        finally:
            self._forget_in_flight(path)

    def _conditional(self, key: str) -> ConditionalCalls:
        if self._cas is None:
            raise NotImplementedError(f"{self.url} has no conditional writes ({key!r})")
        return self._cas

    def delete(self, key: str) -> None:
        self._require_writable(key)
        self._check_lease(key)
        path = self._path(key)
        try:
            self._run(f"DELETE {self.url}/{key}", self._remover(key, path),
                      lambda: self.fs.rm_file(path))
        except Exception as e:
            self._deleted(key, e)
        finally:
            self._forget_in_flight(path)

    def delete_many(self, keys: Sequence[str]) -> None:
        """The deletes at once on the I/O loop (each retried, within the budgets), in
        batches of _DELETE_BATCH keys (an overwrite may delete millions)."""
        if len(keys) < 2 or not self._async:
            return super().delete_many(keys)
        for key in keys:
            self._require_writable(key)
            self._check_lease(key)
        for at in range(0, len(keys), _DELETE_BATCH):
            batch = keys[at:at + _DELETE_BATCH]
            paths = [self._path(key) for key in batch]
            try:
                results = run_on(self._loop, self.requests.each(
                    [self._remover(key, path) for key, path in zip(batch, paths)],
                    [f"DELETE {self.url}/{key}" for key in batch]))
            finally:
                for path in paths:
                    self._forget_in_flight(path)
            for key, result in zip(batch, results):
                if isinstance(result, Exception):
                    self._deleted(key, result)

    def _remover(self, key: str, path: str) -> Callable[[], Awaitable[Any]]:
        direct = self._direct
        return self._leased(key, partial(direct.remove, path) if direct is not None
                            else lambda: self.fs._rm_file(path))

    def _deleted(self, key: str, error: Exception) -> None:
        """Raise what a delete of ``key`` that failed with ``error`` means (an absent
        object is deleted)."""
        if isinstance(error, FileNotFoundError):
            return
        if isinstance(error, StoreError):
            raise error
        raise StoreError(f"cannot delete {key!r} in {self.url}: {error}") from error

    def _forget_in_flight(self, path: str) -> None:
        """After a write of ``path``: later GETs of it are sent anew (one in flight since
        before the write may bring the old bytes)."""
        for flight in [f for f in list(self._in_flight) if f[0] == path]:
            self._in_flight.pop(flight, None)

    def list(self, prefix: str = "") -> list[str]:
        check_prefix(prefix)
        head = prefix.rpartition("/")[0]
        base = f"{self.root}/{head}" if head else self.root
        try:
            found = self._run(f"LIST {self.url}/{prefix}", lambda: self.fs._find(base),
                              lambda: self.fs.find(base))
        except (FileNotFoundError, NotImplementedError):
            return []
        except StoreError:
            raise
        except Exception as e:
            raise StoreError(f"cannot list {prefix!r} in {self.url}: {e}") from e
        strip = self.root + "/"
        keys = []
        shown = prefix.count("/")  # (names the prefix gives, hidden ones too, are listed)
        for p in found:
            rel = p[len(strip) :] if p.startswith(strip) else None
            hidden = rel and any(part.startswith(HIDDEN_PREFIX)
                                 for part in rel.split("/")[shown:])
            if rel and rel.startswith(prefix) and not hidden:
                keys.append(rel)
        return sorted(keys)

    def version(self, key: str) -> Hashable | None:
        """With ``check_versions``: the token versioned reads give (the strong ETag; on
        GCS the generation), else (generation or the like, size); () if absent; else
        None."""
        if not self.check_versions:
            return None
        info = self._info(key, fresh=True)
        if info is None:
            return ()
        token = info.get(self._versions_field) if self._reads is not None else None
        if token is not None and strong_etag(str(token)) is not None:
            return str(token)
        token = next((info[k] for k in _VERSION_FIELDS if info.get(k) is not None), None)
        return (str(token), info.get("size"))

    def _info(self, key: str, fresh: bool = False) -> dict | None:
        """fsspec's metadata of ``key``'s object, None if absent; ``fresh``: not from the
        filesystem's listing cache, which may be older."""
        path = self._path(key)
        if fresh:
            self.fs.invalidate_cache(path)
        try:
            info: dict = self._run(f"HEAD {self.url}/{key}", lambda: self.fs._info(path),
                                   lambda: self.fs.info(path))
            return info
        except FileNotFoundError:
            return None
        except StoreError:
            raise
        except Exception as e:
            raise StoreError(f"cannot stat {key!r} in {self.url}: {e}") from e

    def size(self, key: str) -> int | None:
        info = self._info(key)
        if info is None or info.get("type") == "directory":
            return None
        size = info.get("size")
        if size is None:  # e.g. an HTTP server that sends no Content-Length
            data = self.get(key)
            return None if data is None else len(data)
        return int(size)


def _filesystem(url: str, policy: RetryPolicy, io_concurrency: int | None,
                storage_options: dict[str, Any]) -> tuple[Any, str]:
    """The fsspec filesystem of a store's URL, and the URL's path in it."""
    try:
        if url_scheme(url) in GCS_PROTOCOLS:  # (gcsfs, its requests tried once)
            from shardvol.kvstore.gcs_filesystem import filesystem

            return filesystem(url, **storage_options)
        if url_scheme(url) in S3_PROTOCOLS:  # (s3fs, its requests tried once)
            from shardvol.kvstore.s3_filesystem import filesystem as s3_filesystem

            return s3_filesystem(url, policy, max(io_concurrency or 0, io_concurrency_limit()),
                                 **storage_options)
        fs, root = fsspec.core.url_to_fs(url, **storage_options)
        return fs, root
    except ImportError as e:  # gcsfs, s3fs, aiohttp ... not installed
        raise UnsupportedSchemeError(f"{url}: {e}") from e


def _what(url: str, key: str, byte_range: ByteRange | None) -> str:
    return f"GET {url}/{key}" + ("" if byte_range is None else f" bytes {byte_range}")


def _size_of(byte_range: ByteRange | None) -> int | None:
    """Bytes a request asks for, if its range says (None: a whole value or a suffix)."""
    if byte_range is None or byte_range[1] is None or byte_range[0] < 0:
        return None
    return byte_range[1] - byte_range[0]


def _ignoring_arrivals(
    op: Callable[[], Awaitable[T]]
) -> Callable[[Callable[[int | None], None]], Awaitable[T]]:
    """``op`` as an op of :func:`_stream` that reports no arrivals before its result."""
    return lambda arrived: op()


async def _gather(ops: list[Callable[[], Awaitable[T]]]) -> list[T]:
    return list(await asyncio.gather(*(op() for op in ops)))


def _stream(loop: asyncio.AbstractEventLoop,
            ops: list[Callable[[Callable[[int | None], None]], Awaitable[T]]],
            sizes: list[int | None], window: int) -> Iterator[tuple[int, T | None, bool]]:
    """``(i, result of ops[i], True)`` in the order they finish, and ``(i, None, False)``
    between, each time ops[i] has called the function it is given (more of its value
    came in; calls not yet taken count once).  Ops start in order as long as the sizes
    of those started but not yet finished and taken stay within ``window`` (an op larger
    than the window starts alone).  An op's size is its estimate in ``sizes`` until its
    arrivals report its true size, and the estimates of ops not started yet are scaled
    by how the true sizes reported so far compare with theirs (a shard of jpeg chunks is
    estimated by its chunks' decoded bytes, seven times its file).  Stopping the
    iteration cancels the ops not finished."""
    events: queue.SimpleQueue[tuple[int, T | None, bool]] = queue.SimpleQueue()
    told = [False] * len(ops)  # ops[i] has an arrival event not yet taken
    # touched on the loop only: the room left, each op's part of the window, whether its
    # true size is known, and the true sizes known so far with their estimates
    room, held, sized, known = [window], [0] * len(ops), [False] * len(ops), [0, 0]
    freed: list[asyncio.Event] = []

    def estimate(i: int) -> int:
        size = sizes[i] or 0
        return min(size * known[0] // known[1] if known[1] else size, window)

    def arrived(i: int, size: int | None = None) -> None:
        if size is not None and not sized[i]:  # (on the loop: the op's own callback)
            sized[i] = True
            if sizes[i]:
                known[0], known[1] = known[0] + size, known[1] + (sizes[i] or 0)
            give_back(held[i] - min(size, window))
            held[i] = min(size, window)
        if not told[i]:
            told[i] = True
            events.put((i, None, False))

    waiting: list[Callable | None] = list(ops)  # (each dropped once started)

    async def run() -> None:
        freed.append(asyncio.Event())
        tasks: list[asyncio.Future[None]] = []
        try:
            for i in range(len(sizes)):
                op, waiting[i] = waiting[i], None
                while room[0] < estimate(i):
                    freed[0].clear()
                    await freed[0].wait()
                held[i] = estimate(i)
                room[0] -= held[i]

                async def finish(i: int = i, op: Callable | None = op) -> None:
                    assert op is not None
                    events.put((i, await op(partial(arrived, i)), True))

                tasks.append(asyncio.ensure_future(finish()))
            await asyncio.gather(*tasks)
        except BaseException:  # cancelled (the caller stopped), or an op failed for good
            for task in tasks:
                task.cancel()
            raise

    def give_back(n: int) -> None:
        room[0] += n
        if freed:
            freed[0].set()

    def give_back_held(i: int) -> None:
        give_back(held[i])

    n = len(ops)
    del ops
    limited = sum(min(size or 0, window) for size in sizes) > window
    future = start_on(loop, run())  # (under the calling thread's call limit)
    try:
        finished = 0
        while finished < n:
            try:
                i, result, final = events.get(timeout=1.0)
            except queue.Empty:
                if exiting():
                    raise StoreError("the interpreter is exiting: read cancelled") from None
                if future.done():  # ended without a result for every op
                    future.result()  # (raises what ended it)
                    raise StoreError("streamed read ended before all its values came") from None
                continue
            if not final:
                told[i] = False
            yield i, result, final
            if final:
                finished += 1
                if limited:  # (waking the loop costs: only if it may wait)
                    loop.call_soon_threadsafe(give_back_held, i)
    finally:
        future.cancel()


def _checked(requests: Iterable[Request]) -> list[tuple[str, ByteRange | None]]:
    """Normalized requests; a range ending before it starts, or a suffix with a stop,
    raises ByteRangeError (as resolve_range does for local values)."""
    reqs = [normalize_request(r) for r in requests]
    for key, byte_range in reqs:
        if byte_range is None or byte_range[1] is None:
            continue
        if byte_range[0] < 0:
            raise ByteRangeError(f"suffix byte range {byte_range} of {key!r} must have stop=None")
        if byte_range[1] < byte_range[0]:
            raise ByteRangeError(f"byte range {byte_range} of {key!r} ends before it starts")
    return reqs
