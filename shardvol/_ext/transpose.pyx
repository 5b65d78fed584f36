"""Copies between arrays of different memory layouts, tile by tile (csrc/transpose.h)."""
cimport numpy as cnp
from libc.stddef cimport ptrdiff_t
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport uint8_t

import numpy as np

from shardvol._ext.csrc_transpose cimport sv_copy_transposed

cnp.import_array()


def copyto(cnp.ndarray dst not None, cnp.ndarray src not None, str casting="same_kind"):
    """``np.copyto(dst, src, casting=casting)``: for arrays of one shape and data type (of
    at most 4 dimensions, not of objects), tile by tile with the GIL released; others go
    to numpy."""
    if (dst.ndim != src.ndim or dst.ndim > 4 or dst.dtype != src.dtype or dst.dtype.hasobject
            or (<object>dst).shape != (<object>src).shape or not dst.flags.writeable):
        np.copyto(dst, src, casting=casting)
        return
    cdef size_t count[4]
    cdef ptrdiff_t ss[4]
    cdef ptrdiff_t ds[4]
    cdef int d
    for d in range(4):
        if d < dst.ndim:
            count[d] = dst.shape[d]
            ss[d] = src.strides[d]
            ds[d] = dst.strides[d]
        else:
            count[d] = 1
            ss[d] = 0
            ds[d] = 0
    cdef const uint8_t *psrc = <const uint8_t *>cnp.PyArray_DATA(src)
    cdef uint8_t *pdst = <uint8_t *>cnp.PyArray_DATA(dst)
    cdef size_t itemsize = dst.itemsize
    with nogil:
        sv_copy_transposed(psrc, ss, pdst, ds, count, itemsize)


def fortran_bytes(cnp.ndarray src not None):
    """``src.tobytes(order="F")``: for arrays of at most 4 dimensions (not of objects),
    copied with the GIL released, tile by tile or row by row (short rows prefetched: a
    chunk cut from a larger array, which numpy copies waiting for each row from memory in
    turn); others by numpy."""
    if src.ndim > 4 or src.dtype.hasobject:
        return src.tobytes(order="F")
    cdef size_t count[4]
    cdef ptrdiff_t ss[4]
    cdef ptrdiff_t ds[4]
    cdef size_t itemsize = src.itemsize
    cdef int d
    for d in range(4):
        count[d] = src.shape[d] if d < src.ndim else 1
        ss[d] = src.strides[d] if d < src.ndim else 0
        ds[d] = <ptrdiff_t>itemsize if d == 0 else ds[d - 1] * <ptrdiff_t>count[d - 1]
    out = PyBytes_FromStringAndSize(NULL, src.nbytes)  # filled here, before anyone sees it
    cdef uint8_t *pdst = <uint8_t *>PyBytes_AS_STRING(out)
    cdef const uint8_t *psrc = <const uint8_t *>cnp.PyArray_DATA(src)
    with nogil:
        sv_copy_transposed(psrc, ss, pdst, ds, count, itemsize)
    return out
