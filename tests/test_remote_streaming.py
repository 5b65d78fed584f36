"""Shard files read whole over HTTP are parsed as their bytes arrive: values are given (and
decoded) before the rest of the file is in, a read cut short resumes where it stopped at
the same version, and a file replaced between two attempts is read again."""

from __future__ import annotations

import json
import threading
import time
from itertools import pairwise

import numpy as np
import pytest

from shardvol import Volume
from shardvol._ext.morton import compressed_morton_code
from shardvol.array.engine import _apart, _fast_axis
from shardvol.errors import ShardFormatError, StoreError
from shardvol.kvstore.arriving import Arriving
from shardvol.kvstore.fsspec_store import FsspecStore
from shardvol.kvstore.memory import MemoryStore
from shardvol.sharding import ShardReader

from .fault_server import FaultServer
from .oracles import ts_create, ts_open
from .s3_server import new_bucket
from .stores import http_store, s3_store

SHARDING = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0,
            "minishard_bits": 3, "shard_bits": 0, "minishard_index_encoding": "gzip",
            "data_encoding": "gzip"}


def _write(path, seed):
    """A one-shard volume of random voxels, written by TensorStore."""
    data = np.random.default_rng(seed).integers(0, 255, (64, 64, 64, 1), dtype=np.uint8)
    t = ts_open(str(path)) if (path / "info").exists() else ts_create(
        str(path), data_type="uint8", num_channels=1, size=[64, 64, 64],
        chunk_size=[16, 16, 16], encoding="raw", sharding=SHARDING)
    t[...] = data
    return data


@pytest.fixture
def volume(tmp_path):
    data = _write(tmp_path / "v", 1)
    scale = json.loads((tmp_path / "v" / "info").read_text())["scales"][0]["key"]
    return tmp_path, data, scale


def _recording(store: FsspecStore) -> list[tuple[int, int | None, bool]]:
    """(bytes in, size, done) of each arrival the store reports from now on."""
    seen: list[tuple[int, int | None, bool]] = []
    arriving = store.iter_get_arriving

    def recorded(keys, window=256 << 20, sizes=None):
        for i, value in arriving(keys, window, sizes):
            seen.append((value.have, value.size, value.done))
            yield i, value

    store.iter_get_arriving = recorded  # type: ignore[method-assign]
    return seen


def test_values_of_a_shard_read_whole_come_before_the_file_is_all_in(volume):
    root, _data, scale = volume
    local = ShardReader(str(root / "v" / scale), SHARDING)
    keys = local.list_labels("0.shard")
    truth = local.get_data_many(keys)
    with FaultServer(str(root)) as server:
        server.set(slow=1.0, slow_seconds=1.0)  # (each body in 10 pieces, over a second)
        store = FsspecStore(f"{server.url}/v/{scale}", skip_instance_cache=True)
        seen = _recording(store)
        reader = ShardReader(store, SHARDING)
        given = []
        for key, value in reader.iter_data_many(keys, whole={0: len(keys) * 4096}):
            given.append((key, bytes(value), seen[-1]))
        assert {k: v for k, v, _ in given} == truth
        assert len(given) == len(keys)
        have, size, done = given[0][2]
        assert not done and size is not None and have < size / 2
        assert server.stats()["requests"] == 1, server.stats()  # the file whole, no index
        # its index is cached: a later read of some of its keys takes one request
        server.stats(reset=True)
        assert reader.get_data_many(keys[:3]) == {k: truth[k] for k in keys[:3].tolist()}
        assert server.stats()["requests"] == 1


def test_a_shard_read_cut_short_resumes_where_it_stopped(volume, transport):
    root, data, scale = volume
    size = (root / "v" / scale / "0.shard").stat().st_size
    with FaultServer(str(root)) as server:
        vol = Volume(http_store(f"{server.url}/v", transport), cache_bytes=0)
        server.stats(reset=True)
        server.set(plan=["short"])  # (half the body, then the connection is dropped)
        assert np.array_equal(vol[...], data)
        stats = server.stats()
        assert stats["fault short"] == 1 and stats["requests"] == 2
        assert stats[f"Range bytes={size // 2}-"] == 1
        assert stats["bytes"] == size  # (each byte sent once)


