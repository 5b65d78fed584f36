"""compressed_segmentation encode/decode (C kernels in csrc/cseg.c, GIL released)."""
import numpy as np
cimport numpy as cnp
from libc.stddef cimport ptrdiff_t
from libc.stdint cimport uint8_t

from shardvol._ext.csrc cimport SV_OK, SV_ERR_NOMEM, SV_ERR_ARGUMENT
from shardvol._ext.csrc_cseg cimport *
from shardvol._ext.staging import staging_buffer
from shardvol.errors import ChunkDecodeError, ChunkEncodeError, InvalidArgumentError

cnp.import_array()

_LABEL_DTYPES = (np.dtype(np.uint32), np.dtype(np.uint64))


cdef int _geometry(array, block_size, size_t shape[4], size_t block[3],
                   ptrdiff_t strides[4]) except -1:
    """Shape, block shape and element strides of a 4-D uint32/uint64 array."""
    if not isinstance(array, np.ndarray) or array.ndim != 4:
        raise InvalidArgumentError("compressed_segmentation arrays must be 4-D (x, y, z, channel)")
    if array.dtype not in _LABEL_DTYPES:
        raise InvalidArgumentError(
            f"compressed_segmentation needs native uint32 or uint64, got {array.dtype}")
    bs = tuple(block_size)
    if len(bs) != 3 or not all(isinstance(b, (int, np.integer)) and 0 < b <= 2**32 for b in bs):
        raise InvalidArgumentError(f"invalid compressed_segmentation block size {bs!r}")
    if int(bs[0]) * int(bs[1]) * int(bs[2]) > 2**32:
        raise InvalidArgumentError(f"compressed_segmentation block size {bs!r} is too large")
    cdef Py_ssize_t itemsize = array.itemsize
    for d in range(4):
        shape[d] = array.shape[d]
        if array.strides[d] % itemsize:
            raise InvalidArgumentError("array strides must be multiples of the item size")
        strides[d] = array.strides[d] // itemsize
    for d in range(3):
        block[d] = bs[d]
    return 0


def _decode_message(sv_cseg_error err, size_t nbytes):
    blk = f"channel {err.channel} block ({err.block[0]}, {err.block[1]}, {err.block[2]})"
    r = err.reason
    if r == SV_CSEG_LENGTH_NOT_WORDS:
        return f"data length {nbytes} bytes is not a multiple of 4"
    if r == SV_CSEG_CHANNEL_HEADER:
        return f"data of {err.value} words is too short for {err.limit} channel offsets"
    if r == SV_CSEG_CHANNEL_OFFSET:
        return (f"channel {err.channel} offset {err.value} is past the end of the data "
                f"({err.limit} words)")
    if r == SV_CSEG_BLOCK_HEADERS:
        return (f"channel {err.channel} data has {err.limit} words, too few for its "
                f"{err.value} words of block headers (truncated, or wrong chunk/block size)")
    if r == SV_CSEG_BITS:
        return f"{blk}: encoded bits {err.value} is not one of 0, 1, 2, 4, 8, 16, 32"
    if r == SV_CSEG_VALUES_OFFSET:
        return (f"{blk}: encoded values end at word {err.value}, past the end of the "
                f"channel data ({err.limit} words)")
    if r == SV_CSEG_TABLE_OFFSET:
        return (f"{blk}: lookup table offset {err.value} leaves no room for a table entry "
                f"in the channel data ({err.limit} words)")
    if r == SV_CSEG_TABLE_INDEX:
        return (f"{blk}: encoded index {err.value} is past the end of the lookup table "
                f"({err.limit} entries to the end of the data)")
    return f"corrupt data (reason {r})"


