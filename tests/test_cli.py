"""The ``shardvol`` command: info, create, verify, serve, bench; exit codes and error lines.

Oracles: TensorStore writes the volumes that ``info`` and ``verify`` look at and opens the
ones ``create`` makes; file counts are checked against the directory itself.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import textwrap
import urllib.request

import numpy as np
import pytest
import tensorstore as ts
import tomllib

import shardvol.cli
from shardvol import Volume
from shardvol.cli import COMMANDS, build_parser, main
from shardvol.errors import InfoError

from .oracles import ts_create, ts_open
from .processes import popen_interruptible

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARDING = {
    "@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 1,
    "minishard_bits": 2, "shard_bits": 5, "minishard_index_encoding": "gzip",
    "data_encoding": "gzip",
}


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_process(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    return subprocess.run([sys.executable, "-m", "shardvol", *argv], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=60, check=False, **kwargs)


def files_under(path) -> tuple[int, int]:
    sizes = [os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs]
    return len(sizes), sum(sizes)


@pytest.fixture
def ts_volume(tmp_path):
    """A sharded uint16 volume written entirely by TensorStore (and its data)."""
    path = str(tmp_path / "vol")
    data = np.random.default_rng(0).integers(0, 60000, (100, 70, 30, 1), dtype=np.uint16)
    store = ts_create(path, data_type="uint16", num_channels=1, size=[100, 70, 30],
                      chunk_size=[16, 16, 8], encoding="raw", resolution=[4, 4, 40],
                      voxel_offset=[10, -5, 3], sharding=SHARDING)
    store[...] = data
    return path, data


# ------------------------------------------------------------ the command
def test_entry_points():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    module, func = scripts["shardvol"].split(":")
    assert getattr(__import__(module, fromlist=[func]), func) is main
    proc = run_process("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"shardvol {shardvol.__version__}"


def test_registry_lists_every_subcommand():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert list(sub.choices) == list(COMMANDS)


# ------------------------------------------------------------------ create
@pytest.mark.parametrize("sharding", ["none", "auto", json.dumps(SHARDING)])
def test_create_opens_in_tensorstore(capsys, tmp_path, sharding):
    path = str(tmp_path / "seg")
    code, out, err = run_cli(
        capsys, "create", path, "--type", "segmentation", "--dtype", "uint64",
        "--size", "300", "200", "50", "--resolution", "8", "8", "40.5",
        "--voxel-offset", "1", "2", "3", "--chunk-size", "32", "32", "16",
        "--encoding", "compressed_segmentation", "--block-size", "4", "8", "8",
        "--sharding", sharding)
    assert code == 0 and out == "" and "created Volume(" in err
    store = ts_open(path)
    assert store.domain.inclusive_min == (1, 2, 3, 0)
    assert store.domain.shape == (300, 200, 50, 1)
    assert store.dtype.numpy_dtype == np.uint64
    scale = store.spec().to_json()["scale_metadata"]
    assert scale["chunk_size"] == [32, 32, 16]
    assert scale["encoding"] == "compressed_segmentation"
    assert scale["compressed_segmentation_block_size"] == [4, 8, 8]
    assert scale["resolution"] == [8, 8, 40.5]
    if sharding == "none":
        assert "sharding" not in scale or scale["sharding"] is None
    elif sharding == "auto":
        assert scale["sharding"]["@type"] == "neuroglancer_uint64_sharded_v1"
    else:
        assert scale["sharding"] == SHARDING
    with open(os.path.join(path, "info")) as f:
        assert json.load(f)["type"] == "segmentation"


def test_create_refuses_to_overwrite(capsys, tmp_path):
    path = str(tmp_path / "v")
    assert run_cli(capsys, "-q", "create", path, "--size", "10", "10", "10")[0] == 0
    code, _, err = run_cli(capsys, "create", path, "--size", "10", "10", "10")
    assert code == 1 and "already holds a volume" in err and len(err.splitlines()) == 1
    assert run_cli(
        capsys, "create", path, "--size", "20", "10", "10", "--overwrite", "-q"
    ) == (0, "", "")
    assert Volume(path).shape == (20, 10, 10, 1)


@pytest.mark.parametrize("bad", [
    ["--encoding", "jpeg", "--jpeg-quality", "500"],
    ["--encoding", "jpeg", "--jpeg-quality", "-1"],
    ["--encoding", "jpeg", "--jpeg-quality", "101"],
    ["--encoding", "png", "--png-level", "99"],
])
def test_create_checks_everything_before_writing(capsys, tmp_path, bad):
    """A refused option leaves nothing behind: creating again with good options works."""
    path = tmp_path / "v"
    code, _, err = run_cli(capsys, "create", str(path), "--size", "8", "8", "8", *bad)
    assert code == 1 and len(err.splitlines()) == 1 and bad[-1] in err
    assert not path.exists() or os.listdir(path) == []
    good = [bad[0], bad[1]]
    assert run_cli(capsys, "-q", "create", str(path), "--size", "8", "8", "8", *good)[0] == 0
    assert ts_open(str(path)).shape == (8, 8, 8, 1)


def test_create_api_checks_options_before_writing(tmp_path):
    from shardvol.errors import InvalidArgumentError

    for options in ({"fill_value": 300}, {"parallel": 0}, {"cache_bytes": "lots"},
                    {"compress_level": 13}):
        with pytest.raises(InvalidArgumentError):
            Volume.create(str(tmp_path / "v"), size=(8, 8, 8), **options)
        assert not (tmp_path / "v" / "info").exists()


# -------------------------------------------------------------------- info
def test_info_and_downsample_take_the_precomputed_prefix(capsys, tmp_path):
    path = str(tmp_path / "v")
    Volume.create(path, size=(16, 16, 8))
    code, out, _ = run_cli(capsys, "info", "--json", f"precomputed://{path}")
    assert code == 0 and json.loads(out)["format"] == "neuroglancer_precomputed"
    code, out, _ = run_cli(capsys, "info", "--json", f"precomputed://file://{path}")
    assert code == 0 and json.loads(out)["scales"][0]["size"] == [16, 16, 8]
    code, _, err = run_cli(capsys, "info", f"zarr3://{path}")
    assert code == 1 and "no 'zarr.json' file" in err
    assert run_cli(capsys, "-q", "downsample", f"precomputed://{path}", "--factor", "2", "2",
                   "1", "--mips", "1")[0] == 0
    assert len(Volume(f"precomputed://{path}").mips) == 2


@pytest.mark.parametrize("name", ["info", "zarr.json"])
def test_deeply_nested_metadata_is_an_info_error(capsys, tmp_path, name):
    (tmp_path / name).write_bytes(b"[" * 100_000)
    code, _, err = run_cli(capsys, "info", str(tmp_path))
    assert code == 1 and "nested too deeply" in err and len(err.splitlines()) == 1
    with pytest.raises(InfoError, match="nested too deeply"):
        shardvol.open(str(tmp_path))
    if name == "info":
        with pytest.raises(InfoError, match=f"{tmp_path}/info: not valid JSON"):
            Volume(str(tmp_path))
    else:
        with pytest.raises(InfoError, match=r"zarr\.json: not valid JSON"):
            shardvol.zarr3.open(str(tmp_path))


def test_info_counts_what_tensorstore_wrote(capsys, ts_volume):
    path, _ = ts_volume
    code, out, _ = run_cli(capsys, "info", "--json", path)
    assert code == 0
    desc = json.loads(out)
    assert (desc["format"], desc["type"], desc["data_type"], desc["num_channels"]) == (
        "neuroglancer_precomputed", "image", "uint16", 1)
    (scale,) = desc["scales"]
    assert scale["size"] == [100, 70, 30] and scale["voxel_offset"] == [10, -5, 3]
    assert scale["chunk_size"] == [16, 16, 8] and scale["grid_size"] == [7, 5, 4]
    assert scale["sharding"] == SHARDING
    # 2^(preshift + minishard) = 8 chunks per shard, Morton order: 2x2x2 chunks
    assert scale["shard_shape"] == [32, 32, 16]
    assert scale["shards"] == math.ceil(100 / 32) * math.ceil(70 / 32) * math.ceil(30 / 16)
    count, size = files_under(os.path.join(path, scale["key"]))
    shard_files = [f for f in os.listdir(os.path.join(path, scale["key"])) if f.endswith(".shard")]
    assert scale["stored"] == {"count": count, "bytes": size, "shards": len(shard_files)}
    assert len(shard_files) == scale["shards"]  # TensorStore wrote every shard of a full volume

    code, text, _ = run_cli(capsys, "info", path)
    assert code == 0
    assert "format:   neuroglancer precomputed (1 scale)" in text
    assert "size:        100x70x30 voxels at offset 10x-5x3" in text
    assert "shard shape: 32x32x16 voxels per shard" in text
    assert f"stored:      {scale['shards']} of {scale['shards']} shard files" in text


def test_info_hashed_shards_are_not_blocks(capsys, tmp_path):
    path = str(tmp_path / "h")
    spec = dict(SHARDING, hash="murmurhash3_x86_128")
    assert run_cli(capsys, "-q", "create", path, "--size", "100", "70", "30",
                   "--chunk-size", "16", "16", "8", "--sharding", json.dumps(spec))[0] == 0
    out = run_cli(capsys, "info", "--json", path)[1]
    (scale,) = json.loads(out)["scales"]
    assert scale["shard_shape"] is None and "shards" not in scale
    assert scale["stored"] == {"count": 0, "bytes": 0, "shards": 0}
    text = run_cli(capsys, "info", path)[1]
    assert "shards are not spatial blocks" in text and "stored:      0 shard files" in text


def test_info_unsharded_partial(capsys, tmp_path):
    path = str(tmp_path / "u")
    store = ts_create(path, data_type="uint8", num_channels=2, size=[64, 64, 64],
                      chunk_size=[32, 32, 32], encoding="raw")
    store[0:40, 0:10, 0:10] = 7  # two chunks
    code, out, _ = run_cli(capsys, "info", "--json", path)
    assert code == 0
    (scale,) = json.loads(out)["scales"]
    assert scale["sharding"] is None and scale["chunks"] == 8
    assert scale["stored"]["count"] == 2 == files_under(os.path.join(path, scale["key"]))[0]
    text = run_cli(capsys, "info", "--no-count", path)[1]
    assert "sharding:    none" in text and "not counted" in text


def test_info_zarr3(capsys, tmp_path):
    path = str(tmp_path / "z.zarr")
    store = ts.open({
        "driver": "zarr3", "kvstore": {"driver": "file", "path": path}, "create": True,
        "metadata": {
            "shape": [100, 80], "data_type": "int16", "dimension_names": ["y", "x"],
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [64, 64]}},
            "codecs": [{"name": "sharding_indexed", "configuration": {
                "chunk_shape": [16, 32], "codecs": [{"name": "bytes"}, {"name": "gzip"}],
                "index_codecs": [{"name": "bytes"}, {"name": "crc32c"}]}}],
        },
    }).result()
    store[...] = np.arange(8000, dtype=np.int16).reshape(100, 80)
    code, out, _ = run_cli(capsys, "info", "--json", path)
    assert code == 0
    d = json.loads(out)
    assert (d["format"], d["node_type"], d["shape"], d["data_type"]) == (
        "zarr3", "array", [100, 80], "int16")
    assert d["dimension_names"] == ["y", "x"] and d["chunk_shape"] == [64, 64]
    assert d["sharded"] and d["inner_chunk_shape"] == [16, 32] and d["grid_shape"] == [2, 2]
    count, size = files_under(path)
    meta_size = os.path.getsize(os.path.join(path, "zarr.json"))
    assert d["stored"] == {"count": count - 1, "bytes": size - meta_size} and count - 1 == 4
    text = run_cli(capsys, "info", path)[1]
    assert "zarr v3 array" in text and "inner chunks 16x32" in text


# ------------------------------------------------------------------ verify
def test_verify_agrees_with_tensorstore(capsys, ts_volume):
    path, _ = ts_volume
    code, out, err = run_cli(capsys, "verify", path, "--samples", "5", "--seed", "1")
    assert code == 0, out + err
    assert "5 of 5 regions identical to TensorStore" in err and "OK" in err


def test_verify_reports_a_difference(capsys, ts_volume, monkeypatch):
    """A shardvol read that disagrees with TensorStore (simulated) is reported, exit 1."""
    path, _ = ts_volume
    original = Volume.__getitem__

    def off_by_one(self, key):
        out = original(self, key)
        out[0, 0, 0, 0] += 1
        return out

    monkeypatch.setattr(Volume, "__getitem__", off_by_one)
    code, out, err = run_cli(capsys, "-q", "verify", path, "--samples", "3", "--mip", "0")
    assert code == 1 and err == ""
    lines = out.splitlines()
    assert len(lines) == 4 and lines[-1] == "3 region(s) differ from TensorStore"
    m = re.match(r"DIFFERENT scale \S+ \[(-?\d+):\S+, (-?\d+):\S+, (-?\d+):\S+\]: 1 voxels differ; "
                 r"first at x,y,z=\[(-?\d+), (-?\d+), (-?\d+)\] channel 0", lines[0])
    assert m and m.group(1, 2, 3) == m.group(4, 5, 6)


def ts_zarr3_array(path: str) -> np.ndarray:
    """A sharded 3-D Zarr v3 array written by TensorStore; returns its data."""
    data = np.random.default_rng(4).integers(-999, 999, (70, 45, 33)).astype(np.int32)
    store = ts.open({
        "driver": "zarr3", "kvstore": {"driver": "file", "path": path}, "create": True,
        "metadata": {
            "shape": list(data.shape), "data_type": "int32",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [32, 32, 16]}},
            "codecs": [{"name": "sharding_indexed", "configuration": {
                "chunk_shape": [16, 16, 8], "codecs": [{"name": "bytes"}, {"name": "zstd"}],
                "index_codecs": [{"name": "bytes"}, {"name": "crc32c"}]}}],
        },
    }).result()
    store[...] = data
    return data


def test_verify_zarr3_array(capsys, tmp_path, monkeypatch):
    """Zarr v3 arrays are checked on every axis (and --region takes one size per axis);
    a shardvol read that disagrees (simulated) is reported with its array index."""
    from shardvol.zarr3 import ZarrArray

    path = str(tmp_path / "a.zarr")
    ts_zarr3_array(path)
    code, out, err = run_cli(capsys, "verify", "zarr3://" + path, "--samples", "4",
                             "--region", "20", "9", "30", "--seed", "2")
    assert code == 0, out + err
    assert "array: 4 of 4 regions identical to TensorStore" in err
    assert run_cli(capsys, "-q", "verify", path, "--region", "20", "9")[0] == 1
    assert run_cli(capsys, "-q", "verify", path, "--mip", "0")[0] == 1
    original = ZarrArray.__getitem__

    def off_by_one(self, key):
        out = original(self, key)
        out[0, 0, 0] += 1
        return out

    monkeypatch.setattr(ZarrArray, "__getitem__", off_by_one)
    code, out, _ = run_cli(capsys, "-q", "verify", path, "--samples", "2")
    lines = out.splitlines()
    assert code == 1 and len(lines) == 3
    m = re.match(r"DIFFERENT array \[(\d+):\S+, (\d+):\S+, (\d+):\S+\]: 1 voxels differ; "
                 r"first at index=\[(\d+), (\d+), (\d+)\]: ", lines[0])
    assert m and m.group(1, 2, 3) == m.group(4, 5, 6), lines[0]


def test_verify_corrupt_shard_is_one_error_line(capsys, ts_volume):
    path, _ = ts_volume
    key = Volume(path).scale.key
    for name in os.listdir(os.path.join(path, key)):
        with open(os.path.join(path, key, name), "r+b") as f:
            f.write(b"\xff" * 64)  # shard index entries pointing far past the end
    code, _, err = run_cli(capsys, "-q", "verify", path, "--samples", "2")
    assert code == 1
    assert len(err.splitlines()) == 1 and err.startswith("shardvol verify: error:")
    assert "Traceback" not in err and ".shard" in err


# ---------------------------------------------------------- errors, usage
def test_error_is_one_line_and_debug_shows_traceback(capsys, tmp_path):
    code, out, err = run_cli(capsys, "info", str(tmp_path))
    assert code == 1 and out == ""
    assert err == f"shardvol info: error: no volume at file://{tmp_path}: neither an 'info' " \
                  "nor a 'zarr.json' file\n"
    with pytest.raises(InfoError):
        main(["--debug", "info", str(tmp_path)])
    with pytest.raises(InfoError):
        main(["info", str(tmp_path), "--debug"])
    proc = run_process("info", str(tmp_path / "missing"))
    assert proc.returncode == 1 and len(proc.stderr.splitlines()) == 1
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("argv", [
    [],
    ["nosuchcommand"],
    ["create", "x"],
    ["create", "x", "--size", "1", "2"],
    ["create", "x", "--size", "1", "2", "-3"],
    ["create", "x", "--size", "1", "2", "3", "--sharding", "{not json"],
    ["create", "x", "--size", "1", "2", "3", "--sharding", "[1]"],
    ["create", "x", "--size", "1", "2", "3", "--encoding", "webp"],
    ["verify", "x", "--samples", "0"],
    ["info"],
    ["serve", "x", "--port", "99999"],
    ["serve", "x", "--port", "-1"],
])
def test_usage_errors_exit_2(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert "usage: shardvol" in capsys.readouterr().err


def test_invalid_combination_is_exit_1(capsys, tmp_path):
    code, _, err = run_cli(capsys, "create", str(tmp_path / "v"), "--size", "8", "8", "8",
                           "--dtype", "uint16", "--encoding", "jpeg")
    assert code == 1 and "jpeg needs uint8" in err


# -------------------------------------------------------------------- bench
def test_bench_lists_the_checkout_benchmarks(capsys):
    code, out, _ = run_cli(capsys, "bench", "--list")
    expected = sorted(f[6:-3] for f in os.listdir(os.path.join(ROOT, "benchmarks"))
                      if f.startswith("bench_") and f.endswith(".py"))
    assert code == 0 and out.split() == expected


def test_bench_runs_scripts_and_passes_quick(capsys, tmp_path):
    record = tmp_path / "argv.txt"
    (tmp_path / "bench_a.py").write_text(textwrap.dedent(f"""
        import argparse, sys
        p = argparse.ArgumentParser(); p.add_argument("--quick", action="store_true")
        p.parse_args()
        open({str(record)!r}, "a").write("a " + " ".join(sys.argv[1:]) + "\\n")
    """))
    (tmp_path / "bench_b.py").write_text(
        f"import sys; open({str(record)!r}, 'a').write('b ' + ' '.join(sys.argv[1:]) + '\\n')\n")
    (tmp_path / "bench_c.py").write_text("raise SystemExit(3)\n")
    (tmp_path / "bench_d.py").write_text(  # the scripts import the command's own shardvol
        f"import shardvol; assert shardvol.__file__ == {shardvol.__file__!r}\n")
    code, _, err = run_cli(capsys, "bench", "--dir", str(tmp_path), "--quick", "a", "b", "d")
    assert code == 0 and record.read_text() == "a --quick\nb \n", err
    code, _, err = run_cli(capsys, "bench", "--dir", str(tmp_path))
    assert code == 1 and "benchmark(s) failed: c" in err
    code, _, err = run_cli(capsys, "bench", "--dir", str(tmp_path), "nosuch")
    assert code == 2 and "unknown benchmark(s) nosuch" in err


# -------------------------------------------------------------------- serve
@pytest.mark.parametrize("quiet", [False, True])
def test_serve_command(tmp_path, quiet):
    Volume.create(str(tmp_path / "em" / "raw"), size=(8, 8, 8))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    proc = popen_interruptible(
        [sys.executable, "-m", "shardvol", "serve", str(tmp_path), "--port", "0",
         *(["--quiet"] if quiet else [])],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        banner = [proc.stdout.readline() for _ in range(3)]
        base = re.search(r"at (http://127\.0\.0\.1:\d+)/", banner[0]).group(1)
        assert banner[2].strip() == f"precomputed://{base}/em/raw"
        with urllib.request.urlopen(f"{base}/em/raw/info") as resp:
            assert json.load(resp)["scales"][0]["size"] == [8, 8, 8]
    finally:  # Ctrl-C, or SIGTERM: both end it cleanly
        proc.send_signal(signal.SIGTERM if quiet else signal.SIGINT)
        err = proc.communicate(timeout=10)[1]
    assert proc.returncode == 0
    if quiet:
        assert err == ""
    else:
        assert err.splitlines() == ['127.0.0.1 "GET /em/raw/info" 200 ' +
                                    str(os.path.getsize(tmp_path / "em" / "raw" / "info"))]


def test_downsample_and_cp_commands(tmp_path):
    """The downsample and cp subcommands, checked with TensorStore."""
    src = str(tmp_path / "vol")
    vol = Volume.create(src, size=(40, 30, 10), chunk_size=(16, 16, 8), data_type="uint16",
                        resolution=(4, 4, 40))
    data = np.random.default_rng(0).integers(0, 999, vol.shape).astype(np.uint16)
    vol[...] = data
    assert main(["-q", "downsample", src, "--factor", "2", "2", "1", "--mips", "2",
                 "--method", "max", "--compress-level", "0"]) == 0
    mip1 = Volume(src, mip=1)
    assert mip1.sharding.data_encoding == "gzip"
    stored = sum(p.stat().st_size for p in (tmp_path / "vol" / mip1.scale.key).glob("*.shard"))
    assert stored > mip1.dtype.itemsize * np.prod(mip1.shape)  # level 0 stores, at 6 it is less
    base = ts.open({"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file",
                    "path": src}, "scale_index": 0}).result()
    want = ts.downsample(base, [4, 4, 1, 1], "max").read().result()
    np.testing.assert_array_equal(Volume(src, mip=2)[...], want)
    dst = str(tmp_path / "copy.zarr")
    assert main(["-q", "cp", src, dst]) == 0
    arr = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": dst}}).result()
    np.testing.assert_array_equal(arr.read().result(), data)
    assert main(["-q", "cp", src, dst]) == 1  # exists, no --overwrite: one-line error
    assert main(["-q", "downsample", src, "--compress-level", "13", "--overwrite"]) == 1
    with pytest.raises(SystemExit) as exc:  # argparse usage error
        main(["-q", "downsample", src, "--factor", "0", "2", "1"])
    assert exc.value.code == 2
