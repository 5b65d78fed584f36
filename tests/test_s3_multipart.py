"""Large S3 writes as multipart uploads (moto's server, behind the fault server), through
shardvol's client (options of botocore's own: through botocore): parts sent concurrently
and retried one by one, the object atomic and exact, conditional creates, and no upload
left behind when one fails.  Oracles: boto3's view of the bucket
(ETags, the uploads in progress) and TensorStore reading a volume written this way."""

from __future__ import annotations

import hashlib
import itertools
import time

import numpy as np
import pytest

from shardvol import Volume
from shardvol.errors import InvalidArgumentError, StoreError
from shardvol.kvstore.fsspec_store import FsspecStore
from shardvol.kvstore.s3_multipart import MIN_PART, part_bounds

from .fault_server import FaultServer
from .s3_server import new_bucket
from .stores import S3_TRANSPORTS

PART = MIN_PART  # (parts as small as S3 takes, to keep the data small)


@pytest.fixture
def proxy(s3, tmp_path):
    with FaultServer(str(tmp_path), upstream=s3) as server:
        yield server


def _store(proxy: FaultServer, bucket: str, **kw) -> FsspecStore:
    kw = {"part_size": PART, "multipart_threshold": PART, **kw}
    return FsspecStore(bucket + "/root", skip_instance_cache=True, endpoint_url=proxy.url,
                       **kw)


def _client(s3):
    import boto3

    return boto3.client("s3", endpoint_url=s3)


