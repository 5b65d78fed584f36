"""The store contract, run against every backend (file, memory, fsspec, HTTP)."""

from __future__ import annotations

import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import shardvol
from shardvol._ext.files import write_file
from shardvol.errors import (
    ByteRangeError,
    InvalidKeyError,
    ReadOnlyStoreError,
    ShardvolError,
    StoreError,
    VersionChangedError,
)
from shardvol.kvstore import FileStore, MemoryStore, open_store
from shardvol.kvstore import base as store_base
from shardvol.kvstore import file as file_store
from shardvol.kvstore.base import resolve_range
from shardvol.kvstore.fsspec_store import FsspecStore

from .c_checkers import run_checker
from .http_server import StaticServer
from .stores import http_store

VALUE = bytes(range(256)) * 40  # 10240 bytes


class StoreContract:
    """Every backend passes these; ``writer`` populates what ``store`` reads."""

    @pytest.fixture
    def pair(self):
        raise NotImplementedError

    def test_missing_key_is_none(self, pair):
        store, _ = pair
        assert store.get("nope") is None
        assert store.get("a/b/nope", (0, 4)) is None
        assert store.exists("nope") is False
        assert store.size("nope") is None

    def test_roundtrip_and_ranges(self, pair):
        store, writer = pair
        writer.set("dir/sub/value", VALUE)
        writer.set("empty", b"")
        assert store.get("dir/sub/value") == VALUE
        assert store.get("empty") == b""
        assert store.get("dir/sub/value", (10, 20)) == VALUE[10:20]
        assert store.get("dir/sub/value", (100, None)) == VALUE[100:]
        assert store.get("dir/sub/value", (-7, None)) == VALUE[-7:]
        assert store.get("dir/sub/value", (0, len(VALUE))) == VALUE
        assert store.exists("dir/sub/value") and store.size("dir/sub/value") == len(VALUE)

    def test_range_past_end_raises(self, pair):
        store, writer = pair
        writer.set("v", VALUE)
        with pytest.raises(ByteRangeError, match="v' "):
            store.get("v", (len(VALUE) - 5, len(VALUE) + 5))
        with pytest.raises(ByteRangeError):
            store.get("v", (len(VALUE) + 10, len(VALUE) + 20))
        with pytest.raises(ByteRangeError):
            store.get("v", (-(len(VALUE) + 1), None))
        for bad in [(20, 10), (-5, 3)]:  # ends before it starts; a suffix with a stop
            with pytest.raises(ByteRangeError):
                store.get("v", bad)
            with pytest.raises(ByteRangeError):
                store.get_many_versioned([("v", bad)])

    def test_get_many_mixed(self, pair):
        store, writer = pair
        for i in range(20):
            writer.set(f"k/{i}", VALUE[i:])
        reqs = [(f"k/{i}", (i, i + 50)) for i in range(20)] + ["k/3", "k/missing", ("k/5", None)]
        out = store.get_many(reqs)
        assert out[:20] == [VALUE[i:][i : i + 50] for i in range(20)]
        assert out[20:] == [VALUE[3:], None, VALUE[5:]]
        assert store.get_many([]) == []

    def test_list(self, pair):
        store, writer = pair
        for k in ["a/1", "a/2", "a/b/3", "ab", "c"]:
            writer.set(k, b"x")
        if isinstance(store, FsspecStore) and store.read_only:
            pytest.skip("HTTP has no listing")
        assert store.list("a/") == ["a/1", "a/2", "a/b/3"]
        assert store.list("a") == ["a/1", "a/2", "a/b/3", "ab"]
        assert store.list() == ["a/1", "a/2", "a/b/3", "ab", "c"]
        assert store.list("zzz/") == []

    def test_overwrite_and_delete(self, pair):
        store, _ = pair
        if store.read_only:
            with pytest.raises(ReadOnlyStoreError):
                store.set("x", b"1")
            with pytest.raises(ReadOnlyStoreError):
                store.delete("x")
            return
        store.set("x", b"1")
        store.set("x", b"22")
        assert store.get("x") == b"22"
        store.delete("x")
        store.delete("x")
        assert store.get("x") is None

    def test_set_parts_stores_their_concatenation(self, pair):
        store, _ = pair
        parts = [b"ab", memoryview(b"cd"), b"", VALUE]
        if store.read_only:
            with pytest.raises(ReadOnlyStoreError):
                store.set_parts("x", parts)
            return
        store.set_parts("parts/x", parts)
        assert store.get("parts/x") == b"abcd" + VALUE
        store.set_parts("parts/x", [])
        assert store.get("parts/x") == b""
        store.delete("parts/x")

    def test_bad_keys(self, pair):
        store, _ = pair
        for bad in ["", "/abs", "a/../b", "a//b", "./a", ".."]:
            with pytest.raises(InvalidKeyError):
                store.get(bad)

    def test_versioned_reads(self, pair):
        """Reads give version tokens; a read that requires a token refuses a value written
        since, naming its key (stores that cannot tell give None and never refuse)."""
        store, writer = pair
        writer.set("v", VALUE)
        [(data, token)] = store.get_many_versioned([("v", (10, 20))])
        assert data == VALUE[10:20]
        assert store.get_many_if([("v", (0, 5)), "v"], {"v": token}) == [VALUE[:5], VALUE]
        assert store.get_many_versioned(["nope"])[0][0] is None
        if token is None:
            assert store.version("v") is None
            return
        writer.set("v", VALUE[::-1])
        with pytest.raises(VersionChangedError) as e:
            store.get_many_if([("v", (0, 5))], {"v": token})
        assert e.value.key == "v"
        assert store.get_many_if([("v", (0, 5))], {"v": None}) == [VALUE[-1:-6:-1]]
        [(data, new)] = store.get_many_versioned(["v"])
        assert data == VALUE[::-1] and new != token
        assert store.get_many_if(["v"], {"v": new}) == [VALUE[::-1]]

    def test_concurrent_readers(self, pair):
        store, writer = pair
        writer.set("c", VALUE)
        errors = []

        def work():
            try:
                for i in range(50):
                    assert store.get("c", (i, i + 100)) == VALUE[i : i + 100]
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors


