"""shardvol.sharding: spec, known answers, reader batching and caches, updates, bad input.

Oracles here: the `mmh3` package and plain Python integers (hashing, shard
numbers), TensorStore's golden shard, and a dict model of the store's contents.
TensorStore / CloudVolume round trips are in test_sharding_oracles.py.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import struct
import uuid
import zlib
from pathlib import Path
from typing import ClassVar

import mmh3
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardvol import _reference
from shardvol.compression import gzip_compress
from shardvol.errors import InfoError, InvalidArgumentError, ShardFormatError
from shardvol.kvstore import FileStore, KVStore, MemoryStore, PrefixStore
from shardvol.sharding import (
    ShardingSpec,
    ShardReader,
    ShardWriter,
    disassemble_shard,
    encode_shard,
    read_shard,
    synthesize_shards,
    update_shard,
    write_shards,
)
from shardvol.sharding.format import decode_minishard_indexes, decode_shard_index

from .stores import Recording

# a copy of TensorStore's golden shard; see its SOURCE.txt
GOLDEN = (
    Path(__file__).parent / "data" / "testdata" / "google__tensorstore__golden_uint64_sharded_raw"
)
MURMUR = "murmurhash3_x86_128"


def spec_of(**kw) -> ShardingSpec:
    return ShardingSpec(**{"hash": MURMUR, "minishard_bits": 2, "shard_bits": 1, **kw})


def memory_store() -> MemoryStore:
    return MemoryStore(f"memory://{uuid.uuid4().hex}")


def random_data(rng: random.Random, n: int, max_len: int = 40) -> dict[int, bytes]:
    keys = {rng.getrandbits(64) for _ in range(n)} | {0, 2**64 - 1}
    return {k: rng.randbytes(rng.randint(0, max_len)) for k in keys}


def reference_location(spec: ShardingSpec, key: int) -> tuple[int, int]:
    """(shard, minishard) from the spec's words, with Python ints and the mmh3 package."""
    x = key >> spec.preshift_bits if spec.preshift_bits < 64 else 0
    if spec.hash == MURMUR:
        x = mmh3.hash64(x.to_bytes(8, "little"), 0, False)[0] % 2**64
    minishard = x & ((1 << spec.minishard_bits) - 1)
    shard = (x >> spec.minishard_bits) & ((1 << spec.shard_bits) - 1)
    return shard, minishard


# -- ShardingSpec ---------------------------------------------------------------------------


