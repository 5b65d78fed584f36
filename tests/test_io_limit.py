"""Per-call limits of requests in flight (``io_concurrency=n`` on reads and writes,
``shardvol.io_limit(n)`` around them), measured at a real HTTP server
(tests/fault_server.py, in its own process) that answers each request after a delay and
reports the most requests it had in flight at once.

Volumes of 64 chunks, unsharded, so that a read sends 64 requests at once: without a limit
the server sees dozens in flight; with one, never more than the limit.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading
import time

import numpy as np
import pytest

import shardvol
from shardvol import OmeZarrImage, Volume, ZarrArray, io_limit
from shardvol import zarr3 as zarr3_api
from shardvol.errors import InvalidArgumentError
from shardvol.kvstore import limits
from shardvol.kvstore.fsspec_store import FsspecStore
from shardvol.zarr3 import ome
from shardvol.zarr3.ome_metadata import Level

from .fault_server import FaultServer
from .gcs_server import gcs_server
from .gcs_server import new_bucket as new_gcs_bucket
from .oracles import ts_create

SHAPE = (64, 64, 64)
LATENCY = 0.03
MANY = 16  # an unlimited read of 64 chunks has more than this in flight


def _data(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 255, (*SHAPE, 1), dtype=np.uint8)


def _precomputed(path, data) -> None:
    t = ts_create(str(path), data_type="uint8", num_channels=1, size=list(SHAPE),
                  chunk_size=[16, 16, 16], encoding="raw")
    t[...] = data


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Precomputed volumes (TensorStore wrote them) at /a and /b, a Zarr v3 array at /z
    and an OME-Zarr image at /o (shardvol wrote them), all of 64 chunks."""
    root = tmp_path_factory.mktemp("served")
    a, b = _data(1), _data(2)
    _precomputed(root / "a", a)
    _precomputed(root / "b", b)
    z = zarr3_api.create(str(root / "z"), SHAPE, "uint8", (16, 16, 16))
    z[...] = a[..., 0]
    img = ome.create(str(root / "o"), [Level("0", (1.0, 1.0, 1.0), (0, 0, 0))], [SHAPE],
                     dtype="uint8", num_channels=1, shard_shapes=[None],
                     chunk_shapes=[(16, 16, 16)])
    img[...] = b
    with FaultServer(str(root), latency=LATENCY) as server:
        yield server, {"a": a, "b": b}


def _vol(server, name="a", cache_bytes=0) -> Volume:
    """A handle without a chunk cache (unless given one): every read sends its requests."""
    return Volume(FsspecStore(f"{server.url}/{name}", skip_instance_cache=True),
                  cache_bytes=cache_bytes)


def _peak(server, below: str | None = None) -> int:
    stats = server.stats()
    return stats["max in flight" if below is None else f"max in flight /{below}"]


def test_a_read_with_io_concurrency_has_at_most_that_many_requests_in_flight(served):
    server, data = served
    vol = _vol(server)
    server.stats(reset=True)
    assert np.array_equal(vol.read(...), data["a"])
    assert _peak(server) > MANY
    server.stats(reset=True)
    assert np.array_equal(vol.read(..., io_concurrency=4), data["a"])
    assert 3 <= _peak(server) <= 4
    server.stats(reset=True)
    box = (slice(5, 60), slice(0, 33), slice(17, 64))
    assert np.array_equal(vol.read(box, io_concurrency=1), data["a"][box])
    assert _peak(server) == 1


def test_zarr_arrays_and_ome_zarr_images_take_the_keyword_too(served):
    server, data = served
    arr = zarr3_api.open(FsspecStore(f"{server.url}/z", skip_instance_cache=True), mode="r",
                         cache_bytes=0)
    assert isinstance(arr, ZarrArray)
    server.stats(reset=True)
    assert np.array_equal(arr[...], data["a"][..., 0])
    assert _peak(server) > MANY
    server.stats(reset=True)
    assert np.array_equal(arr.read(..., io_concurrency=3), data["a"][..., 0])
    assert 2 <= _peak(server) <= 3

    img = OmeZarrImage(FsspecStore(f"{server.url}/o", skip_instance_cache=True), mode="r",
                       cache_bytes=0)
    server.stats(reset=True)
    assert np.array_equal(img[...], data["b"])
    assert _peak(server) > MANY
    server.stats(reset=True)
    assert np.array_equal(img.read(..., io_concurrency=3), data["b"])
    assert 2 <= _peak(server) <= 3
    server.stats(reset=True)
    with io_limit(2):
        assert np.array_equal(img[...], data["b"])
    assert _peak(server) <= 2


