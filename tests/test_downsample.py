"""shardvol.downsample against tensorstore.downsample, CloudVolume, and across executors."""

from __future__ import annotations

import multiprocessing
import warnings
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest
import tensorstore as ts
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardvol
from shardvol import Volume, _reference
from shardvol.errors import AlreadyExistsError, InvalidArgumentError, StagedPyramidWarning
from shardvol.ops.downsample import Scale, plan
from shardvol.sizes import parse_bytes

from .oracles import cv_read, ts_open
from .stores import stored_files

DTYPES = ["uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "float32"]


def ts_buggy(lo: int, n: int, f: int) -> bool:
    """TensorStore 0.1.86 reads out of bounds when one block spans a whole dimension cut at
    both ends (see tests/test_downsample_kernels.py); use the numpy reference there."""
    return f > 1 and n >= 2 and lo % f > 0 and lo % f + n < f


def expected_mip(source: np.ndarray, lo, factor, method: str) -> np.ndarray:
    """``source`` (x, y, z, c) starting at global ``lo``, pooled by ``factor`` like TensorStore.

    TensorStore's "stride" has no output for a first block cut by the domain's start
    (its domain starts at ceil(lo / f)); there the first voxel present is used, and
    TensorStore is checked on its own domain.
    """
    if any(ts_buggy(a, n, f) for a, n, f in zip(lo, source.shape, factor)):
        return _reference.downsample(source, factor, method, phase=lo)
    arr = ts.array(source)
    arr = arr[ts.d[:].translate_to[(*lo, 0)]]
    pooled = ts.downsample(arr, [*factor, 1], method)
    if method != "stride":
        return pooled.read().result()
    ours = _reference.downsample(source, factor, method, phase=lo)
    start = [-(-a // f) - a // f for a, f in zip(lo, factor)]  # 1 where TS skips a cut block
    np.testing.assert_array_equal(ours[start[0]:, start[1]:, start[2]:], pooled.read().result())
    return ours


def check_pyramid(path: str, mips: list[Volume], factor, method: str, stages) -> None:
    """Every new mip equals TensorStore's downsample of its stage's source scale."""
    vols = {v.scale.key: v for v in mips}
    base = Volume(path)
    for tasks in stages:
        src = base.mip(tasks[0].source)
        data = src[...]
        for k, key in enumerate(tasks[0].targets, start=1):
            f = [factor[d] ** k for d in range(3)]
            want = expected_mip(data, src.bounds[0], f, method)
            got = vols[key][...]
            if method == "mean" and got.dtype.kind == "f":
                np.testing.assert_allclose(got, want, rtol=1e-6)  # float sums: order may differ
            else:
                np.testing.assert_array_equal(got, want, err_msg=f"mip {key} ({method})")


@st.composite
def cases(draw):
    dtype = draw(st.sampled_from(DTYPES))
    seg = dtype in ("uint32", "uint64") and draw(st.booleans())
    method = draw(st.sampled_from(["auto", "min", "max", "stride", "mean", "mode"]))
    return {
        "dtype": dtype,
        "seg": seg,
        "method": method,
        "size": [draw(st.integers(5, 48)) for _ in range(3)],
        "offset": [draw(st.integers(-9, 9)) for _ in range(3)],
        "chunk": [draw(st.sampled_from([4, 6, 8, 16])) for _ in range(3)],
        "factor": draw(st.sampled_from([(2, 2, 1), (2, 2, 2), (3, 1, 2)])),
        "num_mips": draw(st.integers(1, 3)),
        "sharding": draw(st.sampled_from([None, "auto", "hashed"])),
        "memory": draw(st.sampled_from(["1GB", "60KB"])),  # small limits force slabs and stages
        "channels": draw(st.integers(1, 2)),
    }


HASHED = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "murmurhash3_x86_128",
          "preshift_bits": 0, "minishard_bits": 1, "shard_bits": 1,
          "minishard_index_encoding": "gzip", "data_encoding": "gzip"}


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases(), seed=st.integers(0, 2**32 - 1))
def test_mips_match_tensorstore_downsample(tmp_path_factory, case, seed):
    path = str(tmp_path_factory.mktemp("ds"))
    rng = np.random.default_rng(seed)
    if case["seg"]:
        case["channels"] = 1
    vol = Volume.create(path, size=case["size"], voxel_offset=case["offset"],
                        chunk_size=case["chunk"], data_type=case["dtype"],
                        num_channels=case["channels"], resolution=(4, 4, 40),
                        type="segmentation" if case["seg"] else "image")
    info = np.iinfo(case["dtype"]) if case["dtype"] != "float32" else None
    if info is None:
        data = rng.normal(0, 50, vol.shape).astype(np.float32)
    else:
        data = rng.integers(info.min, info.max, 5, dtype=case["dtype"], endpoint=True)[
            rng.integers(0, 5, vol.shape)]
    vol[...] = data
    try:
        with warnings.catch_warnings():  # (small memory limits stage the pyramid: checked below)
            warnings.simplefilter("ignore", StagedPyramidWarning)
            mips = shardvol.downsample(
                vol, case["factor"], case["num_mips"], method=case["method"], progress=False,
                sharding=HASHED if case["sharding"] == "hashed" else case["sharding"],
                memory_limit=case["memory"])
    except InvalidArgumentError as e:
        assert "below one voxel" in str(e)
        return
    method = case["method"]
    if method == "auto":
        method = "mode" if case["seg"] else "mean"
    workers = shardvol._parallel.default_parallel()
    limit = parse_bytes(case["memory"], "memory_limit")
    stages = plan(vol, mips, case["factor"], method, limit, workers, False)
    check_pyramid(path, mips, case["factor"], method, stages)


def make_image(path: str, sharding="auto") -> Volume:
    vol = Volume.create(path, size=(70, 66, 20), voxel_offset=(5, 0, -3), chunk_size=(16, 16, 8),
                        resolution=(8, 8, 40), data_type="uint8", sharding=sharding)
    x, y, z = np.meshgrid(np.arange(70), np.arange(66), np.arange(20), indexing="ij")
    vol[...] = ((x * 3 + y + z * 7) % 251).astype(np.uint8)[..., None]
    return vol


def test_tensorstore_and_cloudvolume_read_every_scale(tmp_path):
    vol = make_image(str(tmp_path))
    mips = shardvol.downsample(vol, (2, 2, 1), 3, progress=False)
    assert [s.key for s in Volume(str(tmp_path)).mips] == [
        "8_8_40", "16_16_40", "32_32_40", "64_64_40"]
    for i, m in enumerate(mips, start=1):
        assert m.sharding is not None
        np.testing.assert_array_equal(ts_open(str(tmp_path), i).read().result(), m[...])
        np.testing.assert_array_equal(cv_read(str(tmp_path), i), m[...])



@pytest.mark.filterwarnings("ignore::shardvol.errors.StagedPyramidWarning")
def test_process_pool_and_dask_cluster_write_identical_files(tmp_path):
    distributed = pytest.importorskip("dask.distributed")
    runs = {}
    for name in ("threads", "processes", "dask"):
        path = str(tmp_path / name)
        make_image(path)
        if name == "threads":
            shardvol.downsample(path, (2, 2, 1), 2, progress=False, memory_limit="40KB")
        elif name == "processes":
            ctx = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(2, mp_context=ctx) as ex:
                shardvol.downsample(path, (2, 2, 1), 2, progress=False, executor=ex,
                                    memory_limit="40KB")
        else:
            with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                          dashboard_address=":0") as cluster, \
                    distributed.Client(cluster) as client:
                shardvol.downsample(path, (2, 2, 1), 2, progress=False,
                                    executor=client.get_executor(), memory_limit="40KB")
        runs[name] = stored_files(path)
    assert runs["threads"].keys() == runs["processes"].keys() == runs["dask"].keys()
    for key in runs["threads"]:
        assert runs["threads"][key] == runs["processes"][key] == runs["dask"][key], key


