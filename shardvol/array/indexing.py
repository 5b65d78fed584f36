"""numpy basic indexing in global coordinates, projected onto a chunk grid.

A selection is normalised per axis to an :class:`AxisSelection` (first
coordinate, step, count, whether the axis is dropped), then
:func:`chunk_parts` lists, for every chunk it touches, which elements of the
chunk go to which elements of the output.

Coordinates are global: the domain of an axis is ``[origin, origin + shape)``, and
every index is a coordinate in it, as in TensorStore: ``-1`` is the coordinate -1,
never "the last element" (which would change the meaning of an index with the
domain's origin).  A slice's omitted start or stop is the domain's edge.  Arrays whose
domain always starts at 0 (Zarr arrays, as zarr-python slices them) may ask for numpy's
rule instead, ``from_end``: there a negative index counts from the end.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from itertools import product
from typing import Any, NamedTuple

import numpy as np

from shardvol.array.grid import ChunkCoord, ChunkGrid
from shardvol.errors import InvalidArgumentError, OutOfBoundsError


@dataclass(frozen=True)
class AxisSelection:
    """Coordinates ``start + k * step`` for ``k < count`` along one axis."""

    start: int
    step: int
    count: int
    drop: bool = False

    @property
    def last(self) -> int:
        return self.start + (self.count - 1) * self.step

    def bounds(self) -> tuple[int, int]:
        """Smallest and one-past-largest selected coordinate (count > 0)."""
        lo, hi = sorted((self.start, self.last))
        return lo, hi + 1


def _as_index(value: Any, axis: int) -> int:
    if isinstance(value, (bool, np.bool_)):
        raise InvalidArgumentError(
            f"axis {axis}: boolean index {value!r} is not supported (numpy would treat it as a "
            "mask); use an integer coordinate")
    try:
        return operator.index(value)
    except TypeError:
        raise InvalidArgumentError(
            f"axis {axis}: index {value!r} is not an integer, slice or '...' "
            "(only basic indexing is supported)"
        ) from None


def _coordinate(value: Any, axis: int, end: int | None) -> int:
    """An index as a coordinate; negative ones count back from ``end`` if given."""
    i = _as_index(value, axis)
    return i + end if end is not None and i < 0 else i


def normalize_selection(
    key: Any, origin: tuple[int, ...], shape: tuple[int, ...], bounded: bool = True,
    from_end: bool = False,
) -> tuple[AxisSelection, ...]:
    """Normalise a basic-indexing ``key`` against the domain ``[origin, origin + shape)``.

    Raises OutOfBoundsError for selections outside the domain when ``bounded``;
    otherwise such selections are allowed (the caller reads fill values there).
    ``from_end`` (a domain starting at 0 only): negative indices count from the end.
    """
    if from_end and any(origin):
        raise InvalidArgumentError(f"from_end needs a domain starting at 0, not {origin}")
    ndim = len(shape)
    items = list(key) if isinstance(key, tuple) else [key]
    n_ellipsis = sum(1 for k in items if k is Ellipsis)
    if n_ellipsis > 1:
        raise InvalidArgumentError("an index can only have a single ellipsis ('...')")
    if n_ellipsis:
        i = items.index(Ellipsis)
        fill = ndim - (len(items) - 1)
        items[i : i + 1] = [slice(None)] * max(fill, 0)
    if len(items) > ndim:
        raise InvalidArgumentError(f"too many indices: {len(items)} for {ndim} dimensions")
    items += [slice(None)] * (ndim - len(items))

    out = []
    for axis, (item, o, n) in enumerate(zip(items, origin, shape)):
        lo, hi = o, o + n
        end = hi if from_end else None
        if isinstance(item, slice):
            step = 1 if item.step is None else _as_index(item.step, axis)
            if step == 0:
                raise InvalidArgumentError(f"axis {axis}: slice step cannot be zero")
            if step > 0:
                start = lo if item.start is None else _coordinate(item.start, axis, end)
                stop = hi if item.stop is None else _coordinate(item.stop, axis, end)
                count = max(0, -(-(stop - start) // step))
                if bounded and count and (start < lo or stop > hi):
                    raise OutOfBoundsError(
                        f"axis {axis}: [{start}, {stop}) is outside the domain [{lo}, {hi})"
                        + _negative_hint(start, lo))
            else:
                start = hi - 1 if item.start is None else _coordinate(item.start, axis, end)
                stop = lo - 1 if item.stop is None else _coordinate(item.stop, axis, end)
                count = max(0, -(-(start - stop) // -step))
                if bounded and count and (start >= hi or stop < lo - 1):
                    raise OutOfBoundsError(
                        f"axis {axis}: {start} down to {stop} (exclusive) is outside the "
                        f"domain [{lo}, {hi})" + _negative_hint(stop + 1, lo))
            out.append(AxisSelection(start, step, count))
        else:
            i = _coordinate(item, axis, end)
            if bounded and not lo <= i < hi:
                raise OutOfBoundsError(f"axis {axis}: index {item} is outside the domain "
                                       f"[{lo}, {hi})" + _negative_hint(i, lo))
            out.append(AxisSelection(i, 1, 1, drop=True))
    return tuple(out)


def _negative_hint(first: int, lo: int) -> str:
    """What to tell a caller whose negative index was meant to count from the end."""
    if first >= 0 or lo < 0:
        return ""
    return " (indices are global coordinates: -1 is the coordinate -1, not the last element)"


def selection_in_domain(sel: tuple[AxisSelection, ...], grid: ChunkGrid) -> bool:
    """Whether every selected coordinate lies inside the grid's domain."""
    for a, o, e in zip(sel, grid.origin, grid.stop):
        if a.count:
            lo, hi = a.bounds()
            if lo < o or hi > e:
                return False
    return True


