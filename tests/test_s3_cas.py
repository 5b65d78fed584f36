"""Optimistic writes on S3 (moto's server): a whole unit is one plain PUT, a merge into a
unit is a read with its ETag and a conditional PUT (or DELETE), redone from a fresh read
when another writer changed the unit in between; no lease objects.

Writers that are "other processes" are store objects whose in-process locks are their own
(tests.stores.AnotherProcess), or real processes: only S3's conditions order them.
"""

from __future__ import annotations

import multiprocessing
import threading
import time

import numpy as np
import pytest

import shardvol.zarr3 as z
from shardvol import Volume
from shardvol.errors import WriteConflictError
from shardvol.kvstore.fsspec_store import FsspecStore
from shardvol.kvstore.lease import LEASE_PREFIX

from .fault_server import FaultServer
from .s3_server import new_bucket
from .stores import AnotherProcess, rewrite_after_index_read

SHAPE = (32, 32, 16)
ONE_SHARD = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0,
             "minishard_bits": 1, "shard_bits": 0, "minishard_index_encoding": "gzip",
             "data_encoding": "gzip"}
# each array is one unit of 2 x 2 x 1 chunks (a shard), or one chunk file
KINDS = ["precomputed unsharded", "precomputed sharded", "zarr3 unsharded", "zarr3 sharded"]
A = (slice(0, 8), slice(0, 4), slice(0, 16))  # disjoint boxes, each a part of one chunk
B = (slice(8, 16), slice(4, 12), slice(2, 10))
C = (slice(20, 30), slice(18, 31), slice(0, 16))


@pytest.fixture
def bucket(s3):
    return new_bucket()


@pytest.fixture
def proxy(s3, tmp_path):
    """A fault server in front of moto: it counts the requests and injects faults."""
    with FaultServer(str(tmp_path), upstream=s3) as server:
        yield server


def _create(kind: str, store):
    if kind.startswith("precomputed"):
        sharded = kind.endswith(" sharded")
        return Volume.create(store, size=SHAPE, data_type="uint16", encoding="raw",
                             chunk_size=(16, 16, 16) if sharded else SHAPE,
                             sharding=ONE_SHARD if sharded else None)
    inner = (16, 16, 16) if kind.endswith(" sharded") else None
    return z.create(store, SHAPE, "uint16", SHAPE, inner, codecs=["gzip"], overwrite=True)


def _open(kind: str, store, **kw):
    return Volume(store, **kw) if kind.startswith("precomputed") else z.open(store, **kw)


def _read(handle) -> np.ndarray:
    return np.asarray(handle[...]).reshape(SHAPE)


def _fill(handle, data: np.ndarray) -> None:
    """Write the whole array (a volume's has a channel axis)."""
    handle[...] = data[..., None] if isinstance(handle, Volume) else data


def _theirs(bucket: str, name: str = "theirs", **kw) -> AnotherProcess:
    """The array at ``bucket``/v as another process's store object reaches it."""
    return AnotherProcess(FsspecStore(bucket, **kw), "v", name)


def _objects(store: FsspecStore) -> list[str]:
    """Every object of the store's bucket, hidden ones (lease objects) too."""
    bucket = store.root.split("/")[0]
    return sorted(store.fs.find(bucket))


def _no_leases(store: FsspecStore) -> None:
    assert not [p for p in _objects(store) if LEASE_PREFIX in p]


def _via(proxy: FaultServer, bucket: str, **kw) -> FsspecStore:
    return FsspecStore(bucket + "/v", skip_instance_cache=True, endpoint_url=proxy.url, **kw)