class TestSpec:
    def test_dict_and_json_round_trip(self):
        d = {
            "@type": "neuroglancer_uint64_sharded_v1",
            "preshift_bits": 3,
            "hash": MURMUR,
            "minishard_bits": 6,
            "shard_bits": 15,
            "minishard_index_encoding": "gzip",
            "data_encoding": "raw",
        }
        spec = ShardingSpec.from_dict(d)
        assert spec.to_dict() == d
        assert ShardingSpec.from_json(spec.to_json()) == spec
        assert ShardingSpec.from_json(json.dumps(d).encode()) == spec
        assert spec.index_length == 16 * 64 and spec.num_shards == 2**15

    def test_encodings_default_to_raw(self):
        spec = ShardingSpec.from_dict(
            {
                "@type": "neuroglancer_uint64_sharded_v1",
                "preshift_bits": 0,
                "hash": "identity",
                "minishard_bits": 0,
                "shard_bits": 0,
            }
        )
        assert spec.minishard_index_encoding == spec.data_encoding == "raw"

    def test_is_immutable(self):
        with pytest.raises(AttributeError):
            spec_of().shard_bits = 3

    @pytest.mark.parametrize(
        "change, field",
        [
            ({"@type": "neuroglancer_uint64_sharded_v2"}, "@type"),
            ({"preshift_bits": -1}, "preshift_bits"),
            ({"preshift_bits": 65}, "preshift_bits"),
            ({"preshift_bits": 2.0}, "preshift_bits"),
            ({"preshift_bits": True}, "preshift_bits"),
            ({"minishard_bits": 33}, "minishard_bits"),
            ({"shard_bits": "3"}, "shard_bits"),
            ({"shard_bits": 65}, "shard_bits"),
            ({"preshift_bits": 30, "minishard_bits": 20, "shard_bits": 15}, "<= 64"),
            ({"hash": "md5"}, "hash"),
            ({"data_encoding": "zstd"}, "data_encoding"),
            ({"minishard_index_encoding": None}, "minishard_index_encoding"),
            ({"extra": 1}, "extra"),
        ],
    )
    def test_invalid_fields_are_named(self, change, field):
        d = {**spec_of().to_dict(), **change}
        with pytest.raises(InfoError, match=field.replace("@", "@")):
            ShardingSpec.from_dict(d)

    @pytest.mark.parametrize(
        "missing", ["@type", "hash", "preshift_bits", "minishard_bits", "shard_bits"]
    )
    def test_missing_field_is_named(self, missing):
        d = spec_of().to_dict()
        del d[missing]
        with pytest.raises(InfoError, match=f"{missing} is missing"):
            ShardingSpec.from_dict(d)

    def test_bad_json(self):
        with pytest.raises(InfoError, match="JSON"):
            ShardingSpec.from_json("{")
        with pytest.raises(InfoError, match="object"):
            ShardingSpec.from_json("[1]")

    @pytest.mark.parametrize("seed", range(12))
    def test_shard_and_minishard_match_reference(self, seed):
        rng = random.Random(seed)
        hash_ = rng.choice(["identity", MURMUR])
        pre = rng.choice([0, 0, 1, 7, 63, 64])
        mini = rng.randint(0, min(32, 64 - pre))
        shard = rng.randint(0, 64 - pre - mini)
        spec = ShardingSpec(preshift_bits=pre, hash=hash_, minishard_bits=mini, shard_bits=shard)
        keys = [rng.getrandbits(64) for _ in range(300)] + [0, 1, 2**63, 2**64 - 1]
        shards, minishards = spec.shard_and_minishard(np.array(keys, dtype=np.uint64))
        assert shards.dtype == minishards.dtype == np.uint64
        expected = [reference_location(spec, k) for k in keys]
        assert list(zip(shards.tolist(), minishards.tolist())) == expected
        # Python-int, numpy-int and list inputs agree
        assert spec.shard_and_minishard(keys)[0].tolist() == shards.tolist()
        assert spec.filename(keys[0]) == spec.shard_filename(expected[0][0])

    @pytest.mark.parametrize(
        "shard_bits, number, name",
        [
            (0, 0, "0.shard"),
            (1, 1, "1.shard"),
            (4, 15, "f.shard"),
            (5, 3, "03.shard"),
            (8, 10, "0a.shard"),
            (9, 300, "12c.shard"),
            (64, 2**64 - 1, "ffffffffffffffff.shard"),
        ],
    )
    def test_shard_filenames(self, shard_bits, number, name):
        spec = ShardingSpec(shard_bits=shard_bits)
        assert spec.shard_filename(number) == name
        with pytest.raises(InvalidArgumentError, match="outside"):
            spec.shard_filename(spec.num_shards)

    def test_identity_filename(self):
        spec = ShardingSpec(hash="identity", preshift_bits=2, minishard_bits=3, shard_bits=6)
        key = (0b101011 << 3 | 0b011) << 2 | 0b11
        assert spec.filename(key) == "2b.shard"

    @pytest.mark.parametrize("bad", [[-1], [1.5], [2**64], ["7"], np.array([1.0]), np.array([-3])])
    def test_bad_keys(self, bad):
        with pytest.raises(InvalidArgumentError):
            spec_of().shard_and_minishard(bad)


# -- known answers ---------------------------------------------------------------------------


class TestGolden:
    """The shard TensorStore's encoder test asserts, byte for byte."""

    def spec(self):
        return ShardingSpec.from_json((GOLDEN / "sharding.json").read_text())

    def expected(self):
        return {
            int(k): bytes(v)
            for k, v in json.loads((GOLDEN / "expected_chunks.json").read_text()).items()
        }

    def test_reader(self):
        reader = ShardReader(str(GOLDEN), self.spec())
        assert reader.get_data_many([2, 3, 8, 0, 1, 9, 2**64 - 1]) == self.expected()
        assert reader.get_data(3) == self.expected()[3]
        assert reader.get_data(4) is None
        assert reader.list_labels("0.shard").tolist() == sorted(self.expected())

    def test_read_and_disassemble(self):
        spec = self.spec()
        assert read_shard(str(GOLDEN), spec, 0) == self.expected()
        blob = (GOLDEN / "0.shard").read_bytes()
        assert disassemble_shard(spec, blob) == self.expected()

    def test_encode_round_trip(self):
        spec = self.spec()
        blob = encode_shard(spec, self.expected())
        assert len(blob) == len((GOLDEN / "0.shard").read_bytes())  # same content, our layout
        assert disassemble_shard(spec, blob) == self.expected()


# -- writing and reading ---------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["raw", "gzip"])
@pytest.mark.parametrize("bits", [(0, 0, 0), (0, 3, 2), (2, 1, 4), (0, 6, 0)])
def test_write_then_read(encoding, bits):
    pre, mini, shard = bits
    spec = spec_of(
        preshift_bits=pre,
        minishard_bits=mini,
        shard_bits=shard,
        minishard_index_encoding=encoding,
        data_encoding=encoding,
    )
    store = memory_store()
    data = random_data(random.Random(hash(bits)), 400)
    written = write_shards(store, spec, data)
    assert written == sorted(store.list()) == sorted({spec.filename(k) for k in data})
    reader = ShardReader(store, spec)
    absent = [5, 6, 7, 11]
    got = reader.get_data_many(list(data) + [k for k in absent if k not in data])
    assert got == data
    for k in list(data)[:20]:
        assert reader.get_data(k) == data[k]
    assert sorted(np.concatenate([reader.list_labels(f) for f in written]).tolist()) == sorted(data)
    everything = {}
    for n in range(spec.num_shards):
        everything.update(read_shard(store, spec, n))
    assert everything == data
    assert reader.get_data_many([]) == {}


