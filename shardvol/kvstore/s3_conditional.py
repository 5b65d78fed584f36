"""S3's conditional requests through s3fs's client (through shardvol's: see
:mod:`shardvol.kvstore.s3_writes`): writes and deletes (``If-None-Match`` / ``If-Match``,
see :mod:`shardvol.kvstore.conditional`) for :mod:`shardvol.kvstore.lease` and for the
compare-and-swap updates of values (FsspecStore.set_if, delete_if), and ranged reads that
return the object's ETag and may require one (``If-Match``), for versioned reads (see
FsspecStore); an object stored with a ``Content-Encoding`` is read decoded (see
versioned_reads.entity).

AWS S3 supports them all (conditional deletes on general purpose buckets since 2025), as
do MinIO and moto; a store that ignores the conditions would make the lease unsafe.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from shardvol.compression import content_coding
from shardvol.errors import ByteRangeError, StoreError
from shardvol.kvstore.arriving import Arriving, fill
from shardvol.kvstore.conditional import CONFLICT, MISSING, ConditionalCalls, Outcome, joined
from shardvol.kvstore.remote import Requests, run_on
from shardvol.kvstore.versioned_reads import check_rest, entity, range_header


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
        if "Body" in kwargs:  # (botocore takes bytes)
            kwargs["Body"] = joined(kwargs["Body"])

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
