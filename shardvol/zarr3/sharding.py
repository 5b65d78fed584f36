"""The ``sharding_indexed`` codec: many inner chunks in one stored shard.

A shard holds the encoded inner chunks (in any order, gaps allowed) and an
index, at its start or end, of ``(offset, nbytes)`` uint64 pairs for every
inner chunk in C order of the inner chunk grid of the shard; both values are
``2**64 - 1`` for an absent (fill-valued) inner chunk.  The index is encoded
with its own fixed-size codecs (usually ``bytes`` + ``crc32c``).

:class:`ShardLayout` is the pure part (index bytes <-> entries, whole shard
bytes <-> inner chunk bytes), shared by :class:`ShardingCodec` (a codec in a
chain: whole shards, nested sharding) and the chunk store's partial reads.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import prod
from typing import ClassVar

import numpy as np

from shardvol.errors import InfoError, ShardFormatError
from shardvol.zarr3.codecs import (
    JSON,
    ArrayBytesCodec,
    BytesCodec,
    ChunkSpec,
    Codec,
    CodecChain,
    Crc32cCodec,
    check_config_keys,
    is_fill,
    parse_codecs,
    register_codec,
)

EMPTY = np.uint64(2**64 - 1)  # offset and nbytes of an absent inner chunk
DEFAULT_INDEX_CODECS: tuple[Codec, ...] = (BytesCodec("little"), Crc32cCodec())


@dataclass(frozen=True)
class ShardIndex:
    """Decoded index: ``offsets`` and ``nbytes`` per inner chunk (C order), EMPTY if absent."""

    offsets: np.ndarray
    nbytes: np.ndarray

    def byte_range(self, i: int) -> tuple[int, int] | None:
        """``(start, stop)`` of inner chunk ``i`` in the shard, None if absent."""
        if self.offsets[i] == EMPTY:
            return None
        start = int(self.offsets[i])
        return start, start + int(self.nbytes[i])

    def present(self) -> np.ndarray:
        """Linear numbers of the inner chunks that are stored."""
        return np.flatnonzero(self.offsets != EMPTY)


class ShardLayout:
    """A sharding codec bound to one shard spec: index and shard (de)serialisation."""

    def __init__(self, codec: ShardingCodec, spec: ChunkSpec, where: str) -> None:
        if len(codec.chunk_shape) != len(spec.shape) or any(
            c <= 0 or s % c for s, c in zip(spec.shape, codec.chunk_shape)
        ):
            raise InfoError(
                f"{where}: inner chunk_shape {list(codec.chunk_shape)} must have one positive "
                f"entry per dimension dividing the shard shape {list(spec.shape)}"
            )
        self.codec = codec
        self.spec = spec
        self.chunks_per_shard = tuple(s // c for s, c in zip(spec.shape, codec.chunk_shape))
        self._strides = tuple(prod(self.chunks_per_shard[i + 1 :]) for i in range(len(spec.shape)))
        self.n_chunks = prod(self.chunks_per_shard)
        self.inner = CodecChain(
            codec.codecs,
            ChunkSpec(codec.chunk_shape, spec.dtype, spec.fill_value),
            f"{where}: codecs",
        )
        self.index_chain = CodecChain(
            codec.index_codecs,
            ChunkSpec((*self.chunks_per_shard, 2), np.dtype(np.uint64), EMPTY),
            f"{where}: index_codecs",
        )
        size = self.index_chain.encoded_size()
        if size is None:
            raise InfoError(f"{where}: index_codecs must produce a fixed size (no compression)")
        self.index_nbytes = size
        self.index_at_start = codec.index_location == "start"

    # ----------------------------------------------------------------- index

    def index_byte_range(self) -> tuple[int, int | None]:
        """Store byte range of the index: a prefix or a suffix of the shard."""
        return (0, self.index_nbytes) if self.index_at_start else (-self.index_nbytes, None)

    def decode_index(
        self, data: bytes | memoryview, context: str, shard_size: int | None = None
    ) -> ShardIndex:
        """Parse and check index bytes; ``shard_size`` (if known) bounds the entries."""
        if len(data) != self.index_nbytes:
            raise ShardFormatError(
                f"{context}: shard index has {len(data)} bytes, expected {self.index_nbytes} "
                f"(is the shard shorter than its index?)"
            )
        table = self.index_chain.decode(data, context=f"{context} (shard index)")
        offsets = np.ascontiguousarray(table[..., 0]).reshape(-1)
        nbytes = np.ascontiguousarray(table[..., 1]).reshape(-1)
        self._check_entries(offsets, nbytes, context, shard_size)
        return ShardIndex(offsets, nbytes)

    def _check_entries(
        self, offsets: np.ndarray, nbytes: np.ndarray, context: str, shard_size: int | None
    ) -> None:
        absent = offsets == EMPTY
        half = np.flatnonzero(absent != (nbytes == EMPTY))
        if half.size:
            i = int(half[0])
            raise ShardFormatError(
                f"{context}: index entry of inner chunk {self.position(i)} has offset "
                f"{int(offsets[i])} and nbytes {int(nbytes[i])}; an absent chunk needs both 2^64-1"
            )
        which = np.flatnonzero(~absent)
        if not which.size:
            return
        start, length = offsets[which], nbytes[which]
        data_lo = self.index_nbytes if self.index_at_start else 0
        data_hi = None
        if shard_size is not None:
            data_hi = shard_size if self.index_at_start else shard_size - self.index_nbytes
        over = (length > EMPTY - start) | (start < data_lo)
        if data_hi is not None:
            over |= start + np.minimum(length, EMPTY - start) > data_hi
        if over.any():
            i = int(which[np.flatnonzero(over)[0]])
            where = "past the end of the shard" if data_hi is not None else "outside the data"
            raise ShardFormatError(
                f"{context}: index entry of inner chunk {self.position(i)} "
                f"(offset {int(offsets[i])}, nbytes {int(nbytes[i])}) points {where}"
                + ("" if shard_size is None else f" ({shard_size} bytes, index included)")
            )
        order = np.argsort(start, kind="stable")
        stop = start[order] + length[order]
        clash = np.flatnonzero(stop[:-1] > start[order][1:])
        if clash.size:
            a, b = which[order[clash[0]]], which[order[clash[0] + 1]]
            raise ShardFormatError(
                f"{context}: inner chunks {self.position(int(a))} and {self.position(int(b))} "
                f"overlap in the shard"
            )

    def encode_index(self, index: ShardIndex) -> bytes:
        table = np.stack([index.offsets, index.nbytes], axis=-1)
        return self.index_chain.encode(table.reshape((*self.chunks_per_shard, 2)))

    # ----------------------------------------------------------------- whole shards

    def split_shard(self, data: bytes | memoryview, context: str) -> dict[int, memoryview]:
        """Encoded inner chunks of a whole stored shard, by linear inner chunk number."""
        if len(data) < self.index_nbytes:
            raise ShardFormatError(
                f"{context}: shard of {len(data)} bytes is shorter than its "
                f"{self.index_nbytes}-byte index"
            )
        view = memoryview(data)
        n = self.index_nbytes
        index_bytes = view[:n] if self.index_at_start else view[len(view) - n :]
        index = self.decode_index(index_bytes, context, shard_size=len(view))
        out = {}
        for i in index.present().tolist():
            start, stop = index.byte_range(i)  # type: ignore[misc]  # present: not None
            out[i] = view[start:stop]
        return out

    def join_shard(self, chunks: Mapping[int, bytes | memoryview]) -> bytes:
        """Shard bytes holding ``chunks`` (linear number -> encoded inner chunk), C order."""
        return b"".join(self.shard_parts(chunks))

    def shard_parts(
        self, chunks: Mapping[int, bytes | memoryview]
    ) -> list[bytes | memoryview]:
        """The pieces whose concatenation is :meth:`join_shard`'s (the chunks and the index),
        for stores that write them without joining them."""
        offsets = np.full(self.n_chunks, EMPTY, np.uint64)
        nbytes = np.full(self.n_chunks, EMPTY, np.uint64)
        pos = self.index_nbytes if self.index_at_start else 0
        parts = []
        for i in sorted(chunks):
            if not 0 <= i < self.n_chunks:
                raise InfoError(f"inner chunk number {i} outside the {self.n_chunks} of a shard")
            part = chunks[i]
            offsets[i], nbytes[i] = pos, len(part)
            pos += len(part)
            parts.append(part)
        index = self.encode_index(ShardIndex(offsets, nbytes))
        return [index, *parts] if self.index_at_start else [*parts, index]

    # ----------------------------------------------------------------- geometry

    def position(self, i: int) -> tuple[int, ...]:
        """Inner chunk grid position (within the shard) of linear number ``i``."""
        return tuple(int(p) for p in np.unravel_index(i, self.chunks_per_shard))

    def linear(self, coord: Sequence[int]) -> int:
        """Linear number (C order) within its shard of the inner chunk at ``coord``: its
        position in the shard, or in the array's inner chunk grid."""
        return sum(map(operator.mul, map(operator.mod, coord, self.chunks_per_shard),
                       self._strides))

    def slices(self, i: int) -> tuple[slice, ...]:
        """Region of inner chunk ``i`` in the shard array."""
        return tuple(
            slice(p * c, (p + 1) * c) for p, c in zip(self.position(i), self.codec.chunk_shape)
        )

    # ----------------------------------------------------------------- arrays

    def encode_array(self, array: np.ndarray) -> bytes:
        """Shard bytes of a full shard array; fill-valued inner chunks are left out."""
        chunks = {}
        for i in range(self.n_chunks):
            part = array[self.slices(i)]
            if not is_fill(part, self.spec.fill_value):
                chunks[i] = self.inner.encode(part)
        return self.join_shard(chunks)

    def decode_array(
        self, data: bytes | memoryview, context: str, out: np.ndarray | None = None
    ) -> np.ndarray:
        """The full shard array of shard bytes (absent inner chunks read as the fill value)."""
        chunks = self.split_shard(data, context)
        if out is None:
            out = np.empty(self.spec.shape, self.spec.dtype)
        for i in range(self.n_chunks):
            region = out[self.slices(i)]
            if i in chunks:
                self.inner.decode(
                    chunks[i], out=region, context=f"{context} inner chunk {self.position(i)}"
                )
            else:
                region[...] = self.spec.fill_value
        return out