class TestFileStore(StoreContract):
    @pytest.fixture
    def pair(self, tmp_path):
        s = FileStore(str(tmp_path))
        return s, s

    def test_get_many_batches_keep_order_and_errors(self, tmp_path):
        s = FileStore(str(tmp_path))
        s.BATCH_BYTES = 4096  # force several concurrent batches
        for i in range(3):
            s.set(f"f{i}", VALUE)
        reqs = [(f"f{i % 3}", (j * 100, j * 100 + 999)) for i in range(9) for j in range(9)]
        reqs.insert(40, ("missing", (0, 10)))
        out = s.get_many(reqs)
        assert out[40] is None
        del out[40], reqs[40]
        assert out == [VALUE[a:b] for _, (a, b) in reqs]
        with pytest.raises(ByteRangeError, match="f2"):
            s.get_many([*reqs, ("f2", (len(VALUE) - 1, len(VALUE) + 1))])

    def test_reads_report_the_version_of_the_file_read(self, tmp_path):
        s = FileStore(str(tmp_path))
        s.set("a/k", VALUE)
        st = os.stat(tmp_path / "a" / "k")
        [(value, version)] = s.get_many_versioned([("a/k", (3, 9))])
        assert value == VALUE[3:9] and version == s.version("a/k")
        assert version == (st.st_ino, st.st_mtime_ns, st.st_size)
        assert s.get_many_versioned(["a", "a/k/x", "nope"]) == [(None, ())] * 3  # dir, file

    def test_a_file_that_shrinks_or_cannot_be_opened_is_a_store_error(self, tmp_path,
                                                                         monkeypatch):
        (tmp_path / "k").write_bytes(VALUE)
        s = FileStore(str(tmp_path))

        def shrink_then_resolve(byte_range, size, key):
            os.truncate(tmp_path / "k", 10)  # another program cuts the file once it is open
            return resolve_range(byte_range, size, key)

        monkeypatch.setattr(file_store, "resolve_range", shrink_then_resolve)
        with pytest.raises(StoreError, match="'k' shrank while it was being read"):
            s.get("k", (0, 100))
        with pytest.raises(StoreError, match="cannot read"):
            s.get("x" * 300)  # a name too long for the file system

    def test_large_batched_reads_are_read_only_views_of_one_pooled_block(self, tmp_path,
                                                                         monkeypatch):
        s = FileStore(str(tmp_path))
        s.POOLED_READ_BYTES = 5000
        s.set("k", VALUE)
        s.set("small", VALUE[:100])
        reqs = [("k", (0, 4000)), ("k", (5000, 5000)), ("k", (6000, 10240)), "small"]
        got = s.get_many(reqs)
        assert [bytes(v) for v in got] == [VALUE[:4000], b"", VALUE[6000:], VALUE[:100]]
        assert all(type(v) is memoryview and v.readonly for v in got)
        assert got[0].obj is got[2].obj is got[3].obj  # one block for the batch's values
        assert type(s.get_many(["small"])[0]) is bytes  # fewer bytes in all: not pooled
        assert type(s.get("k")) is bytes  # single reads stay bytes
        for i in range(150):  # more files than a batch holds open at once
            s.set(f"many/{i}", VALUE[i : i + 40])
        fds = len(os.listdir("/proc/self/fd"))
        got = s.get_many([f"many/{i}" for i in range(150)] + ["k"])
        assert [bytes(v) for v in got] == [VALUE[i : i + 40] for i in range(150)] + [VALUE]
        assert len(os.listdir("/proc/self/fd")) == fds
        [(value, version)] = s.get_many_versioned([("k", (0, 10240))])
        assert value == VALUE and version == s.version("k")

        def shrink_then_resolve(byte_range, size, key):
            os.truncate(tmp_path / "k", 10)
            return resolve_range(byte_range, size, key)

        monkeypatch.setattr(file_store, "resolve_range", shrink_then_resolve)
        with pytest.raises(StoreError, match="'k' shrank while it was being read"):
            s.get_many([("k", (0, 6000))])

    def test_set_parts_writes_many_parts(self, tmp_path):
        store = FileStore(str(tmp_path))
        rng = np.random.default_rng(3)
        parts = [rng.bytes(int(n)) for n in rng.integers(0, 300, 3000)]  # > IOV_MAX buffers
        views = [memoryview(p) for p in parts[:100]] + [np.frombuffer(parts[100], np.uint8)]
        store.set_parts("k", [*views, *parts[101:]])
        assert store.get("k") == b"".join(parts)
        assert os.listdir(tmp_path) == ["k"]
        with pytest.raises(TypeError, match=r"part 0 of .* contiguous"):
            store.set_parts("k", [np.zeros((4, 4), np.uint8)[:, ::2]])
        assert store.get("k") == b"".join(parts) and os.listdir(tmp_path) == ["k"]

    def test_writers_making_one_new_directory_at_once(self, tmp_path):
        store = FileStore(str(tmp_path), fsync=False)
        keys = [f"d{d}/{i}" for d in range(20) for i in range(8)]
        with ThreadPoolExecutor(8) as pool:  # each directory's 8 writers race to make it
            list(pool.map(lambda k: store.set(k, k.encode()), keys))
        assert store.get_many(keys) == [k.encode() for k in keys]

    def test_file_writes_through_short_and_interrupted_writes(self, tmp_path):
        """tests/c/check_filewrite.c: csrc/filewrite.c's loop through a writev that writes a
        few hundred bytes at a time and is interrupted, with files made unnamed (O_TMPFILE)
        and, where the filesystem refuses them, named; its failures leave no temporary file."""
        (tmp_path / "files").mkdir()
        out = run_checker(tmp_path, "check_filewrite", ["filewrite.c"],
                          ["400", str(tmp_path / "files")], sanitize=True)
        files, _, calls, _, _, unnamed, _, named, _ = out.split()
        assert int(files) == 400 and int(calls) > 400, out
        assert int(unnamed) > 200 and int(named) > 100, out  # (both ways, over both kinds)

    def test_failed_file_write_names_the_key_and_leaves_no_temporary_file(self, tmp_path):
        s = FileStore(str(tmp_path))
        (tmp_path / "d" / "inner").mkdir(parents=True)  # a non-empty directory at the key
        with pytest.raises(StoreError, match=r"cannot write 'd' in .*rename"):
            s.set("d", b"123")
        assert os.listdir(tmp_path) == ["d"]
        with pytest.raises(ValueError, match="null byte"):  # (a C path would end there)
            write_file(str(tmp_path / "t\0x"), str(tmp_path / "v\0w"), [b"1"], False)
        assert os.listdir(tmp_path) == ["d"]
        s.set("f", b"a file")
        with pytest.raises(StoreError, match=r"cannot write 'f/k' in .*create"):
            s.set("f/k", b"1")  # its directory is a file
        assert sorted(os.listdir(tmp_path)) == ["d", "f"] and s.get("f") == b"a file"

    def test_a_killed_writer_leaves_whole_files_and_no_temporary_ones(self, tmp_path):
        """A process killed while it writes new files and replaces one leaves each file whole
        or absent, and nothing else: the file being written has no name until it is whole
        (an unnamed O_TMPFILE file, linked into place)."""
        if int(os.uname().release.split(".")[0]) < 6:
            pytest.skip("files are made unnamed on Linux 6.0 and later")
        try:
            os.close(os.open(tmp_path, os.O_TMPFILE | os.O_WRONLY))
        except OSError:
            pytest.skip(f"{tmp_path}'s filesystem makes no unnamed files")
        code = (
            "import sys\n"
            "from shardvol.kvstore import FileStore\n"
            "s = FileStore(sys.argv[1])\n"
            "i = 0\n"
            "while True:\n"
            "    value = bytes([i % 251]) * (8 << 20)\n"
            "    s.set_parts(f'new{i}', [value[:3 << 20], value[3 << 20:]])\n"
            "    s.set('replaced', value)\n"
            "    print(i, flush=True)\n"
            "    i += 1\n"
        )
        proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)],
                                stdout=subprocess.PIPE, text=True)
        for _ in range(3):  # (a few files written, then a kill during the next ones)
            assert proc.stdout is not None and proc.stdout.readline()
        time.sleep(0.013)
        proc.kill()
        proc.communicate(timeout=30)
        names = os.listdir(tmp_path)
        assert not [n for n in names if n.startswith(store_base.HIDDEN_PREFIX)], names
        assert {"new0", "new1", "new2", "replaced"} <= set(names)
        for name in names:
            data = (tmp_path / name).read_bytes()
            assert len(data) == 8 << 20 and data == data[:1] * len(data), name

    def test_atomic_write_leaves_no_temp_files(self, tmp_path):
        s = FileStore(str(tmp_path))
        s.set("a/b", b"123")
        assert sorted(os.listdir(tmp_path / "a")) == ["b"]
        assert s.list() == ["a/b"]

    def test_failed_write_keeps_old_value(self, tmp_path):
        s = FileStore(str(tmp_path))
        s.set("k", b"old")

        class Boom:
            def __buffer__(self, flags):
                raise RuntimeError("boom")

        with pytest.raises((RuntimeError, TypeError)):
            s.set("k", Boom())
        assert s.get("k") == b"old"
        assert os.listdir(tmp_path) == ["k"]

    def test_url_forms(self, tmp_path):
        FileStore(str(tmp_path)).set("z", b"1")
        assert open_store(str(tmp_path)).get("z") == b"1"
        assert open_store("file://" + str(tmp_path)).get("z") == b"1"

    def test_lock_serialises_processes(self, tmp_path):
        s = FileStore(str(tmp_path))
        s.set("counter", b"0")
        ctx = multiprocessing.get_context("spawn")
        procs = [ctx.Process(target=_increment, args=(str(tmp_path), 25)) for _ in range(3)]
        for p in procs:
            p.start()
        _increment(str(tmp_path), 25)
        for p in procs:
            p.join(60)
            assert p.exitcode == 0
        assert s.get("counter") == b"100"
        assert s.list() == ["counter"]
        assert sorted(os.listdir(tmp_path)) == [".shardvol-locks", "counter"]  # one lock file


