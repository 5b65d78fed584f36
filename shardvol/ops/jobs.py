"""Jobs that finish when run again: every long operation (copy, downsample) runs its tasks
through :func:`run_job`, under a record at its destination (see
:mod:`shardvol.kvstore.job_record`).

A task is identified by its ``name`` (its units and store, the same in every run of the
same job); the worker that finishes it marks it done at the destination.  Running the same
job again skips the tasks marked done; the record and marks go when all are done.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Generic

from shardvol.kvstore import KVStore
from shardvol.kvstore.job_record import clear_job, done_tasks, mark_done, within_job
from shardvol.ops.tasks import T, run_tasks


def task_id(task: Any) -> str:
    """The name of a task's mark: a digest of its ``name``."""
    return hashlib.sha256(task.name.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Marked(Generic[T]):
    """A task to run, then mark done in ``store`` (picklable when its parts are)."""

    fn: Callable[[T], object]
    task: T
    store: KVStore

    @property
    def name(self) -> str:
        return self.task.name


def run_marked(marked: Marked[Any]) -> None:
    """Run one task and mark it done (module level, for process pools and Dask)."""
    with within_job():  # (the task opens what the job writes: no warning that it is unfinished)
        marked.fn(marked.task)
    mark_done(marked.store, task_id(marked.task))


def run_job(
    store: KVStore,
    fn: Callable[[T], object],
    tasks: Sequence[T],
    executor: Executor | None,
    *,
    resumed: bool,
    progress: bool,
    desc: str,
    finish: bool = True,
) -> int:
    """Run the tasks of the job recorded at ``store`` that are not marked done (all of them
    unless ``resumed``), each marked as it finishes; then, if ``finish``, remove the record.
    Returns how many tasks ran."""
    done = done_tasks(store) if resumed else set()
    todo = [t for t in tasks if task_id(t) not in done]
    run_tasks(run_marked, (Marked(fn, t, store) for t in todo), executor, progress=progress,
              desc=desc, total=len(tasks), done=len(tasks) - len(todo))
    if finish:
        clear_job(store)
    return len(todo)
