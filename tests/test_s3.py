"""S3 through fsspec, against moto's S3 server: the store contract, locks that hold across
processes (lease objects with conditional writes), and concurrent writers of one shard,
whose merges are compare-and-swaps (see test_s3_cas.py), never losing each other's
chunks."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import re
import threading
import time

import numpy as np
import pytest

from shardvol import Volume
from shardvol.errors import (
    InvalidArgumentError,
    LockLostError,
    LockTimeoutError,
    StoreError,
    VersionChangedError,
)
from shardvol.kvstore.fsspec_store import FsspecStore
from shardvol.kvstore.lease import acquire, lease_path

from .s3_server import new_bucket, public_http_url
from .stores import race_zarr3_shard_rewrite
from .test_kvstore import StoreContract


@pytest.fixture
def bucket(s3):
    return new_bucket()


class TestS3Store(StoreContract):
    @pytest.fixture
    def pair(self, bucket):
        s = FsspecStore(bucket + "/root")
        return s, s


def _raw(store: FsspecStore, key: str) -> bytes | None:
    """An object's bytes, hidden or not, read with s3fs directly."""
    path = f"{store.root}/{key}"
    return store.fs.cat_file(path) if store.fs.exists(path) else None


def _holder_object(store: FsspecStore, key: str, ttl: float) -> str:
    """Create the lease object of ``key`` as a holder that then died would have left it."""
    path = lease_path(store._path(key))
    body = json.dumps({"holder": "host9 pid 1 thread 1", "ttl": ttl, "since": "2026-01-01"})
    store.fs.pipe_file(path, body.encode())
    return path


def test_lock_leaves_no_object_and_hides_leases(bucket):
    s = FsspecStore(bucket)
    assert s.locks_across_processes
    with s.lock("d/k"):
        s.set("d/k", b"1")
        assert s.fs.exists(lease_path(s._path("d/k")))
        assert s.list() == ["d/k"]  # the lease object is not a key
    assert not s.fs.exists(lease_path(s._path("d/k")))
    assert sorted(s.fs.find(s.root)) == [f"{s.root}/d/k"]


def test_lock_serialises_processes(bucket):
    s = FsspecStore(bucket)
    s.set("counter", b"0")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_increment, args=(bucket, 8)) for _ in range(3)]
    for p in procs:
        p.start()
    _increment(bucket, 8)
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    assert s.get("counter") == b"32"
    assert s.list() == ["counter"]


def _increment(url: str, n: int) -> None:
    s = FsspecStore(url)
    for _ in range(n):
        with s.lock("counter"):
            v = int(s.get("counter"))
            time.sleep(0.005)  # widen the window a lost update would need
            s.set("counter", str(v + 1).encode())


def test_a_waiter_says_what_it_waits_for_and_until_when(bucket, caplog, monkeypatch):
    """After 2 s a waiter names the lock, its holder and when the lease of a dead holder
    runs out; the lease time is SHARDVOL_LEASE_TTL's."""
    monkeypatch.setenv("SHARDVOL_LEASE_TTL", "2.5")
    s = FsspecStore(bucket)
    assert s.lease_ttl == 2.5
    _holder_object(s, "k", ttl=4)  # (the waiter polls at least every 0.75 s: it says so)
    with caplog.at_level("WARNING", logger="shardvol"), s.lock("k"):
        pass
    lines = [r.getMessage() for r in caplog.records if r.name == "shardvol"]
    assert len(lines) == 1 and "held by host9 pid 1 thread 1 since 2026-01-01" in lines[0]
    assert re.search(r"lease of 4 s runs out unrenewed at \d\d:\d\d:\d\d", lines[0])
    monkeypatch.setenv("SHARDVOL_LEASE_TTL", "soon")
    with pytest.raises(InvalidArgumentError, match="SHARDVOL_LEASE_TTL"):
        FsspecStore(bucket)


def test_stale_lease_of_a_dead_holder_is_taken_over(bucket):
    # (our own lease is long: a renewal late under load must not lose it)
    s = FsspecStore(bucket, lease_ttl=5)
    _holder_object(s, "k", ttl=0.6)
    t0 = time.monotonic()
    with s.lock("k"):
        s.set("k", b"mine")
    waited = time.monotonic() - t0
    assert 0.6 <= waited < 10
    assert s.get("k") == b"mine"
    assert not s.fs.exists(lease_path(s._path("k")))


