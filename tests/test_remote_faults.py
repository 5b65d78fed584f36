"""Remote stores through faults: a real HTTP server (tests/fault_server.py, in its own
process) that answers 503, drops connections, cuts bodies short, trickles or never
answers, serving files or standing in front of moto's S3 server.

Every request is retried on transient failures, reads return exactly the stored bytes,
writes lose nothing, and a server that keeps failing or hangs costs at most the
retries or the deadline, then a StoreError that says what was tried.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from shardvol import Volume
from shardvol.array.futures import submit
from shardvol.errors import StoreError, VersionChangedError
from shardvol.kvstore.fsspec_store import FsspecStore
from shardvol.kvstore.lease import lease_path
from shardvol.precomputed import sharded
from shardvol.sharding import reader as sharding_reader

from .fault_server import FaultServer
from .oracles import ts_create
from .s3_server import new_bucket
from .stores import http_store, s3_store

VALUE = bytes(range(256)) * 400  # 102,400 bytes


@pytest.fixture
def files(tmp_path):
    (tmp_path / "f").write_bytes(VALUE)
    with FaultServer(str(tmp_path)) as server:
        yield server, tmp_path


def _store(server: FaultServer, **kw) -> FsspecStore:
    return FsspecStore(server.url, skip_instance_cache=True, **kw)


def _store_via(server: FaultServer, transport: str, **kw) -> FsspecStore:
    return http_store(server.url, transport, **kw)


@pytest.mark.parametrize("fault", ["error", "reset", "short", "slow"])
def test_a_transient_failure_is_retried_and_the_bytes_are_exact(files, fault, transport):
    server, _ = files
    store = _store_via(server, transport)
    server.set(plan=[fault, fault], slow_seconds=0.2)
    server.stats(reset=True)
    assert store.get("f", (1000, 90_000)) == VALUE[1000:90_000]
    assert store.get("f") == VALUE
    stats = server.stats()
    assert stats[f"fault {fault}"] == 2
    assert stats["GET"] == (2 if fault == "slow" else 4)  # (a slow answer is not refused)


def test_versioned_reads_are_retried_too(files, transport):
    server, _ = files
    store = _store_via(server, transport)
    server.set(plan=["error", "reset", "short"])
    [(value, version)] = store.get_many_versioned([("f", (5, 105))])
    assert value == VALUE[5:105] and version is not None
    assert store.get_many_if([("f", (0, 10))], {"f": version}) == [VALUE[:10]]


def test_retry_after_is_honoured(files, transport):
    server, _ = files
    store = _store_via(server, transport)
    server.set(plan=["error"], retry_after=0.6)
    start = time.monotonic()
    assert store.get("f", (0, 4)) == VALUE[:4]
    assert time.monotonic() - start >= 0.6


def test_answers_that_are_not_transient_are_not_retried(files, transport):
    server, _ = files
    store = _store_via(server, transport)
    server.stats(reset=True)
    assert store.get("missing") is None
    server.set(plan=["error"], error_status=403)
    with pytest.raises(StoreError, match="403"):
        store.get("f")
    with pytest.raises(VersionChangedError):  # 412: a version change, never retried
        store.get_many_if([("f", (0, 4))], {"f": '"not-its-etag"'})
    assert server.stats()["GET"] == 3


def test_a_server_that_keeps_failing_costs_the_retries_then_names_them(files):
    server, _ = files
    store = _store(server, retries=3)
    server.set(error=1.0)
    server.stats(reset=True)
    with pytest.raises(StoreError, match=r"GET .*/f.*4 attempt\(s\).*503"):
        store.get("f")
    assert server.stats()["GET"] == 4


def test_a_hung_server_costs_the_deadline(files):
    server, _ = files
    store = _store(server, timeout=1.0)
    server.set(hang=1.0)
    start = time.monotonic()
    with pytest.raises(StoreError, match=r"/f.*deadline \(1 s\)"):
        store.get("f")
    assert time.monotonic() - start < 3


def test_a_volume_reads_exactly_through_faults(tmp_path):
    """A sharded volume that TensorStore wrote, read over HTTP while 5% of the requests are
    refused with 503 and 2.5% of the connections dropped: the same voxels as written."""
    data = np.random.default_rng(1).integers(0, 255, (96, 80, 70, 1), dtype=np.uint8)
    t = ts_create(str(tmp_path / "v"), data_type="uint8", num_channels=1, size=[96, 80, 70],
                  chunk_size=[16, 16, 16], encoding="raw", sharding={
                      "@type": "neuroglancer_uint64_sharded_v1", "hash": "identity",
                      "preshift_bits": 0, "minishard_bits": 2, "shard_bits": 4,
                      "minishard_index_encoding": "gzip", "data_encoding": "gzip"})
    t[...] = data
    with FaultServer(str(tmp_path)) as server:
        server.set(error=0.05, reset=0.025, seed=7)
        vol = Volume(FsspecStore(server.url + "/v", skip_instance_cache=True))
        assert np.array_equal(vol[...], data)
        rng = np.random.default_rng(2)
        for _ in range(10):
            lo = rng.integers(0, [80, 60, 50])
            box = tuple(slice(a, a + 17) for a in lo)
            assert np.array_equal(vol[box], data[box])
        assert server.stats()["fault error"] > 0


@pytest.fixture
def s3_proxy(s3, tmp_path):
    with FaultServer(str(tmp_path), upstream=s3) as proxy:
        yield proxy


def _s3(proxy: FaultServer, bucket: str, transport: str = "direct", **kw) -> FsspecStore:
    return s3_store(bucket + "/root", transport, endpoint_url=proxy.url, **kw)


def test_s3_writes_through_faults_lose_nothing(s3_proxy, s3_transport):
    """Partial, unaligned writes of a sharded volume on S3 while requests are refused,
    connections dropped before and after the server acted, bodies cut short (the reads of
    the merges through either transport)."""
    bucket = new_bucket()
    store = _s3(s3_proxy, bucket, s3_transport, lease_ttl=5)
    vol = Volume.create(store, size=[64, 64, 32], data_type="uint16", chunk_size=[16, 16, 16],
                        encoding="raw", sharding="auto")
    model = np.zeros(vol.shape, np.uint16)
    s3_proxy.set(error=0.05, reset=0.025, lost=0.025, short=0.025, seed=3)
    rng = np.random.default_rng(4)
    for _ in range(6):
        lo = rng.integers(0, [50, 50, 20])
        hi = np.minimum(lo + rng.integers(1, 20, 3), [64, 64, 32])
        box = tuple(slice(a, b) for a, b in zip(lo, hi))
        block = rng.integers(1, 60000, model[box].shape, dtype=np.uint16)
        vol[box] = block
        model[box] = block
    s3_proxy.set(error=0.0, reset=0.0, lost=0.0, short=0.0)
    assert np.array_equal(Volume(FsspecStore(bucket + "/root", skip_instance_cache=True))[...],
                          model)
    assert sum(v for k, v in s3_proxy.stats().items() if k.startswith("fault ")
               and k != "fault ok") > 0


def test_a_lease_created_by_an_attempt_whose_answer_was_lost_is_ours(s3_proxy):
    """The PUT that creates the lease reaches S3 but its answer is lost: the retry finds
    the lease exists (412), reads it, sees its own body and holds the lock, instead of
    waiting for itself to go stale.  Its release answer is lost too: released all the same."""
    bucket = new_bucket()
    store = _s3(s3_proxy, bucket, lease_ttl=30, lock_timeout=3)
    s3_proxy.set(plan=["lost"])
    start = time.monotonic()
    with store.lock("k"):
        assert time.monotonic() - start < 2
        store.set("k", b"v")
        s3_proxy.set(plan=["lost"])  # the release's conditional DELETE
    plain = FsspecStore(bucket + "/root", skip_instance_cache=True)
    assert plain.get("k") == b"v"
    assert not plain.fs.exists(lease_path(plain._path("k")))


# -- requests in flight ---------------------------------------------------------------------


def _tensorstore_volume(path, data, sharding):
    t = ts_create(str(path), data_type="uint8", num_channels=1, size=list(data.shape[:3]),
                  chunk_size=[16, 16, 16], encoding="raw", sharding=sharding)
    t[...] = data
    return str(path)


ALIGNED = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 3,
           "minishard_bits": 0, "shard_bits": 3, "minishard_index_encoding": "gzip",
           "data_encoding": "gzip"}


def test_remote_reads_keep_many_requests_in_flight_within_the_budget(tmp_path):
    """An unsharded read of 128 chunks with 2 decode threads: the requests are not paced by
    the threads (they went out in batches of 8 chunks, 2 at a time), and never more than
    the process's budget, or the store's, are in flight."""
    from shardvol.kvstore import limits

    data = np.random.default_rng(3).integers(0, 255, (128, 64, 64, 1), dtype=np.uint8)
    _tensorstore_volume(tmp_path / "u", data, None)
    with FaultServer(str(tmp_path), latency=0.05) as server:
        vol = Volume(FsspecStore(server.url + "/u", skip_instance_cache=True), parallel=2)
        server.stats(reset=True)
        assert np.array_equal(vol[...], data)
        assert server.stats()["max in flight"] > 32
        limits.set_io_concurrency(5)
        try:
            server.stats(reset=True)
            vol = Volume(FsspecStore(server.url + "/u", skip_instance_cache=True), parallel=2)
            assert np.array_equal(vol[...], data)
            assert server.stats()["max in flight"] <= 5
            server.stats(reset=True)
            store = FsspecStore(server.url + "/u", skip_instance_cache=True, io_concurrency=3)
            assert np.array_equal(Volume(store)[...], data)
            assert server.stats()["max in flight"] <= 3
        finally:
            limits.set_io_concurrency(64)


def test_a_cold_read_of_most_of_a_remote_shard_reads_it_whole(tmp_path):
    """A full read of 8 shards: 8 requests (no index round trips first); a second read of
    a box, with the indexes cached, reads ranges only."""
    data = np.random.default_rng(4).integers(0, 255, (64, 64, 64, 1), dtype=np.uint8)
    _tensorstore_volume(tmp_path / "s", data, ALIGNED)
    with FaultServer(str(tmp_path)) as server:
        vol = Volume(FsspecStore(server.url + "/s", skip_instance_cache=True))
        server.stats(reset=True)
        assert np.array_equal(vol[...], data)
        stats = server.stats()
        assert stats["requests"] == 8, stats
        box = (slice(3, 40), slice(5, 21), slice(0, 30))
        assert np.array_equal(vol[box], data[box])
        assert server.stats()["bytes"] < stats["bytes"] + data.nbytes // 2


def test_a_read_of_all_of_a_remote_shard_reads_it_whole_whatever_its_size(tmp_path,
                                                                          monkeypatch):
    """Shards whose chunks hold more than WHOLE_SHARD_BYTES decoded: a read that wants all
    of each reads it whole (8 requests), a cold read of half of one its index, minishard
    index and data (3)."""
    monkeypatch.setattr(sharded, "WHOLE_SHARD_BYTES", 1)
    data = np.random.default_rng(6).integers(0, 255, (64, 64, 64, 1), dtype=np.uint8)
    _tensorstore_volume(tmp_path / "s", data, ALIGNED)
    with FaultServer(str(tmp_path)) as server:
        handles = [Volume(FsspecStore(server.url + "/s", skip_instance_cache=True),
                          cache_bytes=0) for _ in range(2)]
        server.stats(reset=True)
        assert np.array_equal(handles[0][...], data)
        assert server.stats(reset=True)["requests"] == 8
        half = (slice(0, 32), slice(0, 32), slice(0, 16))  # 4 of shard 0's 8 chunks
        assert np.array_equal(handles[1][half], data[half])
        assert server.stats()["requests"] == 3


def test_a_streamed_read_holds_at_most_its_window_ahead_of_the_caller(files):
    """Ranged requests whose answers the caller has not taken yet stay within the window."""
    server, _ = files
    store = _store(server)
    reqs = [("f", (i * 1000, i * 1000 + 1000)) for i in range(60)]
    server.set(latency=0.01)
    server.stats(reset=True)
    taken = []
    for i, value in store.iter_get_many_if(reqs, {}, window=5000):
        assert value == VALUE[reqs[i][1][0]:reqs[i][1][1]]
        taken.append(i)
        time.sleep(0.005)
    assert sorted(taken) == list(range(60))
    assert server.stats()["max in flight"] <= 5


def test_streamed_values_are_read_only_views_of_their_own_and_get_gives_bytes(tmp_path):
    """Bodies of 256 KiB and more land in buffers of their own: a streamed read hands
    them over as read-only views (not copied into bytes), each of its own buffer; small
    ones and get() are bytes."""
    rng = np.random.default_rng(5)
    sizes = {"a": 262_144, "b": 300_001, "c": 1000, "d": 262_144}
    blobs = {k: rng.integers(0, 256, n, np.uint8).tobytes() for k, n in sizes.items()}
    for k, blob in blobs.items():
        (tmp_path / k).write_bytes(blob)
    with FaultServer(str(tmp_path), latency=0.005) as server:
        store = _store(server)
        got = dict(store.iter_get_many_if(list(blobs), {}))
        values = {k: got[i] for i, k in enumerate(blobs)}
        for k, value in values.items():
            assert value is not None and bytes(value) == blobs[k]
            assert isinstance(value, bytes) == (sizes[k] < 262_144), k
        big = [v for v in values.values() if isinstance(v, memoryview)]
        assert len(big) == 3 and all(v.readonly for v in big)
        arrays = [np.frombuffer(v, np.uint8) for v in big]
        assert not any(np.shares_memory(x, y) for i, x in enumerate(arrays)
                       for y in arrays[i + 1:])
        assert isinstance(store.get("a"), bytes) and store.get("a") == blobs["a"]


def test_whole_values_smaller_than_their_estimates_are_requested_together(tmp_path):
    """Shard files estimated by their decoded bytes (jpeg: seven times the file): once
    the first answer gives its true size, the others' estimates shrink alike and they
    go out together, as far as the window holds them."""
    for i in range(6):
        (tmp_path / f"s{i}").write_bytes(VALUE[: 2000 + i])
    with FaultServer(str(tmp_path)) as server:
        store = _store(server)
        server.set(slow=1.0, slow_seconds=0.3)  # (each body over 0.3 s: the GETs overlap)
        keys = [f"s{i}" for i in range(6)]

        def read(window: int) -> int:
            server.stats(reset=True)
            got = {i: bytes(v.view()) for i, v in store.iter_get_arriving(
                keys, window=window, sizes=[15_000] * 6) if v.done}
            assert got == {i: VALUE[: 2000 + i] for i in range(6)}
            return server.stats()["max in flight"]

        assert read(20_000) >= 5  # (one at a time by the estimates alone)
        assert read(5_000) <= 3  # (true sizes of 2,000 each)


def test_values_without_an_estimate_give_their_room_back(tmp_path):
    """A value streamed without an estimate takes its true size of the window once known,
    and gives it back when taken: the values after it still start."""
    for i, size in enumerate([1000, 600, 600]):
        (tmp_path / f"s{i}").write_bytes(VALUE[:size])
    with FaultServer(str(tmp_path)) as server:
        store = _store(server)
        got: dict[int, bytes] = {}

        def read() -> None:
            for i, v in store.iter_get_arriving(["s0", "s1", "s2"], window=1000,
                                                sizes=[None, 600, 600]):
                if v.done:
                    got[i] = bytes(v.view())

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout=30)
        assert not reader.is_alive(), "the read waits for room that never comes back"
        assert got == {0: VALUE[:1000], 1: VALUE[:600], 2: VALUE[:600]}


def _four_minishards(tmp_path, monkeypatch):
    """A 64^3 volume of 16^3 chunks in 8 shards, each of 4 minishards of 2 chunks; remote
    reads ask for each minishard index apart (not coalesced with the ones near it)."""
    monkeypatch.setattr(sharding_reader, "REMOTE_COALESCE_GAP", 0)
    spec = {**ALIGNED, "preshift_bits": 1, "minishard_bits": 2, "shard_bits": 3}
    data = np.random.default_rng(5).integers(0, 255, (64, 64, 64, 1), dtype=np.uint8)
    _tensorstore_volume(tmp_path / "m", data, spec)
    return data


CHUNK_A = (slice(0, 16), slice(0, 16), slice(0, 16))  # of _four_minishards: minishard 0
CHUNK_B = (slice(16, 32), slice(16, 32), slice(16, 32))  # the same shard's minishard 3


def test_a_remote_shard_touched_once_needs_one_round_trip_after(tmp_path, monkeypatch):
    """The first read of a shard is followed by a fetch of the minishard indexes it did
    not need: a later read of other chunks of that shard is one request."""
    data = _four_minishards(tmp_path, monkeypatch)
    with FaultServer(str(tmp_path)) as server:
        vol = Volume(FsspecStore(server.url + "/m", skip_instance_cache=True))
        a, b = CHUNK_A, CHUNK_B
        server.stats(reset=True)
        assert np.array_equal(vol[a], data[a])
        # its shard index, minishard index and chunk, then the other three minishard indexes
        deadline = time.monotonic() + 30
        while server.stats()["requests"] < 6 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.stats()["requests"] == 6
        server.stats(reset=True)
        assert np.array_equal(vol[b], data[b])
        assert server.stats()["requests"] == 1


def test_a_shard_without_versions_gets_its_other_minishards_with_the_first_read(
        tmp_path, monkeypatch):
    """Where the store has no version tokens, a fetch after the read could cache an old
    file's minishard indexes after a writer's invalidate(): they come with the read."""
    data = _four_minishards(tmp_path, monkeypatch)
    with FaultServer(str(tmp_path), latency=0.1) as server:  # (a fetch after: not in yet)
        vol = Volume(FsspecStore(server.url + "/m", skip_instance_cache=True,
                                 versioned_reads=False))
        a, b = CHUNK_A, CHUNK_B
        server.stats(reset=True)
        assert np.array_equal(vol[a], data[a])
        # its shard index, the four minishard indexes (all cached as it returns), its chunk
        assert len(vol.chunk_store.reader.minishard_index_cache) == 4
        assert server.stats()["requests"] == 6
        server.stats(reset=True)
        assert np.array_equal(vol[b], data[b])
        assert server.stats()["requests"] == 1


def test_the_first_read_of_a_remote_shard_does_not_wait_for_other_minishards(
        tmp_path, monkeypatch):
    """The shard's other minishard indexes are asked for once the read has its chunk: the
    read returns while they hang (fetched with the one it needed, it waited 30 s)."""
    data = _four_minishards(tmp_path, monkeypatch)
    with FaultServer(str(tmp_path)) as server:
        # (no retries: the hanging requests end when the server does)
        vol = Volume(FsspecStore(server.url + "/m", skip_instance_cache=True, retries=0))
        a = CHUNK_A
        server.set(plan=["ok"] * 3 + ["hang"] * 3)  # the other minishard indexes hang
        got = {}
        reader = threading.Thread(target=lambda: got.update(a=vol[a]), daemon=True)
        reader.start()
        reader.join(timeout=10)
        assert not reader.is_alive(), "the first read waits for minishard indexes it never used"
        assert np.array_equal(got["a"], data[a])
    for fetch in threading.enumerate():  # (their requests must not outlive the test)
        if fetch.name == "shardvol-minishard-indexes":
            fetch.join(timeout=30)


def test_an_exiting_interpreter_does_not_wait_for_the_minishard_indexes_fetched_after(
        tmp_path, monkeypatch):
    """A script that reads a chunk and ends exits while the fetch of its shard's other
    minishard indexes hangs."""
    data = _four_minishards(tmp_path, monkeypatch)
    script = (
        "import sys\n"
        "from shardvol import Volume\n"
        "from shardvol.kvstore.fsspec_store import FsspecStore\n"
        "from shardvol.sharding import reader\n"
        "reader.REMOTE_COALESCE_GAP = 0\n"
        "vol = Volume(FsspecStore(sys.argv[1] + '/m', skip_instance_cache=True))\n"
        "print('open', flush=True)\n"
        "sys.stdin.readline()\n"
        "print(int(vol[0:16, 0:16, 0:16].sum()), flush=True)\n"
    )
    with FaultServer(str(tmp_path)) as server, subprocess.Popen(
            [sys.executable, "-c", script, server.url], text=True, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE) as child:
        try:
            assert child.stdout is not None and child.stdin is not None
            assert child.stdout.readline() == "open\n"
            server.set(plan=["ok"] * 3 + ["hang"] * 3)  # the other minishard indexes hang
            child.stdin.write("\n")
            child.stdin.flush()
            assert child.wait(timeout=20) == 0, "the exit waited for the background fetch"
            assert int(child.stdout.read()) == int(data[0:16, 0:16, 0:16].sum())
        finally:
            child.kill()


def test_a_read_needing_a_minishard_index_being_fetched_shares_its_request(
        tmp_path, monkeypatch):
    """A read right after the first one needs a minishard index the fetch after the first
    is reading: it waits for the same answer (the store shares a GET in flight) rather
    than asking again."""
    data = _four_minishards(tmp_path, monkeypatch)
    with FaultServer(str(tmp_path), latency=0.1) as server:
        vol = Volume(FsspecStore(server.url + "/m", skip_instance_cache=True))
        a, b = CHUNK_A, CHUNK_B
        server.stats(reset=True)
        assert np.array_equal(vol[a], data[a])
        assert np.array_equal(vol[b], data[b])
        # a: shard index, minishard index, chunk; the other three minishard indexes; b: its
        # chunk
        assert server.stats()["requests"] == 7


def test_remote_writes_keep_many_uploads_in_flight(s3_proxy):
    """128 chunk files written to S3 with 2 threads: not 8 uploads at a time (the local
    writers' count) but many, each one PUT."""
    bucket = new_bucket()
    vol = Volume.create(_s3(s3_proxy, bucket), size=[128, 64, 64], data_type="uint8",
                        chunk_size=[16, 16, 16], encoding="raw", parallel=2)
    data = np.random.default_rng(6).integers(0, 255, vol.shape, dtype=np.uint8)
    s3_proxy.set(latency=0.05)
    s3_proxy.stats(reset=True)
    vol[...] = data
    assert s3_proxy.stats()["max in flight"] > 16
    s3_proxy.set(latency=0.0)
    assert np.array_equal(Volume(FsspecStore(bucket + "/root", skip_instance_cache=True))[...],
                          data)


def test_a_remote_zarr_array_streams_whole_shards_and_ranges(tmp_path):
    """A sharded Zarr array that zarr-python wrote, read over HTTP (also with faults): a full
    read is one request per shard; a box wanting half the chunks of a cold shard reads it
    whole; one wanting fewer reads its index, then the chunks."""
    import zarr

    data = np.random.default_rng(7).integers(0, 2**16, (64, 64, 32), dtype=np.uint16)
    arr = zarr.create_array(str(tmp_path / "z"), shape=data.shape, dtype="uint16",
                            shards=(32, 32, 32), chunks=(8, 8, 8), compressors=None)
    arr[...] = data
    with FaultServer(str(tmp_path)) as server:
        import shardvol.zarr3 as z

        store = FsspecStore(server.url + "/z", skip_instance_cache=True)
        server.stats(reset=True)
        assert np.array_equal(z.open(store)[...], data)
        assert server.stats()["GET"] == 1 + 4  # zarr.json, 4 shards
        server.stats(reset=True)
        half = (slice(0, 32), slice(0, 32), slice(0, 16))  # 32 of the shard's 64 chunks
        assert np.array_equal(z.open(store, cache_bytes=0)[half], data[half])
        assert server.stats()["GET"] == 1 + 1  # zarr.json, the shard
        server.stats(reset=True)
        box = (slice(1, 9), slice(40, 50), slice(3, 20))
        assert np.array_equal(z.open(store, cache_bytes=0)[box], data[box])
        assert server.stats()["GET"] == 1 + 2  # zarr.json, the index, the chunks (coalesced)
        server.set(error=0.05, reset=0.025, seed=2)
        for _ in range(3):
            assert np.array_equal(z.open(store, cache_bytes=0)[...], data)


def test_a_stalled_request_is_retried_not_waited_out(files, transport):
    server, _ = files
    store = _store_via(server, transport, stall=0.5, timeout=20)
    server.set(plan=["hang"])
    server.stats(reset=True)
    start = time.monotonic()
    assert store.get("f") == VALUE
    assert time.monotonic() - start < 5 and server.stats()["GET"] == 2


def _take_lock_and_write(url: str, endpoint: str, value: bytes) -> None:
    b = FsspecStore(url, skip_instance_cache=True, lease_ttl=2, endpoint_url=endpoint)
    with b.lock("k"):
        b.set("k", value)


def test_a_write_retried_past_its_lease_never_lands(s3_proxy, s3):
    """Writer A's PUT under its lock is refused for longer than its lease can last; another
    process takes the stale lease over, writes and releases; then the store answers A
    again. A's retries stop once its lease may have run out (LockLostError), so B's value
    stays (A's retried PUT used to land on top of it)."""
    import multiprocessing
    import threading

    from shardvol.errors import LockLostError

    bucket = new_bucket()
    a = _s3(s3_proxy, bucket, lease_ttl=2, retries=100, timeout=30)
    errors = []

    def writer_a():
        try:
            with a.lock("k"):
                s3_proxy.set(error=1.0)
                a.set("k", b"A")
        except LockLostError as e:
            errors.append(e)

    ta = threading.Thread(target=writer_a)
    ta.start()
    time.sleep(0.5)
    ctx = multiprocessing.get_context("spawn")
    b = ctx.Process(target=_take_lock_and_write, args=(bucket + "/root", s3, b"B"))
    b.start()
    b.join(60)
    assert b.exitcode == 0
    s3_proxy.set(error=0.0)
    ta.join(60)
    assert errors, "A's write was not refused"
    assert FsspecStore(bucket + "/root", skip_instance_cache=True).get("k") == b"B"


def test_what_is_retried_and_what_fails_at_once():
    import socket

    import aiohttp
    from aiohttp.client_reqrep import ConnectionKey

    from shardvol.kvstore.retry import transient

    key = ConnectionKey("example.org", 443, True, None, None, None, None)
    info = aiohttp.RequestInfo(url=aiohttp.client.URL("http://x/"), method="GET", headers={},
                               real_url=aiohttp.client.URL("http://x/"))
    for status, expected in ((503, True), (429, True), (408, True), (404, False), (412, False),
                             (403, False)):
        assert transient(aiohttp.ClientResponseError(info, (), status=status)) is expected
    assert transient(aiohttp.ServerTimeoutError("sock_read"))
    assert transient(aiohttp.ServerDisconnectedError())
    assert transient(ConnectionResetError())
    again = socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
    assert transient(aiohttp.ClientConnectorDNSError(key, again))
    noname = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    assert not transient(aiohttp.ClientConnectorDNSError(key, noname))
    import ssl

    cert = ssl.SSLCertVerificationError(1, "certificate verify failed")
    assert not transient(aiohttp.ClientConnectorCertificateError(key, cert))


def test_the_deadline_does_not_count_time_queued_for_the_budget(files):
    """24 requests through 2 slots, each answered after 0.3 s, with a 2 s deadline: every
    request is answered in time once it is sent, so none fails."""
    server, _ = files
    store = _store(server, io_concurrency=2, timeout=2)
    server.set(latency=0.3)
    reqs = [("f", (i, i + 10)) for i in range(24)]
    assert store.get_many(reqs) == [VALUE[i : i + 10] for i in range(24)]


def test_stopping_a_streamed_read_cancels_what_it_started(files):
    import asyncio

    server, _ = files
    store = _store(server)
    # the first answer comes at once, the others trickle in: under way when counted
    server.set(plan=["ok"] + ["slow"] * 40, slow_seconds=3.0)
    reqs = [("f", (i * 1000, i * 1000 + 1000)) for i in range(40)]
    stream = store.iter_get_many_if(reqs, {}, window=20_000)
    next(stream)
    stream.close()
    time.sleep(0.3)
    loop = store.fs.loop
    left = asyncio.run_coroutine_threadsafe(_count_tasks(), loop).result()
    assert left == 0


async def _count_tasks() -> int:
    import asyncio

    me = asyncio.current_task()
    return sum(1 for t in asyncio.all_tasks() if t is not me and not t.done()
               and ("finish" in repr(t) or "fetch" in repr(t)))  # (and the shared GETs)


def test_a_read_after_a_write_is_not_answered_by_a_get_sent_before_it(s3_proxy):
    """The store shares identical GETs in flight, but not across a write of the object."""
    store = _s3(s3_proxy, new_bucket())
    old, new = b"o" * 1000, b"n" * 1000
    store.set("obj", old)
    assert store.get("obj") == old  # (the reads' first request made their client: before)
    s3_proxy.set(plan=["slow"], slow_seconds=1.0)  # (the next answer's body trickles out)
    slow = submit(lambda: store.get("obj"))
    time.sleep(0.3)  # (its GET has read the object, and is in flight)
    store.set("obj", new)
    assert store.get("obj") == new
    assert slow.result() == old


def test_a_read_under_way_during_a_write_does_not_cache_the_old_chunk(s3_proxy):
    """A read fetching a chunk while the same handle writes it may return either, but the
    cache must not keep the old bytes: the next read sees the write."""
    store = _s3(s3_proxy, new_bucket())
    vol = Volume.create(store, size=[32, 32, 16], chunk_size=[32, 32, 16], data_type="uint16")
    rng = np.random.default_rng(8)
    old, new = (rng.integers(0, 60000, (32, 32, 16, 1), dtype=np.uint16) for _ in range(2))
    vol[...] = old
    assert vol.cache is not None
    vol.cache.clear()
    assert store.get("info") is not None  # (the reads' first request made their client)
    s3_proxy.set(plan=["slow"], slow_seconds=1.0)  # (the read's GET trickles in)
    reading = vol.read_async(...)
    time.sleep(0.3)
    vol[...] = new
    got = reading.result()
    assert np.array_equal(got, old) or np.array_equal(got, new)
    assert np.array_equal(vol[...], new)
