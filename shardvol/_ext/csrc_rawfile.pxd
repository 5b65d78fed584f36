# Declarations of csrc/rawfile.h.
from libc.stdint cimport int64_t, uint8_t

cdef extern from "rawfile.h" nogil:
    int SV_RAW_MISSING
    int SV_RAW_OTHER
    int64_t sv_raw_span(int64_t itemsize, const int64_t shape[4], const int64_t origin[4],
                        const int64_t count[4])
    int sv_raw_read_box(const char *path, int64_t itemsize, const int64_t shape[4],
                        const int64_t origin[4], const int64_t count[4], uint8_t *out,
                        const int64_t out_strides[4], uint8_t *scratch, int64_t scratch_len,
                        int *err_no)