def test_live_holder_times_out_the_waiter_with_its_name(bucket):
    s = FsspecStore(bucket, lease_ttl=30, lock_timeout=0.5)
    _holder_object(s, "k", ttl=30)
    with pytest.raises(LockTimeoutError, match=r"\.shardvol-lock\.k.*host9 pid 1"), s.lock("k"):
        pytest.fail("lock taken from a live holder")


def test_lease_taken_over_refuses_the_write(bucket):
    s = FsspecStore(bucket, lease_ttl=0.6)
    s.set("k", b"old")
    with pytest.raises(LockLostError, match="took the lease over"), s.lock("k"):
        _holder_object(s, "k", ttl=30)  # another writer's lease replaces ours
        time.sleep(0.5)  # a renewal (every ttl/3) notices
        s.set("k", b"new")
    assert s.get("k") == b"old"
    assert json.loads(_raw(s, lease_path("k")))["holder"] == "host9 pid 1 thread 1"  # kept


def test_unrenewed_lease_refuses_the_write(bucket, monkeypatch):
    s = FsspecStore(bucket, lease_ttl=0.6)
    s.set("k", b"old")

    def unreachable(*args):
        raise ConnectionError("store unreachable")

    with pytest.raises(LockLostError, match="not renewed"), s.lock("k"):
        monkeypatch.setattr(s._objects, "replace", unreachable)
        time.sleep(0.4)  # past ttl/2 without a renewal
        s.set("k", b"new")
    assert s.get("k") == b"old"
    assert not s.fs.exists(lease_path(s._path("k")))  # still ours: deleted on release


def test_release_reports_a_lease_lost_after_the_last_write(bucket):
    s = FsspecStore(bucket, lease_ttl=30)
    with pytest.raises(LockLostError, match="may have raced"), s.lock("k"):
        s.set("k", b"v")
        _holder_object(s, "k", ttl=30)
    assert s.get("k") == b"v"


SHAPE, CHUNK = (64, 64, 32), (32, 32, 32)
SPEC = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0,
        "minishard_bits": 1, "shard_bits": 0, "minishard_index_encoding": "gzip",
        "data_encoding": "gzip"}


def _box(worker: int, k: int) -> tuple[slice, ...]:
    """Worker ``worker``'s k-th write: part of chunk (0, 0, 0) or (1, 1, 0), never a whole
    chunk, so that every write is a read-modify-write of the one shard file."""
    x0 = 8 * worker + 32 * (k % 2)
    y0 = 4 * (k // 2) + 32 * (k % 2)
    return slice(x0, x0 + 8), slice(y0, y0 + 4), slice(0, 32)


def _write_boxes(url: str, worker: int, n: int) -> None:
    vol = Volume(url)
    for k in range(n):
        vol[_box(worker, k)] = worker * 16 + k + 1


def test_processes_writing_one_shard_lose_nothing(bucket):
    url = bucket + "/vol"
    Volume.create(url, type="segmentation", data_type="uint32", size=SHAPE, chunk_size=CHUNK,
                  encoding="raw", sharding=SPEC)
    n, workers = 8, 3
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write_boxes, args=(url, w, n)) for w in range(1, workers)]
    for p in procs:
        p.start()
    _write_boxes(url, 0, n)
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    model = np.zeros((*SHAPE, 1), np.uint32)
    for w in range(workers):
        for k in range(n):
            model[_box(w, k)] = w * 16 + k + 1
    vol = Volume(url)
    assert np.array_equal(vol[...], model)
    assert vol.store.list() == ["1_1_1/0.shard", "info"]


BOXES = [(slice(0, 32), slice(0, 32), slice(0, 32)), (slice(32, 64), slice(32, 64), slice(0, 32))]


def _sharded_volume(url: str, seed: int) -> np.ndarray:
    """A raw-encoded sharded volume at ``url`` (raw data encoding too, so stale offsets
    would not fail to decode: they would read other chunks' bytes); returns its data."""
    Volume.create(url, type="segmentation", data_type="uint32", size=SHAPE, chunk_size=CHUNK,
                  encoding="raw", sharding={**SPEC, "data_encoding": "raw"})
    a = np.random.default_rng(seed).integers(1, 2**32, (*SHAPE, 1), dtype=np.uint32)
    Volume(url)[...] = a
    return a


