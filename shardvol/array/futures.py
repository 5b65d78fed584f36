"""Reads and writes that return futures, so that a caller can keep many under way at once.

Each read runs on a thread of one process-wide pool (``ASYNC_THREADS``): while it waits
on its store, its requests are in flight within the store's budget, so a hundred
outstanding reads are a hundred reads' requests on the network, not a hundred threads.
Writes of one array run in the order of the calls (each starts once the previous one is
done, whether it succeeded or not); the units they write are replaced atomically, as
by a blocking write.  A future that has not started can be cancelled; at interpreter exit
the futures not started are cancelled, so that shutting down never waits on them.

Each read or write runs under the call limit of requests in flight it was started with
(its ``io_concurrency`` keyword, and the :func:`shardvol.io_limit` blocks around the
call), whenever it runs: the limit is captured when it is submitted.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar

import numpy as np

from shardvol._parallel import CarryingPool, carry
from shardvol.array.cache import ChunkCache
from shardvol.errors import InvalidArgumentError
from shardvol.kvstore.limits import limited

T = TypeVar("T")

#: Reads and writes running at once, at most, in this process.
ASYNC_THREADS = 16

_pool: CarryingPool | None = None
_pool_lock = threading.Lock()


def _executor() -> CarryingPool:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = CarryingPool(ASYNC_THREADS, thread_name_prefix="shardvol-async")
        return _pool


_exiting = False


def _cancel_pending() -> None:
    """At exit: futures not started are cancelled (those running finish)."""
    global _exiting
    _exiting = True
    with _pool_lock:
        if _pool is not None:
            _pool.shutdown(wait=False, cancel_futures=True)


def _reset_in_child() -> None:
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


# run before concurrent.futures joins its threads at exit (its hook was registered first,
# and these hooks run last registered first)
threading._register_atexit(_cancel_pending)  # type: ignore[attr-defined]  # (no public hook)
os.register_at_fork(after_in_child=_reset_in_child)


def submit(fn: Callable[[], T]) -> Future[T]:
    """Run ``fn()`` on the pool (under this thread's call limit)."""
    return _executor().submit(fn)


class WriteQueue:
    """Writes of one array, run one after another in the order they were submitted: one
    pool thread runs them while there are any (no thread waits for another).  A write
    not yet started can be cancelled; at interpreter exit those not started are."""

    def __init__(self) -> None:
        self._queue: deque[tuple[Future[Any], Callable[[], Any]]] = deque()
        self._running = False
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {}  # (pending writes belong to this process)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]  # unpickling: empty

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """Queue ``fn()`` (to run under this thread's call limit)."""
        future: Future[T] = Future()
        fn = carry(fn)
        with self._lock:
            self._queue.append((future, fn))
            if self._running:
                return future
            self._running = True
        try:
            _executor().submit(self._run)
        except RuntimeError:  # the pool is shut down: the interpreter is exiting
            self._run()
        return future

    def _run(self) -> None:
        """Run the queued writes in order until there are none."""
        while True:
            with self._lock:
                if not self._queue:
                    self._running = False
                    return
                future, fn = self._queue.popleft()
            if _exiting:
                future.cancel()
                continue
            if not future.set_running_or_notify_cancel():
                continue  # (cancelled)
            try:
                future.set_result(fn())
            except BaseException as e:
                future.set_exception(e)


class _Array(Protocol):
    @property
    def cache(self) -> ChunkCache | None: ...

    def __getitem__(self, key: Any) -> np.ndarray: ...

    def __setitem__(self, key: Any, value: Any) -> None: ...


class AsyncMethods:
    """``read``, ``write``, ``read_async``, ``aread``, ``write_async`` and ``prefetch`` for
    an array that reads with ``self[key]``, writes with ``self[key] = value`` and may have a
    ``cache``.

    ``io_concurrency`` (each method): at most this many of the call's requests to a
    remote store in flight at once, on top of the store's and the process's limits and of
    any :func:`shardvol.io_limit` around the call (the smallest bounds); None adds no limit
    of its own.  Reads and writes of local files and ``memory://`` are not limited.
    """

    def read(self: _Array, key: Any = ..., *, io_concurrency: int | None = None) -> np.ndarray:
        """Same as ``self[key]``, with at most ``io_concurrency`` of the read's requests in
        flight (see :func:`shardvol.io_limit`)."""
        with limited(io_concurrency):
            return self[key]

    def write(self: _Array, key: Any, value: Any, *,
              io_concurrency: int | None = None) -> None:
        """Same as ``self[key] = value``, with at most ``io_concurrency`` of the write's
        requests in flight."""
        with limited(io_concurrency):
            self[key] = value

    def read_async(self: _Array, key: Any = ..., *,
                   io_concurrency: int | None = None) -> Future[np.ndarray]:
        """``self[key]`` in the background: a Future of the array (or of the shardvol error
        the read raises)."""
        with limited(io_concurrency):
            return submit(lambda: self[key])

    async def aread(self: _Array, key: Any = ..., *,
                    io_concurrency: int | None = None) -> np.ndarray:
        """``self[key]`` for asyncio code: ``await vol.aread(region)`` (the read runs as
        :meth:`read_async` does, off the event loop)."""
        import asyncio  # (running in its loop: imported; a local read never imports it)

        return await asyncio.wrap_future(
            AsyncMethods.read_async(self, key, io_concurrency=io_concurrency))

    def write_async(self: _Array, key: Any, value: Any, *,
                    io_concurrency: int | None = None) -> Future[None]:
        """``self[key] = value`` in the background, after the writes this handle was given
        before (``value`` is copied now: the caller may change it at once)."""
        with limited(io_concurrency):  # (first: a bad limit is refused before the copy)
            try:
                copied = np.array(value, copy=True)
            except (TypeError, ValueError) as e:  # (ragged sequences, objects numpy refuses)
                raise InvalidArgumentError(
                    f"cannot write {type(value).__name__} value: {e}") from None
            queue = self.__dict__.get("_write_queue")
            if queue is None:
                queue = self.__dict__.setdefault("_write_queue", WriteQueue())
            return queue.submit(lambda: self.__setitem__(key, copied))

    def prefetch(self: _Array, key: Any = ..., *,
                 io_concurrency: int | None = None) -> Future[None]:
        """Read ``key``'s chunks into the cache in the background, so that a read of it
        later finds them there (InvalidArgumentError when there is no cache)."""
        scope = limited(io_concurrency)
        if self.cache is None:
            raise InvalidArgumentError(
                "prefetch fills the chunk cache, and this handle has none: open it with "
                "cache_bytes (a size, such as '512MB')"
            )

        def warm() -> None:
            self[key]

        with scope:
            return submit(warm)
