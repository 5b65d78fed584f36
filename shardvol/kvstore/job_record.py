"""The record a long job (a copy, a pyramid, a Dask write) keeps at its destination while it
runs: what the job is, and which of its tasks are done.

Running the same job again then finishes it, writing only what is not done, and anyone who
opens the destination meanwhile can tell that it is unfinished.  Both are kept under hidden
names, never listed with the data:

* ``.shardvol-job``: the record, a JSON object: the job's ``kind`` and ``params`` (what
  makes a rerun "the same job"), the ``plan`` inputs it was planned with (such as the
  workers it counted on: a rerun plans the same tasks with them), the ``targets`` it
  writes (scale keys or array paths; empty: everything at the destination), its number
  of ``tasks``, when and where it ``started``.
* ``.shardvol-job.d/<task>``: an empty object per finished task, written by the worker
  that finished it (one request, no read-modify-write shared by workers).

The record is written before the job writes anything, and removed (markers first) when
every task is done.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import shutil
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from shardvol.errors import IncompleteWarning, InfoError, JobConflictError
from shardvol.jsondoc import load_json, plain
from shardvol.kvstore.base import HIDDEN_PREFIX, KVStore

JOB_KEY = HIDDEN_PREFIX + "job"
DONE_PREFIX = HIDDEN_PREFIX + "job.d/"
FORMAT = 1  # of the record; a newer one is refused, not guessed at


@dataclass(frozen=True)
class JobRecord:
    """One job at one destination (see the module doc)."""

    kind: str
    params: dict[str, Any]
    tasks: int
    targets: tuple[str, ...] = ()
    plan: dict[str, Any] = field(default_factory=dict)
    started: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(
        timespec="seconds"))
    host: str = field(default_factory=lambda: os.uname().nodename)  # (socket.gethostname)

    def covers(self, target: str) -> bool:
        """Whether the job writes ``target`` (a scale key or array path)."""
        return not self.targets or target in self.targets

    def differences(self, kind: str, params: dict[str, Any]) -> list[str]:
        """What differs between this job and one of ``kind`` with ``params`` (JSON-equal
        values are equal), as ``name: recorded -> given`` lines; empty: the same job."""
        if kind != self.kind:
            return [f"kind: {self.kind} -> {kind}"]
        given = plain(params)
        return [f"{k}: {json.dumps(self.params.get(k))} -> {json.dumps(given.get(k))}"
                for k in sorted(set(self.params) | set(given))
                if self.params.get(k) != given.get(k)]

    def to_json(self) -> bytes:
        return json.dumps({
            "shardvol_job": FORMAT, "kind": self.kind, "params": self.params,
            "plan": self.plan, "targets": list(self.targets), "tasks": self.tasks,
            "started": self.started, "host": self.host,
        }, indent=1).encode()

    @classmethod
    def from_json(cls, body: bytes | memoryview, source: str) -> JobRecord:
        doc = load_json(body, source)
        if not isinstance(doc, dict) or not isinstance(doc.get("shardvol_job"), int):
            raise InfoError(f"{source}: not a shardvol job record")
        if doc["shardvol_job"] > FORMAT:
            raise InfoError(f"{source}: a job record of format {doc['shardvol_job']}, from a "
                            f"newer shardvol (this one reads format {FORMAT}): finish the job "
                            "with that version, or pass overwrite=True to start over")
        try:
            return cls(str(doc["kind"]), dict(doc["params"]), int(doc["tasks"]),
                       tuple(str(t) for t in doc["targets"]), dict(doc.get("plan", {})),
                       str(doc["started"]), str(doc.get("host", "")))
        except (KeyError, TypeError, ValueError) as e:
            raise InfoError(f"{source}: corrupt job record ({type(e).__name__}: {e}); pass "
                            "overwrite=True to start over") from None


@dataclass(frozen=True)
class JobStatus:
    """An unfinished job as those who open its destination see it."""

    record: JobRecord
    done: int

    def __str__(self) -> str:
        r = self.record
        return (f"incomplete: {self.done} of {r.tasks} tasks done, {r.kind} job started "
                f"{r.started} on {r.host or 'an unknown host'}")


def read_job(kv: KVStore) -> JobRecord | None:
    """The record of the job unfinished at ``kv``, or None."""
    body = kv.get(JOB_KEY)
    return None if body is None else JobRecord.from_json(body, f"{kv.url}/{JOB_KEY}")


def job_status(kv: KVStore, record: JobRecord | None = None) -> JobStatus | None:
    """The unfinished job at ``kv`` (``record`` if already read) and its progress, or None."""
    record = record or read_job(kv)
    return None if record is None else JobStatus(record, len(done_tasks(kv)))


def write_job(kv: KVStore, record: JobRecord) -> None:
    kv.set(JOB_KEY, record.to_json())


def set_tasks(kv: KVStore, tasks: int) -> None:
    """Record how many tasks the job at ``kv`` has (known once it is planned)."""
    record = read_job(kv)
    if record is not None and record.tasks != tasks:
        write_job(kv, replace(record, tasks=tasks))


def done_tasks(kv: KVStore) -> set[str]:
    """The tasks of the job at ``kv`` marked done."""
    return {k[len(DONE_PREFIX):] for k in kv.list(DONE_PREFIX)}


def mark_done(kv: KVStore, task: str) -> None:
    kv.set(DONE_PREFIX + task, b"")


def clear_job(kv: KVStore) -> None:
    """Remove the record and its markers (markers first: a record left by a crash here
    still says the job is unfinished, and a rerun finds it done at once)."""
    for key in kv.list(DONE_PREFIX):
        kv.delete(key)
    folder = kv.file_path(DONE_PREFIX + "x")
    if folder is not None:  # (with what a process killed while marking left there)
        shutil.rmtree(os.path.dirname(folder), ignore_errors=True)
    kv.delete(JOB_KEY)


def begin_job(kv: KVStore, kind: str, params: dict[str, Any], tasks: int = 0,
              targets: tuple[str, ...] = (), plan: dict[str, Any] | None = None,
              overwrite: bool = False) -> JobRecord | None:
    """Start the job of ``kind`` with ``params`` at ``kv``, or continue it: the record of the
    same job left unfinished there (its ``plan`` is the one to follow), or None after
    writing a new one.  A different unfinished job is a JobConflictError naming what
    differs, unless ``overwrite`` (its record and markers are then dropped).  Nothing else
    is written."""
    found = read_job_or_none(kv) if overwrite else read_job(kv)
    if found is not None:
        differences = found.differences(kind, params)
        if not differences:
            return found
        if not overwrite:
            raise JobConflictError(
                f"{kv.url} holds an unfinished {found.kind} job (started {found.started}) "
                "that differs from this one in " + "; ".join(differences)
                + ": run the same job again to finish it, or pass overwrite=True "
                "(--overwrite) to start over")
    if found is not None or overwrite:
        clear_job(kv)
    write_job(kv, JobRecord(kind, plain(params), tasks, targets, plain(plan or {})))
    return None


class Preparing:
    """What :func:`preparing` knows of the job being prepared: whether its caller wrote a
    new record (``new``, set from what :func:`begin_job` returned)."""

    def __init__(self) -> None:
        self.new = False


@contextlib.contextmanager
def preparing(kv: KVStore) -> Iterator[Preparing]:
    """Around starting a job (:func:`begin_job`, creating what it writes, planning): if that
    fails (bad options are found only then), a new job's record goes too, with the folder
    the record made on local files, so a refused job leaves nothing behind.  A continued
    job keeps its record."""
    folder = kv.file_path(JOB_KEY)
    existed = folder is None or os.path.isdir(os.path.dirname(folder))
    prep = Preparing()
    try:
        yield prep
    except BaseException:
        if prep.new:
            clear_job(kv)
            if folder is not None and not existed:
                for d in (folder + ".d", os.path.dirname(folder)):
                    with contextlib.suppress(OSError):
                        os.rmdir(d)  # (only if empty)
        raise


_WITHIN_JOB: contextvars.ContextVar[bool] = contextvars.ContextVar("within_job", default=False)


@contextlib.contextmanager
def within_job() -> Iterator[None]:
    """While a job itself opens what it writes: opening an unfinished scale says nothing."""
    token = _WITHIN_JOB.set(True)
    try:
        yield
    finally:
        _WITHIN_JOB.reset(token)


def warn_if_unfinished(body: bytes | memoryview | None, target: str, what: str,
                       source: str) -> None:
    """Say once, as an IncompleteWarning, that ``what`` (a scale being opened) is written by
    the unfinished job whose record (from ``source``) is ``body``, unless that job itself
    opens it.  An unreadable record is said to be one."""
    if body is None or _WITHIN_JOB.get():
        return
    try:
        record = JobRecord.from_json(body, source)
    except InfoError as e:
        warnings.warn(IncompleteWarning(f"{what} may be incomplete: {e}"), stacklevel=3)
        return
    if record.covers(target):
        warnings.warn(IncompleteWarning(
            f"{what} is incomplete: an unfinished {record.kind} job (started {record.started} "
            f"on {record.host or 'an unknown host'}) writes it; run the job again to finish "
            "it"), stacklevel=3)


def read_job_or_none(kv: KVStore) -> JobRecord | None:
    """:func:`read_job`, with a corrupt or newer record taken as none (to be replaced)."""
    try:
        return read_job(kv)
    except InfoError:
        return None
