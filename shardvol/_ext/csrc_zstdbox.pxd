# Declarations of csrc/zstdbox.h.
from libc.stdint cimport int64_t, uint8_t

cdef extern from "zstdbox.h" nogil:
    int SV_ZSTD_OTHER
    ctypedef struct sv_zstd_reader:
        pass
    sv_zstd_reader *sv_zstd_reader_new()
    void sv_zstd_reader_free(sv_zstd_reader *reader)
    int sv_zstd_read_box(sv_zstd_reader *reader, int fd, int64_t offset, int64_t length,
                         int64_t itemsize, const int64_t shape[4], const int64_t origin[4],
                         const int64_t count[4], uint8_t *out, const int64_t out_strides[4],
                         int *err_no)
