"""Dask arrays over chunked arrays: lazy reads by block, writes by storage unit.

A graph carries no array data of its own: a :class:`Source` describes the array (a
picklable ``opener``, such as ``functools.partial(Volume, url, scale_key, **options)``,
and a token naming what it opens) and each task adds a region.  A process opens each
source once (kept in a small per-process cache by token) and reads or writes its
regions through the opened handle's chunk engine.

* :func:`read_array`: a ``dask.array`` whose blocks are, by default, whole storage units
  (shards, or chunks) grouped up to about :data:`BLOCK_BYTES`.
* :func:`store`: a ``Delayed`` writing a Dask array in tasks that each own whole storage
  units: boxes of whole units when units are boxes (chunk files, aligned shards), else
  (hashed shards) one task per unit, taking the parts of the array in the chunks it
  holds.  Units the array covers in part are read, merged and rewritten by their one task
  (under the unit's lock), so no two tasks ever write the same unit.

Dask is imported only when these functions are called.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import math
import operator
import os
import pickle
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np

from shardvol.array.engine import ChunkedArray
from shardvol.array.grid import grow_block
from shardvol.array.indexing import AxisSelection, normalize_selection
from shardvol.errors import InvalidArgumentError, OutOfBoundsError
from shardvol.kvstore import KVStore
from shardvol.kvstore.job_record import (
    begin_job,
    clear_job,
    done_tasks,
    mark_done,
    preparing,
    within_job,
)

if TYPE_CHECKING:
    import dask.array
    from dask.delayed import Delayed

#: bytes of a block of work (read or written) that whole storage units are grouped up to
BLOCK_BYTES = 32 << 20
_MAX_HANDLES = 8  # sources kept open per process


class Opened(Protocol):
    """What an opener returns: a Volume, a ZarrArray (anything with a chunk engine)."""

    @property
    def chunked_array(self) -> ChunkedArray: ...


_handles: OrderedDict[str, ChunkedArray] = OrderedDict()
_handles_lock = threading.Lock()


def _reset_in_child() -> None:
    global _handles_lock
    _handles_lock = threading.Lock()  # (a parent's thread may have held it at fork)


os.register_at_fork(after_in_child=_reset_in_child)


@dataclass(frozen=True, eq=False)
class Source:
    """A chunked array as a Dask graph carries it: how to open it, never its data.

    Index ``i`` of the Dask array is coordinate ``origin + i`` of the opened engine;
    reads return arrays in ``order`` (None: the engine's).  Sources are equal (and hash,
    and tokenize for Dask) by ``token`` and ``order``.
    """

    opener: Callable[[], Opened]
    token: str
    origin: tuple[int, ...]
    shape: tuple[int, ...]
    dtype: np.dtype
    what: str  # how messages name the array (its URL)
    order: Literal["C", "F"] | None = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Source) and (other.token, other.order) == (self.token,
                                                                             self.order)

    def __hash__(self) -> int:
        return hash((self.token, self.order))

    def __dask_tokenize__(self) -> tuple[str, str, str | None]:
        return ("shardvol.Source", self.token, self.order)

    def engine(self) -> ChunkedArray:
        """The opened array's engine, opened once per process."""
        with _handles_lock:  # (sources of other orders share the handle)
            engine = _handles.get(self.token)
            if engine is None:
                engine = self.opener().chunked_array
                self._check(engine)
                _handles[self.token] = engine
                if len(_handles) > _MAX_HANDLES:
                    _handles.popitem(last=False)
            else:
                _handles.move_to_end(self.token)
            return engine

    def _check(self, engine: ChunkedArray) -> None:
        g = engine.grid
        if (g.origin, g.shape, engine.dtype) != (self.origin, self.shape, self.dtype):
            raise InvalidArgumentError(
                f"{self.what} changed since its Dask graph was made: domain from {g.origin} "
                f"of shape {g.shape} ({engine.dtype}), not from {self.origin} of shape "
                f"{self.shape} ({self.dtype})"
            )

    def selection(self, key: Any) -> tuple[AxisSelection, ...]:
        """A basic-indexing key of the Dask array's (0-based) index, in engine coordinates."""
        sel = normalize_selection(key, (0,) * self.ndim, self.shape)
        return tuple(
            AxisSelection(a.start + o, a.step, a.count, a.drop) for a, o in zip(sel, self.origin)
        )

    def __getitem__(self, key: Any) -> np.ndarray:
        return self.engine().read(self.selection(key), self.order)

    def write_many(self, pieces: Sequence[tuple[Any, np.ndarray]]) -> None:
        """Write each value at its key, each storage unit they touch updated once."""
        self.engine().write_many([(self.selection(k), v) for k, v in pieces])