def _data(n: int, seed: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def _md5_etag(data: bytes, part: int) -> str:
    """S3's ETag of ``data`` uploaded in parts of ``part`` bytes, computed here."""
    digests = [hashlib.md5(data[a : a + part]).digest() for a in range(0, len(data), part)]
    return f'"{hashlib.md5(b"".join(digests)).hexdigest()}-{len(digests)}"'


def _uploads_left(s3, bucket: str) -> list:
    return _client(s3).list_multipart_uploads(Bucket=bucket[5:]).get("Uploads", [])


def _uploads_holding_parts(s3, bucket: str) -> list:
    """The open uploads with parts (a create sent again after its answer was lost leaves
    one without parts, which S3 cannot tell from another writer's)."""
    client = _client(s3)
    return [u for u in _uploads_left(s3, bucket) if client.list_parts(
        Bucket=bucket[5:], Key=u["Key"], UploadId=u["UploadId"]).get("Parts")]


def test_a_large_value_goes_up_in_parts_at_once(s3, proxy):
    """12 MiB in parts of 5 MiB: three parts in flight together (each delayed 50 ms by the
    server), completed into one object that S3 reports as made of three parts."""
    bucket = new_bucket()
    data = _data(12 << 20, 1)
    proxy.set(latency=0.05)
    proxy.stats(reset=True)
    _store(proxy, bucket).set("big", data)
    stats = proxy.stats()
    assert stats["PUT"] == 3 and stats["POST"] == 2  # (create, three parts, complete)
    assert stats["max in flight"] == 3
    head = _client(s3).head_object(Bucket=bucket[5:], Key="root/big")
    assert head["ETag"] == _md5_etag(data, PART)
    assert _client(s3).get_object(Bucket=bucket[5:], Key="root/big")["Body"].read() == data
    assert _uploads_left(s3, bucket) == []


def test_a_value_in_pieces_goes_up_in_parts_without_being_joined(s3, proxy, s3_transport):
    """``set_parts`` and a conditional create of pieces whose bounds are not the parts'
    (an encoded shard: index, then chunks): every part is the right bytes of the whole
    (S3's ETag, made from its parts, is the one computed here), with pieces that are
    bytes, memoryviews and numpy buffers, and one empty."""
    bucket = new_bucket()
    data = _data((11 << 20) + 12_345, 21)
    cuts = [0, 10, 3 << 20, (3 << 20) + 1, (3 << 20) + 1, 9 << 20, len(data)]
    arr = np.frombuffer(data, np.uint8)
    pieces = [data[a:b] if i % 3 == 0 else memoryview(data)[a:b] if i % 3 == 1 else arr[a:b]
              for i, (a, b) in enumerate(itertools.pairwise(cuts))]
    store = _store(proxy, bucket, **S3_TRANSPORTS[s3_transport])
    store.set_parts("pieces", pieces)
    assert store.set_parts_if("created", pieces, None)
    for key in ("pieces", "created"):
        head = _client(s3).head_object(Bucket=bucket[5:], Key=f"root/{key}")
        assert head["ETag"] == _md5_etag(data, PART)
        body = _client(s3).get_object(Bucket=bucket[5:], Key=f"root/{key}")["Body"].read()
        assert body == data
    assert _uploads_left(s3, bucket) == []


def test_a_value_below_the_threshold_is_one_put(s3, proxy):
    bucket = new_bucket()
    data = _data(PART + 1, 2)
    proxy.stats(reset=True)
    _store(proxy, bucket, multipart_threshold=PART + 2).set("small", data)
    assert proxy.stats()["PUT"] == 1 and proxy.stats()["POST"] == 0
    head = _client(s3).head_object(Bucket=bucket[5:], Key="root/small")
    assert head["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'


def test_a_conditional_create_in_parts(s3, proxy):
    """``set_if(key, value, None)``: created if absent; if present, False, the object left
    as it was, and the upload aborted."""
    bucket = new_bucket()
    store = _store(proxy, bucket)
    first, second = _data(11 << 20, 3), _data(11 << 20, 4)
    assert store.set_if("k", first, None)
    assert not store.set_if("k", second, None)
    assert store.get("k") == first
    assert _client(s3).head_object(Bucket=bucket[5:], Key="root/k")["ETag"] == _md5_etag(
        first, PART)
    assert _uploads_left(s3, bucket) == []


def test_uploads_in_parts_through_faults_are_exact(s3, proxy, s3_transport):
    """503s, resets, answers lost after S3 acted, bodies cut short: every part is retried on
    its own and each object ends exact, with no upload left open (through shardvol's client
    and through botocore)."""
    bucket = new_bucket()
    store = _store(proxy, bucket, **S3_TRANSPORTS[s3_transport])
    proxy.set(error=0.1, reset=0.05, lost=0.05, short=0.05, seed=11)
    values = {f"k{i}": _data((11 << 20) + i * 77_777, 10 + i) for i in range(4)}
    for key, value in values.items():
        store.set(key, value)
    assert store.set_if("new", values["k0"], None)
    stats = proxy.stats()
    proxy.set(error=0.0, reset=0.0, lost=0.0, short=0.0)
    for key, value in values.items():
        assert store.get(key) == value
    assert store.get("new") == values["k0"]
    assert sum(v for k, v in stats.items() if k.startswith("fault ") and k != "fault ok") > 0
    assert _uploads_holding_parts(s3, bucket) == []


def test_a_lost_completion_is_the_uploads_own(s3, proxy, s3_transport):
    """The completion reaches S3 but its answer is lost; the repeat is refused (412, as S3
    may answer a create whose object now exists) and the HEAD that follows meets a 503:
    the HEAD is retried, and the object's ETag (S3's, from the parts) shows the upload
    made it, so the create succeeded rather than met another writer's object."""
    bucket = new_bucket()
    store = _store(proxy, bucket, **S3_TRANSPORTS[s3_transport])
    data = _data(7 << 20, 5)
    # create, two parts, the completion, its repeat, the HEAD
    proxy.set(plan=["ok", "ok", "ok", "lost", "error 412", "error 503"])
    assert store.set_if("k", data, None)
    stats = proxy.stats()
    assert (stats["fault lost"], stats["fault error 412"], stats["fault error 503"]) == (1, 1, 1)
    assert store.get("k") == data
    assert _client(s3).head_object(Bucket=bucket[5:], Key="root/k")["ETag"] == _md5_etag(
        data, PART)


def test_a_create_of_the_same_bytes_is_done_and_leaves_no_upload(s3, proxy):
    """A create that finds the object holding exactly its bytes has done its work (as a
    single-PUT create); its own upload is aborted all the same."""
    bucket = new_bucket()
    store = _store(proxy, bucket)
    data = _data(7 << 20, 8)
    assert store.set_if("k", data, None)
    assert store.set_if("k", data, None)
    assert _uploads_left(s3, bucket) == []


def test_the_filesystems_request_options_apply_to_the_parts(s3, proxy):
    """s3fs's ``s3_additional_kwargs`` (encryption, metadata) reach the upload and the
    single-PUT conditional writes, and the listing s3fs cached before the write knows the
    new object."""
    bucket = new_bucket()
    store = _store(proxy, bucket, s3_additional_kwargs={
        "ServerSideEncryption": "AES256", "Metadata": {"owner": "shardvol-test"}})
    store.set("a", b"small")
    assert store.list() == ["a"]
    assert store.size("big") is None
    store.set("big", _data(6 << 20, 9))
    head = _client(s3).head_object(Bucket=bucket[5:], Key="root/big")
    assert head["ETag"].endswith('-2"')
    assert head["ServerSideEncryption"] == "AES256"
    assert head["Metadata"] == {"owner": "shardvol-test"}
    assert store.list() == ["a", "big"]
    assert store.size("big") == 6 << 20
    assert store.set_if("small", b"one PUT", None)  # (a conditional write of one PUT too)
    head = _client(s3).head_object(Bucket=bucket[5:], Key="root/small")
    assert head["ServerSideEncryption"] == "AES256"
    assert head["Metadata"] == {"owner": "shardvol-test"}
    assert store.get_versioned("small")[0] == b"one PUT"


def test_a_failed_part_stops_the_others(s3, proxy):
    """One part refused for good while the other two hang: the hanging requests are
    cancelled at once (not waited for until they stall), and the upload is aborted."""
    bucket = new_bucket()
    store = _store(proxy, bucket, stall=20)
    # (the server takes a plan entry once it has read a request: so the failing part is the
    # last of the three to arrive, and the abort after them finds the plan done)
    proxy.set(plan=["ok", "hang", "hang", "error 400"])
    start = time.monotonic()
    with pytest.raises(StoreError, match="root/big"):
        store.set("big", _data(11 << 20, 10))
    assert time.monotonic() - start < 10
    assert _uploads_left(s3, bucket) == []


def test_a_part_that_fails_aborts_the_upload(s3, proxy):
    """A part refused for good (400, not retried): the write fails with an error naming
    the object, and nothing of it is left in the bucket (no object, no upload)."""
    bucket = new_bucket()
    store = _store(proxy, bucket)
    proxy.set(plan=["ok", "error 400"])  # the create passes, a part fails
    with pytest.raises(StoreError, match="root/big"):
        store.set("big", _data(11 << 20, 6))
    assert store.get("big") is None
    assert _uploads_left(s3, bucket) == []


def test_a_sharded_volume_written_in_parts_reads_back_in_tensorstore(s3, proxy):
    """A precomputed volume of one 8 MiB raw shard written whole (uploaded in parts), then
    in part (a merge: a read, then one conditional PUT); TensorStore reads it from S3."""
    import tensorstore as ts

    bucket = new_bucket()
    sharding = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity",
                "preshift_bits": 6, "minishard_bits": 0, "shard_bits": 0,
                "minishard_index_encoding": "raw", "data_encoding": "raw"}
    vol = Volume.create(_store(proxy, bucket), size=[256, 256, 128], data_type="uint8",
                        chunk_size=[64, 64, 64], encoding="raw", sharding=sharding)
    rng = np.random.default_rng(7)
    data = rng.integers(0, 256, vol.shape, dtype=np.uint8)
    proxy.stats(reset=True)
    vol[...] = data
    data[10:70, 20:90, 5:60] = rng.integers(0, 256, (60, 70, 55, 1), dtype=np.uint8)
    vol[10:70, 20:90, 5:60] = data[10:70, 20:90, 5:60]
    stats = proxy.stats()
    assert stats["POST"] == 2 and stats["PUT"] == 3  # (two parts, then the merge's PUT)
    spec = {"driver": "neuroglancer_precomputed",
            "kvstore": {"driver": "s3", "bucket": bucket[5:], "path": "root/",
                        "endpoint": s3, "aws_region": "us-east-1"}}
    got = ts.open(spec, read=True).result()[...].read().result()
    assert np.array_equal(np.asarray(got), data)


def test_part_sizes():
    assert part_bounds(12, 5 << 20) == [(0, 12)]
    assert part_bounds(11 << 20, 5 << 20) == [(0, 5 << 20), (5 << 20, 10 << 20),
                                              (10 << 20, 11 << 20)]
    huge = part_bounds(100 << 30, 5 << 20)  # (10,000 parts of 5 MiB hold 48.8 GiB)
    assert len(huge) <= 10_000 and huge[-1][1] == 100 << 30
    with pytest.raises(InvalidArgumentError, match="part_size"):
        FsspecStore("memory://x", part_size=1 << 20)
