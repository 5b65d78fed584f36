"""S3's PUTs and DELETEs through shardvol's HTTP client (the transport of the reads, see
:mod:`shardvol.kvstore.s3_reads`), each signed with its body's SHA-256, which S3 checks:
unconditional ones for a store's writes, conditional ones (``If-None-Match``,
``If-Match``) for its leases and compare-and-swap updates (see
:class:`~shardvol.kvstore.conditional.ConditionalCalls`).  botocore's per-request
work, some 2 ms of CPU a PUT through s3fs, is what bounded a store's writes of many small
objects; and a store that writes no large object imports neither s3fs nor botocore.

Multipart uploads (:mod:`shardvol.kvstore.s3_multipart`) take the client too
(:class:`DirectParts`).  Buckets the client does not sign for (see ToBotocore) are written
through s3fs's client from the first request that finds it out, as they are read;
listings go through it always.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import re
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from shardvol.errors import StoreError
from shardvol.kvstore.conditional import (
    CONFLICT,
    OUTCOME_OF_STATUS,
    ConditionalCalls,
    Outcome,
    parts_of,
)
from shardvol.kvstore.http_client import HttpStatusError
from shardvol.kvstore.remote import run_on
from shardvol.kvstore.s3_conditional import S3ConditionalObjects
from shardvol.kvstore.s3_reads import S3Error, S3Reads, S3Transport, ToBotocore
from shardvol.kvstore.sigv4 import EMPTY_SHA256, payload_hash, query
from shardvol.kvstore.versioned_reads import entity

_VERBS = {"put_object": "PUT", "get_object": "GET", "delete_object": "DELETE"}
_CONDITIONS = {"IfMatch": "If-Match", "IfNoneMatch": "If-None-Match"}


class S3DirectObjects(ConditionalCalls):
    """The writes of a store whose reads are ``reads``: conditional ones retried by
    ``botocore.runner`` on the I/O loop ``loop()`` (botocore, s3fs's client, takes the
    buckets the client does not sign for); unconditional ones one attempt at a time
    (:meth:`put`, :meth:`remove`), for the store to retry.  ``written(path)`` is called
    after each write (s3fs's listings of the path are stale)."""

    def __init__(self, reads: S3Reads, botocore: S3ConditionalObjects,
                 loop: Callable[[], asyncio.AbstractEventLoop],
                 written: Callable[[str], None]) -> None:
        self.transport, self.stall = reads.transport, reads.direct.stall
        self.botocore, self.runner = botocore, botocore.runner
        self._loop, self._written = loop, written

    #: what :meth:`put` is given with a body: its SHA-256, computed by the caller (off
    #: the event loop)
    checksum = staticmethod(payload_hash)

    def parts(self, path: str) -> DirectParts:
        """The calls of a multipart upload of ``path`` through the client."""
        return DirectParts(self.transport, self.stall, path)

    async def put(self, path: str, parts: Sequence[bytes | memoryview], sha256: str) -> None:
        """One attempt to write the object at ``path``: ``parts`` joined, whose SHA-256 is
        ``sha256``."""
        if not await self._unconditional("PUT", path, parts, sha256):
            await self.botocore.fs._pipe_file(path, b"".join(parts))

    async def remove(self, path: str) -> None:
        """One attempt to delete the object at ``path`` (absent already: done)."""
        if not await self._unconditional("DELETE", path):
            try:
                await self.botocore.fs._rm_file(path)
            except FileNotFoundError:
                pass

    async def _unconditional(self, method: str, path: str,
                             parts: Sequence[bytes | memoryview] | None = None,
                             sha256: str = EMPTY_SHA256) -> bool:
        """One attempt of ``method`` through the client; False if the bucket is one botocore
        must take."""
        try:
            async with self.transport.request(method, path, {}, self.stall, None, parts,
                                              sha256) as r:
                if r.status != 404 or method != "DELETE":  # (absent: deleted already)
                    r.raise_for_status()  # (S3's errors: raised by the transport)
                    await r.read()
                return True
        except ToBotocore:
            return False
        finally:
            self._written(path)

    def _call(self, method: str, path: str, read_body: bool = False, **kwargs: Any) -> Outcome:
        with contextlib.suppress(ToBotocore):
            return self._direct(method, path, **kwargs)
        return self.botocore._call(method, path, read_body, **kwargs)

    def _direct(self, method: str, path: str, **kwargs: Any) -> Outcome:
        verb, outcome = _VERBS[method], Outcome()
        body = kwargs.get("Body")
        parts = None if body is None else parts_of(body)
        sha256 = EMPTY_SHA256 if parts is None else payload_hash(parts)
        headers = {_CONDITIONS[k]: v for k, v in kwargs.items() if k in _CONDITIONS}

        async def attempt() -> dict | None:
            outcome.attempts += 1
            async with self.transport.request(verb, path, headers, self.stall, None, parts,
                                              sha256) as r:
                outcome.code = OUTCOME_OF_STATUS.get(r.status)
                if outcome.code is not None:  # (its body: read by the transport, or not kept)
                    return None
                r.raise_for_status()  # (S3's errors: raised by the transport)
                data = await r.read()
                if verb == "GET":
                    decoded = await entity(data, r.headers.get("content-encoding"), path)
                    if isinstance(decoded, StoreError):
                        raise decoded
                    data = decoded
                return {"ETag": r.headers.get("etag"), "Body": bytes(data)}

        try:
            outcome.out = run_on(self._loop(), self.runner.one(attempt, f"S3 {verb} {path}"))
        except S3Error as e:
            if e.s3_code not in CONFLICT:
                raise StoreError(f"cannot {method} {path}: {e}") from e
            outcome.code = e.s3_code
        except (HttpStatusError, OSError) as e:  # (refused for good, TLS that fails, ...)
            raise StoreError(f"cannot {method} {path}: {e}") from e
        finally:
            if verb != "GET":
                self._written(path)
        return outcome


class DirectParts:
    """The calls of a multipart upload of ``path`` (see s3_multipart.PartCalls) through
    ``transport``: each part signed with its SHA-256 (computed off the event loop), which
    S3 checks, so the completion lists no checksums."""

    def __init__(self, transport: S3Transport, stall: float | None, path: str) -> None:
        self.transport, self.stall, self.path = transport, stall, path

    @contextlib.asynccontextmanager
    async def _request(self, method: str, fields: list[tuple[str, str]],
                       headers: dict[str, str] | None = None,
                       body: Sequence[bytes | memoryview] | None = None,
                       sha256: str = EMPTY_SHA256) -> AsyncIterator[Any]:
        async with self.transport.request(method, self.path, headers or {}, self.stall, None,
                                          body, sha256, query(fields)) as r:
            if r.status >= 300:  # (a 404 or 412 the transport let through)
                raise S3Error(f"s3://{self.path}", r.status, "", r.headers,
                              {404: "NoSuchUpload", 412: "PreconditionFailed"}.get(r.status, ""))
            yield r

    async def create(self) -> str:
        async with self._request("POST", [("uploads", "")]) as r:
            return _xml_field(bytes(await r.read()), "UploadId", self.path)

    async def part(self, upload_id: str, number: int,
                   body: Sequence[memoryview]) -> dict[str, Any]:
        sha256 = await asyncio.get_running_loop().run_in_executor(None, payload_hash, body)
        async with self._request("PUT", [("partNumber", str(number)), ("uploadId", upload_id)],
                                 body=body, sha256=sha256) as r:
            await r.read()
            etag = r.headers.get("etag")
        if not etag:
            raise StoreError(f"s3://{self.path}: part {number} answered without an ETag")
        return {"PartNumber": str(number), "ETag": etag}

    async def complete(self, upload_id: str, parts: list[dict[str, Any]],
                       if_none_match: bool) -> str:
        document = ("<CompleteMultipartUpload>" + "".join(
            f"<Part><PartNumber>{p['PartNumber']}</PartNumber>"
            f"<ETag>{html.escape(p['ETag'], quote=False)}</ETag></Part>"  # (&, <, >)
            for p in parts) + "</CompleteMultipartUpload>").encode()
        headers = {"Content-Type": "application/xml"}
        if if_none_match:
            headers["If-None-Match"] = "*"
        async with self._request("POST", [("uploadId", upload_id)], headers, [document],
                                 payload_hash([document])) as r:
            answer = bytes(await r.read())
        if b"<Error>" in answer:  # (S3 may answer a completion 200 with an error)
            code = _xml_field(answer, "Code", self.path)
            status = 500 if code in ("InternalError", "SlowDown") else 400
            raise S3Error(f"s3://{self.path}", status, code, {}, code)
        return html.unescape(_xml_field(answer, "ETag", self.path))

    async def abort(self, upload_id: str) -> None:
        async with self._request("DELETE", [("uploadId", upload_id)]) as r:
            await r.read()

    async def etag(self) -> str | None:
        async with self.transport.request("HEAD", self.path, {}, self.stall, None) as r:
            if r.status == 404:
                return None
            r.raise_for_status()
            return r.headers.get("etag")

    @staticmethod
    def code(error: BaseException) -> str | None:
        return error.s3_code if isinstance(error, S3Error) else None


def _xml_field(document: bytes, name: str, path: str) -> str:
    found = re.search(rb"<%s>([^<]*)</%s>" % (name.encode(), name.encode()), document)
    if found is None:
        raise StoreError(f"s3://{path}: an answer without its {name}: {document[:200]!r}")
    return found[1].decode()
