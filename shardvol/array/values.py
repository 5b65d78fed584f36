"""Values written into arrays: exact scalar casts, checked array casts, fill checks.

Shared by both formats (fill values of precomputed volumes and Zarr arrays, values
written through the engine, chunks left out because they equal the fill value).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from shardvol.errors import InvalidArgumentError


def is_fill(array: np.ndarray, fill_value: Any) -> bool:
    """Whether every element of ``array`` is ``fill_value``, bit for bit for floating-point
    types (-0.0 is not 0.0, and a NaN is the fill value only with its payload), so that
    leaving out a chunk that is all fill loses nothing."""
    fill = np.asarray(fill_value, dtype=array.dtype)
    if array.dtype.kind in "fc":
        parts = [(array, fill)]
        if array.dtype.kind == "c":
            parts = [(array.real, fill.real), (array.imag, fill.imag)]
        bits = f"u{parts[0][0].dtype.itemsize}"
        return all(_all_equal(a.view(bits), f.view(bits)) for a, f in parts)
    return _all_equal(array, fill)


def _all_equal(array: np.ndarray, value: np.ndarray) -> bool:
    if array.size and array.flat[0] != value:  # most stored chunks fail at once
        return False
    return bool(np.all(array == value))


def _same_number(a: complex, b: complex) -> bool:
    """Whether two Python numbers are equal exactly, NaN to NaN (complex: part by part).
    (numpy would compare an integer and a float in float64, where 2**53 + 1 equals 2**53.)"""
    if isinstance(a, complex) or isinstance(b, complex):
        a, b = complex(a), complex(b)
        return _same_number(a.real, b.real) and _same_number(a.imag, b.imag)
    both_nan = isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
    return a == b or both_nan


def cast_scalar(value: Any, dtype: np.dtype) -> Any:
    """``value`` as a scalar of ``dtype`` if it is one exactly (a fill value, say), else
    InvalidArgumentError."""
    try:
        if np.ndim(value) != 0:
            raise InvalidArgumentError("not a scalar")
        return cast_value(value, dtype)[()]
    except (InvalidArgumentError, TypeError, ValueError):
        raise InvalidArgumentError(f"{value!r} is not a {dtype} value") from None


def cast_value(value: Any, dtype: np.dtype) -> np.ndarray:
    """``value`` as an array of ``dtype`` if that loses nothing, else InvalidArgumentError.

    Allowed: the same dtype, numpy "safe" casts, integer arrays whose values all
    fit the target integer type, and scalars representable exactly.
    """
    arr = np.asarray(value)
    if arr.dtype == dtype:
        return arr
    if arr.ndim == 0 and arr.dtype.kind in "biufc":
        try:
            with np.errstate(invalid="ignore", over="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
                converted = np.array(value).astype(dtype, casting="unsafe")
            same = _same_number(converted.item(), arr.item())
        except (OverflowError, ValueError, TypeError):
            same = False
        if not same:
            raise InvalidArgumentError(f"value {value!r} cannot be stored exactly as {dtype}")
        return converted
    if np.can_cast(arr.dtype, dtype, casting="safe"):
        return arr.astype(dtype)
    if arr.dtype.kind in "iu" and dtype.kind in "iu":
        info = np.iinfo(dtype)
        lo, hi = (int(arr.min()), int(arr.max())) if arr.size else (0, 0)
        if info.min <= lo and hi <= info.max:
            return arr.astype(dtype)
        raise InvalidArgumentError(
            f"{arr.dtype} values in [{lo}, {hi}] do not fit in {dtype} [{info.min}, {info.max}]"
        )
    raise InvalidArgumentError(
        f"cannot write {arr.dtype} data to a {dtype} array without loss; "
        f"cast it first (e.g. value.astype('{dtype}'))"
    )
