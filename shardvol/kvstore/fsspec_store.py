"""Remote stores through fsspec: ``http(s)://`` (read-only), ``gs://``, ``s3://`` and others.

Ranged reads become HTTP ``Range`` requests (or the object store's equivalent);
``get_many`` issues them concurrently through fsspec's async machinery.
Object stores replace whole objects on write, which is atomic per key.
``lock(key)`` holds across processes and machines on S3 (a lease object per key, see
:mod:`shardvol.kvstore.lease`); on other protocols it orders writers inside this process
only (see KVStore.lock).  On S3 and HTTP(S), reads are versioned (get_many_versioned,
get_many_if): each response's ETag is the value's version, and reads that must find a
version send it as ``If-Match``, so no separate metadata requests are needed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar, cast

import fsspec
from fsspec.asyn import sync

from shardvol.errors import (
    ByteRangeError,
    StoreError,
    UnsupportedSchemeError,
    VersionChangedError,
)
from shardvol.kvstore.base import (
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
from shardvol.kvstore.lease import ConditionalObjects, Lease, acquire, lease_path
from shardvol.kvstore.remote import Requests
from shardvol.kvstore.retry import RetryPolicy, retry_sync, status_of
from shardvol.kvstore.versioned_reads import HttpVersionedReads, VersionedReads, strong_etag

T = TypeVar("T")
READ_ONLY_PROTOCOLS = {"http", "https"}
# what changes when an object is rewritten, by backend (s3fs, gcsfs, HTTP, others)
_VERSION_FIELDS = ("ETag", "generation", "etag", "mtime", "LastModified", "last_modified")
S3_PROTOCOLS = {"s3", "s3a"}


class FsspecStore(KVStore):
    """Values as objects below an fsspec URL.

    ``lease_ttl`` and ``lock_timeout`` (seconds; None waits for ever) set the cross-process
    locks of S3 stores: a crashed holder's lock is taken over after ``lease_ttl``.
    ``check_versions``: :meth:`version` asks the store for each object's ETag (or
    generation) with a metadata request, so shard readers notice files rewritten by other
    writers (see ShardReader) at the cost of those requests; else it returns None.
    ``versioned_reads`` (S3, HTTP(S)): reads return the ETag of each response, and reads
    that rely on an earlier one send it as ``If-Match`` (no extra requests); False reads
    without conditions, for servers whose replicas give one file different ETags.

    Every request is retried on transient failures (408, 429, 5xx, dropped or refused
    connections, timeouts, bodies cut short): at most ``retries`` more times, all within
    ``timeout`` seconds (see :mod:`shardvol.kvstore.retry`).  ``io_concurrency``: this
    store's requests in flight at most, within the process's budget (see
    :mod:`shardvol.kvstore.remote`).
    """

    def __init__(self, url: str, lease_ttl: float = 30.0, lock_timeout: float | None = 600.0,
                 check_versions: bool = False, versioned_reads: bool = True,
                 retries: int = 10, timeout: float | None = 120.0,
                 io_concurrency: int | None = None, **storage_options) -> None:
        self.requests = Requests(RetryPolicy(retries, timeout), io_concurrency)
        if url_scheme(url) in S3_PROTOCOLS and "config_kwargs" not in storage_options:
            # retried here, with this store's policy, not also by botocore
            storage_options["config_kwargs"] = {"retries": {"total_max_attempts": 1}}
        try:
            self.fs, root = fsspec.core.url_to_fs(url, **storage_options)
        except ImportError as e:  # gcsfs, s3fs, ... not installed
            raise UnsupportedSchemeError(f"{url}: {e}") from e
        protocols = (
            {self.fs.protocol} if isinstance(self.fs.protocol, str) else set(self.fs.protocol)
        )
        self.read_only = bool(protocols & READ_ONLY_PROTOCOLS)
        self.root = root.rstrip("/")
        self.url = url.rstrip("/")
        self.lease_ttl, self.lock_timeout = lease_ttl, lock_timeout
        self._objects: ConditionalObjects | None = None  # for leases
        # reads that return versions and may require one: (url, range, ETag) -> (value, ETag)
        self._reads: VersionedReads | None = None
        if protocols & S3_PROTOCOLS:
            from shardvol.kvstore.s3_conditional import S3ConditionalObjects

            self.fs.retries = 1  # (s3fs's own retry loop of its calls)
            s3 = S3ConditionalObjects(self.fs, self.requests)
            self._objects = s3
            self._reads = s3 if versioned_reads else None
        # http(s) reads all go through our GETs, which read the status and Content-Range
        self._http = HttpVersionedReads(self.fs, self.requests) if self.read_only else None
        if self._http is not None and versioned_reads:
            self._reads = self._http
        self.locks_across_processes = self._objects is not None
        self._leases: dict[str, Lease] = {}
        self.check_versions = check_versions
        self._async = bool(getattr(self.fs, "async_impl", False))

    def _run(self, what: str, coro: Callable[[], Awaitable[T]], call: Callable[[], T]) -> T:
        """One request, retried: ``coro()`` on the I/O loop for asynchronous filesystems,
        else ``call()`` in this thread."""
        if self._async:
            result: T = sync(self.fs.loop, self.requests.one, coro, what)
            return result
        return retry_sync(call, self.requests.policy, what)

    def _path(self, key: str) -> str:
        return f"{self.root}/{check_key(key)}"

    def _finish(self, key: str, byte_range: ByteRange | None, result) -> bytes | None:
        """Turn one fetched result (bytes or exception) into the contract's answer."""
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
        data = bytes(result)
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
        if not reqs:
            return []
        if self._http is not None:
            return [value for value, _ in self._versioned_reads(reqs, {}, self._http)]
        results = self._cat_each(reqs)
        return [self._finish(k, r, res) for (k, r), res in zip(reqs, results)]

    def _cat_each(self, reqs: list[tuple[str, ByteRange | None]]) -> list[Any]:
        """The bytes of each request (or the exception that failed it), each retried."""
        fs = self.fs
        calls = [(self._path(k), None if r is None else r[0], None if r is None else r[1])
                 for k, r in reqs]
        whats = [f"GET {self.url}/{k}" + ("" if r is None else f" bytes {r}") for k, r in reqs]
        if self._async:
            coros: list[Callable[[], Awaitable[bytes]]] = [
                partial(fs._cat_file, c[0], start=c[1], end=c[2]) for c in calls]
            return list(sync(fs.loop, self.requests.each, coros, whats))
        out: list[Any] = []
        for c, what in zip(calls, whats):
            try:
                call = partial(fs.cat_file, c[0], start=c[1], end=c[2])
                out.append(retry_sync(call, self.requests.policy, what))
            except Exception as e:  # reported per request, as above
                out.append(e)
        return out

    def get_many_versioned(
        self, requests: Iterable[Request]
    ) -> Sequence[tuple[bytes | memoryview | None, Hashable | None]]:
        if self._reads is None:
            return super().get_many_versioned(requests)
        return self._versioned_reads(_checked(requests), {})

    def get_many_if(
        self, requests: Iterable[Request], versions: Mapping[str, Hashable | None]
    ) -> Sequence[bytes | memoryview | None]:
        if self._reads is None:
            return super().get_many_if(requests, versions)
        return [value for value, _ in self._versioned_reads(_checked(requests), versions)]

    def _versioned_reads(
        self,
        reqs: list[tuple[str, ByteRange | None]],
        versions: Mapping[str, Hashable | None],
        reads: VersionedReads | None = None,
    ) -> list[tuple[bytes | None, Hashable | None]]:
        """(value, ETag) of each request through ``reads`` (default: the store's versioned
        reads); ``versions[key]`` is sent as If-Match."""
        reads = reads or self._reads
        assert reads is not None
        # the versions are ETags: tokens that this store's own versioned reads returned
        etags = cast("Mapping[str, str | None]", versions)
        results = reads.read([(self._path(k), r, etags.get(k)) for k, r in reqs])
        return [(self._finish(k, r, res), etag) for (k, r), (res, etag) in zip(reqs, results)]

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

    def set(self, key: str, value: bytes) -> None:
        self._require_writable(key)
        self._check_lease(key)
        path, data = self._path(key), bytes(value)
        try:
            self._run(f"PUT {self.url}/{key}", lambda: self.fs._pipe_file(path, data),
                      lambda: self.fs.pipe_file(path, data))
        except StoreError:
            raise
        except Exception as e:
            raise StoreError(f"cannot write {key!r} to {self.url}: {e}") from e

    def delete(self, key: str) -> None:
        self._require_writable(key)
        self._check_lease(key)
        path = self._path(key)
        try:
            self._run(f"DELETE {self.url}/{key}", lambda: self.fs._rm_file(path),
                      lambda: self.fs.rm_file(path))
        except FileNotFoundError:
            pass
        except StoreError:
            raise
        except Exception as e:
            raise StoreError(f"cannot delete {key!r} in {self.url}: {e}") from e

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
        for p in found:
            rel = p[len(strip) :] if p.startswith(strip) else None
            hidden = rel and any(part.startswith(HIDDEN_PREFIX) for part in rel.split("/"))
            if rel and rel.startswith(prefix) and not hidden:
                keys.append(rel)
        return sorted(keys)

    def version(self, key: str) -> Hashable | None:
        """With ``check_versions``: the strong ETag with versioned reads (the token they
        give), else (generation or the like, size); () if absent; else None."""
        if not self.check_versions:
            return None
        info = self._info(key, fresh=True)
        if info is None:
            return ()
        etag = strong_etag(info.get("ETag")) if self._reads is not None else None
        if etag is not None:
            return etag
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
