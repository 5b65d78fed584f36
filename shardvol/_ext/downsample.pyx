"""Pooling of (x, y, z, channel) arrays by integer factors (GIL released).

Thin wrapper of csrc/downsample.h; argument normalisation lives in
shardvol.ops.pooling.
"""
import numpy as np
cimport numpy as cnp
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int64_t

from shardvol._ext.csrc cimport SV_OK, SV_ERR_NOMEM, SV_ERR_OVERFLOW
from shardvol._ext.csrc_downsample cimport (
    SV_DS_MEAN, SV_DS_MODE, SV_DS_MIN, SV_DS_MAX, SV_DS_STRIDE,
    SV_DS_UINT8, SV_DS_INT8, SV_DS_UINT16, SV_DS_INT16, SV_DS_UINT32, SV_DS_INT32,
    SV_DS_UINT64, SV_DS_INT64, SV_DS_FLOAT32, SV_DS_FLOAT64,
    SV_DS_MAX_BLOCK, SV_DS_MAX_BLOCK_VOXELS,
    sv_downsample_shape, sv_downsample_pyramid,
)
from shardvol.errors import InvalidArgumentError

cnp.import_array()

METHOD_CODES = {
    "mean": SV_DS_MEAN, "mode": SV_DS_MODE, "min": SV_DS_MIN, "max": SV_DS_MAX,
    "stride": SV_DS_STRIDE,
}
DTYPE_CODES = {
    np.dtype(np.uint8): SV_DS_UINT8, np.dtype(np.int8): SV_DS_INT8,
    np.dtype(np.uint16): SV_DS_UINT16, np.dtype(np.int16): SV_DS_INT16,
    np.dtype(np.uint32): SV_DS_UINT32, np.dtype(np.int32): SV_DS_INT32,
    np.dtype(np.uint64): SV_DS_UINT64, np.dtype(np.int64): SV_DS_INT64,
    np.dtype(np.float32): SV_DS_FLOAT32, np.dtype(np.float64): SV_DS_FLOAT64,
}
MAX_BLOCK = SV_DS_MAX_BLOCK
MAX_BLOCK_VOXELS = SV_DS_MAX_BLOCK_VOXELS


def output_shape(shape, factor, phase, int mip):
    """Extents (x, y, z, c) of mip ``mip`` of a 4-D input of extents ``shape``."""
    cdef int64_t s[4]
    cdef int64_t f[3]
    cdef int64_t p[3]
    cdef int64_t o[4]
    for d in range(4):
        s[d] = shape[d]
    for d in range(3):
        f[d] = factor[d]
        p[d] = phase[d]
    if sv_downsample_shape(s, f, p, mip, o) != SV_OK:
        raise InvalidArgumentError(
            f"cannot downsample shape {tuple(shape)} by {tuple(factor)} to mip {mip}")
    return (o[0], o[1], o[2], o[3])


cdef void _layout(cnp.ndarray a, int64_t *shape, int64_t *strides):
    cdef Py_ssize_t item = a.itemsize
    for d in range(4):
        shape[d] = a.shape[d]
        strides[d] = a.strides[d] // item


def pyramid(cnp.ndarray arr, factor, phase, str method, list outs):
    """Fill ``outs[k-1]`` with mip k of the 4-D ``arr`` (see csrc/downsample.h).

    Element strides must be whole; ``outs`` must have the shapes of
    :func:`output_shape`, ``arr``'s dtype and be writeable.
    """
    cdef int64_t in_shape[4]
    cdef int64_t in_strides[4]
    cdef int64_t f[3]
    cdef int64_t p[3]
    cdef int n = len(outs)
    cdef int k
    cdef int rc
    cdef int m = METHOD_CODES[method]
    cdef int dt = DTYPE_CODES[arr.dtype]
    cdef const void *src = cnp.PyArray_DATA(arr)
    cdef cnp.ndarray o
    if arr.ndim != 4 or any(a.ndim != 4 or a.dtype != arr.dtype or not a.flags.writeable
                            for a in outs):
        raise InvalidArgumentError("pyramid needs 4-D arrays of one dtype, writeable outputs")
    if any(s % arr.itemsize for a in [arr, *outs] for s in a.strides):
        raise InvalidArgumentError("array strides must be whole multiples of the item size")
    _layout(arr, in_shape, in_strides)
    for d in range(3):
        f[d] = factor[d]
        p[d] = phase[d]
    cdef void **ptrs = <void **>PyMem_Malloc(n * sizeof(void *))
    cdef int64_t *shapes = <int64_t *>PyMem_Malloc(4 * n * sizeof(int64_t))
    cdef int64_t *strides = <int64_t *>PyMem_Malloc(4 * n * sizeof(int64_t))
    try:
        if ptrs == NULL or shapes == NULL or strides == NULL:
            raise MemoryError("downsample output table")
        for k in range(n):
            o = outs[k]
            ptrs[k] = cnp.PyArray_DATA(o)
            _layout(o, shapes + 4 * k, strides + 4 * k)
        with nogil:
            rc = sv_downsample_pyramid(m, dt, src, in_shape, in_strides, f, p, n, ptrs,
                                       shapes, strides)
    finally:
        PyMem_Free(ptrs)
        PyMem_Free(shapes)
        PyMem_Free(strides)
    if rc == SV_ERR_NOMEM:
        raise MemoryError(f"downsample scratch for factor {tuple(factor)}, {n} mips")
    if rc == SV_ERR_OVERFLOW:
        raise InvalidArgumentError(
            f"factor {tuple(factor)} over {n} mips pools more than {MAX_BLOCK_VOXELS} "
            "voxels into one")
    if rc != SV_OK:
        raise InvalidArgumentError(
            f"invalid downsample of shape {(<object>arr).shape} by factor {tuple(factor)}, "
            f"phase {tuple(phase)}, {n} mips into {[(<object>a).shape for a in outs]}")
