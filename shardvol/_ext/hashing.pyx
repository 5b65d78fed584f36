"""murmurhash3_x86_128 of uint64 keys (batch, GIL released)."""
import numpy as np
cimport numpy as cnp
from libc.stdint cimport uint64_t

from shardvol._ext.csrc cimport sv_murmurhash3_x86_128_u64_batch
from shardvol.errors import InvalidArgumentError

cnp.import_array()


def murmurhash3_x86_128_u64(keys):
    """Low 64 bits of murmurhash3_x86_128 (seed 0) of each uint64 key's 8 LE bytes.

    Accepts a scalar or an array of non-negative integers; returns uint64 of the
    same shape.
    """
    arr = np.asarray(keys)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise InvalidArgumentError(f"keys must be integers, got dtype {arr.dtype}")
    if arr.size and np.issubdtype(arr.dtype, np.signedinteger) and (arr < 0).any():
        raise InvalidArgumentError("keys must be non-negative uint64 values")
    cdef cnp.ndarray c_in = np.ascontiguousarray(arr, dtype=np.uint64).reshape(-1)
    cdef size_t n = c_in.shape[0]
    cdef cnp.ndarray out = np.empty(n, dtype=np.uint64)
    cdef const uint64_t *pin = <const uint64_t *>cnp.PyArray_DATA(c_in)
    cdef uint64_t *pout = <uint64_t *>cnp.PyArray_DATA(out)
    with nogil:
        sv_murmurhash3_x86_128_u64_batch(pin, n, pout)
    return out.reshape(arr.shape)[()] if arr.ndim == 0 else out.reshape(arr.shape)
