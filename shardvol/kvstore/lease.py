"""Cross-process locks on object stores: one lease object per locked key.

The lock on ``d/name`` is the object ``d/.shardvol-lock.name``, and whoever created it
holds the lock.  The protocol needs three conditional operations of the store (S3 has
them: ``If-None-Match: *`` on PUT, ``If-Match: <ETag>`` on PUT and DELETE):

* **acquire**: create the lease object only if it is absent.  The body names the holder
  (host, process, thread) and its lease time ``ttl``.
* **renew**: while the lock is held, a thread rewrites the object every ``ttl / 3``, only
  if it is still the version the holder wrote last.  Each renewal counts up in the body,
  so the version changes (an S3 ETag is the MD5 of the bytes).
* **release**: delete the object, only if it is still the holder's version.
* **stale leases**: a waiter that sees one version of the object for a whole ``ttl`` on its
  own monotonic clock (no clock synchronisation needed) takes the holder for dead (crashed,
  killed) and deletes exactly that version; then everybody competes to create it again.

A holder that cannot renew for ``ttl / 2`` (the store unreachable), or whose lease was
taken over, has lost the lock: :meth:`Lease.check`, which the store calls before every
write and delete of the locked key, raises :class:`~shardvol.errors.LockLostError`, so the
write is refused instead of racing the new holder.  Only a single request that is already
under way when the lease runs out (``ttl / 2`` after the last renewal) can still race.
"""

from __future__ import annotations

import json
import logging
import os
import random
import socket
import threading
import time
import uuid
from typing import Protocol

from shardvol.errors import InvalidArgumentError, LockLostError, LockTimeoutError
from shardvol.jsondoc import load_json
from shardvol.kvstore.base import HIDDEN_PREFIX

LEASE_PREFIX = HIDDEN_PREFIX + "lock."
DEFAULT_LEASE_TTL = 30.0
#: Seconds a waiter waits in silence; then it says what it waits for, and until when.
QUIET_WAIT = 2.0
_log = logging.getLogger("shardvol")


def default_lease_ttl() -> float:
    """The lease time of locks: ``SHARDVOL_LEASE_TTL`` seconds if set, else 30."""
    value = os.environ.get("SHARDVOL_LEASE_TTL")
    if value is None:
        return DEFAULT_LEASE_TTL
    try:
        ttl = float(value)
    except ValueError:
        ttl = 0.0
    if not ttl > 0:
        raise InvalidArgumentError(
            f"SHARDVOL_LEASE_TTL must be a positive number of seconds, got {value!r}")
    return ttl


class ConditionalObjects(Protocol):
    """The conditional operations a lease needs, on full object paths.  Versions are the
    store's opaque tokens (S3 ETags).  Implementations retry transient failures; a retried
    write that finds its own bytes in place (lease bodies are unique) has succeeded."""

    def create(self, path: str, body: bytes) -> str | None:
        """Write ``body`` if ``path`` is absent; its version, or None if it exists."""

    def replace(self, path: str, body: bytes, version: str) -> str | None:
        """Overwrite ``path`` if it is at ``version``; the new version, or None if not."""

    def current(self, path: str) -> tuple[str, bytes] | None:
        """(version, body) of ``path``, or None if it is absent."""

    def delete(self, path: str, version: str) -> bool:
        """Delete ``path`` if it is at ``version``; whether it did."""


def lease_path(path: str) -> str:
    """The lease object of the object at ``path`` (a sibling with a hidden name)."""
    head, _, name = path.rpartition("/")
    return f"{head}/{LEASE_PREFIX}{name}" if head else LEASE_PREFIX + name