def test_threads_locking_one_file_through_different_roots_exclude_each_other(tmp_path):
    # the in-process lock is the directory's, not the store root's: a symbolic link or a
    # parent root with a longer key leads to the same file
    (tmp_path / "d").mkdir()
    os.symlink(tmp_path / "d", tmp_path / "link")
    stores = [(FileStore(str(tmp_path / "d"), fsync=False), "n"),
              (FileStore(str(tmp_path / "link"), fsync=False), "n"),
              (FileStore(str(tmp_path), fsync=False), "d/n")]
    stores[0][0].set("n", b"0")

    def add(store_key) -> None:
        store, key = store_key
        for _ in range(40):
            with store.lock(key):
                value = int(store.get(key))
                time.sleep(0.0005)  # let another thread in, if it could get in
                store.set(key, str(value + 1).encode())

    threads = [threading.Thread(target=add, args=(sk,)) for sk in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert stores[0][0].get("n") == b"120"


def test_a_range_past_the_end_of_a_replaced_file_is_a_version_change(tmp_path):
    # a reader whose index came from the longer old file: the writer's replacement, not damage
    s = FileStore(str(tmp_path))
    s.set("k", VALUE)
    [(_, old)] = s.get_many_versioned([("k", (0, 10))])
    s.set("k", VALUE[:100])
    with pytest.raises(VersionChangedError, match="'k'"):
        s.get_many_if([("k", (5000, 5100))], {"k": old})
    [(_, new)] = s.get_many_versioned([("k", (0, 10))])
    with pytest.raises(ByteRangeError):  # the same version: a real range error
        s.get_many_if([("k", (5000, 5100))], {"k": new})


def test_a_child_forked_while_threads_hold_shardvol_locks_reads_and_writes(tmp_path):
    # the child has none of the parent's threads: no lock they held, no pool thread
    from shardvol import _parallel, sharding

    sharding.write_shards(str(tmp_path), sharding.ShardingSpec(
        hash="identity", preshift_bits=0, minishard_bits=1, shard_bits=0), {1: b"one"})
    locks = [store_base._key_locks_guard, store_base._io_pool_lock, _parallel._pool_lock,
             file_store._lock_files_guard]
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        for lock in locks:
            lock.acquire()
        held.set()
        release.wait(60)
        for lock in locks:
            lock.release()

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    try:
        child = multiprocessing.get_context("fork").Process(target=_child_reads_and_writes,
                                                            args=(str(tmp_path),))
        child.start()
        child.join(60)
        assert child.exitcode == 0
    finally:
        release.set()
        holder.join()


def _child_reads_and_writes(root: str) -> None:
    from shardvol import sharding

    spec = sharding.ShardingSpec(hash="identity", preshift_bits=0, minishard_bits=1, shard_bits=0)
    sharding.update_shard(root, spec, {2: b"two"})  # locks, pools
    assert sharding.ShardReader(root, spec).get_data_many([1, 2]) == {1: b"one", 2: b"two"}


def test_a_forked_child_and_its_parent_exclude_each_other(tmp_path):
    # the child must not share the parent's lock-file descriptions (whose locks never
    # conflict with each other)
    s = FileStore(str(tmp_path), fsync=False)
    s.set("counter", b"0")
    with s.lock("counter"):  # the parent now keeps the directory's lock file open
        pass
    child = multiprocessing.get_context("fork").Process(target=_increment, args=(str(tmp_path), 60))
    child.start()
    _increment(str(tmp_path), 60)
    child.join(60)
    assert child.exitcode == 0 and s.get("counter") == b"120"


def test_threads_of_two_processes_waiting_on_each_others_keys_are_no_deadlock(tmp_path):
    # each process holds one key in one thread and wants the other's key in another: the
    # kernel's check of traditional record locks, which goes process by process, called
    # this a deadlock (EDEADLK) although each holder releases without waiting
    ctx = multiprocessing.get_context("spawn")
    holding = [ctx.Event(), ctx.Event()]
    errors = ctx.Queue()
    procs = [
        ctx.Process(target=_cross_wait, args=(str(tmp_path), mine, theirs, holding, i, errors))
        for i, (mine, theirs) in enumerate([("a", "b"), ("b", "a")])
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert errors.empty(), errors.get()


def _cross_wait(root: str, mine: str, theirs: str, holding: list, i: int, errors) -> None:
    s = FileStore(root)

    def want_theirs() -> None:
        try:
            with s.lock(theirs):
                pass
        except Exception as e:
            errors.put(repr(e))

    with s.lock(mine):
        holding[i].set()
        holding[1 - i].wait(30)
        waiter = threading.Thread(target=want_theirs)
        waiter.start()
        time.sleep(0.3 + 0.3 * i)  # both waiters are blocked before either holder lets go
    waiter.join(30)


def _increment(root: str, n: int) -> None:
    s = FileStore(root, fsync=False)
    for _ in range(n):
        with s.lock("counter"):
            v = int(s.get("counter"))
            time.sleep(0.0002)  # another holder of the lock, if there were one, would get in
            s.set("counter", str(v + 1).encode())


class TestMemoryStore(StoreContract):
    @pytest.fixture
    def pair(self):
        s = MemoryStore(f"memory://{uuid.uuid4().hex}")
        return s, s

    def test_same_url_shares_values(self):
        name = f"memory://{uuid.uuid4().hex}"
        open_store(name).set("a", b"1")
        assert open_store(name).get("a") == b"1"


class TestFsspecMemoryStore(StoreContract):
    """fsspec's own in-memory filesystem: the write path object stores use."""

    @pytest.fixture
    def pair(self):
        s = FsspecStore(f"memory://fsspec-{uuid.uuid4().hex}")
        return s, s


class TestHttpStore(StoreContract):
    @pytest.fixture
    def pair(self, tmp_path):
        server = StaticServer(str(tmp_path))
        try:
            yield open_store(server.url + "/"), FileStore(str(tmp_path))
        finally:
            server.close()


def test_http_server_that_ignores_range_requests(tmp_path):
    """Servers without Range support (python -m http.server) send whole files (200)."""
    import functools
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    FileStore(str(tmp_path)).set("v", VALUE)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0),
                                functools.partial(Quiet, directory=str(tmp_path)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}"
        for store in (open_store(url), FsspecStore(url, versioned_reads=False)):
            assert store.get("v", (10, 20)) == VALUE[10:20]
            assert store.get("v", (-7, None)) == VALUE[-7:]
            assert store.get("v", (10, None)) == VALUE[10:]
            assert store.get_many_versioned([("v", (10, None))])[0][0] == VALUE[10:]
            for past in ((-(len(VALUE) + 1), None), (500, len(VALUE) + 500),
                         (len(VALUE) + 1, None)):
                with pytest.raises(ByteRangeError):
                    store.get("v", past)
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_http_partial_content_is_placed_by_its_content_range(tmp_path):
    """A 206 may hold more than was asked (RFC 9110 15.3.7): its Content-Range says what."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Wider(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
            first = max(0, int(m[1]) - 50)  # from 50 bytes before, to the end
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {first}-{len(VALUE) - 1}/{len(VALUE)}")
            self.send_header("Content-Length", str(len(VALUE) - first))
            self.end_headers()
            self.wfile.write(VALUE[first:])

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Wider)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}"
        for store in (open_store(url), FsspecStore(url, versioned_reads=False)):
            assert store.get("v", (100, 110)) == VALUE[100:110]
            assert store.get_many([("v", (5000, 5003)), ("v", (20, None))]) == [
                VALUE[5000:5003], VALUE[20:]]
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_http_server_with_weak_etags(tmp_path):
    """A server whose ETags are weak (W/"..."), which never satisfy If-Match: reads of a
    sharded volume, with its indexes cached, send no If-Match and read the data."""
    from shardvol import Volume

    spec = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0,
            "minishard_bits": 1, "shard_bits": 1, "minishard_index_encoding": "gzip",
            "data_encoding": "gzip"}
    vol = Volume.create(str(tmp_path), size=(64, 32, 32), chunk_size=(16, 16, 16),
                        data_type="uint16", sharding=spec)
    data = np.random.default_rng(0).integers(0, 9999, vol.shape).astype(np.uint16)
    vol[...] = data
    server = StaticServer(str(tmp_path), weak_etags=True)
    try:
        store = open_store(server.url)
        [(_, etag)] = store.get_many_versioned([("info", None)])
        assert etag is None
        remote = Volume(store)
        for _ in range(2):  # the second time with cached indexes
            assert np.array_equal(remote[5:60, 3:30, 1:31], data[5:60, 3:30, 1:31])
        assert server.if_match_seen == []
    finally:
        server.close()


def test_a_filesystems_headers_go_with_every_read(tmp_path, transport):
    """The HTTP filesystem's ``headers`` option is sent with each read, through either
    transport; a GET keeps the Accept-Encoding it sets."""
    data = bytes(range(256)) * 8
    (tmp_path / "f").write_bytes(data)
    server = StaticServer(str(tmp_path))
    try:
        store = http_store(server.url, transport,
                           headers={"X-Token": "t1", "Accept-Encoding": "identity"})
        assert store.get("f") == data and store.get("f", (10, 20)) == data[10:20]
        assert [(h.get("X-Token"), h.get("Accept-Encoding")) for h in server.heads] == [
            ("t1", "identity"), ("t1", "identity")]
        assert "Range" in server.heads[1]
    finally:
        server.close()


def test_plain_http_reads_need_no_filesystem_and_quote_keys_as_fsspec_does(tmp_path):
    """An HTTP(S) store without options the client does not follow reads without making
    fsspec's filesystem (which imports aiohttp, a fresh process's largest import); keys
    are quoted as that filesystem quotes them; what needs the filesystem makes it."""
    keys = ["plain", "with space", "per%25cent", "ünï/cødé", "a+b=c;d"]
    for key in keys:
        path = tmp_path / "v" / key.replace("%25", "%")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(key.encode() * 3)
    server = StaticServer(str(tmp_path))
    try:
        url = f"{server.url}/v"
        quoted = http_store(url, "aiohttp")  # (through fsspec's filesystem)
        store = FsspecStore(url, headers={"X-Token": "t"}, block_size=1 << 20)
        for key in keys:
            assert store.get(key) == quoted.get(key) is not None, key
        assert store.get("absent") is None and store._fs is None and quoted._fs is not None
        assert FsspecStore(url, client_kwargs={})._fs is None  # (empty: as none)
        assert store.size("plain") == 15 and store._fs is not None
        script = ("import sys, shardvol\n"
                  "vol = shardvol.open(sys.argv[1])\n"
                  "print(vol[...].sum(), sorted(m for m in sys.modules if 'aiohttp' in m))\n")
        data = np.random.default_rng(2).integers(0, 255, (20, 10, 5, 1), dtype=np.uint8)
        vol = shardvol.Volume.create(str(tmp_path / "vol"), size=data.shape[:3], data_type="uint8",
                                     chunk_size=[8, 8, 8])
        vol[...] = data
        done = subprocess.run([sys.executable, "-c", script, f"{server.url}/vol"],
                              capture_output=True, text=True, timeout=120)
        assert done.stdout.split() == [str(int(data.sum())), "[]"], done.stderr
    finally:
        server.close()


def test_unknown_scheme():
    with pytest.raises(ShardvolError, match="nosuch"):
        open_store("nosuch://x/y")


class TestPrefixStore(StoreContract):
    @pytest.fixture
    def pair(self, tmp_path):
        s = open_store(str(tmp_path), prefix="scale/8_8_8")
        return s, s

    def test_prefix_is_invisible_and_isolated(self, tmp_path):
        base = FileStore(str(tmp_path))
        base.set("other", b"o")
        view = open_store(base, prefix="p")
        view.set("a/b", b"1")
        assert base.get("p/a/b") == b"1"
        assert view.list() == ["a/b"]
        assert view.get("other") is None
        with view.lock("a/b"):
            pass


def test_locks_of_different_keys_do_not_block_each_other(tmp_path):
    """Byte-range locks: holding one key's lock leaves another key of the directory free,
    also for another process."""
    s = FileStore(str(tmp_path))
    ctx = multiprocessing.get_context("spawn")
    with s.lock("d/a"):
        p = ctx.Process(target=_lock_and_write, args=(str(tmp_path), "d/b"))
        p.start()
        p.join(30)
        assert p.exitcode == 0 and s.get("d/b") == b"done"
        blocked = ctx.Process(target=_lock_and_write, args=(str(tmp_path), "d/a"))
        blocked.start()
        blocked.join(1.0)
        assert blocked.is_alive()  # waits for our lock on d/a
    blocked.join(30)
    assert blocked.exitcode == 0 and s.get("d/a") == b"done"


def _lock_and_write(root: str, key: str) -> None:
    s = FileStore(root, fsync=False)
    with s.lock(key):
        s.set(key, b"done")


def test_writing_or_locking_under_a_file_raises_store_errors_naming_the_key(tmp_path):
    """System errors of writes and locks (here a key whose directory is a file) come as
    StoreError naming the key and the store, and leave no temporary file behind."""
    s = FileStore(str(tmp_path))
    s.set("a", b"file")
    with pytest.raises(StoreError, match=r"cannot write 'a/b' in file://.*Not a directory"):
        s.set("a/b", b"1")
    with (
        pytest.raises(StoreError, match=r"cannot lock 'a/b' in file://.*Not a directory"),
        s.lock("a/b"),
    ):
        pass
    assert sorted(os.listdir(tmp_path)) == ["a"] and s.get("a") == b"file"


def test_key_locks_exclude_threads_and_are_dropped_once_unused(tmp_path):
    """The in-process lock of a key serialises threads (a read-modify-write of a counter
    under it loses no increment), and its entry goes once no thread holds or waits for it:
    writing a volume locks every chunk file, which must not keep a lock per chunk."""
    store = MemoryStore(f"memory://{uuid.uuid4().hex}")
    store.set("n", b"0")

    def add(times: int) -> None:
        for _ in range(times):
            with store.lock("n"):
                v = int(store.get("n"))
                time.sleep(0.0001)
                store.set("n", str(v + 1).encode())

    threads = [threading.Thread(target=add, args=(50,)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert store.get("n") == b"400"
    assert not store_base._key_locks

    vol = shardvol.Volume.create(str(tmp_path / "v"), type="image", data_type="uint8",
                                 size=[64, 64, 32], chunk_size=[16, 16, 16])
    vol[...] = 7
    assert not store_base._key_locks
    assert len([f for f in os.listdir(tmp_path / "v" / "1_1_1") if f[0] != "."]) == 32


def test_locks_exclude_processes_after_the_directory_is_made_again(tmp_path):
    """A volume deleted and created again in the same place gets a new lock file: the
    locks of a process that used the old one must take the new one, or another process
    locking the same key would not wait for them."""
    s = FileStore(str(tmp_path / "vol"))
    with s.lock("d/a"):
        pass  # this process now has the directory's lock file open
    shutil.rmtree(tmp_path / "vol")
    os.makedirs(tmp_path / "vol" / "d")
    ctx = multiprocessing.get_context("spawn")
    with s.lock("d/a"):
        blocked = ctx.Process(target=_lock_and_write, args=(str(tmp_path / "vol"), "d/a"))
        blocked.start()
        blocked.join(1.0)
        assert blocked.is_alive()  # waits for our lock on d/a
        assert s.get("d/a") is None
    blocked.join(30)
    assert blocked.exitcode == 0 and s.get("d/a") == b"done"


def test_a_lock_taken_on_a_file_replaced_meanwhile_is_taken_again_on_the_new_one(tmp_path):
    """A thread waits for a lock on the directory's lock file; the directory is then made
    again and another process locks the same key in the new file. When the old file's
    lock comes free, the thread must see that it is stale and wait for the new one."""
    root = str(tmp_path / "vol")
    s = FileStore(root, fsync=False)
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    old_holder = ctx.Process(target=_hold_lock, args=(root, "d/a", ready, 2.0, None))
    old_holder.start()
    assert ready.wait(30)
    seen = []

    def waiter() -> None:
        with s.lock("d/a"):
            seen.append(s.get("d/a"))

    t = threading.Thread(target=waiter)
    t.start()
    t.join(0.5)
    assert t.is_alive()  # waits for old_holder
    shutil.rmtree(tmp_path / "vol")
    os.makedirs(tmp_path / "vol" / "d")
    ready.clear()
    new_holder = ctx.Process(target=_hold_lock, args=(root, "d/a", ready, 3.0, b"new"))
    new_holder.start()
    assert ready.wait(30)
    t.join(60)
    for p in (old_holder, new_holder):
        p.join(30)
        assert p.exitcode == 0
    assert seen == [b"new"]  # the thread ran after new_holder, not alongside it


def _hold_lock(root: str, key: str, ready, seconds: float, value: bytes | None) -> None:
    s = FileStore(root, fsync=False)
    with s.lock(key):
        ready.set()
        time.sleep(seconds)
        if value is not None:
            s.set(key, value)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
def test_replaced_lock_files_are_closed_once_no_lock_uses_them(tmp_path):
    """A lock held through a lock file that was replaced meanwhile still unlocks (its
    descriptor stays open until then); afterwards no descriptor of old files is left."""
    s = FileStore(str(tmp_path / "vol"))
    with s.lock("a"):
        pass
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(3):
        with s.lock("a"):
            shutil.rmtree(tmp_path / "vol")
            os.makedirs(tmp_path / "vol")
            with s.lock("b"):  # opens the new lock file while "a" holds the old one
                pass
    for _ in range(20):
        shutil.rmtree(tmp_path / "vol")
        with s.lock("a"):
            s.set("a", b"1")
    assert len(os.listdir("/proc/self/fd")) == before
    assert sorted(os.listdir(tmp_path / "vol")) == [".shardvol-locks", "a"]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
def test_idle_lock_files_of_many_directories_are_not_all_kept_open(tmp_path):
    """A process that writes many volumes keeps only the recent lock files open (a
    descriptor each would run into the limit of open files)."""
    before = len(os.listdir("/proc/self/fd"))
    n = 3 * file_store._IDLE_LOCK_FILES
    for i in range(n):
        s = FileStore(str(tmp_path / str(i)), fsync=False)
        with s.lock("k"):
            s.set("k", b"v")
    assert len(os.listdir("/proc/self/fd")) - before <= file_store._IDLE_LOCK_FILES
    s = FileStore(str(tmp_path / "0"), fsync=False)  # its lock file was closed: opened again
    with s.lock("k"):
        s.set("k", b"w")
    assert s.get("k") == b"w"
