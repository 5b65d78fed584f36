"""Boxes of raw chunk files read straight into an output array (GIL released).

Thin wrapper of csrc/rawfile.h.
"""
import os

import numpy as np
cimport numpy as cnp
from libc.stdint cimport int64_t, uint8_t
from libc.stdlib cimport free, malloc

from shardvol._ext.csrc cimport SV_OK, SV_ERR_IO
from shardvol._ext.csrc_rawfile cimport SV_RAW_MISSING, SV_RAW_OTHER, sv_raw_read_box, sv_raw_span
from shardvol.errors import InvalidArgumentError, StoreError

cnp.import_array()

#: read_boxes statuses besides 0 (read)
MISSING = SV_RAW_MISSING
OTHER = SV_RAW_OTHER
#: Boxes spanning more bytes of their chunk file are left to the caller (OTHER).
MAX_SPAN = 1 << 30


def read_boxes(list paths, const int64_t[:, ::1] boxes, out):
    """Read the box of each raw chunk file ``paths[i]`` (str) into ``out``.

    ``boxes[i]`` (16 int64): the chunk's extents (x, y, z, c), the box's origin
    in the chunk, its extents, and its origin in ``out`` (a writable 4-D array
    whose dtype is the chunk's, little-endian).  Returns an int8 array: 0 where
    the box was read, MISSING where the file does not exist, OTHER where it is
    not plain raw voxels of that shape or the box spans more than MAX_SPAN bytes of
    it (out untouched).  Raises StoreError
    naming the file on an I/O error.
    """
    cdef Py_ssize_t n = len(paths), i, d
    if boxes.shape[0] != n or boxes.shape[1] != 16:
        raise InvalidArgumentError(f"boxes must have shape ({n}, 16), got {tuple(boxes.shape)[:2]}")
    if not isinstance(out, np.ndarray) or out.ndim != 4 or not out.flags.writeable:
        raise InvalidArgumentError("out must be a writable 4-D array")
    cdef int64_t itemsize = out.dtype.itemsize
    cdef int64_t strides[4]
    cdef int64_t extent[4]
    for d in range(4):
        strides[d] = out.strides[d]
        extent[d] = out.shape[d]
        if strides[d] < 0:
            raise InvalidArgumentError("out must not have negative strides")
    encoded = [os.fsencode(p) for p in paths]
    cdef int64_t span = 0, box_span
    status = np.zeros(n, dtype=np.int8)
    cdef signed char[::1] st = status
    for i in range(n):
        for d in range(4):
            if boxes[i, 12 + d] < 0 or boxes[i, 8 + d] < 0 or boxes[i, 12 + d] > extent[d] - boxes[i, 8 + d]:
                raise InvalidArgumentError(f"box {i} lies outside out (shape {out.shape})")
            if boxes[i, 4 + d] < 0 or boxes[i, 8 + d] > boxes[i, d] - boxes[i, 4 + d]:
                raise InvalidArgumentError(f"box {i} does not fit the chunk of {paths[i]}")
        box_span = sv_raw_span(itemsize, &boxes[i, 0], &boxes[i, 4], &boxes[i, 8])
        if box_span < 0 or box_span > MAX_SPAN:
            st[i] = OTHER  # (a chunk shape no file of this size has, say): read another way
        else:
            span = max(span, box_span)
    cdef const char **cpaths = <const char **>malloc(max(n, 1) * sizeof(char *))
    cdef uint8_t *scratch = <uint8_t *>malloc(max(span, 1))
    cdef uint8_t *base = <uint8_t *>cnp.PyArray_DATA(<cnp.ndarray>out)
    cdef uint8_t *dst
    cdef int rc = SV_OK, err_no = 0
    if cpaths == NULL or scratch == NULL:
        free(cpaths)
        free(scratch)
        raise MemoryError()
    try:
        for i in range(n):
            cpaths[i] = encoded[i]
        with nogil:
            for i in range(n):
                if st[i] == SV_RAW_OTHER:
                    continue
                dst = base
                for d in range(4):
                    dst += boxes[i, 12 + d] * strides[d]
                rc = sv_raw_read_box(cpaths[i], itemsize, &boxes[i, 0], &boxes[i, 4],
                                     &boxes[i, 8], dst, strides, scratch, span, &err_no)
                if rc < 0:
                    break
                st[i] = rc
    finally:
        free(cpaths)
        free(scratch)
    if rc == SV_ERR_IO:
        raise StoreError(f"cannot read {paths[i]}: {os.strerror(err_no)}")
    if rc < 0:
        raise InvalidArgumentError(f"box {i} does not fit the chunk of {paths[i]}")
    return status
