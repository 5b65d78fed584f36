"""The crack-code check of crackle streams (C kernel in csrc/crackle_check.c, GIL released)."""
import numpy as np
from libc.stdint cimport uint8_t

from shardvol._ext.csrc cimport SV_OK, SV_ERR_NOMEM, SV_ERR_ARGUMENT
from shardvol._ext.csrc_crackle cimport *
from shardvol.errors import ChunkDecodeError, InvalidArgumentError


def check_crack_codes(data, size_t codes_at, size_t index_at, size_t crcs_at, size_t sx,
                      size_t sy, size_t sz, bint permissible, str context=""):
    """Raise ChunkDecodeError naming ``context`` unless the ``sz`` crack codes of the crackle
    stream ``data`` (at ``codes_at``; their sizes: the uint32s at ``index_at``; their
    components' CRC-32Cs: the uint32s at ``crcs_at``) stay inside a sx x sy slice and decode
    to the components whose CRC the stream stores.  The offsets and sizes must lie inside
    ``data`` (checked by the caller)."""
    cdef const uint8_t[::1] buf = np.frombuffer(data, dtype=np.uint8)
    cdef size_t n = <size_t>buf.shape[0]
    if n < crcs_at + 4 * sz or n < index_at + 4 * sz or codes_at > crcs_at:
        raise InvalidArgumentError("check_crack_codes: sections outside the data")
    cdef const uint8_t *p = &buf[0]
    cdef sv_crkl_error err
    cdef int rc
    with nogil:
        rc = sv_crkl_check(p + codes_at, p + index_at, p + crcs_at, sx, sy, sz, permissible, &err)
    if rc == SV_OK:
        return
    if rc == SV_ERR_NOMEM:
        raise MemoryError("crackle crack-code check")
    if rc == SV_ERR_ARGUMENT:
        raise ChunkDecodeError(
            f"{context or 'chunk'}: crackle chunks of {sx} x {sy} voxels per slice are not read "
            "(at most 65534 per axis)")
    if err.reason == SV_CRKL_INDEX:
        why = f"the crack code's chain index needs {err.value} bytes, it has {err.limit}"
    elif err.reason == SV_CRKL_WALK:
        why = f"a crack code chain (from corner {err.value}) leaves the slice"
    else:
        why = "the crack code's components do not have the stored CRC-32C"
    raise ChunkDecodeError(f"{context or 'chunk'}: corrupt crackle chunk: z slice {err.z}: {why}")
