"""Copies between arrays of different memory layouts, tile by tile (csrc/transpose.h)."""

import numpy as np

def copyto(dst: np.ndarray, src: np.ndarray, casting: str = "same_kind") -> None: ...
