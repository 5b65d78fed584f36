"""Output memory in 2 MiB-aligned blocks advised for huge pages (csrc/hugeblock.h)."""

from collections.abc import Sequence

import numpy as np
from numpy.typing import DTypeLike

MIN_BYTES: int

def advised(nbytes: int) -> bool: ...
def empty(shape: int | Sequence[int], dtype: DTypeLike, order: str = "C") -> np.ndarray: ...
def buffer(nbytes: int) -> np.ndarray: ...
