"""Compressed Morton codes of grid coordinates (batch, GIL released)."""
import operator

import numpy as np
cimport numpy as cnp
from libc.stdint cimport uint64_t

from shardvol._ext.csrc cimport (
    SV_OK, SV_ERR_ARGUMENT, SV_ERR_OVERFLOW, SV_ERR_RANGE, SV_ERR_NOMEM,
    sv_morton_bits, sv_morton_encode, sv_morton_decode,
)
from shardvol.errors import InvalidArgumentError, MortonOverflowError

cnp.import_array()


cdef _grid(grid_size, uint64_t out[3]):
    try:
        gs = [operator.index(v) for v in grid_size]
    except TypeError:
        gs = None
    if gs is None or len(gs) != 3:
        raise InvalidArgumentError(f"grid_size must be 3 integers, got {grid_size!r}")
    if not all(0 < v < 2**64 for v in gs):
        raise InvalidArgumentError(f"grid_size must be positive uint64 values, got {gs}")
    for d in range(3):
        out[d] = gs[d]


cdef _raise(int rc, grid_size, what=None):
    if rc == SV_ERR_OVERFLOW:
        raise MortonOverflowError(
            f"grid_size {list(grid_size)} needs {morton_bits(grid_size)[1]} bits of "
            "compressed Morton code; at most 64 fit in a uint64")
    if rc == SV_ERR_RANGE:
        raise InvalidArgumentError(f"{what} is outside the grid of size {list(grid_size)}")
    if rc == SV_ERR_NOMEM:
        raise MemoryError("compressed Morton code tables")
    raise InvalidArgumentError(f"invalid grid_size {list(grid_size)}")


def morton_bits(grid_size):
    """Bits kept per dimension and their total for a grid of ``grid_size`` cells."""
    cdef uint64_t gs[3]
    cdef int bits[3]
    cdef int total = 0
    _grid(grid_size, gs)
    rc = sv_morton_bits(gs, bits, &total)
    if rc == SV_ERR_ARGUMENT:
        _raise(rc, grid_size)
    return (bits[0], bits[1], bits[2]), total


def compressed_morton_code(grid_coords, grid_size):
    """Compressed Morton codes of ``grid_coords`` (N, 3) in a grid of ``grid_size``.

    Returns a uint64 array of N codes (a 0-d array for a single (3,) coordinate).
    Raises MortonOverflowError if the grid needs more than 64 bits and
    InvalidArgumentError if a coordinate lies outside the grid.
    """
    cdef uint64_t gs[3]
    _grid(grid_size, gs)
    coords = np.asarray(grid_coords)
    scalar = coords.ndim == 1
    if scalar:
        coords = coords[np.newaxis]
    if coords.ndim != 2 or coords.shape[1] != 3:
        raise InvalidArgumentError(f"grid_coords must have shape (N, 3), got {coords.shape}")
    if coords.size and not np.issubdtype(coords.dtype, np.integer):
        raise InvalidArgumentError(f"grid_coords must be integers, got dtype {coords.dtype}")
    if coords.size and np.issubdtype(coords.dtype, np.signedinteger) and (coords < 0).any():
        raise InvalidArgumentError("grid_coords must be non-negative")
    cdef cnp.ndarray c_in = np.ascontiguousarray(coords, dtype=np.uint64)
    cdef size_t n = c_in.shape[0]
    cdef cnp.ndarray out = np.empty(n, dtype=np.uint64)
    cdef size_t err = 0
    cdef int rc
    cdef const uint64_t *pin = <const uint64_t *>cnp.PyArray_DATA(c_in)
    cdef uint64_t *pout = <uint64_t *>cnp.PyArray_DATA(out)
    with nogil:
        rc = sv_morton_encode(pin, n, gs, pout, &err)
    if rc != SV_OK:
        _raise(rc, grid_size, f"grid coordinate {list(c_in[err]) if n else ''}")
    return out[0] if scalar else out


def decode_morton_code(codes, grid_size):
    """Inverse of :func:`compressed_morton_code`: uint64 codes -> (N, 3) uint64 coordinates."""
    cdef uint64_t gs[3]
    _grid(grid_size, gs)
    arr = np.asarray(codes)
    scalar = arr.ndim == 0
    arr = arr.reshape(-1)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise InvalidArgumentError(f"codes must be integers, got dtype {arr.dtype}")
    cdef cnp.ndarray c_in = np.ascontiguousarray(arr, dtype=np.uint64)
    cdef size_t n = c_in.shape[0]
    cdef cnp.ndarray out = np.empty((n, 3), dtype=np.uint64)
    cdef size_t err = 0
    cdef int rc
    cdef const uint64_t *pin = <const uint64_t *>cnp.PyArray_DATA(c_in)
    cdef uint64_t *pout = <uint64_t *>cnp.PyArray_DATA(out)
    with nogil:
        rc = sv_morton_decode(pin, n, gs, pout, &err)
    if rc != SV_OK:
        _raise(rc, grid_size, f"Morton code {int(c_in[err]) if n else ''}")
    return out[0] if scalar else out
