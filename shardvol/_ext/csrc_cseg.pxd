# Declarations of csrc/cseg.h (compressed_segmentation), callable without the GIL.
from libc.stddef cimport ptrdiff_t
from libc.stdint cimport uint8_t, uint64_t

cdef extern from "cseg.h" nogil:
    enum:
        SV_CSEG_NO_ERROR
        SV_CSEG_LENGTH_NOT_WORDS
        SV_CSEG_CHANNEL_HEADER
        SV_CSEG_CHANNEL_OFFSET
        SV_CSEG_BLOCK_HEADERS
        SV_CSEG_BITS
        SV_CSEG_VALUES_OFFSET
        SV_CSEG_TABLE_OFFSET
        SV_CSEG_TABLE_INDEX
        SV_CSEG_TABLE_OFFSET_24
        SV_CSEG_VALUES_OFFSET_32
        SV_CSEG_BAD_ARGUMENT

    ctypedef struct sv_cseg_error:
        int reason
        size_t channel
        size_t block[3]
        uint64_t value
        uint64_t limit

    int sv_cseg_decode(const uint8_t *data, size_t len, size_t label_bytes, const size_t shape[4],
                       const size_t block_shape[3], void *out, const ptrdiff_t out_strides[4],
                       sv_cseg_error *err)
    int sv_cseg_decode_region(const uint8_t *data, size_t len, size_t label_bytes,
                              const size_t shape[4], const size_t block_shape[3],
                              const size_t origin[4], const size_t region[4], void *out,
                              const ptrdiff_t out_strides[4], void *scratch,
                              size_t scratch_len, sv_cseg_error *err)
    int sv_cseg_encode(const void *input, size_t label_bytes, const size_t shape[4],
                       const ptrdiff_t in_strides[4], const size_t block_shape[3], uint8_t **out,
                       size_t *out_len, sv_cseg_error *err)
    void sv_cseg_free(void *p)
