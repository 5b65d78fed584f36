"""S3's conditional requests (through s3fs's client here; through shardvol's, see
:mod:`shardvol.kvstore.s3_writes`): writes and deletes (``If-None-Match``
/ ``If-Match``) for :mod:`shardvol.kvstore.lease` and for the compare-and-swap updates of
values (FsspecStore.set_if, delete_if), and ranged reads that return the object's ETag and
may require one (``If-Match``), for versioned reads (see FsspecStore); an object stored
with a ``Content-Encoding`` is read decoded (see versioned_reads.entity).

AWS S3 supports them all (conditional deletes on general purpose buckets since 2025), as
do MinIO and moto; a store that ignores the conditions would make the lease unsafe.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from shardvol.compression import content_coding
from shardvol.errors import ByteRangeError, StoreError
from shardvol.kvstore.arriving import Arriving, fill
from shardvol.kvstore.remote import Requests, run_on
from shardvol.kvstore.versioned_reads import check_rest, entity, range_header

# S3 error codes: the condition failed (412), or a concurrent conditional write won (409)
CONFLICT = {"PreconditionFailed", "ConditionalRequestConflict"}
MISSING = {"NoSuchKey", "404"}  # (no such object; "404": a HEAD's, which has no body)


class Outcome:
    """How a conditional call ended: its response, or why not (the S3 error code of a
    failed condition or an absent object)."""

    def __init__(self) -> None:
        self.out: dict | None = None
        self.code: str | None = None
        self.attempts = 0


class ConditionalCalls:
    """Conditional operations on S3 objects, made of one primitive, :meth:`_call` (a
    request named as botocore names it: ``put_object``, ``get_object``, ``delete_object``,
    with its ``Body``, ``IfMatch``, ``IfNoneMatch``), each retried on transient failures.

    A conditional write whose answer was lost (a dropped connection) may have succeeded
    before it is sent again (by these retries, or by a client that resends idempotent
    requests on a closed keep-alive connection); the repeat then fails its condition.
    So a create or replace that fails its condition but finds the object holding exactly
    its body has succeeded (lease bodies are unique; for other values the object then holds
    what the write meant it to hold, whoever wrote it), and a conditional delete that finds
    the object gone is done.
    """

    def _call(self, method: str, path: str, read_body: bool = False, **kwargs: Any) -> Outcome:
        """The request, retried; its outcome (a failed condition and an absent object are
        outcomes, other failures StoreErrors)."""
        raise NotImplementedError

    def _ours(self, path: str, outcome: Outcome, body: bytes) -> str | None:
        """The version of the object a conditional write wrote, or None if its condition
        failed: unless the object holds ``body`` (the write went through, then its answer
        was lost and a repeat failed the condition)."""
        if outcome.out is not None:
            return str(outcome.out["ETag"])
        if outcome.code not in CONFLICT:
            return None
        now = self.current(path)
        return now[0] if now is not None and now[1] == body else None

    def create(self, path: str, body: bytes) -> str | None:
        return self._ours(path, self._call("put_object", path, Body=body, IfNoneMatch="*"), body)

    def replace(self, path: str, body: bytes, version: str) -> str | None:
        return self._ours(path, self._call("put_object", path, Body=body, IfMatch=version), body)

    def current(self, path: str) -> tuple[str, bytes] | None:
        outcome = self._call("get_object", path, read_body=True)
        if outcome.out is None:
            return None
        return outcome.out["ETag"], outcome.out["Body"]

    def delete(self, path: str, version: str, repeat_is_done: bool = True) -> bool:
        """A delete that finds the object gone is taken as done; so is one that finds it at
        another version after an attempt whose outcome was not known (it may have deleted
        it, and a waiter created it anew), unless not ``repeat_is_done``: an object of data
        (not a lease) may have been changed by another writer while that attempt failed
        without deleting it, so its delete is reported undone, to be redone from a read."""
        outcome = self._call("delete_object", path, IfMatch=version)
        return (outcome.out is not None or outcome.code in MISSING
                or (repeat_is_done and outcome.attempts > 1 and outcome.code in CONFLICT))


class S3ConditionalObjects(ConditionalCalls):
    """Conditional operations on the objects of an ``s3fs.S3FileSystem`` (see
    ConditionalCalls), and its reads (for buckets shardvol's client does not sign for)."""

    def __init__(self, fs: Callable[[], Any], runner: Requests) -> None:
        """``fs()``: the filesystem (a store makes it at first use)."""
        self._fs = fs
        self.runner = runner

    @property
    def fs(self) -> Any:
        return self._fs()

    def _call(self, method: str, path: str, read_body: bool = False, **kwargs: Any) -> Outcome:
        from botocore.exceptions import BotoCoreError, ClientError

        bucket, key, _ = self.fs.split_path(path)
        outcome = Outcome()

        async def attempt() -> dict:
            outcome.attempts += 1
            client = await self.fs.set_session()
            call = getattr(client, method)
            out: dict = await call(**call_kwargs(self.fs, call, Bucket=bucket, Key=key, **kwargs))
            if read_body:
                out["Body"] = await _read_body(out["Body"])
            return out

        try:
            outcome.out = run_on(self.fs.loop, self.runner.one(attempt, f"S3 {method} {path}"))
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code")
            if code not in CONFLICT | MISSING:
                raise StoreError(f"cannot {method} {path}: {e}") from e
            outcome.code = code
        except StoreError:
            raise
        except (BotoCoreError, OSError) as e:  # unreachable endpoint, credentials, ...
            raise StoreError(f"cannot {method} {path}: {e}") from e
        self.fs.invalidate_cache(path)
        return outcome

    async def read_one(self, path: str, byte_range: tuple[int, int | None] | None,
                       etag: str | None) -> tuple[Any, str | None]:
        """A GET (see VersionedReads); botocore's errors other than NoSuchKey are raised."""
        from botocore.exceptions import ClientError

        client = await self.fs.set_session()
        bucket, key, _ = self.fs.split_path(path)
        kwargs: dict[str, Any] = {"Bucket": bucket, "Key": key}
        if etag is not None:
            kwargs["IfMatch"] = etag
        try:
            if byte_range is not None and byte_range[0] == byte_range[1]:  # no bytes: no Range
                head = await client.head_object(**call_kwargs(self.fs, client.head_object,
                                                              **kwargs))
                if byte_range[0] > head["ContentLength"]:
                    return ByteRangeError(
                        f"byte range {byte_range} of {path} is past its end"
                    ), None
                return b"", head["ETag"]
            if byte_range is not None:
                kwargs["Range"] = range_header(byte_range)
            out = await client.get_object(**call_kwargs(self.fs, client.get_object, **kwargs))
            body = await _read_body(out["Body"])
            return await entity(body, out.get("ContentEncoding"), path, byte_range), out["ETag"]
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in MISSING:
                return FileNotFoundError(path), None
            raise

    async def read_into(self, path: str, value: Arriving, arrived: Callable[[], None]) -> None:
        """The whole object into ``value`` as its bytes arrive (see VersionedReads): an
        attempt after a first answer requires its version, and asks only for the rest
        once some bytes came in."""
        from botocore.exceptions import ClientError

        client = await self.fs.set_session()
        bucket, key, _ = self.fs.split_path(path)
        kwargs: dict[str, Any] = {"Bucket": bucket, "Key": key}
        resume = value.have
        if value.size is not None:  # (a later attempt: the same version, or 412)
            kwargs["IfMatch"] = str(value.version)
        if resume:
            kwargs["Range"] = f"bytes={resume}-"
        try:
            out = await client.get_object(**call_kwargs(self.fs, client.get_object, **kwargs))
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in MISSING:
                value.complete(None, None)
                return
            raise
        if not resume and content_coding(out.get("ContentEncoding")) is not None:
            decoded = await entity(await _read_body(out["Body"]), out["ContentEncoding"], path)
            if isinstance(decoded, StoreError):
                raise decoded
            value.complete(decoded, out["ETag"])  # (whole: a compressed value cannot resume)
            return
        async with out["Body"] as body:
            if resume:
                check_rest(path, 206, out.get("ContentRange"), resume, value.size)
            else:
                value.start(int(out["ContentLength"]), out["ETag"])
            await fill(value, body.iter_chunks(1 << 20), arrived, path)


def call_kwargs(fs: Any, method: Any, **kwargs: Any) -> dict[str, Any]:
    """The arguments of one call of the client method ``method``: ``kwargs`` and the
    filesystem's request options (``req_kw``; ``s3_additional_kwargs``: encryption, storage
    class, metadata, SSE-C keys), those the operation takes (s3fs's own filter, after
    ``fs.set_session()``)."""
    return cast(dict[str, Any], fs._get_s3_method_kwargs(method, **kwargs))


async def _read_body(stream: Any) -> bytes:
    async with stream as s:
        return await s.read()
