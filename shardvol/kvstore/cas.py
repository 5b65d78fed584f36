"""Optimistic concurrency: read-modify-write cycles as compare-and-swaps, redone on conflict.

On stores with conditional writes (``KVStore.conditional_writes``: S3), a writer that must
keep what a value holds (a shard it merges chunks into, a chunk it writes part of) needs
no lock of other processes: it reads the value with its version
(:meth:`~shardvol.kvstore.base.KVStore.get_versioned`), merges, and writes the result only
if the value is still at that version (:meth:`~shardvol.kvstore.base.KVStore.set_if`, or
:meth:`~shardvol.kvstore.base.KVStore.delete_if` when nothing is left).  If another
writer changed it in between, the condition fails (:class:`UnitChangedError`) and the
whole cycle is redone from a fresh read: :func:`redo_on_conflict`.  A write that replaces
a value whatever it held is a plain write, ordered against such cycles by their conditions.

Redoing is safe because the cycles write regions (chunks, parts of chunks): applying one
again over a newer value gives what applying it after that value's writer would have.
So is a retried conditional write whose first attempt landed, then failed its condition:
it finds its own bytes (counted as done), or the cycle is redone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, TypeVar

from shardvol.errors import UnitChangedError, WriteConflictError

if TYPE_CHECKING:
    from shardvol.kvstore.base import KVStore

T = TypeVar("T")
_FIRST_DELAY = 0.01
_MAX_DELAY = 1.0


def redo_on_conflict(attempt: Callable[[], T], timeout: float | None, what: str) -> T:
    """``attempt()`` (a read, a merge and a conditional write), run again while its write
    finds the value changed since its read (UnitChangedError), after a growing random
    pause; after ``timeout`` seconds (None: never), WriteConflictError naming ``what``."""
    start = time.monotonic()
    delay = _FIRST_DELAY
    conflicts = 0
    while True:
        try:
            return attempt()
        except UnitChangedError:
            conflicts += 1
        spent = time.monotonic() - start
        if timeout is not None and spent >= timeout:
            raise WriteConflictError(
                f"{what} was changed by other writers between the read and the conditional "
                f"write of each of {conflicts} attempts to update it, for {spent:.1f} s "
                f"(the store's conflict timeout: {timeout:g} s)"
            )
        import random  # (conflicts only)

        pause = delay * random.uniform(0.5, 1.5)
        if timeout is not None:
            pause = min(pause, max(0.0, timeout - spent))
        time.sleep(pause)
        delay = min(2 * delay, _MAX_DELAY)


def write_if(store: KVStore, key: str,
             value: bytes | memoryview | list[bytes | memoryview] | None,
             version: Hashable | None) -> None:
    """Store ``value`` (a list: the concatenation of its parts) under ``key`` (None: delete
    it) only if ``key`` is still at ``version`` (None: absent), else UnitChangedError
    naming it."""
    if value is None:
        done = store.delete_if(key, version)
    elif isinstance(value, list):
        done = store.set_parts_if(key, value, version)
    else:
        done = store.set_if(key, value, version)
    if not done:
        raise UnitChangedError(f"{store.url}/{key} changed since it was read")
