"""How many remote requests may be in flight: the process's budget, a store's, a call's.

At most ``io_concurrency`` requests of the process are in flight at once (default 64, or
``SHARDVOL_IO_CONCURRENCY``; :func:`set_io_concurrency`), at most a store's own limit of
that store's, and at most a call's limit of that call's (:func:`io_limit`, or the
``io_concurrency`` keyword of the reading and writing methods); the smallest bounds.  This
budget is apart from the decode threads (``parallel``), so that waiting on the network
never holds a core.  The requests take their slots on the I/O loop
(:class:`shardvol.kvstore.remote.Requests`).

A call's limit lives in a context variable of the thread that made the call
(:data:`shardvol._parallel.call_limit`).  Its work hops to other threads (decode and I/O
pools, the futures' pool: :class:`~shardvol._parallel.CarryingPool`) and to the I/O loop
(:func:`shardvol.kvstore.remote.start_on`), which capture the limit in the calling thread
and set it where the work runs.  Nothing here imports asyncio: a process that reads only
local files never does.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, cast

from shardvol._parallel import call_limit
from shardvol.errors import InvalidArgumentError

if TYPE_CHECKING:
    import asyncio


def positive(value: object, name: str) -> int:
    """``value``, a positive integer (else InvalidArgumentError naming it ``name``)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(f"{name} must be a positive integer, got {value!r}")
    return value


def _from_env() -> int:
    text = os.environ.get("SHARDVOL_IO_CONCURRENCY", "64")
    try:
        return positive(int(text), "SHARDVOL_IO_CONCURRENCY")
    except ValueError:
        raise InvalidArgumentError(
            f"SHARDVOL_IO_CONCURRENCY must be a positive integer, got {text!r}") from None


class Slots:
    """``n`` slots of requests in flight: one asyncio.Semaphore per event loop (a semaphore
    belongs to the loop it waits on), made on that loop's thread when first needed."""

    __slots__ = ("_by_loop", "n")

    def __init__(self, n: int) -> None:
        self.n = n
        self._by_loop: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Semaphore]] = {}

    def on_running_loop(self) -> asyncio.Semaphore:
        # (only the loop's own thread touches its entry)
        import asyncio  # (imported by then: this runs on a loop)

        loop = asyncio.get_running_loop()
        entry = self._by_loop.get(id(loop))
        if entry is None or entry[0] is not loop:
            entry = self._by_loop[id(loop)] = (loop, asyncio.Semaphore(self.n))
        return entry[1]


_limit = _from_env()
_process = Slots(_limit)


def io_concurrency() -> int:
    """Remote requests of this process in flight at most."""
    return _limit


def process_slots() -> Slots:
    """The process's slots of requests in flight (replaced by :func:`set_io_concurrency`)."""
    return _process


def set_io_concurrency(n: int) -> None:
    """Let at most ``n`` remote requests of this process be in flight at once (requests
    already waiting keep the limit they found)."""
    global _limit, _process
    _limit = positive(n, "io_concurrency")
    _process = Slots(_limit)


class CallLimit:
    """A call's limit of requests in flight, within the limit of the call it was made in
    (``outer``), if any."""

    __slots__ = ("outer", "slots")

    def __init__(self, n: int, outer: CallLimit | None) -> None:
        self.slots = Slots(n)
        self.outer = outer


def current() -> CallLimit | None:
    """The limit of the call under way in this thread or task (set only by _within)."""
    return cast("CallLimit | None", call_limit.get())


@contextlib.contextmanager
def _within(n: int) -> Iterator[None]:
    token = call_limit.set(CallLimit(n, current()))
    try:
        yield
    finally:
        call_limit.reset(token)


def io_limit(n: int) -> contextlib.AbstractContextManager[None]:
    """At most ``n`` remote requests in flight at once for the reads and writes made inside
    the ``with`` block (in this thread, and in the threads and futures they start)::

        with shardvol.io_limit(8):
            a = vol[box]                  # at most 8 of this read's requests in flight
            f = vol.read_async(other)     # this read keeps the limit, whenever it runs

    The limit is one of the block (all its calls share the ``n`` slots), on top of each
    store's and the process's (:func:`set_io_concurrency`): the smallest bounds.  Nested
    blocks and the ``io_concurrency`` keyword of a call take slots of every enclosing
    limit too, so the smallest wins.  Futures started in the block keep its limit after the
    block ends.  Only remote stores' requests are counted (``http(s)``, ``s3``, ``gs``, ...
    through fsspec's asynchronous filesystems); local files and ``memory://`` are not
    limited, nor are S3 lock (lease) requests, which must not wait behind bulk reads.
    Work run by other executors (Dask, process pools) runs without the limit.
    ``n``: a positive integer (else InvalidArgumentError).
    """
    return _within(positive(n, "io_limit"))


def limited(n: int | None) -> contextlib.AbstractContextManager[None]:
    """The ``io_concurrency=n`` keyword of a call: :func:`io_limit` of ``n`` (checked now,
    named ``io_concurrency`` in the error), or nothing for None."""
    if n is None:
        return contextlib.nullcontext()
    return _within(positive(n, "io_concurrency"))


def _reset_in_child() -> None:
    global _process
    _process = Slots(_limit)


os.register_at_fork(after_in_child=_reset_in_child)
