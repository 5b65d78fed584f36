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
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from typing import cast

import fsspec

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
)
from shardvol.kvstore.lease import ConditionalObjects, Lease, acquire, lease_path
from shardvol.kvstore.versioned_reads import HttpVersionedReads, VersionedReads, strong_etag

READ_ONLY_PROTOCOLS = {"http", "https"}
# what changes when an object is rewritten, by backend (s3fs, gcsfs, HTTP, others)
_VERSION_FIELDS = ("ETag", "generation", "etag", "mtime", "LastModified", "last_modified")
S3_PROTOCOLS = {"s3", "s3a"}


def _status(exc: BaseException | None) -> int | None:
    """The HTTP status behind an fsspec error, looking through the exceptions it chains
    (s3fs turns botocore's errors into OSErrors)."""
    while exc is not None:
        status = getattr(exc, "status", None) or getattr(exc, "code", None)
        if isinstance(status, int):
            return status
        response = getattr(exc, "response", None)
        if isinstance(response, dict):
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if isinstance(status, int):
                return status
        exc = exc.__cause__ or exc.__context__
    return None


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
    """

    def __init__(self, url: str, lease_ttl: float = 30.0, lock_timeout: float | None = 600.0,
                 check_versions: bool = False, versioned_reads: bool = True,
                 **storage_options) -> None:
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

            s3 = S3ConditionalObjects(self.fs)
            self._objects = s3
            self._reads = s3 if versioned_reads else None
        # http(s) reads all go through our GETs, which read the status and Content-Range
        self._http = HttpVersionedReads(self.fs) if self.read_only else None
        if self._http is not None and versioned_reads:
            self._reads = self._http
        self.locks_across_processes = self._objects is not None
        self._leases: dict[str, Lease] = {}
        self.check_versions = check_versions

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
            if _status(result) == 412:
                raise VersionChangedError(
                    f"{key!r} in {self.url} was replaced since it was last read", key
                ) from result
            if _status(result) == 416:
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
        paths = [self._path(k) for k, _ in reqs]
        starts = [None if r is None else r[0] for _, r in reqs]
        ends = [None if r is None else r[1] for _, r in reqs]
        try:
            results = self.fs.cat_ranges(paths, starts, ends, on_error="return")
        except FileNotFoundError:
            results = [FileNotFoundError()] * len(reqs)
        return [self._finish(k, r, res) for (k, r), res in zip(reqs, results)]

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
        try:
            self.fs.pipe_file(self._path(key), bytes(value))
        except Exception as e:
            raise StoreError(f"cannot write {key!r} to {self.url}: {e}") from e

    def delete(self, key: str) -> None:
        self._require_writable(key)
        self._check_lease(key)
        try:
            self.fs.rm_file(self._path(key))
        except FileNotFoundError:
            pass
        except Exception as e:
            raise StoreError(f"cannot delete {key!r} in {self.url}: {e}") from e

    def list(self, prefix: str = "") -> list[str]:
        check_prefix(prefix)
        head = prefix.rpartition("/")[0]
        base = f"{self.root}/{head}" if head else self.root
        try:
            found = self.fs.find(base)
        except (FileNotFoundError, NotImplementedError):
            return []
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
            return self.fs.info(path)
        except FileNotFoundError:
            return None
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
