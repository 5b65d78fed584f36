"""Pooling of (x, y, z, channel) arrays by integer factors, one mip or a pyramid.

The C kernels (``csrc/downsample.h``, GIL released) reproduce TensorStore's
``ts.downsample``: ``pool(a, f, method, phase=o)`` equals
``ts.downsample(ts.array(a) translated to origin o, f + [1], method)`` read over
its domain, and mip k of ``downsample_pyramid`` equals the same with factor
``f**k`` -- every mip is pooled from the original voxels, never from a rounded
coarser mip.

Methods: ``mean`` (integers: exact mean rounded half to even; floats: summed
in the element type in x-fastest memory order), ``mode`` (most frequent, ties
to the smallest value), ``min``, ``max`` (floats ignore NaN) and ``stride``
(the block's first voxel).  dtypes: bool, (u)int8/16/32/64, float32/64.

``phase`` is the global coordinate of ``array[0, 0, 0]`` (only its residue
modulo the block size matters): blocks are aligned to multiples of the
factor in that global frame, as TensorStore aligns them to the domain origin,
so partial blocks at either edge pool only the voxels present.  Arrays are
(x, y, z) or (x, y, z, c); outputs are Fortran-ordered with the same rank.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import numpy as np

from shardvol._ext import downsample as _ext
from shardvol.errors import InvalidArgumentError

METHODS = tuple(_ext.METHOD_CODES)
DTYPES = (np.dtype(bool), *_ext.DTYPE_CODES)

__all__ = ["DTYPES", "METHODS", "downsample_pyramid", "downsampled_shape", "pool"]


def _ints(value, name: str, lengths=(3,)) -> tuple[int, ...]:
    try:
        items = tuple(operator.index(v) for v in value)
    except TypeError:
        items = ()
    if len(items) not in lengths:
        raise InvalidArgumentError(f"{name} must be {lengths[0]} integers, got {value!r}")
    return items


def _factor(factor, num_mips: int) -> tuple[int, ...]:
    f = _ints(factor, "factor", (3, 4))
    if len(f) == 4 and f[3] != 1:
        raise InvalidArgumentError(
            f"factor must be 3 integers (channels are not pooled), got {factor!r}"
        )
    f = f[:3]
    if any(v < 1 for v in f):
        raise InvalidArgumentError(f"factor must be positive integers, got {factor!r}")
    if any(v**num_mips > _ext.MAX_BLOCK for v in f):
        raise InvalidArgumentError(
            f"factor {f} to the power {num_mips} exceeds the largest block {_ext.MAX_BLOCK}"
        )
    return f


def _method(method) -> str:
    if method not in METHODS:
        raise InvalidArgumentError(f"method must be one of {METHODS}, got {method!r}")
    return method


def _num_mips(num_mips) -> int:
    try:
        k = operator.index(num_mips)
    except TypeError:
        k = 0
    if k < 1 or k > 64:
        raise InvalidArgumentError(f"num_mips must be an integer in [1, 64], got {num_mips!r}")
    return k


def _phase(phase, factor: Sequence[int], num_mips: int) -> tuple[int, ...]:
    """Position of the first voxel in its block of factor**num_mips (phase may be global)."""
    return tuple(v % (f**num_mips) for v, f in zip(_ints(phase, "phase"), factor))


def _as_4d(array) -> tuple[np.ndarray, np.dtype, bool]:
    """(4-D kernel-ready array with bool viewed as uint8, original dtype, whether it was 3-D)."""
    array = np.asarray(array)
    if array.ndim not in (3, 4):
        raise InvalidArgumentError(
            f"array must be 3-D (x, y, z) or 4-D (x, y, z, c), got shape {array.shape}"
        )
    dtype = array.dtype
    if dtype not in DTYPES:
        raise InvalidArgumentError(
            f"unsupported dtype {dtype}; supported: {', '.join(map(str, DTYPES))}"
        )
    was_3d = array.ndim == 3
    if was_3d:
        array = array[..., np.newaxis]
    if any(s % array.itemsize for s in array.strides):
        array = np.asfortranarray(array)
    if dtype.kind == "b":
        array = array.view(np.uint8)
    return array, dtype, was_3d


def _finish(out: np.ndarray, dtype: np.dtype, was_3d: bool) -> np.ndarray:
    if dtype.kind == "b":
        out = out.view(bool)
    return out[..., 0] if was_3d else out


def downsampled_shape(shape, factor, phase=(0, 0, 0), mip: int = 1) -> tuple[int, ...]:
    """Shape of mip ``mip`` of an array of ``shape`` (3 or 4 extents):
    ceil((phase + n) / f**mip)."""
    mip = _num_mips(mip)
    f = _factor(factor, mip)
    extents = _ints(shape, "shape", (3, 4))
    if any(n < 0 for n in extents):
        raise InvalidArgumentError(f"shape must be non-negative extents, got {shape!r}")
    out = _ext.output_shape((*extents, 1)[:4], f, _phase(phase, f, mip), mip)
    return out[: len(extents)]


def pool(array, factor, method: str, phase=(0, 0, 0), out: np.ndarray | None = None) -> np.ndarray:
    """Pool ``array`` by ``factor`` (3 ints) with ``method``; ``phase`` as in the module doc.

    ``out``, if given, must have the pooled shape and the input's dtype (any
    layout); it is filled and returned.
    """
    method = _method(method)
    f = _factor(factor, 1)
    a, dtype, was_3d = _as_4d(array)
    p = _phase(phase, f, 1)
    shape = _ext.output_shape(a.shape, f, p, 1)
    if out is None:
        result = np.empty(shape, dtype=a.dtype, order="F")
        _ext.pyramid(a, f, p, method, [result])
        return _finish(result, dtype, was_3d)
    want = shape[:3] if was_3d else shape
    if not isinstance(out, np.ndarray) or out.shape != want or out.dtype != dtype:
        raise InvalidArgumentError(
            f"out must be an array of shape {want} and dtype {dtype}, got "
            f"{getattr(out, 'shape', type(out))} {getattr(out, 'dtype', '')}"
        )
    if not out.flags.writeable:
        raise InvalidArgumentError("out is read-only")
    if np.may_share_memory(out, array):
        raise InvalidArgumentError("out overlaps the input array")
    target = out[..., np.newaxis] if was_3d else out
    if target.dtype == bool:
        target = target.view(np.uint8)
    if any(s % target.itemsize for s in target.strides):
        raise InvalidArgumentError(f"out has strides {out.strides} not multiples of its item size")
    _ext.pyramid(a, f, p, method, [target])
    return out


def downsample_pyramid(
    array, factor, num_mips: int, method: str, phase=(0, 0, 0)
) -> list[np.ndarray]:
    """Mips 1..num_mips of ``array``: mip k pools the original by ``factor**k``.

    Computed in one pass over the input (tiles aligned to ``factor**num_mips``).
    Returns ``num_mips`` Fortran-ordered arrays of the input's dtype and rank.
    """
    method = _method(method)
    k = _num_mips(num_mips)
    f = _factor(factor, k)
    a, dtype, was_3d = _as_4d(array)
    p = _phase(phase, f, k)
    outs = [
        np.empty(_ext.output_shape(a.shape, f, p, m), dtype=a.dtype, order="F")
        for m in range(1, k + 1)
    ]
    _ext.pyramid(a, f, p, method, outs)
    return [_finish(o, dtype, was_3d) for o in outs]
