"""Label volumes: the labels present in a region, masks of labels, renumbering, values at
scattered points (what CloudVolume's ``unique``, ``download(label=, renumber=)`` and
``scattered_points`` do), over any array read by boxes.

Regions are read a block of whole chunks at a time (about :data:`BLOCK_BYTES`), so the
labels of a large region are found without holding it; points are read one box per chunk
they fall in, the boxes all at once.  The label work is fastremap's (C++, GIL released).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import numpy as np

from shardvol.array.grid import ChunkGrid
from shardvol.errors import InvalidArgumentError, OutOfBoundsError

#: Bytes of a region read at a time to find its labels.
BLOCK_BYTES = 64 << 20

Box = tuple[tuple[int, int], ...]  # per axis [start, stop), global coordinates


def blocks(box: Box, grid: ChunkGrid, itemsize: int) -> Iterator[tuple[slice, ...]]:
    """``box`` (per axis ``(start, stop)``, global coordinates) cut on chunk boundaries
    into blocks of about BLOCK_BYTES, as slices."""
    step = list(grid.chunk_shape)
    for d, (lo, hi) in enumerate(box):  # whole chunks, grown along the first axes
        while step[d] < hi - lo and math.prod(step) * 2 * itemsize <= BLOCK_BYTES:
            step[d] *= 2
    cuts = []
    for (lo, hi), o, s in zip(box, grid.origin, step):
        inner = range(o + ((lo - o) // s + 1) * s, hi, s)  # the boundaries inside
        edges = [lo, *inner, hi]
        cuts.append(list(itertools.pairwise(edges)))
    for pieces in itertools.product(*cuts):
        yield tuple(slice(a, b) for a, b in pieces)


def unique(read: Callable[[tuple[slice, ...]], np.ndarray],
           pieces: Iterator[tuple[slice, ...]]) -> np.ndarray:
    """The sorted distinct values of the pieces read."""
    import fastremap  # (here and in renumber: label work only, not at import)

    found = [fastremap.unique(read(p)) for p in pieces]
    return np.unique(np.concatenate(found)) if found else np.zeros(0)


def mask(array: np.ndarray, labels: Any) -> np.ndarray:
    """A boolean array: where ``array`` holds one of ``labels`` (one or a sequence)."""
    wanted = np.asarray(labels).reshape(-1)
    if wanted.size == 1:
        return np.asarray(array == wanted[0])
    return np.isin(array, wanted)


def renumber(array: np.ndarray, start: int = 1,
             preserve_zero: bool = True) -> tuple[np.ndarray, dict[int, int]]:
    """``array``'s labels renumbered from ``start`` (0 kept as 0 if ``preserve_zero``), in
    its data type, and the mapping from each old label to its new one."""
    if array.dtype.kind not in "ui":
        raise InvalidArgumentError(f"renumbering needs integer labels, not {array.dtype}")
    import fastremap

    out, mapping = fastremap.renumber(array, start=start, preserve_zero=preserve_zero,
                                      in_place=True)
    return out.astype(array.dtype, copy=False), {int(k): int(v) for k, v in mapping.items()}


def points(
    coords: Any,
    grid: ChunkGrid,
    bounded: bool,
    fill_value: Any,
    dtype: np.dtype,
    read_async: Callable[[tuple[slice, ...]], Future],
) -> np.ndarray:
    """The values at global voxel coordinates ``coords`` (N x the grid's spatial axes,
    integers): an array of N rows of the non-spatial axes' values (channels).  Points
    are grouped by the chunk they fall in and each group's box is read once, every box
    at once.  Outside the domain: OutOfBoundsError when ``bounded``, else the fill
    value."""
    spatial = len(grid.shape) - 1
    try:
        pts = np.asarray(coords)
        if pts.dtype.kind not in "iu" or pts.ndim != 2 or pts.shape[1] != spatial:
            raise ValueError
        pts = pts.astype(np.int64)
    except (ValueError, TypeError):
        raise InvalidArgumentError(
            f"points must be an N x {spatial} array of integer voxel coordinates") from None
    origin = np.asarray(grid.origin[:spatial], np.int64)
    stop = origin + np.asarray(grid.shape[:spatial], np.int64)
    inside = np.all((pts >= origin) & (pts < stop), axis=1)
    if bounded and not inside.all():
        bad = pts[np.argmin(inside)].tolist()
        raise OutOfBoundsError(f"point {bad} is outside the domain "
                               f"[{origin.tolist()}, {stop.tolist()})")
    channels = grid.shape[spatial]
    out = np.full((len(pts), channels), fill_value, dtype)
    where = np.flatnonzero(inside)
    if not where.size:
        return out
    chunk = np.asarray(grid.chunk_shape[:spatial], np.int64)
    keys = (pts[where] - origin) // chunk
    order = np.lexsort(keys.T[::-1])
    keys, where = keys[order], where[order]
    starts = np.flatnonzero(np.any(np.diff(keys, axis=0) != 0, axis=1)) + 1
    groups = np.split(where, starts)
    reads: list[tuple[np.ndarray, np.ndarray, Future]] = []
    for group in groups:
        p = pts[group]
        lo, hi = p.min(axis=0), p.max(axis=0) + 1
        box = tuple(slice(int(a), int(b)) for a, b in zip(lo, hi))
        reads.append((group, p - lo, read_async(box)))
    for group, local, future in reads:
        block = future.result()
        out[group] = block[tuple(local.T)].reshape(len(group), channels)
    return out