def make_source(
    opener: Callable[[], Opened], identity: object, engine: ChunkedArray, what: str,
    order: Literal["C", "F"] | None = None,
) -> Source:
    """A source of the array ``engine`` belongs to; ``identity`` (its metadata, say) and the
    opener name it: a process that already opened an equal source reuses that handle."""
    if order not in (None, "C", "F"):
        raise InvalidArgumentError(f"order must be 'C', 'F' or None, got {order!r}")
    digest = hashlib.sha256(pickle.dumps((opener, identity))).hexdigest()[:32]
    g = engine.grid
    return Source(opener, digest, g.origin, g.shape, engine.dtype, what, order)


def block_shape(
    unit: Sequence[int], source: Source, block_bytes: int | None = None
) -> tuple[int, ...]:
    """Whole ``unit``\\ s (storage units: shards or chunks) grown up to ``block_bytes``
    (default :data:`BLOCK_BYTES`)."""
    block_bytes = BLOCK_BYTES if block_bytes is None else block_bytes
    unit = tuple(min(u, n) if n else u for u, n in zip(unit, source.shape))
    return grow_block(unit, source.shape, source.dtype.itemsize, block_bytes)


def read_array(source: Source, chunks: Any) -> dask.array.Array:
    """The array as a lazy ``dask.array``; ``chunks``: anything ``dask.array.from_array``
    takes (a block shape from :func:`block_shape` keeps blocks on storage units)."""
    import dask.array as da
    from dask.array.core import normalize_chunks
    from dask.base import tokenize

    try:
        chunks = normalize_chunks(chunks, source.shape, dtype=source.dtype)
    except (ValueError, TypeError) as e:
        raise InvalidArgumentError(
            f"chunks {chunks!r} do not fit shape {source.shape}: {e}"
        ) from None
    return da.from_array(
        source, chunks=chunks, name=f"shardvol-read-{tokenize(source, chunks)}", fancy=False,
        inline_array=True, meta=np.empty((0,) * source.ndim, source.dtype),
    )  # fmt: skip


# --------------------------------------------------------------------------- writes


def check_value(array: Any, source: Source, offset: Sequence[int]) -> tuple[int, ...]:
    """``offset`` as integers once ``array`` (a Dask array) is known to fit ``source`` there
    with a dtype it holds exactly; else InvalidArgumentError / OutOfBoundsError."""
    import dask.array as da

    if not isinstance(array, da.Array):
        raise InvalidArgumentError(f"expected a dask.array.Array, got {type(array).__name__}")
    if any(math.isnan(n) for n in array.shape):
        raise InvalidArgumentError(
            f"the Dask array's shape {array.shape} is not known: call compute_chunk_sizes() first"
        )
    if array.ndim != source.ndim:
        raise InvalidArgumentError(
            f"a {array.ndim}-D array cannot be written to {source.what}, which has "
            f"{source.ndim} dimensions (shape {source.shape})"
        )
    if array.dtype != source.dtype and not np.can_cast(array.dtype, source.dtype, "safe"):
        raise InvalidArgumentError(
            f"cannot write {array.dtype} data to {source.what} ({source.dtype}) without loss; "
            f"cast it first (array.astype('{source.dtype}'))"
        )
    try:
        off = tuple(int(v) for v in offset)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"offset must be integers, got {offset!r}") from None
    if len(off) != source.ndim:
        raise InvalidArgumentError(f"offset {list(offset)} must have {source.ndim} values")
    for d, (o, n, size, start) in enumerate(zip(off, array.shape, source.shape, source.origin)):
        if o < 0 or o + n > size:  # (named in the coordinates of the volume's domain)
            raise OutOfBoundsError(
                f"axis {d}: the array's [{start + o}, {start + o + n}) is outside "
                f"{source.what}'s [{start}, {start + size})"
            )
    return off


def _cuts(n: int, offset: int, step: int) -> list[int]:
    """Where ``[0, n)`` is cut: 0, every ``i`` with ``offset + i`` a multiple of ``step``, n."""
    first = -offset % step
    return [0, *range(first or step, n, step), n] if n else [0, 0]


def _boxes(edges: Sequence[Sequence[int]]) -> list[tuple[tuple[int, int], ...]]:
    """The boxes between consecutive ``edges`` along every axis."""
    ranges = [list(itertools.pairwise(e)) for e in edges]
    return list(itertools.product(*ranges))


