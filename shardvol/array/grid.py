"""Regular chunk grids over a box-shaped domain (any number of dimensions)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

#: A chunk's position in its array's chunk grid.
ChunkCoord = tuple[int, ...]


@dataclass(frozen=True)
class ChunkGrid:
    """Chunks of ``chunk_shape`` tiling the domain ``[origin, origin + shape)``.

    Chunk ``g`` covers ``origin + g * chunk_shape`` up to the next chunk or the
    end of the domain, whichever comes first.
    """

    origin: tuple[int, ...]
    shape: tuple[int, ...]
    chunk_shape: tuple[int, ...]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def grid_shape(self) -> tuple[int, ...]:
        return tuple(-(-n // c) for n, c in zip(self.shape, self.chunk_shape))

    @property
    def stop(self) -> tuple[int, ...]:
        return tuple(o + n for o, n in zip(self.origin, self.shape))

    def chunk_start(self, coord: ChunkCoord) -> tuple[int, ...]:
        """Global coordinate of the chunk's first element."""
        return tuple(o + g * c for o, g, c in zip(self.origin, coord, self.chunk_shape))

    def chunk_extent(self, coord: ChunkCoord) -> tuple[int, ...]:
        """Shape of the part of the chunk that lies inside the domain."""
        return tuple(
            min(c, n - g * c) for g, c, n in zip(coord, self.chunk_shape, self.shape)
        )

    def contains(self, coord: ChunkCoord) -> bool:
        return all(0 <= g < n for g, n in zip(coord, self.grid_shape))


def grow_block(
    unit: Sequence[int], size: Sequence[int], itemsize: int, target: int
) -> tuple[int, ...]:
    """``unit`` doubled along each axis in turn while the block stays within ``target`` bytes
    (of ``itemsize``-byte elements) and does not outgrow ``size`` (whole units of storage
    grouped into a block of work)."""
    shape = list(unit)
    grew = True
    while grew:
        grew = False
        for d in range(len(shape)):
            if shape[d] < size[d] and math.prod(shape) * 2 * itemsize <= target:
                shape[d] *= 2
                grew = True
    return tuple(shape)
