"""Compressed Morton codes of chunk grid positions (csrc/morton.h)."""

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

def morton_bits(grid_size: Sequence[int]) -> tuple[tuple[int, int, int], int]: ...
def compressed_morton_code(grid_coords: ArrayLike, grid_size: Sequence[int]) -> np.ndarray: ...
def decode_morton_code(codes: ArrayLike, grid_size: Sequence[int]) -> np.ndarray: ...
