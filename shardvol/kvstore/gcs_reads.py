"""GCS's GETs through shardvol's HTTP client: the JSON API's media downloads, as gcsfs and
TensorStore send them, so that ``gs://`` reads take the path of HTTP(S) and S3 reads
(:class:`~shardvol.kvstore.versioned_reads.HttpVersionedReads`): bodies received straight
into their buffers, whole values streamed as they arrive, and versioned reads.

A value's version is its generation (``x-goog-generation``); a read that must find one
asks with ``ifGenerationMatch`` (412 if the object was replaced).  gcsfs still decides
where the objects are (its endpoint: ``endpoint_url``, ``STORAGE_EMULATOR_HOST``) and
authorizes each request: its credentials' headers are applied to it (none for
``token="anon"``), after a refresh off the event loop when they are about to run out.
A filesystem set up with what this path does
not follow (requester pays, version-aware paths, session options, client certificates)
reads through gcsfs as before, without versions.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any
from urllib.parse import quote

from shardvol.errors import StoreError
from shardvol.kvstore.arriving import Arriving
from shardvol.kvstore.http_client import HttpStatusError, client
from shardvol.kvstore.versioned_reads import Answer, HttpVersionedReads, error_body


def plain(fs: Any) -> bool:
    """Whether the reads of the gcsfs filesystem ``fs`` can go through shardvol's client."""
    return (not fs.requester_pays and not fs.version_aware and not fs.session_kwargs
            and not getattr(fs, "_use_client_cert", False))


def gcs_reads(fs: Any, stall: float | None) -> HttpVersionedReads:
    """The versioned reads of the gcsfs filesystem ``fs`` (see :func:`plain`)."""
    return HttpVersionedReads(GcsTransport(fs), stall)


class GcsTransport:
    """Authorized requests for the objects of a gcsfs filesystem (see the module)."""

    def __init__(self, fs: Any) -> None:
        self.fs = fs

    def headers(self) -> dict[str, str]:
        return {}

    @staticmethod
    def version(headers: Mapping[str, str]) -> str | None:
        return headers.get("x-goog-generation") or None

    def url(self, method: str, path: str, version: str | None) -> str:
        """The URL of a request for ``path`` that must find it at ``version`` if given: a
        GET is a media download; a HEAD asks for the object's metadata (the JSON API
        answers no HEAD)."""
        bucket, key, _ = self.fs.split_path(path)
        url = (f"{self.fs._location}/{'' if method == 'HEAD' else 'download/'}storage/v1/b/"
               f"{quote(bucket, safe='')}/o/{quote(key, safe='')}?"
               f"{'' if method == 'HEAD' else 'alt=media&'}")
        return url + ("" if version is None else f"ifGenerationMatch={version}")

    async def _authorize(self, headers: dict[str, str]) -> None:
        """Add the credentials' headers (Authorization); ones that run out within
        REFRESH_AHEAD seconds are refreshed first, off the event loop (gcsfs refreshes
        them with a blocking request, which would stall every transfer on the loop)."""
        gcsfs_credentials = self.fs.credentials
        credentials = gcsfs_credentials.credentials  # (google-auth's; None: anonymous)
        if credentials is not None and not _fresh(credentials):
            await asyncio.get_running_loop().run_in_executor(
                None, gcsfs_credentials.maybe_refresh)
        gcsfs_credentials.apply(headers)

    @contextlib.asynccontextmanager
    async def request(self, method: str, path: str, headers: dict[str, str],
                      stall: float | None, version: str | None) -> AsyncIterator[Answer]:
        headers = dict(headers)
        await self._authorize(headers)
        url = self.url(method, path, version)
        async with client().request("GET", url, headers, stall) as r:
            if r.status >= 300 and r.status not in (304, 404, 412, 416):
                await _raise_gcs_error(r, f"gs://{path}")
            yield r if method != "HEAD" or r.status != 200 else await _Head.of(r, url)


class _Head:
    """The answer a HEAD of a value would have had (its length and generation), made
    from its metadata."""

    status = 200

    def __init__(self, url: str, size: str, generation: str) -> None:
        self.url = url
        self.headers = {"content-length": size, "x-goog-generation": generation}

    @classmethod
    async def of(cls, r: Any, url: str) -> _Head:
        body = bytes(await r.read())
        try:
            meta = json.loads(body)
            return cls(url, str(int(meta["size"])), str(meta["generation"]))
        except (ValueError, KeyError, TypeError):
            raise StoreError(f"{url}: not an object's metadata: {body[:200]!r}") from None

    def raise_for_status(self) -> None:
        pass

    async def read(self) -> bytes:
        return b""

    async def fill(self, value: Arriving, arrived: Callable[[], None], skip: int) -> None:
        raise StoreError(f"{self.url}: a HEAD has no body")


#: Credentials that run out sooner are refreshed before a request: gcsfs's own margin
#: (its LOCAL_REFRESH_BUFFER), so that it finds nothing to refresh on the loop.
REFRESH_AHEAD = 300.0


def _fresh(credentials: Any) -> bool:
    """Whether google-auth ``credentials`` are valid for REFRESH_AHEAD seconds more."""
    expiry = getattr(credentials, "expiry", None)
    if not credentials.valid:
        return False
    if expiry is None:
        return True
    left = expiry.replace(tzinfo=datetime.timezone.utc) - datetime.datetime.now(
        datetime.timezone.utc)
    return left.total_seconds() > REFRESH_AHEAD


async def _raise_gcs_error(r: Any, what: str) -> None:
    """Raise the error of a GCS answer, with the message of its JSON body if it has one."""
    message = r.reason
    body = await error_body(r)
    if body:
        try:
            error = json.loads(body).get("error", {})
            message = str(error.get("message", "")).strip() or message
        except (ValueError, AttributeError):  # (not JSON: the text, if it is short)
            text = body.decode("utf-8", "replace").strip()
            message = text if 0 < len(text) <= 200 else message
    raise HttpStatusError(what, r.status, message, r.headers)