def test_get_data_many_accepts_arrays_and_duplicates():
    spec = spec_of()
    store = memory_store()
    data = {1: b"a", 2: b"bb", 3: b""}
    write_shards(store, spec, data)
    reader = ShardReader(store, spec)
    assert reader.get_data_many(np.array([3, 1, 1, 9], dtype=np.uint64)) == {1: b"a", 3: b""}
    assert reader.get_data_many(iter([2, 2])) == {2: b"bb"}
    assert reader.get_data(np.uint64(2)) == b"bb"


def test_synthesize_is_deterministic():
    spec = spec_of(minishard_bits=3, data_encoding="gzip", minishard_index_encoding="gzip")
    data = random_data(random.Random(1), 200)
    shuffled = dict(random.Random(2).sample(sorted(data.items()), len(data)))
    assert synthesize_shards(spec, data) == synthesize_shards(spec, shuffled)


def test_keys_sorted_within_minishards():
    spec = ShardingSpec(hash="identity", minishard_bits=1)
    blob = encode_shard(spec, {6: b"x", 2: b"y", 4: b"z", 3: b"w"})
    msi_start, msi_end = struct.unpack_from("<QQ", blob, 0)
    ids = np.frombuffer(blob[32 + msi_start : 32 + msi_end], "<u8").reshape(3, -1)[0]
    assert np.cumsum(ids).tolist() == [2, 4, 6]


def test_encode_shard_rejects_several_shards():
    spec = ShardingSpec(hash="identity", shard_bits=1)
    with pytest.raises(InvalidArgumentError, match="several shards"):
        encode_shard(spec, {0: b"a", 1: b"b"})


def test_empty_shard_encodes_to_zero_index():
    spec = spec_of(minishard_bits=2)
    blob = encode_shard(spec, {})
    assert blob == bytes(64)
    assert disassemble_shard(spec, blob) == {}
    store = memory_store()
    store.set("0.shard", blob)
    assert ShardReader(store, spec).get_data_many([1, 2]) == {}


def test_exists_like_cloudvolume():
    spec = spec_of(data_encoding="gzip")
    store = memory_store()
    data = {10: b"ten" * 10, 20: b"twenty", 30: b""}
    write_shards(store, spec, data)
    reader = ShardReader(store, spec)
    assert reader.exists(10) == spec.filename(10)
    assert reader.exists(11) is None
    assert reader.exists([10, 11, 30]) == {10: spec.filename(10), 11: None, 30: spec.filename(30)}
    ranges = reader.exists([10, 20, 30, 11], return_byte_range=True)
    assert ranges[11] is None
    for k, value in data.items():
        filename, start, length = ranges[k]
        assert store.get(filename, (start, start + length)) == gzip_compress(value)
    assert reader.exists(20, return_byte_range=True) == ranges[20]


def test_reader_on_paths_urls_and_prefix_stores(tmp_path):
    spec = spec_of()
    data = random_data(random.Random(3), 50)
    base = FileStore(str(tmp_path))
    write_shards(PrefixStore(base, "skeletons"), spec, data)
    for where in (
        str(tmp_path / "skeletons"),
        "file://" + str(tmp_path / "skeletons"),
        PrefixStore(base, "skeletons"),
    ):
        assert ShardReader(where, spec).get_data_many(list(data)) == data
    assert ShardReader(str(tmp_path / "skeletons"), spec.to_dict()).get_data_many([0]) == {
        0: data[0]
    }


def test_batching_one_index_read_per_shard_and_coalesced_data():
    spec = spec_of(minishard_bits=4, shard_bits=1, minishard_index_encoding="gzip")
    base = memory_store()
    data = random_data(random.Random(4), 2000, 100)
    write_shards(base, spec, data)
    store = Recording(base)
    reader = ShardReader(store, spec)
    keys = list(data)[::2]
    assert reader.get_data_many(keys) == {k: data[k] for k in keys}
    reqs = store.requests()
    index_reads = [r for r in reqs if r[1] == (0, spec.index_length)]
    assert sorted(k for k, _ in index_reads) == ["0.shard", "1.shard"]
    # minishard indexes are contiguous in our layout: one read per shard, data likewise
    assert len(store.calls) == 3
    assert len(reqs) == 2 + 2 + 2
    # warm: only the data is read
    store.calls.clear()
    reader.minishard_index_cache.resize(64)
    reader.get_data_many(keys)
    store.calls.clear()
    assert reader.get_data_many(keys) == {k: data[k] for k in keys}
    assert len(store.requests()) == 2