@register_codec
@dataclass(frozen=True)
class ShardingCodec(ArrayBytesCodec):
    """``sharding_indexed``: an array -> bytes codec storing inner chunks plus an index."""

    name: ClassVar[str] = "sharding_indexed"
    chunk_shape: tuple[int, ...]
    codecs: tuple[Codec, ...]
    index_codecs: tuple[Codec, ...] = DEFAULT_INDEX_CODECS
    index_location: str = "end"

    @classmethod
    def from_config(cls, config: Mapping[str, JSON], where: str) -> ShardingCodec:
        members = {"chunk_shape", "codecs", "index_codecs", "index_location"}
        check_config_keys(config, members, where)
        shape = config.get("chunk_shape")
        if (
            not isinstance(shape, Sequence)
            or isinstance(shape, str)
            or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in shape)
        ):
            raise InfoError(
                f"{where}: 'chunk_shape' must be a list of positive integers, got {shape!r}"
            )
        for key in ("codecs", "index_codecs"):
            if key not in config:
                raise InfoError(f"{where}: configuration member {key!r} is required")
        location = config.get("index_location", "end")
        if location not in ("start", "end"):
            raise InfoError(f"{where}: 'index_location' must be 'start' or 'end', got {location!r}")
        return cls(
            tuple(shape),
            parse_codecs(config["codecs"], f"{where}.codecs"),
            parse_codecs(config["index_codecs"], f"{where}.index_codecs"),
            location,
        )

    def to_json(self) -> dict[str, JSON]:
        return {
            "name": self.name,
            "configuration": {
                "chunk_shape": list(self.chunk_shape),
                "codecs": [c.to_json() for c in self.codecs],
                "index_codecs": [c.to_json() for c in self.index_codecs],
                "index_location": self.index_location,
            },
        }

    def layout(self, spec: ChunkSpec, where: str = "sharding_indexed") -> ShardLayout:
        """This codec bound to shards of ``spec`` (cached)."""
        key = (self, spec.shape, spec.dtype.str, np.asarray(spec.fill_value, spec.dtype).tobytes())
        layout = _LAYOUTS.get(key)
        if layout is None:
            layout = ShardLayout(self, spec, where)
            if len(_LAYOUTS) >= 256:
                _LAYOUTS.clear()
            _LAYOUTS[key] = layout
        return layout

    def validate(self, spec: ChunkSpec, where: str) -> None:
        self.layout(spec, where)

    def encoded_size(self, spec: ChunkSpec) -> None:
        return None

    def encode(self, array: np.ndarray, spec: ChunkSpec) -> bytes:
        return self.layout(spec).encode_array(array)

    def decode(
        self,
        data: bytes | memoryview,
        spec: ChunkSpec,
        context: str,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        return self.layout(spec).decode_array(data, context, out)


_LAYOUTS: dict[tuple, ShardLayout] = {}
