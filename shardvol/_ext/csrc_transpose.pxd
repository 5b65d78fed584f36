# Declarations of csrc/transpose.h.
from libc.stddef cimport ptrdiff_t
from libc.stdint cimport uint8_t

cdef extern from "transpose.h" nogil:
    int sv_copy_transposed(const uint8_t *src, const ptrdiff_t src_strides[4], uint8_t *dst,
                           const ptrdiff_t dst_strides[4], const size_t count[4],
                           size_t itemsize)
