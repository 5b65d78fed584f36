"""Boxes of chunks (zstd, gzip or as they are) in open files decoded straight into an
array (csrc/chunkbox.h)."""

import numpy as np

OTHER: int
KEEP_BYTES: int
CODECS: dict[str, int]

class Reader:
    def __init__(self) -> None: ...

def thread_reader() -> Reader: ...
def read_boxes(reader: Reader, codec: str, spans: np.ndarray, boxes: np.ndarray,
               out: np.ndarray, names: list[str]) -> np.ndarray: ...
