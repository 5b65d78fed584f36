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
S3 derives from the parts'.  Parts carry CRC32 checksums, which the completion lists, as
AWS's own transfer manager does.  The filesystem's ``s3_additional_kwargs`` (encryption,
storage class, metadata) apply to every request that takes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Awaitable, Callable
from typing import Any

from shardvol.errors import InvalidArgumentError, StoreError
from shardvol.kvstore.conditional import CONFLICT, MISSING
from shardvol.kvstore.remote import Requests
from shardvol.kvstore.s3_conditional import call_kwargs

MIN_PART = 5 << 20  # S3's smallest part (all but the last)
MAX_PART = 5 << 30  # S3's largest part, and largest PUT
MAX_PARTS = 10_000  # S3's most parts of one upload
PARTS_AT_ONCE = 8  # parts of one upload in flight at most (each holds a copy of its bytes)


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


async def upload(fs: Any, requests: Requests, path: str, data: bytes, part_size: int,
                 if_none_match: bool = False) -> str | None:
    """Write ``data`` at ``path`` of the s3fs filesystem ``fs`` by a multipart upload, its
    requests within ``requests``' budgets and retries; the new object's ETag, or None if
    ``if_none_match`` and the object existed."""
    from botocore.exceptions import ClientError

    client = await fs.set_session()
    bucket, key, _ = fs.split_path(path)

    def call(method: str, **kwargs: Any) -> Callable[[], Awaitable[Any]]:
        bound = getattr(client, method)
        return lambda: bound(**call_kwargs(fs, bound, Bucket=bucket, Key=key, **kwargs))

    created = await requests.one(call("create_multipart_upload", ChecksumAlgorithm="CRC32"),
                                 f"S3 create_multipart_upload {path}")
    upload_id = created["UploadId"]
    bounds = part_bounds(len(data), part_size)
    room = asyncio.Semaphore(PARTS_AT_ONCE)

    async def send(number: int, start: int, stop: int) -> dict[str, Any]:
        async with room:  # (the part's copy of its bytes lives while it is sent)
            part = call("upload_part", UploadId=upload_id, PartNumber=number,
                        Body=data[start:stop], ChecksumAlgorithm="CRC32")
            out = await requests.one(part, f"S3 upload_part {number} of {len(bounds)} of {path}")
        done = {"PartNumber": number, "ETag": out["ETag"]}
        if "ChecksumCRC32" in out:  # (S3 returns it; stores that ignore checksums may not)
            done["ChecksumCRC32"] = out["ChecksumCRC32"]
        return done

    completed = False
    try:
        tasks = [asyncio.ensure_future(send(i + 1, a, b)) for i, (a, b) in enumerate(bounds)]
        try:
            parts = await asyncio.gather(*tasks)
        finally:  # (a part failed: the others stop)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        condition = {"IfNoneMatch": "*"} if if_none_match else {}
        complete = call("complete_multipart_upload", UploadId=upload_id,
                        MultipartUpload={"Parts": parts}, **condition)
        attempts = 0

        async def attempt() -> Any:
            nonlocal attempts
            attempts += 1
            return await complete()

        try:
            done = await requests.one(attempt, f"S3 complete_multipart_upload {path}")
            completed = True
            return str(done["ETag"])
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code")
            if code in CONFLICT or (code == "NoSuchUpload" and attempts > 1):
                expected = multipart_etag([p["ETag"] for p in parts])
                now = await _etag_of(requests, call("head_object"), path)
                if expected is not None and now == expected:
                    return expected  # (completed by an attempt whose answer was lost)
                if code in CONFLICT and if_none_match:
                    return None
            raise
    finally:
        if not completed:  # (failed, or the object existed: no parts left behind)
            abort = call("abort_multipart_upload", UploadId=upload_id)
            with contextlib.suppress(Exception):
                aborting = asyncio.ensure_future(
                    requests.one(abort, f"S3 abort_multipart_upload {path}"))
                await asyncio.shield(aborting)


async def _etag_of(requests: Requests, head: Callable[[], Awaitable[Any]],
                   path: str) -> str | None:
    """The object's ETag (None if absent); a HEAD that fails for good leaves the outcome of
    the write unknown, which is an error."""
    from botocore.exceptions import ClientError

    try:
        return str((await requests.one(head, f"S3 head_object {path}"))["ETag"])
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") in MISSING | {"NotFound"}:
            return None
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