def clip_selection(
    sel: tuple[AxisSelection, ...], grid: ChunkGrid
) -> tuple[tuple[AxisSelection, ...], tuple[slice, ...]]:
    """The in-domain part of ``sel`` and where it sits in the full selection's output."""
    clipped, where = [], []
    for a, o, e in zip(sel, grid.origin, grid.stop):
        k0, k1 = _k_range_inside(a, o, e)
        clipped.append(AxisSelection(a.start + k0 * a.step, a.step, k1 - k0, a.drop))
        where.append(slice(k0, k1))
    return tuple(clipped), tuple(where)


def _k_range_inside(a: AxisSelection, lo: int, hi: int) -> tuple[int, int]:
    """Range [k0, k1) of k with lo <= a.start + k * a.step < hi."""
    if a.count == 0 or hi <= lo:
        return 0, 0
    s, step = a.start, a.step
    if step > 0:
        k0 = max(0, -(-(lo - s) // step))
        k1 = min(a.count, -(-(hi - s) // step))
    else:
        m = -step
        k0 = max(0, (s - hi) // m + 1)
        k1 = min(a.count, (s - lo) // m + 1)
    return (k0, k1) if k0 < k1 else (0, 0)


class AxisRun(NamedTuple):
    """The part of one chunk (along one axis) that a selection uses (a named tuple: a
    cutout makes one per chunk and axis, a dataclass took several times as long)."""

    chunk: int  # chunk index along the axis
    chunk_slice: slice  # positions inside the chunk
    out_slice: slice  # positions in the output
    full: bool  # the chunk's whole in-domain extent, step 1


def axis_runs(a: AxisSelection, origin: int, size: int, chunk: int) -> list[AxisRun]:
    """Chunks touched by one axis selection and the matching slices."""
    runs: list[AxisRun] = []
    if a.count == 0:
        return runs
    lo_sel, hi_sel = a.bounds()
    lo_sel, hi_sel = max(lo_sel, origin), min(hi_sel, origin + size)
    if lo_sel >= hi_sel:
        return runs
    g_first = (lo_sel - origin) // chunk
    g_last = (hi_sel - 1 - origin) // chunk
    for g in range(g_first, g_last + 1):
        lo = origin + g * chunk
        hi = min(lo + chunk, origin + size)
        k0, k1 = _k_range_inside(a, lo, hi)
        if k0 >= k1:
            continue
        p0 = a.start + k0 * a.step - lo
        p_end = p0 + (k1 - k0) * a.step
        chunk_slice = slice(p0, p_end if p_end >= 0 else None, a.step)
        full = a.step == 1 and p0 == 0 and k1 - k0 == hi - lo
        runs.append(AxisRun(g, chunk_slice, slice(k0, k1), full))
    return runs


class ChunkPart(NamedTuple):
    """One chunk's contribution to a selection (a named tuple, as AxisRun)."""

    coord: ChunkCoord
    chunk_sel: tuple[slice, ...]
    out_sel: tuple[slice, ...]
    full: bool  # every in-domain element of the chunk is selected, in order
    is_box: bool  # the chunk side is a box (slices of step 1; the output side always is)


def chunk_parts(sel: tuple[AxisSelection, ...], grid: ChunkGrid) -> list[ChunkPart]:
    """Every chunk the selection touches, with chunk-side and output-side slices.

    Output slices index an array of shape ``tuple(a.count for a in sel)``
    (dropped axes kept as length 1).  Out-of-domain coordinates belong to no chunk.
    """
    per_axis = [
        axis_runs(a, o, n, c) for a, o, n, c in zip(sel, grid.origin, grid.shape, grid.chunk_shape)
    ]
    boxes = [[r.chunk_slice.step == 1 for r in runs] for runs in per_axis]
    parts = []
    for runs, box in zip(product(*per_axis), product(*boxes)):
        coord, chunk_sel, out_sel, full = zip(*runs) if runs else ((), (), (), ())
        parts.append(ChunkPart(coord, chunk_sel, out_sel, all(full), all(box)))
    return parts


def drop_axes(sel: tuple[AxisSelection, ...]) -> tuple[int | slice, ...]:
    """Index that removes the axes selected by integers from a full-rank result."""
    return tuple(0 if a.drop else slice(None) for a in sel)
