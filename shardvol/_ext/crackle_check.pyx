"""The crack-code check and flat-label decoding of crackle streams (C kernel in
csrc/crackle_check.c, GIL released)."""
import numpy as np
cimport numpy as cnp
from libc.stddef cimport ptrdiff_t
from libc.stdint cimport uint8_t

from shardvol._ext.csrc cimport SV_OK, SV_ERR_NOMEM, SV_ERR_ARGUMENT
from shardvol._ext.csrc_crackle cimport *
from shardvol.errors import ChunkDecodeError, InvalidArgumentError

cnp.import_array()


def check_crack_codes(data, size_t codes_at, size_t index_at, size_t crcs_at, size_t sx,
                      size_t sy, size_t sz, bint permissible, str context="",
                      cnp.ndarray out=None, size_t labels_at=0, size_t labels_len=0,
                      size_t stored_bytes=0):
    """Raise ChunkDecodeError naming ``context`` unless the ``sz`` crack codes of the crackle
    stream ``data`` (at ``codes_at``; their sizes: the uint32s at ``index_at``; their
    components' CRC-32Cs: the uint32s at ``crcs_at``) stay inside a sx x sy slice and decode
    to the components whose CRC the stream stores.  The offsets and sizes must lie inside
    ``data`` (checked by the caller).

    With ``out`` (a 3-D (x, y, z) unsigned array of the chunk's shape, any strides), also
    decode the stream's flat labels (``labels_len`` bytes at ``labels_at``, labels stored in
    ``stored_bytes`` bytes) into it."""
    cdef const uint8_t[::1] buf = np.frombuffer(data, dtype=np.uint8)
    cdef size_t n = <size_t>buf.shape[0]
    if (n < crcs_at + 4 * sz or n < index_at + 4 * sz or codes_at > crcs_at
            or n < labels_at + labels_len):
        raise InvalidArgumentError("check_crack_codes: sections outside the data")
    cdef const uint8_t *p = &buf[0]
    cdef sv_crkl_flat flat
    cdef sv_crkl_flat *pflat = NULL
    if out is not None:
        if (<object>out).shape != (sx, sy, sz) or not out.flags.writeable:
            raise InvalidArgumentError(f"crackle: out must be a writable {sx} x {sy} x {sz} array")
        flat.labels = p + labels_at
        flat.labels_len = labels_len
        flat.stored_bytes = stored_bytes
        flat.label_bytes = out.itemsize
        flat.out = cnp.PyArray_DATA(out)
        for d in range(3):
            if out.strides[d] % out.itemsize:
                raise InvalidArgumentError("array strides must be multiples of the item size")
            flat.strides[d] = out.strides[d] // out.itemsize
        pflat = &flat
    cdef sv_crkl_error err
    cdef int rc
    with nogil:
        rc = sv_crkl_check(p + codes_at, p + index_at, p + crcs_at, sx, sy, sz, permissible,
                           pflat, &err)
    if rc == SV_OK:
        return
    if rc == SV_ERR_NOMEM:
        raise MemoryError("crackle crack-code check")
    if rc == SV_ERR_ARGUMENT:
        raise ChunkDecodeError(
            f"{context or 'chunk'}: crackle chunks of {sx} x {sy} voxels per slice, or labels "
            f"stored in {stored_bytes} bytes for {out.itemsize if out is not None else 0}-byte "
            "ones, are not read")
    if err.reason == SV_CRKL_INDEX:
        why = f"z slice {err.z}: the crack code's chain index needs {err.value} bytes, it has {err.limit}"
    elif err.reason == SV_CRKL_WALK:
        why = f"z slice {err.z}: a crack code chain (from corner {err.value}) leaves the slice"
    elif err.reason == SV_CRKL_CRC:
        why = f"z slice {err.z}: the crack code's components do not have the stored CRC-32C"
    elif err.reason == SV_CRKL_LABELS:
        why = f"the labels section of {err.limit} bytes does not hold what its counts say"
    elif err.reason == SV_CRKL_LABEL_INDEX:
        why = f"z slice {err.z}: label index {err.value} is past the {err.limit} labels"
    else:
        why = f"z slice {err.z}: {err.value} components, the labels give {err.limit}"
    raise ChunkDecodeError(f"{context or 'chunk'}: corrupt crackle chunk: {why}")
