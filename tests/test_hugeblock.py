"""Output arrays in huge-page blocks behave as np.empty's, also when blocks are reused."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from shardvol import Volume
from shardvol._ext import hugeblock
from tests.c_checkers import run_checker

PAGE = 2 << 20


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", ["uint8", "uint64", ">u4", "float32", "complex128"])
def test_large_arrays_are_aligned_writable_and_shaped_like_np_empty(order, dtype):
    shape = (160, 100, 100, 3)  # 4.8 MB in uint8
    a = hugeblock.empty(shape, dtype, order=order)
    b = np.empty(shape, dtype, order=order)
    assert (a.shape, a.dtype, a.strides, a.flags.writeable) == (b.shape, b.dtype, b.strides, True)
    assert a.ctypes.data % PAGE == 0
    a[...] = np.arange(a.size, dtype=a.dtype).reshape(shape, order=order)
    np.testing.assert_array_equal(a.ravel(order="K")[:5], np.arange(5))


def test_small_and_object_arrays_come_from_numpy():
    small = hugeblock.empty((10, 10), np.uint64, order="F")
    assert small.flags.owndata and small.flags.f_contiguous
    obj = hugeblock.empty((1 << 20,), object)
    assert obj.flags.owndata and obj[0] is None  # numpy fills object arrays with None


_ROUNDS_OF_CUTOUTS = """
import resource
import numpy as np
from shardvol._ext import hugeblock

def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

for round in range(3):
    before = faults()
    held = [hugeblock.empty((100, 100, 100), np.uint8, order="F") for _ in range(24)]
    for i, a in enumerate(held):
        assert not a.flags.owndata and a.flags.f_contiguous
        a[...] = i
    print(round, faults() - before, len({a.ctypes.data for a in held}))
    del held, a
