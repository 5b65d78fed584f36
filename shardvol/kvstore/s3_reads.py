"""S3's GETs through shardvol's HTTP client, signed here (SigV4), so that S3 reads take the
path of HTTP(S) reads: bodies received straight into their buffers, the same versioned-read
logic (:class:`~shardvol.kvstore.versioned_reads.HttpVersionedReads`).

botocore still decides where a bucket's objects are and how requests are signed, through a
synchronous client of its own made as s3fs would make its client from the store's options
(not s3fs's: s3fs, aiobotocore and aiohttp are a fresh process's largest imports, which a
store that only reads never makes): the first read of a bucket asks it for a presigned URL
of a made-up key, which gives the URL prefix of the bucket's keys (endpoint, addressing
style), and its signer gives the region and service to sign for; each request is then
signed with the client's current credentials (temporary ones are refreshed off the event
loop when botocore would refresh them), or not at all for ``anon=True``.  Reads go through
s3fs's botocore as before for a store with options this path does not follow (request
options: SSE-C keys, requester pays; ``client_kwargs`` beyond the endpoint and region;
other ``config_kwargs``; version awareness; a session of one's own), for access point ARNs
and directory buckets, and for a bucket that S3 says is in another region than the one the
client signs for (botocore follows it there).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, NamedTuple
from urllib.parse import quote, urlsplit

from shardvol.errors import StoreError
from shardvol.kvstore.arriving import Arriving
from shardvol.kvstore.http_client import HttpStatusError, client
from shardvol.kvstore.s3_conditional import S3ConditionalObjects
from shardvol.kvstore.sigv4 import EMPTY_SHA256, Credentials, signed_headers
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
#: The s3fs options these reads follow (anything else: botocore's reads through s3fs):
#: credentials, endpoint, botocore's profile, and those of s3fs's caches and uploads.
OPTIONS = frozenset({"anon", "key", "secret", "token", "username", "password", "endpoint_url",
                     "use_ssl", "client_kwargs", "config_kwargs", "profile",
                     "default_block_size", "default_fill_cache", "default_cache_type",
                     "skip_instance_cache", "use_listings_cache", "listings_expiry_time",
                     "max_paths", "max_concurrency", "fixed_upload_size"})
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


def plain(options: Mapping[str, Any]) -> bool:
    """Whether the reads of an s3fs filesystem made with these options can go through
    shardvol's client."""
    return (set(options) <= OPTIONS
            and set(options.get("client_kwargs") or {}) <= {"endpoint_url", "region_name"}
            and set(options.get("config_kwargs") or {}) <= CONFIG)


def botocore_client(options: Mapping[str, Any], session: Any = None) -> Any:
    """botocore's (synchronous) S3 client, made as s3fs makes its own for these options
    (see :func:`plain`), from ``session`` (default: their own): it says where a bucket's
    keys are, for which region requests are signed, with which credentials (no s3fs,
    aiobotocore or aiohttp: a fresh process's largest imports)."""
    from botocore import UNSIGNED
    from botocore.config import Config

    client_kwargs = dict(options.get("client_kwargs") or {})
    init = {"aws_access_key_id": options.get("key", options.get("username")),
            "aws_secret_access_key": options.get("secret", options.get("password")),
            "aws_session_token": options.get("token"),
            "endpoint_url": options.get("endpoint_url")}
    init = {k: v for k, v in init.items() if v is not None and v != client_kwargs.get(k)}
    config = dict(options.get("config_kwargs") or {})
    if options.get("anon"):
        init = {k: v for k, v in init.items() if not k.startswith("aws_")}
        config["signature_version"] = UNSIGNED
    session = session or _session(options)
    return session.create_client("s3", use_ssl=options.get("use_ssl", True),
                                 config=Config(**config), **init, **client_kwargs)


def _session(options: Mapping[str, Any]) -> Any:
    """The botocore session of these s3fs options (their profile), reading its models
    through the process's loader."""
    import botocore.session

    from shardvol.kvstore.s3_filesystem import share_models

    return share_models(botocore.session.Session(profile=options.get("profile")))


