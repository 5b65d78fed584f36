"""The compresso and crackle chunk encodings against CloudVolume, which writes and reads them
with the compresso and crackle-codec packages: in both directions, unsharded (plain and
CloudVolume's ``.gz`` chunk files) and sharded (raw and gzip data), several label types,
partial chunks at the volume's edge; corrupt chunks; conversion to compressed_segmentation
read back by TensorStore; shardvol's compresso decoder (csrc/compresso.c) under mutation."""

from __future__ import annotations

import gzip
import sys
import warnings
from pathlib import Path

import compresso
import crackle
import numpy as np
import pytest

import shardvol
from shardvol.cli import main
from shardvol.errors import ChunkDecodeError, ChunkEncodeError, InfoError, UnsupportedCodecError
from shardvol.precomputed.codecs import get_codec
from shardvol.sharding import ShardingSpec, shard_shape
from tests.c_checkers import run_checker
from tests.oracles import cv_read, ts_read

ENCODINGS = ("compresso", "crackle")
DTYPES = ("uint8", "uint16", "uint32", "uint64")
SIZE = (70, 45, 37)  # partial chunks at the upper edge of every axis
CHUNK = (32, 32, 16)
OFFSET = (3, 5, 7)
PACKAGE = {"compresso": compresso.compress, "crackle": crackle.compress}  # CloudVolume's


