"""Reading shard files: the I/O shell that both sharded formats share.

A shard file holds many values and an index of where they lie.  Reading some of them
takes dependent reads (the index, for precomputed a minishard index too, then the data),
and all of them must come from one version of the file: another writer may replace it
in between.  What does not depend on how a format lays out its index lives here:

* :class:`Versioned`: a decoded index and the version of the file it was read from, as
  the formats keep them in their caches (:class:`~shardvol.kvstore.lru.LRU`).
* :class:`RangeReader`: byte ranges of a store's files read with few requests (ranges of
  one file closer than ``gap`` coalesced into one request of at most ``max_read`` bytes,
  issued concurrently), each read required to find its file at the version its index
  came from.  A file found replaced raises :class:`Stale`; a range past a file's end a
  ShardFormatError naming what lies there.
* :func:`retrying`: a read run again, after the format has dropped the indexes of the
  files that changed, while files are replaced under it (WriteConflictError after
  :data:`ATTEMPTS`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

from shardvol.errors import (
    ByteRangeError,
    ShardFormatError,
    VersionChangedError,
    WriteConflictError,
)
from shardvol.kvstore.base import KVStore, Request

#: Reads restart when a shard file is replaced under them; this many times at most.
ATTEMPTS = 8
#: Coalesced byte ranges are read in requests of at most this many bytes.
DEFAULT_MAX_READ = 32 * 1024 * 1024

T = TypeVar("T")
#: ``explain(key, size)``: what lies past the end of file ``key`` of ``size`` bytes, if
#: anything a read asked for does (a message), else None.
Explain = Callable[[str, int], "str | None"]


class Stale(Exception):
    """A shard file changed between the reads of its index and of its data (read again)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key  # the store key of the file that changed


class Versioned(NamedTuple):
    """A decoded index (None: the file was absent) and the store's version token of the
    file it was read from (None: the store cannot tell)."""

    index: Any
    version: Hashable | None


class Run(NamedTuple):
    """A run of sorted byte ranges read as one request."""

    first: int  # index of the run's first range
    last: int  # one past its last range
    start: int
    stop: int


def retrying(read: Callable[[], T], recover: Callable[[Exception], bool], what: str) -> T:
    """``read()``, run again while it fails on a replaced file.

    ``recover(error)`` (for Stale and ShardFormatError) drops the cached indexes of the
    files that changed and says whether any did; if none did, a ShardFormatError is real
    damage and is raised.  After ATTEMPTS reads, WriteConflictError naming ``what``.
    """
    for _ in range(ATTEMPTS):
        try:
            return read()
        except (Stale, ShardFormatError) as e:
            if not recover(e) and not isinstance(e, Stale):
                raise
    raise conflict(what)


def conflict(what: str) -> WriteConflictError:
    """The error of a read that found its files replaced on every attempt."""
    return WriteConflictError(f"{what} kept changing while being read ({ATTEMPTS} attempts)")


