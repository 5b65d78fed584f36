"""Decoding of raw minishard indexes (csrc/minishard.h)."""

from collections.abc import Callable, Sequence

import numpy as np

def decode_minishard_indexes(
    bufs: Sequence[bytes | memoryview], base: int, describe: Callable[[int], str]
) -> tuple[np.ndarray, list[int]]: ...
