"""The gzip level of written shard data (``compress_level``, ``level=``).

Oracles: TensorStore and CloudVolume read what each level wrote; Python's own
``gzip`` module decompresses every stored value; level 0 stores (values grow), level 1
compresses less than level 9 on compressible data.
"""

from __future__ import annotations

import gzip
import os
import random

import numpy as np
import pytest

from shardvol import Volume, copy, downsample
from shardvol.errors import InvalidArgumentError
from shardvol.sharding import ShardingSpec, ShardReader, ShardWriter, write_shards

from .oracles import cv_read, ts_read

SPEC = ShardingSpec(hash="murmurhash3_x86_128", minishard_bits=2, shard_bits=1,
                    minishard_index_encoding="gzip", data_encoding="gzip")


def compressible(rng: random.Random, n: int) -> bytes:
    """Bytes that gzip compresses about 3x at level 9, noticeably less at level 1."""
    words = [rng.randbytes(rng.randint(2, 6)) for _ in range(64)]
    out = bytearray()
    while len(out) < n:
        out += rng.choice(words) if rng.random() < 0.8 else rng.randbytes(1)
    return bytes(out[:n])


def stored_values(path: str, spec: ShardingSpec, keys: list[int]) -> dict[int, bytes]:
    """Each key's value as it is stored in its shard file (still gzip), by byte range."""
    where = ShardReader(path, spec).exists(keys, return_byte_range=True)
    out = {}
    for k, (name, start, size) in where.items():
        with open(os.path.join(path, name), "rb") as f:
            f.seek(start)
            out[k] = f.read(size)
    return out


def test_write_shards_at_each_level(tmp_path):
    rng = random.Random(5)
    data = {rng.getrandbits(64): compressible(rng, rng.randint(2000, 20000)) for _ in range(40)}
    totals = {}
    for level in (0, 1, 9, 12):
        path = str(tmp_path / f"l{level}")
        write_shards(path, SPEC, data, level=level)
        stored = stored_values(path, SPEC, list(data))
        for k, value in data.items():
            assert gzip.decompress(stored[k]) == value
        totals[level] = sum(map(len, stored.values()))
        got = ShardReader(path, SPEC).get_data_many(list(data))
        assert got == data
    raw = sum(map(len, data.values()))
    assert totals[0] > raw  # stored blocks: the data plus gzip's framing
    assert totals[1] > totals[9] >= totals[12]
    assert totals[9] < raw / 2


def test_shard_writer_level_applies_to_new_values_only(tmp_path):
    rng = random.Random(6)
    path = str(tmp_path)
    first = {k: compressible(rng, 8000) for k in range(10)}
    write_shards(path, SPEC, first, level=9)
    before = stored_values(path, SPEC, list(first))
    with ShardWriter(path, SPEC, level=0) as w:
        w.put(100, first[0])
    after = stored_values(path, SPEC, [*first, 100])
    assert all(after[k] == before[k] for k in first)  # kept as stored, not re-encoded
    assert len(after[100]) > len(first[0]) > len(after[0])
    assert gzip.decompress(after[100]) == first[0]


def make(path: str, level: int | None, data: np.ndarray) -> Volume:
    vol = Volume.create(path, size=data.shape[:3], data_type="uint8", chunk_size=(16, 16, 16),
                        encoding="raw", sharding="auto", compress_level=level)
    vol[...] = data
    return vol


def smooth_image(shape: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(3)
    x, y, z = np.meshgrid(*(np.arange(n) for n in shape), indexing="ij")
    base = (x + 2 * y + 3 * z) % 200
    return (base + rng.integers(0, 8, shape)).astype(np.uint8)[..., None]


def shard_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path)
               for f in fs if f.endswith(".shard"))


def test_volume_levels_read_by_tensorstore_and_cloudvolume(tmp_path):
    data = smooth_image((48, 40, 32))
    sizes = {}
    for level in (None, 0, 1, 9):
        path = str(tmp_path / f"l{level}")
        vol = make(path, level, data)
        assert vol.sharding.data_encoding == "gzip"
        assert vol.compress_level == (6 if level is None else level)
        assert np.array_equal(ts_read(path), data)
        assert np.array_equal(cv_read(path), data)
        assert np.array_equal(Volume(path)[...], data)
        sizes[level] = shard_bytes(path)
    assert sizes[0] > data.nbytes
    assert sizes[1] > sizes[None] >= sizes[9]
    # an unaligned overwrite at another level: TensorStore reads the merged volume
    vol = Volume(str(tmp_path / "l9"), compress_level=1)
    data[5:30, 7:19, 3:29] = 17
    vol[5:30, 7:19, 3:29] = 17
    assert np.array_equal(ts_read(str(tmp_path / "l9")), data)


@pytest.mark.parametrize("bad", [-1, 13, 2.0, "6", True])
def test_bad_levels(tmp_path, bad):
    make(str(tmp_path), None, smooth_image((16, 16, 16)))
    with pytest.raises(
        InvalidArgumentError, match=r"compress_level must be an integer in \[0, 12\]"
    ):
        Volume(str(tmp_path), compress_level=bad)


def test_downsample_writes_at_the_source_volumes_level(tmp_path):
    data = smooth_image((64, 64, 16))
    sizes = {}
    for level in (0, 9):
        path = str(tmp_path / f"l{level}")
        make(path, None, data)
        mips = downsample(Volume(path, compress_level=level), (2, 2, 1), 2, progress=False)
        assert all(m.sharding.data_encoding == "gzip" for m in mips)
        sizes[level] = [shard_bytes(os.path.join(path, m.scale.key)) for m in mips]
        for k, m in enumerate(mips, start=1):
            assert np.array_equal(ts_read(path, k), m[...])
    voxels = [int(np.prod(m.shape)) for m in mips]
    assert all(s0 > n > s9 for s0, n, s9 in zip(sizes[0], voxels, sizes[9]))



def test_copy_writes_at_its_level(tmp_path):
    src = str(tmp_path / "src")
    data = smooth_image((48, 40, 32))
    make(src, None, data)
    sizes = {}
    for level in (0, 9):
        dst = str(tmp_path / f"l{level}")
        out = copy(src, dst, compress_level=level, progress=False)
        assert out.sharding.data_encoding == "gzip"
        assert np.array_equal(ts_read(dst), data)
        sizes[level] = shard_bytes(dst)
    assert sizes[0] > data.nbytes > sizes[9]
    with pytest.raises(InvalidArgumentError, match="compress_level"):
        copy(src, str(tmp_path / "bad"), compress_level=13, progress=False)
    with pytest.raises(InvalidArgumentError, match="compress_level"):
        copy(src, str(tmp_path / "x.zarr"), compress_level=1, progress=False)
    assert not os.path.exists(tmp_path / "bad") and not os.path.exists(tmp_path / "x.zarr")


def test_create_checks_the_level_before_writing(tmp_path):
    with pytest.raises(InvalidArgumentError, match="compress_level"):
        Volume.create(str(tmp_path), size=(8, 8, 8), compress_level=-1)
    assert not os.listdir(tmp_path)
