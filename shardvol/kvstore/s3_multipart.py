"""S3 multipart uploads: a large object sent as parts uploaded concurrently, each part
retried on its own, so that one object is not paced by one connection and a failure
costs one part, not the whole object.

The object appears only when the upload is completed (atomic, like a PUT); an upload
that fails is aborted, so no parts are left behind to be billed.  (A create whose answer
was lost and which was sent again leaves an upload without parts: S3 cannot tell it from
another writer's, so it is left to the bucket's ``AbortIncompleteMultipartUpload``
lifecycle rule.)  A completion may be conditional (``If-None-Match: *``: created only if
absent).  A completion whose answer was lost and whose repeat fails (the upload is gone,
or the object now exists) is recognised as this upload's own by the object's ETag, which
S3 derives from the parts'.  The requests go through shardvol's client
(:class:`~shardvol.kvstore.s3_writes.DirectParts`: each part signed with its SHA-256) or
through botocore (:class:`BotocoreParts`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Sequence
from typing import Any, Protocol

from shardvol.errors import InvalidArgumentError, StoreError
from shardvol.kvstore.base import pieces_in_range
from shardvol.kvstore.conditional import CONFLICT, MISSING
from shardvol.kvstore.remote import Requests
from shardvol.kvstore.s3_conditional import call_kwargs

MIN_PART = 5 << 20  # S3's smallest part (all but the last)
MAX_PART = 5 << 30  # S3's largest part, and largest PUT
MAX_PARTS = 10_000  # S3's most parts of one upload
PARTS_AT_ONCE = 8  # parts of one upload in flight at most


def part_bounds(size: int, part_size: int) -> list[tuple[int, int]]:
    """``[start, stop)`` of each part of ``size`` bytes: parts of ``part_size`` (at least
    S3's 5 MiB, and larger where 10,000 would not hold the object)."""
    part = max(part_size, MIN_PART, -(-size // MAX_PARTS))
    return [(a, min(a + part, size)) for a in range(0, size, part)]


def multipart_etag(part_etags: list[str]) -> str | None:
    """The ETag S3 gives an object completed from parts with these ETags (the MD5 of their
    binary MD5s, then ``-<number of parts>``); None if they are not MD5s (SSE-KMS)."""
    try:
        digests = b"".join(bytes.fromhex(e.strip('"')) for e in part_etags)
    except ValueError:
        return None
    return f'"{hashlib.md5(digests).hexdigest()}-{len(part_etags)}"'


class PartCalls(Protocol):
    """The requests of one object's multipart upload, through one client; each is one
    attempt (the caller retries), and S3's errors are raised as :meth:`code` reads them."""

    async def create(self) -> str:
        """A new upload; its id."""

    async def part(self, upload_id: str, number: int,
                   body: Sequence[memoryview]) -> dict[str, Any]:
        """Part ``number`` (the concatenation of ``body``'s pieces) sent; what the
        completion lists of it (``PartNumber``, ``ETag``, a checksum)."""

    async def complete(self, upload_id: str, parts: list[dict[str, Any]],
                       if_none_match: bool) -> str:
        """The upload completed from ``parts``; the object's ETag."""

    async def abort(self, upload_id: str) -> None:
        """The upload and its parts gone."""

    async def etag(self) -> str | None:
        """The object's ETag (a HEAD); None if it is absent."""

    def code(self, error: BaseException) -> str | None:
        """The S3 error code of an error these calls raised (None: not S3's answer)."""


class BotocoreParts:
    """The calls of a multipart upload of ``path`` through the s3fs filesystem ``fs``'s
    client: its ``s3_additional_kwargs`` (encryption, storage class, metadata) apply to
    every request that takes them; parts carry CRC32 checksums, which the completion lists,
    as AWS's own transfer manager does."""

    def __init__(self, fs: Any, path: str) -> None:
        self.fs, self.path = fs, path
        self.bucket, self.key, _ = fs.split_path(path)

    async def _call(self, method: str, **kwargs: Any) -> Any:
        client = await self.fs.set_session()
        bound = getattr(client, method)
        return await bound(**call_kwargs(self.fs, bound, Bucket=self.bucket, Key=self.key,
                                         **kwargs))

    async def create(self) -> str:
        return str((await self._call("create_multipart_upload",
                                     ChecksumAlgorithm="CRC32"))["UploadId"])

    async def part(self, upload_id: str, number: int,
                   body: Sequence[memoryview]) -> dict[str, Any]:
        # (botocore takes bytes: the part's copy lives while it is sent)
        out = await self._call("upload_part", UploadId=upload_id, PartNumber=number,
                               Body=b"".join(body), ChecksumAlgorithm="CRC32")
        done = {"PartNumber": number, "ETag": out["ETag"]}
        if "ChecksumCRC32" in out:  # (S3 returns it; stores that ignore checksums may not)
            done["ChecksumCRC32"] = out["ChecksumCRC32"]
        return done

    async def complete(self, upload_id: str, parts: list[dict[str, Any]],
                       if_none_match: bool) -> str:
        condition = {"IfNoneMatch": "*"} if if_none_match else {}
        return str((await self._call("complete_multipart_upload", UploadId=upload_id,
                                     MultipartUpload={"Parts": parts}, **condition))["ETag"])

    async def abort(self, upload_id: str) -> None:
        await self._call("abort_multipart_upload", UploadId=upload_id)

    async def etag(self) -> str | None:
        from botocore.exceptions import ClientError

        try:
            return str((await self._call("head_object"))["ETag"])
        except ClientError as e:
            if self.code(e) in MISSING | {"NotFound"}:
                return None
            raise

    def code(self, error: BaseException) -> str | None:
        response = getattr(error, "response", None)
        return response.get("Error", {}).get("Code") if isinstance(response, dict) else None


async def upload(calls: PartCalls, requests: Requests, path: str,
                 data: Sequence[bytes | memoryview], part_size: int,
                 if_none_match: bool = False) -> str | None:
    """Write the concatenation of ``data`` (never joined: each part is sent as views of
    the pieces it spans) at ``path`` by a multipart upload through ``calls``, its requests
    within ``requests``' budgets and retries; the new object's ETag, or None if
    ``if_none_match`` and the object existed."""
    upload_id = await requests.one(calls.create, f"S3 create_multipart_upload {path}")
    pieces = [v for v in (memoryview(p).cast("B") for p in data) if len(v)]
    bounds = part_bounds(sum(len(p) for p in pieces), part_size)
    room = asyncio.Semaphore(PARTS_AT_ONCE)

    async def send(number: int, start: int, stop: int) -> dict[str, Any]:
        async with room:
            body = list(pieces_in_range(pieces, start, stop))
            return await requests.one(lambda: calls.part(upload_id, number, body),
                                      f"S3 upload_part {number} of {len(bounds)} of {path}")

    completed = False
    try:
        tasks = [asyncio.ensure_future(send(i + 1, a, b)) for i, (a, b) in enumerate(bounds)]
        try:
            parts = await asyncio.gather(*tasks)
        finally:  # (a part failed: the others stop)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        attempts = 0

        async def attempt() -> str:
            nonlocal attempts
            attempts += 1
            return await calls.complete(upload_id, parts, if_none_match)

        try:
            done = await requests.one(attempt, f"S3 complete_multipart_upload {path}")
            completed = True
            return done
        except Exception as e:
            code = calls.code(e)
            if code in CONFLICT or (code == "NoSuchUpload" and attempts > 1):
                expected = multipart_etag([p["ETag"] for p in parts])
                now = await _etag_of(requests, calls, path)
                if expected is not None and now == expected:
                    return expected  # (completed by an attempt whose answer was lost)
                if code in CONFLICT and if_none_match:
                    return None
            raise
    finally:
        if not completed:  # (failed, or the object existed: no parts left behind)
            with contextlib.suppress(Exception):
                aborting = asyncio.ensure_future(requests.one(
                    lambda: calls.abort(upload_id), f"S3 abort_multipart_upload {path}"))
                await asyncio.shield(aborting)


async def _etag_of(requests: Requests, calls: PartCalls, path: str) -> str | None:
    """The object's ETag (None if absent); a HEAD that fails for good leaves the outcome of
    the write unknown, which is an error."""
    try:
        return await requests.one(calls.etag, f"S3 head_object {path}")
    except Exception as e:
        raise StoreError(f"cannot tell whether the upload of {path} completed: {e}") from e


def check_part_size(part_size: object, threshold: object) -> tuple[int, int]:
    """``(part_size, multipart_threshold)`` of a store, validated."""
    return _within_s3(part_size, "part_size"), _within_s3(threshold, "multipart_threshold")


def _within_s3(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not (
        MIN_PART <= value <= MAX_PART
    ):
        raise InvalidArgumentError(f"{name} must be an integer from {MIN_PART} to {MAX_PART} "
                                   f"bytes (S3's smallest part and largest PUT), got {value!r}")
    return value
