"""Downsampled scales: mean/mode (min, max, stride) pyramids written in one pass.

``downsample(vol, factor, num_mips)`` adds ``num_mips`` scales to the info file
and writes them.  Mip ``k`` has resolution ``resolution * factor**k`` and covers
``[floor(offset / f**k), ceil((offset + size) / f**k))``: pooling blocks are
aligned to multiples of ``f**k`` in global voxel coordinates, as in
TensorStore's ``downsample`` and Neuroglancer.

Plan.  Work is split into *stages*; a stage reads one existing scale (the
source) and produces the next ``m`` scales.  A stage's tasks are the storage
units (shards of aligned sharding, or chunks) of its coarsest new scale; each
finer scale's units are owned by the task whose footprint contains their
first voxel.  So every task writes whole units of every scale it produces and
no two tasks write the same file.  A task reads its source region once (in
slabs if it is large), pools every scale of the stage from it in one pass
(mip k is pooled directly from the source by ``f**k``), buffers the encoded
chunks, and stores each unit once.  When the buffered output of a deeper
stage would not fit ``memory_limit``, the coarser scales are produced by a
following stage whose source is the coarsest scale already written.

Tasks are small picklable descriptions (URL, scale keys, regions), so any
``concurrent.futures.Executor`` runs them: the default thread pool, a process
pool, or a Dask cluster's ``client.get_executor()``.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import warnings
from collections.abc import Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, replace
from itertools import product
from typing import Any

import numpy as np

from shardvol._ext import hugeblock
from shardvol._parallel import default_parallel
from shardvol.array.buffered import BufferedChunkStore
from shardvol.array.indexing import normalize_selection
from shardvol.errors import InvalidArgumentError, StagedPyramidWarning
from shardvol.kvstore.job_record import (
    begin_job,
    clear_job,
    preparing,
    set_tasks,
    within_job,
)
from shardvol.ops.jobs import run_job
from shardvol.ops.pooling import METHODS, downsample_pyramid
from shardvol.ops.tasks import check_reachable
from shardvol.precomputed.info import resolution_key
from shardvol.precomputed.provenance import record_step
from shardvol.precomputed.volume import Volume
from shardvol.sharding import ShardingSpec, shard_shape
from shardvol.sizes import parse_bytes

Box = tuple[tuple[int, int, int], tuple[int, int, int]]  # (lo, hi), hi exclusive

_SOURCE_OVERHEAD = 2.5  # source array + decode temporaries + pyramid outputs, per source byte


@dataclass(frozen=True)
class Scale:
    """Geometry of one scale: voxel offset, end, chunk size, write-unit size (voxels)."""

    key: str
    lo: tuple[int, int, int]
    hi: tuple[int, int, int]
    unit: tuple[int, int, int]
    chunk: tuple[int, int, int]

    @classmethod
    def of(cls, vol: Volume) -> Scale:
        lo, hi = vol.bounds
        return cls(vol.scale.key, lo, hi, vol.shard_shape or vol.chunk_size, vol.chunk_size)


@dataclass(frozen=True)
class Task:
    """One unit of work: pool ``source`` into the owned region of each target scale."""

    url: str
    source: str
    targets: tuple[str, ...]
    regions: tuple[Box, ...]  # owned region of each target, in that target's voxels
    factor: tuple[int, int, int]
    method: str
    slabs: int
    fill_value: Any
    resume: bool
    z_grids: tuple[tuple[int, int], ...]  # (voxel offset, chunk size) along z of each target
    compress_level: int  # gzip level of the targets' gzip-encoded shard data

    @property
    def name(self) -> str:
        """What the task writes (the same in every run of the same job)."""
        owned = "; ".join(f"{t} [{lo[0]}:{hi[0]}, {lo[1]}:{hi[1]}, {lo[2]}:{hi[2]}]"
                          for t, (lo, hi) in zip(self.targets, self.regions))
        return f"{self.url}: {self.method} of scale {self.source} into {owned}"


def _owned(footprint: tuple[int, int], lo: int, hi: int, unit: int) -> tuple[int, int]:
    """Units (of ``unit`` voxels from ``lo``) whose first voxel lies in ``footprint``."""
    m0 = max(0, -(-(footprint[0] - lo) // unit))
    m1 = -(-(footprint[1] - lo) // unit)
    a, b = lo + m0 * unit, min(lo + m1 * unit, hi)
    return (a, b) if a < b else (a, a)


def plan_stage(
    url: str,
    source: Scale,
    targets: Sequence[Scale],
    factor: Sequence[int],
    method: str,
    fill_value: Any,
    resume: bool,
    slabs: int,
    compress_level: int,
) -> list[Task]:
    """Tasks of one stage: one per unit of the coarsest target (see the module doc)."""
    m = len(targets)
    coarse = targets[-1]
    axes = []
    for d in range(3):
        starts = range(coarse.lo[d], coarse.hi[d], coarse.unit[d])
        axes.append([(a, min(a + coarse.unit[d], coarse.hi[d])) for a in starts])
    tasks = []
    for box in product(*axes):
        regions = []
        for k, t in enumerate(targets, start=1):
            scale = [factor[d] ** (m - k) for d in range(3)]
            lo, hi = [], []
            for d in range(3):
                a, b = _owned(
                    (box[d][0] * scale[d], box[d][1] * scale[d]), t.lo[d], t.hi[d], t.unit[d]
                )
                lo.append(a)
                hi.append(b)
            regions.append((tuple(lo), tuple(hi)))
        if any(all(a < b for a, b in zip(*r)) for r in regions):
            tasks.append(
                Task(
                    url,
                    source.key,
                    tuple(t.key for t in targets),
                    tuple(regions),  # type: ignore[arg-type]  # boxes of 3 axes
                    tuple(factor),  # type: ignore[arg-type]  # 3 factors
                    method,
                    slabs,
                    fill_value,
                    resume,
                    tuple((t.lo[2], t.chunk[2]) for t in targets),
                    compress_level,
                )
            )
    return tasks


def _source_box(regions: Sequence[Box], factor: Sequence[int], source: Box) -> Box | None:
    """The source voxels that the owned regions of mips 1..m pool from (clipped to the source)."""
    lo = [math.inf] * 3
    hi = [-math.inf] * 3
    for k, (a, b) in enumerate(regions, start=1):
        if any(x >= y for x, y in zip(a, b)):
            continue
        for d in range(3):
            f = factor[d] ** k
            lo[d] = min(lo[d], max(a[d] * f, source[0][d]))
            hi[d] = max(hi[d], min(b[d] * f, source[1][d]))
    if lo[0] is math.inf:
        return None
    box = tuple(int(v) for v in lo), tuple(int(v) for v in hi)
    return box  # type: ignore[return-value]  # 3 axes


def _nbytes(box: Box, itemsize: int) -> int:
    return int(np.prod([max(0, b - a) for a, b in zip(*box)])) * itemsize


def _z_bounds(a: int, b: int, origin: int, chunk: int) -> list[int]:
    """``a``, the chunk boundaries strictly between ``a`` and ``b``, and ``b``."""
    first = origin + -(-(a - origin) // chunk) * chunk
    return [a, *range(first if first > a else first + chunk, b, chunk), b]


def _z_cuts(a: int, b: int, origin: int, chunk: int, slabs: int) -> list[int]:
    """``slabs + 1`` cut points from ``a`` to ``b`` on chunk boundaries, evenly spread."""
    bounds = _z_bounds(a, b, origin, chunk)
    return [bounds[round(i * (len(bounds) - 1) / slabs)] for i in range(slabs + 1)]


def _z_layers(region: Box, z_grid: tuple[int, int]) -> float:
    """Pieces a region can be cut into along z on its chunk boundaries (unbounded if empty:
    an empty region constrains nothing)."""
    (lo, hi), (origin, chunk) = region, z_grid
    if any(x >= y for x, y in zip(lo, hi)):
        return math.inf
    return len(_z_bounds(lo[2], hi[2], origin, chunk)) - 1


def _slab_boxes(task: Task) -> list[tuple[Box, ...]]:
    """Split every owned region into ``task.slabs`` pieces along z, cut on its chunk boundaries,
    so no chunk is written by two slabs."""
    if task.slabs <= 1:
        return [task.regions]
    cuts = [
        _z_cuts(a[2], b[2], o, c, task.slabs) if a[2] < b[2] else [a[2]] * (task.slabs + 1)
        for (a, b), (o, c) in zip(task.regions, task.z_grids)
    ]
    return [
        tuple(((a[0], a[1], z[i]), (b[0], b[1], z[i + 1])) for (a, b), z in zip(task.regions, cuts))
        for i in range(task.slabs)
    ]


def run_task(task: Task) -> int:
    """Execute one task (in any process); returns the number of output voxels written."""
    src = Volume(
        task.url, mip=task.source, fill_value=task.fill_value, compress_level=task.compress_level
    )
    outs = [src.mip(key) for key in task.targets]
    if task.resume and all(
        all(v.exists(_slices(r)).values())
        for v, r in zip(outs, task.regions)
        if all(a < b for a, b in zip(*r))
    ):
        return 0
    source = src.chunked_array
    slabs = [(pieces, box) for pieces in _slab_boxes(task)
             if (box := _source_box(pieces, task.factor, src.bounds)) is not None]
    if not slabs:
        return 0
    # the slabs are read into one block (a fresh one each, when larger than hugeblock's
    # cache, was faulted in again: at 4 and 8 GiB, slabs of 512 MiB)
    sels = [normalize_selection(_slices(box), source.grid.origin, source.grid.shape)
            for _, box in slabs]
    shapes = [tuple(a.count for a in sel) for sel in sels]
    sizes = [math.prod(shape) * source.dtype.itemsize for shape in shapes]
    block = hugeblock.buffer(max(sizes))
    buffers = [BufferedChunkStore(v.chunk_store) for v in outs]
    arrays = [replace(v.chunked_array, store=b) for v, b in zip(outs, buffers)]
    written = 0
    for (pieces, box), sel, shape, size in zip(slabs, sels, shapes, sizes):
        data = block[:size].view(source.dtype).reshape(shape, order="F")
        source.read(sel, order="F", out=data)
        mips = downsample_pyramid(data, task.factor, len(outs), task.method, phase=box[0])
        for k, (arr, piece, pooled) in enumerate(zip(arrays, pieces, mips), start=1):
            if any(a >= b for a, b in zip(*piece)):
                continue
            start = [box[0][d] // task.factor[d] ** k for d in range(3)]
            local = tuple(slice(a - s, b - s) for a, b, s in zip(piece[0], piece[1], start))
            sel = normalize_selection(_slices(piece), arr.grid.origin, arr.grid.shape)
            arr.write(sel, pooled[local])
            written += _nbytes(piece, 1)
    for buffer in buffers:
        buffer.flush()
    return written


def _unit_layers(task: Task, finest: Scale) -> int:
    """Slabs that let the finest target's units complete (and be stored) one layer at a time,
    while the next layer is read: its unit layers along z in the task, at most 4."""
    (_, _, z0), (_, _, z1) = task.regions[0]
    return max(1, min(4, -(-(z1 - z0) // finest.unit[2])))


def _slices(box: Box) -> tuple[slice, slice, slice]:
    return tuple(slice(a, b) for a, b in zip(*box))  # type: ignore[return-value]  # 3 axes


def _validate(
    vol: Volume, factor: Sequence[int], num_mips: int, method: str
) -> tuple[tuple[int, int, int], str]:
    try:
        f = tuple(int(v) for v in factor)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"factor must be 3 positive integers, got {factor!r}") from None
    if len(f) != 3 or any(v < 1 for v in f) or f == (1, 1, 1):
        raise InvalidArgumentError(
            f"factor must be 3 positive integers, at least one > 1, got {factor!r}"
        )
    if isinstance(num_mips, numbers.Integral) and not isinstance(num_mips, bool):
        num_mips = int(num_mips)  # numpy integers too
    if not isinstance(num_mips, int) or num_mips < 1:
        raise InvalidArgumentError(f"num_mips must be a positive integer, got {num_mips!r}")
    if method == "auto":
        method = "mode" if vol.layer_type == "segmentation" else "mean"
    if method not in METHODS:
        raise InvalidArgumentError(f"method must be 'auto' or one of {METHODS}, got {method!r}")
    lo, hi = vol.bounds
    for k in range(1, num_mips + 1):
        for d in range(3):
            prev = -(-hi[d] // f[d] ** (k - 1)) - lo[d] // f[d] ** (k - 1)
            if f[d] > 1 and prev <= 1:
                raise InvalidArgumentError(
                    f"mip {k} would shrink axis {'xyz'[d]} below one voxel (it is {prev} voxel "
                    f"at mip {k - 1}); use fewer mips or factor 1 on that axis"
                )
    return f, method


def mip_geometry(vol: Volume, factor: Sequence[int], k: int) -> tuple[list[int], list[int]]:
    """Voxel offset and size of mip ``k`` of ``vol`` (blocks aligned to multiples of f**k)."""
    lo, hi = vol.bounds
    f = [factor[d] ** k for d in range(3)]
    offset = [lo[d] // f[d] for d in range(3)]
    return offset, [-(-hi[d] // f[d]) - offset[d] for d in range(3)]


def add_scales(
    vol: Volume,
    factor: Sequence[int],
    num_mips: int,
    *,
    encoding: str | None,
    chunk_size: Sequence[int] | None,
    sharding: str | dict | None,
    overwrite: bool,
) -> list[Volume]:
    """Add mips 1..num_mips of ``vol`` to its info file (idempotent for equal parameters)."""
    out = []
    for k in range(1, num_mips + 1):
        offset, size = mip_geometry(vol, factor, k)
        out.append(
            vol.add_scale(
                resolution=[r * factor[d] ** k for d, r in enumerate(vol.resolution)],
                size=size,
                voxel_offset=offset,
                chunk_size=chunk_size,
                encoding=encoding,
                sharding=sharding,
                overwrite=overwrite,
            )
        )
    return out


def _check_shared_shards(
    vol: Volume,
    factor: Sequence[int],
    num_mips: int,
    chunk_size: Sequence[int] | None,
    sharding: str | dict | None,
    executor: Executor | None,
) -> None:
    """Refuse output sharding whose shards are not spatial blocks where writers could race.

    Tasks then share shards and merge into them under the shards' locks, which hold for
    threads of one process and, on local files, across processes; on S3 and GCS the merges are
    compare-and-swaps, which hold across processes too.  An executor of other processes or
    machines writing to another store could lose chunks.
    """
    if not isinstance(sharding, dict) or executor is None:
        return
    store = vol.store
    if store.local or store.locks_across_processes or store.conditional_writes:
        return
    spec = ShardingSpec.from_dict(sharding)
    chunk = list(chunk_size or vol.chunk_size)
    for k in range(1, num_mips + 1):
        _, size = mip_geometry(vol, factor, k)
        grid = [-(-n // c) for n, c in zip(size, chunk)]
        if shard_shape(spec, grid, chunk) is None:
            raise InvalidArgumentError(
                f"mip {k}: with this sharding spec shards are not spatial blocks, so tasks "
                f"would share shard files, which {vol.url} cannot lock across processes; use "
                "sharding='auto', or executor=None (threads of this process)"
            )


def plan(
    vol: Volume,
    targets: list[Volume],
    factor: Sequence[int],
    method: str,
    memory_limit: int,
    workers: int,
    resume: bool,
) -> list[list[Task]]:
    """Stages of tasks; each stage's per-task memory stays within memory_limit / workers."""
    budget = memory_limit / max(1, workers)
    itemsize = vol.dtype.itemsize * vol.num_channels
    stages = []
    source, remaining = vol, list(targets)
    while remaining:
        src = Scale.of(source)
        chosen = None
        for m in range(len(remaining), 0, -1):
            scales = [Scale.of(t) for t in remaining[:m]]
            tasks = plan_stage(
                source.url,
                src,
                scales,
                factor,
                method,
                source.fill_value,
                resume,
                1,
                source.compress_level,
            )
            out_bytes = max(sum(_nbytes(r, itemsize) for r in t.regions) for t in tasks)
            need = max(
                _nbytes(
                    _source_box(t.regions, factor, (src.lo, src.hi)) or ((0,) * 3,) * 2, itemsize
                )
                for t in tasks
            )
            slabs = max(1, math.ceil(need * _SOURCE_OVERHEAD / (budget / 2)))
            # every mip's regions must be cut into that many slabs (on their chunk
            # boundaries), else a slab would pool that mip from its whole z range at once:
            # such mips go to a later stage, which pools them from a smaller source
            if m == 1 or (
                out_bytes <= budget / 2
                and all(
                    _z_layers(r, z) >= slabs for t in tasks for r, z in zip(t.regions, t.z_grids)
                )
            ):
                chosen = (m, scales, tasks, slabs)
                break
        m, scales, tasks, slabs = chosen  # type: ignore[misc]  # not None: m == 1 is always chosen
        stages.append([replace(t, slabs=max(slabs, _unit_layers(t, scales[0]))) for t in tasks])
        source, remaining = remaining[m - 1], remaining[m:]
    return stages


