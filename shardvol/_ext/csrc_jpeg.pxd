# Declarations of csrc/jpeg.h (JPEG chunk decoding and encoding with libjpeg), callable without the GIL.
from libc.stddef cimport ptrdiff_t
from libc.stdint cimport uint8_t, uint32_t

cdef extern from "jpeg.h" nogil:
    enum:
        SV_JPEG_NO_ERROR
        SV_JPEG_LIBJPEG
        SV_JPEG_SIZE
        SV_JPEG_COMPONENTS
        SV_JPEG_PRECISION
        SV_JPEG_BAD_ARGUMENT

    ctypedef struct sv_jpeg_error:
        int reason
        uint32_t width
        uint32_t height
        int value
        char message[200]

    int sv_jpeg_decode_region(const uint8_t *data, size_t len, const size_t shape[4],
                              const size_t origin[4], const size_t region[4], uint8_t *out,
                              const ptrdiff_t out_strides[4], uint8_t *scratch,
                              size_t scratch_len, sv_jpeg_error *err)

    int sv_jpeg_encode(const uint8_t *input, const size_t shape[4], const ptrdiff_t strides[4],
                       int quality, uint8_t **buf, size_t *len, sv_jpeg_error *err)
