"""S3's conditional requests through s3fs's client: writes and deletes (``If-None-Match``
/ ``If-Match``) for :mod:`shardvol.kvstore.lease`, and ranged reads that return the
object's ETag and may require one (``If-Match``), for versioned reads (see FsspecStore).

AWS S3 supports them all (conditional deletes on general purpose buckets since 2025), as
do MinIO and moto; a store that ignores the conditions would make the lease unsafe.
"""

from __future__ import annotations

from typing import Any

from fsspec.asyn import sync

from shardvol.errors import ByteRangeError, StoreError
from shardvol.kvstore.versioned_reads import range_header, read_each

# The condition failed (412), or a concurrent conditional write won (409).
_CONFLICT = {"PreconditionFailed", "ConditionalRequestConflict"}
_MISSING = {"NoSuchKey", "404"}


class S3ConditionalObjects:
    """Conditional operations on the objects of an ``s3fs.S3FileSystem``."""

    def __init__(self, fs: Any) -> None:
        self.fs = fs

    def _call(self, method: str, path: str, **kwargs: Any) -> dict | None:
        """The client call's response; None if the condition failed or the object is absent."""
        from botocore.exceptions import BotoCoreError, ClientError

        bucket, key, _ = self.fs.split_path(path)
        try:
            client = sync(self.fs.loop, self.fs.set_session)
            out = sync(self.fs.loop, getattr(client, method), Bucket=bucket, Key=key, **kwargs)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in _CONFLICT | _MISSING:
                return None
            raise StoreError(f"cannot {method} lock object {path}: {e}") from e
        except (BotoCoreError, OSError) as e:  # unreachable endpoint, credentials, ...
            raise StoreError(f"cannot {method} lock object {path}: {e}") from e
        self.fs.invalidate_cache(path)
        return out

    def create(self, path: str, body: bytes) -> str | None:
        out = self._call("put_object", path, Body=body, IfNoneMatch="*")
        return None if out is None else out["ETag"]

    def replace(self, path: str, body: bytes, version: str) -> str | None:
        out = self._call("put_object", path, Body=body, IfMatch=version)
        return None if out is None else out["ETag"]

    def current(self, path: str) -> tuple[str, bytes] | None:
        out = self._call("get_object", path)
        if out is None:
            return None
        body = sync(self.fs.loop, _read_body, out["Body"])
        return out["ETag"], body

    def delete(self, path: str, version: str) -> bool:
        return self._call("delete_object", path, IfMatch=version) is not None

    def read(
        self, requests: list[tuple[str, tuple[int, int | None] | None, str | None]]
    ) -> list[tuple[Any, str | None]]:
        """``(path, byte range or None, ETag the object must have or None)`` ->
        ``(bytes, or the exception: FileNotFoundError if absent, else botocore's error;
        the object's ETag or None)``, the requests sent concurrently."""
        client = sync(self.fs.loop, self.fs.set_session)
        return sync(self.fs.loop, self._read_all, client, requests)

    async def _read_all(self, client: Any, requests: list) -> list[tuple[Any, str | None]]:
        return await read_each(lambda *r: self._read_one(client, *r), requests)

    async def _read_one(self, client: Any, path: str, byte_range: tuple[int, int | None] | None,
                        etag: str | None) -> tuple[Any, str | None]:
        from botocore.exceptions import ClientError

        bucket, key, _ = self.fs.split_path(path)
        kwargs = dict(getattr(self.fs, "req_kw", {}), Bucket=bucket, Key=key)
        if etag is not None:
            kwargs["IfMatch"] = etag
        try:
            if byte_range is not None and byte_range[0] == byte_range[1]:  # no bytes: no Range
                head = await client.head_object(**kwargs)
                if byte_range[0] > head["ContentLength"]:
                    return ByteRangeError(
                        f"byte range {byte_range} of {path} is past its end"
                    ), None
                return b"", head["ETag"]
            if byte_range is not None:
                kwargs["Range"] = range_header(byte_range)
            out = await client.get_object(**kwargs)
            return await _read_body(out["Body"]), out["ETag"]
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in _MISSING:
                return FileNotFoundError(path), None
            raise


async def _read_body(stream: Any) -> bytes:
    async with stream as s:
        return await s.read()