def test_coalescing_respects_gap_and_max_read():
    spec = ShardingSpec(hash="identity", minishard_bits=0)
    base = memory_store()
    data = {k: bytes([k]) * 1000 for k in range(100)}
    write_shards(base, spec, data)
    store = Recording(base)
    keys = list(range(0, 100, 10))
    reader = ShardReader(store, spec, coalesce_gap=0)
    assert reader.get_data_many(keys) == {k: data[k] for k in keys}
    assert len(store.calls[-1]) == 10  # 9000-byte gaps: nothing merges
    reader = ShardReader(store, spec, coalesce_gap=10_000, max_read=25_000)
    assert reader.get_data_many(keys) == {k: data[k] for k in keys}
    data_reads = store.calls[-1]
    assert 3 <= len(data_reads) <= 4
    assert all(r[1] - r[0] <= 25_000 for _, r in data_reads)
    reader = ShardReader(store, spec, coalesce_gap=10_000)
    assert reader.get_data_many(keys) == {k: data[k] for k in keys}
    assert len(store.calls[-1]) == 1


def test_default_coalesce_gap_depends_on_the_store(tmp_path):
    from shardvol.kvstore.fsspec_store import FsspecStore

    spec = spec_of()
    local = 16 * 1024
    assert ShardReader(str(tmp_path), spec).coalesce_gap == local
    assert ShardReader(PrefixStore(memory_store(), "a"), spec).coalesce_gap == local
    assert ShardReader(FsspecStore(f"memory://{uuid.uuid4().hex}"), spec).coalesce_gap > local
    assert ShardReader(str(tmp_path), spec, coalesce_gap=5).coalesce_gap == 5


def test_caches_are_lru_resizable_and_invalidated():
    spec = spec_of(minishard_bits=3, shard_bits=2)
    store = memory_store()
    data = random_data(random.Random(5), 300)
    write_shards(store, spec, data)
    reader = ShardReader(store, spec, shard_index_cache_size=2, minishard_index_cache_size=5)
    assert reader.get_data_many(list(data)) == data
    assert len(reader.shard_index_cache) == 2 and len(reader.minishard_index_cache) == 5
    reader.shard_index_cache.resize(1)
    reader.minishard_index_cache.resize(0)
    assert len(reader.shard_index_cache) == 1 and len(reader.minishard_index_cache) == 0
    reader.shard_index_cache.resize(10)
    reader.minishard_index_cache.resize(100)
    reader.get_data_many(list(data))
    assert len(reader.shard_index_cache) == 4
    # a rewrite behind the reader's back needs invalidate() (stale indexes are not checked)
    key = next(iter(data))
    fn = spec.filename(key)
    write_shards(store, spec, {key: b"new"})
    assert fn in reader.shard_index_cache
    reader.invalidate(fn)
    assert fn not in reader.shard_index_cache
    assert reader.get_data(key) == b"new"
    write_shards(store, spec, dict.fromkeys(data, b"x"))
    reader.invalidate()
    assert len(reader.shard_index_cache) == len(reader.minishard_index_cache) == 0
    assert reader.get_data_many(list(data)) == dict.fromkeys(data, b"x")
    with pytest.raises(ValueError):
        reader.minishard_index_cache.resize(-1)


