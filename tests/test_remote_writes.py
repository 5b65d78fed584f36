"""S3's and GCS's writes through shardvol's client (shardvol/kvstore/s3_writes.py,
gcs_writes.py), against the fault server's S3 and GCS APIs over files
(tests/fault_server.py: S3's PUTs and GCS's uploads replace files whole, with S3's
conditions, and bodies are checked against their signed SHA-256 or their CRC-32C), so the
objects written are files that TensorStore reads: volumes written through them equal their
sources and the files a local write makes, also through 503s, resets and lost answers."""

from __future__ import annotations

import multiprocessing
import time

import numpy as np
import pytest

from shardvol import Volume
from shardvol.errors import StoreError
from shardvol.kvstore.fsspec_store import FsspecStore

from . import test_s3_cas as cas
from .fault_server import FaultServer
from .http_server import Serving
from .oracles import ts_read
from .s3_server import ENV
from .stores import stored_files


@pytest.fixture(params=["s3", "gs"])
def api(request, tmp_path, monkeypatch):
    """The fault server over ``tmp_path``, whose directory ``bucket`` is a bucket, and a
    function that makes a store of a path in it through S3's or GCS's API."""
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    (tmp_path / "bucket").mkdir()
    with FaultServer(str(tmp_path)) as server:
        def store(name: str) -> FsspecStore:
            made = FsspecStore(f"{request.param}://bucket/{name}", endpoint_url=server.url,
                               skip_instance_cache=True,
                               **({"token": "anon"} if request.param == "gs" else {}))
            assert made._direct is not None
            return made

        yield server, tmp_path / "bucket", store


@pytest.mark.parametrize("sharding", [None, {"@type": "neuroglancer_uint64_sharded_v1",
                                             "preshift_bits": 1, "hash": "identity",
                                             "minishard_bits": 2, "shard_bits": 1,
                                             "minishard_index_encoding": "gzip",
                                             "data_encoding": "gzip"}])
@pytest.mark.parametrize("faults", [False, True])
def test_volumes_written_through_the_api_are_the_files_of_a_local_write(api, tmp_path,
                                                                        sharding, faults):
    server, bucket, store = api
    data = np.random.default_rng(5).integers(0, 255, (70, 50, 40, 1), dtype=np.uint8)

    def write(store: FsspecStore | str) -> None:
        vol = Volume.create(store, size=data.shape[:3], data_type="uint8",
                            chunk_size=[16, 16, 8], sharding=sharding)
        vol[...] = data
        vol[5:40, 3:33, 1:20] = data[5:40, 3:33, 1:20] // 2  # (unaligned: read and rewritten)

    if faults:
        server.set(error=0.15, reset=0.1, lost=0.1, seed=13)
    write(store("v"))
    server.set(error=0.0, reset=0.0, lost=0.0)
    write(str(tmp_path / "local"))
    expected = data.copy()
    expected[5:40, 3:33, 1:20] //= 2
    np.testing.assert_array_equal(ts_read(str(bucket / "v")), expected)
    local = {k: v for k, v in stored_files(str(tmp_path / "local")).items()
             if ".shardvol-locks" not in k}  # (the local store's lock files)
    assert stored_files(str(bucket / "v")) == local
    stats = server.stats()
    assert stats["PUT"] + stats["POST"] >= len(local)
    assert not faults or stats["fault error"] + stats["fault reset"] + stats["fault lost"]


def test_deletes_through_the_api(api):
    _, bucket, store_of = api
    store = store_of("d")
    store.set("gone", b"x")
    store.set("kept", b"y")
    store.delete("gone")
    store.delete("never")  # (absent: done)
    assert sorted(p.name for p in (bucket / "d").iterdir()) == ["kept"]


def test_many_deletes_go_at_once_and_through_faults(api, monkeypatch):
    """delete_many sends its DELETEs together (the server sees many in flight), in batches,
    retries those that meet 503s and resets, and counts absent keys as deleted."""
    from shardvol.kvstore import fsspec_store

    monkeypatch.setattr(fsspec_store, "_DELETE_BATCH", 10)  # (three batches here)
    server, bucket, store_of = api
    store = store_of("m")
    keys = [f"k/{i}" for i in range(24)]
    for key in keys:
        store.set(key, key.encode())
    store.set("kept", b"y")
    server.set(latency=0.15, error=0.2, reset=0.1, seed=3)
    store.delete_many([*keys, "never"])
    stats = server.stats()
    server.set(latency=0.0, error=0.0, reset=0.0)
    assert [p.name for p in (bucket / "m").rglob("*") if p.is_file()] == ["kept"]
    assert 5 <= stats["max in flight"] <= 10  # (one after another: 1)
    assert stats["fault error"] + stats["fault reset"]


