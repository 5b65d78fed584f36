"""ZarrChunkStore + its codec plugged into the generic slicing engine (shardvol.array.engine).

Random basic-indexing reads of arrays TensorStore wrote, and random region
writes whose result TensorStore and zarr-python read back, against a numpy model.
"""

from __future__ import annotations

import numpy as np
import pytest

from shardvol.array.indexing import normalize_selection

from .test_zarr3_roundtrip import equal, random_case, random_data
from .zarr3_util import chunked_array, open_chunkstore, ts_read, ts_write, zarr_read


def random_key(rng, shape):
    key = []
    for n in shape:
        kind = rng.integers(4)
        if kind == 0:
            key.append(int(rng.integers(-n, n)))
        elif kind == 1:
            a, b = sorted(int(v) for v in rng.integers(0, n + 1, 2))
            key.append(slice(a, b))
        elif kind == 2:
            key.append(slice(int(rng.integers(0, n)), None, int(rng.integers(1, 4))))
        else:
            key.append(slice(None, None, -int(rng.integers(1, 3))))
    return tuple(key)


@pytest.mark.parametrize("seed", range(10))
def test_slicing_reads_and_writes(tmp_path, seed):
    meta, data = random_case(300 + seed)
    path = str(tmp_path / "a")
    ts_write(path, meta, data)
    arr = chunked_array(open_chunkstore(path))
    rng = np.random.default_rng(seed)
    for _ in range(6):
        key = random_key(rng, meta.shape)
        got = arr.read(normalize_selection(key, (0,) * meta.ndim, meta.shape, from_end=True))
        assert equal(np.asarray(got), data[key]), key
    expected = data.copy()
    for _ in range(4):
        key = tuple(
            slice(*sorted(int(v) for v in rng.integers(0, n + 1, 2))) for n in meta.shape
        )
        value = random_data(rng, meta)[key]
        arr.write(normalize_selection(key, (0,) * meta.ndim, meta.shape, from_end=True), value)
        expected[key] = value
    assert equal(ts_read(path), expected)
    assert equal(zarr_read(path), expected)
