"""Boxes of zstd-compressed chunks in open files decoded straight into an array
(csrc/zstdbox.h)."""

import numpy as np

OTHER: int

class Reader:
    def __init__(self) -> None: ...

def read_boxes(reader: Reader, spans: np.ndarray, shape: tuple[int, ...], boxes: np.ndarray,
               out: np.ndarray, names: list[str]) -> np.ndarray: ...
