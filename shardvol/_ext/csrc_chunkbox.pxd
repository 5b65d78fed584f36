# Declarations of csrc/chunkbox.h.
from libc.stdint cimport int64_t, uint8_t

cdef extern from "chunkbox.h" nogil:
    int SV_BOX_OTHER
    int SV_BOX_ZSTD
    int SV_BOX_GZIP
    int SV_BOX_NONE
    int SV_BOX_JPEG
    int SV_BOX_GZIP_JPEG
    ctypedef struct sv_box_reader:
        pass
    sv_box_reader *sv_box_reader_new()
    void sv_box_reader_free(sv_box_reader *reader)
    void sv_box_reader_trim(sv_box_reader *reader, size_t keep)
    int sv_box_read(sv_box_reader *reader, int codec, int fd, int64_t offset, int64_t length,
                    int64_t itemsize, const int64_t shape[4], const int64_t origin[4],
                    const int64_t count[4], uint8_t *out, const int64_t out_strides[4],
                    int *err_no)
