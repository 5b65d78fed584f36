"""The chunk-store contract (shardvol.array.chunkstore), run against every chunk store.

Each store is driven with random encoded chunks (seeded) and held against a plain dict
model of what it should hold: precomputed unsharded, precomputed sharded (aligned and
hashed), Zarr v3 (unsharded and sharded) and the write buffer over a sharded store.
The formats' bytes on storage are checked against TensorStore and the other oracles in
their own tests; here every store must keep the same promises to the engine.
"""

from __future__ import annotations

import random
import re
import threading
import time

import numpy as np
import pytest

from shardvol.array.buffered import BufferedChunkStore
from shardvol.array.engine import ChunkedArray
from shardvol.array.grid import ChunkGrid
from shardvol.array.indexing import normalize_selection
from shardvol.errors import UnitChangedError, WriteConflictError
from shardvol.kvstore import MemoryStore
from shardvol.kvstore.memory import clear_memory
from shardvol.precomputed.codecs import get_codec
from shardvol.precomputed.sharded import ShardedChunkStore
from shardvol.precomputed.unsharded import UnshardedChunkStore
from shardvol.sharding import ShardingSpec
from shardvol.zarr3 import ZarrChunkStore, create_metadata

from .stores import Conditional, Recording

ALIGNED = ShardingSpec(preshift_bits=1, minishard_bits=1, shard_bits=3,
                       minishard_index_encoding="gzip", data_encoding="gzip")
HASHED = ShardingSpec(hash="murmurhash3_x86_128", minishard_bits=2, shard_bits=2)
GRID = ChunkGrid(origin=(3, 0, 5, 0), shape=(20, 17, 9, 1), chunk_shape=(4, 4, 4, 1))


def _precomputed(kind: str, kv):
    if kind == "precomputed unsharded":
        return UnshardedChunkStore(kv, GRID)
    spec = ALIGNED if kind == "precomputed sharded aligned" else HASHED
    return ShardedChunkStore(kv, GRID, spec)


def _zarr(kind: str, kv):
    sharded = kind == "zarr3 sharded"
    meta = create_metadata(
        shape=(20, 17, 9), dtype="uint8", chunk_shape=(8, 8, 4) if sharded else (4, 4, 4),
        inner_chunk_shape=(4, 4, 4) if sharded else None, codecs=["gzip"])
    return ZarrChunkStore.create(kv, meta)


KINDS = ["precomputed unsharded", "precomputed sharded aligned", "precomputed sharded hashed",
         "zarr3 unsharded", "zarr3 sharded", "buffered"]
# the same over a store with conditional writes (S3's): units updated by compare-and-swap
CONDITIONAL = " (conditional writes)"
ALL_KINDS = KINDS + [k + CONDITIONAL for k in KINDS]


@pytest.fixture(params=ALL_KINDS)
def case(request):
    """(chunk store, recording key-value store under it, every chunk coordinate)."""
    url = f"memory://contract-{ALL_KINDS.index(request.param)}"
    clear_memory(url)
    kind = request.param.removesuffix(CONDITIONAL)
    memory = MemoryStore(url)
    kv = Recording(Conditional(memory) if request.param.endswith(CONDITIONAL) else memory,
                   local=True)
    assert kv.conditional_writes == request.param.endswith(CONDITIONAL)
    if kind.startswith("zarr3"):
        store = _zarr(kind, kv)
        coords = [tuple(c) for c in np.ndindex(*store.grid_shape)]
    else:
        store = _precomputed("precomputed sharded hashed" if kind == "buffered" else kind, kv)
        coords = [(*c, 0) for c in np.ndindex(*GRID.grid_shape[:3])]
    if kind == "buffered":
        store = BufferedChunkStore(store)
    else:
        assert store.conditional == kv.conditional_writes
    yield store, kv, coords
    clear_memory(url)


def _chunks(rng: random.Random, coords) -> dict:
    return {c: rng.randbytes(rng.randrange(1, 200)) for c in coords}


