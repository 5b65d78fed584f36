"""Running work on a shared thread pool: the pattern every parallel layer uses.

The pools' threads run each task under the limit of requests in flight of the call that
submitted it (:func:`shardvol.io_limit`), which they would not see otherwise.
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import ParamSpec, TypeVar

T = TypeVar("T")
P = ParamSpec("P")

#: The limit of requests in flight of the call under way (:func:`shardvol.io_limit`; its
#: objects and their use are :mod:`shardvol.kvstore.remote`'s), None without one.  Threads
#: do not share context variables: :func:`carry` takes it along to another thread.
call_limit: contextvars.ContextVar[object | None] = contextvars.ContextVar(
    "shardvol_call_limit", default=None)


def carry(fn: Callable[P, T]) -> Callable[P, T]:
    """``fn``, to run in another thread under this thread's call limit (captured now)."""
    limit = call_limit.get()

    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        token = call_limit.set(limit)
        try:
            return fn(*args, **kwargs)
        finally:
            call_limit.reset(token)

    return run


class CarryingPool(ThreadPoolExecutor):
    """A thread pool whose tasks run under the call limit of the thread that submitted
    them (``map`` submits too)."""

    def submit(self, fn: Callable[P, T], /, *args: P.args,
               **kwargs: P.kwargs) -> Future[T]:
        return super().submit(carry(fn), *args, **kwargs)


_pool: CarryingPool | None = None
_pool_lock = threading.Lock()


def _work_pool() -> CarryingPool:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = CarryingPool(max_workers=32, thread_name_prefix="shardvol-work")
        return _pool


def _reset_in_child() -> None:
    """After fork: the parent's pool threads do not exist in the child."""
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_reset_in_child)


def submit(fn: Callable[..., T], *args: object) -> Future:
    """Run ``fn(*args)`` in the background on the shared pool (it must not wait on the pool)."""
    return _work_pool().submit(fn, *args)


_DEFAULT_PARALLEL = max(2, os.cpu_count() or 1)  # os.cpu_count() costs ~6 us a call


def default_parallel() -> int:
    return _DEFAULT_PARALLEL


# Work shorter than this runs in the caller's thread alone.  Waking a pool thread takes
# about 0.1-0.15 ms here (2 vCPUs), so halving work of 0.5 ms about breaks even; at 2 ms,
# 24 cutouts of 100^3 (about 1 ms of work each) read 20-25% slower on one thread.
MIN_PARALLEL_SECONDS = 0.0005


class WorkEstimate:
    """Moving average of the seconds one item of some kind of work takes, to decide
    whether a batch of it is worth spreading over threads (unknown work always is)."""

    def __init__(self) -> None:
        self.seconds: float | None = None

    def threads(self, n_items: int, parallel: int) -> int:
        """``parallel``, or 1 if ``n_items`` items are expected to take too little time."""
        if self.seconds is not None and n_items * self.seconds < MIN_PARALLEL_SECONDS:
            return 1
        return parallel

    def record(self, seconds: float, n_items: int) -> None:
        """Account for ``n_items`` items that took ``seconds`` (wall time) in all."""
        if n_items:
            s = seconds / n_items
            self.seconds = s if self.seconds is None else 0.7 * self.seconds + 0.3 * s


def run_parallel(fn: Callable[[T], None], items: Sequence[T], parallel: int) -> None:
    """Apply ``fn`` to every item on up to ``parallel`` threads (the caller is one of them).

    The first exception is re-raised after all workers stop taking new items.
    Safe to nest: helpers that have not started when the caller's own loop ends
    are cancelled, so a full pool can never leave the caller waiting.
    """
    if parallel <= 1 or len(items) <= 1:
        for item in items:
            fn(item)
        return
    it = iter(items)
    lock = threading.Lock()
    failed: list[BaseException] = []

    def worker() -> None:
        _sharing.depth = getattr(_sharing, "depth", 0) + 1
        try:
            while not failed:
                with lock:
                    item = next(it, _END)
                if item is _END:
                    return
                try:
                    fn(item)  # type: ignore[arg-type]  # an item: not the _END sentinel
                except BaseException as e:
                    failed.append(e)
                    return
        finally:
            _sharing.depth -= 1

    futures = [_work_pool().submit(worker) for _ in range(min(parallel, len(items)) - 1)]
    worker()
    for f in futures:
        if not f.cancel():
            f.result()
    if failed:
        raise failed[0]


_END = object()
_sharing = threading.local()


def sharing_cores() -> bool:
    """Whether this thread is one of several that :func:`run_parallel` runs: its work then
    has the cores shared already, and spreading a part of it (a read's files) over more
    threads only adds hand-offs (and waits for the GIL between them)."""
    return getattr(_sharing, "depth", 0) > 0
