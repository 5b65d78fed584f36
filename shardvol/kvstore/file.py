"""Local-file store: the default backend (plain paths and ``file://`` URLs).

Reads use ``os.pread``; a write makes a new file in the key's directory, fsyncs it
and only then gives it the key's name, so a reader or a crash never sees a torn
value.  On Linux the new file is unnamed until then (``O_TMPFILE``, linked into
place; over an existing value, linked as a hidden temporary file and renamed over
it): a killed writer leaves nothing, and writers of one directory do not wait on
each other's file creation.  Elsewhere it is a hidden temporary file, renamed.

``lock(key)`` takes an ``fcntl`` lock (an open file description lock on Linux) on
one byte of a hidden ``.shardvol-locks`` file in the key's directory (the byte
chosen by a 62-bit hash of the key's name), which serialises writers across
threads and processes on the same host (and on NFS with working locking), with
no file created or removed per lock.

The fsync (on by default, like TensorStore's ``file_io_sync``) is what makes a
value's bytes durable once written (the directory entry is not fsynced); it is
about half the time of writing many small files (512 chunk files of 256 KiB:
~120 ms instead of ~60 ms, with writers overlapping their fsyncs).
``FileStore(path, fsync=False)`` skips it; writes stay atomic for readers either way.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import struct
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from urllib.parse import unquote, urlparse

from shardvol._ext import hugeblock
from shardvol._ext.files import write_file
from shardvol._parallel import sharing_cores
from shardvol.errors import ByteRangeError, InvalidKeyError, StoreError, VersionChangedError
from shardvol.kvstore.base import (
    HIDDEN_PREFIX,
    ByteRange,
    KVStore,
    Request,
    check_key,
    check_prefix,
    io_pool,
    normalize_request,
    process_lock,
    resolve_range,
)

_TMP = HIDDEN_PREFIX + "tmp."
_LOCK_FILE = HIDDEN_PREFIX + "locks"
_PATH_CACHE_SIZE = 1 << 16
_OPEN_AT_ONCE = 64  # files a batched read holds open (and reads into one block)


def path_from_url(url: str) -> str:
    """Filesystem path of a plain path or ``file://`` URL."""
    if url.startswith("file://"):
        parsed = urlparse(url)
        if parsed.netloc not in ("", "localhost"):
            raise InvalidKeyError(f"file URL {url!r} names a remote host")
        return unquote(parsed.path)
    return url


