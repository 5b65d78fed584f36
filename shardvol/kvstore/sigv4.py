"""AWS Signature Version 4 in request headers (S3's GETs, HEADs, PUTs and DELETEs): the
headers to send with a request so that S3 (or a store that speaks its API) knows who sent
it.

The signed headers are ``host`` and the ``x-amz-*`` ones (AWS requires those; ``Range``,
``If-Match`` and ``Content-Length`` need not be signed).  The payload's SHA-256 is signed
too (S3 checks the body against it: a body changed on the way is refused).  A signing key
depends only on the secret, the day, the region and the service, so it is derived once for
each.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import hmac
from collections.abc import Sequence
from typing import NamedTuple
from urllib.parse import quote, urlsplit

ALGORITHM = "AWS4-HMAC-SHA256"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


class Credentials(NamedTuple):
    """An access key, its secret and, for temporary credentials, their session token."""

    access_key: str
    secret_key: str
    token: str | None = None


@functools.lru_cache(maxsize=64)
def _signing_key(secret: str, day: str, region: str, service: str) -> bytes:
    key = f"AWS4{secret}".encode()
    for part in (day, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def query(fields: Sequence[tuple[str, str]]) -> str:
    """A URL's query of these fields (a field without a value: ""), each name and value
    percent-encoded as SigV4 signs them (all but RFC 3986's unreserved characters)."""
    return "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in fields)


def _canonical_query(text: str) -> str:
    """The canonical form of a query written by :func:`query`: its fields sorted by name,
    then value."""
    fields = sorted(tuple(f.partition("=")[::2]) for f in text.split("&")) if text else []
    return "&".join(f"{k}={v}" for k, v in fields)


def payload_hash(parts: Sequence[bytes | memoryview]) -> str:
    """The SHA-256 (hex) of a body sent as ``parts``."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    return digest.hexdigest()


def signed_headers(method: str, url: str, credentials: Credentials, region: str,
                   service: str = "s3", now: datetime.datetime | None = None,
                   payload: str = EMPTY_SHA256) -> dict[str, str]:
    """The headers that sign ``method url`` with a body whose SHA-256 is ``payload``
    (default: no body) for ``service`` in ``region``, at ``now`` (UTC; default: the
    clock): ``Host``, ``X-Amz-Date``, ``X-Amz-Content-SHA256``, ``X-Amz-Security-Token``
    (with a token) and ``Authorization``.  The path of ``url`` is signed as it is written
    (already percent-encoded, as S3 takes it); its query's fields (see :func:`query`) in
    their canonical order."""
    parts = urlsplit(url)
    stamp = (now or datetime.datetime.now(datetime.timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    fields = {"host": parts.netloc.lower(), "x-amz-content-sha256": payload,
              "x-amz-date": stamp}
    if credentials.token:
        fields["x-amz-security-token"] = credentials.token
    names = sorted(fields)
    signed = ";".join(names)
    canonical = "\n".join([method, parts.path or "/", _canonical_query(parts.query),
                           "".join(f"{n}:{fields[n].strip()}\n" for n in names),
                           signed, payload])
    scope = f"{stamp[:8]}/{region}/{service}/aws4_request"
    to_sign = "\n".join([ALGORITHM, stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = _signing_key(credentials.secret_key, stamp[:8], region, service)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers = {"Host": fields["host"], "X-Amz-Date": stamp, "X-Amz-Content-SHA256": payload,
               "Authorization": f"{ALGORITHM} Credential={credentials.access_key}/{scope}, "
                                f"SignedHeaders={signed}, Signature={signature}"}
    if credentials.token:
        headers["X-Amz-Security-Token"] = credentials.token
    return headers
