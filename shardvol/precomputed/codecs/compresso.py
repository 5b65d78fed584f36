"""compresso: the boundary-and-component encoding of label volumes (Matejek et al. 2017)
that igneous and CloudVolume write (one channel of uint8-64 labels).

Chunks are decoded by shardvol's own bounds-checked C decoder (csrc/compresso.c) straight
into the output, with the GIL released, so reading needs no package; they are encoded by
the compresso package (``pip install shardvol[segmentation]``), as CloudVolume encodes them.
"""

from __future__ import annotations

import numpy as np

from shardvol._ext import compresso as _cpso
from shardvol.errors import ChunkEncodeError
from shardvol.precomputed.codecs._labels import LabelCodec, import_package
from shardvol.precomputed.codecs.base import Shape4, fortran_empty


class CompressoCodec(LabelCodec):
    """The ``compresso`` encoding (format versions 0 and 1, 4- and 6-connectivity)."""

    encoding = "compresso"
    max_axis = 65535  # the header's 16-bit sizes

    def ensure_encoder(self) -> None:
        import_package("compresso", "compresso", self.encoding)

    def _encode(self, array: np.ndarray) -> bytes:
        compresso = import_package("compresso", "compresso", self.encoding)
        labels = self._labels(array)
        if not labels.flags.writeable:  # (the package takes writable buffers only)
            labels = labels.copy(order="F")
        try:
            return compresso.compress(labels)
        except (compresso.EncodeError, RuntimeError, TypeError) as e:
            raise ChunkEncodeError(
                f"compresso: cannot encode a chunk of shape {array.shape[:3]}: {e}") from e

    def _decode(
        self, data: bytes | memoryview, shape: Shape4, out: np.ndarray | None, where: str
    ) -> np.ndarray:
        target = fortran_empty(shape, self.dtype) if out is None else out
        if any(s % target.itemsize for s in target.strides):  # exotic view: decode, then copy
            tmp = fortran_empty(shape, self.dtype)
            _cpso.decode(data, tmp[..., 0], where)
            np.copyto(target, tmp)
        else:
            _cpso.decode(data, target[..., 0], where)
        return target
