"""Remote requests: run on the process's I/O loop, many in flight, each one retried.

Every remote store's requests run as coroutines on fsspec's I/O loop (one thread per
process, which fsspec's async filesystems already use).  At most ``io_concurrency``
requests of the process are in flight at once (default 64, or ``SHARDVOL_IO_CONCURRENCY``;
:func:`set_io_concurrency`), at most a store's own limit of that store's, and at most a
call's limit of that call's (:func:`io_limit`, or the ``io_concurrency`` keyword of the
reading and writing methods); the smallest bounds.  This budget is apart from the decode
threads (``parallel``), so that waiting on the network never holds a core.  Each request
is retried on transient failures (see :mod:`shardvol.kvstore.retry`).

A call's limit lives in a context variable of the thread that made the call
(:data:`shardvol._parallel.call_limit`).  Its work hops to other threads (decode and I/O
pools, the futures' pool: :class:`~shardvol._parallel.CarryingPool`) and to the I/O loop
(:func:`start_on`), which capture the limit in the calling thread and set it where the
work runs; the requests take its slots there.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Sequence
from typing import Any, TypeVar, cast

from shardvol._parallel import call_limit
from shardvol.errors import InvalidArgumentError, StoreError
from shardvol.kvstore.retry import RetryPolicy, retry_async

T = TypeVar("T")


def _positive(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(f"{name} must be a positive integer, got {value!r}")
    return value


def _from_env() -> int:
    text = os.environ.get("SHARDVOL_IO_CONCURRENCY", "64")
    try:
        return _positive(int(text), "SHARDVOL_IO_CONCURRENCY")
    except ValueError:
        raise InvalidArgumentError(
            f"SHARDVOL_IO_CONCURRENCY must be a positive integer, got {text!r}") from None


class _Slots:
    """``n`` slots of requests in flight: one asyncio.Semaphore per event loop (a semaphore
    belongs to the loop it waits on), made on that loop's thread when first needed."""

    __slots__ = ("_by_loop", "n")

    def __init__(self, n: int) -> None:
        self.n = n
        self._by_loop: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Semaphore]] = {}

    def on_running_loop(self) -> asyncio.Semaphore:
        # (only the loop's own thread touches its entry)
        loop = asyncio.get_running_loop()
        entry = self._by_loop.get(id(loop))
        if entry is None or entry[0] is not loop:
            entry = self._by_loop[id(loop)] = (loop, asyncio.Semaphore(self.n))
        return entry[1]


_limit = _from_env()
_process = _Slots(_limit)


def io_concurrency() -> int:
    """Remote requests of this process in flight at most."""
    return _limit


def set_io_concurrency(n: int) -> None:
    """Let at most ``n`` remote requests of this process be in flight at once (requests
    already waiting keep the limit they found)."""
    global _limit, _process
    _limit = _positive(n, "io_concurrency")
    _process = _Slots(_limit)


class _CallLimit:
    """A call's limit of requests in flight, within the limit of the call it was made in
    (``outer``), if any."""

    __slots__ = ("outer", "slots")

    def __init__(self, n: int, outer: _CallLimit | None) -> None:
        self.slots = _Slots(n)
        self.outer = outer


def _current() -> _CallLimit | None:
    """The limit of the call under way in this thread or task (set only by _within)."""
    return cast("_CallLimit | None", call_limit.get())


@contextlib.contextmanager
def _within(n: int) -> Iterator[None]:
    token = call_limit.set(_CallLimit(n, _current()))
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
    return _within(_positive(n, "io_limit"))


def limited(n: int | None) -> contextlib.AbstractContextManager[None]:
    """The ``io_concurrency=n`` keyword of a call: :func:`io_limit` of ``n`` (checked now,
    named ``io_concurrency`` in the error), or nothing for None."""
    if n is None:
        return contextlib.nullcontext()
    return _within(_positive(n, "io_concurrency"))


def _reset_in_child() -> None:
    global _process
    _process = _Slots(_limit)


