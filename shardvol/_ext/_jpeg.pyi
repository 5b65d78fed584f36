"""JPEG chunk decoding and encoding over libjpeg-turbo (csrc/jpeg.h)."""

from collections.abc import Sequence

import numpy as np

def decode(
    data: bytes | memoryview,
    shape: Sequence[int],
    origin: Sequence[int],
    out: np.ndarray,
    context: str = "chunk",
) -> None: ...
def encode(array: np.ndarray, quality: int) -> bytes: ...
