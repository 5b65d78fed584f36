"""GCS's GETs through shardvol's HTTP client: the JSON API's media downloads, as gcsfs and
TensorStore send them, so that ``gs://`` reads take the path of HTTP(S) and S3 reads
(:class:`~shardvol.kvstore.versioned_reads.HttpVersionedReads`): bodies received straight
into their buffers, whole values streamed as they arrive, and versioned reads.

A value's version is its generation (``x-goog-generation``); a read that must find one
asks with ``ifGenerationMatch`` (412 if the object was replaced).  Each request is
authorized with the credentials' headers (none when anonymous), after a refresh off the
event loop when they are about to run out (google-auth refreshes with blocking requests).

The endpoint and the credentials come from the store's gcsfs options as gcsfs finds them.
For ``token`` None, ``"google_default"`` or ``"anon"`` (and no client certificate
configured) that takes google-auth alone (:class:`GoogleAuth`: the application default
credentials, or none): gcsfs is a fresh process's largest import (0.6 s), and a store that
only reads never makes its filesystem.  Other tokens take gcsfs's credentials
(:class:`GcsfsAuth`).  A filesystem set up with what this path does not follow (requester
pays, version-aware paths, session options, client certificates) reads through gcsfs as
before, without versions.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Protocol
from urllib.parse import quote

from shardvol.errors import StoreError
from shardvol.kvstore.arriving import Arriving
from shardvol.kvstore.http_client import HttpStatusError, client
from shardvol.kvstore.versioned_reads import Answer, error_body

#: The gcsfs options :class:`GoogleAuth` follows (with ``token`` None, "google_default"
#: or "anon"): the endpoint, the scope, and what only gcsfs's own operations use.
OPTIONS = frozenset({"token", "endpoint_url", "access", "project", "block_size",
                     "consistency", "cache_timeout", "secure_serialize", "check_connection",
                     "requests_timeout", "timeout", "default_location",
                     "skip_instance_cache", "use_listings_cache", "listings_expiry_time",
                     "max_paths"})
#: gcsfs's cache of the tokens of its browser logins (tried after the default credentials)
GCSFS_TOKENS = os.path.join(os.path.expanduser("~"), ".gcs_tokens")


def plain(fs: Any) -> bool:
    """Whether the reads of the gcsfs filesystem ``fs`` can go through shardvol's client."""
    return (not fs.requester_pays and not fs.version_aware and not fs.session_kwargs
            and not getattr(fs, "_use_client_cert", False))


def without_gcsfs(options: Mapping[str, Any]) -> bool:
    """Whether the reads of a store with these gcsfs options can authorize without gcsfs
    (see the module)."""
    token = options.get("token")
    return (set(options) <= OPTIONS and token in (None, "google_default", "anon")
            and not (token is None and os.path.exists(GCSFS_TOKENS))
            and not _client_certificate())


def _client_certificate() -> bool:
    """Whether google-auth may present a client certificate (mutual TLS) where gcsfs
    would: said by the environment, or any of its certificate configurations present."""
    said = os.environ.get("GOOGLE_API_USE_CLIENT_CERTIFICATE")
    if said is not None:
        return said.strip().lower() == "true"
    paths = (os.environ.get("GOOGLE_API_CERTIFICATE_CONFIG"),
             os.environ.get("CLOUDSDK_CONTEXT_AWARE_CERTIFICATE_CONFIG_FILE_PATH"),
             os.path.join(os.path.expanduser("~"), ".config", "gcloud",
                          "certificate_config.json"),
             "/var/run/secrets/workload-spiffe-credentials")
    return any(path and os.path.exists(path) for path in paths)


class Auth(Protocol):
    """Where a store's objects are and how its requests are authorized."""

    location: str

    async def authorize(self, headers: dict[str, str]) -> None:
        """Add the credentials' headers (none if anonymous)."""
        ...


class GcsfsAuth:
    """A gcsfs filesystem's endpoint and credentials."""

    def __init__(self, fs: Any) -> None:
        self.fs = fs
        self.location = fs._location

    async def authorize(self, headers: dict[str, str]) -> None:
        gcsfs_credentials = self.fs.credentials
        credentials = gcsfs_credentials.credentials  # (google-auth's; None: anonymous)
        if credentials is not None and not _fresh(credentials):
            await asyncio.get_running_loop().run_in_executor(
                None, gcsfs_credentials.maybe_refresh)
        gcsfs_credentials.apply(headers)