def _reads_after_a_rewrite(reader: Volume, writer_url: str, a: np.ndarray, fs_class: type,
                           monkeypatch) -> None:
    """``reader`` caches its indexes, another writer rewrites the shard, and ``reader`` still
    reads the right data; its reads make no metadata requests of ``fs_class``."""

    def no_metadata_requests(*args, **kwargs):
        raise AssertionError("a metadata request")

    monkeypatch.setattr(fs_class, "_info", no_metadata_requests)
    for box in BOXES:  # shard and minishard indexes now cached
        assert np.array_equal(reader[box], a[box])
    monkeypatch.undo()
    Volume(writer_url).delete(BOXES[0])  # another writer: the first chunk leaves the shard,
    a[BOXES[0]] = 0  # so every other chunk moves
    monkeypatch.setattr(fs_class, "_info", no_metadata_requests)
    for box in BOXES:
        assert np.array_equal(reader[box], a[box])
    monkeypatch.undo()


def test_readers_see_rewritten_shards_without_extra_requests(bucket, monkeypatch):
    """A reader with cached shard and minishard indexes reads correctly after another
    writer rewrites a shard: its reads carry the ETag of the index (If-Match), the stale
    index is dropped and read again."""
    url = bucket + "/vol"
    a = _sharded_volume(url, 0)
    store = FsspecStore(url)
    assert store.version("1_1_1/0.shard") is None  # no metadata request: the reads say
    [(_, etag)] = store.get_many_versioned([("1_1_1/0.shard", (0, 8))])
    assert etag
    assert FsspecStore(url, check_versions=True).version("1_1_1/0.shard") == etag
    assert FsspecStore(url, check_versions=True).version("1_1_1/nothing") == ()
    # (no decoded-chunk cache: it serves cached chunks until a read sees their shard change)
    _reads_after_a_rewrite(Volume(store, cache_bytes=0), url, a, type(store.fs), monkeypatch)


def test_http_readers_see_rewritten_shards_without_extra_requests(s3, bucket, monkeypatch):
    """The same over plain HTTP (moto's server, public objects): each ranged GET returns the
    object's ETag and the reads that rely on a cached index send it as If-Match, so a shard
    rewritten by another writer is read again, with no HEAD requests."""
    from fsspec.implementations.http import HTTPFileSystem

    url = bucket + "/vol"
    a = _sharded_volume(url, 1)
    http = public_http_url(s3, bucket) + "/vol"
    store = FsspecStore(http)
    assert store.read_only and store.version("1_1_1/0.shard") is None
    [(_, etag)] = store.get_many_versioned([("1_1_1/0.shard", (0, 8))])
    assert etag == FsspecStore(url).get_many_versioned([("1_1_1/0.shard", (0, 8))])[0][1]
    assert FsspecStore(http, check_versions=True).version("1_1_1/0.shard") == etag
    with pytest.raises(VersionChangedError):
        store.get_many_if([("1_1_1/0.shard", (0, 8))], {"1_1_1/0.shard": '"not-its-etag"'})
    _reads_after_a_rewrite(Volume(store, cache_bytes=0), url, a, HTTPFileSystem, monkeypatch)
    unchecked = Volume(FsspecStore(http, versioned_reads=False))
    assert np.array_equal(unchecked[BOXES[1]], a[BOXES[1]])


HASHED = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "murmurhash3_x86_128",
          "preshift_bits": 0, "minishard_bits": 1, "shard_bits": 1,
          "minishard_index_encoding": "gzip", "data_encoding": "gzip"}


def test_processes_downsample_into_shared_hashed_shards(bucket, tmp_path):
    """Hashed output shards are shared by tasks; on S3 their merges are compare-and-swaps,
    which let an executor of other processes merge into them (refused on stores without
    cross-process locks or conditional writes).  The result equals the same downsampling
    run in this process on local files."""
    from concurrent.futures import ProcessPoolExecutor

    import shardvol

    data = np.random.default_rng(1).integers(0, 255, (40, 40, 8, 1), dtype=np.uint8)
    urls = [bucket + "/ds", str(tmp_path / "ds")]
    for url in urls:
        Volume.create(url, size=(40, 40, 8), chunk_size=(8, 8, 8), data_type="uint8")[...] = data
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(2, mp_context=ctx) as ex:
        shardvol.downsample(urls[0], (2, 2, 1), 1, sharding=HASHED, executor=ex,
                            progress=False, memory_limit="20KB")
    shardvol.downsample(urls[1], (2, 2, 1), 1, sharding=HASHED, progress=False)
    got, want = (Volume(u, mip=1) for u in urls)
    assert np.array_equal(got[...], want[...])
    shards = ["2_2_1/0.shard", "2_2_1/1.shard"]
    assert got.store.list("2_2_1/") == want.store.list("2_2_1/") == shards