def _botocore_and_ca(options: Mapping[str, Any]) -> tuple[Any, str | None]:
    """botocore_client(options), and the CA bundle botocore would verify with."""
    session = _session(options)
    return botocore_client(options, session), session.get_config_variable("ca_bundle")


def _locate(s3: Any, bucket: str) -> _Bucket:
    """Where the botocore client ``s3`` puts ``bucket``'s keys (a presigned URL of a
    made-up key says), and the scope it signs for."""
    from botocore import UNSIGNED
    from botocore.exceptions import NoCredentialsError

    signer = s3._request_signer
    if signer._signature_version not in (UNSIGNED, "s3v4", "v4"):
        raise ToBotocore(f"signature version {signer._signature_version}")
    try:
        url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"})
    except NoCredentialsError:
        raise StoreError(f"s3://{bucket}: no AWS credentials found (environment, shared "
                         "files, instance role); anon=True reads public buckets without"
                         ) from None
    parts = urlsplit(url)
    if not parts.path.endswith("/k"):
        raise StoreError(f"s3://{bucket}: botocore's URL of its keys is {url}")
    unsigned = signer._signature_version is UNSIGNED
    return _Bucket(f"{parts.scheme}://{parts.netloc}{parts.path[:-1]}",
                   None if unsigned else signer._region_name, signer._signing_name)


#: The environment these reads read themselves (any other ``AWS_`` variable: botocore
#: decides)
_ENVIRONMENT = frozenset({"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                          "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
                          "AWS_CA_BUNDLE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE",
                          "AWS_EC2_METADATA_DISABLED"})
#: botocore settings that change nothing these reads send
_NEUTRAL_CONFIG = frozenset({"retries", "max_pool_connections", "read_timeout",
                             "connect_timeout"})
#: names of buckets botocore addresses as hosts (else: as paths), and regions of AWS's
#: standard partition
_VIRTUAL = re.compile(r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]")
_STANDARD_REGION = re.compile(r"(?!cn-)[a-z]{2}-[a-z]+-\d+")


class Static(NamedTuple):
    """What botocore would find for a store whose configuration is all in its options and
    the environment (see :func:`static`): where buckets are, the region signed for, the
    credentials (None: unsigned), the CA bundle that verifies https endpoints."""

    endpoint: str | None
    region: str
    scheme: str
    credentials: Credentials | None
    cafile: str | None

    def bucket(self, bucket: str) -> _Bucket | None:
        """Where ``bucket``'s keys are, as botocore's presigned URLs put them: below the
        endpoint, or on AWS at the bucket's host name (None for names that cannot be one:
        botocore's rules for them vary)."""
        region = None if self.credentials is None else self.region
        if self.endpoint is not None:
            return _Bucket(f"{self.endpoint.rstrip('/')}/{bucket}/", region, "s3")
        if _VIRTUAL.fullmatch(bucket):
            return _Bucket(f"{self.scheme}://{bucket}.s3.amazonaws.com/", region, "s3")
        return None


