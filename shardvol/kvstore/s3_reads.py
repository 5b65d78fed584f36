"""S3's GETs through shardvol's HTTP client, signed here (SigV4), so that S3 reads take the
path of HTTP(S) reads: bodies received straight into their buffers, the same versioned-read
logic (:class:`~shardvol.kvstore.versioned_reads.HttpVersionedReads`).

botocore still decides where a bucket's objects are and how requests are signed: the first
read of a bucket asks s3fs's client for a presigned URL of a made-up key, which gives the
URL prefix of the bucket's keys (endpoint, addressing style), and the client's signer gives
the region and service to sign for; each request is then signed with the client's current
credentials (temporary ones are refreshed as botocore refreshes them), or not at all for
``anon=True``.  Reads go through botocore as before for a filesystem set up with options
this path does not follow (request options: SSE-C keys, requester pays; ``client_kwargs``
beyond the endpoint and region; other ``config_kwargs``; version awareness), for access
point ARNs and directory buckets, and for a bucket that S3 says is in another region than
the one the client signs for (botocore follows it there).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple
from urllib.parse import quote, urlsplit

from shardvol.errors import StoreError
from shardvol.kvstore.arriving import Arriving
from shardvol.kvstore.http_client import HttpStatusError, client
from shardvol.kvstore.s3_conditional import S3ConditionalObjects
from shardvol.kvstore.sigv4 import Credentials, signed_headers
from shardvol.kvstore.versioned_reads import (
    Answer,
    HttpVersionedReads,
    ReadResult,
    error_body,
    etag_condition,
    etag_version,
)

#: The botocore ``config_kwargs`` these reads follow (anything else: botocore's reads): the
#: store's own (see s3_filesystem), and those that only change the URL of a bucket's keys
#: or the signature (which the first read asks botocore for).
CONFIG = frozenset({"retries", "max_pool_connections", "read_timeout", "connect_timeout",
                    "s3", "region_name", "signature_version"})
_XML_FIELD = re.compile(rb"<(Code|Message|Region)>([^<]*)</\1>")


class _Bucket(NamedTuple):
    """Where a bucket's keys are (``prefix`` + the key, percent-encoded), and the scope
    its requests are signed for (None: unsigned, as for ``anon=True``)."""

    prefix: str
    region: str | None
    service: str


class ToBotocore(Exception):
    """This bucket's reads go through botocore: S3 answered that it is in another region
    than the one signed for, or it is of a kind signed otherwise."""


def plain(fs: Any) -> bool:
    """Whether the reads of the s3fs filesystem ``fs`` can go through shardvol's client."""
    return (not fs.req_kw and not fs.s3_additional_kwargs and not fs.version_aware
            and set(fs.client_kwargs) <= {"endpoint_url", "region_name"}
            and set(fs.config_kwargs) <= CONFIG)


