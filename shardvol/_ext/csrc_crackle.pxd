# Declarations of csrc/crackle_check.h (the crackle crack-code check), callable without the GIL.
from libc.stdint cimport uint8_t, uint64_t

cdef extern from "crackle_check.h" nogil:
    enum:
        SV_CRKL_NO_ERROR
        SV_CRKL_INDEX
        SV_CRKL_WALK
        SV_CRKL_CRC

    ctypedef struct sv_crkl_error:
        int reason
        size_t z
        uint64_t value
        uint64_t limit

    int sv_crkl_check(const uint8_t *codes, const uint8_t *sizes, const uint8_t *crcs,
                      size_t sx, size_t sy, size_t sz, int permissible, sv_crkl_error *err)
