# Declarations of csrc/compresso.h (the compresso decoder), callable without the GIL.
from libc.stddef cimport ptrdiff_t
from libc.stdint cimport uint8_t, uint64_t

cdef extern from "compresso.h" nogil:
    enum:
        SV_CPSO_NO_ERROR
        SV_CPSO_SHORT
        SV_CPSO_MAGIC
        SV_CPSO_VERSION
        SV_CPSO_WIDTH
        SV_CPSO_SHAPE
        SV_CPSO_STEPS
        SV_CPSO_CONNECTIVITY
        SV_CPSO_SECTIONS
        SV_CPSO_WINDOW_BYTES
        SV_CPSO_Z_INDEX
        SV_CPSO_WINDOW_RUN
        SV_CPSO_WINDOW_VALUE
        SV_CPSO_COMPONENTS
        SV_CPSO_LOCATIONS_SHORT
        SV_CPSO_LOCATION_NEIGHBOUR
        SV_CPSO_LOCATIONS_LEFT

    ctypedef struct sv_cpso_error:
        int reason
        uint64_t value
        uint64_t limit
        size_t voxel[3]

    size_t sv_cpso_scratch_bytes(const size_t shape[3])
    int sv_cpso_encode(const void *input, size_t label_bytes, const size_t shape[3],
                       const ptrdiff_t in_strides[3], uint8_t **out, size_t *out_len)
    void sv_cpso_free(void *p)
    int sv_cpso_decode(const uint8_t *data, size_t len, size_t label_bytes, const size_t shape[3],
                       void *out, const ptrdiff_t out_strides[3], void *scratch,
                       size_t scratch_len, sv_cpso_error *err)