def decode(data, block_size, cnp.ndarray out not None, str context="", shape=None,
           origin=None):
    """Decode compressed_segmentation ``data`` into ``out``, a 4-D (x, y, z, channel)
    uint32/uint64 array of any strides (written in place).

    With ``shape`` and ``origin`` (4 integers each), ``data`` holds a chunk of
    ``shape`` and only its voxels ``[origin, origin + out.shape)`` are decoded.
    Raises ChunkDecodeError naming ``context`` if the data is corrupt or truncated.
    """
    cdef size_t region[4]
    cdef size_t block[3]
    cdef ptrdiff_t strides[4]
    cdef size_t full[4]
    cdef size_t start[4]
    _geometry(out, block_size, region, block, strides)
    if (shape is None) != (origin is None):
        raise InvalidArgumentError("decode: give both shape and origin, or neither")
    for d in range(4):
        full[d] = region[d] if shape is None else shape[d]
        start[d] = 0 if origin is None else origin[d]
        if start[d] > full[d] or region[d] > full[d] - start[d]:
            raise InvalidArgumentError(
                f"decode: region at {tuple(origin)} of shape {(<object>out).shape} is not "
                f"inside the chunk shape {tuple(shape)}")
    if not out.flags.writeable:
        raise InvalidArgumentError("decode output array is read-only")
    cdef const uint8_t[::1] buf = np.frombuffer(data, dtype=np.uint8)
    cdef uint8_t empty = 0
    cdef const uint8_t *pdata = &buf[0] if buf.shape[0] else &empty
    cdef size_t nbytes = buf.shape[0]
    cdef size_t label_bytes = out.itemsize
    cdef void *pout = cnp.PyArray_DATA(out)
    cdef cnp.ndarray scratch
    cdef void *pscratch = NULL
    cdef size_t scratch_len = 0
    if not out.flags.f_contiguous:  # a view of a larger array: stage each layer of blocks
        scratch_len = region[0] * region[1] * block[2] * label_bytes
        scratch = staging_buffer(scratch_len)
        pscratch = cnp.PyArray_DATA(scratch)
    cdef sv_cseg_error err
    cdef int rc
    with nogil:
        rc = sv_cseg_decode_region(pdata, nbytes, label_bytes, full, block, start, region, pout,
                                   strides, pscratch, scratch_len, &err)
    if rc == SV_OK:
        return
    if rc == SV_ERR_ARGUMENT:
        raise InvalidArgumentError(f"invalid compressed_segmentation block size {tuple(block_size)}")
    raise ChunkDecodeError(
        f"{context or 'chunk'}: corrupt compressed_segmentation chunk: {_decode_message(err, nbytes)}")


def encode(cnp.ndarray array not None, block_size):
    """compressed_segmentation bytes of a 4-D (x, y, z, channel) uint32/uint64 array
    of any strides."""
    cdef size_t shape[4]
    cdef size_t block[3]
    cdef ptrdiff_t strides[4]
    _geometry(array, block_size, shape, block, strides)
    cdef const void *pin = cnp.PyArray_DATA(array)
    cdef size_t label_bytes = array.itemsize
    cdef uint8_t *pout = NULL
    cdef size_t nout = 0
    cdef sv_cseg_error err
    cdef int rc
    with nogil:
        rc = sv_cseg_encode(pin, label_bytes, shape, strides, block, &pout, &nout, &err)
    if rc == SV_OK:
        try:
            return pout[:nout]
        finally:
            sv_cseg_free(pout)
    if rc == SV_ERR_NOMEM:
        raise MemoryError("compressed_segmentation encoder")
    if rc == SV_ERR_ARGUMENT:
        raise InvalidArgumentError(f"invalid compressed_segmentation block size {tuple(block_size)}")
    blk = f"({err.block[0]}, {err.block[1]}, {err.block[2]})"
    if err.reason == SV_CSEG_TABLE_OFFSET_24:
        raise ChunkEncodeError(
            f"chunk of shape {(shape[0], shape[1], shape[2])} is too large for compressed_segmentation: the "
            f"lookup table of block {blk} would start at word {err.value}, past the format's "
            f"24-bit limit; use smaller chunks")
    raise ChunkEncodeError(
        f"chunk of shape {(shape[0], shape[1], shape[2])} is too large for compressed_segmentation: the "
        f"encoded values of block {blk} would start at word {err.value}, past 32 bits")
