"""S3's and GCS's writes through shardvol's client (shardvol/kvstore/s3_writes.py,
gcs_writes.py), against the fault server's S3 and GCS APIs over files
(tests/fault_server.py: S3's PUTs and GCS's uploads replace files whole, with S3's
conditions, and bodies are checked against their signed SHA-256 or their CRC-32C), so the
objects written are files that TensorStore reads: volumes written through them equal their
sources and the files a local write makes, also through 503s, resets and lost answers."""

from __future__ import annotations

import numpy as np
import pytest

from shardvol import Volume
from shardvol.errors import StoreError
from shardvol.kvstore.fsspec_store import FsspecStore

from .fault_server import FaultServer
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


@pytest.mark.parametrize("api", ["s3"], indirect=True)
def test_conditional_writes_through_s3(api):
    _, bucket, store_of = api
    store = store_of("d")
    assert store.set_if("k", b"1", None) and not store.set_if("k", b"2", None)
    assert store.set_if("k", b"3", store.get_versioned("k")[1])
    assert not store.set_if("k", b"4", '"stale"') and store.get("k") == b"3"
    assert not store.delete_if("k", '"stale"')
    assert store.delete_if("k", store.get_versioned("k")[1])
    assert sorted(p.name for p in (bucket / "d").iterdir()) == []


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
