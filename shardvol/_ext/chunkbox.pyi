"""Boxes of compressed chunks (zstd, gzip) in open files decoded straight into an array
(csrc/chunkbox.h)."""

import numpy as np

OTHER: int
CODECS: dict[str, int]

class Reader:
    def __init__(self) -> None: ...

def read_boxes(reader: Reader, codec: str, spans: np.ndarray, shape: tuple[int, ...],
               boxes: np.ndarray, out: np.ndarray, names: list[str]) -> np.ndarray: ...