class Lease:
    """A held lock: renewed in the background until :meth:`release`."""

    def __init__(self, ops: ConditionalObjects, path: str, doc: dict, version: str,
                 ttl: float, sent: float) -> None:
        """``sent``: when the request that created the lease object was sent (monotonic)."""
        self.ops, self.path, self.ttl = ops, path, ttl
        self._doc, self._version = doc, version
        # a lease's age runs from when its renewal was sent, not answered: a waiter may
        # start counting as soon as the store has it
        self._renewed = sent
        self._lost: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew_loop, daemon=True,
                                        name=f"shardvol-lease {path}")
        self._thread.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                self._doc["renewal"] += 1
                sent = time.monotonic()
                version = self.ops.replace(self.path, _encode(self._doc), self._version)
            except Exception:
                continue
            if version is None:
                self._lost = "another writer took the lease over"
                return
            self._version, self._renewed = version, sent

    def valid_for(self) -> float:
        """Seconds from now until the lease may no longer be ours (0 if it may not be)."""
        if self._lost is not None:
            return 0.0
        return max(0.0, self.ttl / 2 - (time.monotonic() - self._renewed))

    def check(self) -> None:
        """Raise LockLostError unless the lease is certainly still ours."""
        age = time.monotonic() - self._renewed
        if self._lost is None and age > self.ttl / 2:
            self._lost = f"not renewed for {age:.1f} s (lease time {self.ttl:g} s)"
        if self._lost is not None:
            raise LockLostError(f"lock {self.path} lost: {self._lost}; write refused")

    def release(self) -> None:
        """Stop renewing and delete the lease object if it is still ours (also when it ran
        out here: waiters need not wait for it to go stale)."""
        self._stop.set()
        self._thread.join()
        if not self.ops.delete(self.path, self._version) and self._lost is None:
            self._lost = "another writer took the lease over"
        if self._lost is not None:
            raise LockLostError(
                f"lock {self.path} lost while held: {self._lost}; a write made under it may "
                "have raced with another writer"
            )


def acquire(ops: ConditionalObjects, path: str, ttl: float, timeout: float | None) -> Lease:
    """Take the lease at ``path``, waiting for its holder (at most ``timeout`` seconds)."""
    doc = {
        "holder": f"{socket.gethostname()} pid {os.getpid()} thread {threading.get_ident()}",
        "ttl": ttl, "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "renewal": 0,
        "token": uuid.uuid4().hex,  # no two leases have the same bytes (see ConditionalObjects)
    }
    body = _encode(doc)
    start = time.monotonic()
    seen: str | None = None  # the version of the lease object last seen, since seen_at
    seen_at = start
    told = False  # (that this holder is waited for)
    delay = 0.01
    while True:
        sent = time.monotonic()
        version = ops.create(path, body)
        if version is not None:
            return Lease(ops, path, doc, version, ttl, sent)
        now = time.monotonic()
        current = ops.current(path)
        if current is None:  # released meanwhile
            continue
        if current[0] != seen:
            seen, seen_at, told = current[0], now, False
        elif now - seen_at >= _holder_ttl(current[1], ttl):
            ops.delete(path, current[0])  # the holder stopped renewing: break its lease
            seen = None
            continue
        if timeout is not None and now - start >= timeout:
            raise LockTimeoutError(
                f"lock {path} not acquired in {timeout:g} s: held by {_holder(current[1])}"
            )
        if not told and now - start >= QUIET_WAIT:
            told = True
            lease = _holder_ttl(current[1], ttl)
            stale = time.strftime("%H:%M:%S", time.localtime(time.time() + seen_at + lease - now))
            _log.warning(
                "waiting for lock %s, held by %s: if its holder is gone (a killed process), "
                "its lease of %g s runs out unrenewed at %s and the lock is taken over",
                path, _holder(current[1]), lease, stale)
        time.sleep(delay * random.uniform(0.5, 1.5))
        delay = min(2 * delay, 0.5)


def _encode(doc: dict) -> bytes:
    return json.dumps(doc).encode()


def _holder_ttl(body: bytes, default: float) -> float:
    """The lease time the holder declared (a stale lease is one not renewed in it)."""
    try:
        return max(float(load_json(body, "lease")["ttl"]), default)
    except (ValueError, KeyError, TypeError):
        return default


def _holder(body: bytes) -> str:
    try:
        doc = load_json(body, "lease")
        return f"{doc['holder']} since {doc['since']}"
    except (ValueError, KeyError, TypeError):
        return f"an unknown holder ({body[:80]!r})"
