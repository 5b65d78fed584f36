"""Pooling kernels and pyramids against TensorStore's ts.downsample.

Oracle: ``ts.downsample(ts.array(a) translated to origin, factor + [1], method)``
read over its domain.  TensorStore 0.1.86 reads out of bounds when a single
block spans a whole dimension cut at both ends (n >= 2, 0 < origin % f and
origin % f + n < f): there, and only there, the oracle is the numpy reference
in shardvol._reference, which these tests check against TensorStore everywhere
else.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import tensorstore as ts
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardvol import _reference
from shardvol.errors import InvalidArgumentError
from shardvol.ops.pooling import (
    DTYPES,
    METHODS,
    downsample_pyramid,
    downsampled_shape,
    pool,
)

FACTORS = [(2, 2, 1), (2, 2, 2), (3, 1, 2), (1, 1, 1), (3, 3, 3), (4, 2, 1), (1, 5, 2)]
PYRAMID_FACTORS = [(2, 2, 1), (2, 2, 2), (3, 1, 2), (1, 2, 3)]


def cut_at_both_ends(shape, origin, factor) -> bool:
    return any(n >= 2 and o % f and o % f + n < f for n, o, f in zip(shape, origin, factor))


def tensorstore_or_reference(a: np.ndarray, origin, factor, method: str) -> np.ndarray:
    """The pooled array over blocks floor(origin / f) .. ceil((origin + n) / f).

    For stride, TensorStore's domain starts at ceil(origin / f); the block it
    lacks (cut by the phase) comes from the reference.
    """
    ref = _reference.downsample(a, factor, method, origin)
    if cut_at_both_ends(a.shape[:3], origin, factor):
        return ref
    base = ts.array(np.asfortranarray(a))[ts.d[:].translate_to[(*origin, 0)]]
    view = ts.downsample(base, [*factor, 1], method)
    got = view.read().result()
    start = [lo - o // f for lo, o, f in zip(view.domain.inclusive_min, origin, factor)]
    out = ref.copy()
    out[start[0] :, start[1] :, start[2] :] = got
    return out


def sample(rng: np.random.Generator, dtype, shape) -> np.ndarray:
    """Random values with ties and negatives, or the dtype's full range."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return np.asfortranarray(rng.integers(0, 2, shape).astype(bool))
    if dtype.kind == "f":
        if rng.random() < 0.5:  # few distinct values: mode ties, exact halves
            values = rng.integers(-3, 4, shape) * 0.5
        else:  # magnitudes that make the summation order visible
            values = rng.standard_normal(shape) * 10.0 ** rng.integers(-4, 5, shape)
        return np.asfortranarray(values.astype(dtype))
    info = np.iinfo(dtype)
    if rng.random() < 0.5:
        values = rng.integers(max(info.min, -3), 4, shape).astype(dtype)
    else:
        values = rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    return np.asfortranarray(values)


def random_case(rng, factor, max_extent=13):
    shape = (*(int(v) for v in rng.integers(1, max_extent + 1, 3)), int(rng.integers(1, 3)))
    origin = tuple(int(v) for v in rng.integers(-20, 21, 3))
    return shape, origin


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", [str(d) for d in DTYPES])
def test_pool_matches_tensorstore(dtype, method):
    rng = np.random.default_rng(zlib.crc32(f"{dtype} {method}".encode()))
    for factor in FACTORS:
        for _ in range(2):
            shape, origin = random_case(rng, factor)
            a = sample(rng, dtype, shape)
            got = pool(a, factor, method, phase=origin)
            want = tensorstore_or_reference(a, origin, factor, method)
            assert got.dtype == a.dtype and got.flags.f_contiguous
            np.testing.assert_array_equal(got, want, err_msg=f"{factor} {shape} {origin}")


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", [str(d) for d in DTYPES])
def test_pyramid_matches_tensorstore_of_the_original(dtype, method):
    rng = np.random.default_rng(zlib.crc32(f"{dtype} {method} pyramid".encode()))
    for factor in PYRAMID_FACTORS:
        num_mips = int(rng.integers(1, 4))
        shape, origin = random_case(rng, factor, max_extent=30)
        a = sample(rng, dtype, shape)
        mips = downsample_pyramid(a, factor, num_mips, method, phase=origin)
        assert len(mips) == num_mips
        for k, got in enumerate(mips, start=1):
            fk = tuple(f**k for f in factor)
            want = tensorstore_or_reference(a, origin, fk, method)
            assert got.dtype == a.dtype and got.flags.f_contiguous
            np.testing.assert_array_equal(got, want, err_msg=f"{factor}**{k} {shape} {origin}")