def static(options: Mapping[str, Any]) -> Static | None:
    """What botocore would find for these (plain) options, when nothing else could change
    it: credentials given (options, the environment's keys, or the default profile's in
    the shared credentials file) or none (``anon``); the region from the options,
    AWS_DEFAULT_REGION or the configuration file's default profile (else us-east-1), in
    AWS's standard partition; an endpoint from the options or AWS_ENDPOINT_URL(_S3)
    (verified with AWS_CA_BUNDLE if set).  None when a profile, another ``AWS_`` variable
    or another setting of the default profile could change it: botocore resolves it then
    (its import and client are some 150 ms of a fresh process)."""
    client_kwargs = options.get("client_kwargs") or {}
    env = os.environ
    config = _default_profile(env.get("AWS_CONFIG_FILE", "~/.aws/config"), "default",
                              {"region", "output"})
    if (config is None or "profile" in options
            or not set(options.get("config_kwargs") or {}) <= _NEUTRAL_CONFIG
            or any(k.startswith("AWS_") and k not in _ENVIRONMENT for k in env)):
        return None
    region = (client_kwargs.get("region_name") or env.get("AWS_DEFAULT_REGION")
              or config.get("region") or "us-east-1")
    if not _STANDARD_REGION.fullmatch(region):
        return None
    endpoint = (options.get("endpoint_url") or client_kwargs.get("endpoint_url")
                or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL"))
    scheme = "https" if options.get("use_ssl", True) else "http"
    if endpoint is not None and not options.get("use_ssl", True):
        return None  # (botocore's own rewriting of the endpoint's scheme)
    cafile = env.get("AWS_CA_BUNDLE")
    if options.get("anon"):
        return Static(endpoint, region, scheme, None, cafile)
    key = options.get("key", options.get("username"))
    secret = options.get("secret", options.get("password"))
    token = options.get("token")
    if key is None and secret is None and token is None:
        key, secret = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")
        token = env.get("AWS_SESSION_TOKEN") or None
    if key is None and secret is None:
        shared = _default_profile(env.get("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials"),
                                  "default", {"aws_access_key_id", "aws_secret_access_key",
                                              "aws_session_token"})
        if shared is None:
            return None
        key, secret = shared.get("aws_access_key_id"), shared.get("aws_secret_access_key")
        token = shared.get("aws_session_token") or None
    if not key or not secret:
        return None
    return Static(endpoint, region, scheme, Credentials(key, secret, token), cafile)


def _default_profile(path: str, section: str, allowed: set[str]) -> dict[str, str] | None:
    """The settings of ``section`` of the INI file at ``path`` ({} if there is none), if
    it holds no others than ``allowed`` and parses as botocore parses it; else None."""
    path = os.path.expanduser(path)
    if not os.path.exists(path):
        return {}
    import configparser

    parser = configparser.RawConfigParser()
    try:
        parser.read(path)
    except (configparser.Error, OSError, UnicodeDecodeError):
        return None
    if parser.has_section(f"profile {section}"):  # (botocore reads it as the same)
        return None
    found = dict(parser.items(section)) if parser.has_section(section) else {}
    return found if set(found) <= allowed and not any(
        v.startswith("\n") for v in found.values()) else None


def split(path: str) -> tuple[str, str]:
    """(bucket, key) of an s3fs path."""
    bucket, _, key = path.partition("/")
    return bucket, key


class S3Transport:
    """Signed requests for the objects of an S3 store whose s3fs options are ``options``
    (see the module); versions are ETags."""

    version = staticmethod(etag_version)

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = dict(options)
        self.static = static(options)
        #: the certificates that verify https endpoints (botocore's ca_bundle setting)
        self.cafile = None if self.static is None else self.static.cafile
        self._buckets: dict[str, _Bucket] = {}
        #: buckets whose requests go through botocore (see ToBotocore), once found out
        self.elsewhere: set[str] = set()
        self._client: Any = None
        self._making: asyncio.Future | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_buckets": self._buckets}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"])  # type: ignore[misc]
        self._buckets.update(state["_buckets"])

    async def _botocore(self) -> Any:
        """The client, made once, off the event loop (resolving credentials may ask the
        instance's metadata service; the making itself is some 60 ms of CPU)."""
        if self._client is None:
            if self._making is None:
                self._making = asyncio.get_running_loop().run_in_executor(
                    None, _botocore_and_ca, self.options)
            try:
                self._client, cafile = await self._making
            except BaseException:
                self._making = None  # (made again by the next attempt)
                raise
            if self.static is None:
                self.cafile = cafile
        return self._client

    async def _bucket(self, bucket: str) -> _Bucket:
        if bucket in self.elsewhere:
            raise ToBotocore(f"{bucket} is read through botocore")
        found = self._buckets.get(bucket)
        if found is None:
            if ":" in bucket or bucket.endswith("--x-s3"):  # (access points, S3 Express)
                raise ToBotocore(f"{bucket} is an ARN or a directory bucket")
            found = None if self.static is None else self.static.bucket(bucket)
            if found is None:
                s3 = await self._botocore()
                # (off the loop: presigning may refresh credentials, with blocking requests)
                found = await asyncio.get_running_loop().run_in_executor(
                    None, _locate, s3, bucket)
            self._buckets[bucket] = found
        return found

    def headers(self) -> dict[str, str]:
        return {}

    async def _credentials(self) -> Credentials:
        """The client's current credentials; those about to run out are refreshed off the
        event loop (botocore refreshes them with blocking requests)."""
        if self.static is not None and self.static.credentials is not None:
            return self.static.credentials
        found = (await self._botocore())._request_signer._credentials
        if getattr(found, "refresh_needed", lambda: False)():
            frozen = await asyncio.get_running_loop().run_in_executor(
                None, found.get_frozen_credentials)
        else:
            frozen = found.get_frozen_credentials()
        return Credentials(frozen.access_key, frozen.secret_key, frozen.token)

    @contextlib.asynccontextmanager
    async def request(self, method: str, path: str, headers: dict[str, str],
                      stall: float | None, version: str | None,
                      body: Sequence[bytes | memoryview] | None = None,
                      sha256: str = EMPTY_SHA256, query: str = "") -> AsyncIterator[Answer]:
        """The answer to ``method`` of the object at ``path`` (with ``body``, whose hash
        is ``sha256``; with a ``query`` that sigv4.query wrote), signed; S3's errors raised
        (S3Error), but for an absent key (404), a failed condition (412) and 304, 416.
        ToBotocore if the bucket is one botocore must take (it is then in
        ``elsewhere``)."""
        name, key = split(path)
        try:
            bucket = await self._bucket(name)
            url = bucket.prefix + quote(key, safe="/~") + (f"?{query}" if query else "")
            headers = etag_condition(headers, version)
            if bucket.region is not None:
                headers = {**headers, **signed_headers(method, url, await self._credentials(),
                                                       bucket.region, bucket.service,
                                                       payload=sha256)}
            async with client().request(method, url, headers, stall, self.cafile, body) as r:
                if r.status >= 300 and r.status not in (304, 412, 416):
                    await _raise_s3_error(r, f"s3://{path}", bucket)
                yield r
        except ToBotocore:
            self.elsewhere.add(name)
            raise


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
    raise S3Error(what, status, reason, r.headers, code)


