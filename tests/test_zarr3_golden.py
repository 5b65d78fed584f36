"""Zarr v3 arrays written by other implementations (zarrita, zarrs) read to their expected values.

The data is a copy of the shared testdata in tests/data/testdata (each folder's SOURCE.txt names
its origin).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from .zarr3_util import open_chunkstore, read_all, ts_read, zarr_read

TESTDATA = os.path.join(os.path.dirname(__file__), "data", "testdata")
ZARRITA = os.path.join(TESTDATA, "google__neuroglancer__zarr3_from_zarrita")
ZARRS = os.path.join(
    TESTDATA, "zarrs__zarrs__sharded_array_write_read", "sharded_array_write_read.zarr", "group",
    "array",
)


def zarrita_arrays() -> list[str]:
    root = os.path.join(ZARRITA, "data.zarr")
    return sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))


EXPECTED = sorted(
    f[:-4] for f in os.listdir(os.path.join(ZARRITA, "expected_sharded")) if f.endswith(".npy")
)


@pytest.mark.parametrize("name", EXPECTED)
def test_zarrita_sharded_expected_values(name):
    expected = np.load(os.path.join(ZARRITA, "expected_sharded", f"{name}.npy"))
    cs = open_chunkstore(os.path.join(ZARRITA, "data.zarr", name))
    assert cs.sharded
    got = read_all(cs)
    assert got.dtype == expected.dtype and np.array_equal(got, expected)


@pytest.mark.parametrize("name", zarrita_arrays())
def test_zarrita_all_arrays_match_tensorstore(name):
    """Every array there (blosc, gzip, raw, big-endian, transpose "F", ragged) as the oracles
    read it.

    TensorStore rejects the bool arrays' integer fill value 0, zarr-python the transpose order "F";
    each such array is checked against the other oracle.
    """
    path = os.path.join(ZARRITA, "data.zarr", name)
    got = read_all(open_chunkstore(path))
    try:
        expected = ts_read(path)
    except ValueError:
        expected = zarr_read(path)
    assert got.dtype == expected.dtype and np.array_equal(got, expected)


def test_zarrita_absent_inner_chunks_and_shard():
    """The 'filled' arrays have empty index entries (2^64-1) that must read as fill."""
    cs = open_chunkstore(
        os.path.join(ZARRITA, "data.zarr", "1d.chunked.filled.compressed.sharded.i2"))
    present = cs.read_chunks([(0,), (1,), (2,), (3,)])
    assert set(present) == {(0,), (1,)}  # the second shard is absent, 0 and 1 stored
    assert cs.exists([(0,), (2,)]) == {(0,): True, (2,): False}


def test_zarrs_sharded_array():
    cs = open_chunkstore(ZARRS)
    assert cs.sharded and cs.chunk_shape == (4, 4) and cs.metadata.dimension_names == ("y", "x")
    got = read_all(cs)
    assert got.dtype == np.uint16
    assert np.array_equal(got, np.arange(64, dtype=np.uint16).reshape(8, 8))
    expected = np.load(os.path.join(TESTDATA, "zarrs__zarrs__sharded_array_write_read",
                                    "expected_group_array.npy"))
    assert np.array_equal(got, expected)
