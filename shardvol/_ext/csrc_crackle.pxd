# Declarations of csrc/crackle_check.h (the crackle crack-code check), callable without the GIL.
from libc.stddef cimport ptrdiff_t
from libc.stdint cimport uint8_t, uint64_t

cdef extern from "crackle_check.h" nogil:
    enum:
        SV_CRKL_NO_ERROR
        SV_CRKL_INDEX
        SV_CRKL_WALK
        SV_CRKL_CRC
        SV_CRKL_LABELS
        SV_CRKL_LABEL_INDEX
        SV_CRKL_COMPONENTS

    ctypedef struct sv_crkl_error:
        int reason
        size_t z
        uint64_t value
        uint64_t limit

    ctypedef struct sv_crkl_flat:
        const uint8_t *labels
        size_t labels_len
        size_t stored_bytes
        size_t label_bytes
        void *out
        ptrdiff_t strides[3]

    int sv_crkl_check(const uint8_t *codes, const uint8_t *sizes, const uint8_t *crcs,
                      size_t sx, size_t sy, size_t sz, int permissible,
                      const sv_crkl_flat *flat, sv_crkl_error *err)
