"""Running planned tasks on any ``concurrent.futures.Executor``, with a progress bar.

Long jobs (copies between formats, downsampling) are split into tasks that each
own whole output files, described by small picklable objects (URLs, regions,
parameters; never arrays).  ``executor=None`` runs them on a thread pool of
this process; a ``ProcessPoolExecutor`` or a Dask cluster's
``client.get_executor()`` runs the same tasks elsewhere.

Tasks are submitted a window at a time (a few per worker), and each finished task's
future is dropped at once: a job of a million tasks holds a few hundred futures, and on
a Dask cluster a lost worker is no reason to compute again what it finished.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ThreadPoolExecutor, wait
from typing import Protocol, TypeVar

from tqdm.auto import tqdm

from shardvol._parallel import carry, default_parallel
from shardvol.errors import InvalidArgumentError, ShardvolError, TaskError
from shardvol.kvstore import KVStore


class Named(Protocol):
    """A task that says what it writes (its unit and store), for failures to name it."""

    @property
    def name(self) -> str: ...


T = TypeVar("T", bound=Named)
_WINDOW = 256  # tasks in flight on an executor whose size is not known


def check_reachable(stores: Iterable[KVStore], executor: Executor | None) -> None:
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
    tasks: Iterable[T],
    executor: Executor | None = None,
    *,
    progress: bool = True,
    desc: str = "tasks",
    total: int | None = None,
    done: int = 0,
) -> None:
    """Run ``fn(task)`` for every task on ``executor`` (None: a local thread pool).

    ``fn`` must be a module-level function when the executor pickles work.
    The first failure is raised once the tasks already running have finished;
    tasks not yet started are not started.  A failure that is not a shardvol error
    naming its unit (a lost worker, say) is raised as a TaskError naming the task.  On a
    thread pool (None included) the tasks run under the caller's limit of requests in
    flight (:func:`shardvol.io_limit`); other executors run them without it.  The
    progress bar counts ``total`` tasks (default: as many as given), ``done`` of them
    before these.
    """
    tasks = list(tasks) if total is None else tasks
    if total is None:
        total = done + len(tasks)  # type: ignore[arg-type]  # (a list now)
    own = executor is None
    pool = ThreadPoolExecutor(max_workers=default_parallel()) if executor is None else executor
    run = carry(fn) if isinstance(pool, ThreadPoolExecutor) else fn
    pending: dict[Future, T] = {}
    todo = iter(tasks)
    try:
        with tqdm(total=total, initial=done, desc=desc, unit="task",
                  disable=not progress) as bar:
            window = _window(pool)
            for task in todo:
                pending[pool.submit(run, task)] = task
                if len(pending) >= window:
                    break
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    task = pending.pop(future)
                    _result(future, task, desc)
                    bar.update()
                for task in todo:
                    pending[pool.submit(run, task)] = task
                    if len(pending) >= window:
                        break
    except BaseException:
        for future in pending:
            future.cancel()
        raise
    finally:
        if own:
            pool.shutdown(wait=True)


def _result(future: Future, task: Named, desc: str) -> None:
    """The task's outcome: its own shardvol error (with the task noted, where Python
    keeps notes), or a TaskError naming it."""
    try:
        future.result()
    except ShardvolError as e:
        if sys.version_info >= (3, 11):
            e.add_note(f"(in {desc}: {task.name})")
        raise
    except Exception as e:
        raise TaskError(f"{desc}: {task.name} failed: {type(e).__name__}: {e}") from e


def _window(pool: Executor) -> int:
    """Tasks to keep in flight: four per worker where the executor tells how many."""
    workers = getattr(pool, "_max_workers", None)
    client = getattr(pool, "_client", None)  # (a Dask client's executor)
    if workers is None and client is not None:
        try:
            workers = sum(client.nthreads().values())
        except Exception:
            workers = None
    return max(8, 4 * workers) if workers else _WINDOW
