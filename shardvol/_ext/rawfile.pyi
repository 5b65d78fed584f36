"""Boxes of raw chunk files read straight into an array (csrc/rawfile.h)."""

import numpy as np

MISSING: int
OTHER: int
MAX_SPAN: int

def read_boxes(paths: list[str], boxes: np.ndarray, out: np.ndarray) -> np.ndarray: ...
