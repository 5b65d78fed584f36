"""Decoding of raw minishard indexes (csrc/minishard.c), several at once."""
import numpy as np
cimport numpy as cnp
from libc.stdint cimport uint8_t, uint64_t

from shardvol._ext.csrc cimport (
    SV_OK, SV_ERR_ARGUMENT, SV_ERR_CORRUPT, SV_ERR_OVERFLOW, sv_minishard_index_decode,
)
from shardvol.errors import ShardFormatError

cnp.import_array()

# Indexes with at least this many entries are decoded with the GIL released.
cdef size_t _NOGIL_ENTRIES = 4096


def decode_minishard_indexes(bufs, uint64_t base, describe):
    """``(table, ends)``: the raw indexes ``bufs`` decoded into one (3, total) uint64 array
    of keys, data starts (from ``base``) and sizes, index i taking columns
    ``ends[i-1]:ends[i]``.  ShardFormatError names the index by ``describe(i)``."""
    cdef list lengths = [len(b) for b in bufs]
    cdef size_t total = 0, n, err = 0, col = 0
    cdef Py_ssize_t i
    for i, length in enumerate(lengths):
        if length % 24:
            raise ShardFormatError(
                f"{describe(i)}: minishard index length {length} is not a multiple of 24")
        total += length // 24
    cdef cnp.ndarray table = np.empty((3, total), dtype=np.uint64)
    cdef uint64_t *ids = <uint64_t *>cnp.PyArray_DATA(table)
    cdef const uint8_t[::1] view
    cdef int rc
    ends = []
    for i, buf in enumerate(bufs):
        n = lengths[i] // 24
        if n:
            view = buf
            if n >= _NOGIL_ENTRIES:
                with nogil:
                    rc = sv_minishard_index_decode(&view[0], 24 * n, base, ids + col,
                                                   ids + total + col, ids + 2 * total + col, n,
                                                   &err)
            else:
                rc = sv_minishard_index_decode(&view[0], 24 * n, base, ids + col,
                                               ids + total + col, ids + 2 * total + col, n, &err)
            if rc != SV_OK:
                _raise(rc, describe(i), err, table[0, col + err - 1] if err else 0)
        col += n
        ends.append(col)
    return table, ends


cdef _raise(int rc, str where, size_t entry, uint64_t previous_key):
    if rc == SV_ERR_CORRUPT:
        message = f"duplicate key {previous_key} (entry {entry})"
    elif rc == SV_ERR_OVERFLOW:
        message = f"key deltas overflow uint64 at entry {entry}"
    elif rc == SV_ERR_ARGUMENT:
        message = "bad minishard index length"
    else:
        message = f"data offset/size sums overflow uint64 at entry {entry}"
    raise ShardFormatError(f"{where}: {message}")
