"""Per-thread staging buffers for the C decoders (decode a box there, then copy it out)."""

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
