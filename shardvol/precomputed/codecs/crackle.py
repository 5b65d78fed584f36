"""crackle: the crack-code encoding of label volumes that igneous and CloudVolume write
(one channel of uint8-64 labels), through the crackle-codec package
(``pip install shardvol[segmentation]``).

The package's decoder trusts its input (damaged crack codes make it read and write outside
its buffers, or return uninitialised memory), so a chunk is checked first: its header (and
its CRC-8), its shape and label type against the volume's, every section's length against
the stream's, the CRC-32C checksums of the z index and the labels, and every slice's crack
code (csrc/crackle_check.c: it stays inside the slice and yields the components whose
CRC-32C the stream stores).  That check finds each slice's components, so chunks of flat
labels (what CloudVolume and the package write by default) are then decoded by it straight
into the output, GIL released, without the package; chunks with pins are decoded by the
package.  Only format version 1 (the one with checksums) without a Markov model (the
default) is read.
"""

from __future__ import annotations

import numpy as np

from shardvol._ext.crackle_check import check_crack_codes
from shardvol.errors import ChunkDecodeError, ChunkEncodeError
from shardvol.precomputed.codecs._labels import LabelCodec
from shardvol.precomputed.codecs._packages import import_package
from shardvol.precomputed.codecs.base import Shape4, fortran_empty

_HEADER_BYTES = 29


class CrackleCodec(LabelCodec):
    """The ``crackle`` encoding (format version 1)."""

    encoding = "crackle"
    max_axis = 2**32 - 1  # the header's 32-bit sizes

    def ensure_encoder(self) -> None:
        import_package("crackle", "crackle-codec", self.encoding, "segmentation")

    def _encode(self, array: np.ndarray) -> bytes:
        crackle = import_package("crackle", "crackle-codec", self.encoding, "segmentation")
        self._check_extent(array)
        try:
            return crackle.compress(np.asfortranarray(array[..., 0], dtype=self.dtype),
                                    parallel=1)
        except (RuntimeError, TypeError, ValueError) as e:
            raise ChunkEncodeError(
                f"crackle: cannot encode a chunk of shape {array.shape[:3]}: {e}") from e

    def _decode(
        self, data: bytes | memoryview, shape: Shape4, out: np.ndarray | None, where: str
    ) -> np.ndarray:
        target = fortran_empty(shape, self.dtype) if out is None else out
        if any(s % target.itemsize for s in target.strides):  # exotic view: decode, then copy
            np.copyto(target, self._decode(data, shape, None, where))
            return target
        if check_stream(data, shape[:3], self.dtype, where, target[..., 0]):
            return target  # flat labels: decoded by the check
        crackle = import_package("crackle", "crackle-codec", self.encoding, "segmentation")
        try:  # (pins: checked, decoded by the package)
            labels = crackle.decompress(bytes(data), parallel=1)
        except Exception as e:  # the package raises its own FormatError, RuntimeError, ...
            raise ChunkDecodeError(f"{where}: corrupt crackle chunk: {e}") from e
        np.copyto(target, self._check_decoded(labels, shape, where))
        return target


def check_stream(
    data: bytes | memoryview, shape: tuple[int, ...], dtype: np.dtype, where: str,
    out: np.ndarray | None = None,
) -> bool:
    """Raise ChunkDecodeError unless ``data`` is a whole, intact crackle (version 1) stream
    of a chunk of ``shape`` (x, y, z) voxels of ``dtype``.  A stream of flat labels is also
    decoded into ``out`` (if given, an (x, y, z) view): returns whether it was."""
    from crc32c import crc32c  # (here: 14 ms of a fresh process's imports)

    def corrupt(why: str) -> ChunkDecodeError:
        return ChunkDecodeError(f"{where}: corrupt crackle chunk: {why}")

    n = len(data)
    if n < _HEADER_BYTES:
        raise corrupt(f"{n} bytes, shorter than the {_HEADER_BYTES}-byte header")
    if data[:4] != b"crkl":
        raise corrupt(f"not crackle data (starts with {data[:4]!r})")
    if data[4] != 1:
        raise corrupt(f"format version {data[4]}; only version 1 (with checksums) is read")
    if _crc8(data[5:28]) != data[28]:
        raise corrupt("the header's CRC-8 does not match")
    fmt = int.from_bytes(data[5:7], "little")
    width, stored_width = 1 << (fmt & 3), 1 << ((fmt >> 2) & 3)
    label_format, signed, markov_order = (fmt >> 5) & 3, (fmt >> 8) & 1, (fmt >> 9) & 15
    sizes = tuple(int.from_bytes(data[i : i + 4], "little") for i in (7, 11, 15))
    if sizes != tuple(shape):
        raise corrupt(f"the stream's chunk is {sizes}, the volume's {tuple(shape)}")
    if width != dtype.itemsize or signed or stored_width > width or label_format > 2:
        raise corrupt(
            f"the stream holds {'signed' if signed else 'unsigned'} {8 * width}-bit labels "
            f"(stored in {8 * stored_width} bits, label format {label_format}), the volume "
            f"{dtype.name}")
    sz = sizes[2]
    label_bytes = int.from_bytes(data[20:28], "little")
    index_end = _HEADER_BYTES + 4 * (sz + 1)
    if n < index_end + 4 * (sz + 1):
        raise corrupt(f"{n} bytes, too short for the z index of {sz} slices")
    index = data[_HEADER_BYTES : index_end - 4]
    if crc32c(index) != int.from_bytes(data[index_end - 4 : index_end], "little"):
        raise corrupt("the z index's CRC-32C does not match")
    crack_bytes = int(np.frombuffer(index, "<u4").sum(dtype=np.uint64))
    markov_bytes = ((4**markov_order) * 5 + 4) // 8 if markov_order else 0
    expected = index_end + label_bytes + markov_bytes + crack_bytes + 4 * (sz + 1)
    if n != expected:
        raise corrupt(f"{n} bytes where its sections add up to {expected}")
    labels = data[index_end : index_end + label_bytes]
    crc_at = n - 4 * (sz + 1)
    if crc32c(labels) != int.from_bytes(data[crc_at : crc_at + 4], "little"):
        raise corrupt("the labels' CRC-32C does not match")
    if markov_order:
        raise corrupt(f"its crack codes use a Markov model (order {markov_order}), which "
                      "shardvol cannot check before decoding; such chunks are not read")
    sx, sy = sizes[0], sizes[1]
    flat = out is not None and label_format == 0
    check_crack_codes(data, index_end + label_bytes, _HEADER_BYTES, n - 4 * sz, sx, sy, sz,
                      bool((fmt >> 4) & 1), where, out if flat else None, index_end, label_bytes,
                      stored_width)
    return flat


def _crc8(data: bytes | memoryview) -> int:
    """crackle's header checksum: CRC-8, polynomial 0xE7 (reflected), initial value 0xFF."""
    crc = 0xFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xE7 if crc & 1 else crc >> 1
    return crc