class RangeReader:
    """Coalesced, versioned ranged reads of the files of one store."""

    def __init__(self, store: KVStore, gap: int, max_read: int | None = None) -> None:
        self.store = store
        self.gap = int(gap)
        self.max_read = None if max_read is None else int(max_read)

    def coalesce(self, ranges: Sequence[tuple[int, int]]) -> list[Run]:
        """Runs of consecutive ``ranges`` (sorted by start) to read as one request each."""
        runs: list[Run] = []
        gap, max_read = self.gap, self.max_read
        first, start, stop = 0, -1, 0
        for i, (a, b) in enumerate(ranges):
            if start >= 0 and (
                a > stop + gap or (max_read is not None and max(stop, b) - start > max_read)
            ):
                runs.append(Run(first, i, start, stop))
                start = -1
            if start < 0:
                first, start, stop = i, a, b
            elif b > stop:
                stop = b
        if start >= 0:
            runs.append(Run(first, len(ranges), start, stop))
        return runs

    def read(
        self,
        spans: Sequence[tuple[str, int, int]],
        versions: Mapping[str, Hashable | None],
        explain: Explain | None = None,
        group_bytes: int | None = None,
    ) -> Iterator[tuple[int, memoryview]]:
        """``(i, bytes of spans[i])`` for every ``(key, start, stop)`` span, in file order.

        Spans of one file are coalesced; every request must find its file at
        ``versions[key]`` (else Stale; a file gone is a ShardFormatError).  Local stores:
        the requests go out in groups of about ``group_bytes`` (all at once if None), so
        that a caller dropping the views as it goes holds about that much at a time.
        Remote stores: all go out at once, within the store's window of bytes ahead of the
        caller, and the spans come as their requests are answered.
        """
        order = sorted(range(len(spans)), key=lambda i: (spans[i][0], spans[i][1]))
        requests: list[tuple[str, tuple[int, int]]] = []
        members: list[list[int]] = []
        a = 0
        while a < len(order):
            key = spans[order[a]][0]
            b = a
            while b < len(order) and spans[order[b]][0] == key:
                b += 1
            idx = order[a:b]
            for run in self.coalesce([(spans[i][1], spans[i][2]) for i in idx]):
                requests.append((key, (run.start, run.stop)))
                members.append(idx[run.first : run.last])
            a = b
        if not self.store.local:
            yield from self._stream(requests, members, spans, versions, explain)
            return
        for first, last in _groups(requests, group_bytes):
            group = requests[first:last]
            blobs = self.get(group, {k: versions.get(k) for k, _ in group}, explain)
            for request, idx, blob in zip(group, members[first:last], blobs):
                yield from _split(request, idx, blob, spans)
            del blobs, blob  # this group's bytes go before the next group is read

    def _stream(
        self,
        requests: list[tuple[str, tuple[int, int]]],
        members: list[list[int]],
        spans: Sequence[tuple[str, int, int]],
        versions: Mapping[str, Hashable | None],
        explain: Explain | None,
    ) -> Iterator[tuple[int, memoryview]]:
        """:meth:`read`'s spans as the store's streaming read answers the requests."""
        wanted = {k: versions.get(k) for k, _ in requests}
        with self._range_errors(requests, explain):
            try:
                for r, blob in self.store.iter_get_many_if(requests, wanted):
                    yield from _split(requests[r], members[r], blob, spans)
            except VersionChangedError as e:
                raise Stale(e.key) from e

    def get(
        self,
        requests: Sequence[Request],
        versions: Mapping[str, Hashable | None] | None = None,
        explain: Explain | None = None,
    ) -> Sequence[bytes | memoryview | None]:
        """``store.get_many`` (``get_many_if`` with ``versions``: a file of another version
        raises Stale), a range past a file's end a ShardFormatError."""
        if not requests:
            return []
        with self._range_errors(requests, explain):
            if versions is None:
                return self.store.get_many(requests)
            try:
                return self.store.get_many_if(requests, versions)
            except VersionChangedError as e:
                raise Stale(e.key) from e

    def iter_versioned(
        self, requests: Sequence[Request], sizes: Sequence[int | None],
        explain: Explain | None = None,
    ) -> Iterator[tuple[int, bytes | memoryview | None, Hashable | None]]:
        """``(i, value, version)`` of each request as it arrives (``store.
        iter_get_many_versioned``; ``sizes``: the expected bytes of whole-value requests),
        a range past a file's end a ShardFormatError."""
        if not requests:
            return
        with self._range_errors(requests, explain):
            yield from self.store.iter_get_many_versioned(requests, sizes=sizes)

    def get_versioned(
        self, requests: Sequence[Request], explain: Explain | None = None
    ) -> Sequence[tuple[bytes | memoryview | None, Hashable | None]]:
        """``store.get_many_versioned`` (each value with its file's version), a range past
        a file's end a ShardFormatError."""
        if not requests:
            return []
        with self._range_errors(requests, explain):
            return self.store.get_many_versioned(requests)

    @contextlib.contextmanager
    def _range_errors(self, requests: Sequence[Request], explain: Explain | None) -> Iterator[None]:
        """A ByteRangeError of the reads inside becomes a ShardFormatError: ``explain``'s
        message for the first file it explains (from the file's size), else a generic one."""
        try:
            yield
        except ByteRangeError as e:
            if explain is not None:
                keys = (r if isinstance(r, str) else r[0] for r in requests)
                for key in dict.fromkeys(keys):
                    size = self.store.size(key)
                    message = None if size is None else explain(key, size)
                    if message is not None:
                        raise ShardFormatError(message) from e
            raise ShardFormatError(f"shard file shorter than its index says: {e}") from e


def _split(request: tuple[str, tuple[int, int]], idx: list[int],
           blob: bytes | memoryview | None, spans: Sequence[tuple[str, int, int]]
           ) -> Iterator[tuple[int, memoryview]]:
    """``(i, bytes of spans[i])`` of the spans ``idx`` that one request's answer holds."""
    key, (base, stop) = request
    if blob is None:  # (a real error unless the file changed: see retrying)
        raise ShardFormatError(f"{key}: file missing, but its index was read")
    if len(blob) != stop - base:  # (a store's contract, checked once more)
        raise ShardFormatError(f"{key}: bytes [{base}, {stop}) past its end")
    view = memoryview(blob)
    for i in idx:
        yield i, view[spans[i][1] - base : spans[i][2] - base]


def _groups(requests: list[tuple[str, tuple[int, int]]], group_bytes: int | None) -> list[
        tuple[int, int]]:
    """``[first, last)`` slices of ``requests`` of about ``group_bytes`` each (at least one
    request; one slice of all if None)."""
    if group_bytes is None:
        return [(0, len(requests))] if requests else []
    groups, first, total = [], 0, 0
    for i, (_, (start, stop)) in enumerate(requests):
        if i > first and total + stop - start > group_bytes:
            groups.append((first, i))
            first, total = i, 0
        total += stop - start
    if requests:
        groups.append((first, len(requests)))
    return groups
