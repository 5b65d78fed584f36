"""Mean, mode, min, max and stride pooling (csrc/downsample.h)."""

from collections.abc import Sequence

import numpy as np

METHOD_CODES: dict[str, int]
DTYPE_CODES: dict[np.dtype, int]
MAX_BLOCK: int
MAX_BLOCK_VOXELS: int

def output_shape(
    shape: Sequence[int], factor: Sequence[int], phase: Sequence[int], mip: int
) -> tuple[int, int, int, int]: ...
def pyramid(
    arr: np.ndarray,
    factor: Sequence[int],
    phase: Sequence[int],
    method: str,
    outs: list[np.ndarray],
) -> None: ...
