"""GCS's writes through shardvol's HTTP client (the transport of the reads, see
:mod:`shardvol.kvstore.gcs_reads`): the JSON API's multipart uploads (the object's
metadata, then its bytes, in one request, as gcsfs sends them) and DELETEs, unconditional
ones for a store's writes, conditional ones (``ifGenerationMatch``: a value's version is
its generation, 0 for "absent") for its leases and compare-and-swap updates (see
:class:`~shardvol.kvstore.conditional.ConditionalCalls`), as on S3.  gcsfs's
per-request work (the body joined with its metadata, aiohttp's session) is what bounded a
store's writes of many small objects; here the value's parts are sent as they are.

The metadata carries the body's CRC-32C, computed before the upload, so GCS refuses bytes
changed on the way (400).  Values of ``multipart_threshold`` bytes and more go through
gcsfs's resumable uploads (in pieces, each retried on its own), as do listings and
metadata requests.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple
from urllib.parse import quote

from shardvol.errors import StoreError
from shardvol.kvstore.conditional import OUTCOME_OF_STATUS, ConditionalCalls, Outcome, parts_of
from shardvol.kvstore.gcs_reads import GcsTransport
from shardvol.kvstore.http_client import HttpStatusError
from shardvol.kvstore.remote import Requests, run_on
from shardvol.kvstore.versioned_reads import HttpVersionedReads


class GcsDirectObjects(ConditionalCalls):
    """The writes of a GCS store through ``transport``: conditional ones retried by
    ``runner`` on the I/O loop ``loop()``; unconditional ones one attempt at a time
    (:meth:`put`, :meth:`remove`), for the store to retry.  ``written(path)`` is called
    after each write (gcsfs's listings of the path are stale)."""

    def __init__(self, transport: GcsTransport, runner: Requests, stall: float | None,
                 loop: Callable[[], asyncio.AbstractEventLoop],
                 written: Callable[[str], None]) -> None:
        self.transport, self.runner, self.stall = transport, runner, stall
        self._loop, self._written = loop, written
        self._reads = HttpVersionedReads(transport, stall)

    @staticmethod
    def checksum(parts: Sequence[bytes | memoryview]) -> str:
        """The CRC-32C of a body sent as ``parts``, as GCS gives it (base64, big-endian)."""
        import crc32c  # (a gs:// write's; not a reading process's import)

        value = 0
        for part in parts:
            value = crc32c.crc32c(part, value)
        return base64.b64encode(value.to_bytes(4, "big")).decode()

    async def put(self, path: str, parts: Sequence[bytes | memoryview], checksum: str,
                  generation: str | None = None) -> Answer:
        """One attempt to write the object at ``path``: ``parts`` joined, whose
        :meth:`checksum` is ``checksum``; only if it is at ``generation`` (if given: "0"
        for absent).  The answer (200: the object's metadata in ``body``; 412: the
        condition failed)."""
        bucket, _, key = path.partition("/")
        url = (f"{self.transport.auth.location}/upload/storage/v1/b/{quote(bucket, safe='')}"
               "/o?uploadType=multipart" + _condition(generation, "&"))
        boundary = secrets.token_hex(16)  # (random: not in the bytes but by 2^-128 chance)
        metadata = json.dumps({"name": key, "crc32c": checksum})
        head = (f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n"
                f"{metadata}\r\n--{boundary}\r\nContent-Type: application/octet-stream"
                "\r\n\r\n").encode()
        body_parts = [head, *parts, f"\r\n--{boundary}--\r\n".encode()]
        headers = {"Content-Type": f'multipart/related; boundary="{boundary}"'}
        try:
            async with self.transport.send("POST", url, path, headers, self.stall,
                                           body_parts) as r:
                if r.status == 412:
                    return Answer(412, b"")
                r.raise_for_status()  # (a 404: no such bucket)
                return Answer(r.status, bytes(await r.read()))
        finally:
            self._written(path)

    async def remove(self, path: str, generation: str | None = None) -> Answer:
        """One attempt to delete the object at ``path``, only if it is at ``generation``
        if given; its answer (404: absent already, which is done; 412: at another
        generation)."""
        bucket, _, key = path.partition("/")
        url = (f"{self.transport.auth.location}/storage/v1/b/{quote(bucket, safe='')}/o/"
               f"{quote(key, safe='')}" + _condition(generation, "?"))
        try:
            async with self.transport.send("DELETE", url, path, {}, self.stall) as r:
                if r.status in (404, 412):  # (its body: read by the transport, or not kept)
                    return Answer(r.status, b"")
                r.raise_for_status()
                return Answer(r.status, bytes(await r.read()))
        finally:
            self._written(path)

    def _call(self, method: str, path: str, read_body: bool = False, **kwargs: Any) -> Outcome:
        outcome = Outcome()
        generation = kwargs.get("IfMatch", "0" if kwargs.get("IfNoneMatch") == "*" else None)
        body = parts_of(kwargs["Body"]) if "Body" in kwargs else []
        # (a put's, here, off the event loop; reads and deletes send no body)
        checksum = self.checksum(body) if method == "put_object" else ""

        async def attempt() -> dict | None:
            outcome.attempts += 1
            if method == "get_object":
                value, version = await self._reads.read_one(path, None, None)
                if isinstance(value, FileNotFoundError):
                    outcome.code = "NoSuchKey"
                    return None
                if isinstance(value, BaseException):
                    raise value
                return {"ETag": version, "Body": bytes(value)}
            if method == "put_object":
                answer = await self.put(path, body, checksum, generation)
            else:
                answer = await self.remove(path, generation)
            outcome.code = OUTCOME_OF_STATUS.get(answer.status)
            if outcome.code is not None:
                return None
            return {"ETag": _generation(answer.body) if method == "put_object" else None}

        try:
            outcome.out = run_on(self._loop(), self.runner.one(attempt, f"GCS {method} {path}"))
        except (HttpStatusError, OSError) as e:  # (refused for good, TLS that fails, ...)
            raise StoreError(f"cannot {method} {path}: {e}") from e
        return outcome


class Answer(NamedTuple):
    """The status of a write's answer, and its body."""

    status: int
    body: bytes


def _condition(generation: str | None, joint: str) -> str:
    return "" if generation is None else f"{joint}ifGenerationMatch={quote(generation)}"


def _generation(metadata: bytes) -> str:
    """The generation of an object's metadata, as GCS answers an upload."""
    try:
        return str(int(json.loads(metadata)["generation"]))
    except (ValueError, KeyError, TypeError):
        raise StoreError(f"not an object's metadata: {metadata[:200]!r}") from None
