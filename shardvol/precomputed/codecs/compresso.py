"""compresso: the boundary-and-component encoding of label volumes (Matejek et al. 2017)
that igneous and CloudVolume write (one channel of uint8-64 labels).

shardvol's own C codec (csrc/compresso.c) encodes chunks byte for byte as the compresso
package does (CloudVolume's encoder) and decodes them, bounds-checked, straight into the
output; both release the GIL, and neither needs the package.
"""

from __future__ import annotations

import numpy as np

from shardvol._ext import compresso as _cpso
from shardvol.precomputed.codecs._labels import LabelCodec
from shardvol.precomputed.codecs.base import Shape4, fortran_empty


class CompressoCodec(LabelCodec):
    """The ``compresso`` encoding: writes format version 1 (4-connected, 4 x 4 x 1 windows,
    8 x 8 x 1 for very fragmented chunks); reads versions 0 and 1, 4- and 6-connected."""

    encoding = "compresso"
    max_axis = 65535  # the header's 16-bit sizes

    def _encode(self, array: np.ndarray) -> bytes:
        self._check_extent(array)
        labels = array[..., 0]
        if not labels.dtype.isnative or any(s % labels.itemsize for s in labels.strides):
            labels = np.asfortranarray(labels, dtype=self.dtype)
        return _cpso.encode(labels)

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
