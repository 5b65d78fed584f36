"""File system calls made in a batch with the GIL released once (each call that releases
and takes back the GIL is a hand-off between the threads that write files at once)."""
import os

from libc.errno cimport ENOENT, ENOTDIR, errno
from libc.stdlib cimport free, malloc
from posix.unistd cimport unlink


def unlink_absent_ok(list paths):
    """Remove each file of ``paths`` (str) that exists; raises OSError (naming the file)
    on any failure other than its absence."""
    cdef Py_ssize_t n = len(paths), i
    encoded = [os.fsencode(p) for p in paths]
    cdef const char **cpaths = <const char **>malloc(max(n, 1) * sizeof(char *))
    if cpaths == NULL:
        raise MemoryError()
    cdef int failed = 0
    try:
        for i in range(n):
            cpaths[i] = encoded[i]
        with nogil:
            for i in range(n):
                if unlink(cpaths[i]) != 0 and errno != ENOENT and errno != ENOTDIR:
                    failed = errno
                    break
    finally:
        free(cpaths)
    if failed:
        raise OSError(failed, os.strerror(failed), paths[i])
