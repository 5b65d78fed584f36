"""Compressed Morton codes and murmurhash3 against independent oracles."""

from __future__ import annotations

import mmh3
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardvol import _reference
from shardvol._ext.hashing import murmurhash3_x86_128_u64
from shardvol._ext.morton import compressed_morton_code, decode_morton_code, morton_bits
from shardvol.errors import InvalidArgumentError, MortonOverflowError


def mmh3_low64(key: int) -> int:
    return mmh3.hash64(int(key).to_bytes(8, "little"), 0, False, signed=False)[0]


def test_murmurhash_matches_mmh3_on_random_keys():
    rng = np.random.default_rng(0)
    keys = np.concatenate(
        [
            rng.integers(0, 2**64, 2000, dtype=np.uint64, endpoint=False),
            np.array([0, 1, 2**32 - 1, 2**32, 2**63, 2**64 - 1], dtype=np.uint64),
        ]
    )
    got = murmurhash3_x86_128_u64(keys)
    assert got.dtype == np.uint64 and got.shape == keys.shape
    assert [int(v) for v in got] == [mmh3_low64(k) for k in keys]


def test_murmurhash_reference_and_shapes():
    keys = np.arange(1000, dtype=np.uint64).reshape(10, 100) * np.uint64(0x9E3779B97F4A7C15)
    got = murmurhash3_x86_128_u64(keys)
    assert got.shape == (10, 100)
    assert np.array_equal(got, _reference.murmurhash3_x86_128_u64(keys))
    assert int(murmurhash3_x86_128_u64(np.uint64(5))) == mmh3_low64(5)
    assert murmurhash3_x86_128_u64(np.zeros(0, np.uint64)).shape == (0,)


def test_murmurhash_rejects_bad_input():
    with pytest.raises(InvalidArgumentError):
        murmurhash3_x86_128_u64(np.array([1.5]))
    with pytest.raises(InvalidArgumentError):
        murmurhash3_x86_128_u64(np.array([-1]))


GRIDS = [
    (1, 1, 1),
    (2, 2, 2),
    (4, 4, 4),
    (8, 1, 8),
    (1, 1, 1000),
    (3, 5, 7),
    (64, 64, 64),
    (2**21, 2**21, 2**21),  # exactly 63 bits
    (2**20, 3, 1),
    (42943, 10000, 2**24),  # the spec's example: 16 + 14 + 24 bits
    (2**62, 2, 2),  # 62 + 1 + 1 = 64 bits
    (1, 1, 2**64 - 1),  # 64 bits in one dimension
]


@pytest.mark.parametrize("grid", GRIDS)
def test_morton_matches_reference_and_inverts(grid):
    rng = np.random.default_rng(sum(grid) % 2**32)
    n = 500
    coords = np.stack(
        [rng.integers(0, g, n, dtype=np.uint64, endpoint=False) for g in grid], axis=1
    )
    corners = np.array(
        [[0, 0, 0], [g - 1 for g in grid]], dtype=np.uint64
    )
    coords = np.concatenate([coords, corners])
    codes = compressed_morton_code(coords, grid)
    assert np.array_equal(codes, _reference.compressed_morton_code(coords, grid))
    assert np.array_equal(decode_morton_code(codes, grid), coords)


def test_morton_full_small_grid_is_a_bijection():
    grid = (5, 3, 6)
    coords = np.array(np.meshgrid(*[np.arange(g) for g in grid], indexing="ij")).reshape(3, -1).T
    codes = compressed_morton_code(coords, grid)
    assert len(set(codes.tolist())) == len(coords)
    assert int(codes.max()) < 2 ** morton_bits(grid)[1]


def test_morton_known_values():
    # (1, 2, 3) in a 4^3 grid: bits x0 y0 z0 x1 y1 z1 = 1 0 1 0 1 1
    assert int(compressed_morton_code([1, 2, 3], [4, 4, 4])) == 0b110101
    # 1-wide x and y: the code is the z coordinate itself
    assert int(compressed_morton_code([0, 0, 77], [1, 1, 100])) == 77
    assert morton_bits([42943, 10000, 2**24]) == ((16, 14, 24), 54)


@settings(max_examples=200, deadline=None)
@given(
    st.tuples(*[st.integers(1, 2**21) for _ in range(3)]),
    st.integers(0, 2**32 - 1),
)
def test_morton_property(grid, seed):
    rng = np.random.default_rng(seed)
    coords = np.stack([rng.integers(0, g, 20) for g in grid], axis=1)
    codes = compressed_morton_code(coords, grid)
    assert np.array_equal(codes, _reference.compressed_morton_code(coords, grid))
    assert np.array_equal(decode_morton_code(codes, grid), coords)


def test_morton_overflow_is_a_clear_error():
    with pytest.raises(MortonOverflowError, match="65 bits"):
        compressed_morton_code([[0, 0, 0]], [2**22, 2**22, 2**21])
    with pytest.raises(MortonOverflowError):
        decode_morton_code([0], [2**40, 2**40, 1])


@pytest.mark.parametrize(
    "coords, grid",
    [
        ([[4, 0, 0]], [4, 4, 4]),
        ([[-1, 0, 0]], [4, 4, 4]),
        ([[0.5, 0, 0]], [4, 4, 4]),
        ([[0, 0]], [4, 4, 4]),
        ([[0, 0, 0]], [0, 4, 4]),
        ([[0, 0, 0]], [4, 4]),
    ],
)
def test_morton_bad_input(coords, grid):
    with pytest.raises(InvalidArgumentError):
        compressed_morton_code(coords, grid)


def test_morton_decode_rejects_codes_outside_grid():
    with pytest.raises(InvalidArgumentError, match="Morton code 64"):
        decode_morton_code([64], [4, 4, 4])  # needs bit 6 of a 6-bit code
    # grid (3, 3, 2): code bits are x0 y0 z0 x1 y1, so 0b01001 decodes to x = 3
    with pytest.raises(InvalidArgumentError, match="Morton code 9"):
        decode_morton_code([0b01001], [3, 3, 2])
    assert np.array_equal(decode_morton_code([0b11000], [3, 3, 2]), [[2, 2, 0]])