os.register_at_fork(after_in_child=_reset_in_child)


_exiting = threading.Event()


def _at_exit() -> None:
    _exiting.set()


def exiting() -> bool:
    """Whether the interpreter is exiting (waits on requests give up)."""
    return _exiting.is_set()


# (runs before concurrent.futures joins the threads of its pools: see array.futures)
threading._register_atexit(_at_exit)  # type: ignore[attr-defined]  # (no public hook)


def start_on(loop: asyncio.AbstractEventLoop,
             coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Start ``coro`` on the I/O loop, under this thread's call limit: the limit is taken
    here, in the calling thread, and set inside the task that runs ``coro`` (and the tasks
    it starts), where its requests take their slots."""
    return asyncio.run_coroutine_threadsafe(_under(_current(), coro), loop)


async def _under(limit: _CallLimit | None, coro: Coroutine[Any, Any, T]) -> T:
    call_limit.set(limit)  # (the task's own context)
    return await coro


def run_on(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on the I/O loop (:func:`start_on`) and wait for it; if the wait is
    interrupted (Ctrl-C), or the interpreter is exiting (a background read must not hold
    its exit for a deadline), the coroutine is cancelled, with the requests it has under
    way."""
    future = start_on(loop, coro)
    try:
        while True:
            try:
                return future.result(timeout=0.25)
            except concurrent.futures.TimeoutError:
                if exiting():
                    raise StoreError("the interpreter is exiting: request cancelled") from None
    except BaseException:
        future.cancel()
        raise


class Requests:
    """How one store runs its requests: its own limit of requests in flight (None: only
    the process's and the calls') and its retry policy."""

    def __init__(self, policy: RetryPolicy, limit: int | None = None,
                 process_budget: bool = True) -> None:
        """``process_budget``: the requests also count against the process's budget and
        the limits of the calls that make them (False: lock requests, which must not wait
        behind bulk reads)."""
        self.policy = policy
        self.limit = None if limit is None else _positive(limit, "io_concurrency")
        self.process_budget = process_budget
        self._own = None if self.limit is None else _Slots(self.limit)

    def __getstate__(self) -> dict[str, Any]:
        return {"policy": self.policy, "limit": self.limit, "process": self.process_budget}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["policy"], state["limit"], state["process"])  # type: ignore[misc]  # unpickling

    async def one(self, op: Callable[[], Awaitable[T]], what: str) -> T:
        """``await op()`` within the budgets, retried (each attempt takes its slots anew, so
        that waiting out a backoff holds none)."""
        return await retry_async(op, self.policy, what, self._slots)

    @contextlib.asynccontextmanager
    async def _slots(self) -> AsyncIterator[None]:
        """A slot of the call's limit (and of each enclosing one, innermost first), then
        one of this store's limit, then one of the process's budget: a call waiting on
        its own limit holds none of the store's or the process's, and a store waiting on
        its own limit none of the process's."""
        semaphores = []
        if self.process_budget:
            call = _current()
            while call is not None:
                semaphores.append(call.slots.on_running_loop())
                call = call.outer
        if self._own is not None:
            semaphores.append(self._own.on_running_loop())
        if self.process_budget:
            semaphores.append(_process.on_running_loop())
        held = 0
        try:
            for semaphore in semaphores:
                await semaphore.acquire()
                held += 1
            yield
        finally:
            for semaphore in reversed(semaphores[:held]):
                semaphore.release()

    async def each(
        self, ops: Sequence[Callable[[], Awaitable[T]]], whats: Sequence[str]
    ) -> list[T | Exception]:
        """:meth:`one` of every op, concurrently; an exception in place of a result that
        failed (as fsspec's ``cat_ranges(on_error="return")`` reports them)."""

        async def guarded(op: Callable[[], Awaitable[T]], what: str) -> T | Exception:
            try:
                return await self.one(op, what)
            except Exception as e:  # reported per request
                return e

        return list(await asyncio.gather(*(guarded(op, w) for op, w in zip(ops, whats))))
