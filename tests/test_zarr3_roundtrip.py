"""Zarr v3 chunk-level round trips against TensorStore's zarr3 driver and zarr-python 3.

Random shapes, dtypes, shard and inner chunk shapes, inner codecs, index
codecs and locations: arrays the oracles write are read chunk by chunk through
ZarrChunkStore + its codec, and arrays written through update_unit are read
back by both oracles.
"""

from __future__ import annotations

import numpy as np
import pytest

from shardvol.kvstore import FileStore
from shardvol.zarr3 import (
    BloscCodec,
    BytesCodec,
    Crc32cCodec,
    GzipCodec,
    TransposeCodec,
    ZstdCodec,
    create_metadata,
)

from .zarr3_util import (
    all_chunks,
    chunk_region,
    open_chunkstore,
    read_all,
    ts_read,
    ts_write,
    write_all,
    write_metadata,
    zarr_read,
    zarr_write,
)

DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
          "float32", "float64"]  # fmt: skip


def inner_codecs(rng, ndim, dtype):
    endian = "big" if rng.random() < 0.3 else "little"
    pick = rng.integers(6)
    tail = [
        [],
        [GzipCodec(int(rng.integers(1, 9)))],
        [ZstdCodec(int(rng.integers(1, 6)))],
        [BloscCodec(str(rng.choice(["lz4", "zstd", "blosclz"])), 5,
                    str(rng.choice(["noshuffle", "shuffle", "bitshuffle"])),
                    np.dtype(dtype).itemsize)],
        [Crc32cCodec()],
        [ZstdCodec(3), Crc32cCodec()],
    ][pick]  # fmt: skip
    head = []
    if ndim > 1 and rng.random() < 0.3:
        head = [TransposeCodec(tuple(int(i) for i in rng.permutation(ndim)))]
    return [*head, BytesCodec(endian), *tail]


def random_case(seed: int, sharded: bool = True):
    rng = np.random.default_rng(seed)
    ndim = int(rng.integers(1, 4))
    inner = rng.integers(1, 6 if ndim < 3 else 4, ndim)
    per = rng.integers(1, 4, ndim)
    grid = inner * per if sharded else inner
    shape = [int(rng.integers(1, 2 * g + 3)) for g in grid]
    dtype = DTYPES[seed % len(DTYPES)]
    if dtype == "bool":
        fill = bool(rng.random() < 0.3)
    else:
        fill = 0 if rng.random() < 0.5 else int(rng.integers(1, 100))
    index_codecs = [BytesCodec("little")] + ([Crc32cCodec()] if rng.random() < 0.7 else [])
    meta = create_metadata(
        shape,
        dtype,
        [int(g) for g in grid],
        [int(i) for i in inner] if sharded else None,
        codecs=inner_codecs(rng, ndim, dtype),
        index_codecs=index_codecs,
        index_location=str(rng.choice(["start", "end"])),
        fill_value=fill,
    )
    return meta, random_data(rng, meta)


