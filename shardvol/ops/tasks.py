"""Running planned tasks on any ``concurrent.futures.Executor``, with a progress bar.

Long jobs (copies between formats, downsampling) are split into tasks that each
own whole output files, described by small picklable objects (URLs, regions,
parameters; never arrays).  ``executor=None`` runs them on a thread pool of
this process; a ``ProcessPoolExecutor`` or a Dask cluster's
``client.get_executor()`` runs the same tasks elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor, as_completed
from typing import TypeVar

from tqdm.auto import tqdm

from shardvol._parallel import carry, default_parallel
from shardvol.errors import InvalidArgumentError
from shardvol.kvstore import KVStore

T = TypeVar("T")


def check_reachable(stores: Sequence[KVStore], executor: Executor | None) -> None:
    """Refuse an executor that may run tasks in other processes when a store lives in this
    one (``memory://``): its workers would find nothing there."""
    if executor is None or isinstance(executor, ThreadPoolExecutor):
        return
    for store in stores:
        if store.in_process:
            raise InvalidArgumentError(
                f"{store.url} lives in this process, which the executor's workers may not "
                "be: use executor=None or a ThreadPoolExecutor"
            )


def run_tasks(
    fn: Callable[[T], object],
    tasks: Sequence[T],
    executor: Executor | None = None,
    *,
    progress: bool = True,
    desc: str = "tasks",
) -> None:
    """Run ``fn(task)`` for every task on ``executor`` (None: a local thread pool).

    ``fn`` must be a module-level function when the executor pickles work.
    The first failure is raised once the tasks already running have finished;
    tasks not yet started are cancelled.  On a thread pool (None included) the tasks run
    under the caller's limit of requests in flight (:func:`shardvol.io_limit`); other
    executors run them without it.
    """
    own = executor is None
    pool = ThreadPoolExecutor(max_workers=default_parallel()) if executor is None else executor
    run = carry(fn) if isinstance(pool, ThreadPoolExecutor) else fn
    futures: list[Future] = []
    try:
        futures = [pool.submit(run, task) for task in tasks]
        with tqdm(total=len(futures), desc=desc, unit="task", disable=not progress) as bar:
            for future in as_completed(futures):
                future.result()
                bar.update()
    except BaseException:
        for future in futures:
            future.cancel()
        raise
    finally:
        if own:
            pool.shutdown(wait=True)
