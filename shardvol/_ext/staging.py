"""Per-thread staging buffers: the C decoders decode a box there and copy it out, Zarr's
codecs lay out or decode a chunk there.  Reusing one buffer per thread avoids the page
faults of a fresh allocation per chunk, which cost as much as the copy itself."""

from __future__ import annotations

import threading

import numpy as np

_local = threading.local()


def staging_buffer(nbytes: int) -> np.ndarray:
    """This thread's uint8 buffer of at least ``nbytes``, grown as needed: its contents are
    only valid until the thread's next call."""
    buf = getattr(_local, "buf", None)
    if buf is None or buf.shape[0] < nbytes:
        buf = _local.buf = np.empty(nbytes, np.uint8)
    return buf
