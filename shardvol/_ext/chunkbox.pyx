"""Boxes of chunks (zstd, gzip or as they are; Neuroglancer jpeg, gzipped or not) in open
files decoded straight into an output array (GIL released).

Thin wrapper of csrc/chunkbox.h.
"""
import os
import threading

import numpy as np
cimport numpy as cnp
from libc.stdint cimport int64_t, uint8_t

from shardvol._ext.csrc cimport SV_OK, SV_ERR_IO
from shardvol._ext.csrc_chunkbox cimport (
    SV_BOX_GZIP, SV_BOX_GZIP_JPEG, SV_BOX_JPEG, SV_BOX_NONE, SV_BOX_OTHER, SV_BOX_ZSTD, sv_box_read,
    sv_box_reader, sv_box_reader_free, sv_box_reader_new, sv_box_reader_trim,
)
from shardvol.errors import InvalidArgumentError, StoreError

cnp.import_array()

#: read_boxes status besides 0 (read)
OTHER = SV_BOX_OTHER
#: A thread's reader keeps buffers of at most this many bytes from one read to the next.
cdef size_t _KEEP_BYTES = 16 << 20
KEEP_BYTES = _KEEP_BYTES
#: the codecs read_boxes decodes, by their Zarr names ("raw": the items as they are), and
#: Neuroglancer's jpeg, as it is or gzipped (a sharded scale's gzip data encoding)
CODECS = {"zstd": SV_BOX_ZSTD, "gzip": SV_BOX_GZIP, "raw": SV_BOX_NONE, "jpeg": SV_BOX_JPEG,
          "gzip jpeg": SV_BOX_GZIP_JPEG}


cdef class Reader:
    """Decompressors and their buffers: one per thread (not thread-safe)."""
    cdef sv_box_reader *r

    def __cinit__(self):
        self.r = sv_box_reader_new()
        if self.r == NULL:
            raise MemoryError()

    def __dealloc__(self):
        sv_box_reader_free(self.r)


_local = threading.local()


def thread_reader():
    """This thread's Reader (its buffers kept from one read to the next, up to KEEP_BYTES
    each)."""
    reader = getattr(_local, "reader", None)
    if reader is None:
        reader = _local.reader = Reader()
    return reader


def read_boxes(Reader reader not None, str codec, const int64_t[:, ::1] spans,
               const int64_t[:, ::1] boxes, out, list names):
    """Decode the box of chunk ``i`` into ``out`` for every row ``i``.

    ``codec``: a key of CODECS; ``spans[i]``: (an open file descriptor, offset, length)
    of the chunk's encoded bytes; ``boxes[i]``: the chunk's extents (C order: its last
    axis fastest), the box's origin in the chunk, its extents and its origin in ``out``
    (a writable array of 1-4 axes, of the chunks' dtype in the host's byte order), one
    entry per axis of ``out`` each; ``names[i]`` names the chunk's file in errors.
    Returns an int8 array: 0 where the box was read, OTHER where the span is not decoded
    here (``out``'s box is then the caller's to fill).  Raises StoreError naming the file
    on an I/O error.
    """
    cdef Py_ssize_t n = spans.shape[0], i, d, nd
    if codec not in CODECS:
        raise InvalidArgumentError(f"codec must be one of {sorted(CODECS)}, got {codec!r}")
    cdef int ccodec = CODECS[codec]
    if not isinstance(out, np.ndarray) or not out.flags.writeable:
        raise InvalidArgumentError("out must be a writable array")
    nd = out.ndim
    if nd < 1 or nd > 4:
        raise InvalidArgumentError(f"out must have 1-4 axes, not {nd}")
    if spans.shape[1] != 3 or boxes.shape[0] != n or boxes.shape[1] != 4 * nd or len(names) != n:
        raise InvalidArgumentError(f"spans must be ({n}, 3), boxes ({n}, {4 * nd}), names {n}")
    cdef int64_t itemsize = out.dtype.itemsize
    cdef int64_t shape[4]
    cdef int64_t strides[4]
    cdef int64_t extent[4]
    cdef int64_t origin[4]
    cdef int64_t count[4]
    cdef Py_ssize_t pad = 4 - nd
    for d in range(4):
        strides[d] = 0 if d < pad else out.strides[d - pad]
        extent[d] = 1 if d < pad else out.shape[d - pad]
    for i in range(n):
        for d in range(nd):
            if (boxes[i, 2 * nd + d] < 1 or boxes[i, 3 * nd + d] < 0
                    or boxes[i, 2 * nd + d] > extent[pad + d] - boxes[i, 3 * nd + d]):
                raise InvalidArgumentError(f"box {i} lies outside out (shape {out.shape})")
            if boxes[i, nd + d] < 0 or boxes[i, 2 * nd + d] > boxes[i, d] - boxes[i, nd + d]:
                raise InvalidArgumentError(f"box {i} does not fit its chunk")
    status = np.zeros(n, dtype=np.int8)
    cdef signed char[::1] st = status
    cdef uint8_t *base = <uint8_t *>cnp.PyArray_DATA(<cnp.ndarray>out)
    cdef uint8_t *dst
    cdef int rc = SV_OK, err_no = 0
    with nogil:
        for i in range(n):
            dst = base
            for d in range(4):
                shape[d] = 1 if d < pad else boxes[i, d - pad]
                origin[d] = 0 if d < pad else boxes[i, nd + d - pad]
                count[d] = 1 if d < pad else boxes[i, 2 * nd + d - pad]
                if d >= pad:
                    dst += boxes[i, 3 * nd + d - pad] * strides[d]
            rc = sv_box_read(reader.r, ccodec, <int>spans[i, 0], spans[i, 1], spans[i, 2],
                             itemsize, shape, origin, count, dst, strides, &err_no)
            if rc < 0:
                break
            st[i] = rc
        sv_box_reader_trim(reader.r, _KEEP_BYTES)
    if rc == SV_ERR_IO:
        raise StoreError(f"cannot read {names[i]}: {os.strerror(err_no)}")
    if rc < 0:
        raise InvalidArgumentError(f"box {i} does not fit its chunk (itemsize {itemsize})")
    return status