def test_a_server_that_ignores_the_range_of_a_resumed_read_still_gives_exact_data(
        volume, transport):
    root, data, _scale = volume
    with FaultServer(str(root)) as server:
        vol = Volume(http_store(f"{server.url}/v", transport), cache_bytes=0)
        server.set(plan=["short"], ignore_range=True)
        assert np.array_equal(vol[...], data)
        assert server.stats()["fault short"] == 1


@pytest.mark.parametrize("server_checks", [True, False])
def test_a_shard_replaced_between_two_attempts_is_read_again(volume, server_checks):
    """The resumed attempt finds another version (412, or a server that ignores If-Match
    and Range sends the new file whole): the chunks already given stay, the others are
    read from the new file by ranges; every chunk is one version's."""
    root, old, _scale = volume
    with FaultServer(str(root)) as server:
        vol = Volume(FsspecStore(f"{server.url}/v", skip_instance_cache=True), cache_bytes=0)
        server.set(plan=["short", "error"], retry_after=1.0,
                   ignore_if_match=not server_checks, ignore_range=not server_checks)
        new: list[np.ndarray] = []

        def replace() -> None:
            deadline = time.monotonic() + 10
            while not server.stats()["fault error"] and time.monotonic() < deadline:
                time.sleep(0.02)
            new.append(_write(root / "v", 2))  # (during the 1 s the reader waits)

        writer = threading.Thread(target=replace)
        writer.start()
        got = vol[...]
        writer.join()
        stats = server.stats()
        assert stats["fault short"] == 1 and stats["fault error"] == 1
        assert stats["GET"] > 4  # the shard whole, then its index, minishards, data
        mixed = 0
        for x, y, z in np.ndindex(4, 4, 4):
            box = np.s_[16 * x : 16 * x + 16, 16 * y : 16 * y + 16, 16 * z : 16 * z + 16]
            chunk = got[box]
            assert np.array_equal(chunk, old[box]) or np.array_equal(chunk, new[0][box])
            mixed += np.array_equal(chunk, new[0][box])
        assert 0 < mixed < 64  # (the first half of the file was given from the old one)


def test_a_resumed_read_answered_with_other_bytes_is_a_store_error(volume, transport):
    root, _data, _scale = volume
    with FaultServer(str(root)) as server:
        vol = Volume(http_store(f"{server.url}/v", transport), cache_bytes=0)
        server.set(plan=["short"], wrong_range=True)
        with pytest.raises(StoreError, match=r"0\.shard: asked for bytes \d+- of \d+"):
            vol[...]


def test_an_s3_shard_read_cut_short_resumes_where_it_stopped(s3, tmp_path, s3_transport):
    """moto's S3 behind the fault server: the shard's GET loses the second half of its body,
    the retry asks for the rest of the same version."""
    bucket = new_bucket()
    data = np.random.default_rng(5).integers(0, 60000, (64, 64, 64, 1), dtype=np.uint16)
    Volume.create(f"{bucket}/v", size=[64, 64, 64], data_type="uint16",
                  chunk_size=[16, 16, 16], encoding="raw", sharding=SHARDING)[...] = data
    with FaultServer(str(tmp_path), upstream=s3) as proxy:
        vol = Volume(s3_store(f"{bucket}/v", s3_transport, endpoint_url=proxy.url),
                     cache_bytes=0)
        proxy.stats(reset=True)
        proxy.set(plan=["short"])
        assert np.array_equal(vol[...], data)
        stats = proxy.stats()
        assert stats["fault short"] == 1 and stats["GET"] == 2
        assert [k for k in stats if k.startswith("Range bytes=") and k.endswith("-")]


class _FillsAfterView(Arriving):
    """A value whose last bytes come in (and ``done`` is set) right after each view of
    it is taken: as the I/O thread may do while a reader parses what it saw."""

    def __init__(self, whole: bytes, first: int) -> None:
        super().__init__()
        self.whole = whole
        self.start(len(whole), "v1")
        self.extend(whole[:first])

    def view(self) -> memoryview:
        seen = super().view()
        if not self.done:
            self.extend(self.whole[self.have :])
            self.done = True
        return seen