def _contents(store, coords) -> dict:
    return {c: bytes(v) for c, v in store.read_chunks(coords).items()}


def _flushed(store):
    if isinstance(store, BufferedChunkStore):
        store.flush()
    return store


def test_an_empty_store_holds_nothing(case):
    store, _, coords = case
    assert store.read_chunks(coords) == {}
    assert sorted(c for c, v, _ in store.iter_chunks(coords) if v is None) == sorted(coords)
    assert not any(store.exists(coords).values())


def test_units_partition_the_grid(case):
    store, _, coords = case
    groups = store.units(coords)
    assert sorted(c for members in groups.values() for c in members) == sorted(coords)
    assert set(groups) == set(store.all_units())
    for unit, members in groups.items():
        listed = store.unit_chunks(unit)
        assert listed is None or sorted(listed) == sorted(members)
        assert sorted(store.scan_unit_chunks(unit)) == sorted(members)
        assert all(isinstance(store.describe(c), str) and store.describe(c) for c in members)


@pytest.mark.parametrize("seed", range(3))
def test_updates_match_a_model(case, seed):
    """Random puts, deletes, merges and replacements, unit by unit: reads, iteration, stored
    values and existence always agree with a dict of what was written."""
    store, _, coords = case
    rng = random.Random(seed)
    model: dict = {}
    units = list(store.units(coords).items())
    for _ in range(12):
        unit, members = rng.choice(units)
        put = _chunks(rng, rng.sample(members, rng.randrange(0, len(members) + 1)))
        delete = [c for c in rng.sample(members, rng.randrange(0, len(members) + 1))
                  if c not in put]
        replace = rng.random() < 0.3
        current = store.read_unit(unit) if rng.random() < 0.5 else None
        with store.lock(unit):
            store.update_unit(unit, put, delete, replace=replace, current=current)
        if replace:
            for c in members:
                model.pop(c, None)
        for c in delete:
            model.pop(c, None)
        model.update(put)
        assert _contents(store, coords) == model
    assert {c: bytes(v) for c, v, _ in store.iter_chunks(coords) if v is not None} == model
    stored = {c: bytes(store.decode_stored(v, name))
              for c, v, name in store.iter_stored(coords) if v is not None}
    assert stored == model
    assert store.exists(coords) == {c: c in model for c in coords}
    store.delete_chunks(list(model)[: len(model) // 2])
    for c in list(model)[: len(model) // 2]:
        del model[c]
    assert _contents(_flushed(store), coords) == model


def test_read_unit_sees_what_the_unit_holds(case):
    store, _, coords = case
    rng = random.Random(5)
    unit, members = next(iter(store.units(coords).items()))
    put = _chunks(rng, members[::2])
    with store.lock(unit):
        store.update_unit(unit, put)
    got = store.read_unit(unit).chunks(members)
    assert {c: bytes(v) for c, v in got.items()} == put


def test_an_emptied_unit_leaves_nothing_stored(case):
    store, kv, coords = case
    rng = random.Random(6)
    unit, members = next(iter(store.units(coords).items()))
    keys_before = set(kv.list())
    with store.lock(unit):
        store.update_unit(unit, _chunks(rng, members))
    with store.lock(unit):
        store.update_unit(unit, {}, members)
    _flushed(store)
    assert set(kv.list()) == keys_before
    assert store.read_chunks(members) == {}


def test_lock_excludes_other_threads(case):
    store, _, coords = case
    unit = next(iter(store.units(coords)))
    inside, overlaps = [], []

    def hold():
        with store.lock(unit):
            inside.append(1)
            if len(inside) > 1:
                overlaps.append(1)
            time.sleep(0.02)
            inside.pop()

    threads = [threading.Thread(target=hold) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not overlaps


def _engine(store, coords):
    if isinstance(store, ZarrChunkStore):
        grid = ChunkGrid((0, 0, 0), store.shape, store.chunk_shape)
        return ChunkedArray(grid=grid, dtype=np.dtype("uint8"), store=store, codec=store.codec,
                            order="C", padded_chunks=True, skip_fill_chunks=True)
    inner = store.inner if isinstance(store, BufferedChunkStore) else store
    codec = get_codec("raw", dtype="uint8", num_channels=1)
    return ChunkedArray(grid=inner.grid, dtype=np.dtype("uint8"), store=store, codec=codec)


def test_a_partial_write_reads_each_unit_once(case):
    """Writing part of every chunk of a unit (a read-modify-write of each chunk) reads the
    unit's stored file once: the merge and the rewrite share one read."""
    store, kv, coords = case
    arr = _engine(store, coords)
    g = arr.grid
    rng = np.random.default_rng(7)
    full = rng.integers(0, 255, g.shape, dtype=np.uint8)
    everything = normalize_selection((...,), g.origin, g.shape)
    arr.write(everything, full)
    _flushed(store)
    kv.calls.clear()
    # every chunk partly: one voxel row less than the whole volume along x
    box = tuple(slice(o + (1 if d == 0 else 0), o + n) for d, (o, n) in
                enumerate(zip(g.origin, g.shape)))
    part = rng.integers(0, 255, tuple(s.stop - s.start for s in box), dtype=np.uint8)
    arr.write(normalize_selection(box, g.origin, g.shape), part)
    _flushed(store)
    reads: dict = {}
    for key, byte_range in kv.requests():
        # the buffer merges at flush, under the unit's lock: there the unit is read once
        # more, whole (its chunks were read for the merge when written, and other writers
        # may have changed the unit in between)
        if not isinstance(store, BufferedChunkStore) or byte_range is None:
            reads[key] = reads.get(key, 0) + 1
    data_reads = {k: n for k, n in reads.items() if not k.endswith((".json", ".gz"))}
    assert all(n == 1 for n in data_reads.values()), data_reads
    assert data_reads or isinstance(store, BufferedChunkStore)  # (it replaces whole units)
    full[tuple(slice(b.start - o, b.stop - o) for b, o in zip(box, g.origin))] = part
    assert np.array_equal(arr.read(everything), full)


def test_a_merge_from_a_stale_read_is_refused_then_redone(case):
    """Conditional stores: an update given what read_unit read is written only if the unit
    is unchanged since (else UnitChangedError, nothing written); redo_on_conflict reads and
    merges again, and gives up with WriteConflictError naming the unit after the store's
    conflict timeout."""
    store, kv, coords = case
    if not store.conditional:
        pytest.skip("no conditional writes")
    rng = random.Random(8)
    unit, members = next(iter(store.units(coords).items()))
    first, last = members[0], members[-1]
    store.update_unit(unit, {first: b"mine"})
    stale = store.read_unit(unit)
    theirs = {last: rng.randbytes(50)}
    store.update_unit(unit, theirs)  # another writer, since the read
    with pytest.raises(UnitChangedError):
        store.update_unit(unit, {first: b"late"}, current=stale)
    assert _contents(store, members) == {first: b"mine", **theirs}
    attempts = []

    def merge():
        current = store.read_unit(unit)
        if not attempts:
            store.update_unit(unit, {last: b"raced"})  # again another writer
        attempts.append(current)
        kept = current.chunks([first])[first]
        store.update_unit(unit, {first: bytes(kept) + b"+1"}, current=current)

    store.redo_on_conflict(unit, merge)
    assert len(attempts) == 2
    # (a unit of one chunk: the merge is redone on what the other writer wrote)
    want = {first: b"raced+1"} if first == last else {first: b"mine+1", last: b"raced"}
    assert _contents(store, members) == want

    def always_raced():
        current = store.read_unit(unit)
        store.update_unit(unit, {last: rng.randbytes(50)})
        store.update_unit(unit, {first: b"never"}, current=current)

    kv.conflict_timeout = 0.2
    with pytest.raises(WriteConflictError, match=re.escape(store.describe_unit(unit))):
        store.redo_on_conflict(unit, always_raced)
    assert bytes(store.read_chunks([first])[first]) != b"never"
