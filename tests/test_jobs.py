"""Long jobs that finish when run again: cp and downsample killed with SIGKILL half-way, then
rerun; unfinished output said to be so; a lost Dask worker; records that do not fit.

Oracles: an uninterrupted run of the same command (its files, byte for byte), numpy, and
the files' modification times (what a rerun wrote).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

import shardvol
from shardvol import Volume
from shardvol.cli import main
from shardvol.errors import IncompleteWarning, InfoError, JobConflictError, TaskError
from shardvol.kvstore import open_store
from shardvol.kvstore.job_record import DONE_PREFIX, JOB_KEY, begin_job, read_job
from shardvol.ops.tasks import run_tasks

from .stores import stored_files as all_files

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the command line, with tasks of 256 KiB (the module's 64 MiB would make one task here)
RUN = ("import sys, shardvol.ops.convert as c; c.TASK_BYTES = 256 << 10; "
       "from shardvol.cli import main; sys.exit(main(sys.argv[1:]))")


def _cli(*argv: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    return subprocess.Popen([sys.executable, "-c", RUN, "-q", *argv], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _killed_half_way(dst: str, *argv: str) -> float:
    """Run the command and SIGKILL it once about half its tasks are marked done; the
    fraction done when it died."""
    proc = _cli(*argv)
    marks = os.path.join(dst, DONE_PREFIX)
    deadline = time.monotonic() + 120
    done = 0.0
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with open(os.path.join(dst, JOB_KEY), "rb") as f:
                record = json.loads(f.read())
            names = [n for n in os.listdir(marks) if not n.startswith(".shardvol-")]
            done = len(names) / record["tasks"] if record["tasks"] else 0.0
        except (OSError, ValueError):
            done = 0.0
        if done >= 0.5:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.002)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, err
    return done


def _rerun(*argv: str) -> float:
    """Run the command to its end; when it started (for the files it wrote)."""
    time.sleep(0.02)  # (a coarse file system clock still tells the runs apart)
    start = time.time_ns()
    proc = _cli(*argv)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return start


def stored_files(root: str) -> dict[str, bytes]:
    """The data files under ``root`` (not the hidden ones: a temporary file a killed
    process left, which no reader sees)."""
    return {k: v for k, v in all_files(root).items()
            if not any(p.startswith(".shardvol-") for p in k.split(os.sep))}


def _written_since(files: dict[str, bytes], root: str, start: int) -> int:
    return sum(os.stat(os.path.join(root, k)).st_mtime_ns >= start for k in files)


def _source(path: str, shape=(256, 256, 256)) -> np.ndarray:
    data = np.random.default_rng(7).integers(0, 40, shape, dtype=np.uint8)
    vol = Volume.create(path, size=shape, chunk_size=(32, 32, 32), data_type="uint8",
                        sharding="auto")
    vol[...] = data
    return data


@pytest.mark.parametrize("dst_name, extra", [
    ("out.zarr", ["--chunk-size", "64", "64", "64", "--inner-chunk-shape", "32", "32", "32"]),
    ("out", ["--chunk-size", "32", "32", "32", "--sharding", "none"]),
])
def test_cp_killed_half_way_finishes_when_run_again(tmp_path, capsys, dst_name, extra):
    src = str(tmp_path / "src")
    data = _source(src)
    dst, whole = str(tmp_path / dst_name), str(tmp_path / ("whole-" + dst_name))
    assert main(["-q", "cp", src, whole, *extra]) == 0
    expected = stored_files(whole)

    done = _killed_half_way(dst, "cp", src, dst, *extra)
    assert 0.3 < done < 0.8
    # unfinished is visible: info, verify (exit 1), and the Volume on opening
    assert main(["info", dst]) == 0
    out = capsys.readouterr().out
    assert "INCOMPLETE: " in out and "copy job" in out
    assert main(["verify", dst, "--samples", "1"]) == 1
    assert "INCOMPLETE: " in capsys.readouterr().out
    if dst_name == "out":
        with pytest.warns(IncompleteWarning, match="unfinished copy job"):
            vol = Volume(dst)
        status = vol.incomplete
        assert status is not None and status.done >= done * status.record.tasks
    # the same command refuses nothing and writes only what is missing
    start = _rerun("cp", src, dst, *extra)
    got = stored_files(dst)
    assert got.keys() == expected.keys() and all(got[k] == expected[k] for k in got)
    assert _written_since(got, dst, start) <= 0.6 * len(got)
    assert not os.path.exists(os.path.join(dst, JOB_KEY))
    assert not os.path.exists(os.path.join(dst, DONE_PREFIX))
    with warnings.catch_warnings():
        warnings.simplefilter("error", IncompleteWarning)
        opened = shardvol.open(dst)
    np.testing.assert_array_equal(np.asarray(opened[...]).reshape(data.shape), data)
    assert main(["-q", "verify", dst, "--samples", "2"]) == 0


def test_downsample_killed_half_way_finishes_when_run_again(tmp_path, capsys):
    argv = ["--factor", "2", "2", "1", "--mips", "3", "--sharding", "none", "--chunk-size",
            "16", "16", "16"]
    src, whole = str(tmp_path / "v"), str(tmp_path / "whole")
    _source(src, (512, 512, 32))
    _source(whole, (512, 512, 32))
    assert main(["-q", "downsample", whole, *argv]) == 0
    expected = {k: v for k, v in stored_files(whole).items() if not k.startswith("1_1_1/")}

    done = _killed_half_way(src, "downsample", src, *argv)
    assert 0.3 < done < 0.8
    assert [s.key for s in Volume(src).mips] == ["1_1_1", "2_2_1", "4_4_1", "8_8_1"]
    with pytest.warns(IncompleteWarning, match="unfinished downsample job"):
        Volume(src, mip=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", IncompleteWarning)
        Volume(src, mip=0)  # (the source scale is not written by the job)
    assert main(["info", src]) == 0 and "INCOMPLETE: " in capsys.readouterr().out
    start = _rerun("downsample", src, *argv)
    got = {k: v for k, v in stored_files(src).items() if not k.startswith("1_1_1/")}
    assert got.keys() == expected.keys() and all(got[k] == expected[k] for k in got)
    assert _written_since(got, src, start) <= 0.6 * len(got)
    assert read_job(open_store(src)) is None


def test_a_different_job_is_refused_naming_the_difference(tmp_path):
    src = str(tmp_path / "src")
    _source(src, (64, 64, 64))
    dst = str(tmp_path / "dst.zarr")
    kv = open_store(dst)
    begin_job(kv, "copy", {"source": "elsewhere"})  # (as a copy killed at once would leave)
    before = sorted(os.listdir(dst))
    with pytest.raises(JobConflictError, match='source: "elsewhere" -> "file://'):
        shardvol.copy(src, dst, progress=False)
    assert sorted(os.listdir(dst)) == before  # nothing written
    shardvol.copy(src, dst, progress=False, overwrite=True)
    assert read_job(kv) is None
    np.testing.assert_array_equal(shardvol.open(dst)[...], Volume(src)[...])


@pytest.mark.parametrize("body, match", [
    (b"{not json", "not valid JSON"),
    (b'{"shardvol_job": 99, "kind": "copy"}', "newer shardvol"),
    (b'{"shardvol_job": 1, "kind": "copy"}', "corrupt job record"),
])
def test_corrupt_or_newer_records_are_clear_errors(tmp_path, body, match):
    src = str(tmp_path / "src")
    _source(src, (32, 32, 32))
    dst = tmp_path / "dst.zarr"
    dst.mkdir()
    (dst / JOB_KEY).write_bytes(body)
    with pytest.raises(InfoError, match=match):
        shardvol.copy(src, str(dst), progress=False)
    shardvol.copy(src, str(dst), progress=False, overwrite=True)  # starts over
    assert read_job(open_store(str(dst))) is None


class _Task:
    def __init__(self, i: int, log: str) -> None:
        self.i, self.log = i, log

    @property
    def name(self) -> str:
        return f"task {self.i}"


def _work(task: _Task) -> None:
    """Record each run; task 20 kills its worker the first time (as a lost machine)."""
    flag = os.path.join(task.log, "killed")
    if task.i == 20 and not os.path.exists(flag):
        open(flag, "w").close()
        os._exit(1)
    time.sleep(0.05)
    with open(os.path.join(task.log, f"{task.i}.{os.getpid()}.{time.monotonic_ns()}"), "w"):
        pass


def test_a_lost_dask_worker_costs_only_its_own_tasks(tmp_path):
    distributed = pytest.importorskip("dask.distributed")
    tasks = [_Task(i, str(tmp_path)) for i in range(60)]
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        run_tasks(_work, tasks, client.get_executor(), progress=False)
    runs = [n.split(".")[0] for n in os.listdir(tmp_path) if n != "killed"]
    assert sorted(set(runs), key=int) == [str(i) for i in range(60)]
    assert len(runs) - 60 <= 3  # (finished tasks were not computed again: 10 more were)


def _fail(task: _Task) -> None:
    raise KeyError("a failure that names no unit")


def test_a_failed_task_is_named(tmp_path):
    with pytest.raises(TaskError, match=r"copy: task 0 failed: KeyError"):
        run_tasks(_fail, [_Task(0, str(tmp_path))], progress=False, desc="copy")


def _block(block: np.ndarray, flag: str, block_info=None) -> np.ndarray:
    """The block, unless it is the 6th along x and ``flag`` is missing: then it fails, once
    the other blocks have had the time to be written."""
    if block_info[None]["chunk-location"][0] == 5 and not os.path.exists(flag):
        time.sleep(1.0)
        raise RuntimeError("lost")
    return block


def test_from_dask_interrupted_finishes_when_run_again(tmp_path, monkeypatch):
    da = pytest.importorskip("dask.array")
    monkeypatch.setattr("shardvol.array.dask.BLOCK_BYTES", 64 << 10)  # (a task per chunk)
    data = np.random.default_rng(3).integers(0, 60000, (256, 64, 64), dtype=np.uint16)
    flag = str(tmp_path / "flag")
    array = da.from_array(data, chunks=(32, 64, 64)).map_blocks(_block, flag, dtype=data.dtype)
    url = str(tmp_path / "v")
    options = {"chunk_size": (32, 32, 32)}
    with pytest.raises(RuntimeError, match="lost"):
        shardvol.from_dask(array, url, progress=False, **options)
    with pytest.warns(IncompleteWarning, match="unfinished write job"):
        assert Volume(url).incomplete is not None
    open(flag, "w").close()
    files = stored_files(url)
    time.sleep(0.02)
    start = time.time_ns()
    vol = shardvol.from_dask(array, url, progress=False, **options)
    np.testing.assert_array_equal(vol[...][..., 0], data)
    got = stored_files(url)
    assert 0 < _written_since(got, url, start) <= 0.4 * len(got) and len(got) > len(files)
    assert read_job(open_store(url)) is None
    other = da.from_array(data + 1, chunks=(32, 64, 64))
    vol.write_dask(other[:32], progress=False)  # a finished job leaves no record behind
    np.testing.assert_array_equal(vol[0:32][..., 0], data[:32] + 1)
