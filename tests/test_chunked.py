"""The read/write engine against a numpy model, over an in-memory chunk store.

The store groups chunks into units of 2 x 2 chunks (like shards), so unit
merges, replacement of whole units and partial read-modify-write are all used.
"""

from __future__ import annotations

import contextlib
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardvol._parallel import run_parallel
from shardvol.array.chunkstore import ChunkStore
from shardvol.array.engine import ChunkedArray
from shardvol.array.grid import ChunkGrid
from shardvol.array.indexing import normalize_selection
from shardvol.errors import InvalidArgumentError, MissingChunkError


class RawCodec:
    """Bytes of the chunk in the array's memory order (test double)."""

    def __init__(self, order):
        self.order = order

    def encode(self, array):
        return np.asarray(array).tobytes(order=self.order)

    def decode(self, data, shape, dtype, out=None, context=""):
        arr = np.frombuffer(data, dtype).reshape(shape, order=self.order)
        if out is None:
            return arr
        out[...] = arr
        return out


class DictStore(ChunkStore):
    def __init__(self, grid):
        self.grid = grid
        self.units_data: dict = {}
        self.locks: dict = {}
        self.writes = []

    def unit_of(self, c):
        return (c[0] // 2, c[1] // 2)

    def read_chunks(self, coords):
        out = {}
        for c in coords:
            blob = self.units_data.get(self.unit_of(c), {}).get(c)
            if blob is not None:
                out[c] = blob
        return out

    def units(self, coords):
        out = {}
        for c in coords:
            out.setdefault(self.unit_of(c), []).append(c)
        return out

    def unit_chunks(self, unit):
        g = self.grid.grid_shape
        return [
            (x, y, *rest)
            for x in range(2 * unit[0], min(2 * unit[0] + 2, g[0]))
            for y in range(2 * unit[1], min(2 * unit[1] + 2, g[1]))
            for rest in np.ndindex(*g[2:])
        ]

    def all_units(self):
        g = self.grid.grid_shape
        return iter(np.ndindex(-(-g[0] // 2), -(-g[1] // 2)))

    def update_unit(self, unit, put, delete=(), replace=False, current=None):
        entries = {} if replace else dict(self.units_data.get(unit, {}))
        for c in delete:
            entries.pop(c, None)
        entries.update(put)
        self.writes.append((unit, replace))
        if entries:
            self.units_data[unit] = entries
        else:
            self.units_data.pop(unit, None)

    def lock(self, unit):
        return self.locks.setdefault(unit, threading.Lock())


def make(shape, chunks, origin, dtype, order, padded=False, skip_fill=False, fill=0):
    grid = ChunkGrid(origin, shape, chunks)
    return ChunkedArray(
        grid=grid, dtype=np.dtype(dtype), store=DictStore(grid), codec=RawCodec(order),
        fill_value=fill, order=order, padded_chunks=padded, skip_fill_chunks=skip_fill,
        parallel=3,
    )


def sel(arr, key, bounded=True):
    return normalize_selection(key, arr.grid.origin, arr.grid.shape, bounded=bounded)


def random_slice(data, o, n):
    a = data.draw(st.integers(o, o + n - 1))
    b = data.draw(st.integers(a + 1, o + n))
    step = data.draw(st.sampled_from([1, 1, 1, 2, 3]))
    return slice(a, b, step)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_random_writes_and_reads_match_numpy(data):
    ndim = data.draw(st.integers(2, 4))
    shape = tuple(data.draw(st.integers(1, 13)) for _ in range(ndim))
    chunks = tuple(data.draw(st.integers(1, 6)) for _ in range(ndim))
    origin = tuple(data.draw(st.integers(-5, 5)) for _ in range(ndim))
    order = data.draw(st.sampled_from("CF"))
    padded = data.draw(st.booleans())
    skip = data.draw(st.booleans())
    arr = make(shape, chunks, origin, "int16", order, padded, skip, fill=7)
    model = np.full(shape, 7, np.int16)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    for _ in range(data.draw(st.integers(1, 4))):
        key = tuple(random_slice(data, o, n) for o, n in zip(origin, shape))
        local = tuple(slice(k.start - o, k.stop - o, k.step) for k, o in zip(key, origin))
        value = rng.integers(0, 5, model[local].shape).astype(np.int16)
        arr.write(sel(arr, key), value)
        model[local] = value
        np.testing.assert_array_equal(arr.read(sel(arr, (...,))), model)
    key = tuple(random_slice(data, o, n) for o, n in zip(origin, shape))
    local = tuple(slice(k.start - o, k.stop - o, k.step) for k, o in zip(key, origin))
    got = arr.read(sel(arr, key))
    np.testing.assert_array_equal(got, model[local])
    assert got.flags["F_CONTIGUOUS" if order == "F" else "C_CONTIGUOUS"]


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_write_many_matches_numpy_and_updates_each_unit_once(data):
    """Several boxes (overlapping or not) written at once: the later wins where they
    overlap, each unit is updated once, and chunks the boxes cover together are written
    without reading what they held."""
    shape = tuple(data.draw(st.integers(1, 12)) for _ in range(3))
    chunks = tuple(data.draw(st.integers(1, 5)) for _ in range(3))
    order = data.draw(st.sampled_from("CF"))
    arr = make(shape, chunks, (0, 0, 0), "int16", order, data.draw(st.booleans()))
    arr.write(sel(arr, (...,)), 3)
    model = np.full(shape, 3, np.int16)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    pieces = []
    for _ in range(data.draw(st.integers(1, 5))):
        key = tuple(random_slice(data, 0, n) for n in shape)
        key = tuple(slice(k.start, k.stop) for k in key)  # boxes
        value = rng.integers(0, 1000, model[key].shape).astype(np.int16)
        pieces.append((sel(arr, key), value))
        model[key] = value
    read = []
    real_read = arr.store.read_chunks
    arr.store.read_chunks = lambda coords: read.extend(coords) or real_read(coords)
    arr.store.writes.clear()
    arr.write_many(pieces)
    arr.store.read_chunks = real_read
    np.testing.assert_array_equal(arr.read(sel(arr, (...,))), model)
    units = [u for u, _ in arr.store.writes]
    assert len(units) == len(set(units))
    covered = np.zeros(shape, bool)  # (in chunks wholly covered, nothing was read)
    for s, _ in pieces:
        covered[tuple(slice(a.start, a.start + a.count) for a in s)] = True
    for c in read:
        box = tuple(slice(g * n, (g + 1) * n) for g, n in zip(c, chunks))
        assert not covered[box].all(), c


def test_whole_units_are_replaced_and_partial_ones_merged():
    arr = make((8, 8, 3), (2, 2, 3), (0, 0, 0), "uint8", "F")
    arr.write(sel(arr, (...,)), 1)
    assert all(replace for _, replace in arr.store.writes)
    arr.store.writes.clear()
    arr.write(sel(arr, (slice(0, 1), slice(0, 1))), 9)  # one element: partial chunk, merge
    assert arr.store.writes == [((0, 0), False)]
    out = arr.read(sel(arr, (...,)))
    assert (out[0, 0, :] == 9).all() and out.sum() == 8 * 8 * 3 + 3 * 8


def test_whole_unit_write_waits_for_a_read_modify_write_of_that_unit():
    """A writer replacing a unit while another merges into it: one of them goes first."""
    arr = make((4, 4), (2, 2), (0, 0), "uint8", "F")
    merging, replaced = threading.Event(), threading.Event()
    read_chunks = arr.store.read_chunks

    def slow_read(coords):  # the merging writer, between reading the unit and storing it
        found = read_chunks(coords)
        merging.set()
        replaced.wait(0.3)
        return found

    arr.store.read_chunks = slow_read
    partial = threading.Thread(target=arr.write, args=(sel(arr, (0, 0)), 5))
    partial.start()
    merging.wait()

    def replace_unit():
        arr.write(sel(arr, (...,)), np.full((4, 4), 9, np.uint8))  # the whole unit (0, 0)
        replaced.set()

    whole = threading.Thread(target=replace_unit)
    whole.start()
    partial.join()
    whole.join()
    got = arr.read(sel(arr, (...,)))
    replaced_last = np.full((4, 4), 9)
    merged_last = replaced_last.copy()
    merged_last[0, 0] = 5
    assert np.array_equal(got, replaced_last) or np.array_equal(got, merged_last), got


@pytest.mark.parametrize("nan", [float("nan"), np.float32("nan")])
def test_fill_chunks_are_not_stored_when_skipping(nan):
    arr = make((4, 4), (2, 2), (0, 0), "float32", "C", skip_fill=True, fill=nan)
    arr.write(sel(arr, (...,)), 1.0)
    arr.write(sel(arr, (slice(0, 2), slice(0, 2))), float("nan"))
    assert (0, 0) not in arr.store.units_data[(0, 0)]
    out = arr.read(sel(arr, (...,)))
    assert np.isnan(out[:2, :2]).all() and (out[2:, :] == 1).all()


def test_missing_chunks_read_as_fill_or_raise():
    arr = make((4, 4), (2, 2), (10, 10), "uint16", "F", fill=3)
    assert (arr.read(sel(arr, (...,))) == 3).all()
    arr.fill_missing = False
    with pytest.raises(MissingChunkError, match=r"chunk \(0, 0\)"):
        arr.read(sel(arr, (slice(10, 11), slice(10, 11))))


def test_unbounded_reads_and_writes():
    arr = make((4, 4), (3, 3), (5, 0), "int32", "F", fill=-1)
    key = (slice(3, 11), slice(2, 3))  # x 3..10 of which 5..8 lie in the domain
    arr.write(sel(arr, key, bounded=False), np.arange(8)[:, None], bounded=False)
    out = arr.read(sel(arr, (slice(2, 12), slice(None)), bounded=False))
    assert out.shape == (10, 4)
    expected = np.full((10, 4), -1)
    expected[3:7, 2] = np.arange(2, 6)
    np.testing.assert_array_equal(out, expected)


def test_a_read_into_a_given_array_fills_every_element_of_it():
    arr = make((6, 5), (4, 3), (2, 0), "int16", "F", fill=9)
    value = np.random.default_rng(3).integers(0, 100, (6, 5)).astype(np.int16)
    arr.write(sel(arr, (slice(2, 8), slice(0, 5))), value)
    key = (slice(1, 7), slice(1, 5))  # x 1 lies outside the domain: the fill value
    expected = np.full((6, 4), 9, np.int16)
    expected[1:, :] = value[:5, 1:]
    for _ in range(2):  # (the same array again, its old contents overwritten)
        out = np.full((6, 4), -1, np.int16, order="F")
        got = arr.read(sel(arr, key, bounded=False), out=out)
        assert np.shares_memory(got, out)
        np.testing.assert_array_equal(out, expected)
    for wrong in (np.empty((6, 5), np.int16, order="F"), np.empty((6, 4), np.int32, order="F"),
                  np.empty((6, 4), np.int16, order="C")):
        with pytest.raises(InvalidArgumentError, match="cannot read a"):
            arr.read(sel(arr, key, bounded=False), out=wrong)


def test_dtype_and_shape_checks_write_nothing():
    arr = make((4, 4), (2, 2), (0, 0), "uint8", "F")
    with pytest.raises(InvalidArgumentError, match=r"values in \[-1, 0\] do not fit in uint8"):
        arr.write(sel(arr, (...,)), -np.eye(4, dtype=np.int64))
    with pytest.raises(InvalidArgumentError, match="float64 data to a uint8"):
        arr.write(sel(arr, (...,)), np.zeros((4, 4)))
    with pytest.raises(InvalidArgumentError, match="shape"):
        arr.write(sel(arr, (...,)), np.zeros((3, 4), np.uint8))
    with pytest.raises(InvalidArgumentError, match="300"):
        arr.write(sel(arr, (...,)), 300)
    with pytest.raises(InvalidArgumentError):
        arr.write(sel(arr, (...,)), 1.5)
    assert arr.store.units_data == {}
    arr.write(sel(arr, (...,)), np.ones((4, 4), bool))  # safe casts are fine
    arr.write(sel(arr, (...,)), np.full((4, 4), 255, np.int64))  # so are integers that fit
    arr.write(sel(arr, (0,)), 2.0)  # so are exact scalars; integer index drops the axis
    assert arr.read(sel(arr, (...,)))[0].tolist() == [2, 2, 2, 2]


def test_run_parallel_propagates_errors():
    seen = []

    def fn(i):
        if i == 5:
            raise ValueError("five")
        seen.append(i)

    with pytest.raises(ValueError, match="five"):
        run_parallel(fn, list(range(20)), 4)
    with contextlib.suppress(ValueError):
        run_parallel(fn, [5], 1)


def test_nested_run_parallel_cannot_deadlock():
    total = []
    lock = threading.Lock()

    def inner(i):
        with lock:
            total.append(i)

    def outer(j):
        run_parallel(inner, list(range(10)), 8)

    run_parallel(outer, list(range(100)), 40)  # 40 x 8 workers: far more than the pool's 32
    assert len(total) == 1000
