"""compresso encoding and decoding (C kernels in csrc/compresso.c, GIL released)."""
import numpy as np
cimport numpy as cnp
from libc.stddef cimport ptrdiff_t
from libc.stdint cimport uint8_t

from shardvol._ext.csrc cimport SV_OK, SV_ERR_NOMEM, SV_ERR_ARGUMENT
from shardvol._ext.csrc_compresso cimport *
from shardvol._ext.staging import staging_buffer
from shardvol.errors import ChunkDecodeError, InvalidArgumentError

cnp.import_array()

_LABEL_DTYPES = tuple(np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64))


def _message(sv_cpso_error err, size_t nbytes):
    r = err.reason
    at = f"voxel ({err.voxel[0]}, {err.voxel[1]}, {err.voxel[2]})"
    if r == SV_CPSO_SHORT:
        return f"{nbytes} bytes, shorter than the 36-byte header"
    if r == SV_CPSO_MAGIC:
        return "not compresso data (no 'cpso' magic)"
    if r == SV_CPSO_VERSION:
        return f"format version {err.value} (0 and 1 are known)"
    if r == SV_CPSO_WIDTH:
        return f"the stream holds {err.value}-byte labels, the volume {err.limit}-byte ones"
    if r == SV_CPSO_SHAPE:
        return f"the stream's size along {'xyz'[err.value]} is {err.limit}, not the chunk's"
    if r == SV_CPSO_STEPS:
        return f"window steps of {err.value} voxels (1 to 64 are valid)"
    if r == SV_CPSO_CONNECTIVITY:
        return f"connectivity {err.value} (4 or 6 are valid)"
    if r == SV_CPSO_SECTIONS:
        return f"its sections need {err.value} bytes, it has {err.limit} (truncated?)"
    if r == SV_CPSO_WINDOW_BYTES:
        return f"the windows section of {err.value} bytes is not whole {err.limit}-byte windows"
    if r == SV_CPSO_Z_INDEX:
        return f"the z index starts at location {err.value}, not 0"
    if r == SV_CPSO_WINDOW_RUN:
        return f"the windows run past the last of the {err.limit} blocks"
    if r == SV_CPSO_WINDOW_VALUE:
        return f"window index {err.value} is past the {err.limit} window values"
    if r == SV_CPSO_COMPONENTS:
        return f"the boundaries leave {err.value} components, the stream has {err.limit} ids"
    if r == SV_CPSO_LOCATIONS_SHORT:
        return f"the {err.limit} locations end before the boundary {at}"
    if r == SV_CPSO_LOCATION_NEIGHBOUR:
        return f"location {err.value} of the boundary {at} points outside the chunk"
    if r == SV_CPSO_LOCATIONS_LEFT:
        return f"{err.limit - err.value} of its {err.limit} locations are left over"
    return f"corrupt data (reason {r})"


cdef int _geometry(cnp.ndarray a, size_t *shape, ptrdiff_t *strides) except -1:
    """``a``'s shape and its strides in items (InvalidArgumentError if not whole items)."""
    cdef Py_ssize_t itemsize = a.itemsize
    for d in range(3):
        shape[d] = a.shape[d]
        if a.strides[d] % itemsize:
            raise InvalidArgumentError("array strides must be multiples of the item size")
        strides[d] = a.strides[d] // itemsize
    return 0


def decode(data, cnp.ndarray out not None, str context=""):
    """Decode the compresso stream ``data`` into ``out``, a 3-D (x, y, z) uint8-64 array of
    the chunk's shape and any strides (written in place).  Raises ChunkDecodeError naming
    ``context`` if the data is corrupt, truncated or of another shape or label width."""
    if out.ndim != 3 or out.dtype not in _LABEL_DTYPES:
        raise InvalidArgumentError("compresso decodes into 3-D native uint8-64 arrays")
    if not out.flags.writeable:
        raise InvalidArgumentError("decode output array is read-only")
    cdef size_t shape[3]
    cdef ptrdiff_t strides[3]
    _geometry(out, shape, strides)
    cdef size_t scratch_len = sv_cpso_scratch_bytes(shape)
    if scratch_len == 0:
        raise InvalidArgumentError(
            f"a compresso chunk has at most 65535 voxels per axis and 2**31 in all, "
            f"not {(<object>out).shape}")
    cdef cnp.ndarray scratch = staging_buffer(scratch_len)
    cdef void *pscratch = cnp.PyArray_DATA(scratch)
    cdef const uint8_t[::1] buf = np.frombuffer(data, dtype=np.uint8)
    cdef uint8_t empty = 0
    cdef const uint8_t *pdata = &buf[0] if buf.shape[0] else &empty
    cdef size_t nbytes = buf.shape[0]
    cdef void *pout = cnp.PyArray_DATA(out)
    cdef size_t label_bytes = out.itemsize
    cdef sv_cpso_error err
    cdef int rc
    with nogil:
        rc = sv_cpso_decode(pdata, nbytes, label_bytes, shape, pout, strides, pscratch,
                            scratch_len, &err)
    if rc == SV_OK:
        return
    if rc == SV_ERR_NOMEM:
        raise MemoryError("compresso decoder")
    if rc == SV_ERR_ARGUMENT:
        raise InvalidArgumentError("compresso decode: invalid arguments")
    raise ChunkDecodeError(f"{context or 'chunk'}: corrupt compresso chunk: {_message(err, nbytes)}")


def encode(cnp.ndarray array not None):
    """The compresso stream of a 3-D (x, y, z) uint8-64 array of any strides, byte for byte
    what the compresso package's compress() writes with its defaults."""
    if array.ndim != 3 or array.dtype not in _LABEL_DTYPES:
        raise InvalidArgumentError("compresso encodes 3-D native uint8-64 arrays")
    cdef size_t shape[3]
    cdef ptrdiff_t strides[3]
    _geometry(array, shape, strides)
    cdef const void *pin = cnp.PyArray_DATA(array)
    cdef size_t label_bytes = array.itemsize
    cdef uint8_t *pout = NULL
    cdef size_t nout = 0
    cdef int rc
    with nogil:
        rc = sv_cpso_encode(pin, label_bytes, shape, strides, &pout, &nout)
    if rc == SV_OK:
        try:
            return pout[:nout]
        finally:
            sv_cpso_free(pout)
    if rc == SV_ERR_NOMEM:
        raise MemoryError("compresso encoder")
    raise InvalidArgumentError(
        f"a compresso chunk has at most 65535 voxels per axis and 2**31 in all, "
        f"not {(<object>array).shape}")
