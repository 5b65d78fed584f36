"""The crack-code check and flat-label decoding of crackle streams (csrc/crackle_check.h)."""

import numpy as np

def check_crack_codes(
    data: bytes | memoryview,
    codes_at: int,
    index_at: int,
    crcs_at: int,
    sx: int,
    sy: int,
    sz: int,
    permissible: bool,
    context: str = "",
    out: np.ndarray | None = None,
    labels_at: int = 0,
    labels_len: int = 0,
    stored_bytes: int = 0,
) -> None: ...
