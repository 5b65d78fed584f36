"""Remote requests: run on the process's I/O loop, many in flight, each one retried.

Every remote store's requests run as coroutines on fsspec's I/O loop (one thread per
process, which fsspec's async filesystems already use).  At most ``io_concurrency``
requests of the process are in flight at once (default 64, or ``SHARDVOL_IO_CONCURRENCY``;
:func:`set_io_concurrency`), and at most a store's own limit of that store's; this budget
is apart from the decode threads (``parallel``), so that waiting on the network never
holds a core.  Each request is retried on transient failures (see
:mod:`shardvol.kvstore.retry`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

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


_limit = _from_env()
_budgets: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Semaphore]] = {}
_budgets_lock = threading.Lock()


def io_concurrency() -> int:
    """Remote requests of this process in flight at most."""
    return _limit


def set_io_concurrency(n: int) -> None:
    """Let at most ``n`` remote requests of this process be in flight at once (requests
    already waiting keep the limit they found)."""
    global _limit
    _limit = _positive(n, "io_concurrency")
    with _budgets_lock:
        _budgets.clear()


def _budget() -> asyncio.Semaphore:
    """The process's request budget on the running loop."""
    loop = asyncio.get_running_loop()
    with _budgets_lock:
        entry = _budgets.get(id(loop))
        if entry is None or entry[0] is not loop:
            entry = _budgets[id(loop)] = (loop, asyncio.Semaphore(_limit))
        return entry[1]


def _reset_in_child() -> None:
    global _budgets_lock
    _budgets.clear()
    _budgets_lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_in_child)


_exiting = threading.Event()


def _at_exit() -> None:
    _exiting.set()


def exiting() -> bool:
    """Whether the interpreter is exiting (waits on requests give up)."""
    return _exiting.is_set()


# (runs before concurrent.futures joins the threads of its pools: see array.futures)
threading._register_atexit(_at_exit)  # type: ignore[attr-defined]  # (no public hook)


def run_on(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on the I/O loop and wait for it; if the wait is interrupted (Ctrl-C),
    or the interpreter is exiting (a background read must not hold its exit for a
    deadline), the coroutine is cancelled, with the requests it has under way."""
    future = asyncio.run_coroutine_threadsafe(coro, loop)
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
    the process's) and its retry policy."""

    def __init__(self, policy: RetryPolicy, limit: int | None = None,
                 process_budget: bool = True) -> None:
        """``process_budget``: the requests also count against the process's budget."""
        self.policy = policy
        self.limit = None if limit is None else _positive(limit, "io_concurrency")
        self.process_budget = process_budget
        self._semaphores: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Semaphore]] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"policy": self.policy, "limit": self.limit, "process": self.process_budget}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["policy"], state["limit"], state["process"])  # type: ignore[misc]  # unpickling

    def _own(self) -> asyncio.Semaphore | None:
        if self.limit is None:
            return None
        loop = asyncio.get_running_loop()
        entry = self._semaphores.get(id(loop))
        if entry is None or entry[0] is not loop:
            entry = self._semaphores[id(loop)] = (loop, asyncio.Semaphore(self.limit))
        return entry[1]

    async def one(self, op: Callable[[], Awaitable[T]], what: str) -> T:
        """``await op()`` within the budgets, retried (each attempt takes its slots anew, so
        that waiting out a backoff holds none)."""
        return await retry_async(op, self.policy, what, self._slots)

    @contextlib.asynccontextmanager
    async def _slots(self) -> AsyncIterator[None]:
        """A slot of this store's limit, then one of the process's budget (so that a
        store waiting on its own limit holds none of the process's)."""
        own = self._own()
        process = _budget() if self.process_budget else contextlib.nullcontext()
        async with own if own is not None else contextlib.nullcontext(), process:
            yield

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