class FileStore(KVStore):
    """Values as files below a root directory."""

    local = True
    locks_across_processes = True

    def __init__(self, root: str, fsync: bool = True) -> None:
        self.root = os.path.abspath(os.path.expanduser(path_from_url(root)))
        self.url = "file://" + self.root
        self.fsync = fsync
        self._paths: dict[str, str] = {}  # key -> path, saving the check and join per read

    def _path(self, key: str) -> str:
        path = self._paths.get(key)
        if path is None:
            if len(self._paths) >= _PATH_CACHE_SIZE:
                self._paths.clear()
            path = self._paths[key] = os.path.join(self.root, *check_key(key).split("/"))
        return path

    def file_path(self, key: str) -> str:
        return self._path(key)

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes | None:
        value = self._read_batch([(key, byte_range)], pooled=False)[0][0]
        return value  # type: ignore[return-value]  # not pooled: bytes, never a memoryview

    def open_file(self, key: str) -> tuple[int, tuple[int, ...], int] | None:
        found = self._open(key)
        return None if found is None else (found[0], _version(found[1]), found[1].st_size)

    def _open(self, key: str) -> tuple[int, os.stat_result] | None:
        """A read descriptor of ``key``'s file and its status; None if there is no file."""
        path = self._path(key)
        try:
            fd = os.open(path, os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        except OSError as e:
            raise StoreError(f"cannot read {key!r} in {self.url}: {e}") from e
        try:
            st = os.fstat(fd)
        except BaseException:
            os.close(fd)
            raise
        if stat.S_ISDIR(st.st_mode):
            os.close(fd)
            return None
        return fd, st

    # Reading this many bytes from the page cache costs about as much as handing a
    # task to an I/O thread: requests are batched so that each task reads at least
    # this, in at most MAX_BATCHES concurrent tasks (more only add GIL hand-offs).
    BATCH_BYTES = 1 << 20
    MAX_BATCHES = 2 * (os.cpu_count() or 1)
    # Batches of values of this many bytes in all are read into a pooled block (glibc
    # serves smaller allocations from memory it keeps).
    POOLED_READ_BYTES = 128 << 10

    def get_many(self, requests: Iterable[Request]) -> list[bytes | memoryview | None]:
        """Values read with others of 128 KiB or more in all are read-only memoryviews
        rather than bytes (see _read_files)."""
        return [value for value, _ in self._read_many([normalize_request(r) for r in requests])]

    def get_many_versioned(
        self, requests: Iterable[Request]
    ) -> list[tuple[bytes | memoryview | None, tuple[int, ...]]]:
        """Each value with the version of the very file it was read from."""
        return self._read_many([normalize_request(r) for r in requests])

    def get_many_if(
        self, requests: Iterable[Request], versions: Mapping[str, Hashable | None]
    ) -> list[bytes | memoryview | None]:
        """Checked against the version of the file each value was read from (no extra
        system call, and no window between the read and the check).  A range past the end
        of a file that is no longer at its version is that change, not a range error."""
        reqs = [normalize_request(r) for r in requests]
        try:
            read = self._read_many(reqs)
        except ByteRangeError:
            for key, expected in versions.items():
                if expected is not None and not self.still_at(key, expected):
                    raise VersionChangedError(
                        f"{key!r} in {self.url} changed since version {expected!r}", key
                    ) from None
            raise
        for (key, _), (_, version) in zip(reqs, read):
            expected = versions.get(key)
            if expected is not None and version != expected:
                raise VersionChangedError(
                    f"{key!r} in {self.url} changed since version {expected!r}", key
                )
        return [value for value, _ in read]

    def _read_many(
        self, reqs: list[tuple[str, ByteRange | None]]
    ) -> list[tuple[bytes | memoryview | None, tuple[int, ...]]]:
        """(value, version of the file it was read from) of each normalized request:
        ranged reads in a few batches (each file opened once per batch), run concurrently
        when there is enough to read and this thread is not one of several sharing the
        cores already (see sharing_cores); whole-file reads one per task."""
        sizes = [
            r[1] - r[0] if r is not None and r[0] >= 0 and r[1] is not None else self.BATCH_BYTES
            for _, r in reqs
        ]
        n_batches = min(len(reqs), self.MAX_BATCHES, -(-sum(sizes) // self.BATCH_BYTES))
        if n_batches <= 1 or sharing_cores():
            return self._read_batch(reqs)
        target = sum(sizes) / n_batches
        batches: list[list[tuple[str, ByteRange | None]]] = [[]]
        filled = 0.0
        for req, size in zip(reqs, sizes):
            if filled >= target and len(batches) < n_batches:
                batches.append([])
                filled = 0.0
            batches[-1].append(req)
            filled += size
        return [item for batch in io_pool().map(self._read_batch, batches) for item in batch]

    def _read_batch(
        self, reqs: list[tuple[str, ByteRange | None]], pooled: bool = True
    ) -> list[tuple[bytes | memoryview | None, tuple[int, ...]]]:
        """(value, version of the file it was read from: its descriptor's :meth:`version`
        tuple, () if absent) of each request; each file is opened once."""
        by_key: dict[str, list[int]] = {}
        for i, (key, _) in enumerate(reqs):
            by_key.setdefault(key, []).append(i)
        out: list[tuple[bytes | memoryview | None, tuple[int, ...]]] = [(None, ())] * len(reqs)
        files = list(by_key.items())
        for first in range(0, len(files), _OPEN_AT_ONCE):
            self._read_files(files[first : first + _OPEN_AT_ONCE], reqs, out, pooled)
        return out

    def _read_files(
        self,
        files: list[tuple[str, list[int]]],
        reqs: list[tuple[str, ByteRange | None]],
        out: list[tuple[bytes | memoryview | None, tuple[int, ...]]],
        pooled: bool,
    ) -> None:
        """Read ``reqs[i]`` for the indexes ``i`` of each file into ``out[i]``, all files
        open at once.  ``pooled``: values of POOLED_READ_BYTES or more in all are read into
        one block of memory (read-only views of it), which reuses the pages of a freed
        block: fresh memory would cost a page fault and zeroing every 4 KiB, more than
        the copy from the page cache."""
        opened: list[tuple[str, int, tuple[int, ...], list[tuple[int, int, int]]]] = []
        try:
            for key, idx in files:
                found = self._open(key)
                if found is None:
                    continue
                fd, st = found
                spans: list[tuple[int, int, int]] = []
                opened.append((key, fd, _version(st), spans))
                spans.extend((i, *resolve_range(reqs[i][1], st.st_size, key)) for i in idx)
            total = sum(stop - start for *_, spans in opened for _, start, stop in spans)
            block = None
            if pooled and total >= self.POOLED_READ_BYTES:
                block = hugeblock.buffer(total).data  # (a memoryview of the block)
            pos = 0
            for key, fd, version, spans in opened:
                for i, start, stop in spans:
                    if block is None:
                        out[i] = (_pread_all(fd, stop - start, start, key), version)
                    else:
                        view = block[pos : pos + stop - start]
                        _pread_into(fd, view, start, key)
                        out[i] = (view.toreadonly(), version)
                        pos += stop - start
        finally:
            for _, fd, _, _ in opened:
                os.close(fd)

    def set(self, key: str, value: bytes) -> None:
        self.set_parts(key, [value])

    def set_parts(self, key: str, parts: Sequence[bytes | memoryview]) -> None:
        """As :meth:`set` of the joined parts, written with ``writev`` without joining them.
        The new file's creation, writes, fsync and naming are one call that releases the
        GIL once (each release is a hand-off between the threads writing at once)."""
        path = self._path(key)
        directory, name = os.path.split(path)
        tmp = os.path.join(directory, f"{_TMP}{name}.{uuid.uuid4().hex}")
        buffers = list(parts)
        try:
            try:
                write_file(tmp, path, buffers, self.fsync)
            except FileNotFoundError as e:  # creating the temporary file: no directory
                if e.filename != tmp:  # (a rename's: the directory went meanwhile)
                    raise
                os.makedirs(directory, exist_ok=True)  # (or another writer made it)
                write_file(tmp, path, buffers, self.fsync)
        except OSError as e:
            if isinstance(e, StoreError):
                raise
            raise StoreError(f"cannot write {key!r} in {self.url}: {e}") from e

    def delete(self, key: str) -> None:
        try:
            os.unlink(self._path(key))
        except (FileNotFoundError, NotADirectoryError):
            pass
        except OSError as e:
            raise StoreError(f"cannot delete {key!r} in {self.url}: {e}") from e

    def list(self, prefix: str = "") -> list[str]:
        check_prefix(prefix)
        head, _, _ = prefix.rpartition("/")
        start = os.path.join(self.root, *head.split("/")) if head else self.root
        keys = []
        for dirpath, dirnames, filenames in os.walk(start):
            dirnames[:] = [d for d in dirnames if not d.startswith(HIDDEN_PREFIX)]
            rel = os.path.relpath(dirpath, self.root)
            rel = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            for f in filenames:
                if f.startswith(HIDDEN_PREFIX):
                    continue
                key = rel + f
                if key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)

    def size(self, key: str) -> int | None:
        try:
            st = os.stat(self._path(key))
        except (FileNotFoundError, NotADirectoryError):
            return None
        return st.st_size if stat.S_ISREG(st.st_mode) else None

    def version(self, key: str) -> tuple[int, ...]:
        """(inode, mtime, size): an atomic replace always makes a new inode; () if absent."""
        try:
            return _version(os.stat(self._path(key)))
        except (FileNotFoundError, NotADirectoryError):
            return ()

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        directory, name = os.path.split(self._path(key))
        offset = _lock_offset(name)
        try:
            where = _directory_ident(directory)
        except OSError as e:
            raise StoreError(f"cannot lock {key!r} in {self.url}: {e}") from e
        # the lock file's locks are this process's (through a shared descriptor): the
        # in-process lock orders our threads, by the directory itself, whatever path or
        # store root (a symbolic link, a prefix) led to it
        with process_lock(f"directory {where}", name):
            try:
                lock_file = _lock_byte(directory, offset)
            except OSError as e:
                raise StoreError(f"cannot lock {key!r} in {self.url}: {e}") from e
            try:
                yield
            finally:
                _unlock_byte(lock_file, offset)


class _LockFile:
    """An open lock file; ``users``: locks held, or being taken, through it."""

    __slots__ = ("fd", "ident", "spare", "users")

    def __init__(self, fd: int, ident: tuple[int, int]) -> None:
        self.fd, self.ident, self.users = fd, ident, 0
        self.spare: list[int] = []  # other descriptors of the file, opened by a race


# The lock files of directories, open while locks are held through them, and the last
# _IDLE_LOCK_FILES used ones after that. Closing any descriptor of a file drops every
# record lock this process holds on it, so a descriptor is closed only when no lock is
# held through its file. A file no longer at its path (the directory was deleted and made
# again: locking the old, unlinked file would not exclude other processes) is closed then.
_IDLE_LOCK_FILES = 64
_lock_files: dict[tuple[int, int], _LockFile] = {}  # by (st_dev, st_ino)
_lock_file_at: dict[str, tuple[int, int]] = {}  # lock file path -> the file last found there
_idle_lock_files: OrderedDict[tuple[int, int], None] = OrderedDict()  # least recent first
_lock_files_guard = threading.Lock()


def _forget_lock_files_in_child() -> None:
    """After fork: the child's copies of the lock-file descriptors share their open file
    descriptions with the parent's, whose locks they would then share (no exclusion between
    parent and child); the child opens its own, and no lock of the parent is its."""
    global _lock_files_guard
    for lock_file in _lock_files.values():
        for fd in (lock_file.fd, *lock_file.spare):
            with contextlib.suppress(OSError):
                os.close(fd)  # (the parent's locks stay: its descriptors are still open)
    _lock_files.clear()
    _lock_file_at.clear()
    _idle_lock_files.clear()
    _lock_files_guard = threading.Lock()


os.register_at_fork(after_in_child=_forget_lock_files_in_child)


def _ident(st: os.stat_result) -> tuple[int, int]:
    return (st.st_dev, st.st_ino)


def _current_ident(path: str) -> tuple[int, int] | None:
    try:
        return _ident(os.stat(path))
    except FileNotFoundError:
        return None


def _directory_ident(directory: str) -> tuple[int, int]:
    """(device, inode) of ``directory``, which is made if missing."""
    try:
        return _ident(os.stat(directory))
    except FileNotFoundError:
        os.makedirs(directory, exist_ok=True)
        return _ident(os.stat(directory))


def _lock_byte(directory: str, offset: int) -> _LockFile:
    """Take the byte ``offset`` of ``directory``'s lock file (made if missing), waiting for
    other processes; returns the file, for _unlock_byte."""
    path = os.path.join(directory, _LOCK_FILE)
    while True:
        lock_file = _take_lock_file(directory, path)
        try:
            _set_lock(lock_file.fd, offset, fcntl.F_WRLCK)
        except BaseException:
            _give_back(lock_file)
            raise
        try:
            current = _current_ident(path) == lock_file.ident
        except BaseException:
            _unlock_byte(lock_file, offset)
            raise
        if current:
            return lock_file
        _unlock_byte(lock_file, offset)  # the file was replaced while we waited: lock the new one


def _unlock_byte(lock_file: _LockFile, offset: int) -> None:
    try:
        _set_lock(lock_file.fd, offset, fcntl.F_UNLCK)
    finally:
        _give_back(lock_file)


# Open file description locks (Linux): owned by the descriptor's open file, not by the
# process. The kernel checks traditional record locks for deadlocks process by process,
# so two processes whose threads wait on each other's shards (each thread holding one
# lock) got EDEADLK for what is no deadlock; it does not check these.
_OFD_SETLKW = getattr(fcntl, "F_OFD_SETLKW", None)


def _set_lock(fd: int, offset: int, kind: int) -> None:
    """Lock (F_WRLCK, waiting) or unlock (F_UNLCK) byte ``offset`` of ``fd``'s file."""
    if _OFD_SETLKW is not None:
        # struct flock: l_type, l_whence, l_start, l_len, l_pid (0 for these locks)
        request = struct.pack("hhqqi4x", kind, os.SEEK_SET, offset, 1, 0)
        fcntl.fcntl(fd, _OFD_SETLKW if kind != fcntl.F_UNLCK else fcntl.F_OFD_SETLK, request)
        return
    while True:  # traditional locks: a false deadlock report is waited out
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX if kind != fcntl.F_UNLCK else fcntl.LOCK_UN, 1, offset)
            return
        except OSError as e:
            if e.errno != errno.EDEADLK:
                raise
            time.sleep(0.001)


def _take_lock_file(directory: str, path: str) -> _LockFile:
    with _lock_files_guard:
        ident = _current_ident(path)
        lock_file = _lock_files.get(ident) if ident is not None else None
        if ident is None or lock_file is None:  # (no ident: no lock file either)
            if ident is None:
                os.makedirs(directory, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
            ident = _ident(os.fstat(fd))
            lock_file = _lock_files.get(ident)
            if lock_file is None:
                lock_file = _lock_files[ident] = _LockFile(fd, ident)
            else:
                lock_file.spare.append(fd)
        previous = _lock_file_at.get(path)
        _lock_file_at[path] = ident
        lock_file.users += 1
        _idle_lock_files.pop(ident, None)
        if previous is not None and previous != ident:
            _close_if_unused(previous)
        return lock_file


def _give_back(lock_file: _LockFile) -> None:
    with _lock_files_guard:
        lock_file.users -= 1
        _close_if_unused(lock_file.ident)


def _close_if_unused(ident: tuple[int, int]) -> None:
    """Close what no lock is held through, but keep recent lock files of their directories
    open (the guard is held)."""
    lock_file = _lock_files.get(ident)
    if lock_file is None or lock_file.users:
        return
    for fd in lock_file.spare:
        os.close(fd)
    lock_file.spare.clear()
    if ident in _lock_file_at.values():
        _idle_lock_files[ident] = None
        _idle_lock_files.move_to_end(ident)
        if len(_idle_lock_files) <= _IDLE_LOCK_FILES:
            return
        ident, _ = _idle_lock_files.popitem(last=False)
        lock_file = _lock_files[ident]
        for path in [p for p, i in _lock_file_at.items() if i == ident]:
            del _lock_file_at[path]
    else:
        _idle_lock_files.pop(ident, None)
    os.close(lock_file.fd)
    del _lock_files[ident]


def _lock_offset(name: str) -> int:
    """The byte of the directory's lock file that stands for ``name`` (a 62-bit hash)."""
    import hashlib  # (writes only: 3 ms of a reading script's import)

    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 2


def _version(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _pread_into(fd: int, view: memoryview, offset: int, key: str) -> None:
    """Fill ``view`` with the bytes of ``fd`` from ``offset``."""
    got = 0
    while got < len(view):
        n = os.preadv(fd, [view[got:]], offset + got)
        if n == 0:
            raise StoreError(f"{key!r} shrank while it was being read")
        got += n


def _pread_all(fd: int, length: int, offset: int, key: str) -> bytes:
    data = os.pread(fd, length, offset)
    if len(data) == length:
        return data
    parts = [data]
    got = len(data)
    while got < length:
        more = os.pread(fd, length - got, offset + got)
        if not more:
            raise StoreError(f"{key!r} shrank while it was being read")
        parts.append(more)
        got += len(more)
    return b"".join(parts)