def blocky_labels(rng, shape, cell, n_labels, dtype=np.uint64) -> np.ndarray:
    """Segmentation-like labels: blocks of `cell` voxels with noisy borders."""
    coarse = rng.integers(1, n_labels + 1, [-(-n // cell) + 1 for n in shape]).astype(dtype)
    idx = np.indices(shape)
    jitter = rng.integers(0, 2, (3, *shape))
    labels = coarse[tuple((idx[d] + jitter[d]) // cell for d in range(3))]
    noise = rng.random(shape) < 0.05
    labels[noise] = rng.integers(1, 40, noise.sum()).astype(dtype)
    return np.asfortranarray(labels[..., np.newaxis])


@pytest.mark.parametrize(
    "factor,num_mips,origin",
    [
        ((2, 2, 1), 4, (0, 0, 0)),
        ((2, 2, 1), 3, (5, 3, 1)),
        ((2, 2, 2), 3, (-3, 2, 7)),
        ((3, 3, 1), 2, (1, 2, 0)),
    ],
)
def test_mode_pyramid_of_segmentation(factor, num_mips, origin):
    """Uniform, few-label and many-label (> 8 distinct) blocks, over several mips."""
    rng = np.random.default_rng(1)
    a = blocky_labels(rng, (70, 45, 19), cell=5, n_labels=3)
    a[:20, :20, :5, 0] = rng.integers(0, 100, (20, 20, 5))  # many distinct labels
    mips = downsample_pyramid(a, factor, num_mips, "mode", phase=origin)
    for k, got in enumerate(mips, start=1):
        fk = tuple(f**k for f in factor)
        np.testing.assert_array_equal(got, tensorstore_or_reference(a, origin, fk, "mode"))


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.uint64, np.int64])
def test_mean_pyramid_of_large_blocks(dtype):
    """Hierarchical integer sums over many voxels (accumulator choice, 128-bit sums)."""
    rng = np.random.default_rng(2)
    a = sample(rng, dtype, (67, 33, 20, 1))
    for factor, num_mips, origin in [((4, 4, 4), 2, (1, 2, 3)), ((2, 2, 1), 5, (17, 9, 0))]:
        mips = downsample_pyramid(a, factor, num_mips, "mean", phase=origin)
        for k, got in enumerate(mips, start=1):
            fk = tuple(f**k for f in factor)
            np.testing.assert_array_equal(got, tensorstore_or_reference(a, origin, fk, "mean"))


@pytest.mark.parametrize("dtype", [np.uint64, np.int64])
def test_mean_of_extreme_64_bit_values(dtype):
    info = np.iinfo(dtype)
    for value in (info.max, info.min, info.max - 1):
        a = np.full((5, 4, 3, 1), value, dtype=dtype, order="F")
        assert (pool(a, (5, 4, 3), "mean") == value).all()
    a = np.asfortranarray(np.array([info.max, info.max - 1] * 4, dtype=dtype).reshape(8, 1, 1, 1))
    np.testing.assert_array_equal(
        pool(a, (8, 1, 1), "mean"), tensorstore_or_reference(a, (0, 0, 0), (8, 1, 1), "mean")
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("method", ["min", "max", "mean", "stride"])
def test_nan_handling_matches_tensorstore(dtype, method):
    rng = np.random.default_rng(3)
    a = sample(rng, dtype, (9, 7, 5, 1))
    a[rng.random(a.shape) < 0.3] = np.nan
    a[:2, :2, :1] = np.nan  # an all-NaN block: min/max give +inf/-inf
    for factor in [(2, 2, 1), (3, 2, 2)]:
        got = pool(a, factor, method, phase=(0, 1, 0))
        want = tensorstore_or_reference(a, (0, 1, 0), factor, method)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_signed_zeros_match_tensorstore(dtype):
    """Means start from +0 (a block of -0 averages to +0); min/max keep the first zero."""
    a = np.array([-0.0, -0.0, -0.0, 0.0, 0.0, -0.0, 1.0, -0.0], dtype=dtype).reshape(8, 1, 1, 1)
    for method in ["mean", "min", "max"]:
        got = pool(a, (2, 1, 1), method)
        want = tensorstore_or_reference(a, (0, 0, 0), (2, 1, 1), method)
        assert np.signbit(got).tolist() == np.signbit(want).tolist(), method
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("method", METHODS)
def test_huge_factors_on_small_arrays(method):
    """Blocks far larger than the array: scratch memory follows the array, not the block."""
    a = sample(np.random.default_rng(6), np.int16, (7, 5, 3, 2))
    mips = downsample_pyramid(a, (1000, 999, 1), 3, method, phase=(123, 4, 0))
    for k, got in enumerate(mips, start=1):
        fk = (1000**k, 999**k, 1)
        assert got.shape == (1, 1, 3, 2)
        np.testing.assert_array_equal(got, _reference.downsample(a, fk, method, (123, 4, 0)))


def test_mean_rounds_half_to_even_including_negatives():
    a = np.array([1, 2, 2, 3, -1, -2, -2, -3, 5, 6, -5, -6], dtype=np.int8)
    got = pool(a.reshape(12, 1, 1), (2, 1, 1), "mean")[:, 0, 0]
    # 1.5 -> 2, 2.5 -> 2, -1.5 -> -2, -2.5 -> -2, 5.5 -> 6, -5.5 -> -6
    assert got.tolist() == [2, 2, -2, -2, 6, -6]


def test_mode_ties_go_to_the_smallest_value():
    a = np.array([7, 3, 3, 7, 9, 1, 1, 9, 4, 2, 8, 6], dtype=np.uint64).reshape(12, 1, 1)
    assert pool(a, (4, 1, 1), "mode")[:, 0, 0].tolist() == [3, 1, 2]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shape=st.tuples(*[st.integers(1, 20)] * 3, st.integers(1, 2)),
    factor=st.tuples(*[st.integers(1, 4)] * 3),
    origin=st.tuples(*[st.integers(-50, 50)] * 3),
    num_mips=st.integers(1, 3),
    method=st.sampled_from(METHODS),
    dtype=st.sampled_from([np.uint8, np.int16, np.uint32, np.int64, np.float32, np.uint64]),
    seed=st.integers(0, 2**32 - 1),
)
def test_pyramid_hypothesis(shape, factor, origin, num_mips, method, dtype, seed):
    a = sample(np.random.default_rng(seed), dtype, shape)
    mips = downsample_pyramid(a, factor, num_mips, method, phase=origin)
    for k, got in enumerate(mips, start=1):
        fk = tuple(f**k for f in factor)
        assert got.shape == downsampled_shape(shape, factor, origin, mip=k)
        np.testing.assert_array_equal(got, tensorstore_or_reference(a, origin, fk, method))


def test_layouts_strided_views_and_out():
    rng = np.random.default_rng(4)
    base = sample(rng, np.int32, (20, 17, 9, 3))
    views = [np.ascontiguousarray(base), base[::2, ::-1, 1:], base[3:, :, ::3, 1:]]
    for view in views:
        for method in METHODS:
            want = tensorstore_or_reference(np.asfortranarray(view), (1, 2, 3), (2, 3, 2), method)
            np.testing.assert_array_equal(pool(view, (2, 3, 2), method, phase=(1, 2, 3)), want)
            big = np.zeros((want.shape[0] * 2, *want.shape[1:]), dtype=np.int32)
            out = big[::2]  # non-contiguous output
            assert pool(view, (2, 3, 2), method, phase=(1, 2, 3), out=out) is out
            np.testing.assert_array_equal(out, want)


def test_3d_input_bool_and_shape_helper():
    rng = np.random.default_rng(5)
    a = rng.integers(0, 2, (9, 8, 7)).astype(bool)
    for method in METHODS:
        got = pool(a, (2, 2, 2), method, phase=(1, 0, 1))
        assert got.ndim == 3 and got.dtype == bool
        want = tensorstore_or_reference(a[..., None], (1, 0, 1), (2, 2, 2), method)[..., 0]
        np.testing.assert_array_equal(got, want)
    out = np.empty((5, 4, 4), dtype=bool)
    assert pool(a, (2, 2, 2), "mode", phase=(1, 0, 1), out=out) is out
    assert downsampled_shape((9, 8, 7), (2, 2, 2), (1, 0, 1)) == (5, 4, 4)
    assert downsampled_shape((9, 8, 7, 2), (2, 2, 2), (1, 0, 1), mip=2) == (3, 2, 2, 2)
    assert downsampled_shape((0, 8, 7), (2, 2, 2)) == (0, 4, 4)
    assert pool(np.zeros((0, 4, 4), np.uint8), (2, 2, 2), "mean").shape == (0, 2, 2)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"factor": (0, 2, 2)}, r"factor must be positive integers, got \(0, 2, 2\)"),
        ({"factor": (-1, 2, 2)}, r"got \(-1, 2, 2\)"),
        ({"factor": (2, 2)}, r"factor must be 3 integers, got \(2, 2\)"),
        ({"factor": (2.5, 2, 2)}, r"factor must be 3 integers, got \(2.5, 2, 2\)"),
        ({"factor": (2, 2, 2, 3)}, r"channels are not pooled"),
        ({"method": "median"}, r"method must be one of .*got 'median'"),
        ({"phase": (1, 2)}, r"phase must be 3 integers, got \(1, 2\)"),
        ({"array": np.zeros((4, 4), np.uint8)}, r"got shape \(4, 4\)"),
        ({"array": np.zeros((2,) * 5, np.uint8)}, r"got shape \(2, 2, 2, 2, 2\)"),
        ({"array": np.zeros((4, 4, 4), np.complex64)}, r"unsupported dtype complex64"),
        ({"array": np.zeros((4, 4, 4), np.float16)}, r"unsupported dtype float16"),
        ({"array": np.zeros((4, 4, 4), ">u2")}, r"unsupported dtype >u2"),
        ({"out": np.zeros((2, 2, 3), np.uint8)}, r"out must be an array of shape \(2, 2, 2\)"),
        ({"out": np.zeros((2, 2, 2), np.int8)}, r"dtype uint8, got \(2, 2, 2\) int8"),
    ],
)
def test_pool_rejects_bad_arguments(kwargs, match):
    args = {"array": np.zeros((4, 4, 4), np.uint8), "factor": (2, 2, 2), "method": "mean"}
    args.update(kwargs)
    with pytest.raises(InvalidArgumentError, match=match):
        pool(**args)


def test_out_must_be_writeable_and_separate():
    a = np.zeros((4, 4, 4), np.uint8)
    out = np.zeros((2, 2, 2), np.uint8)
    out.flags.writeable = False
    with pytest.raises(InvalidArgumentError, match="out is read-only"):
        pool(a, (2, 2, 2), "max", out=out)
    with pytest.raises(InvalidArgumentError, match="overlaps"):
        pool(a, (2, 2, 2), "max", out=a[:2, :2, :2])


@pytest.mark.parametrize(
    "num_mips,factor,match",
    [
        (0, (2, 2, 1), r"num_mips must be an integer in \[1, 64\], got 0"),
        (1.5, (2, 2, 1), r"got 1.5"),
        (32, (2, 2, 1), r"factor \(2, 2, 1\) to the power 32 exceeds"),
    ],
)
def test_pyramid_rejects_bad_arguments(num_mips, factor, match):
    with pytest.raises(InvalidArgumentError, match=match):
        downsample_pyramid(np.zeros((4, 4, 4), np.uint8), factor, num_mips, "mode")
