"""JPEG chunk decoding into strided boxes, and chunk encoding (C kernels in
csrc/jpeg.c over libjpeg, GIL released)."""
import numpy as np
cimport numpy as cnp
from libc.stddef cimport ptrdiff_t
from libc.stdint cimport uint8_t
from libc.stdlib cimport free
from cpython.bytes cimport PyBytes_FromStringAndSize

from shardvol._ext.csrc cimport SV_ERR_NOMEM, SV_OK
from shardvol._ext.csrc_jpeg cimport *
from shardvol._ext.staging import staging_buffer
from shardvol.errors import ChunkDecodeError, ChunkEncodeError, InvalidArgumentError

cnp.import_array()

_UINT8 = np.dtype(np.uint8)


def decode(data, shape, origin, cnp.ndarray out not None, str context="chunk"):
    """Decode the box of ``out.shape`` at ``origin`` of a jpeg chunk of ``shape``
    (x, y, z, channel; 1 or 3 channels) held in ``data`` into ``out``, a writable
    uint8 array of any strides.  Raises ChunkDecodeError naming ``context`` if the
    data is corrupt or truncated (before the last row the box needs) or does not
    match ``shape``."""
    cdef size_t full[4]
    cdef size_t start[4]
    cdef size_t region[4]
    cdef ptrdiff_t strides[4]
    if out.ndim != 4 or out.dtype != _UINT8 or not out.flags.writeable:
        raise InvalidArgumentError(
            f"jpeg decode needs a writable 4-D uint8 output, got {out.dtype} {(<object>out).shape}")
    if len(shape) != 4 or len(origin) != 4:
        raise InvalidArgumentError(f"jpeg decode: shape {shape!r} and origin {origin!r} need 4 values")
    for d in range(4):
        if shape[d] < 0 or origin[d] < 0 or origin[d] + out.shape[d] > shape[d]:
            raise InvalidArgumentError(
                f"jpeg decode: box at {tuple(origin)} of shape {(<object>out).shape} is not inside "
                f"the chunk shape {tuple(shape)}")
        full[d] = shape[d]
        start[d] = origin[d]
        region[d] = out.shape[d]
        strides[d] = out.strides[d]
    if full[3] != 1 and full[3] != 3:
        raise InvalidArgumentError(f"jpeg chunks have 1 or 3 channels, not {full[3]}")
    cdef const uint8_t[::1] buf = data
    cdef uint8_t empty = 0
    cdef const uint8_t *pdata = &buf[0] if buf.shape[0] else &empty
    cdef size_t nbytes = buf.shape[0]
    cdef uint8_t *pout = <uint8_t *>cnp.PyArray_DATA(out)
    cdef cnp.ndarray scratch = None
    cdef uint8_t *pscratch = NULL
    cdef size_t scratch_len = 0
    if not out.flags.f_contiguous:  # a view of a larger array: decode, then copy
        scratch_len = out.size
        scratch = staging_buffer(scratch_len)
        pscratch = <uint8_t *>cnp.PyArray_DATA(scratch)
    cdef sv_jpeg_error err
    cdef int rc
    with nogil:
        rc = sv_jpeg_decode_region(pdata, nbytes, full, start, region, pout, strides, pscratch,
                                   scratch_len, &err)
    if rc == SV_OK:
        return
    if err.reason == SV_JPEG_BAD_ARGUMENT:
        raise InvalidArgumentError(f"jpeg decode: invalid arguments for chunk {context}")
    if err.reason == SV_JPEG_SIZE:
        x, y, z, w, h = full[0], full[1], full[2], err.width, err.height  # Python ints
        raise ChunkDecodeError(
            f"{context}: jpeg image is {w} x {h} = {w * h} pixels, the chunk {x} x {y} x {z} "
            f"needs {x * y * z}")
    if err.reason == SV_JPEG_COMPONENTS:
        raise ChunkDecodeError(
            f"{context}: jpeg image has {err.value} channel(s), the chunk {tuple(shape)} needs "
            f"{full[3]}")
    if err.reason == SV_JPEG_PRECISION:
        raise ChunkDecodeError(
            f"{context}: jpeg image has {err.value}-bit samples, the volume is uint8")
    raise ChunkDecodeError(
        f"{context}: corrupt jpeg data: {err.message.decode('utf-8', 'replace')}")


def encode(cnp.ndarray array not None, int quality):
    """A uint8 chunk (x, y, z, channel), 1 or 3 channels, of any strides as a baseline JPEG
    image x wide and y*z high at ``quality`` (0-100), RGB with 4:2:0 chroma subsampling: the
    bytes libjpeg-turbo's defaults make, as TensorStore's.  Raises ChunkEncodeError if the
    image would exceed JPEG's 65500 pixels a side."""
    cdef size_t shape[4]
    cdef ptrdiff_t strides[4]
    if (array.ndim != 4 or array.dtype != _UINT8 or array.shape[3] not in (1, 3)
            or array.size == 0):
        raise InvalidArgumentError(
            f"jpeg encode needs a non-empty (x, y, z, 1 or 3) uint8 array, got {array.dtype} "
            f"{(<object>array).shape}")
    if not 0 <= quality <= 100:
        raise InvalidArgumentError(f"jpeg quality must be 0..100, got {quality}")
    for d in range(4):
        shape[d] = array.shape[d]
        strides[d] = array.strides[d]
    cdef const uint8_t *pin = <const uint8_t *>cnp.PyArray_DATA(array)
    cdef uint8_t *buf = NULL
    cdef size_t n = 0
    cdef sv_jpeg_error err
    cdef int rc
    with nogil:
        rc = sv_jpeg_encode(pin, shape, strides, quality, &buf, &n, &err)
    if rc == SV_OK:
        try:
            return PyBytes_FromStringAndSize(<char *>buf, n)
        finally:
            free(buf)
    if rc == SV_ERR_NOMEM:
        raise MemoryError(f"jpeg encode: no memory for a {(<object>array).shape} chunk")
    raise ChunkEncodeError(f"jpeg: cannot encode the chunk: {err.message.decode('utf-8', 'replace')}")
