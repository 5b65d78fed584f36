"""File system calls made in a batch with the GIL released once (each call that releases
and takes back the GIL is a hand-off between the threads that write files at once)."""
import os

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.errno cimport ENOENT, ENOTDIR, errno
from libc.stdlib cimport calloc, free, malloc
from posix.uio cimport iovec
from posix.unistd cimport unlink

from shardvol._ext.csrc cimport SV_OK
from shardvol._ext.csrc_filewrite cimport *

_STEPS = {SV_WRITE_CREATE: "create", SV_WRITE_WRITE: "write", SV_WRITE_SYNC: "fsync",
          SV_WRITE_CLOSE: "close", SV_WRITE_RENAME: "rename"}


def _c_path(str path):
    """``path`` as the bytes a C call takes; ValueError for a NUL in it (as os.open)."""
    encoded = os.fsencode(path)
    if b"\0" in encoded:
        raise ValueError(f"embedded null byte in the path {path!r}")
    return encoded


def unlink_absent_ok(list paths):
    """Remove each file of ``paths`` (str) that exists; raises OSError (naming the file)
    on any failure other than its absence."""
    cdef Py_ssize_t n = len(paths), i
    encoded = [_c_path(p) for p in paths]
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


def write_file(str tmp, str path, list parts, bint fsync):
    """Write the contiguous buffers ``parts`` in order to a new file, fsync it if ``fsync``
    and name it ``path``: unnamed until then where Linux allows (``tmp`` is the name it
    passes through to replace an existing ``path``), else created as ``tmp`` (which must
    not exist) and renamed.  Raises OSError naming the step and the file (``tmp``, or
    ``path`` for the rename), no temporary file left then and ``path`` untouched;
    TypeError for a part that is not a contiguous buffer."""
    cdef Py_ssize_t n = len(parts), i, held = 0
    cdef bytes ctmp = _c_path(tmp), cpath = _c_path(path)
    cdef const char *ptmp = ctmp
    cdef const char *ppath = cpath
    cdef Py_buffer *bufs = <Py_buffer *>calloc(max(n, 1), sizeof(Py_buffer))
    cdef iovec *iov = <iovec *>malloc(max(n, 1) * sizeof(iovec))
    cdef int rc, step = 0, err = 0
    cdef bint sync = fsync
    try:
        if bufs == NULL or iov == NULL:
            raise MemoryError()
        for i in range(n):
            try:
                PyObject_GetBuffer(parts[i], &bufs[i], PyBUF_SIMPLE)  # C-contiguous bytes
            except (BufferError, ValueError) as e:
                raise TypeError(f"part {i} of {path!r} is not a contiguous buffer: {e}") from e
            held += 1
            iov[i].iov_base = bufs[i].buf
            iov[i].iov_len = <size_t>bufs[i].len
        with nogil:
            rc = sv_write_file(ptmp, ppath, iov, n, sync, &step, &err)
    finally:
        for i in range(held):
            PyBuffer_Release(&bufs[i])
        free(bufs)
        free(iov)
    if rc != SV_OK:
        if step == 0:
            raise ValueError(f"write_file: invalid buffers for {path!r}")
        raise OSError(err, f"{_STEPS[step]}: {os.strerror(err)}",
                      path if step == SV_WRITE_RENAME else tmp)