def test_a_region_is_deleted_a_chunk_and_its_copies_at_once(api):
    """Volume.delete through S3's and GCS's APIs: the chunks' DELETEs (each with those of
    its compressed copies, NAME.gz ...) go out together, and the region reads as zeros."""
    server, bucket, store_of = api
    data = np.random.default_rng(4).integers(1, 255, (64, 64, 32, 1), dtype=np.uint8)
    vol = Volume.create(store_of("r"), size=data.shape[:3], data_type="uint8",
                        chunk_size=[16, 16, 16])
    vol[...] = data
    server.set(latency=0.15)
    server.stats(reset=True)
    vol.delete(np.s_[0:64, 0:32, 0:32])
    stats = server.stats()
    server.set(latency=0.0)
    assert stats["DELETE"] == 16 * 6  # (16 chunks, each with its 5 copies' names)
    assert stats["max in flight"] >= 5  # (one after another: 1)
    expected = data.copy()
    expected[:, :32] = 0
    np.testing.assert_array_equal(Volume(store_of("r"))[...], expected)
    assert len([p for p in (bucket / "r").rglob("*") if p.is_file()]) == 1 + 16


def test_conditional_writes(api):
    """set_if, delete_if, set_parts_if (the parts sent unjoined): S3's If-None-Match /
    If-Match, GCS's ifGenerationMatch."""
    _, bucket, store_of = api
    store = store_of("d")
    assert store.conditional_writes and store.locks_across_processes
    stale = '"stale"' if store.url.startswith("s3") else "12345"
    assert store.set_if("k", b"1", None) and not store.set_if("k", b"2", None)
    assert store.set_if("k", b"3", store.get_versioned("k")[1])
    assert not store.set_if("k", b"4", stale) and store.get("k") == b"3"
    assert not store.delete_if("k", stale)
    assert store.delete_if("k", store.get_versioned("k")[1])
    assert not store.set_if("gone", b"5", stale)  # (absent: no version to match)
    assert sorted(p.name for p in (bucket / "d").iterdir()) == []
    parts = [b"ab", memoryview(b"cde"), b"", np.arange(3, dtype=np.uint16).data]
    assert store.set_parts_if("p", parts, None) and not store.set_parts_if("p", [b"x"], None)
    assert store.set_parts_if("p", parts[::-1], store.get_versioned("p")[1])
    assert (bucket / "d" / "p").read_bytes() == b"".join(bytes(p) for p in parts[::-1])


def _increment(url: str, options: dict, n: int) -> None:
    store = FsspecStore(url, **options)
    for _ in range(n):
        with store.lock("counter"):
            v = int(store.get("counter"))
            time.sleep(0.005)  # (widens the window a lost update would need)
            store.set("counter", str(v + 1).encode())


def test_locks_hold_across_processes(api):
    server, bucket, store_of = api
    store = store_of("c")
    store.set("counter", b"0")
    options = {"endpoint_url": server.url, **({"token": "anon"} if store.url[:2] == "gs"
                                             else {})}
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_increment, args=(store.url, options, 6)) for _ in range(2)]
    for p in procs:
        p.start()
    _increment(store.url, options, 6)
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    assert store.get("counter") == b"18"
    assert sorted(p.name for p in (bucket / "c").iterdir()) == ["counter"]  # (no leases)


def _merge_boxes(url: str, options: dict, kind: str, worker: int, n: int, start) -> None:
    h = cas._open(kind, FsspecStore(url, **options))
    start.wait(60)  # (every process ready: their merges overlap)
    for k in range(n):
        h[cas._proc_box(worker, k)] = worker * 16 + k + 1


@pytest.mark.parametrize("kind", ["precomputed sharded", "zarr3 unsharded"])
def test_processes_merging_into_one_unit_through_faults_lose_nothing(api, kind):
    """Three processes merge parts into one unit (read, conditional write, redone from a
    fresh read when another changed it) while 5% of the requests are refused, 2.5% of the
    connections dropped and 5% of the answers lost after the server acted."""
    server, _, store_of = api
    store = store_of("m")
    cas._create(kind, store)
    options = {"endpoint_url": server.url, **({"token": "anon"} if store.url[:2] == "gs"
                                             else {})}
    server.set(error=0.05, reset=0.025, lost=0.05, seed=7)
    n, workers = 5, 3
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(workers)
    procs = [ctx.Process(target=_merge_boxes, args=(store.url, options, kind, w, n, start))
             for w in range(1, workers)]
    for p in procs:
        p.start()
    _merge_boxes(store.url, options, kind, 0, n, start)
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    stats = server.stats()
    server.set(error=0.0, reset=0.0, lost=0.0)
    model = np.zeros(cas.SHAPE, np.uint16)
    for w in range(workers):
        for k in range(n):
            model[cas._proc_box(w, k)] = w * 16 + k + 1
    assert np.array_equal(cas._read(cas._open(kind, store_of("m"), cache_bytes=0)), model)
    assert stats["fault lost"] > 0 and stats["fault error"] > 0, stats


