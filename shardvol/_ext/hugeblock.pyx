"""Output arrays in blocks of whole pages, large ones in aligned 2 MiB pages, freed ones
cached (csrc/hugeblock.h)."""
import math

import numpy as np
from cpython.buffer cimport PyBUF_FORMAT

from shardvol._ext.csrc_hugeblock cimport (
    sv_hugeblock_advised,
    sv_hugeblock_alloc,
    sv_hugeblock_free,
    sv_hugeblock_populate,
)
from shardvol._ext.csrc cimport SV_OK

#: Arrays of fewer bytes come from np.empty (malloc's heap, whose freed memory below its
#: trim threshold is reused without page faults).
MIN_BYTES = 256 << 10


cdef class _Block:
    """Owns one block; exports its first ``size`` bytes as a writable buffer."""

    cdef void *ptr
    cdef readonly size_t capacity
    cdef Py_ssize_t size[1]

    def __getbuffer__(self, Py_buffer *view, int flags):
        view.buf = self.ptr
        view.obj = self
        view.len = self.size[0]
        view.readonly = 0
        view.itemsize = 1
        view.format = NULL
        if flags & PyBUF_FORMAT:
            view.format = b"B"
        view.ndim = 1
        view.shape = self.size
        view.strides = NULL
        view.suboffsets = NULL
        view.internal = NULL

    def __releasebuffer__(self, Py_buffer *view):
        pass

    def __dealloc__(self):
        if self.ptr != NULL:
            with nogil:
                sv_hugeblock_free(self.ptr, self.capacity)


def advised(size_t nbytes):
    """Whether a block of ``nbytes`` would be advised for transparent huge pages now: when
    the kernel's free blocks of 2 MiB or more hold it twice over (``SHARDVOL_HUGEPAGES``
    =advise / =off: always / never)."""
    return bool(sv_hugeblock_advised(nbytes))


def empty(shape, dtype, order="C"):
    """Like ``np.empty(shape, dtype, order=order)``; arrays of ``MIN_BYTES`` or more live in
    a block (the array does not own its memory: its base keeps the block)."""
    dtype = np.dtype(dtype)
    cdef size_t nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < MIN_BYTES or dtype.hasobject:
        return np.empty(shape, dtype, order=order)
    return buffer(nbytes).view(dtype).reshape(shape, order=order)


def buffer(size_t nbytes):
    """A 1-D uint8 array of ``nbytes`` (> 0) in a block, whatever its size: for buffers
    filled and dropped again and again (reads), which then reuse a cached block whose
    pages are present instead of faulting in fresh memory each time."""
    if nbytes == 0:
        raise ValueError("a block buffer needs at least one byte")
    cdef _Block block = _Block.__new__(_Block)
    with nogil:
        block.ptr = sv_hugeblock_alloc(nbytes, &block.capacity)
    if block.ptr == NULL:
        raise MemoryError(f"cannot allocate {nbytes} bytes")
    block.size[0] = nbytes
    return np.frombuffer(block, np.uint8)


def footprint(array):
    """Bytes of memory ``array`` keeps: the capacity of the block it lives in (which may be
    up to twice its bytes), else its own bytes."""
    base = array
    while isinstance(base, (np.ndarray, memoryview)):
        base = base.base if isinstance(base, np.ndarray) else base.obj
    return base.capacity if isinstance(base, _Block) else array.nbytes


def populate(array, Py_ssize_t start, Py_ssize_t stop):
    """Fault in the pages of bytes [start, stop) of ``array``'s memory (contiguous, in a
    block: from :func:`empty` or :func:`buffer`) ahead of writing them, in one system call
    with the GIL released; its contents do not change.  False where the kernel cannot."""
    if not (array.flags.c_contiguous or array.flags.f_contiguous):
        raise ValueError("populate needs a contiguous array")
    if not 0 <= start <= stop <= array.nbytes:
        raise ValueError(f"bytes [{start}, {stop}) are not within the array's {array.nbytes}")
    cdef size_t base = array.__array_interface__["data"][0]
    cdef int rc
    with nogil:
        rc = sv_hugeblock_populate(<void *>(base + <size_t>start), <size_t>(stop - start))
    return rc == SV_OK