def test_resume_rewrites_only_missing_units(tmp_path):
    vol = make_image(str(tmp_path), sharding=None)
    mips = shardvol.downsample(vol, (2, 2, 1), 2, progress=False, sharding=None)
    scale_dir = tmp_path / mips[0].scale.key
    chunks = sorted(p for p in scale_dir.iterdir() if not p.name.startswith(".shardvol-"))
    victim = chunks[0]  # (not the hidden lock file of the directory)
    victim.unlink()
    others = {p.name: p.stat().st_mtime_ns for p in chunks[1:]}
    shardvol.downsample(vol, (2, 2, 1), 2, progress=False, resume=True, sharding=None)
    assert victim.exists()
    changed = [p.name for p in scale_dir.iterdir() if p.name in others
               and p.stat().st_mtime_ns != others[p.name]]
    assert len(changed) < len(others)  # most units were skipped
    full = shardvol.downsample(str(tmp_path), (2, 2, 1), 2, progress=False, sharding=None)
    np.testing.assert_array_equal(Volume(str(tmp_path), mip=1)[...], full[0][...])


def test_missing_source_chunks_downsample_as_fill(tmp_path):
    vol = Volume.create(str(tmp_path), size=(32, 32, 8), chunk_size=(16, 16, 8), data_type="uint16")
    vol[0:16, 0:16, :] = 1000
    (mip1,) = shardvol.downsample(vol, (2, 2, 1), 1, progress=False)
    out = mip1[...]
    assert (out[:8, :8] == 1000).all() and (out[8:, :] == 0).all() and (out[:, 8:] == 0).all()


