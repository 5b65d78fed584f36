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
import contextlib
import email.utils
import random
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager
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
# ... except these: a host name that does not resolve, TLS that fails (certificates, a
# fingerprint) fail at once
_NEVER_NAMES = frozenset({
    "ClientConnectorDNSError", "ClientConnectorCertificateError", "ClientSSLError",
    "ClientConnectorSSLError", "ServerFingerprintMismatch", "SSLError",
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
    ``uniform(0, min(cap, base * 2**n))`` seconds before retry ``n + 1``.  An attempt
    whose connection brings no byte for ``stall`` seconds has stalled: it is retried
    (where the client lets shardvol set it: HTTP(S) and S3)."""

    retries: int = 10
    timeout: float | None = 120.0
    base: float = 0.05
    cap: float = 5.0
    stall: float = 30.0

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
    does not resolve (unless the resolver said to try again), and TLS that fails, are
    not: they fail at once rather than after the whole deadline."""
    if status_of(exc) in TRANSIENT_STATUS:
        return True
    for seen in _chain(exc):
        if isinstance(seen, socket.gaierror):  # (EAI_AGAIN: the resolver is busy, try again)
            return seen.errno == socket.EAI_AGAIN
    for seen in _chain(exc):
        if isinstance(seen, ssl.SSLError) or type(seen).__name__ in _NEVER_NAMES:
            return False
    for seen in _chain(exc):
        if isinstance(seen, (TimeoutError, asyncio.TimeoutError, ConnectionError)):
            return True
        if any(c.__name__ in _TRANSIENT_NAMES for c in type(seen).__mro__):
            return True
        response = getattr(seen, "response", None)
        if isinstance(response, dict) and response.get("Error", {}).get("Code") in (
                _TRANSIENT_CODES):
            return True
    return False


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, the exceptions it chains, and the OS errors aiohttp's keep (``os_error``)."""
    seen: BaseException | None = exc
    while seen is not None:
        yield seen
        inner = getattr(seen, "os_error", None)
        if isinstance(inner, BaseException) and inner is not seen:
            yield inner
        seen = seen.__cause__ or seen.__context__


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


async def retry_async(
    op: Callable[[], Awaitable[T]], policy: RetryPolicy, what: str,
    gate: Callable[[], AbstractAsyncContextManager[object]] | None = None,
) -> T:
    """``await op()``, again after transient failures (see the module doc).  Each attempt
    runs inside ``gate()`` (slots of a request budget); the deadline starts once the first
    attempt is through its gate (time queued for a slot is not the server's), and cuts off
    any attempt still running at it."""
    start: float | None = None
    deadline: float | None = None
    last = ""
    attempt = 0
    while True:
        async with gate() if gate is not None else contextlib.nullcontext():
            now = time.monotonic()
            if start is None:
                start = now
                deadline = None if policy.timeout is None else now + policy.timeout
            remaining = None if deadline is None else deadline - now
            try:
                if remaining is not None and remaining <= 0:
                    raise _gave_up(what, attempt, start, f"no answer before the deadline "
                                   f"({policy.timeout:g} s)", last)
                return await asyncio.wait_for(op(), remaining)
            except asyncio.TimeoutError as e:
                if deadline is not None and time.monotonic() >= deadline - 1e-3:
                    raise _gave_up(what, attempt + 1, start, "no answer before the deadline "
                                   f"({policy.timeout:g} s)", last) from None
                last, after = describe(e) if str(e) else "timed out", None  # the client's own
                if attempt >= policy.retries:
                    raise _gave_up(what, attempt + 1, start, last) from e
            except StoreError:
                raise
            except Exception as e:
                last, after = _failed(e, policy, what, attempt, start)
        await asyncio.sleep(_next_wait(policy, attempt, after, deadline, what, start, last))
        attempt += 1


def retry_sync(op: Callable[[], T], policy: RetryPolicy, what: str) -> T:
    """:func:`retry_async` for blocking operations (a deadline cannot cut one short: it
    ends the retries)."""
    start = time.monotonic()
    deadline = None if policy.timeout is None else start + policy.timeout
    attempt = 0
    while True:
        try:
            return op()
        except Exception as e:
            last, after = _failed(e, policy, what, attempt, start)
        time.sleep(_next_wait(policy, attempt, after, deadline, what, start, last))
        attempt += 1


def _failed(error: Exception, policy: RetryPolicy, what: str, attempt: int,
            start: float) -> tuple[str, float | None]:
    """After attempt ``attempt`` (from 0) failed with ``error``: its description and the
    server's ``Retry-After``; raises ``error`` if it is not transient, and the final error
    if no attempt is left."""
    if not transient(error):
        raise error
    last = describe(error)
    if attempt >= policy.retries:
        raise _gave_up(what, attempt + 1, start, last) from error
    return last, retry_after(error)


def _next_wait(policy: RetryPolicy, attempt: int, after: float | None, deadline: float | None,
               what: str, start: float, last: str) -> float:
    """The pause before the next attempt; the final error if it would pass the deadline."""
    wait = policy.wait(attempt, after)
    if deadline is not None and time.monotonic() + wait >= deadline:
        raise _gave_up(what, attempt + 1, start, last,
                       f"(the next wait, {wait:.2f} s, passes the deadline)")
    return wait


def _gave_up(what: str, attempts: int, start: float, last: str, extra: str = "",
             previous: str = "") -> StoreError:
    took = time.monotonic() - start
    detail = f"; before that: {previous}" if previous and previous != last else ""
    tail = f" {extra}" if extra else ""
    return StoreError(f"{what}: failed after {attempts} attempt(s) in {took:.2f} s; "
                      f"last: {last}{detail}{tail}")