def downsample(
    vol: Volume | str,
    factor: Sequence[int] = (2, 2, 1),
    num_mips: int = 3,
    method: str = "auto",
    encoding: str | None = None,
    chunk_size: Sequence[int] | None = None,
    sharding: str | dict | None = "auto",
    executor: Executor | None = None,
    memory_limit: int | str = "2GB",
    progress: bool = True,
    resume: bool = False,
    overwrite: bool = False,
    exact: bool = False,
) -> list[Volume]:
    """Add and write ``num_mips`` downsampled scales of ``vol`` (at its current mip).

    ``method``: "auto" (mean for images, mode for segmentation), "mean", "mode",
    "min", "max" or "stride".  ``encoding``, ``chunk_size``, ``sharding``: of
    the new scales (default: like the source; sharding "auto" gives aligned
    shards).  ``executor``: None uses a thread pool here; any
    ``concurrent.futures.Executor`` works (process pool, Dask).  ``memory_limit``
    bounds the memory of all tasks of the default pool together, or of each
    task on a user-supplied executor.  Returns the new scales as Volumes, finest first.

    The job is recorded in the volume while it runs (see :mod:`shardvol.ops.jobs`): run
    again after an interruption, with the same arguments, it writes only what is not
    done; with others, it is refused unless ``overwrite``.  ``resume=True`` also skips
    tasks whose output chunks all exist (for jobs interrupted before there were records).

    When the pyramid does not fit ``memory_limit`` in one pass, its coarser mips are pooled
    from a finer new mip rather than from the source: for "mean" and "mode" their values
    can differ from pooling the source directly, which a StagedPyramidWarning says (naming
    those mips); ``exact=True`` refuses such a plan instead.
    """
    if not isinstance(vol, Volume):
        vol = Volume(vol)
    f, method = _validate(vol, factor, num_mips, method)
    limit = parse_bytes(memory_limit, "memory_limit")
    check_reachable([vol.store], executor)
    _check_shared_shards(vol, f, num_mips, chunk_size, sharding, executor)
    params = {"source": vol.scale.key, "factor": list(f), "num_mips": num_mips,
              "method": method, "encoding": encoding,
              "chunk_size": None if chunk_size is None else [int(c) for c in chunk_size],
              "sharding": sharding}
    workers = default_parallel() if executor is None else 1
    with within_job():
        with preparing(vol.store) as prep:
            record = begin_job(
                vol.store, "downsample", params, targets=tuple(_target_keys(vol, f, num_mips)),
                plan={"memory_limit": limit, "workers": workers}, overwrite=overwrite)
            prep.new = record is None
            if record is not None:  # the same job, unfinished: planned as it was
                limit, workers = record.plan["memory_limit"], record.plan["workers"]
            targets = add_scales(vol, f, num_mips, encoding=encoding, chunk_size=chunk_size,
                                 sharding=sharding, overwrite=overwrite and record is None)
            stages = plan(vol, targets, f, method, limit, workers, resume)
            _check_stages(stages, method, exact, vol.url)
        set_tasks(vol.store, sum(len(tasks) for tasks in stages))
        for i, tasks in enumerate(stages, start=1):
            at_once = _tasks_at_once(vol, tasks, limit, workers) if executor is None else 0
            with ThreadPoolExecutor(at_once) if at_once else contextlib.nullcontext() as pool:
                run_job(vol.store, run_task, tasks, pool or executor,
                        resumed=record is not None, progress=progress,
                        desc=f"downsample stage {i}/{len(stages)}", finish=False)
        record_step(vol.store, {"task": "downsample", **params,
                                "memory_limit": limit, "stages": len(stages)})
        clear_job(vol.store)
    return [vol.mip(t.scale.key) for t in targets]