def test_cached_shard_indexes_do_not_keep_the_buffer_they_were_read_into():
    # (a FileStore reads into pooled blocks of 2 MiB or more: a view would keep one alive)
    spec = spec_of(minishard_bits=3, shard_bits=2)
    buf = bytearray(range(256)) * (spec.index_length // 256 + 1)
    index = decode_shard_index(memoryview(buf)[: spec.index_length], spec, "0.shard")
    assert index.shape == (8, 2) and not np.shares_memory(index, np.frombuffer(buf, np.uint8))


def test_gzip_values_inflating_past_max_value_size_are_shard_format_errors():
    zeros = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = zeros.compress(bytes(256 << 20)) + zeros.flush()  # 256 MiB of zeros, 250 KB
    raw, gz = spec_of(), spec_of(data_encoding="gzip")
    store = memory_store()
    write_shards(store, raw, {5: bomb, 6: gzip_compress(b"fine")})  # the same layout as gz
    reader = ShardReader(store, gz, max_value_size=1 << 20)
    assert reader.get_data(6) == b"fine"
    with pytest.raises(ShardFormatError, match="data of key 5: gzip data decodes to more than"):
        reader.get_data_many([5, 6])
    with pytest.raises(ShardFormatError, match=r"key 5.*more than 1048576 bytes"):
        dict(reader.iter_data_many([5]))
    [(_, stored)] = reader.iter_data_many([5], decode=False)
    with pytest.raises(ShardFormatError, match="v: gzip data decodes to more than"):
        reader.decode_value(stored, "v")


def test_absent_shards_are_cached_until_invalidated():
    spec = spec_of(shard_bits=3)
    base = memory_store()
    store = Recording(base)
    reader = ShardReader(store, spec)
    assert reader.get_data_many([1, 2, 3]) == {}
    n = len(store.requests())
    assert reader.get_data_many([1, 2, 3]) == {}
    assert len(store.requests()) == n
    write_shards(base, spec, {1: b"one"}, reader=reader)
    assert reader.get_data(1) == b"one"


# -- obsolete layout ---------------------------------------------------------------------------


def split_obsolete(store: KVStore, spec: ShardingSpec) -> None:
    """Rewrite every <n>.shard as the obsolete <n>.index + <n>.data pair."""
    for fn in [k for k in store.list() if k.endswith(".shard")]:
        blob = store.get(fn)
        stem = fn[: -len(".shard")]
        store.set(stem + ".index", blob[: spec.index_length])
        store.set(stem + ".data", blob[spec.index_length :])
        store.delete(fn)


@pytest.mark.parametrize("encoding", ["raw", "gzip"])
def test_obsolete_index_and_data_files(encoding):
    spec = spec_of(minishard_index_encoding=encoding, data_encoding=encoding)
    store = memory_store()
    data = random_data(random.Random(6), 100)
    write_shards(store, spec, data)
    split_obsolete(store, spec)
    assert not [k for k in store.list() if k.endswith(".shard")]
    reader = ShardReader(store, spec)
    assert reader.get_data_many(list(data)) == data
    k = next(iter(data))
    filename, start, length = reader.exists(k, return_byte_range=True)
    assert filename.endswith(".data")
    assert len(store.get(filename, (start, start + length))) == length
    assert read_shard(store, spec, 0) | read_shard(store, spec, 1) == data
    # an update converts the shard to the current layout
    update_shard(store, spec, {k: b"changed"}, reader=reader)
    fn = spec.filename(k)
    assert store.exists(fn) and not store.exists(fn[:-6] + ".index")
    assert reader.get_data_many(list(data)) == {**data, k: b"changed"}


def test_emptied_shard_does_not_bring_back_its_obsolete_files():
    """A shard rewritten whole leaves the obsolete pair behind (ignored while the .shard
    exists); deleting every entry afterwards must not make the old entries readable again."""
    spec = spec_of(shard_bits=0)
    store = memory_store()
    write_shards(store, spec, {1: b"old", 2: b"old"})
    split_obsolete(store, spec)
    write_shards(store, spec, {1: b"new"})
    reader = ShardReader(store, spec)
    assert reader.get_data_many([1, 2]) == {1: b"new"}
    update_shard(store, spec, {}, delete=[1], reader=reader)
    assert reader.get_data_many([1, 2]) == {}
    assert read_shard(store, spec, 0) == {}


def test_a_shard_delete_cut_short_before_its_data_files_leaves_readable_shards():
    """delete_shards removes the .shard files and the obsolete pairs' .index files first,
    the .data files after: cut short between the two (the .data deletes fail), the store
    reads as having no such shards, not as a broken pair (an .index without its .data)."""
    from shardvol.errors import StoreError
    from shardvol.sharding.reader import delete_shards, shard_files

    class DataDeletesFail(MemoryStore):
        def delete(self, key):
            if key.endswith(".data"):
                raise StoreError(f"cannot delete {key!r}")
            super().delete(key)

    spec = spec_of(shard_bits=1)
    store = DataDeletesFail(f"memory://{uuid.uuid4().hex}")
    data = random_data(random.Random(8), 60)
    write_shards(store, spec, data)
    split_obsolete(store, spec)
    write_shards(store, spec, dict.fromkeys(list(data)[:5], b"new"))  # .shard beside the pair
    with pytest.raises(StoreError, match=r"\.data"):
        delete_shards(store, shard_files(store))
    assert sorted(store.list()) == ["0.data", "1.data"]
    assert ShardReader(store, spec).get_data_many(list(data)) == {}
    assert shard_files(store) == []


def test_truncated_obsolete_index_is_an_error():
    spec = spec_of(shard_bits=0)
    store = memory_store()
    write_shards(store, spec, {1: b"a"})
    split_obsolete(store, spec)
    store.set("0.index", store.get("0.index")[:-1])
    for read in (lambda: ShardReader(store, spec).get_data(1), lambda: read_shard(store, spec, 0)):
        with pytest.raises(ShardFormatError, match=r"0\.index: shard index truncated"):
            read()


def test_obsolete_index_without_data_is_an_error():
    spec = spec_of(shard_bits=0)
    store = memory_store()
    write_shards(store, spec, {1: b"a"})
    split_obsolete(store, spec)
    store.delete("0.data")
    with pytest.raises(ShardFormatError, match=r"0\.data"):
        ShardReader(store, spec).get_data(1)
    with pytest.raises(ShardFormatError, match=r"0\.data"):
        read_shard(store, spec, 0)


# -- updates -----------------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["raw", "gzip"])
def test_update_shard_keeps_everything_else(encoding):
    spec = spec_of(
        minishard_bits=3, shard_bits=2, data_encoding=encoding, minishard_index_encoding=encoding
    )
    store = memory_store()
    rng = random.Random(7)
    model = random_data(rng, 200)
    write_shards(store, spec, model)
    reader = ShardReader(store, spec)
    reader.get_data_many(list(model))
    for _step in range(6):
        keys = list(model)
        put = {rng.choice(keys): rng.randbytes(5) for _ in range(10)}  # replacements
        put.update({rng.getrandbits(64): rng.randbytes(rng.randint(0, 9)) for _ in range(10)})
        delete = {rng.choice(keys) for _ in range(15)} - set(put) | {12345}  # absent too
        touched = update_shard(store, spec, put, delete, reader=reader)
        for k in delete:
            model.pop(k, None)
        model.update(put)
        assert set(touched) == {spec.filename(k) for k in set(put) | delete}
        assert reader.get_data_many(list(model) + list(delete)) == model
        assert ShardReader(store, spec).get_data_many(list(model)) == model


def test_update_shard_deletes_emptied_shards_and_creates_new_ones():
    spec = ShardingSpec(hash="identity", shard_bits=2)
    store = memory_store()
    update_shard(store, spec, {0: b"a", 1: b"b"})
    assert store.list() == ["0.shard", "1.shard"]
    update_shard(store, spec, {}, {0})
    assert store.list() == ["1.shard"]
    update_shard(store, spec, {5: b"c"}, {1})
    assert store.list() == ["1.shard"]
    assert read_shard(store, spec, 1) == {5: b"c"}


def test_update_applies_delete_before_put():
    spec = spec_of()
    store = memory_store()
    update_shard(store, spec, {1: b"a"}, {1})
    assert ShardReader(store, spec).get_data(1) == b"a"


def test_update_keeps_stored_bytes_of_untouched_entries():
    spec = spec_of(shard_bits=0, data_encoding="gzip")
    store = memory_store()
    write_shards(store, spec, {1: b"a" * 100, 2: b"b"})
    reader = ShardReader(store, spec)
    before = reader.exists(1, return_byte_range=True)
    stored = store.get(before[0], (before[1], before[1] + before[2]))
    update_shard(store, spec, {3: b"c"}, reader=reader)
    after = reader.exists(1, return_byte_range=True)
    assert store.get(after[0], (after[1], after[1] + after[2])) == stored


def test_update_refuses_to_rewrite_a_corrupt_shard():
    spec = spec_of(shard_bits=0)
    store = memory_store()
    write_shards(store, spec, {1: b"a"})
    store.set("0.shard", store.get("0.shard")[:20])
    with pytest.raises(ShardFormatError, match=r"0\.shard"):
        update_shard(store, spec, {2: b"b"})
    assert len(store.get("0.shard")) == 20


def test_shard_writer_collects_then_flushes():
    spec = spec_of()
    store = memory_store()
    reader = ShardReader(store, spec)
    write_shards(store, spec, {1: b"one", 2: b"two"})
    assert reader.get_data(1) == b"one"
    with ShardWriter(store, spec, reader=reader) as w:
        w.put(3, b"three")
        w.delete(1)
        w.put(4, b"x")
        w.delete(4)
        assert reader.get_data(3) is None  # nothing written yet
    assert reader.get_data_many([1, 2, 3, 4]) == {2: b"two", 3: b"three"}


def _update_worker(root: str, offset: int, n: int) -> None:
    spec = ShardingSpec(hash=MURMUR, minishard_bits=2, shard_bits=0, data_encoding="gzip")
    store = FileStore(root, fsync=False)
    for i in range(n):
        update_shard(
            store, spec, {offset + i: f"{offset}-{i}".encode()}, {offset + i - 1} if i else ()
        )


def test_concurrent_updates_from_processes_lose_nothing(tmp_path):
    spec = ShardingSpec(hash=MURMUR, minishard_bits=2, shard_bits=0, data_encoding="gzip")
    ctx = multiprocessing.get_context("spawn")
    n = 15
    procs = [
        ctx.Process(target=_update_worker, args=(str(tmp_path), 1000 * p, n)) for p in (1, 2, 3)
    ]
    for p in procs:
        p.start()
    _update_worker(str(tmp_path), 0, n)
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    got = read_shard(str(tmp_path), spec, 0)
    # each writer deletes its previous key, so exactly its last key survives
    assert got == {1000 * p + n - 1: f"{1000 * p}-{n - 1}".encode() for p in range(4)}
    assert sorted(os.listdir(tmp_path)) == [".shardvol-locks", "0.shard"]  # no temp files left


# -- bad input ---------------------------------------------------------------------------------


_WORDS = st.one_of(st.integers(0, 300), st.integers(2**64 - 300, 2**64 - 1), st.just(0),
                   st.integers(0, 2**64 - 1))


@settings(max_examples=300, deadline=None)
@given(indexes=st.lists(st.lists(st.tuples(_WORDS, _WORDS, _WORDS), max_size=6), max_size=4),
       base=st.one_of(st.integers(0, 1000), st.integers(0, 2**64 - 1)))
def test_minishard_index_decoding_matches_the_reference(indexes, base):
    """The C decoder against a pure-Python reading of the format, valid or not."""
    bufs = [b"".join(struct.pack("<Q", w) for column in zip(*e) for w in column) if e else b""
            for e in indexes]
    spec = ShardingSpec(hash="identity", minishard_bits=2, shard_bits=0,
                        minishard_index_encoding="raw")
    expected, failure = [], None
    for m, buf in enumerate(bufs):
        try:
            expected.append(_reference.minishard_index_decode(buf, base))
        except ValueError as e:
            failure = m, *e.args
            break
    if failure is None:
        got = decode_minishard_indexes(bufs, spec, base, "s.shard", list(range(len(bufs))))
        assert [tuple(v.tolist() for v in msi) for msi in got] == [tuple(e) for e in expected]
    else:
        m, kind, entry = failure
        text = {"duplicate": "duplicate key", "key overflow": "key deltas overflow",
                "offset overflow": "data offset/size sums overflow"}[kind]
        with pytest.raises(ShardFormatError,
                           match=rf"s\.shard: minishard {m}: {text}.* {entry}\)?$"):
            decode_minishard_indexes(bufs, spec, base, "s.shard", list(range(len(bufs))))


def put_u64(blob: bytes, offset: int, value: int) -> bytes:
    return blob[:offset] + struct.pack("<Q", value) + blob[offset + 8 :]


class TestMalformedShards:
    """Every malformed shard raises ShardFormatError naming the file and minishard."""

    spec = ShardingSpec(hash="identity", minishard_bits=1, shard_bits=0)
    data: ClassVar = {2: b"abcd", 4: b"efg", 6: b"hi", 3: b"jk"}  # minishard 0: 2, 4, 6; 1: 3

    def shard(self, spec=None) -> bytes:
        return encode_shard(spec or self.spec, self.data)

    def msi_range(self, blob: bytes, minishard: int) -> tuple[int, int]:
        start, end = struct.unpack_from("<QQ", blob, 16 * minishard)
        n = self.spec.index_length
        return n + start, n + end

    def check(self, blob: bytes, match: str, spec=None, keys=(2, 4, 6, 3)) -> None:
        spec = spec or self.spec
        store = memory_store()
        store.set("0.shard", blob)
        with pytest.raises(ShardFormatError, match=match):
            ShardReader(store, spec).get_data_many(list(keys))
        with pytest.raises(ShardFormatError, match=match):
            disassemble_shard(spec, blob, "0.shard")
        with pytest.raises(ShardFormatError, match=match):
            read_shard(store, spec, 0)

    def test_valid(self):
        store = memory_store()
        store.set("0.shard", self.shard())
        assert ShardReader(store, self.spec).get_data_many(list(self.data)) == self.data

    def test_truncated_shard_index(self):
        self.check(self.shard()[:20], r"0\.shard: shard index truncated")
        self.check(b"", r"0\.shard: shard index truncated")

    def test_minishard_index_range_past_end_of_file(self):
        blob = self.shard()
        self.check(put_u64(blob, 8, len(blob)), r"0\.shard: minishard 0: .*past the end")
        self.check(put_u64(blob, 8, 2**63 + 5), r"0\.shard: minishard 0: .*past the end")
        self.check(put_u64(blob, 24, 2**64 - 1), r"0\.shard: minishard 1: .*past the end")

    def test_minishard_index_end_before_start(self):
        blob = self.shard()
        start, _ = struct.unpack_from("<QQ", blob, 16)
        self.check(put_u64(blob, 24, start - 1), r"0\.shard: minishard 1: .*ends before it starts")

    def test_minishard_index_length_not_multiple_of_24(self):
        blob = self.shard()
        _, end = struct.unpack_from("<QQ", blob, 0)
        self.check(put_u64(blob, 8, end - 1), r"0\.shard: minishard 0: .*not a multiple of 24")

    def test_key_delta_overflow(self):
        blob = self.shard()
        a, _ = self.msi_range(blob, 0)
        self.check(put_u64(blob, a + 8, 2**64 - 1), r"0\.shard: minishard 0: key deltas overflow")

    def test_offset_delta_overflow(self):
        blob = self.shard()
        a, _ = self.msi_range(blob, 0)
        self.check(
            put_u64(blob, a + 24 + 8, 2**64 - 3),
            r"0\.shard: minishard 0: data offset/size sums overflow",
        )
        self.check(
            put_u64(blob, a + 24, 2**64 - 10),
            r"0\.shard: minishard 0: data offset/size sums overflow",
        )

    def test_size_overflow(self):
        blob = self.shard()
        a, _ = self.msi_range(blob, 0)
        self.check(
            put_u64(blob, a + 48, 2**64 - 1),
            r"0\.shard: minishard 0: data offset/size sums overflow",
        )

    def test_data_range_past_end_of_file(self):
        blob = self.shard()
        a, _ = self.msi_range(blob, 0)
        self.check(
            put_u64(blob, a + 48 + 16, 10**9),
            r"0\.shard: minishard 0: data of key 6 .*past the end",
        )
        self.check(
            put_u64(blob, a + 24 + 8, 10**12),
            r"0\.shard: minishard 0: data of key 4 .*past the end",
        )

    def test_duplicate_keys(self):
        blob = self.shard()
        a, _ = self.msi_range(blob, 0)
        self.check(put_u64(blob, a + 8, 0), r"0\.shard: minishard 0: duplicate key 2")

    def test_key_in_wrong_minishard(self):
        blob = self.shard()
        a, _ = self.msi_range(blob, 0)
        blob = put_u64(blob, a, 1)  # keys 1, 3, 5 listed in minishard 0
        with pytest.raises(
            ShardFormatError, match=r"0\.shard: minishard 0: key 1 belongs in minishard 1"
        ):
            disassemble_shard(self.spec, blob, "0.shard")
        store = memory_store()
        store.set("0.shard", blob)
        # a reader only looks for a key in its own minishard: 3 is found there, 5 is not
        assert ShardReader(store, self.spec).get_data_many([1, 3, 5]) == {3: b"jk"}

    def test_gzip_garbage_in_minishard_index(self):
        spec = ShardingSpec(hash="identity", minishard_bits=1, minishard_index_encoding="gzip")
        blob = self.shard(spec)
        a, b = self.msi_range(blob, 1)
        blob = blob[:a] + blob[a : a + 10] + b"\xff" * (b - a - 10) + blob[b:]
        self.check(blob, r"0\.shard: minishard 1: minishard index", spec)

    def test_gzip_garbage_in_data(self):
        spec = ShardingSpec(hash="identity", minishard_bits=1, data_encoding="gzip")
        blob = bytearray(self.shard(spec))
        n = spec.index_length
        blob[n + 12 : n + 20] = b"\x00" * 8  # inside the first value's deflate stream / trailer
        self.check(bytes(blob), r"0\.shard: minishard 0: data of key 2", spec)
        blob = bytearray(self.shard(spec))
        blob[n : n + 2] = b"PK"
        self.check(bytes(blob), r"0\.shard: minishard 0: data of key 2: .*not gzip", spec)


def mutate(blob: bytes, ops) -> bytes:
    out = bytearray(blob)
    for kind, pos, value in ops:
        if not out:
            break
        pos %= len(out)
        if kind == 0:
            out[pos] = value
        elif kind == 1:
            out[pos] ^= 1 << (value % 8)
        elif kind == 2:
            del out[pos:]
        else:
            out[pos:pos] = bytes([value]) * (value % 9 + 1)
    return bytes(out)


FUZZ_SPECS = [
    ShardingSpec(hash="identity", minishard_bits=2, shard_bits=0),
    ShardingSpec(
        hash=MURMUR,
        minishard_bits=1,
        shard_bits=0,
        minishard_index_encoding="gzip",
        data_encoding="gzip",
    ),
]
FUZZ_DATA = {k: bytes([k % 251]) * (k % 13) for k in (0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 2**64 - 1)}
FUZZ_BLOBS = [encode_shard(s, FUZZ_DATA) for s in FUZZ_SPECS]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    which=st.integers(0, len(FUZZ_SPECS) - 1),
    ops=st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 10**6), st.integers(0, 255)),
        min_size=1,
        max_size=4,
    ),
)
def test_mutated_shards_fail_cleanly(which, ops):
    """Any mutation reads fine or raises ShardFormatError; nothing else, nothing huge."""
    spec, blob = FUZZ_SPECS[which], mutate(FUZZ_BLOBS[which], ops)
    store = memory_store()
    store.set("0.shard", blob)
    keys = [*FUZZ_DATA, 4, 6, 7]
    try:
        got = ShardReader(store, spec).get_data_many(keys)
        assert set(got) <= set(keys)
        assert all(len(v) < 10 * len(blob) + 1000 for v in got.values())
    except ShardFormatError as e:
        assert "0.shard" in str(e)
    try:
        disassemble_shard(spec, blob, "0.shard")
    except ShardFormatError as e:
        assert "0.shard" in str(e)
