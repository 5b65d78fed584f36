"""S3 multipart uploads: a large object sent as parts uploaded concurrently, each part
retried on its own, so that one object is not paced by one connection and a failure
costs one part, not the whole object.

The object appears only when the upload is completed (atomic, like a PUT); an upload
that fails is aborted, so no parts are left behind to be billed.  A completion may be
conditional (``If-None-Match: *``: created only if absent).  A completion whose answer
was lost and whose repeat fails (the upload is gone, or the object now exists) is
recognised as this upload's own by the object's ETag, which S3 derives from the parts'.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from typing import Any

from shardvol.errors import InvalidArgumentError
from shardvol.kvstore.remote import Requests

MIN_PART = 5 << 20  # S3's smallest part (all but the last)
MAX_PARTS = 10_000  # S3's most parts of one upload
_CONFLICT = {"PreconditionFailed", "ConditionalRequestConflict"}


def part_bounds(size: int, part_size: int) -> list[tuple[int, int]]:
    """``[start, stop)`` of each part of ``size`` bytes: parts of ``part_size`` (at least
    S3's 5 MiB, and larger where 10,000 would not hold the object)."""
    part = max(part_size, MIN_PART, -(-size // MAX_PARTS))
    return [(a, min(a + part, size)) for a in range(0, size, part)]


def multipart_etag(part_etags: list[str]) -> str:
    """The ETag S3 gives an object completed from parts with these ETags (the MD5 of their
    binary MD5s, then ``-<number of parts>``)."""
    digests = b"".join(bytes.fromhex(e.strip('"')) for e in part_etags)
    return f'"{hashlib.md5(digests).hexdigest()}-{len(part_etags)}"'


async def upload(fs: Any, requests: Requests, path: str, data: bytes, part_size: int,
                 if_none_match: bool = False) -> str | None:
    """Write ``data`` at ``path`` of the s3fs filesystem ``fs`` by a multipart upload, its
    requests within ``requests``' budgets and retries; the new object's ETag, or None if
    ``if_none_match`` and the object existed."""
    from botocore.exceptions import ClientError

    client = await fs.set_session()
    bucket, key, _ = fs.split_path(path)
    where = dict(getattr(fs, "req_kw", {}), Bucket=bucket, Key=key)
    created = await requests.one(lambda: client.create_multipart_upload(**where),
                                 f"S3 create_multipart_upload {path}")
    upload_id = created["UploadId"]
    bounds = part_bounds(len(data), part_size)

    async def send(number: int, start: int, stop: int) -> str:
        out = await requests.one(
            lambda: client.upload_part(**where, UploadId=upload_id, PartNumber=number,
                                       Body=data[start:stop]),
            f"S3 upload_part {number} of {len(bounds)} of {path}")
        return str(out["ETag"])

    completed = False
    try:
        tasks = [asyncio.ensure_future(send(i + 1, a, b)) for i, (a, b) in enumerate(bounds)]
        try:
            etags = await asyncio.gather(*tasks)
        finally:  # (a part failed: the others stop)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        parts = [{"PartNumber": i + 1, "ETag": e} for i, e in enumerate(etags)]
        condition = {"IfNoneMatch": "*"} if if_none_match else {}
        attempts = 0

        async def complete() -> Any:
            nonlocal attempts
            attempts += 1
            return await client.complete_multipart_upload(
                **where, UploadId=upload_id, MultipartUpload={"Parts": parts}, **condition)

        try:
            done = await requests.one(complete, f"S3 complete_multipart_upload {path}")
            completed = True
            return str(done["ETag"])
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code")
            expected = multipart_etag(etags)
            if (code in _CONFLICT or (code == "NoSuchUpload" and attempts > 1)) and (
                await _etag_of(client, where) == expected
            ):
                completed = True  # (by an attempt whose answer was lost)
                return expected
            if code in _CONFLICT and if_none_match:
                return None
            raise
    finally:
        if not completed:  # (failed, or the object existed: no parts left behind)
            with contextlib.suppress(Exception):
                await asyncio.shield(requests.one(
                    lambda: client.abort_multipart_upload(**where, UploadId=upload_id),
                    f"S3 abort_multipart_upload {path}"))


async def _etag_of(client: Any, where: dict[str, Any]) -> str | None:
    from botocore.exceptions import ClientError

    try:
        return str((await client.head_object(**where))["ETag"])
    except ClientError:
        return None


def check_part_size(part_size: object, threshold: object) -> tuple[int, int]:
    """``(part_size, multipart_threshold)`` of a store, validated."""
    return _at_least_a_part(part_size, "part_size"), _at_least_a_part(threshold,
                                                                      "multipart_threshold")


def _at_least_a_part(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < MIN_PART:
        raise InvalidArgumentError(f"{name} must be an integer of at least {MIN_PART} bytes "
                                   f"(S3's smallest part), got {value!r}")
    return value