def test_io_limit_bounds_the_reads_in_its_block(served):
    server, data = served
    vol = _vol(server)
    server.stats(reset=True)
    with shardvol.io_limit(4):
        assert np.array_equal(vol[...], data["a"])
        assert np.array_equal(vol[3:40, :, 9:], data["a"][3:40, :, 9:])
    assert 3 <= _peak(server) <= 4
    server.stats(reset=True)
    assert np.array_equal(vol[...], data["a"])  # the block is over: no limit
    assert _peak(server) > MANY


def test_nested_limits_take_the_smaller(served):
    server, data = served
    vol = _vol(server)
    for outer, inner in ((8, 3), (3, 8)):
        server.stats(reset=True)
        with io_limit(outer), io_limit(inner):
            assert np.array_equal(vol[...], data["a"])
        assert 2 <= _peak(server) <= 3, (outer, inner)
        server.stats(reset=True)
        with io_limit(outer):
            assert np.array_equal(vol.read(..., io_concurrency=inner), data["a"])
        assert 2 <= _peak(server) <= 3, (outer, inner)


def test_an_outer_limit_is_shared_by_the_calls_inside_it(served):
    """Two reads of 3 each, under way at once inside a block of 4: 4 in flight at most."""
    server, data = served
    a, b = _vol(server, "a"), _vol(server, "b")
    server.stats(reset=True)
    with io_limit(4):
        fa = a.read_async(..., io_concurrency=3)
        fb = b.read_async(..., io_concurrency=3)
        assert np.array_equal(fa.result(), data["a"])
        assert np.array_equal(fb.result(), data["b"])
    assert _peak(server, "a") <= 3 and _peak(server, "b") <= 3
    assert 3 <= _peak(server) <= 4