def store(
    array: dask.array.Array,
    source: Source,
    offset: Sequence[int],
    *,
    engine: ChunkedArray,
    unit_shape: Sequence[int] | None,
    block_bytes: int | None = None,
    job: KVStore | None = None,
    target: str = "",
    overwrite: bool = False,
) -> Delayed:
    """A ``Delayed`` that writes ``array`` into ``source`` at index ``offset`` (checked by
    :func:`check_value` first).  ``unit_shape``: the shape of a storage unit when units are
    boxes tiling the domain from its start; None when they are not (then ``engine``'s store
    groups the chunks by unit, as it is when this is called).

    Each task owns whole units: a box of whole units (clipped to the array), or the chunks
    of one unit.  It takes the parts of the array's blocks that fall in its boxes as they
    are (a slice of a block on the block's worker), not a rechunked array: the engine puts
    parts that share a chunk together (Dask's rechunk would first copy them into
    C-ordered blocks, slowly for a Volume's Fortran-ordered ones).

    ``job``: the store to keep the write's job record in (see
    :mod:`shardvol.kvstore.job_record`; ``target`` names what it writes): each task marks
    its units done, the last task removes the record, and the same write run again after an
    interruption (the same Dask array, by its name, at the same place) writes only the
    units not marked; another unfinished write there is refused unless ``overwrite``.
    """
    import dask
    from dask.base import tokenize

    off = check_value(array, source, offset)
    if unit_shape is not None:
        step = block_shape(unit_shape, source, block_bytes)
        groups = [[box] for box in _boxes([_cuts(n, o, s) for n, o, s in
                                           zip(array.shape, off, step)])]
    else:  # one group per unit: the box of each chunk it holds
        chunk = engine.grid.chunk_shape  # (index 0 is the start of the chunk grid)
        boxes = _boxes([_cuts(n, o, c) for n, o, c in zip(array.shape, off, chunk)])
        by_coord = {tuple((o + lo) // c for (lo, _), o, c in zip(box, off, chunk)): box
                    for box in boxes}
        groups = [[by_coord[c] for c in coords]
                  for coords in engine.store.units(list(by_coord)).values()]
    if not array.size:
        groups = []
    done: set[str] = set()
    if job is not None:
        params = {"array": array.name, "shape": list(array.shape), "dtype": array.dtype.str,
                  "offset": list(off), "target": target}
        with preparing(job) as prep:
            found = begin_job(job, "write", params, len(groups), (target,) if target else (),
                              overwrite=overwrite)
            prep.new = found is None
        done = done_tasks(job) if found is not None else set()
    blocks = array.to_delayed()
    edges = [np.cumsum((0, *c)).tolist() for c in array.chunks]
    take = dask.delayed(operator.getitem, pure=True)
    write = dask.delayed(_write, pure=True)
    name = f"shardvol-write-{tokenize(source, array.name, off)}"
    writes = []
    for n, group in enumerate(groups):
        unit = _unit_name(group, off)
        if unit in done:
            continue
        pieces = []
        for box in group:
            # the blocks the box meets, and the part of each in the box
            spans = [range(bisect.bisect_right(e, lo) - 1, bisect.bisect_left(e, hi))
                     for e, (lo, hi) in zip(edges, box)]
            for index in itertools.product(*spans):
                part = [(max(lo, e[i]), min(hi, e[i + 1])) for e, i, (lo, hi) in
                        zip(edges, index, box)]
                whole = all((a, b) == (e[i], e[i + 1]) for (a, b), e, i in
                            zip(part, edges, index))
                local = tuple(slice(a - e[i], b - e[i]) for (a, b), e, i in
                              zip(part, edges, index))
                value = blocks[index] if whole else take(blocks[index], local)
                key = tuple(slice(o + a, o + b) for o, (a, b) in zip(off, part))
                pieces.append((key, value))
        mark = None if job is None else (job, unit)
        writes.append(write(source, pieces, mark, dask_key_name=(name, n)))
    return dask.delayed(_finish, pure=True)(writes, job, dask_key_name=f"{name}-done")


def _unit_name(group: list[tuple[tuple[int, int], ...]], offset: Sequence[int]) -> str:
    """The mark of a task's units: a digest of its boxes (in the target's indices)."""
    boxes = [[(o + lo, o + hi) for o, (lo, hi) in zip(offset, box)] for box in group]
    return hashlib.sha256(repr(boxes).encode()).hexdigest()[:32]


def _write(source: Source, pieces: list[tuple[tuple[slice, ...], np.ndarray]],
           mark: tuple[KVStore, str] | None = None) -> int:
    """One task: write its pieces (whole storage units, and parts of units no other task
    writes), then mark them done; returns the number of elements written."""
    with within_job():
        source.write_many(pieces)
    if mark is not None:
        mark_done(*mark)
    return sum(int(v.size) for _, v in pieces)


def _finish(counts: list[int], job: KVStore | None = None) -> int:
    if job is not None:
        clear_job(job)
    return sum(counts)


def compute(result: Delayed, progress: bool) -> None:
    """Compute ``result`` on the active scheduler, with Dask's progress bar (distributed's
    when a distributed client is the scheduler)."""
    import dask

    if not progress:
        dask.compute(result)
        return
    client = _active_client()
    if client is not None:
        from distributed import progress as show

        future = client.compute(result)
        show(future)
        future.result()
        return
    from dask.diagnostics import ProgressBar

    with ProgressBar():
        dask.compute(result)


def _active_client() -> Any:
    """The distributed Client ``dask.compute`` would run on, if any."""
    from dask.base import get_scheduler

    scheduler = get_scheduler()
    owner = getattr(scheduler, "__self__", None)
    try:
        from distributed import Client
    except ImportError:
        return None
    return owner if isinstance(owner, Client) else None


__all__ = ["BLOCK_BYTES", "Source", "block_shape", "check_value", "compute", "make_source",
           "read_array", "store"]
