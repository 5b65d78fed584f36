"""The conditional operations of object stores, for :mod:`shardvol.kvstore.lease` and the
compare-and-swap updates of values (FsspecStore.set_if, delete_if): create if absent,
replace if at a version, read with the version, delete if at a version; and what a retry
after a lost answer means for each.  Made of one request primitive, which S3 (through
botocore, :mod:`shardvol.kvstore.s3_conditional`, or shardvol's client,
:mod:`shardvol.kvstore.s3_writes`) and GCS (:mod:`shardvol.kvstore.gcs_writes`: versions
are generations) implement.
"""

from __future__ import annotations

from typing import Any

# S3 error codes: the condition failed (412), or a concurrent conditional write won (409)
CONFLICT = {"PreconditionFailed", "ConditionalRequestConflict"}
MISSING = {"NoSuchKey", "404"}  # (no such object; "404": a HEAD's, which has no body)
#: The outcome a conditional request's status names (S3's codes, for GCS's answers too)
OUTCOME_OF_STATUS = {412: "PreconditionFailed", 404: "NoSuchKey"}


#: A value written: its bytes, or parts to be sent one after the other
Body = bytes | list[bytes | memoryview]


def joined(body: Body) -> bytes:
    return body if isinstance(body, bytes) else b"".join(body)


def parts_of(body: Body) -> list[bytes | memoryview]:
    return [body] if isinstance(body, bytes) else body


class Outcome:
    """How a conditional call ended: its response, or why not (the S3 error code of a
    failed condition or an absent object)."""

    def __init__(self) -> None:
        self.out: dict | None = None
        self.code: str | None = None
        self.attempts = 0


class ConditionalCalls:
    """Conditional operations on an object store's objects, made of one primitive,
    :meth:`_call` (a request named as botocore names it: ``put_object``, ``get_object``,
    ``delete_object``, with its ``Body``, ``IfMatch``, ``IfNoneMatch``), each retried on
    transient failures.

    A conditional write whose answer was lost (a dropped connection) may have succeeded
    before it is sent again (by these retries, or by a client that resends idempotent
    requests on a closed keep-alive connection); the repeat then fails its condition.
    So a create or replace that fails its condition but finds the object holding exactly
    its body has succeeded (lease bodies are unique; for other values the object then holds
    what the write meant it to hold, whoever wrote it), and a conditional delete that finds
    the object gone is done.
    """

    def _call(self, method: str, path: str, read_body: bool = False, **kwargs: Any) -> Outcome:
        """The request, retried; its outcome (a failed condition and an absent object are
        outcomes, other failures StoreErrors)."""
        raise NotImplementedError

    def _ours(self, path: str, outcome: Outcome, body: Body) -> str | None:
        """The version of the object a conditional write wrote, or None if its condition
        failed: unless the object holds ``body`` (the write went through, then its answer
        was lost and a repeat failed the condition)."""
        if outcome.out is not None:
            return str(outcome.out["ETag"])
        if outcome.code not in CONFLICT:
            return None
        now = self.current(path)
        return now[0] if now is not None and now[1] == joined(body) else None

    def create(self, path: str, body: Body) -> str | None:
        """Write ``body`` (bytes, or parts) at ``path`` if it is absent; its version."""
        return self._ours(path, self._call("put_object", path, Body=body, IfNoneMatch="*"), body)

    def replace(self, path: str, body: Body, version: str) -> str | None:
        """Write ``body`` at ``path`` if it is at ``version``; the new version."""
        return self._ours(path, self._call("put_object", path, Body=body, IfMatch=version), body)

    def current(self, path: str) -> tuple[str, bytes] | None:
        outcome = self._call("get_object", path, read_body=True)
        if outcome.out is None:
            return None
        return outcome.out["ETag"], outcome.out["Body"]

    def delete(self, path: str, version: str, repeat_is_done: bool = True) -> bool:
        """A delete that finds the object gone is taken as done; so is one that finds it at
        another version after an attempt whose outcome was not known (it may have deleted
        it, and a waiter created it anew), unless not ``repeat_is_done``: an object of data
        (not a lease) may have been changed by another writer while that attempt failed
        without deleting it, so its delete is reported undone, to be redone from a read."""
        outcome = self._call("delete_object", path, IfMatch=version)
        return (outcome.out is not None or outcome.code in MISSING
                or (repeat_is_done and outcome.attempts > 1 and outcome.code in CONFLICT))