def _tasks_at_once(vol: Volume, tasks: list[Task], limit: int, workers: int) -> int:
    """How many of a stage's tasks the default pool runs at once: fewer than its
    ``workers`` when that many would not fit ``limit`` together (a task owns whole shards
    of its coarsest mip, which can hold more than the budget of one task), 0 for all."""
    src = vol.mip(tasks[0].source)
    itemsize = src.dtype.itemsize * src.num_channels
    need = max(_task_bytes(t, itemsize, src.bounds) for t in tasks)
    fits = max(1, int(limit // max(need, 1)))
    return fits if fits < workers else 0


def _task_bytes(task: Task, itemsize: int, source: Box) -> float:
    """The memory a task holds at its peak: its slab of the source, with what decoding and
    pooling it add, and every unit it writes (buffered until they are whole)."""
    box = _source_box(task.regions, task.factor, source)
    slab = 0.0 if box is None else _nbytes(box, itemsize) * _SOURCE_OVERHEAD / task.slabs
    return slab + sum(_nbytes(r, itemsize) for r in task.regions)


def _target_keys(vol: Volume, factor: Sequence[int], num_mips: int) -> list[str]:
    """The keys of the scales :func:`add_scales` adds (as their resolutions name them)."""
    return [resolution_key(tuple(r * factor[d] ** k for d, r in enumerate(vol.resolution)))
            for k in range(1, num_mips + 1)]


def _check_stages(stages: list[list[Task]], method: str, exact: bool, url: str) -> None:
    """Warn (or with ``exact``, refuse) when mips are pooled from a new mip, not the source,
    with a method for which that changes values."""
    if len(stages) == 1 or method not in ("mean", "mode"):
        return
    later = [(tasks[0].source, tasks[0].targets) for tasks in stages[1:]]
    what = "; ".join(f"{', '.join(t)} from {s}" for s, t in later)
    message = (f"{url}: the pyramid does not fit memory_limit in one pass, so {what} are "
               f"pooled from a new mip rather than from the source: with {method} pooling "
               "their values can differ from pooling the source directly (raise "
               "memory_limit, or use fewer mips, to pool every mip from the source)")
    if exact:
        raise InvalidArgumentError(message + "; exact=True refuses this plan")
    warnings.warn(StagedPyramidWarning(message), stacklevel=3)
