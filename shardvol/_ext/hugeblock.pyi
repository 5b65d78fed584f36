"""Output memory in blocks of whole pages (large ones 2 MiB-aligned, advised for huge pages
where that pays), freed ones cached (csrc/hugeblock.h)."""

from collections.abc import Sequence

import numpy as np
from numpy.typing import DTypeLike

MIN_BYTES: int

def advised(nbytes: int) -> bool: ...
def empty(shape: int | Sequence[int], dtype: DTypeLike, order: str = "C") -> np.ndarray: ...
def buffer(nbytes: int) -> np.ndarray: ...
def populate(array: np.ndarray, start: int, stop: int) -> bool: ...
