"""Selections in global coordinates and their chunk projections, against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardvol.array.grid import ChunkGrid
from shardvol.array.indexing import chunk_parts, drop_axes, normalize_selection
from shardvol.errors import InvalidArgumentError, OutOfBoundsError


def assemble(model: np.ndarray, grid: ChunkGrid, key) -> np.ndarray:
    """Read ``model[key]`` (global coordinates) chunk by chunk through chunk_parts."""
    sel = normalize_selection(key, grid.origin, grid.shape)
    out = np.full(tuple(a.count for a in sel), -1, model.dtype)
    seen = np.zeros(out.shape, bool)
    for p in chunk_parts(sel, grid):
        start = [g * c for g, c in zip(p.coord, grid.chunk_shape)]
        ext = grid.chunk_extent(p.coord)
        chunk = model[tuple(slice(s, s + e) for s, e in zip(start, ext))]
        assert not seen[p.out_sel].any(), "two chunks wrote the same output element"
        out[p.out_sel] = chunk[p.chunk_sel]
        seen[p.out_sel] = True
        if p.full:
            assert chunk[p.chunk_sel].shape == tuple(ext)
    assert seen.all()
    return out[drop_axes(sel)]


def local_key(key, origin, shape):
    """The same selection expressed on a 0-based numpy array (reference semantics)."""
    items = list(key) if isinstance(key, tuple) else [key]
    out = []
    for item, o, _n in zip(items, origin, shape):
        def loc(i, o=o):  # called within this iteration; the default binds this iteration's o
            if i is None:
                return None
            return i - o  # every index is a global coordinate
        if isinstance(item, slice):
            out.append(slice(loc(item.start), loc(item.stop), item.step))
        else:
            out.append(loc(item))
    return tuple(out)


CASES = [
    (slice(None),) * 3,
    (slice(3, 17), slice(0, 9), slice(5, 6)),
    (4, slice(None), 7),
    (slice(None, None, 3), slice(1, None, 2), slice(None, None, -1)),
    (slice(15, 2, -4), 9, slice(8, None)),
    (Ellipsis, 3),
    (slice(2, 2), slice(None), slice(None)),
]


@pytest.mark.parametrize("key", CASES)
@pytest.mark.parametrize("origin", [(0, 0, 0), (10, 3, 7)])
def test_chunk_parts_match_numpy(key, origin):
    shape, chunks = (21, 10, 13), (4, 3, 5)
    model = np.arange(np.prod(shape)).reshape(shape)
    grid = ChunkGrid(origin, shape, chunks)
    # CASES are written for a 0-based array: shift their values by the origin
    def glob(k, o):
        if isinstance(k, slice):
            return slice(*(None if v is None else v + o for v in (k.start, k.stop)), k.step)
        if isinstance(k, int):
            return k + o
        return k
    full = list(key)
    if Ellipsis in full:
        i = full.index(Ellipsis)
        full[i : i + 1] = [slice(None)] * (3 - (len(full) - 1))
    gkey = tuple(glob(k, o) for k, o in zip(full, origin))
    expected = model[local_key(gkey, origin, shape)]
    np.testing.assert_array_equal(assemble(model, grid, gkey), expected)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_random_selections(data):
    shape = tuple(data.draw(st.integers(1, 12)) for _ in range(3))
    chunks = tuple(data.draw(st.integers(1, 5)) for _ in range(3))
    origin = tuple(data.draw(st.integers(0, 6)) for _ in range(3))
    model = np.arange(np.prod(shape)).reshape(shape)
    grid = ChunkGrid(origin, shape, chunks)
    key = []
    for o, n in zip(origin, shape):
        if data.draw(st.booleans()):
            key.append(o + data.draw(st.integers(0, n - 1)))
        else:
            step = data.draw(st.sampled_from([1, 1, 2, 3, -1, -2]))
            a = o + data.draw(st.integers(0, n))
            b = o + data.draw(st.integers(0, n))
            if step < 0:
                a = min(a, o + n - 1)
                b = b - 1 if b > o else None
            key.append(slice(a, b, step))
    key = tuple(key)
    np.testing.assert_array_equal(assemble(model, grid, key), model[local_key(key, origin, shape)])


def test_out_of_bounds_and_bad_indices():
    o, n = (10, 0, -5), (20, 8, 10)
    with pytest.raises(OutOfBoundsError, match="axis 0"):
        normalize_selection((slice(0, 15),), o, n)
    with pytest.raises(OutOfBoundsError):
        normalize_selection((slice(None), 8), o, n)
    with pytest.raises(OutOfBoundsError):
        normalize_selection((30,), o, n)
    with pytest.raises(InvalidArgumentError):
        normalize_selection((1.5,), o, n)
    with pytest.raises(InvalidArgumentError):
        normalize_selection((np.array([1, 2]),), o, n)
    with pytest.raises(InvalidArgumentError):
        normalize_selection((slice(None, None, 0),), o, n)
    with pytest.raises(InvalidArgumentError):
        normalize_selection((1, 2, 3, 4), o, n)
    # negative numbers are coordinates on every axis, whatever the domain's origin
    sel = normalize_selection((slice(None), slice(None), -3), o, n)
    assert sel[2].start == -3 and sel[2].drop
    with pytest.raises(OutOfBoundsError, match="index -1 is outside the domain \\[10, 30\\) "
                                               "\\(indices are global coordinates"):
        normalize_selection((-1,), o, n)
    with pytest.raises(OutOfBoundsError, match=r"axis 1: \[-1, 4\) is outside"):
        normalize_selection((slice(None), slice(-1, 4)), o, n)
    # unbounded selections are allowed and report their full extent, below 0 too
    sel = normalize_selection((slice(0, 40), slice(-1, 4)), o, n, bounded=False)
    assert (sel[0].start, sel[0].count, sel[1].start, sel[1].count) == (0, 40, -1, 5)
    sel = normalize_selection((slice(-2, None), -1), (0, 0), (6, 5), bounded=False)
    assert (sel[0].start, sel[0].count, sel[1].start) == (-2, 8, -1)


def test_numpy_rule_for_arrays_starting_at_zero():
    """from_end (Zarr arrays): negative indices count from the end, as numpy's do."""
    sel = normalize_selection((-1, slice(-3, None), slice(None, -4, -1)), (0, 0, 0), (5, 6, 7),
                              from_end=True)
    assert [(a.start, a.step, a.count) for a in sel] == [(4, 1, 1), (3, 1, 3), (6, -1, 3)]
    with pytest.raises(OutOfBoundsError):
        normalize_selection((-6,), (0,), (5,), from_end=True)
    with pytest.raises(InvalidArgumentError, match="starting at 0"):
        normalize_selection((0,), (3,), (5,), from_end=True)


def test_boolean_indices_are_refused():
    with pytest.raises(InvalidArgumentError, match="boolean"):
        normalize_selection((True,), (0, 0), (4, 4))
    with pytest.raises(InvalidArgumentError, match="boolean"):
        normalize_selection((slice(None), np.bool_(False)), (0, 0), (4, 4))