def test_a_renewing_holder_keeps_its_lock_past_the_lease_time(bucket):
    """Renewals change the lease's ETag, so a waiter does not take a live holder for dead
    however long it holds the lock (here 4 lease times; a lease of 1.5 s, so that a
    renewal delayed by a loaded machine is not taken for a holder's death)."""
    s = FsspecStore(bucket, lease_ttl=LEASE)
    ctx = multiprocessing.get_context("spawn")
    holder = ctx.Process(target=_hold, args=(bucket, 4 * LEASE))
    holder.start()
    deadline = time.monotonic() + 60
    while s.get("k") != b"holding" and time.monotonic() < deadline:
        time.sleep(0.05)
    with s.lock("k"):
        got = s.get("k")
    holder.join(60)
    assert holder.exitcode == 0
    assert got == b"released"


LEASE = 1.5


def _hold(url: str, seconds: float) -> None:
    s = FsspecStore(url, lease_ttl=LEASE)
    with s.lock("k"):
        s.set("k", b"holding")
        time.sleep(seconds)
        s.set("k", b"released")


def test_zarr3_shard_replaced_between_index_and_chunk_reads(bucket):
    """The chunk reads carry the index's ETag: a shard replaced in between is read again,
    never its new bytes at the old index's offsets."""
    got, _, new, _ = race_zarr3_shard_rewrite(FsspecStore, bucket + "/z")
    assert np.array_equal(got, new[4:8, 4:8]), got


def test_a_truncated_shard_is_a_format_error_not_a_conflict(bucket):
    """Versioned reads retry only files whose version changed: a shard that is damaged
    (cut short of its minishard indexes) raises ShardFormatError naming it at once."""
    from shardvol.errors import ShardFormatError

    url = bucket + "/vol"
    Volume.create(url, type="segmentation", data_type="uint32", size=SHAPE, chunk_size=CHUNK,
                  encoding="raw", sharding=SPEC)[...] = 7
    store = FsspecStore(url)
    shard = store.get("1_1_1/0.shard")
    store.set("1_1_1/0.shard", shard[: 16 * 2 + 4])  # the shard index, then 4 bytes
    with pytest.raises(ShardFormatError, match=re.escape("0.shard")):
        Volume(url)[BOXES[0]]


def test_zarr3_cached_shard_index_never_serves_a_rewritten_shard(bucket):
    """A handle keeps the shard index it read; chunk reads that rely on it carry its ETag,
    and a read of chunks absent from it reads the index again (S3 cannot tell versions
    without a request): another writer's rewrite is always seen."""
    import shardvol.zarr3 as z

    url = bucket + "/zc"
    arr = z.create(FsspecStore(url), (16, 16), "uint16", (16, 16), (4, 4), codecs=["gzip"])
    data = np.zeros((16, 16), np.uint16)
    data[:8] = np.arange(128, dtype=np.uint16).reshape(8, 16) + 1
    arr[:8] = data[:8]
    ours = z.open(FsspecStore(url))
    assert np.array_equal(ours[0:4, 0:4], data[0:4, 0:4])
    assert len(ours.chunk_store.shard_index_cache) == 1
    theirs = z.open(FsspecStore(url))
    theirs[12:16, 12:16] = 9
    data[12:16, 12:16] = 9
    assert (ours[12:16, 12:16] == 9).all()  # absent from the cached index
    theirs[0:4, 0:4] = 7  # every later chunk moves in the shard
    data[0:4, 0:4] = 7
    assert np.array_equal(ours[4:8, 4:12], data[4:8, 4:12])  # the cached index's ETag fails
    assert np.array_equal(ours[...], data)


class _SlowReplies:
    """Conditional objects (ETag: md5 of the body) whose replace() reaches the store at once
    but answers only after ``delay`` seconds (a stalled network)."""

    def __init__(self, objects: dict, guard: threading.Lock, delay: float = 0.0) -> None:
        self.objects, self.guard, self.delay = objects, guard, delay

    def create(self, path, body):
        with self.guard:
            if path in self.objects:
                return None
            self.objects[path] = body
        return hashlib.md5(body).hexdigest()

    def replace(self, path, body, version):
        with self.guard:
            ok = path in self.objects and hashlib.md5(self.objects[path]).hexdigest() == version
            if ok:
                self.objects[path] = body
        time.sleep(self.delay)
        return hashlib.md5(body).hexdigest() if ok else None

    def current(self, path):
        with self.guard:
            body = self.objects.get(path)
        return None if body is None else (hashlib.md5(body).hexdigest(), body)

    def delete(self, path, version):
        with self.guard:
            if path in self.objects and hashlib.md5(self.objects[path]).hexdigest() == version:
                del self.objects[path]
                return True
        return False