def test_a_value_finished_while_it_is_parsed_gives_all_its_keys(volume):
    """The reader takes ``done`` before the bytes it parses: a value that finished after
    its view was taken is parsed again at the next event, and no key is lost."""
    root, _data, scale = volume
    local = ShardReader(str(root / "v" / scale), SHARDING)
    keys = local.list_labels("0.shard")
    truth = local.get_data_many(keys)
    whole = (root / "v" / scale / "0.shard").read_bytes()

    class Store(MemoryStore):
        def iter_get_arriving(self, keys, window=256 << 20, sizes=None):
            value = _FillsAfterView(whole, len(whole) // 2)
            yield 0, value  # (more came in: the first half)
            yield 0, value  # (the read finished)

    reader = ShardReader(Store(), SHARDING)
    got = dict(reader.iter_data_many(keys, whole={0: len(keys) * 4096}))
    assert {k: bytes(v) for k, v in got.items()} == truth


def test_concurrent_reads_of_a_shard_read_whole_share_its_transfer(volume):
    """Two full reads at once: the shard file is sent once, both read it as it arrives."""
    root, data, _scale = volume
    with FaultServer(str(root)) as server:
        vol = Volume(FsspecStore(f"{server.url}/v", skip_instance_cache=True), cache_bytes=0)
        server.stats(reset=True)
        server.set(slow=1.0, slow_seconds=0.5)
        futures = [vol.read_async(...) for _ in range(2)]
        for f in futures:
            assert np.array_equal(f.result(), data)
        assert server.stats()["GET"] == 1


def test_a_corrupt_chunk_of_a_shard_read_whole_is_an_error_naming_it(volume):
    """A chunk whose gzip data is garbage stops the streamed read with an error that names
    it (the decode threads' error reaches the caller; nothing hangs)."""
    root, _data, scale = volume
    path = root / "v" / scale / "0.shard"
    whole = path.read_bytes()
    path.write_bytes(whole[:200] + b"\xff" * 50 + whole[250:])  # (inside the first chunk)
    with FaultServer(str(root)) as server:
        vol = Volume(FsspecStore(f"{server.url}/v", skip_instance_cache=True), cache_bytes=0)
        with pytest.raises(ShardFormatError, match=r"0\.shard: corrupt gzip data"):
            vol[...]


def test_the_fast_axis_is_the_first_in_memory_order_that_spans_several_chunks():
    coords = [(x, y, z, 0) for x in range(3) for y in range(2) for z in range(2)]
    fortran, c_order = np.empty((4, 4, 4, 1), order="F"), np.empty((4, 4, 4, 1))
    assert _fast_axis(fortran, coords) == 0
    assert _fast_axis(c_order, coords) == 2  # (not the channel axis: one chunk across)
    assert _fast_axis(fortran, [(0, y, 0, 0) for y in range(3)]) == 1


@pytest.mark.parametrize("fast", [0, 2])
def test_chunks_go_to_the_decode_threads_apart_from_their_line(fast):
    """A streamed read hands its decode threads chunks in an order where two in a row are
    of different lines along the output's fast axis (such chunks share the output's
    pages); every chunk is handed on, none held back more than the window allows, nor
    while the threads wait for work."""
    grid = (8, 4, 4)
    coords = [tuple(int(v) for v in c) for c in np.ndindex(*grid)]
    codes = compressed_morton_code(np.array(coords), grid)
    items = [(coords[i], None, str(i)) for i in np.argsort(codes)]  # (a shard's order)
    out = list(_apart(iter(items), fast, 4, lambda: False))
    assert sorted(out) == sorted(items)
    assert list(_apart(iter(items), fast, 4, lambda: True)) == items  # (threads waiting)

    def line(c):
        return c[:fast] + c[fast + 1:]

    def together(seq):
        return sum(line(a[0]) == line(b[0]) for a, b in pairwise(seq))

    assert together(out) == 0
    assert fast != 0 or together(items) > 30  # (x-neighbours follow each other in a shard)
    position = {item: i for i, item in enumerate(items)}
    assert all(i - position[item] <= 4 for i, item in enumerate(out))
