"""Remote requests: run on the process's I/O loop, many in flight, each one retried.

Every remote store's requests run as coroutines on fsspec's I/O loop (one thread per
process, which fsspec's async filesystems already use), each within the limits of
requests in flight of the process, its store and its call (:mod:`shardvol.kvstore.limits`),
and retried on transient failures (see :mod:`shardvol.kvstore.retry`).  A call's limit is
taken in the calling thread (:func:`start_on`) and set inside the task that runs its
requests, where they take its slots.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from shardvol._parallel import call_limit
from shardvol.errors import StoreError
from shardvol.kvstore.limits import CallLimit, Slots, current, positive, process_slots
from shardvol.kvstore.retry import RetryPolicy, retry_async

T = TypeVar("T")


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
    return asyncio.run_coroutine_threadsafe(_under(current(), coro), loop)


async def _under(limit: CallLimit | None, coro: Coroutine[Any, Any, T]) -> T:
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
        self.limit = None if limit is None else positive(limit, "io_concurrency")
        self.process_budget = process_budget
        self._own = None if self.limit is None else Slots(self.limit)

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
            call = current()
            while call is not None:
                semaphores.append(call.slots.on_running_loop())
                call = call.outer
        if self._own is not None:
            semaphores.append(self._own.on_running_loop())
        if self.process_budget:
            semaphores.append(process_slots().on_running_loop())
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