def labels(shape: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
    """Boxes of 3-12 voxels per side with random labels of the dtype's whole range, a ball
    of background (0) and 1% scattered single-voxel labels: (x, y, z) Fortran order."""
    rng = np.random.default_rng(seed)
    cells = [np.searchsorted(np.cumsum(rng.integers(3, 13, n)), np.arange(n), side="right")
             for n in shape]
    top = np.iinfo(dtype).max
    table = rng.integers(1, top, (cells[0][-1] + 1, cells[1][-1] + 1, cells[2][-1] + 1),
                         dtype=np.uint64, endpoint=True)
    out = table[np.ix_(*cells)].astype(dtype)
    g = np.indices(shape, dtype=np.float32)
    centre = [n / 3 for n in shape]
    out[sum((g[d] - centre[d]) ** 2 for d in range(3)) < (min(shape) / 4) ** 2] = 0
    noise = rng.random(shape) < 0.01
    out[noise] = rng.integers(0, top, int(noise.sum()), dtype=np.uint64, endpoint=True)
    return np.asfortranarray(out)


def cloudvolume():
    warnings.filterwarnings("ignore", module="cloudvolume")
    from cloudvolume import CloudVolume

    return CloudVolume


def spec(data_encoding: str) -> dict:
    """Identity-hashed shards of 2 x 2 x 2 chunks (4 shard files for SIZE / CHUNK)."""
    return {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 2,
            "minishard_bits": 1, "shard_bits": 3, "minishard_index_encoding": "gzip",
            "data_encoding": data_encoding}


def cv_write(path: Path, data: np.ndarray, encoding: str, *, sharding: dict | None = None,
             compress: bool | None = None) -> str:
    """CloudVolume writes ``data`` (its default ``compress=None`` gzips compresso and crackle
    chunks into ``.gz`` files); sharded volumes one shard at a time, as CloudVolume can.
    Returns the scale key."""
    cv_cls = cloudvolume()
    info = cv_cls.create_new_info(1, "segmentation", data.dtype.name, encoding, [4, 4, 40],
                                  list(OFFSET), list(data.shape), chunk_size=list(CHUNK))
    if sharding:
        info["scales"][0]["sharding"] = sharding
    cv = cv_cls(f"file://{path}", info=info, progress=False, compress=compress, cache=False)
    cv.commit_info()
    step = data.shape
    if sharding:
        grid = [-(-s // c) for s, c in zip(data.shape, CHUNK)]
        step = shard_shape(ShardingSpec.from_dict(sharding), grid, CHUNK)
    for x in range(0, data.shape[0], step[0]):
        for y in range(0, data.shape[1], step[1]):
            for z in range(0, data.shape[2], step[2]):
                start = (x, y, z)
                box = tuple(slice(s, min(s + n, e)) for s, n, e in zip(start, step, data.shape))
                cv[tuple(slice(o + b.start, o + b.stop) for o, b in zip(OFFSET, box))] = \
                    data[box][..., None]
    return cv.key


def check_reads(path: Path, data: np.ndarray) -> None:
    """shardvol reads the whole volume and three unaligned boxes exactly."""
    vol = shardvol.Volume(str(path))
    got = vol[...]
    assert got.dtype == data.dtype and got.shape == (*data.shape, 1)
    np.testing.assert_array_equal(got[..., 0], data)
    rng = np.random.default_rng(1)
    for _ in range(3):
        lo = [int(rng.integers(0, n - 1)) for n in data.shape]
        hi = [int(rng.integers(a + 1, n + 1)) for a, n in zip(lo, data.shape)]
        box = tuple(slice(o + a, o + b) for o, a, b in zip(OFFSET, lo, hi))
        np.testing.assert_array_equal(vol[box][..., 0],
                                      data[tuple(slice(a, b) for a, b in zip(lo, hi))])


# -- CloudVolume writes, shardvol reads ------------------------------------------------------


@pytest.mark.parametrize("compress", [None, False], ids=["gz-files", "plain"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_reads_cloudvolume_unsharded(tmp_path, encoding, dtype, compress):
    data = labels(SIZE, dtype, seed=DTYPES.index(dtype))
    key = cv_write(tmp_path, data, encoding, compress=compress)
    names = [p.name for p in (tmp_path / key).iterdir()]
    assert len(names) == 3 * 2 * 3 and all(n.endswith(".gz") == (compress is None) for n in names)
    check_reads(tmp_path, data)


@pytest.mark.parametrize("data_encoding", ["gzip", "raw"])
@pytest.mark.parametrize("dtype", ["uint16", "uint64"])
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_reads_cloudvolume_sharded(tmp_path, encoding, dtype, data_encoding):
    data = labels(SIZE, dtype, seed=5)
    key = cv_write(tmp_path, data, encoding, sharding=spec(data_encoding))
    assert sorted(p.name for p in (tmp_path / key).iterdir()) == [f"{i}.shard" for i in range(4)]
    check_reads(tmp_path, data)


# -- shardvol writes, CloudVolume reads ------------------------------------------------------


@pytest.mark.parametrize("sharding", [None, "auto", "spec"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_cloudvolume_reads_shardvol(tmp_path, encoding, dtype, sharding):
    data = labels(SIZE, dtype, seed=10 + DTYPES.index(dtype))
    vol = shardvol.Volume.create(
        str(tmp_path), size=SIZE, voxel_offset=OFFSET, chunk_size=CHUNK, type="segmentation",
        data_type=dtype, encoding=encoding, sharding=spec("gzip") if sharding == "spec"
        else sharding)
    vol[...] = data[..., None]
    # an unaligned overwrite: partly covered chunks are decoded, merged and encoded again
    patch = labels((20, 30, 11), dtype, seed=99)
    data[25:45, 10:40, 12:23] = patch
    vol[OFFSET[0] + 25:OFFSET[0] + 45, OFFSET[1] + 10:OFFSET[1] + 40,
        OFFSET[2] + 12:OFFSET[2] + 23] = patch[..., None]
    np.testing.assert_array_equal(cv_read(str(tmp_path))[..., 0], data)
    np.testing.assert_array_equal(vol[...][..., 0], data)
    if sharding is None:  # the chunk files are what the package writes (as CloudVolume)
        chunk = tmp_path / vol.scale.key / "35-67_37-50_23-39"
        expected = PACKAGE[encoding](np.asfortranarray(data[32:64, 32:45, 16:32]))
        assert chunk.read_bytes() == expected


def test_encoders_agree_with_cloudvolume(tmp_path):
    """CloudVolume's compresso chunk files hold the bytes shardvol writes; its crackle ones
    (whose header records the memory order of CloudVolume's chunk) the same labels."""
    data = labels(SIZE, "uint32", seed=3)
    for encoding in ENCODINGS:
        key = cv_write(tmp_path / encoding, data, encoding, compress=False)
        codec = get_codec(encoding, dtype="uint32", num_channels=1)
        stored = (tmp_path / encoding / key / "3-35_5-37_7-23").read_bytes()
        ours = codec.encode(data[:32, :32, :16, None])
        if encoding == "compresso":
            assert ours == stored
        else:
            np.testing.assert_array_equal(crackle.decompress(ours), crackle.decompress(stored))
            np.testing.assert_array_equal(crackle.decompress(ours), data[:32, :32, :16])


# -- conversion ---------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_cp_to_compressed_segmentation_read_by_tensorstore(tmp_path, encoding):
    data = labels(SIZE, "uint64", seed=7)
    src, dst, dst2 = tmp_path / "src", tmp_path / "dst", tmp_path / "dst2"
    cv_write(src, data, encoding, sharding=spec("gzip"))
    assert main(["-q", "cp", str(src), str(dst), "--encoding", "compressed_segmentation"]) == 0
    assert shardvol.Volume(str(dst)).encoding == "compressed_segmentation"
    np.testing.assert_array_equal(ts_read(str(dst))[..., 0], data)
    shardvol.copy(str(src), str(dst2), encoding="compressed_segmentation", sharding=None,
                  progress=False)
    np.testing.assert_array_equal(ts_read(str(dst2))[..., 0], data)


# -- what the encodings hold -----------------------------------------------------------------


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize(("dtype", "channels"), [("int32", 1), ("float32", 1), ("uint64", 2)])
def test_info_refuses_what_the_encodings_cannot_hold(tmp_path, encoding, dtype, channels):
    with pytest.raises(InfoError, match=f"{encoding} needs one channel of uint8/16/32/64"):
        shardvol.Volume.create(str(tmp_path), size=(8, 8, 8), data_type=dtype,
                               num_channels=channels, encoding=encoding)
    assert not list(tmp_path.iterdir())


def test_missing_package_names_the_extra(tmp_path, monkeypatch):
    """crackle writes need crackle-codec (and so do reads of chunks with pins); compresso
    and flat crackle chunks need no package."""
    data = labels((20, 20, 20), "uint32")
    vols = {}
    for encoding in ENCODINGS:
        vols[encoding] = shardvol.Volume.create(str(tmp_path / encoding), size=(20, 20, 20),
                                                data_type="uint32", encoding=encoding)
        vols[encoding][...] = data[..., None]
    pins = crackle.compress(np.asfortranarray(data), allow_pins=1)
    assert (pins[5] >> 5) & 3 == 2
    monkeypatch.setitem(sys.modules, "crackle", None)  # import fails as if not installed
    monkeypatch.setitem(sys.modules, "compresso", None)
    with pytest.raises(UnsupportedCodecError, match=r"pip install shardvol\[segmentation\]"):
        shardvol.Volume.create(str(tmp_path / "w"), size=(8, 8, 8), data_type="uint32",
                               encoding="crackle")
    assert not (tmp_path / "w").exists()
    with pytest.raises(UnsupportedCodecError, match=r"shardvol\[segmentation\]"):
        vols["crackle"][0:8, 0:8, 0:8] = 1
    for encoding in ENCODINGS:
        np.testing.assert_array_equal(shardvol.Volume(str(tmp_path / encoding))[...][..., 0],
                                      data)
    (tmp_path / "crackle" / vols["crackle"].scale.key / "0-20_0-20_0-20").write_bytes(pins)
    with pytest.raises(UnsupportedCodecError, match=r"shardvol\[segmentation\]"):
        shardvol.Volume(str(tmp_path / "crackle"))[...]
    vols["compresso"][0:8, 0:8, 0:8] = 1  # written by shardvol's own encoder
    data[:8, :8, :8] = 1
    np.testing.assert_array_equal(shardvol.Volume(str(tmp_path / "compresso"))[...][..., 0], data)


@pytest.mark.parametrize("dtype", DTYPES)
def test_compresso_encoder_is_the_package_byte_for_byte(dtype):
    """shardvol's compresso encoder writes what the compresso package writes (and so
    CloudVolume): boxes, noise, labels near the type's top (escaped locations), strided and
    C-ordered views, partial chunks."""
    codec = get_codec("compresso", dtype=dtype, num_channels=1)
    rng = np.random.default_rng(DTYPES.index(dtype))
    top = np.iinfo(dtype).max
    for shape in [(64, 64, 64), (37, 20, 9), (1, 1, 1), (100, 3, 2)]:
        boxes = labels(shape, dtype, seed=len(shape) + shape[0])
        noise = rng.integers(0, 3, shape).astype(dtype)
        near_top = np.asarray(top, dtype) - rng.integers(0, 9, shape).astype(dtype)
        high = np.where(rng.random(shape) < 0.3, near_top, 5).astype(dtype)
        for a in (boxes, noise, high):
            expected = compresso.compress(np.asfortranarray(a))
            assert codec.encode(np.asfortranarray(a)[..., None]) == expected
            big = np.zeros((shape[0] + 3, shape[1] + 1, shape[2] + 2, 1), dtype)  # C order
            big[2:2 + shape[0], 1:, 1:1 + shape[2], 0] = a
            assert codec.encode(big[2:2 + shape[0], 1:, 1:1 + shape[2]]) == expected


# -- corrupt chunks --------------------------------------------------------------------------


def one_chunk_volume(path: Path, encoding: str, dtype: str = "uint32") -> tuple[Path, bytes]:
    """A volume of one 32 x 32 x 16 chunk; returns its chunk file and its bytes."""
    vol = shardvol.Volume.create(str(path), size=CHUNK, chunk_size=CHUNK, data_type=dtype,
                                 type="segmentation", encoding=encoding)
    vol[...] = labels(CHUNK, dtype, seed=4)[..., None]
    chunk = path / vol.scale.key / "0-32_0-32_0-16"
    return chunk, chunk.read_bytes()


def read_fails(path: Path, encoding: str) -> None:
    with pytest.raises(ChunkDecodeError, match=rf"0-32_0-32_0-16.*{encoding}|{encoding}.*0-32"):
        shardvol.Volume(str(path))[...]


def corruptions(good: bytes, encoding: str, rng: np.random.Generator) -> dict[str, bytes]:
    """Damaged versions of the chunk ``good``."""
    n = len(good)
    garbage = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
    out = {f"truncated to {k}": good[:k] for k in (0, 3, 20, 40, n // 2, n - 1)}
    out["garbage"] = garbage
    out["garbage after the magic"] = good[:4] + garbage[4:]
    out["trailing bytes"] = good + b"\x00" * 7
    other = labels((32, 32, 8), "uint32", seed=1)  # a valid stream of another chunk size
    out["stream of a 32x32x8 chunk"] = PACKAGE[encoding](other)
    out["stream of uint16 labels"] = PACKAGE[encoding](other.astype(np.uint16))
    if encoding == "crackle":  # a header forged to another size, its CRC-8 made to match
        from shardvol.precomputed.codecs.crackle import _crc8

        head = bytearray(good[:29])
        head[15:19] = (8).to_bytes(4, "little")
        head[28] = _crc8(bytes(head[5:28]))
        out["header forged to 32x32x8"] = bytes(head) + good[29:]
    return out


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_corrupt_chunks_raise_naming_chunk_and_encoding(tmp_path, encoding):
    chunk, good = one_chunk_volume(tmp_path, encoding)
    for name, bad in corruptions(good, encoding, np.random.default_rng(0)).items():
        chunk.write_bytes(bad)
        try:
            read_fails(tmp_path, encoding)
        except BaseException as e:
            raise AssertionError(f"{encoding}, {name}: {e!r}") from e


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_corrupt_gz_chunk_files(tmp_path, encoding):
    """CloudVolume's NAME.gz files: gzip garbage, and valid gzip of a damaged stream."""
    chunk, good = one_chunk_volume(tmp_path, encoding)
    chunk.unlink()
    gz = chunk.with_name(chunk.name + ".gz")
    gz.write_bytes(gzip.compress(good))
    assert shardvol.Volume(str(tmp_path))[...].any()  # the intact .gz file reads
    for bad in (b"\x1f\x8b" + bytes(range(200)), gzip.compress(good)[:-9],
                gzip.compress(good[: len(good) // 2])):
        gz.write_bytes(bad)
        with pytest.raises(ChunkDecodeError, match="0-32_0-32_0-16"):
            shardvol.Volume(str(tmp_path))[...]


def test_compresso_mutations_never_crash(tmp_path):
    """Random damage anywhere in compresso chunks (the decoder is shardvol's): every read
    either decodes or raises ChunkDecodeError naming the chunk."""
    rng = np.random.default_rng(11)
    refused = 0
    for dtype in ("uint8", "uint64"):
        chunk, good = one_chunk_volume(tmp_path / dtype, "compresso", dtype)
        for _ in range(150):
            bad = bytearray(good)
            for _ in range(int(rng.integers(1, 6))):
                bad[int(rng.integers(0, len(bad)))] = int(rng.integers(0, 256))
            chunk.write_bytes(bytes(bad))
            try:
                shardvol.Volume(str(tmp_path / dtype))[...]
            except ChunkDecodeError as e:
                assert "0-32_0-32_0-16" in str(e) and "compresso" in str(e)
                refused += 1
    assert refused > 100


@pytest.mark.parametrize(("kind", "formats"), [("boxes", 0b000), ("noise", 0b001),
                                              ("boxes with pins", 0b100)])
def test_crackle_damage_anywhere_is_refused_or_harmless(tmp_path, kind, formats):
    """Every byte of a crackle chunk (header, z index, labels, crack codes, checksums) changed
    in turn, and random damage: each read is refused, or (bits the format ignores, such as
    the padding after a slice's last move) decodes to the chunk's labels, never to other
    labels and never a crash.  The package stores boxes as flat labels with impermissible
    crack codes, noise with permissible ones, and boxes with pins when allowed (CloudVolume
    does not allow them)."""
    vol = shardvol.Volume.create(str(tmp_path), size=CHUNK, chunk_size=CHUNK, data_type="uint32",
                                 type="segmentation", encoding="crackle")
    data = labels(CHUNK, "uint32", seed=4)
    if kind == "noise":
        data = np.random.default_rng(2).integers(0, 5, CHUNK).astype(np.uint32)
    vol[...] = data[..., None]
    chunk = tmp_path / vol.scale.key / "0-32_0-32_0-16"
    if kind == "boxes with pins":
        chunk.write_bytes(crackle.compress(np.asfortranarray(data), allow_pins=1))
    good = chunk.read_bytes()
    np.testing.assert_array_equal(shardvol.Volume(str(tmp_path))[...][..., 0], data)
    assert (good[5] >> 4) & 7 == formats  # label format (2 bits), crack format (1 bit)
    rng = np.random.default_rng(5)
    damaged = [bytes(good[:i]) + bytes([good[i] ^ 0x5A]) + good[i + 1:] for i in range(len(good))]
    for _ in range(300):
        bad = bytearray(good)
        at = int(rng.integers(0, len(bad) - 8))
        bad[at:at + 8] = rng.integers(0, 256, 8, dtype=np.uint8).tobytes()
        damaged.append(bytes(bad))
    codec = get_codec("crackle", dtype="uint32", num_channels=1)
    refused = 0
    for i, bad in enumerate(damaged):
        try:
            if i % 50:  # (the codec as the volume calls it; every 50th through the volume)
                got = codec.decode(bad, (*CHUNK, 1), context="chunk 0-32_0-32_0-16")
            else:
                chunk.write_bytes(bad)
                got = shardvol.Volume(str(tmp_path))[...]
        except ChunkDecodeError as e:
            assert "0-32_0-32_0-16" in str(e) and "crackle" in str(e)
            refused += 1
        else:
            np.testing.assert_array_equal(got[..., 0], data)
    assert refused > 0.9 * len(damaged)


def test_compresso_decoder_under_mutation(tmp_path):
    """tests/c/fuzz_compresso.c on streams of the compresso package (all label widths, both
    format versions, both connectivities): mutated streams decode or are refused.  Built here
    with the sanitizers when the compiler has them; run it longer by hand (see the file)."""
    seeds = []
    for i, (dtype, kw) in enumerate([
        ("uint8", {}), ("uint16", {"random_access_z_index": False}),
        ("uint32", {"connectivity": 6}), ("uint64", {"steps": (2, 2, 2)}), ("uint64", {}),
    ]):
        a = labels((13, 9, 5 + i), dtype, seed=i)
        seed = tmp_path / f"seed{i}"
        seed.write_bytes(f"13 9 {5 + i} {a.itemsize}\n".encode() + compresso.compress(a, **kw))
        seeds.append(str(seed))
    out = run_checker(tmp_path, "fuzz_compresso", ["compresso.c"], ["4000", *seeds],
                      sanitize=True, timeout=240)
    decoded, refused = int(out.split()[0]), int(out.split()[2])
    assert decoded + refused == 4000 and decoded > 200 and refused > 2000, out


def test_compresso_chunk_larger_than_its_header_holds():
    codec = get_codec("compresso", dtype="uint8", num_channels=1)
    with pytest.raises(ChunkEncodeError, match="at most 65535 voxels per axis"):
        codec.encode(np.zeros((65536, 1, 1, 1), np.uint8))