def test_calls_under_way_at_once_each_keep_their_own_limit(served):
    server, data = served
    a, b = _vol(server, "a"), _vol(server, "b")
    # futures
    server.stats(reset=True)
    fa = a.read_async(..., io_concurrency=2)
    fb = b.read_async(..., io_concurrency=6)
    assert np.array_equal(fa.result(), data["a"])
    assert np.array_equal(fb.result(), data["b"])
    assert _peak(server, "a") <= 2
    assert 4 <= _peak(server, "b") <= 6
    assert _peak(server) > 6  # (both under way at once)
    # threads, each in its own block
    server.stats(reset=True)
    got: dict[str, np.ndarray] = {}

    def read(name: str, vol: Volume, n: int) -> None:
        with io_limit(n):
            got[name] = vol[...]

    threads = [threading.Thread(target=read, args=("a", a, 2)),
               threading.Thread(target=read, args=("b", b, 6))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert np.array_equal(got["a"], data["a"]) and np.array_equal(got["b"], data["b"])
    assert _peak(server, "a") <= 2
    assert 4 <= _peak(server, "b") <= 6


def test_futures_keep_the_limit_they_were_started_with(served):
    server, data = served
    vol = _vol(server, cache_bytes="64MB")
    server.stats(reset=True)
    with io_limit(3):
        future = vol.read_async(...)
    assert np.array_equal(future.result(), data["a"])  # (may run after the block ended)
    assert 2 <= _peak(server) <= 3

    vol.cache.clear()  # (handles of one URL share it)
    server.stats(reset=True)
    vol.prefetch(..., io_concurrency=2).result()
    assert 1 <= _peak(server) <= 2
    server.stats(reset=True)
    assert np.array_equal(vol[...], data["a"])  # from the cache
    assert server.stats()["requests"] == 0

    async def aread() -> np.ndarray:
        return await _vol(server).aread(..., io_concurrency=3)

    server.stats(reset=True)
    assert np.array_equal(asyncio.run(aread()), data["a"])
    assert 2 <= _peak(server) <= 3

    async def aread_in_block() -> np.ndarray:
        with io_limit(2):
            return await _vol(server).aread(...)

    server.stats(reset=True)
    assert np.array_equal(asyncio.run(aread_in_block()), data["a"])
    assert 1 <= _peak(server) <= 2


def test_a_call_waiting_on_its_own_limit_holds_none_of_the_process_budget(served):
    """With a process budget of 4, a read limited to 1 (64 requests, one at a time) and an
    unlimited read started after it: the second takes the other slots and is done long
    before the first (were the budget's slots taken before the call's, the first read's
    waiting requests would hold all 4 of them, and the second would wait behind it)."""
    server, data = served
    a, b = _vol(server, "a"), _vol(server, "b")
    done: dict[str, float] = {}
    limits.set_io_concurrency(4)
    try:
        server.stats(reset=True)
        fa = a.read_async(..., io_concurrency=1)
        fa.add_done_callback(lambda _: done.setdefault("a", time.monotonic()))
        time.sleep(0.2)  # (its requests are all waiting)
        fb = b.read_async(...)
        fb.add_done_callback(lambda _: done.setdefault("b", time.monotonic()))
        assert np.array_equal(fb.result(), data["b"])
        assert np.array_equal(fa.result(), data["a"])
        assert _peak(server, "a") == 1
        assert 3 <= _peak(server, "b") <= 4  # (4 while the first's next request queues)
        assert _peak(server) <= 4
        assert done["b"] < done["a"] - 0.5
    finally:
        limits.set_io_concurrency(64)


def test_the_limit_is_set_inside_the_requests_task_not_inherited(served, monkeypatch):
    """The limit reaches the I/O loop's task because start_on sets it there, not because
    asyncio happens to create the task in a copy of the caller's context: with tasks
    started in an empty context, reads keep their limit."""
    server, data = served
    submit = asyncio.run_coroutine_threadsafe

    def in_an_empty_context(coro, loop):
        return contextvars.Context().run(submit, coro, loop)

    monkeypatch.setattr(asyncio, "run_coroutine_threadsafe", in_an_empty_context)
    server.stats(reset=True)
    assert np.array_equal(_vol(server).read(..., io_concurrency=2), data["a"])
    assert 1 <= _peak(server) <= 2


# -- writes ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gcs():
    with gcs_server() as endpoint:
        yield endpoint


def test_a_write_with_io_concurrency_has_at_most_that_many_uploads_in_flight(gcs, tmp_path):
    """64 chunk files written to gs:// (no lease requests there: gs locks are in-process)
    through the server in front of a GCS emulator: dozens of uploads at once without a
    limit, at most the limit with one, from the writer threads and from write_async's."""
    os.makedirs(tmp_path / "empty")
    bucket = new_gcs_bucket()
    with FaultServer(str(tmp_path / "empty"), upstream=gcs, latency=LATENCY) as proxy:

        def store() -> FsspecStore:
            return FsspecStore(f"{bucket}/w", token="anon", skip_instance_cache=True,
                               endpoint_url=proxy.url)

        vol = Volume.create(store(), size=list(SHAPE), data_type="uint8",
                            chunk_size=[16, 16, 16], encoding="raw")
        rng = np.random.default_rng(3)
        # (no byte 13: the emulator drops a '\r' that ends an upload)
        data = rng.integers(14, 255, vol.shape, dtype=np.uint8)
        proxy.stats(reset=True)
        vol[...] = data
        assert _peak(proxy) > MANY
        data = rng.integers(14, 255, vol.shape, dtype=np.uint8)
        proxy.stats(reset=True)
        vol.write(..., data, io_concurrency=3)
        assert 2 <= _peak(proxy) <= 3
        data = rng.integers(14, 255, vol.shape, dtype=np.uint8)
        proxy.stats(reset=True)
        vol.write_async(..., data, io_concurrency=2).result()
        assert 1 <= _peak(proxy) <= 2
        assert np.array_equal(Volume(store())[...], data)


# -- what is accepted -----------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -2, 2.5, "4", True, None])
def test_a_limit_that_is_not_a_positive_integer_is_refused_by_name(bad, tmp_path):
    with pytest.raises(InvalidArgumentError, match="io_limit must be a positive integer"):
        io_limit(bad)
    if bad is None:  # (the keyword's default: no limit of its own)
        return
    vol = Volume.create(str(tmp_path / "v"), size=[8, 8, 8], data_type="uint8",
                        chunk_size=[8, 8, 8], encoding="raw", cache_bytes="1MB")
    arr = zarr3_api.create(str(tmp_path / "z"), (8, 8), "uint8", (4, 4))
    match = "io_concurrency must be a positive integer"
    for call in (lambda: vol.read(..., io_concurrency=bad),
                 lambda: vol.write(..., 1, io_concurrency=bad),
                 lambda: vol.read_async(..., io_concurrency=bad),
                 lambda: vol.write_async(..., 1, io_concurrency=bad),
                 lambda: vol.prefetch(..., io_concurrency=bad),
                 lambda: asyncio.run(vol.aread(..., io_concurrency=bad)),
                 lambda: arr.read(..., io_concurrency=bad),
                 lambda: arr.write(..., 1, io_concurrency=bad),
                 lambda: arr.read_async(..., io_concurrency=bad)):
        with pytest.raises(InvalidArgumentError, match=match):
            call()
    assert not vol[...].any()  # (nothing was written)


def test_local_files_accept_the_keyword_and_are_not_limited(tmp_path):
    data = _data(4)
    vol = Volume.create(str(tmp_path / "v"), size=list(SHAPE), data_type="uint8",
                        chunk_size=[16, 16, 16], encoding="raw")
    vol.write(..., data, io_concurrency=1)
    with io_limit(1):
        assert np.array_equal(vol[...], data)
    assert np.array_equal(vol.read(..., io_concurrency=1), data)
