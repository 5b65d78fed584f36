# Declarations of csrc/filewrite.h.
from libc.stdint cimport int64_t
from posix.uio cimport iovec

cdef extern from "filewrite.h" nogil:
    int SV_WRITE_CREATE
    int SV_WRITE_WRITE
    int SV_WRITE_SYNC
    int SV_WRITE_CLOSE
    int SV_WRITE_RENAME
    int sv_write_file(const char *tmp, const char *path, const iovec *parts, int64_t nparts,
                      int do_fsync, int *step, int *err_no)
