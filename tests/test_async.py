"""read_async, aread, write_async and prefetch: futures that keep many reads under way over
a slow store, writes in the order of the calls, errors in the futures, cancellation, and
an interpreter exit that does not wait on them."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import numpy as np
import pytest

from shardvol import Volume
from shardvol.array.cache import ChunkCache
from shardvol.errors import InvalidArgumentError, OutOfBoundsError
from shardvol.kvstore.fsspec_store import FsspecStore

from .fault_server import FaultServer
from .oracles import ts_create

SPEC = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 1,
        "minishard_bits": 2, "shard_bits": 3, "minishard_index_encoding": "gzip",
        "data_encoding": "gzip"}


@pytest.fixture
def served(tmp_path):
    data = np.random.default_rng(0).integers(0, 255, (64, 64, 64, 1), dtype=np.uint8)
    t = ts_create(str(tmp_path / "v"), data_type="uint8", num_channels=1, size=[64, 64, 64],
                  chunk_size=[16, 16, 16], encoding="raw", sharding=SPEC)
    t[...] = data
    with FaultServer(str(tmp_path), latency=0.05) as server:
        yield server, data


def _open(server, **kw):
    return Volume(FsspecStore(server.url + "/v", skip_instance_cache=True), **kw)


def _boxes(n, seed=1):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        lo = rng.integers(0, 48, 3)
        out.append(tuple(slice(a, a + 16) for a in lo))
    return out


def test_reads_issued_at_once_are_under_way_together(served):
    server, data = served
    vol = _open(server, cache_bytes=0)
    boxes = _boxes(12)
    server.stats(reset=True)
    futures = [vol.read_async(b) for b in boxes]
    for b, f in zip(boxes, futures):
        assert np.array_equal(f.result(), data[b])
    assert server.stats()["max in flight"] > 8  # (one read alone: a shard's requests)


@pytest.mark.parametrize("cache_bytes", [0, 64 << 20])
def test_overlapping_reads_at_once_ask_for_each_thing_once(served, cache_bytes):
    """Concurrent reads share the GETs they have in common (shard and minishard indexes,
    and chunks when the cache is on): about as many requests as the same reads one after
    another on a fresh handle (where the index caches, and the chunk cache, serve)."""
    server, data = served
    boxes = _boxes(16, seed=5)
    counts = []
    for at_once in (False, True):
        vol = _open(server, cache_bytes=cache_bytes)
        if vol.cache is not None:
            vol.cache.clear()
        server.stats(reset=True)
        if at_once:
            got = [f.result() for f in [vol.read_async(b) for b in boxes]]
        else:
            got = [vol[b] for b in boxes]
        counts.append(server.stats()["GET"])
        for b, g in zip(boxes, got):
            assert np.array_equal(g, data[b])
    one_after_another, at_once = counts
    # (a read may miss an index another has just fetched but not yet cached, or one that
    # another is reading with its whole shard file: a few more; without sharing, 1.5-1.8x)
    assert at_once <= 1.4 * one_after_another


def test_a_read_waiting_on_another_reads_chunks_fetches_them_itself_if_that_one_fails():
    cache = ChunkCache(1 << 20)
    mine, theirs = cache.claim([(0, 0), (0, 1)])
    assert mine == [(0, 0), (0, 1)] and not theirs
    mine2, theirs2 = cache.claim([(0, 1), (0, 2)])
    assert mine2 == [(0, 2)] and list(theirs2) == [(0, 1)] and not theirs2[(0, 1)].is_set()
    cache.put((0, 0), np.zeros(4), None)
    cache.release(mine)  # (0, 1) failed: not cached, but released
    assert theirs2[(0, 1)].is_set() and cache.get((0, 1)) is None
    assert cache.claim([(0, 1)]) == ([(0, 1)], {})


def test_a_future_raises_the_error_a_blocking_read_raises(served):
    server, _ = served
    vol = _open(server)
    with pytest.raises(OutOfBoundsError) as blocking:
        vol[60:70, 0:1, 0:1]
    with pytest.raises(OutOfBoundsError) as future:
        vol.read_async((slice(60, 70), slice(0, 1), slice(0, 1))).result()
    assert str(future.value) == str(blocking.value)


def test_aread_in_an_event_loop(served):
    server, data = served
    vol = _open(server)

    async def main():
        return await asyncio.gather(*(vol.aread(b) for b in _boxes(4)))

    for b, got in zip(_boxes(4), asyncio.run(main())):
        assert np.array_equal(got, data[b])


def test_writes_land_in_the_order_of_the_calls(tmp_path):
    vol = Volume.create(str(tmp_path / "w"), size=[64, 64, 32], data_type="uint16",
                        chunk_size=[16, 16, 16], sharding="auto")
    model = np.zeros(vol.shape, np.uint16)
    rng = np.random.default_rng(2)
    futures = []
    for i in range(30):
        lo = rng.integers(0, [40, 40, 16])
        box = (slice(lo[0], lo[0] + 20), slice(lo[1], lo[1] + 20), slice(lo[2], lo[2] + 10))
        value = np.full(model[box].shape, i + 1, np.uint16)
        futures.append(vol.write_async(box, value))
        value[...] = 0  # (the write took a copy)
        model[box] = i + 1
    for f in futures:
        assert f.result() is None
    assert np.array_equal(vol[...], model)


def test_a_failed_write_fails_its_future_and_the_next_ones_run(tmp_path):
    vol = Volume.create(str(tmp_path / "w"), size=[32, 32, 16], data_type="uint8",
                        chunk_size=[16, 16, 16])
    bad = vol.write_async((slice(0, 8), slice(0, 8), slice(0, 8)), np.full((8, 8, 8, 1), 300))
    good = vol.write_async((slice(0, 8), slice(0, 8), slice(0, 8)), 7)
    with pytest.raises(InvalidArgumentError, match="do not fit"):
        bad.result()
    good.result()
    assert (vol[:8, :8, :8] == 7).all()


def test_a_future_not_started_can_be_cancelled(served):
    server, _ = served
    vol = _open(server, cache_bytes=0)
    server.set(latency=0.3)
    futures = [vol.read_async(b) for b in _boxes(40)]  # more than the pool's threads
    cancelled = [f for f in futures[::-1] if f.cancel()]
    assert cancelled and all(f.cancelled() for f in cancelled)
    for f in futures:
        if not f.cancelled():
            f.result()


def test_prefetch_fills_the_cache_so_the_read_waits_on_nothing(served):
    server, data = served
    vol = _open(server)
    box = (slice(0, 64), slice(0, 64), slice(16, 32))
    vol.prefetch(box).result()
    server.stats(reset=True)
    assert np.array_equal(vol[box], data[box])
    assert server.stats()["requests"] == 0
    with pytest.raises(InvalidArgumentError, match="cache_bytes"):
        _open(server, cache_bytes=0).prefetch(box)


def test_exiting_does_not_wait_on_reads_under_way(served, tmp_path):
    """Reads still waiting on a store that never answers (and others not started) do not
    hold the interpreter's exit for their deadline."""
    server, _ = served
    code = (
        "import sys; sys.path.insert(0, '.')\n"
        "from shardvol import Volume\n"
        "from shardvol.kvstore.fsspec_store import FsspecStore\n"
        f"vol = Volume(FsspecStore({server.url + '/v'!r}))\n"
        "print('open', flush=True); sys.stdin.readline()\n"
        "futures = [vol.read_async((slice(0, 8), slice(0, 8), slice(z, z + 1)))"
        " for z in range(40)]\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "open"
    server.set(hang=1.0)  # from now on, no answer
    start = time.monotonic()
    child.stdin.write("go\n")
    child.stdin.close()
    child.wait(timeout=60)
    child.stdout.close()
    assert time.monotonic() - start < 15


def test_a_chunk_written_while_a_read_fetches_it_is_not_cached_from_that_read():
    cache = ChunkCache(1 << 20)
    mine, _ = cache.claim([(0, 0), (0, 1)])
    cache.drop([(0, 0)])  # (a write of (0, 0) landed while the read fetched it)
    cache.put((0, 0), np.zeros(4), None)
    cache.put((0, 1), np.zeros(4), None)
    assert cache.get((0, 0)) is None and cache.get((0, 1)) is not None
    cache.release(mine)
    cache.put((0, 0), np.ones(4), None)  # (a later read's fetch is kept)
    assert cache.get((0, 0)) is not None


def test_writes_that_fail_at_once_do_not_stall_the_queue(tmp_path):
    """Each write may finish before the next is queued: the queue neither deadlocks nor
    loses a future (run in a thread, so that a stall fails the test instead of hanging)."""
    import threading

    vol = Volume.create(str(tmp_path / "w"), size=[64, 64, 64], chunk_size=[32, 32, 32])
    errors = []

    def writes():
        for _ in range(300):
            f = vol.write_async((slice(0, 4),) * 3, np.ones((5, 5, 5), np.uint8))
            errors.append(f.exception(timeout=30))

    t = threading.Thread(target=writes, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive()
    assert len(errors) == 300 and all(isinstance(e, InvalidArgumentError) for e in errors)
    with pytest.raises(InvalidArgumentError, match="cannot write list"):
        vol.write_async((slice(0, 2),) * 3, [[1, 2], [3]])