def test_a_conditional_write_whose_answer_was_lost_is_not_redone(api):
    """A merge's conditional write lands but its answer is lost: the retry fails its
    condition, finds the object holding its own bytes, and is done."""
    server, _, store_of = api
    h = cas._create("precomputed sharded", store_of("l"))
    h[...] = 9
    server.stats(reset=True)
    server.set(plan=["ok", "lost"])  # the read, then the write
    h[cas.B] = 4
    stats = server.stats()
    writes = stats["PUT"] + stats["POST"]
    # the read, the write (lost), its retry (412), the read that finds our bytes
    assert (stats["fault lost"], stats["GET"], writes, stats["requests"]) == (1, 2, 2, 4), stats
    want = np.full(cas.SHAPE, 9, np.uint16)
    want[cas.B] = 4
    assert np.array_equal(cas._read(cas._open("precomputed sharded", store_of("l"),
                                              cache_bytes=0)), want)


def test_a_body_changed_on_the_way_is_refused(api, monkeypatch):
    """The hash an upload carries (S3: signed, its SHA-256; GCS: in its metadata, its
    CRC-32C) is the body's: a body changed on the way (here: a hash of other bytes) is
    refused, and the store says so."""
    _, bucket, store_of = api
    store = store_of("h")
    direct = type(store._direct)
    true = direct.checksum
    monkeypatch.setattr(direct, "checksum", staticmethod(lambda parts: true([b"x", *parts])))
    with pytest.raises(StoreError, match=r"XAmzContentSHA256Mismatch|doesn't match"):
        store.set("k", b"value")
    assert not (bucket / "h" / "k").exists()


@pytest.mark.parametrize("api", ["s3"], indirect=True)
def test_large_values_are_uploaded_to_s3_in_parts(api):
    """From ``multipart_threshold`` bytes, S3's multipart uploads (through botocore); a
    set_parts value of many parts is the same object."""
    server, bucket, store_of = api
    store = FsspecStore(store_of("p").url, endpoint_url=server.url, skip_instance_cache=True,
                        multipart_threshold=5 << 20, part_size=5 << 20)
    value = np.random.default_rng(2).bytes(12 << 20)
    store.set("big", value)
    store.set_parts("parts", [value[:3 << 20], memoryview(value)[3 << 20:]])
    assert (bucket / "p" / "big").read_bytes() == value == (bucket / "p" / "parts").read_bytes()
    assert server.stats()["PUT"] == 6  # (3 parts each)
    assert not [p for p in (bucket / "p").iterdir() if "upload" in p.name]


class _Nonsense(Serving):
    """A server that answers every request 200, with a body that is not what S3 or GCS
    would send (reading the request's body first)."""

    def __init__(self) -> None:
        import http.server

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.send_response(200)
                self.send_header("Content-Length", "9")
                self.end_headers()
                self.wfile.write(b"<garbage>")

            do_POST = do_PUT = do_GET = do_DELETE = _answer

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(Handler)


def test_answers_that_are_not_s3s_or_gcss_are_errors_that_say_so(monkeypatch):
    """A multipart upload's create answered without an UploadId, a GCS conditional upload
    answered without the object's metadata: StoreErrors naming what is missing, not a
    crash or a write taken for done."""
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    server = _Nonsense()
    try:
        s3 = FsspecStore("s3://b/v", endpoint_url=server.url, skip_instance_cache=True,
                         multipart_threshold=5 << 20, part_size=5 << 20, retries=0)
        with pytest.raises(StoreError, match="without its UploadId"):
            s3.set("big", bytes(6 << 20))
        gs = FsspecStore("gs://b/v", endpoint_url=server.url, token="anon", retries=0,
                         skip_instance_cache=True)
        with pytest.raises(StoreError, match="not an object's metadata"):
            gs.set_if("k", b"v", None)
    finally:
        server.close()
