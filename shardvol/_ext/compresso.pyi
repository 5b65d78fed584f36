"""compresso decoding (csrc/compresso.h)."""

import numpy as np

def decode(data: bytes | memoryview, out: np.ndarray, context: str = "") -> None: ...
