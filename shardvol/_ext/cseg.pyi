"""compressed_segmentation encode and decode (csrc/cseg.h)."""

from collections.abc import Sequence

import numpy as np

def decode(
    data: bytes | memoryview,
    block_size: Sequence[int],
    out: np.ndarray,
    context: str = "",
    shape: Sequence[int] | None = None,
    origin: Sequence[int] | None = None,
) -> None: ...
def encode(array: np.ndarray, block_size: Sequence[int]) -> bytes: ...
