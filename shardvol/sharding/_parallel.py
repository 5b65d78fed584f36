"""A thread pool for codec work (gzip releases the GIL), separate from the store I/O pool.

Tasks on this pool only run codecs; they never submit to it or to
``shardvol.kvstore.base.io_pool()``, so neither pool can deadlock on the other.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

# Below this many bytes of work, a thread hand-off costs more than it saves.
MIN_PARALLEL_BYTES = 256 * 1024

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def codec_threads() -> int:
    return max(1, min(16, os.cpu_count() or 1))


def codec_pool() -> ThreadPoolExecutor:
    """The process-wide pool for codec work."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(codec_threads(), thread_name_prefix="shardvol-codec")
        return _pool


def map_batched(
    fn: Callable[[Sequence[T]], list[R]],
    items: Sequence[T],
    total_bytes: int,
    min_item_bytes: int = 0,
) -> list[R]:
    """``fn(items)`` for a function mapping a batch to a same-length list, run as one
    batch per codec thread when ``total_bytes`` of work makes that worthwhile.

    Codecs release the GIL only around their C work: items smaller on average than
    ``min_item_bytes`` run in one thread, where GIL hand-offs between threads
    would cost more than the work done without it.

    The calling thread runs the first batch.  Exceptions propagate (the first
    batch's first).  Must not be called from a codec-pool task.
    """
    n = len(items)
    threads = codec_threads()
    if (
        threads == 1
        or n < 2
        or total_bytes < MIN_PARALLEL_BYTES
        or total_bytes < n * min_item_bytes
    ):
        return fn(items)
    if threading.current_thread().name.startswith("shardvol-codec"):
        raise RuntimeError("map_batched must not be called from a codec-pool task")
    step = -(-n // threads)
    batches = [items[i : i + step] for i in range(0, n, step)]
    futures = [codec_pool().submit(fn, b) for b in batches[1:]]
    out = list(fn(batches[0]))
    for f in futures:
        out.extend(f.result())
    return out