@pytest.mark.parametrize("kind", KINDS)
def test_a_whole_unit_is_one_put_and_a_merge_one_get_and_one_put(proxy, bucket, kind):
    """No lease objects: replacing the unit is one PUT; a merge into it (parts of its chunks)
    reads it once (with its ETag) and writes it once, conditionally.  Threads of one
    process writing parts of the unit take turns (the in-process lock): none redoes."""
    store = _via(proxy, bucket)
    h = _create(kind, store)
    assert store.conditional_writes
    data = np.random.default_rng(0).integers(1, 60000, SHAPE, dtype=np.uint16)
    proxy.stats(reset=True)
    _fill(h, data)
    stats = proxy.stats()
    assert (stats["PUT"], stats["requests"]) == (1, 1), stats  # (one chunk file, or shard)
    proxy.stats(reset=True)
    h[A] = 7
    data[A] = 7
    stats = proxy.stats()
    assert (stats["GET"], stats["PUT"], stats["requests"]) == (1, 1, 2), stats
    proxy.stats(reset=True)
    boxes = [A, B, C]

    def write(i: int) -> None:
        h[boxes[i]] = 100 + i

    threads = [threading.Thread(target=write, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, box in enumerate(boxes):
        data[box] = 100 + i
    stats = proxy.stats()
    assert (stats["GET"], stats["PUT"]) == (3, 3), stats
    assert np.array_equal(_read(_open(kind, FsspecStore(bucket + "/v"), cache_bytes=0)), data)
    _no_leases(store)


@pytest.mark.parametrize("kind", KINDS)
def test_a_merge_raced_by_another_merge_is_redone(bucket, kind):
    """Another writer merges into the unit between our read of it and our write: our
    conditional PUT fails, and our merge is redone on what they wrote: both stay."""
    ours = rewrite_after_index_read(FsspecStore)(bucket + "/v")
    h = _create(kind, ours)
    data = np.random.default_rng(1).integers(1, 60000, SHAPE, dtype=np.uint16)
    _fill(h, data)
    theirs = _open(kind, _theirs(bucket, lock_timeout=2))

    def their_merge():
        theirs[B] = 2
        data[B] = 2

    ours.hook = their_merge  # (runs after the next versioned read: our merge's)
    h[A] = 1
    data[A] = 1
    assert ours.hook is None  # the race happened
    assert np.array_equal(_read(_open(kind, FsspecStore(bucket + "/v"), cache_bytes=0)), data)
    _no_leases(ours)


@pytest.mark.parametrize("kind", KINDS)
def test_a_replacement_during_a_merge_is_not_overwritten(bucket, kind):
    """Another writer replaces the whole unit (a plain PUT) between our merge's read and
    write: our merge is redone on the replacement, never written over it."""
    ours = rewrite_after_index_read(FsspecStore)(bucket + "/v")
    h = _create(kind, ours)
    h[...] = 5
    theirs = _open(kind, _theirs(bucket, lock_timeout=2))
    new = np.random.default_rng(2).integers(1, 60000, SHAPE, dtype=np.uint16)

    def their_replacement():
        _fill(theirs, new)

    ours.hook = their_replacement
    h[C] = 1
    new[C] = 1
    assert ours.hook is None
    assert np.array_equal(_read(_open(kind, FsspecStore(bucket + "/v"), cache_bytes=0)), new)


@pytest.mark.parametrize("kind", ["precomputed sharded", "zarr3 sharded"])
def test_a_redone_merge_drops_the_cached_chunks_another_writer_changed(bucket, kind):
    """Our handle caches every chunk; another writer rewrites a chunk we do not touch while
    we merge into another: the conflict tells our handle that the shard changed, so its
    cached copy of their chunk goes, and our next read sees their write."""
    ours = rewrite_after_index_read(FsspecStore)(bucket + "/v")
    h = _create(kind, ours)
    data = np.random.default_rng(3).integers(1, 60000, SHAPE, dtype=np.uint16)
    _fill(h, data)
    h = _open(kind, ours, cache_bytes=64 << 20)
    assert np.array_equal(_read(h), data)  # every chunk cached
    theirs = _open(kind, _theirs(bucket, lock_timeout=2), cache_bytes=0)
    far = (slice(16, 32), slice(16, 32), slice(0, 16))  # a whole chunk, not ours

    def their_write():
        theirs[far] = 3
        data[far] = 3

    ours.hook = their_write
    h[A] = 1
    data[A] = 1
    assert ours.hook is None
    assert np.array_equal(_read(h), data)


@pytest.mark.parametrize("kind", KINDS)
def test_writers_of_other_processes_merging_into_one_unit_lose_nothing(proxy, bucket, kind):
    """Four writers, each with a store object of its own (as processes have: no lock in
    common), merge parts of the one unit at once, behind 20 ms of latency: what each wrote
    is there, as in a model of the writes; merges were redone (more PUTs than writes)."""
    _create(kind, FsspecStore(bucket + "/v"))
    proxy.set(latency=0.02)
    writers, rounds = 4, 4
    model = np.zeros(SHAPE, np.uint16)
    boxes = {}
    for w in range(writers):
        for k in range(rounds):  # 4 x 4 boxes of 2 x 4 x 8, all in chunk (0, 0, 0)
            boxes[w, k] = (slice(2 * w, 2 * w + 2), slice(4 * k, 4 * k + 4), slice(0, 8))
            model[boxes[w, k]] = 16 * w + k + 1
    errors = []

    def write(w: int) -> None:
        try:
            h = _open(kind, AnotherProcess(FsspecStore(bucket, skip_instance_cache=True,
                                                       endpoint_url=proxy.url), "v", f"w{w}"))
            for k in range(rounds):
                h[boxes[w, k]] = 16 * w + k + 1
        except Exception as e:  # (reported below)
            errors.append(e)

    proxy.stats(reset=True)
    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert np.array_equal(_read(_open(kind, FsspecStore(bucket + "/v"), cache_bytes=0)), model)
    assert proxy.stats()["PUT"] > writers * rounds  # (some merges were raced, and redone)
    _no_leases(FsspecStore(bucket))


def _merge_boxes(url: str, kind: str, worker: int, n: int, start) -> None:
    h = _open(kind, FsspecStore(url))
    start.wait(60)  # (every process ready: their merges overlap)
    for k in range(n):
        h[_proc_box(worker, k)] = worker * 16 + k + 1


def _proc_box(worker: int, k: int) -> tuple[slice, ...]:
    return slice(4 * worker, 4 * worker + 4), slice(2 * k, 2 * k + 2), slice(0, 16)


@pytest.mark.parametrize("kind", ["precomputed unsharded", "zarr3 sharded"])
def test_processes_merging_into_one_unit_lose_nothing(bucket, kind):
    url = bucket + "/v"
    _create(kind, FsspecStore(url))
    n, workers = 8, 3
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(workers)
    procs = [ctx.Process(target=_merge_boxes, args=(url, kind, w, n, start))
             for w in range(1, workers)]
    for p in procs:
        p.start()
    _merge_boxes(url, kind, 0, n, start)
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    model = np.zeros(SHAPE, np.uint16)
    for w in range(workers):
        for k in range(n):
            model[_proc_box(w, k)] = w * 16 + k + 1
    assert np.array_equal(_read(_open(kind, FsspecStore(url), cache_bytes=0)), model)
    _no_leases(FsspecStore(url))


@pytest.mark.parametrize("kind", ["precomputed sharded", "zarr3 unsharded"])
def test_merges_through_faults_lose_nothing(proxy, bucket, kind):
    """Three writers of their own merge into one unit while 5% of the requests are refused
    (503) and connections are dropped before the server acted (2.5%) or after it did, its
    answer lost (5%: a conditional PUT that landed, retried, fails its condition)."""
    _create(kind, FsspecStore(bucket + "/v"))
    proxy.set(error=0.05, reset=0.025, lost=0.05, seed=5)
    model = np.zeros(SHAPE, np.uint16)
    errors = []

    def write(w: int) -> None:
        try:
            h = _open(kind, AnotherProcess(FsspecStore(bucket, skip_instance_cache=True,
                                                       endpoint_url=proxy.url), "v", f"w{w}"))
            for k in range(5):
                h[_proc_box(w, k)] = w * 16 + k + 1
        except Exception as e:  # (reported below)
            errors.append(e)

    for w in range(3):
        for k in range(5):
            model[_proc_box(w, k)] = w * 16 + k + 1
    threads = [threading.Thread(target=write, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    proxy.set(error=0.0, reset=0.0, lost=0.0)
    assert np.array_equal(_read(_open(kind, FsspecStore(bucket + "/v"), cache_bytes=0)), model)
    stats = proxy.stats()
    assert stats["fault lost"] > 0 and stats["fault error"] > 0, stats


@pytest.mark.parametrize("kind", ["precomputed sharded", "zarr3 unsharded"])
def test_a_conditional_put_whose_answer_was_lost_is_not_redone(proxy, bucket, kind):
    """The merge's conditional PUT lands but its answer is lost: the retry fails its
    condition, finds the object holding its own bytes, and is done (no second merge)."""
    store = _via(proxy, bucket)
    h = _create(kind, store)
    h[...] = 9
    proxy.stats(reset=True)
    proxy.set(plan=["ok", "lost"])  # the read, then the PUT
    h[B] = 4
    stats = proxy.stats()
    assert stats["fault lost"] == 1
    # the read, the PUT (lost), its retry (412), the read that finds our bytes
    assert (stats["GET"], stats["PUT"], stats["requests"]) == (2, 2, 4), stats
    want = np.full(SHAPE, 9, np.uint16)
    want[B] = 4
    assert np.array_equal(_read(_open(kind, FsspecStore(bucket + "/v"), cache_bytes=0)), want)


def test_a_conditional_delete_whose_answer_was_lost_is_done(proxy, bucket):
    """A merge that leaves a Zarr chunk all fill value deletes it (DELETE If-Match); the
    answer is lost, the retry finds it gone: done."""
    store = _via(proxy, bucket)
    h = _create("zarr3 unsharded", store)
    h[B] = 4
    proxy.stats(reset=True)
    proxy.set(plan=["ok", "lost"])  # the read, then the DELETE
    h[B] = 0
    stats = proxy.stats()
    assert stats["fault lost"] == 1 and stats["DELETE"] == 2 and stats["PUT"] == 0, stats
    assert (_read(_open("zarr3 unsharded", FsspecStore(bucket + "/v"), cache_bytes=0)) == 0).all()
    assert [p.rsplit("/", 1)[1] for p in _objects(FsspecStore(bucket))] == ["zarr.json"]


def test_a_unit_that_keeps_changing_fails_after_the_conflict_timeout(bucket):
    """Every conditional write finds the shard changed: the merge is redone for the store's
    conflict timeout (lock_timeout), then WriteConflictError names the shard file."""
    store = FsspecStore(bucket + "/v", lock_timeout=0.5)
    h = _create("precomputed sharded", store)
    h[...] = 1
    calls = []

    def always_changed(key, parts, version):
        calls.append(key)
        return False

    store.set_parts_if = always_changed  # type: ignore[method-assign]  # (a shard's parts)
    start = time.monotonic()
    with pytest.raises(WriteConflictError, match=r"shard s3://.*/v/.*0\.shard.*0\.5 s"):
        h[A] = 2
    assert time.monotonic() - start < 5
    assert len(calls) > 2
    assert (_read(_open("precomputed sharded", FsspecStore(bucket + "/v"), cache_bytes=0))
            == 1).all()


def test_update_shard_merges_by_compare_and_swap(bucket):
    """The sharding API's merges too: another writer's update of the shard between our read
    and write makes ours read and merge again; both stay, with no lease objects."""
    from shardvol.sharding import ShardingSpec, read_shard, update_shard, write_shards

    spec = ShardingSpec.from_dict(ONE_SHARD)
    ours = rewrite_after_index_read(FsspecStore)(bucket + "/v")
    write_shards(ours, spec, {1: b"one", 2: b"two"})

    def their_update():
        update_shard(_theirs(bucket, lock_timeout=2), spec, {3: b"three"}, [1])

    ours.hook = their_update
    update_shard(ours, spec, {4: b"four"})
    assert ours.hook is None
    assert read_shard(ours, spec, 0) == {2: b"two", 3: b"three", 4: b"four"}
    _no_leases(ours)
