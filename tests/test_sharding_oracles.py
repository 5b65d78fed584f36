"""shardvol.sharding against TensorStore and CloudVolume, in both directions.

For random sharding specs (identity and murmurhash3_x86_128, preshift /
minishard / shard bits including 0, raw and gzip for both encodings, empty
values, many keys): files written by one implementation are read by the other
and the decoded contents compared (not the bytes: the writers lay shards out
differently).
"""

from __future__ import annotations

import os
import random
import struct

import numpy as np
import pytest

from shardvol.kvstore import FileStore
from shardvol.sharding import (
    ShardingSpec,
    ShardReader,
    disassemble_shard,
    read_shard,
    synthesize_shards,
    update_shard,
    write_shards,
)

from .oracles import cv_shard_reader

ts = pytest.importorskip("tensorstore")
cv_sharding = pytest.importorskip("cloudvolume.datasource.precomputed.sharding")

SEEDS = range(12)


def random_spec(seed: int, rng: random.Random, max_preshift: int = 64) -> ShardingSpec:
    """Hash and encodings cycle through all 8 combinations with the seed; bits are random."""
    return ShardingSpec(
        hash=["identity", "murmurhash3_x86_128"][seed // 4 % 2],
        preshift_bits=rng.choice([0, 0, 1, 3, min(9, max_preshift)]),
        minishard_bits=rng.choice([0, 1, 3, 6]),
        shard_bits=rng.choice([0, 1, 2, 4]),
        minishard_index_encoding=["raw", "gzip"][seed % 2],
        data_encoding=["raw", "gzip"][seed // 2 % 2],
    )


def random_data(rng: random.Random, many: bool = False) -> dict[int, bytes]:
    n = 5000 if many else rng.randint(1, 150)
    keys = {rng.getrandbits(rng.choice([8, 20, 64])) for _ in range(n)}
    data = {k: rng.randbytes(rng.choice([0, 1, 7, 100, 1000])) for k in keys}
    data[rng.getrandbits(64)] = b""  # always at least one empty value
    return data


def case(seed: int, max_preshift: int = 64) -> tuple[ShardingSpec, dict[int, bytes]]:
    rng = random.Random(seed)
    return random_spec(seed, rng, max_preshift), random_data(rng, many=seed in (3, 7))


def absent_keys(data: dict[int, bytes]) -> list[int]:
    rng = random.Random(99)
    return [k for k in (rng.getrandbits(64) for _ in range(20)) if k not in data]


# -- TensorStore -------------------------------------------------------------------------------


def ts_kvstore(path: str, spec: ShardingSpec):
    return ts.KvStore.open(
        {
            "driver": "neuroglancer_uint64_sharded",
            "base": {"driver": "file", "path": path + "/"},
            "metadata": spec.to_dict(),
        }
    ).result()


def be(key: int) -> bytes:
    return struct.pack(">Q", key)


def ts_write(path: str, spec: ShardingSpec, data: dict[int, bytes]) -> None:
    txn = ts.Transaction()
    kv = ts_kvstore(path, spec).with_transaction(txn)
    for k, v in data.items():
        kv[be(k)] = v
    txn.commit_async().result()


def ts_read_all(path: str, spec: ShardingSpec, keys) -> dict[int, bytes]:
    kv = ts_kvstore(path, spec)
    futures = {k: kv.read(be(k)) for k in keys}
    out = {}
    for k, f in futures.items():
        r = f.result()
        if r.state == "value":
            out[k] = bytes(r.value)
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_tensorstore_reads_shardvol(tmp_path, seed):
    spec, data = case(seed)
    write_shards(FileStore(str(tmp_path)), spec, data)
    assert ts_read_all(str(tmp_path), spec, list(data) + absent_keys(data)) == data
    listed = ts_kvstore(str(tmp_path), spec).list().result()
    assert sorted(struct.unpack(">Q", k)[0] for k in listed) == sorted(data)


@pytest.mark.parametrize("seed", SEEDS)
def test_shardvol_reads_tensorstore(tmp_path, seed):
    spec, data = case(seed)
    ts_write(str(tmp_path), spec, data)
    files = sorted(f for f in os.listdir(tmp_path) if f.endswith(".shard"))
    assert files == sorted({spec.filename(k) for k in data})
    reader = ShardReader(str(tmp_path), spec)
    assert reader.get_data_many(list(data) + absent_keys(data)) == data
    assert sorted(np.concatenate([reader.list_labels(f) for f in files]).tolist()) == sorted(data)
    whole = {}
    for f in files:
        whole.update(read_shard(str(tmp_path), spec, int(f[: -len(".shard")], 16)))
        assert disassemble_shard(spec, (tmp_path / f).read_bytes(), f).keys() <= data.keys()
    assert whole == data
    found = reader.exists(list(data)[:10], return_byte_range=True)
    assert all(found[k][0] == spec.filename(k) for k in found)


@pytest.mark.parametrize("seed", SEEDS[:4])
def test_update_of_tensorstore_shards_read_by_tensorstore(tmp_path, seed):
    spec, data = case(seed)
    ts_write(str(tmp_path), spec, data)
    rng = random.Random(seed)
    keys = list(data)
    delete = set(rng.sample(keys, len(keys) // 3))
    put = {rng.getrandbits(64): rng.randbytes(rng.randint(0, 50)) for _ in range(20)}
    put.update(dict.fromkeys(rng.sample(keys, min(5, len(keys))), b"replaced"))
    update_shard(FileStore(str(tmp_path)), spec, put, delete)
    model = {k: v for k, v in data.items() if k not in delete}
    model.update(put)
    assert ts_read_all(str(tmp_path), spec, list(data) + list(put)) == model


# -- CloudVolume -------------------------------------------------------------------------------


def cv_spec(spec: ShardingSpec):
    return cv_sharding.ShardingSpecification.from_dict(spec.to_dict())


def cv_reader(path: str, spec: ShardingSpec):
    """CloudVolume's ShardReader on a local directory, its disk cache disabled."""
    return cv_shard_reader(path, spec.to_dict())


@pytest.mark.parametrize("seed", SEEDS)
def test_cloudvolume_reads_shardvol(tmp_path, seed):
    spec, data = case(seed, max_preshift=63)
    files = write_shards(FileStore(str(tmp_path)), spec, data)
    got = cv_reader(str(tmp_path), spec).get_data(list(data) + absent_keys(data))
    # CloudVolume's get_data maps a byte range back to one key, so of several empty
    # values at one offset it returns only one: empty values are checked by
    # disassemble_shard below.
    assert {k: v for k, v in got.items() if v} == {k: v for k, v in data.items() if v}
    assert all(got.get(k) in (b"", None) for k, v in data.items() if not v)
    reader = cv_reader(str(tmp_path), spec)
    whole = {}
    for f in files:
        whole.update(reader.disassemble_shard((tmp_path / f).read_bytes()))
        assert reader.get_filename(next(k for k in data if spec.filename(k) == f)) == f
    assert {int(k): v for k, v in whole.items()} == data


@pytest.mark.parametrize("seed", SEEDS)
def test_shardvol_reads_cloudvolume(tmp_path, seed):
    spec, data = case(seed, max_preshift=63)
    files = cv_spec(spec).synthesize_shards(data)
    assert sorted(files) == sorted(synthesize_shards(spec, data))
    for name, blob in files.items():
        (tmp_path / name).write_bytes(blob)
    assert ShardReader(str(tmp_path), spec).get_data_many(list(data) + absent_keys(data)) == data
    whole = {}
    for name, blob in files.items():
        whole.update(disassemble_shard(spec, blob, name))
    assert whole == data
