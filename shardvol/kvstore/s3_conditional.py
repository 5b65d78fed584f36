"""S3's conditional writes and deletes (``If-None-Match`` / ``If-Match``) through s3fs's
client, for :mod:`shardvol.kvstore.lease`.

AWS S3 supports all three (conditional deletes on general purpose buckets since 2025), as
do MinIO and moto; a store that ignores the conditions would make the lease unsafe.
"""

from __future__ import annotations

from typing import Any

from fsspec.asyn import sync

from shardvol.errors import StoreError

# The condition failed (412), or a concurrent conditional write won (409).
_CONFLICT = {"PreconditionFailed", "ConditionalRequestConflict"}
_MISSING = {"NoSuchKey", "404"}


class S3ConditionalObjects:
    """Conditional operations on the objects of an ``s3fs.S3FileSystem``."""

    def __init__(self, fs: Any) -> None:
        self.fs = fs

    def _call(self, method: str, path: str, **kwargs: Any) -> dict | None:
        """The client call's response; None if the condition failed or the object is absent."""
        from botocore.exceptions import ClientError

        bucket, key, _ = self.fs.split_path(path)
        client = sync(self.fs.loop, self.fs.set_session)
        try:
            out = sync(self.fs.loop, getattr(client, method), Bucket=bucket, Key=key, **kwargs)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in _CONFLICT | _MISSING:
                return None
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


async def _read_body(stream: Any) -> bytes:
    async with stream as s:
        return await s.read()