class S3Transport:
    """Signed requests for the objects of an s3fs filesystem (see the module); versions
    are ETags."""

    version = staticmethod(etag_version)

    def __init__(self, fs: Any) -> None:
        self.fs = fs
        self._buckets: dict[str, _Bucket] = {}

    async def _bucket(self, bucket: str) -> _Bucket:
        found = self._buckets.get(bucket)
        if found is None:
            from botocore import UNSIGNED

            if ":" in bucket or bucket.endswith("--x-s3"):  # (access points, S3 Express)
                raise ToBotocore(f"{bucket} is an ARN or a directory bucket")
            s3 = await self.fs.set_session()
            signer = s3._request_signer
            if signer._signature_version not in (UNSIGNED, "s3v4", "v4"):
                raise ToBotocore(f"signature version {signer._signature_version}")
            url = await s3.generate_presigned_url("get_object",
                                                  Params={"Bucket": bucket, "Key": "k"})
            parts = urlsplit(url)
            if not parts.path.endswith("/k"):
                raise StoreError(f"s3://{bucket}: botocore's URL of its keys is {url}")
            unsigned = signer._signature_version is UNSIGNED
            found = self._buckets[bucket] = _Bucket(
                f"{parts.scheme}://{parts.netloc}{parts.path[:-1]}",
                None if unsigned else signer._region_name, signer._signing_name)
        return found

    def headers(self) -> dict[str, str]:
        return {}

    async def _credentials(self) -> Credentials:
        s3 = await self.fs.set_session()
        frozen = await s3._request_signer._credentials.get_frozen_credentials()
        return Credentials(frozen.access_key, frozen.secret_key, frozen.token)

    @contextlib.asynccontextmanager
    async def request(self, method: str, path: str, headers: dict[str, str],
                      stall: float | None, version: str | None) -> AsyncIterator[Answer]:
        name, key, _ = self.fs.split_path(path)
        bucket = await self._bucket(name)
        url = bucket.prefix + quote(key, safe="/~")
        headers = etag_condition(headers, version)
        if bucket.region is not None:
            headers = {**headers, **signed_headers(method, url, await self._credentials(),
                                                   bucket.region, bucket.service)}
        async with client().request(method, url, headers, stall) as r:
            if r.status >= 300 and r.status not in (304, 412, 416):
                await _raise_s3_error(r, f"s3://{path}", bucket)
            yield r


async def _raise_s3_error(r: Any, what: str, bucket: _Bucket) -> None:
    """Raise what an S3 error answer means; return for an absent key (404 NoSuchKey, or a
    HEAD's 404), which the reads report as missing."""
    fields = {m[1]: m[2] for m in _XML_FIELD.finditer(await error_body(r))}
    code = fields.get(b"Code", b"").decode("utf-8", "replace")
    region = r.headers.get("x-amz-bucket-region") or fields.get(b"Region", b"").decode()
    if region and region != bucket.region and r.status in (301, 307, 400):
        raise ToBotocore(f"{what} is in {region}")
    if r.status == 404 and code in ("", "NoSuchKey"):
        return
    message = fields.get(b"Message", b"").decode("utf-8", "replace")
    reason = f"{code}: {message}" if code else r.reason
    if r.status < 400:  # (a redirect S3 gives no Location for)
        raise StoreError(f"{what}: HTTP {r.status} {reason}")
    # (RequestTimeout: S3 waited too long for the request; retried as a 408)
    status = 408 if code == "RequestTimeout" else r.status
    raise HttpStatusError(what, status, reason, r.headers)


class S3Reads:
    """The versioned reads of an S3 store (see VersionedReads): through shardvol's client,
    and through botocore (``botocore``, S3ConditionalObjects) for the buckets the client
    does not sign for (see ToBotocore), from the first read that finds it out."""

    def __init__(self, fs: Any, botocore: S3ConditionalObjects, stall: float | None) -> None:
        self.fs, self.botocore = fs, botocore
        self.direct = HttpVersionedReads(S3Transport(fs), stall)
        self._elsewhere: set[str] = set()  # buckets read through botocore

    def _direct(self, path: str) -> bool:
        return self.fs.split_path(path)[0] not in self._elsewhere

    async def read_one(self, path: str, byte_range: tuple[int, int | None] | None,
                       etag: str | None) -> ReadResult:
        if self._direct(path):
            try:
                return await self.direct.read_one(path, byte_range, etag)
            except ToBotocore:
                self._elsewhere.add(self.fs.split_path(path)[0])
        return await self.botocore.read_one(path, byte_range, etag)

    async def read_into(self, path: str, value: Arriving, arrived: Callable[[], None]) -> None:
        if self._direct(path):
            try:
                return await self.direct.read_into(path, value, arrived)
            except ToBotocore:  # (the first answer: no bytes came in)
                self._elsewhere.add(self.fs.split_path(path)[0])
        await self.botocore.read_into(path, value, arrived)
