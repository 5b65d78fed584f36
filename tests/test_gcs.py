"""gs:// stores against a GCS emulator (gcp-storage-emulator), as s3:// against moto:
the store contract, volumes that TensorStore wrote and reads back, and writes and reads
through a faulty proxy in front of the emulator.

The emulator ignores preconditions (ifGenerationMatch) and sends no generations, so
conditional requests cannot be exercised here: reads that require a generation are tested
against the fault server's GCS API (test_gcs_reads.py), and so are conditional writes,
leases and merges by several processes (test_remote_writes.py).
"""

from __future__ import annotations

import os
import pickle

import fsspec
import numpy as np
import pytest

from shardvol import Volume
from shardvol.errors import ByteRangeError, StoreError
from shardvol.kvstore.fsspec_store import FsspecStore

from .fault_server import FaultServer
from .gcs_server import gcs_server, new_bucket
from .oracles import ts_create, ts_read
from .test_kvstore import StoreContract


@pytest.fixture(scope="module")
def gcs():
    with gcs_server() as endpoint:
        yield endpoint


@pytest.fixture
def bucket(gcs):
    return new_bucket()


def _store(url: str, **kw) -> FsspecStore:
    return FsspecStore(url, token="anon", skip_instance_cache=True, **kw)


class TestGCSStore(StoreContract):
    @pytest.fixture
    def pair(self, bucket):
        s = _store(bucket + "/root")
        return s, s


SHARDING = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "murmurhash3_x86_128",
            "preshift_bits": 0, "minishard_bits": 2, "shard_bits": 2,
            "minishard_index_encoding": "gzip", "data_encoding": "gzip"}


def test_reads_of_no_bytes_ask_for_the_metadata(bucket):
    """GCS's JSON API answers no HEAD: a read of no bytes (which needs the value's length
    and generation) takes them from the object's metadata."""
    store = _store(bucket + "/e")
    store.set("k", b"hello world")
    assert store.get("k", (3, 3)) == store.get("k", (11, 11)) == b""
    assert store.get("absent", (1, 1)) is None
    with pytest.raises(ByteRangeError):
        store.get("k", (20, 20))
    ((value, version),) = store.get_many_versioned([("k", (2, 2))])
    assert value == b"" and version == str(store._info("k")["generation"])


def test_a_volume_tensorstore_wrote_reads_back_from_gcs(bucket, tmp_path):
    data = np.random.default_rng(8).integers(0, 2**16, (40, 36, 20, 1), dtype=np.uint16)
    t = ts_create(str(tmp_path / "v"), data_type="uint16", num_channels=1, size=[40, 36, 20],
                  chunk_size=[16, 16, 8], encoding="raw", sharding=SHARDING)
    t[...] = data
    fs = fsspec.filesystem("gs", token="anon")
    fs.put(str(tmp_path / "v"), bucket.removeprefix("gs://") + "/v", recursive=True)
    vol = Volume(_store(bucket + "/v"))
    assert np.array_equal(vol[...], data)
    assert np.array_equal(vol[3:30, 5:9, 2:19], data[3:30, 5:9, 2:19])


def test_what_shardvol_writes_to_gcs_tensorstore_reads(bucket, tmp_path):
    vol = Volume.create(_store(bucket + "/w"), size=[40, 36, 20], data_type="uint32",
                        chunk_size=[16, 16, 8], encoding="compressed_segmentation",
                        sharding=SHARDING)
    model = np.zeros(vol.shape, np.uint32)
    rng = np.random.default_rng(9)
    for _ in range(4):
        lo = rng.integers(0, [30, 27, 11])
        box = tuple(slice(a, a + 9) for a in lo)
        block = rng.integers(0, 50, model[box].shape, dtype=np.uint32)
        vol[box] = block
        model[box] = block
    fs = fsspec.filesystem("gs", token="anon")
    fs.get(bucket.removeprefix("gs://") + "/w", str(tmp_path / "w"), recursive=True)
    assert np.array_equal(ts_read(str(tmp_path / "w")), model)