class GoogleAuth:
    """The endpoint and credentials gcsfs would find for these options (see
    :func:`without_gcsfs`), with google-auth alone: the application default credentials,
    found off the event loop at the first request (google-auth may ask the metadata
    server); without them, anonymous, unless ``token`` is "google_default"."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.token = options.get("token")
        self.scope = ("https://www.googleapis.com/auth/devstorage."
                      f"{options.get('access', 'full_control')}")
        self.location = options.get("endpoint_url") or _location()
        self._found: asyncio.Future | None = None
        self._refreshing: asyncio.Future | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_found": None, "_refreshing": None}

    async def authorize(self, headers: dict[str, str]) -> None:
        if self.token == "anon":
            return
        loop = asyncio.get_running_loop()
        if self._found is None:
            self._found = loop.run_in_executor(None, self._default)
        try:
            credentials = await self._found
        except BaseException:
            self._found = None  # (looked for again by the next attempt)
            raise
        if credentials is None:
            return
        if not _fresh(credentials):  # (one refresh, which the requests meanwhile wait for)
            if self._refreshing is None:
                self._refreshing = loop.run_in_executor(None, _refresh, credentials)
                self._refreshing.add_done_callback(lambda _: setattr(self, "_refreshing", None))
            await asyncio.shield(self._refreshing)
        credentials.apply(headers)

    def _default(self) -> Any:
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError

        try:
            return google.auth.default(scopes=[self.scope])[0]
        except DefaultCredentialsError as e:
            if self.token == "google_default":
                raise StoreError(f"no Google application default credentials: {e}") from e
            return None  # (anonymous, as gcsfs falls back to)


def _refresh(credentials: Any) -> None:
    from google.auth.transport.requests import Request

    credentials.refresh(Request())


def _location() -> str:
    """GCS's endpoint, as gcsfs finds it without a client certificate (an emulator's from
    ``STORAGE_EMULATOR_HOST``)."""
    emulator = os.environ.get("STORAGE_EMULATOR_HOST", "")
    if emulator not in ("", "default"):
        return emulator if emulator.startswith(("http://", "https://")) else f"http://{emulator}"
    return f"https://storage.{os.environ.get('GOOGLE_CLOUD_UNIVERSE_DOMAIN', 'googleapis.com')}"


class GcsTransport:
    """Authorized requests for the objects of a GCS store (see the module)."""

    def __init__(self, auth: Auth) -> None:
        self.auth = auth

    def headers(self) -> dict[str, str]:
        return {}

    @staticmethod
    def version(headers: Mapping[str, str]) -> str | None:
        return headers.get("x-goog-generation") or None

    def url(self, method: str, path: str, version: str | None) -> str:
        """The URL of a request for ``path`` that must find it at ``version`` if given: a
        GET is a media download; a HEAD asks for the object's metadata (the JSON API
        answers no HEAD)."""
        bucket, _, key = path.partition("/")
        url = (f"{self.auth.location}/{'' if method == 'HEAD' else 'download/'}storage/v1/b/"
               f"{quote(bucket, safe='')}/o/{quote(key, safe='')}?"
               f"{'' if method == 'HEAD' else 'alt=media&'}")
        return url + ("" if version is None else f"ifGenerationMatch={version}")

    @contextlib.asynccontextmanager
    async def request(self, method: str, path: str, headers: dict[str, str],
                      stall: float | None, version: str | None) -> AsyncIterator[Answer]:
        url = self.url(method, path, version)
        async with self.send("GET", url, path, headers, stall) as r:
            yield r if method != "HEAD" or r.status != 200 else await _Head.of(r, url)

    @contextlib.asynccontextmanager
    async def send(self, method: str, url: str, path: str, headers: dict[str, str],
                   stall: float | None, body: Sequence[bytes | memoryview] | None = None
                   ) -> AsyncIterator[Any]:
        """The answer to ``method url`` (of the object at ``path``; with ``body``),
        authorized; GCS's errors raised, but for an absent object (404), a failed
        condition (412) and 304, 416."""
        headers = dict(headers)
        await self.auth.authorize(headers)
        async with client().request(method, url, headers, stall, body=body) as r:
            if r.status >= 300 and r.status not in (304, 404, 412, 416):
                await _raise_gcs_error(r, f"gs://{path}")
            yield r


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
#: (its LOCAL_REFRESH_BUFFER), so that gcsfs finds nothing to refresh on the loop.
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