class S3Error(HttpStatusError):
    """An error answer of S3, with its error code (``code``: "" if it sent none)."""

    def __init__(self, url: str, status: int, reason: str, headers: Mapping[str, str],
                 code: str) -> None:
        super().__init__(url, status, reason, headers)
        self.s3_code = code


class S3Reads:
    """The versioned reads of an S3 store (see VersionedReads): through shardvol's client,
    and through botocore (``botocore``, S3ConditionalObjects) for the buckets the client
    does not sign for (see ToBotocore), from the first read that finds it out."""

    def __init__(self, options: Mapping[str, Any], botocore: S3ConditionalObjects,
                 stall: float | None) -> None:
        self.botocore = botocore
        self.transport = S3Transport(options)
        self.direct = HttpVersionedReads(self.transport, stall)

    async def read_one(self, path: str, byte_range: tuple[int, int | None] | None,
                       etag: str | None) -> ReadResult:
        with contextlib.suppress(ToBotocore):
            return await self.direct.read_one(path, byte_range, etag)
        return await self.botocore.read_one(path, byte_range, etag)

    async def read_into(self, path: str, value: Arriving, arrived: Callable[[], None]) -> None:
        with contextlib.suppress(ToBotocore):  # (the first answer: no bytes came in)
            return await self.direct.read_into(path, value, arrived)
        await self.botocore.read_into(path, value, arrived)
