"""GCS's writes through shardvol's HTTP client (the transport of the reads, see
:mod:`shardvol.kvstore.gcs_reads`): the JSON API's multipart uploads (the object's
metadata, then its bytes, in one request, as gcsfs sends them) and DELETEs.  gcsfs's
per-request work (the body joined with its metadata, aiohttp's session) is what bounded
a store's writes of many small objects; here the value's parts are sent as they are.

The metadata carries the body's CRC-32C, computed before the upload, so GCS refuses bytes
changed on the way (400).  Values of ``multipart_threshold`` bytes and more go through
gcsfs's resumable uploads (in pieces, each retried on its own), as do listings and
metadata requests.
"""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Callable, Sequence
from urllib.parse import quote

import crc32c

from shardvol.kvstore.gcs_reads import GcsTransport


class GcsDirectObjects:
    """The unconditional writes of a GCS store through ``transport``, one attempt at a
    time (:meth:`put`, :meth:`remove`), for the store to retry; ``written(path)`` is
    called after each (gcsfs's listings of the path are stale)."""

    def __init__(self, transport: GcsTransport, stall: float | None,
                 written: Callable[[str], None]) -> None:
        self.transport, self.stall, self._written = transport, stall, written

    @staticmethod
    def checksum(parts: Sequence[bytes | memoryview]) -> str:
        """The CRC-32C of a body sent as ``parts``, as GCS gives it (base64, big-endian)."""
        value = 0
        for part in parts:
            value = crc32c.crc32c(part, value)
        return base64.b64encode(value.to_bytes(4, "big")).decode()

    async def put(self, path: str, parts: Sequence[bytes | memoryview], checksum: str) -> None:
        """One attempt to write the object at ``path``: ``parts`` joined, whose
        :meth:`checksum` is ``checksum``."""
        bucket, _, key = path.partition("/")
        url = (f"{self.transport.auth.location}/upload/storage/v1/b/{quote(bucket, safe='')}"
               "/o?uploadType=multipart")
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
                r.raise_for_status()  # (a 404: no such bucket)
                await r.read()
        finally:
            self._written(path)

    async def remove(self, path: str) -> None:
        """One attempt to delete the object at ``path`` (absent already: done)."""
        bucket, _, key = path.partition("/")
        url = (f"{self.transport.auth.location}/storage/v1/b/{quote(bucket, safe='')}/o/"
               f"{quote(key, safe='')}")
        try:
            async with self.transport.send("DELETE", url, path, {}, self.stall) as r:
                if r.status != 404:
                    r.raise_for_status()
                    await r.read()
        finally:
            self._written(path)