def test_bad_arguments(tmp_path):
    vol = make_image(str(tmp_path))
    for factor in [(0, 2, 1), (-2, 2, 1), (2, 2), (1, 1, 1), ("a", 2, 1)]:
        with pytest.raises(InvalidArgumentError, match="factor"):
            shardvol.downsample(vol, factor, 1, progress=False)
    with pytest.raises(InvalidArgumentError, match="below one voxel"):
        shardvol.downsample(vol, (2, 1, 1), 8, progress=False)  # x [5, 75): 36 19 10 5 3 2 1 -
    with pytest.raises(InvalidArgumentError, match="method"):
        shardvol.downsample(vol, (2, 2, 1), 1, method="median", progress=False)
    with pytest.raises(InvalidArgumentError, match="memory_limit"):
        shardvol.downsample(vol, (2, 2, 1), 1, memory_limit="lots", progress=False)
    shardvol.downsample(vol, (2, 2, 1), 1, progress=False)
    with pytest.raises(AlreadyExistsError, match="16_16_40"):
        shardvol.downsample(vol, (2, 2, 1), 1, chunk_size=(8, 8, 8), progress=False)
    shardvol.downsample(vol, (2, 2, 1), 1, chunk_size=(8, 8, 8), overwrite=True, progress=False)
    assert Volume(str(tmp_path), mip=1).chunk_size == (8, 8, 8)


def test_plan_owns_whole_units_and_respects_memory(tmp_path):
    vol = make_image(str(tmp_path), sharding=None)
    targets = shardvol.downsample(vol, (2, 2, 1), 2, progress=False, sharding=None)
    stages = plan(vol, targets, (2, 2, 1), "mean", parse_bytes("16KB", "memory_limit"), 2, False)
    assert len(stages) == 2 and all(t.slabs >= 1 for s in stages for t in s)
    for tasks in stages:
        for k, key in enumerate(tasks[0].targets):
            scale = Scale.of(Volume(str(tmp_path), mip=key))
            seen = np.zeros([h - lo for lo, h in zip(scale.lo, scale.hi)], int)
            for t in tasks:
                (a, b) = t.regions[k]
                if all(x < y for x, y in zip(a, b)):
                    for d in range(3):  # owned regions start on unit boundaries
                        assert (a[d] - scale.lo[d]) % scale.unit[d] == 0
                    seen[tuple(slice(x - lo, y - lo) for x, y, lo in zip(a, b, scale.lo))] += 1
            assert (seen == 1).all()  # every voxel owned by exactly one task


def test_no_slab_pools_a_mip_from_its_whole_task(tmp_path):
    # a coarse mip too small to cut into the slabs the memory limit asks for goes to a later
    # stage (it used to make one slab read the task's whole source: 128 MiB at a 100 MB limit)
    from shardvol.ops.downsample import _nbytes, _slab_boxes, _source_box, add_scales

    vol = Volume.create(str(tmp_path), size=(512, 512, 512), chunk_size=(64, 64, 64))
    targets = add_scales(vol, (2, 2, 2), 3, encoding=None, chunk_size=None, sharding=None,
                         overwrite=False)
    stages = plan(vol, targets, (2, 2, 2), "mean", parse_bytes("100MB", "memory_limit"), 2, False)
    scales = {v.scale.key: Scale.of(v) for v in (vol, *targets)}
    largest = 0
    for tasks in stages:
        for t in tasks:
            source = scales[t.source]
            for slab in _slab_boxes(t):
                box = _source_box(slab, (2, 2, 2), (source.lo, source.hi))
                largest = max(largest, _nbytes(box, 1) if box else 0)
    assert len(stages) > 1 and largest <= 32 << 20


def test_parse_bytes():
    assert parse_bytes("2GB", "x") == 2 * 10**9 and parse_bytes("512 MiB", "x") == 512 * 2**20
    assert parse_bytes(1234, "x") == 1234 and parse_bytes("10kb", "x") == 10_000


def test_hashed_outputs_on_unlockable_stores_need_this_process(tmp_path):
    """Hashed output shards are shared between tasks: refused where other processes could race."""
    from concurrent.futures import ThreadPoolExecutor

    from shardvol.kvstore.fsspec_store import FsspecStore

    store = FsspecStore(f"memory://ds-{tmp_path.name}")  # fsspec's store: no cross-process lock
    assert not store.local
    vol = Volume.create(store, size=(40, 40, 8), chunk_size=(8, 8, 8), data_type="uint8")
    vol[...] = 5
    with ThreadPoolExecutor(2) as ex, pytest.raises(InvalidArgumentError, match="spatial blocks"):
        shardvol.downsample(vol, (2, 2, 1), 1, sharding=HASHED, executor=ex, progress=False)
    assert len(Volume(store).mips) == 1  # refused before any scale was added