def test_a_lease_whose_renewals_answer_late_is_lost_before_a_waiter_takes_it():
    # its age runs from when a renewal was sent: the store had it from then, and a waiter
    # breaks it lease_ttl after first seeing it, never while its holder still writes

    objects, guard = {}, threading.Lock()
    holder = acquire(_SlowReplies(objects, guard), "b/.shardvol-lock.k", 0.4, None)
    first = holder._version
    holder.ops.delay = 0.7  # renewals now answer after more than the lease time
    waiter = acquire(_SlowReplies(objects, guard), "b/.shardvol-lock.k", 0.4, 10)
    deadline = time.monotonic() + 5
    while holder._version == first and time.monotonic() < deadline:
        time.sleep(0.01)  # until the late answer to the renewal the waiter outlived arrives
    with pytest.raises(LockLostError):
        holder.check()
    waiter.release()


def test_an_unreachable_endpoint_is_a_store_error_for_every_operation(monkeypatch):
    for name, value in (("AWS_ENDPOINT_URL", "http://127.0.0.1:1"), ("AWS_ACCESS_KEY_ID", "a"),
                        ("AWS_SECRET_ACCESS_KEY", "b"), ("AWS_DEFAULT_REGION", "us-east-1"),
                        ("AWS_MAX_ATTEMPTS", "1")):
        monkeypatch.setenv(name, value)
    # refused connections are retried (after waits of up to 0.05, 0.1, ... s): a few here
    store = FsspecStore("s3://nowhere/root", lock_timeout=2, retries=2,
                        skip_instance_cache=True)
    for operation in (lambda: store.get("k"), lambda: store.set("k", b"x"),
                      lambda: store.delete("k"), store.list, lambda: store.lock("k").__enter__()):
        with pytest.raises(StoreError, match="nowhere"):
            operation()


def test_verify_reads_s3_through_the_same_endpoint(bucket, capsys):
    """TensorStore, the oracle of verify, reads moto's objects at AWS_ENDPOINT_URL (it hung
    for minutes on AWS itself before)."""
    from shardvol.cli import main

    url = f"{bucket}/v"
    vol = Volume.create(url, size=(48, 40, 20), chunk_size=(16, 16, 8), data_type="uint16",
                        sharding="auto")
    vol[...] = np.random.default_rng(3).integers(0, 999, vol.shape, dtype=np.uint16)
    assert main(["verify", url, "--samples", "3"]) == 0
    assert "OK: every region read the same" in capsys.readouterr().err


def test_overwriting_a_volume_or_a_zarr_array_deletes_its_old_objects(bucket):
    """Volume.create and zarr3.create with overwrite=True list the old chunks (shards) and
    delete them all (through delete_many), so nothing of the old data is read back."""
    from shardvol import zarr3

    def objects(prefix: str) -> list[str]:
        return sorted(FsspecStore(f"{bucket}/{prefix}").list(""))

    data = np.random.default_rng(2).integers(1, 255, (48, 40, 20, 1), dtype=np.uint8)
    vol = Volume.create(f"{bucket}/v", size=data.shape[:3], data_type="uint8",
                        chunk_size=[16, 16, 8])
    vol[...] = data
    assert len(objects("v")) == 1 + 3 * 3 * 3
    fresh = Volume.create(f"{bucket}/v", size=data.shape[:3], data_type="uint8",
                          chunk_size=[16, 16, 8], overwrite=True)
    assert objects("v") == ["info"]
    assert not fresh[...].any()

    arr = zarr3.create(f"{bucket}/z", (64, 64), "uint8", (16, 16), (8, 8))
    arr[...] = np.arange(64 * 64, dtype=np.uint8).reshape(64, 64)
    assert len(objects("z")) == 17
    fresh_arr = zarr3.create(f"{bucket}/z", (64, 64), "uint8", (16, 16), (8, 8),
                             overwrite=True)
    assert objects("z") == ["zarr.json"]
    assert not fresh_arr[...].any()