"""


def test_cutouts_held_together_then_dropped_reuse_their_blocks():
    """Mid-sized outputs (1 MB cutouts) come from blocks too: a round of 24 held at once
    and dropped leaves its blocks, pages present, to the next round (malloc's main arena
    gives that memory back to the kernel, to be faulted in again: 5,860 faults a round).
    In a fresh process, whose cache is empty."""
    out = subprocess.run([sys.executable, "-c", _ROUNDS_OF_CUTOUTS], capture_output=True,
                         text=True, check=True).stdout.split()
    rounds = [tuple(map(int, out[i:i + 3])) for i in range(0, len(out), 3)]
    pages = 24 * 1_000_000 // os.sysconf("SC_PAGE_SIZE")
    assert rounds[0][1] >= pages and all(r[2] == 24 for r in rounds)
    assert all(r[1] < pages // 10 for r in rounds[1:]), rounds


def test_views_keep_the_block_and_freed_blocks_never_alias_live_arrays():
    shape = (100, 100, 100)
    live = []
    for i in range(40):  # more blocks than the cache keeps
        a = hugeblock.empty(shape, np.uint64, order="F")
        a[...] = i
        live.append(a[::2, 3:7])  # a view: the block stays while the view lives
        del a
        if i % 3 == 0:
            live.pop(0)  # its block goes back to the cache
        for v in live:
            assert v.base is not None and (v == v.flat[0]).all()
    assert len({int(v.flat[0]) for v in live}) == len(live)


def test_threads_allocate_fill_and_free_blocks_concurrently():
    errors = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(30):
            n = int(rng.integers(1, 12)) << 20
            a = hugeblock.empty((n,), np.uint8)
            a[...] = seed
            if not (a == seed).all():
                errors.append(seed)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def _child_allocates(queue) -> None:
    a = hugeblock.empty((1 << 23,), np.uint8)
    a[...] = 7
    queue.put(int(a.sum()))


def test_a_forked_child_allocates_with_the_cache_it_inherits():
    for _ in range(4):  # blocks in the parent's cache when it forks
        hugeblock.empty((1 << 23,), np.uint8)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    p = ctx.Process(target=_child_allocates, args=(queue,))
    p.start()
    assert queue.get(timeout=60) == 7 << 23
    p.join(60)
    assert p.exitcode == 0


def test_volume_reads_partly_outside_fill_the_rest(tmp_path):
    vol = Volume.create(str(tmp_path), size=(128, 128, 64), chunk_size=(64, 64, 64),
                        data_type="uint64", type="segmentation", encoding="raw")
    vol[...] = 5
    for _ in range(3):  # reused blocks hold old voxels: the outside must still be the fill
        out = Volume(str(tmp_path), fill_value=9, bounded=False)[0:138, 0:128, 0:64]
        assert out.ctypes.data % PAGE == 0
        assert (out[128:] == 9).all() and (out[:128] == 5).all()
        del out


def test_hundreds_of_chunk_buffers_dropped_together_are_all_reused():
    """A remote read's decoded chunks (256 KiB each, 250 for 24 cutouts of 100^3), kept by
    the chunk cache and dropped together: every one of their blocks serves the next
    such read (the cache once kept 64 blocks, whatever their size)."""
    n, size = 250, 256 << 10
    first = [hugeblock.buffer(size) for _ in range(n)]
    for b in first:
        b[::4096] = 7
    del first, b
    again = [hugeblock.buffer(size) for _ in range(n)]
    assert sum(bool((b[::4096] == 7).all()) for b in again) == n  # (fresh pages: zero)


def test_c_cache_checker(tmp_path):
    """tests/c/check_hugeblock.c under ASan and UBSan: four threads allocate, stamp, check
    and free blocks of random sizes (a live block is never handed out again), then more
    freed blocks than the cache keeps, and one that evicts hundreds of them."""
    out = run_checker(tmp_path, "check_hugeblock", ["hugeblock.c"], ["3000"], libs=("pthread",),
                      sanitize=True)
    assert out.strip() == "ok 3000 rounds", out


def test_the_footprint_of_an_array_is_the_block_it_keeps():
    """A block is rounded up to 64 KiB units below 2 MiB, to 2 MiB units above: an array
    (or any view of it) keeps all of it; other arrays keep their own bytes.  (In a fresh
    process: a freed block that other tests left in the cache serves requests down to half
    its size, and keeps its own capacity.)"""
    code = (
        "import numpy as np\n"
        "from shardvol._ext import hugeblock\n"
        "odd = hugeblock.empty((130, 130, 130), np.uint8, order='F')  # 2,197,000 bytes\n"
        "assert hugeblock.footprint(odd) == 4 << 20\n"
        "assert hugeblock.footprint(odd[:10, :10, :10]) == 4 << 20\n"
        "exact = hugeblock.empty((64, 64, 64), np.uint8)\n"
        "assert hugeblock.footprint(exact) == exact.nbytes == 256 << 10\n"
        "assert hugeblock.footprint(hugeblock.buffer(300_000)) == 5 * (64 << 10)\n"
        "small = np.zeros((10, 10))\n"
        "assert hugeblock.footprint(small) == small.nbytes\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr


def test_buffers_of_any_size_come_from_blocks_and_freed_ones_are_reused():
    a = hugeblock.buffer(300_000)
    assert (a.shape, a.dtype, a.flags.writeable) == ((300_000,), np.uint8, True)
    assert a.ctypes.data % os.sysconf("SC_PAGE_SIZE") == 0 and not a.flags.owndata
    big = hugeblock.buffer(41 << 20)  # cached alone once freed (the cache keeps 64 MiB)
    address = big.ctypes.data
    big[:] = 7
    del big
    again = hugeblock.buffer(41 << 20)
    assert again.ctypes.data == address and (again == 7).all()  # its pages, as left
    with pytest.raises(ValueError):
        hugeblock.buffer(0)


def test_freed_blocks_are_kept_up_to_a_64th_of_the_memory():
    """A block of nearly the cache's limit (a 64th of the machine's memory, from 64 MiB to
    1 GiB) is reused with its pages once freed; one over the limit is unmapped."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    limit = min(max(memory // 64, 64 << 20), 1 << 30)
    size = limit - PAGE
    block = hugeblock.buffer(size)
    address = block.ctypes.data
    block[::PAGE] = 3
    del block
    again = hugeblock.buffer(size)
    assert again.ctypes.data == address and (again[::PAGE] == 3).all()
    del again
    over = hugeblock.buffer(limit + PAGE)
    over[::PAGE] = 4
    address = over.ctypes.data
    del over
    fresh = hugeblock.buffer(limit + PAGE)  # (a new mapping: zeroed, wherever it lands)
    assert (fresh[::PAGE] == 0).all(), address


def _free_pages_reported() -> bool:
    """Whether a virtio balloon bound to its driver reports free pages to the host (device
    id 5, feature bit 5, VIRTIO_BALLOON_F_REPORTING), read from sysfs as the kernel
    documents it."""
    root = "/sys/bus/virtio/devices"
    for name in os.listdir(root) if os.path.isdir(root) else []:
        device = os.path.join(root, name)
        with open(os.path.join(device, "device")) as f:
            balloon = int(f.read(), 16) == 5
        if balloon and os.path.exists(os.path.join(device, "driver")):
            with open(os.path.join(device, "features")) as f:
                if f.read()[5:6] == "1":
                    return True
    return False


