"""Copies between memory layouts (csrc/transpose.c): every element where numpy's copy puts
it, for random shapes, item sizes, views and orders (the SSE2 16 x 16 byte tiles and their
edges included)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shardvol._ext.transpose import copyto, fortran_bytes


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_copies_equal_numpys(data):
    ndim = data.draw(st.integers(1, 4))
    shape = tuple(data.draw(st.integers(1, 40)) for _ in range(ndim))
    dtype = data.draw(st.sampled_from(["u1", "i2", "f4", "u8", "c16", "S3"]))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    raw = rng.integers(0, 256, (*shape, np.dtype(dtype).itemsize), dtype=np.uint8)
    base = raw.view(dtype).reshape(shape)
    if data.draw(st.booleans()):
        base = np.asfortranarray(base)
    steps = tuple(data.draw(st.sampled_from([1, 1, 2, -1])) for _ in range(ndim))
    src = base[tuple(slice(None, None, s) for s in steps)]
    order = data.draw(st.sampled_from(["C", "F"]))
    dst_base = np.zeros(tuple(n + 3 for n in src.shape), dtype, order=order)
    dst = dst_base[tuple(slice(1, 1 + n) for n in src.shape)]
    copyto(dst, src)
    assert np.array_equal(dst, src, equal_nan=dtype != "S3")
    outside = np.ones(dst_base.shape, bool)
    outside[tuple(slice(1, 1 + n) for n in src.shape)] = False
    assert not np.ascontiguousarray(dst_base[outside]).view(np.uint8).any()  # (untouched)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_fortran_bytes_equal_numpys(data):
    """fortran_bytes(a) == a.tobytes(order="F"): views of random layouts, a chunk of a larger
    volume among them (its short rows prefetched across planes, the last into the next)."""
    ndim = data.draw(st.integers(0, 4))
    shape = tuple(data.draw(st.integers(0 if ndim < 3 else 1, 70)) for _ in range(ndim))
    dtype = data.draw(st.sampled_from(["u1", ">u2", "f4", "u8", "c16"]))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    base = rng.integers(0, 256, (*shape, np.dtype(dtype).itemsize), np.uint8).view(dtype)
    base = base.reshape(shape)
    if data.draw(st.booleans()):
        base = np.asfortranarray(base)
    cut = tuple(slice(data.draw(st.integers(0, n)), None, data.draw(st.sampled_from([1, 2, -1])))
                for n in shape)
    src = np.asarray(base[cut])  # (a 0-d array: indexing it gives a scalar)
    assert fortran_bytes(src) == src.tobytes(order="F")


def test_a_volume_into_zarr_chunks():
    """The case it is for: 64^3 boxes of a Fortran-ordered volume into C-ordered chunks."""
    vol = np.asfortranarray(np.random.default_rng(1).integers(0, 255, (130, 70, 90, 1),
                                                             dtype=np.uint8))
    for at in ((0, 0, 0), (5, 3, 17), (66, 6, 26)):
        box = vol[at[0]:at[0] + 64, at[1]:at[1] + 64, at[2]:at[2] + 64]
        chunk = np.empty(box.shape, np.uint8)
        copyto(chunk, box)
        assert np.array_equal(chunk, box) and chunk.flags.c_contiguous
    out = np.zeros((10, 10), np.uint16)
    copyto(out, np.full((10, 10), 3, np.uint8))  # (other dtypes: numpy's copy)
    assert (out == 3).all()