def random_data(rng, meta) -> np.ndarray:
    shape, dtype = meta.shape, meta.dtype
    if dtype.kind == "b":
        data = rng.random(shape) < 0.5
    elif dtype.kind == "f":
        data = rng.normal(0, 1000, shape).astype(dtype)
    else:
        info = np.iinfo(dtype)
        data = rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    # a block of fill values, so that some (inner) chunks are absent
    block = tuple(slice(0, max(1, s // 2)) for s in shape)
    data[block] = meta.fill_value
    return data


def equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")


SEEDS = list(range(14))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("writer", ["tensorstore", "zarr"])
def test_read_what_oracles_write(tmp_path, seed, writer):
    meta, data = random_case(seed)
    path = str(tmp_path / "a")
    (ts_write if writer == "tensorstore" else zarr_write)(path, meta, data)
    cs = open_chunkstore(path)
    assert cs.sharded and cs.chunk_shape == meta.inner_chunk_shape
    assert equal(read_all(cs), data), meta.to_json()


@pytest.mark.parametrize("seed", SEEDS)
def test_oracles_read_what_we_write(tmp_path, seed):
    meta, data = random_case(seed)
    path = str(tmp_path / "a")
    cs = write_metadata(FileStore(path), meta)
    write_all(cs, data)
    assert equal(ts_read(path), data), meta.to_json()
    assert equal(zarr_read(path), data), meta.to_json()


@pytest.mark.parametrize("seed", SEEDS[:6])
def test_unsharded_both_ways(tmp_path, seed):
    meta, data = random_case(100 + seed, sharded=False)
    assert meta.sharding is None
    theirs = str(tmp_path / "theirs")
    zarr_write(theirs, meta, data)
    assert equal(read_all(open_chunkstore(theirs)), data)
    ours = str(tmp_path / "ours")
    write_all(write_metadata(FileStore(ours), meta), data)
    assert equal(ts_read(ours), data) and equal(zarr_read(ours), data)


@pytest.mark.parametrize("seed", SEEDS[:8])
def test_partial_overwrite_keeps_other_inner_chunks(tmp_path, seed):
    """Rewrite some inner chunks of each shard written by TensorStore; oracles see the merge."""
    meta, data = random_case(200 + seed)
    path = str(tmp_path / "a")
    ts_write(path, meta, data)
    cs = open_chunkstore(path)
    rng = np.random.default_rng(seed)
    expected = data.copy()
    coords = all_chunks(cs)
    for unit, members in cs.units(coords).items():
        chosen = [members[i] for i in rng.choice(len(members), (len(members) + 1) // 2, False)]
        put, drop = {}, []
        for n, coord in enumerate(chosen):
            dst, src = chunk_region(cs, coord)
            if n % 3 == 2:  # some become fill: dropped from the shard
                drop.append(coord)
                expected[dst] = meta.fill_value
                continue
            chunk = np.full(cs.chunk_shape, meta.fill_value, meta.dtype)
            chunk[src] = ~expected[dst] if meta.dtype == bool else expected[dst] + 1
            expected[dst] = chunk[src]
            put[coord] = cs.codec.encode(chunk)
        with cs.lock(unit):
            cs.update_unit(unit, put, drop)
    assert equal(ts_read(path), expected)
    assert equal(zarr_read(path), expected)
    assert equal(read_all(open_chunkstore(path)), expected)


def test_all_fill_shard_is_deleted(tmp_path):
    meta = create_metadata([8, 8], "uint16", [4, 8], [2, 4], fill_value=3)
    path = str(tmp_path / "a")
    store = FileStore(path)
    cs = write_metadata(store, meta)
    data = np.arange(64, dtype="u2").reshape(8, 8)
    write_all(cs, data)
    assert store.exists("c/0/0") and store.exists("c/1/0")
    data[4:] = 3
    write_all(cs, data, replace=False)
    assert not store.exists("c/1/0") and store.exists("c/0/0")
    assert equal(ts_read(path), data) and equal(zarr_read(path), data)
    # dropping the remaining chunks of a shard one call at a time deletes it at the end
    members = cs.unit_chunks("c/0/0")
    cs.update_unit("c/0/0", {}, members[:2])
    assert store.exists("c/0/0")
    cs.update_unit("c/0/0", {}, members[2:])
    assert not store.exists("c/0/0")
    assert equal(ts_read(path), np.full((8, 8), 3, "u2"))


def test_replace_builds_from_scratch(tmp_path):
    meta = create_metadata([8], "int32", [8], [2], codecs=["gzip"])
    path = str(tmp_path / "a")
    cs = write_metadata(FileStore(path), meta)
    write_all(cs, np.arange(1, 9, dtype="i4"))
    chunk = np.array([70, 71], "i4")
    cs.update_unit("c/0", {(1,): cs.codec.encode(chunk)}, replace=True)
    assert equal(ts_read(path), np.array([0, 0, 70, 71, 0, 0, 0, 0], "i4"))


@pytest.mark.parametrize("fill", [float("nan"), float("inf"), -0.5])
def test_float_fill_values(tmp_path, fill):
    meta = create_metadata([6, 5], "float32", [4, 4], [2, 2], fill_value=fill)
    data = np.full(meta.shape, fill, "f4")
    data[0, 0] = 1.5
    ours = str(tmp_path / "ours")
    write_all(write_metadata(FileStore(ours), meta), data)
    assert sorted(FileStore(ours).list("c/")) == ["c/0/0"]  # fill-valued shards not stored
    assert equal(ts_read(ours), data) and equal(zarr_read(ours), data)
    theirs = str(tmp_path / "theirs")
    zarr_write(theirs, meta, data)
    cs = open_chunkstore(theirs)
    assert np.array_equal(np.float32(cs.fill_value), np.float32(fill), equal_nan=True)
    assert equal(read_all(cs), data)


def test_chunk_key_encodings(tmp_path):
    """v2 and '.'-separated keys as zarr-python and TensorStore name them."""
    for encoding, sep, key in [("default", ".", "c.1.0"), ("v2", ".", "1.0"), ("v2", "/", "1/0")]:
        meta = create_metadata(
            [6, 4], "uint8", [4, 4], [2, 2], chunk_key_encoding=encoding, separator=sep
        )
        data = np.arange(24, dtype="u1").reshape(6, 4) + 1
        ours = str(tmp_path / f"ours-{encoding}-{sep == '/'}")
        write_all(write_metadata(FileStore(ours), meta), data)
        assert key in FileStore(ours).list()
        assert equal(ts_read(ours), data) and equal(zarr_read(ours), data)
        theirs = str(tmp_path / f"theirs-{encoding}-{sep == '/'}")
        zarr_write(theirs, meta, data)
        assert key in FileStore(theirs).list()
        assert equal(read_all(open_chunkstore(theirs)), data)


@pytest.mark.filterwarnings("ignore:Combining a .sharding_indexed. codec disables partial")
def test_sharding_behind_transpose_and_nested(tmp_path):
    """A sharding codec that is not the only codec works as whole shards; nested shards read."""
    from shardvol.zarr3 import ShardingCodec

    nested = ShardingCodec((2, 2), (BytesCodec("little"), GzipCodec(5)))
    meta = create_metadata([9, 7], "int16", [8, 8], [4, 4], codecs=[nested])
    data = np.arange(63, dtype="i2").reshape(9, 7)
    theirs = str(tmp_path / "nested")
    zarr_write(theirs, meta, data)
    cs = open_chunkstore(theirs)
    assert cs.sharded and cs.chunk_shape == (4, 4)
    assert equal(read_all(cs), data)
    ours = str(tmp_path / "nested-ours")
    write_all(write_metadata(FileStore(ours), meta), data)
    assert equal(zarr_read(ours), data) and equal(ts_read(ours), data)

    behind = create_metadata(
        [9, 7], "uint32", [8, 8],
        codecs=[TransposeCodec((1, 0)), ShardingCodec((4, 2), (BytesCodec(),))],
    )
    assert behind.sharding is None
    theirs = str(tmp_path / "behind")
    ts_write(theirs, behind, data.astype("u4"))
    cs = open_chunkstore(theirs)
    assert not cs.sharded and cs.chunk_shape == (8, 8)
    assert equal(read_all(cs), data.astype("u4"))
    ours = str(tmp_path / "behind-ours")
    write_all(write_metadata(FileStore(ours), behind), data.astype("u4"))
    assert equal(zarr_read(ours), data.astype("u4")) and equal(ts_read(ours), data.astype("u4"))


def test_zstd_checksum_and_blosc_defaults_both_ways(tmp_path):
    cases = ([ZstdCodec(5, checksum=True)], [BloscCodec()], [ZstdCodec(-3), GzipCodec(0)])
    for n, codecs in enumerate(cases):
        meta = create_metadata([20, 9], "float64", [10, 9], [5, 3], codecs=codecs)
        data = np.random.default_rng(3).normal(size=meta.shape)
        ours = str(tmp_path / f"ours{n}")
        write_all(write_metadata(FileStore(ours), meta), data)
        assert equal(ts_read(ours), data) and equal(zarr_read(ours), data)
        if n == 0:  # the zstd frame descriptor has the content-checksum flag
            cs = open_chunkstore(ours)
            assert cs.read_chunks([(0, 0)])[(0, 0)][4] & 0x04
        theirs = str(tmp_path / f"theirs{n}")
        ts_write(theirs, meta, data)
        assert equal(read_all(open_chunkstore(theirs)), data)


@pytest.mark.parametrize("level, checksum, into", [
    (1, False, True), (3, False, True), (9, False, True),
    (0, False, False), (-5, False, False), (3, True, False),  # (as encode: new bytes)
])
def test_chunks_encoded_into_a_buffer_are_encode_s_bytes(level, checksum, into):
    rng = np.random.default_rng(level + 10 + 100 * checksum)
    smooth = np.repeat(rng.integers(0, 255, (32, 48, 5), dtype=np.uint8), 4, axis=2)
    for chunk in (smooth, rng.integers(0, 255, (32, 48, 20), dtype=np.uint8)):  # (and noise)
        chain = create_metadata(chunk.shape, chunk.dtype, chunk.shape,
                                codecs=[BytesCodec(), ZstdCodec(level, checksum)]).codec_chain
        bound = chain.encoded_bound()
        assert bound is not None
        out = memoryview(bytearray(bound))  # (exactly the bound: noise fills most of it)
        got = chain.encode_into(chunk, out)
        assert bytes(got) == chain.encode(chunk)
        assert (isinstance(got, memoryview) and got.obj is out.obj) == into
        assert equal(chain.decode(bytes(got)), chunk)
    crc = create_metadata((8, 8), "uint8", (8, 8), codecs=[BytesCodec(), Crc32cCodec()])
    assert crc.codec_chain.encoded_bound() is None  # (no codec that writes into a buffer)


@pytest.mark.parametrize("sharded", [True, False])
def test_writes_encode_into_reused_blocks_and_store_the_same_bytes(tmp_path, monkeypatch,
                                                                 sharded):
    """Zarr zstd chunks are encoded into slots of one block per unit (the engine's
    _slots): the files are byte for byte those written through new bytes, and read back
    by TensorStore."""
    from shardvol import zarr3
    from shardvol.array import engine

    data = np.random.default_rng(4).integers(0, 40, (96, 80, 70), dtype=np.uint16)
    slots = engine.ChunkedArray._slots
    made: list[int] = []

    def counted(self, coords):
        found = slots(self, coords)
        made.append(len(found))
        return found

    def write(path: str) -> dict[str, bytes]:
        from pathlib import Path

        arr = zarr3.create(path, data.shape, data.dtype, (64, 64, 64) if sharded else
                           (32, 32, 32), (32, 32, 32) if sharded else None,
                           codecs=[BytesCodec(), ZstdCodec(3)])
        arr[...] = data
        arr[10:50, 5:20, 60:70] = 7  # (partly covered chunks: merged, then encoded)
        return {str(f.relative_to(path)): f.read_bytes()
                for f in Path(path).rglob("*") if f.is_file()}

    monkeypatch.setattr(engine.ChunkedArray, "_slots", counted)
    into = write(str(tmp_path / "into"))
    assert made and all(n > 0 for n in made)
    monkeypatch.setattr(engine.ChunkedArray, "_slots", lambda self, coords: {})
    assert write(str(tmp_path / "new")) == into
    expected = data.copy()
    expected[10:50, 5:20, 60:70] = 7
    assert equal(ts_read(str(tmp_path / "into")), expected)
