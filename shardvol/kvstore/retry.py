"""Retrying remote requests on transient failures: backoff with full jitter, Retry-After,
a number of attempts and a deadline.

Object stores answer some requests with 408, 429, 500, 502, 503 or 504, drop
connections, refuse them for a moment, stall, or cut a body short; the same request a
little later succeeds.  :func:`retry_async` runs one operation (a coroutine function, run
again from scratch on each attempt, so nothing partial is ever kept) until it succeeds,
fails for good (any other error: 404, 412, 403, ...), or the policy's attempts or
deadline run out; the final StoreError names the operation, the attempts, the time and
the last failure.  Waits are ``uniform(0, min(cap, base * 2**n))`` ("full jitter"), or
longer when the server says so with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from shardvol.errors import InvalidArgumentError, StoreError

T = TypeVar("T")

TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
# Exceptions of the HTTP clients below fsspec (aiohttp, botocore, http.client) that mean
# the connection failed, stalled or ended early, by class name (none of them is imported)
_TRANSIENT_NAMES = frozenset({
    "ClientConnectionError", "ClientConnectorError", "ClientOSError", "ServerDisconnectedError",
    "ServerTimeoutError", "ClientPayloadError", "ContentLengthError", "TransferEncodingError",
    "EndpointConnectionError", "ConnectionClosedError", "ReadTimeoutError",
    "ConnectTimeoutError", "IncompleteReadError", "ResponseStreamingError", "IncompleteRead",
    "RemoteDisconnected", "ProtocolError",
})
# S3 error codes of transient refusals (their statuses are in TRANSIENT_STATUS too)
_TRANSIENT_CODES = frozenset({
    "SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "Throttling",
    "ThrottlingException", "RequestLimitExceeded", "TooManyRequestsException",
})


@dataclass(frozen=True)
class RetryPolicy:
    """How a remote operation is retried: at most ``retries`` times more than once, all
    attempts within ``timeout`` seconds (None: no deadline), waiting
    ``uniform(0, min(cap, base * 2**n))`` seconds before retry ``n + 1``."""

    retries: int = 10
    timeout: float | None = 120.0
    base: float = 0.05
    cap: float = 5.0

    def __post_init__(self) -> None:
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or self.retries < 0:
            raise InvalidArgumentError(
                f"retries must be a non-negative integer, got {self.retries!r}")
        if self.timeout is not None and not self.timeout > 0:
            raise InvalidArgumentError(f"timeout must be positive seconds or None, "
                                       f"got {self.timeout!r}")

    def wait(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait after failed attempt ``attempt`` (0-based)."""
        backoff = random.uniform(0, min(self.cap, self.base * 2.0**attempt))
        return backoff if retry_after is None else max(retry_after, backoff)


def status_of(exc: BaseException | None) -> int | None:
    """The HTTP status behind an error, looking through the exceptions it chains (fsspec
    and s3fs wrap their clients' errors)."""
    while exc is not None:
        status = getattr(exc, "status", None) or getattr(exc, "code", None)
        if isinstance(status, int) and not isinstance(status, bool):
            return status
        response = getattr(exc, "response", None)
        if isinstance(response, dict):
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if isinstance(status, int):
                return status
        exc = exc.__cause__ or exc.__context__
    return None


def transient(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure worth retrying (see the module doc).  A host name that
    does not resolve is not: it fails at once rather than after the whole deadline."""
    if status_of(exc) in TRANSIENT_STATUS:
        return True
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, socket.gaierror) or type(seen).__name__ == "ClientConnectorDNSError":
            return False
        seen = seen.__cause__ or seen.__context__
    seen = exc
    while seen is not None:
        if isinstance(seen, (TimeoutError, asyncio.TimeoutError, ConnectionError)):
            return True
        if any(c.__name__ in _TRANSIENT_NAMES for c in type(seen).__mro__):
            return True
        response = getattr(seen, "response", None)
        if isinstance(response, dict) and response.get("Error", {}).get("Code") in (
                _TRANSIENT_CODES):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def retry_after(exc: BaseException) -> float | None:
    """Seconds the server asked to wait (``Retry-After``: seconds or an HTTP date)."""
    seen: BaseException | None = exc
    while seen is not None:
        headers = getattr(seen, "headers", None)
        response = getattr(seen, "response", None)
        if headers is None and isinstance(response, dict):
            headers = response.get("ResponseMetadata", {}).get("HTTPHeaders")
        value = None
        if headers is not None:
            try:
                value = headers.get("Retry-After") or headers.get("retry-after")
            except AttributeError:
                value = None
        if value:
            return _seconds(str(value))
        seen = seen.__cause__ or seen.__context__
    return None


def _seconds(value: str) -> float | None:
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def describe(exc: BaseException) -> str:
    status = status_of(exc)
    text = str(exc) or type(exc).__name__
    return f"HTTP {status}: {text}" if status is not None and str(status) not in text else text


async def retry_async(op: Callable[[], Awaitable[T]], policy: RetryPolicy, what: str) -> T:
    """``await op()``, again after transient failures (see the module doc); each attempt is
    cut off at the deadline."""
    start = time.monotonic()
    deadline = None if policy.timeout is None else start + policy.timeout
    last = ""
    attempt = 0
    while True:
        remaining = None if deadline is None else deadline - time.monotonic()
        try:
            if remaining is not None and remaining <= 0:
                raise asyncio.TimeoutError
            return await asyncio.wait_for(op(), remaining)
        except asyncio.TimeoutError:
            if deadline is not None and time.monotonic() >= deadline - 1e-3:
                raise _gave_up(what, attempt + 1, start, "no answer before the deadline "
                               f"({policy.timeout:g} s)", last) from None
            last, after = "timed out", None
        except Exception as e:
            if not transient(e):
                raise
            last, after = describe(e), retry_after(e)
            if attempt >= policy.retries:
                raise _gave_up(what, attempt + 1, start, last) from e
        wait = policy.wait(attempt, after)
        if deadline is not None and time.monotonic() + wait >= deadline:
            raise _gave_up(what, attempt + 1, start, last,
                           f"(the next wait, {wait:.2f} s, passes the deadline)")
        await asyncio.sleep(wait)
        attempt += 1


def retry_sync(op: Callable[[], T], policy: RetryPolicy, what: str) -> T:
    """:func:`retry_async` for blocking operations (a deadline cannot cut one short: it
    ends the retries)."""
    start = time.monotonic()
    attempt = 0
    while True:
        try:
            return op()
        except Exception as e:
            if not transient(e):
                raise
            last, after = describe(e), retry_after(e)
            if attempt >= policy.retries:
                raise _gave_up(what, attempt + 1, start, last) from e
        wait = policy.wait(attempt, after)
        if policy.timeout is not None and time.monotonic() + wait - start >= policy.timeout:
            raise _gave_up(what, attempt + 1, start, last, f"(deadline {policy.timeout:g} s)")
        time.sleep(wait)
        attempt += 1


def _gave_up(what: str, attempts: int, start: float, last: str, extra: str = "",
             previous: str = "") -> StoreError:
    took = time.monotonic() - start
    detail = f"; before that: {previous}" if previous and previous != last else ""
    tail = f" {extra}" if extra else ""
    return StoreError(f"{what}: failed after {attempts} attempt(s) in {took:.2f} s; "
                      f"last: {last}{detail}{tail}")