def test_huge_pages_are_advised_only_when_free_ones_hold_the_block_and_stay():
    """MADV_HUGEPAGE for a block when the free blocks of 2 MiB and more (/proc/buddyinfo,
    read here as the kernel documents it) hold it twice over and the host keeps them (no
    free page reporting); never for more than the machine's memory."""
    free = 0
    with open("/proc/buddyinfo") as f:
        for line in f:
            counts = [int(v) for v in line.split()[4:]]
            free += sum(n << (order + 12) for order, n in enumerate(counts) if order >= 9)
    small, huge = 2 << 20, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert hugeblock.advised(huge) is False
    if _free_pages_reported():
        assert hugeblock.advised(small) is False
    elif free > 64 * small:  # (the machine's free memory moves between the two reads)
        assert hugeblock.advised(small) is True


@pytest.mark.parametrize(("setting", "advised"), [("advise", True), ("off", False)])
def test_the_environment_decides_over_the_machine(setting, advised):
    code = "from shardvol._ext import hugeblock; print(hugeblock.advised(2 << 20))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "SHARDVOL_HUGEPAGES": setting})
    assert out.stdout.strip() == str(advised)


def _resident(a: np.ndarray) -> np.ndarray:
    """Whether each 4 KiB page of ``a``'s block (page-aligned) is in memory (mincore)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    pages = -(-a.nbytes // 4096)
    vec = (ctypes.c_ubyte * pages)()
    assert libc.mincore(ctypes.c_void_p(a.ctypes.data), ctypes.c_size_t(a.nbytes), vec) == 0
    return np.frombuffer(vec, np.uint8) & 1 == 1


def _kernel() -> tuple[int, int]:
    major, minor = os.uname().release.split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


@pytest.mark.skipif(_kernel() < (5, 14), reason="MADV_POPULATE_WRITE came with Linux 5.14")
def test_populate_faults_in_its_pages_only_and_keeps_the_contents():
    a = hugeblock.buffer((1 << 30) + PAGE)  # (above any cache limit: freshly mapped)
    assert not _resident(a).any()
    start, stop = 5 * PAGE + 4097, 9 * PAGE - 1  # (not page-aligned at either end)
    assert hugeblock.populate(a, start, stop)
    resident = _resident(a)
    first, last = start // 4096, (stop - 1) // 4096
    assert resident[first:last + 1].all()
    # no page outside the range's 2 MiB pages (whole, where the block has huge pages)
    assert not resident[:start // PAGE * PAGE // 4096].any()
    assert not resident[-(-stop // PAGE) * PAGE // 4096:].any()
    assert not a[start:stop].any()  # (zero, as a fresh page is)
    b = hugeblock.empty((300, 200, 100), np.uint16, order="F")
    b[...] = np.random.default_rng(3).integers(0, 1 << 16, b.shape, dtype=np.uint16)
    before = b.copy(order="K")
    assert hugeblock.populate(b, 0, b.nbytes)
    np.testing.assert_array_equal(b, before)
    with pytest.raises(ValueError, match="not within"):
        hugeblock.populate(b, 10, b.nbytes + 1)
    with pytest.raises(ValueError, match="contiguous"):
        hugeblock.populate(b[::2], 0, 10)


def test_large_local_reads_fault_their_output_in_ahead(tmp_path, monkeypatch):
    """Local reads of outputs over _POPULATE_BYTES populate them in pieces first (on the
    reading threads), and read the same voxels; remote reads do not."""
    from shardvol.array import engine

    from .http_server import StaticServer

    data = np.random.default_rng(5).integers(0, 255, (256, 256, 64), dtype=np.uint8)
    Volume.create(str(tmp_path), size=data.shape, chunk_size=(64, 64, 64),
                  data_type="uint8", encoding="raw")[...] = data
    monkeypatch.setattr(engine, "_POPULATE_BYTES", 1 << 20)
    monkeypatch.setattr(engine, "_POPULATE_PIECE", 300_000)
    calls: list[tuple[int, int]] = []
    real = hugeblock.populate

    def recording(array, start, stop):
        calls.append((start, stop))
        return real(array, start, stop)

    monkeypatch.setattr(hugeblock, "populate", recording)
    out = Volume(str(tmp_path))[...]
    np.testing.assert_array_equal(out[..., 0], data)
    assert sorted(calls) == [(s, min(s + 300_000, data.nbytes))
                             for s in range(0, data.nbytes, 300_000)]
    calls.clear()
    np.testing.assert_array_equal(Volume(str(tmp_path))[0:64, 0:64, 0:64][..., 0],
                                  data[:64, :64])  # (256 KiB: below the threshold)
    server = StaticServer(str(tmp_path))
    try:
        np.testing.assert_array_equal(Volume(server.url)[...][..., 0], data)
    finally:
        server.close()
    assert calls == []