def test_gcs_through_faults(gcs, tmp_path):
    """Requests refused (503), connections dropped before and after the emulator acted,
    bodies cut short: the writes land and the reads are exact."""
    bucket = new_bucket()
    os.makedirs(tmp_path / "empty")
    with FaultServer(str(tmp_path / "empty"), upstream=gcs) as proxy:
        store = _store(bucket + "/f", endpoint_url=proxy.url)
        vol = Volume.create(store, size=[48, 48, 16], data_type="uint8", chunk_size=[16, 16, 16],
                            encoding="raw", sharding=SHARDING)
        data = np.random.default_rng(10).integers(0, 255, vol.shape, dtype=np.uint8)
        proxy.set(error=0.05, reset=0.025, lost=0.025, short=0.025, seed=5)
        vol[...] = data
        vol[5:20, 7:30, 2:9] = data[5:20, 7:30, 2:9] // 2
        data[5:20, 7:30, 2:9] //= 2
        assert np.array_equal(Volume(store)[...], data)
        proxy.set(error=0.0, reset=0.0, lost=0.0, short=0.0)
        assert np.array_equal(Volume(_store(bucket + "/f"))[...], data)
        faults = {k: v for k, v in proxy.stats().items() if k.startswith("fault ")}
        assert sum(v for k, v in faults.items() if k != "fault ok") > 0, faults




def test_each_attempt_is_one_request_and_other_gcsfs_users_keep_its_retries(gcs, tmp_path):
    """gcsfs's own retry loop (waits from half a second, inside each of the store's
    attempts) is off in the store's filesystem: a store allowed no retry fails on one 503,
    and one allowed two sends three requests.  A plain gcsfs filesystem still retries."""
    bucket = new_bucket()
    os.makedirs(tmp_path / "empty")
    with FaultServer(str(tmp_path / "empty"), upstream=gcs) as proxy:
        _store(bucket + "/r", endpoint_url=proxy.url).set("k", b"value")
        proxy.stats(reset=True)
        proxy.set(plan=["error 503"])
        with pytest.raises(StoreError, match="1 attempt"):
            _store(bucket + "/r", endpoint_url=proxy.url, retries=0).get("k")
        assert proxy.stats(reset=True)["requests"] == 1
        proxy.set(plan=["error 503", "error 503"])
        assert _store(bucket + "/r", endpoint_url=proxy.url, retries=2).get("k") == b"value"
        assert proxy.stats(reset=True)["requests"] == 3
        proxy.set(plan=["error 503"])
        plain = fsspec.filesystem("gs", token="anon", endpoint_url=proxy.url,
                                  skip_instance_cache=True)
        assert plain.cat(bucket[len("gs://"):] + "/r/k") == b"value"
        assert proxy.stats()["requests"] == 2


def test_a_gs_volume_pickles_and_reads_where_it_is_unpickled(bucket):
    """Dask ships volumes to its workers: the store's filesystem class is importable."""
    vol = Volume.create(_store(bucket + "/p"), size=[20, 20, 20], data_type="uint8",
                        chunk_size=[8, 8, 8], encoding="raw")
    data = np.random.default_rng(12).integers(0, 255, vol.shape, dtype=np.uint8)
    vol[...] = data
    assert np.array_equal(pickle.loads(pickle.dumps(vol))[...], data)

# (aiohttp's advice to gcsfs, which hands it the bytes of a chunk)
@pytest.mark.filterwarnings("ignore:Sending a large body:ResourceWarning")
def test_a_large_value_goes_up_whole(bucket):
    """60 MiB to gs (gcsfs's resumable upload, in chunks of 50 MiB; shardvol's multipart
    uploads are S3's), read back exact."""
    data = np.random.default_rng(11).integers(0, 256, 60 << 20, dtype=np.uint8).tobytes()
    _store(bucket + "/big").set("v", data)
    assert _store(bucket + "/big").get("v") == data

