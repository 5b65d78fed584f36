"""sharding_indexed: shard layout, partial reads, and malformed shards."""

from __future__ import annotations

import re
import struct

import crc32c
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardvol.errors import (
    ChecksumError,
    ChunkDecodeError,
    ShardFormatError,
    ShardvolError,
)
from shardvol.kvstore import FileStore, MemoryStore
from shardvol.kvstore.memory import clear_memory
from shardvol.zarr3 import BytesCodec, GzipCodec, ZarrChunkStore, create_metadata

from .zarr3_util import all_chunks, read_all, ts_read, write_all, write_metadata

MAX = 2**64 - 1


class CountingStore(MemoryStore):
    """A memory store that records every get (key, byte_range)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.gets: list[tuple[str, tuple | None]] = []

    def get(self, key, byte_range=None):
        if key != "zarr.json":
            self.gets.append((key, byte_range))
        return super().get(key, byte_range)


@pytest.fixture
def memstore(request):
    url = f"memory://zarr3-{request.node.name}"
    clear_memory(url)
    yield CountingStore(url)
    clear_memory(url)


def sample(meta, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(1, 1000, meta.shape).astype(meta.dtype)


@pytest.mark.parametrize("location", ["start", "end"])
def test_partial_reads_fetch_index_and_needed_chunks(memstore, location):
    meta = create_metadata([16, 16], "uint16", [16, 16], [4, 4], codecs=["gzip"],
                           index_location=location)  # fmt: skip
    cs = write_metadata(memstore, meta)
    data = sample(meta)
    write_all(cs, data)
    layout = cs.layout
    shard = memstore.get("c/0/0")
    index = layout.decode_index(
        shard[: layout.index_nbytes] if location == "start" else shard[-layout.index_nbytes :], "s"
    )
    memstore.gets.clear()

    got = cs.read_chunks([(1, 2)])
    r = index.byte_range(layout.linear((1, 2)))
    assert memstore.gets == [("c/0/0", layout.index_byte_range()), ("c/0/0", r)]
    assert layout.index_nbytes == 16 * 16 + 4
    assert np.array_equal(cs.codec.decode(got[(1, 2)]), data[4:8, 8:12])

    # neighbours in the shard's C order are fetched as one coalesced range; the shard's
    # index is cached (the data read checks the shard's version)
    memstore.gets.clear()
    got = cs.read_chunks([(2, 0), (2, 1), (2, 2)])
    first, last = index.byte_range(layout.linear((2, 0))), index.byte_range(layout.linear((2, 2)))
    assert memstore.gets == [("c/0/0", (first[0], last[1]))]
    assert len(got) == 3

    # with no coalescing allowed, separated chunks come one range each
    sparse = ZarrChunkStore(memstore, meta, coalesce_gap=0)
    memstore.gets.clear()
    sparse.read_chunks([(0, 0), (3, 3)])
    assert len(memstore.gets) == 3

    # every chunk of a shard: one read of the whole shard
    memstore.gets.clear()
    assert len(cs.read_chunks(all_chunks(cs))) == 16
    assert memstore.gets == [("c/0/0", None)]

    # existence needs only the index: the cached one while the shard is unchanged
    memstore.gets.clear()
    assert cs.exists([(0, 0), (3, 3)]) == {(0, 0): True, (3, 3): True}
    assert memstore.gets == []
    fresh = ZarrChunkStore(memstore, meta)
    assert fresh.exists([(0, 0), (3, 3)]) == {(0, 0): True, (3, 3): True}
    assert memstore.gets == [("c/0/0", layout.index_byte_range())]


def test_absent_shard_and_inner_chunks(memstore):
    meta = create_metadata([8, 8], "int32", [4, 4], [2, 2], fill_value=5)
    cs = write_metadata(memstore, meta)
    data = np.full(meta.shape, 5, "i4")
    data[0, 0] = 1  # one inner chunk of one shard
    write_all(cs, data)
    assert memstore.list("c/") == ["c/0/0"]
    assert list(cs.read_chunks(all_chunks(cs))) == [(0, 0)]
    assert np.array_equal(read_all(cs), data)


def test_read_any_inner_chunk_order_and_gaps(tmp_path):
    """A hand-made shard: chunks in reverse order with junk between them; TensorStore agrees."""
    meta = create_metadata([6, 4], "int16", [6, 4], [2, 2], codecs=[BytesCodec("big")],
                           index_location="start")  # fmt: skip
    path = str(tmp_path / "a")
    cs = write_metadata(FileStore(path), meta)
    layout = cs.layout
    data = np.arange(24, dtype="i2").reshape(6, 4)
    offsets = np.full(layout.n_chunks, MAX, np.uint64)
    nbytes = np.full(layout.n_chunks, MAX, np.uint64)
    body = b""
    for i in reversed(range(layout.n_chunks)):
        if i == 3:
            continue  # absent: reads as fill
        body += b"\xee" * 5
        offsets[i], nbytes[i] = layout.index_nbytes + len(body), 8
        body += data[layout.slices(i)].astype(">i2").tobytes()
    from shardvol.zarr3.sharding import ShardIndex

    FileStore(path).set("c/0/0", layout.encode_index(ShardIndex(offsets, nbytes)) + body + b"\xff")
    expected = data.copy()
    expected[layout.slices(3)] = 0
    assert np.array_equal(read_all(cs), expected)
    assert np.array_equal(ts_read(path), expected)
    # a read-modify-write keeps the others
    chunk = np.array([[70, 71], [72, 73]], "i2")
    cs.update_unit("c/0/0", {(0, 0): cs.codec.encode(chunk)})
    expected[0:2, 0:2] = chunk
    assert np.array_equal(ts_read(path), expected)


# --------------------------------------------------------------------------- malformed shards


def make_shard(memstore, location="end", crc=True):
    meta = create_metadata(
        [8, 8], "uint16", [8, 8], [4, 4], codecs=["gzip"], index_location=location,
        index_codecs=["bytes", "crc32c"] if crc else ["bytes"],
    )  # fmt: skip
    cs = write_metadata(memstore, meta)
    write_all(cs, sample(meta))
    return cs, memstore.get("c/0/0")


def split(cs, shard):
    n = cs.layout.index_nbytes
    if cs.layout.index_at_start:
        return shard[:n], shard[n:], True
    return shard[-n:], shard[:-n], False


def with_index(cs, shard, table: np.ndarray) -> bytes:
    """``shard`` with its index replaced by ``table`` (n x 2), checksum recomputed."""
    index, body, at_start = split(cs, shard)
    raw = table.astype("<u8").tobytes()
    if len(index) > len(raw):
        raw += struct.pack("<I", crc32c.crc32c(raw))
    return raw + body if at_start else body + raw


def table_of(cs, shard) -> np.ndarray:
    index, _, _ = split(cs, shard)
    return np.frombuffer(index[: 16 * cs.layout.n_chunks], "<u8").reshape(-1, 2).copy()


def read_everything(cs):
    """Every chunk through both read paths (whole shard and partial) and decoded."""
    out = {}
    for coords in (all_chunks(cs), all_chunks(cs)[:3]):
        for c, b in cs.read_chunks(coords).items():
            out[c] = cs.codec.decode(b, context=str(c))
    return out


@pytest.mark.parametrize("location", ["start", "end"])
def test_shard_shorter_than_index(memstore, location):
    cs, shard = make_shard(memstore, location)
    memstore.set("c/0/0", shard[:10])
    for coords in (all_chunks(cs), [(0, 0)]):
        with pytest.raises(ShardFormatError, match="c/0/0"):
            cs.read_chunks(coords)
    with pytest.raises(ShardFormatError, match="c/0/0"):
        cs.update_unit("c/0/0", {})


@pytest.mark.parametrize("location", ["start", "end"])
def test_index_entry_past_end(memstore, location):
    cs, shard = make_shard(memstore, location)
    table = table_of(cs, shard)
    table[1] = [len(shard) - 3, 50]
    memstore.set("c/0/0", with_index(cs, shard, table))
    with pytest.raises(ShardFormatError, match=r"c/0/0.*\(0, 1\).*past the end"):
        cs.read_chunks(all_chunks(cs))
    with pytest.raises(ShardFormatError, match="c/0/0"):
        cs.read_chunks([(0, 1)])
    table[1] = [MAX - 10, 100]  # offset + nbytes overflows 64 bits
    memstore.set("c/0/0", with_index(cs, shard, table))
    for coords in (all_chunks(cs), [(0, 1)]):
        with pytest.raises(ShardFormatError, match=r"c/0/0.*\(0, 1\)"):
            cs.read_chunks(coords)


def test_overlapping_and_half_empty_entries(memstore):
    cs, shard = make_shard(memstore)
    table = table_of(cs, shard)
    bad = table.copy()
    bad[3] = [table[2][0] + 1, table[2][1]]
    memstore.set("c/0/0", with_index(cs, shard, bad))
    for coords in (all_chunks(cs), [(0, 0)]):
        with pytest.raises(ShardFormatError, match=r"c/0/0.*overlap"):
            cs.read_chunks(coords)
    bad = table.copy()
    bad[0] = [MAX, 7]
    memstore.set("c/0/0", with_index(cs, shard, bad))
    with pytest.raises(ShardFormatError, match=r"c/0/0.*\(0, 0\).*2\^64-1"):
        cs.read_chunks([(1, 1)])


def test_entry_inside_start_index(memstore):
    cs, shard = make_shard(memstore, "start")
    table = table_of(cs, shard)
    table[0] = [2, 10]
    memstore.set("c/0/0", with_index(cs, shard, table))
    with pytest.raises(ShardFormatError, match=r"c/0/0.*\(0, 0\)"):
        cs.read_chunks([(0, 0)])


@pytest.mark.parametrize("location", ["start", "end"])
def test_checksum_mismatch(memstore, location):
    cs, shard = make_shard(memstore, location)
    index, _, at_start = split(cs, shard)
    pos = 5 if at_start else len(shard) - len(index) + 5
    memstore.set("c/0/0", shard[:pos] + bytes([shard[pos] ^ 1]) + shard[pos + 1 :])
    for coords in (all_chunks(cs), [(0, 0)]):
        with pytest.raises(ChecksumError, match="c/0/0"):
            cs.read_chunks(coords)
    with pytest.raises(ChecksumError, match="c/0/0"):
        cs.update_unit("c/0/0", {})


def test_corrupt_inner_chunk(memstore):
    cs, shard = make_shard(memstore, "end", crc=False)
    table = table_of(cs, shard)
    start = int(table[1][0])
    memstore.set("c/0/0", shard[: start + 12] + b"\x00\x01" + shard[start + 14 :])
    chunk = cs.read_chunks([(0, 1)])[(0, 1)]
    with pytest.raises(ChunkDecodeError, match="inner"):
        cs.codec.decode(chunk, context="c/0/0 inner chunk (0, 1)")


def test_raw_inner_chunk_wrong_size(memstore):
    meta = create_metadata([4], "uint32", [4], [2], codecs=["bytes"])
    cs = write_metadata(memstore, meta)
    write_all(cs, np.arange(1, 5, dtype="u4"))
    shard = memstore.get("c/0")
    table = table_of(cs, shard)
    table[0][1] = 4
    memstore.set("c/0", with_index(cs, shard, table))
    chunk = cs.read_chunks([(0,)])[(0,)]
    with pytest.raises(ChunkDecodeError, match="expected 8"):
        cs.codec.decode(chunk, context="c/0")


def test_forged_gzip_size_is_not_trusted():
    meta = create_metadata([64], "uint8", [64], codecs=[GzipCodec(1)])
    chain = meta.codec_chain
    data = chain.encode(np.arange(64, dtype="u1"))
    forged = data[:-4] + struct.pack("<I", 2**32 - 1)
    with pytest.raises(ChunkDecodeError, match="expected 64"):
        chain.decode(forged)


# --------------------------------------------------------------------------- fuzzing


def _mutate(shard: bytes, kind: int, pos: int, value: int) -> bytes:
    pos %= len(shard) + 1
    if kind == 0:  # flip bits of one byte
        pos = min(pos, len(shard) - 1)
        return shard[:pos] + bytes([shard[pos] ^ (value % 255 + 1)]) + shard[pos + 1 :]
    if kind == 1:  # truncate
        return shard[:pos]
    if kind == 2:  # insert bytes
        return shard[:pos] + bytes([value % 256]) * (value % 7 + 1) + shard[pos:]
    return shard[:pos] + shard[pos + value % 9 + 1 :]  # delete bytes


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    location=st.sampled_from(["start", "end"]),
    kind=st.integers(0, 3),
    pos=st.integers(0, 10**6),
    value=st.integers(0, 10**6),
)
def test_mutated_shards_fail_cleanly_or_read_correctly(memstore, location, kind, pos, value):
    """Byte mutations of a crc32c-indexed gzip shard: a shardvol error, or the original values."""
    cs, shard = make_shard(memstore, location)
    expected = read_everything(cs)
    memstore.set("c/0/0", _mutate(shard, kind, pos, value))
    try:
        got = read_everything(cs)
    except ShardvolError:
        return
    for c, v in got.items():
        assert np.array_equal(v, expected[c])


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    location=st.sampled_from(["start", "end"]),
    entries=st.lists(
        st.tuples(st.integers(0, 3), st.sampled_from([0, 1, 2, 5, 100, 2**32, 2**63, MAX - 1, MAX]),
                  st.integers(0, 1), st.integers(-3, 3)),
        min_size=1, max_size=4,
    ),
)  # fmt: skip
def test_forged_index_entries_never_crash(memstore, location, entries):
    """Index entries rewritten with a valid checksum: only shardvol errors, no crash or blow-up."""
    cs, shard = make_shard(memstore, location)
    table = table_of(cs, shard)
    for i, base, column, delta in entries:
        table[i][column] = (base + delta) % 2**64
    memstore.set("c/0/0", with_index(cs, shard, table))
    try:
        read_everything(cs)
    except ShardvolError:
        pass


def test_open_create_and_grid(memstore):
    from shardvol.errors import (
        AlreadyExistsError,
        InfoError,
        InvalidArgumentError,
        OutOfBoundsError,
    )

    with pytest.raises(InfoError, match=re.escape("no zarr.json")):
        ZarrChunkStore.open(memstore)
    meta = create_metadata([10, 7], "uint8", [8, 4], [4, 2])
    cs = ZarrChunkStore.create(memstore, meta)
    with pytest.raises(AlreadyExistsError, match="already"):
        ZarrChunkStore.create(memstore, meta)
    again = ZarrChunkStore.open(memstore)
    assert again.metadata == meta and again.grid_shape == (3, 4) and again.chunk_shape == (4, 2)
    assert cs.units([(0, 0), (1, 1), (2, 3)]) == {"c/0/0": [(0, 0), (1, 1)], "c/1/1": [(2, 3)]}
    assert cs.unit_chunks("c/1/1") == [(2, 2), (2, 3)]  # clipped to the array's grid
    with pytest.raises(OutOfBoundsError):
        cs.units([(3, 0)])
    with pytest.raises(InvalidArgumentError, match="not stored in unit"):
        cs.update_unit("c/0/0", {(2, 0): b""})
    memstore.set("zarr.json", b'{"zarr_format": 3}')
    with pytest.raises(InfoError, match=r"zarr.json: required field"):
        ZarrChunkStore.open(memstore)
