"""Values read while their bytes arrive: whole objects that a reader parses as they come in.

A remote store streams a whole value into one buffer of its final size; the reader sees
the first ``have`` bytes (they never change afterwards), and is told each time more came
in.  A shard file is read this way so that its chunks are decoded while the rest of it is
still on the network.  Stores that cannot stream deliver each value whole, in one step.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Hashable

import numpy as np

from shardvol._ext import hugeblock
from shardvol.errors import StoreError


class Arriving:
    """One value on its way: ``view()`` is its first ``have`` bytes of ``size`` (at
    ``version``); ``done`` once all of it is in, ``missing`` if the store has no such
    value.  A read interrupted midway resumes where it stopped, at the same version.
    Readers take ``done`` before ``view()``: the last bytes may come in between."""

    __slots__ = ("_array", "buffer", "done", "have", "missing", "size", "version")

    def __init__(self) -> None:
        self.buffer: bytes | memoryview = b""
        self._array = np.zeros(0, np.uint8)  # (the buffer being filled, once started)
        self.have = 0
        self.size: int | None = None
        self.version: Hashable | None = None
        self.done = False
        self.missing = False

    def start(self, size: int, version: Hashable | None) -> None:
        """The value has ``size`` bytes at ``version``: a buffer of that size to fill (not
        zeroed first: each page is written once, as the bytes arrive)."""
        big = size >= hugeblock.MIN_BYTES  # (a block: cached pages, no faults when reused)
        self._array = hugeblock.buffer(size) if big else np.empty(size, np.uint8)
        self.buffer, self.size, self.version = self._array.data, size, version

    def extend(self, piece: bytes | memoryview) -> None:
        """Append the next bytes (the caller checks they fit)."""
        end = self.have + len(piece)
        self._array[self.have : end] = np.frombuffer(piece, np.uint8)  # (GIL released)
        self.have = end

    def rest(self) -> memoryview:
        """The bytes still to come in, to be written in place (then ``have`` moved on)."""
        return self._array.data[self.have : self.size]

    def complete(self, value: bytes | memoryview | None, version: Hashable | None) -> None:
        """The whole value at once (None: absent)."""
        if value is None:
            self.missing = True
        else:
            self.buffer, self.size, self.have = value, len(value), len(value)
        self.version, self.done = version, True

    def view(self) -> memoryview:
        """The bytes in so far."""
        return memoryview(self.buffer)[: self.have]


async def fill(value: Arriving, pieces: AsyncIterator[bytes], arrived: Callable[[], None],
               what: str, skip: int = 0) -> None:
    """Append ``pieces`` (a response body, after its first ``skip`` bytes) to ``value``,
    calling ``arrived()`` after each; a body longer than the value is a StoreError, one
    that ends early is ``ConnectionResetError`` (transient: the read is resumed)."""
    size = value.size or 0
    async for piece in pieces:
        if skip:
            dropped = min(skip, len(piece))
            piece, skip = piece[dropped:], skip - dropped
        if value.have + len(piece) > size:
            raise StoreError(f"{what}: the body is longer than its {size} bytes")
        value.extend(piece)
        arrived()
    if value.have < size:
        raise ConnectionResetError(f"{what}: the body ended after {value.have} of {size} bytes")
    value.done = True
    arrived()
