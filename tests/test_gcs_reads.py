"""gs:// reads through shardvol's client (media downloads of GCS's JSON API): against the
fault server answering as GCS does (generations, ``ifGenerationMatch``, JSON errors),
which the emulator of test_gcs.py does not (it sends no generation and ignores
preconditions); volumes TensorStore wrote, read back; versions, resumes, errors,
credentials, and the filesystems that keep gcsfs's reads."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from google.oauth2.credentials import Credentials

from shardvol import Volume
from shardvol.errors import StoreError, VersionChangedError
from shardvol.kvstore.fsspec_store import FsspecStore
from shardvol.kvstore.gcs_reads import GcsTransport

from .fault_server import FaultServer
from .gcs_server import gcs_server
from .oracles import ts_create, ts_read
from .test_gcs import SHARDING

BUCKET = "bk"


@pytest.fixture(scope="module")
def gcs():
    """The emulator's environment (gcsfs reads STORAGE_EMULATOR_HOST); the stores here
    name the fault server as their endpoint."""
    with gcs_server() as endpoint:
        yield endpoint


@pytest.fixture
def server(gcs, tmp_path):
    os.makedirs(tmp_path / BUCKET)
    with FaultServer(str(tmp_path)) as s:
        yield s


def _store(server: FaultServer, prefix: str = "", **kw) -> FsspecStore:
    kw.setdefault("token", "anon")
    store = FsspecStore(f"gs://{BUCKET}/{prefix}".rstrip("/"), endpoint_url=server.url,
                        skip_instance_cache=True, **kw)
    return store


def _file(tmp_path, key: str, data: bytes) -> None:
    path = tmp_path / BUCKET / key
    os.makedirs(path.parent, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)  # (a new file: a new generation)


def test_a_sharded_volume_tensorstore_wrote_reads_exactly(server, tmp_path):
    data = np.random.default_rng(21).integers(0, 2**16, (64, 48, 40, 1), dtype=np.uint16)
    t = ts_create(str(tmp_path / BUCKET / "v"), data_type="uint16", num_channels=1,
                  size=[64, 48, 40], chunk_size=[16, 16, 8], encoding="raw", sharding=SHARDING)
    t[...] = data
    store = _store(server, "v")
    assert isinstance(store._gets.transport, GcsTransport)
    server.stats(reset=True)
    vol = Volume(store)
    assert np.array_equal(vol[...], ts_read(str(tmp_path / BUCKET / "v")))
    assert np.array_equal(vol[5:50, 3:40, 7:33], data[5:50, 3:40, 7:33])
    stats = server.stats()
    assert stats["GET"] == stats["requests"] > 0  # (every one a media download, below)
    assert stats["max in flight /bk"] > 1


def test_versions_are_generations_and_replaced_values_are_caught(server, tmp_path):
    _file(tmp_path, "k", b"x" * 1000)
    store = _store(server, check_versions=True)
    value, version = store.get_versioned("k")
    assert value == b"x" * 1000 and version == store.version("k")  # (metadata's generation)
    assert store.get_many_if([("k", (10, 20))], {"k": version}) == [b"x" * 10]
    assert store.get_many_if([("k", (5, 5))], {"k": version}) == [b""]  # (its metadata)
    _file(tmp_path, "k", b"y" * 1000)
    assert store.version("k") != version
    server.stats(reset=True)
    for byte_range in [(10, 20), (5, 5), None]:
        with pytest.raises(VersionChangedError):
            store.get_many_if([("k", byte_range)], {"k": version})
    assert server.stats()["status 412"] == 3  # (the server checked the generation)
    server.set(ignore_if_match=True)  # (the answer's generation is not the one asked for)
    with pytest.raises(VersionChangedError):
        store.get_many_if([("k", (10, 20))], {"k": version})


def test_a_whole_value_cut_short_resumes_at_its_generation(server, tmp_path):
    data = np.random.default_rng(22).integers(0, 255, 3 << 20, dtype=np.uint8).tobytes()
    _file(tmp_path, "big", data)
    store = _store(server)
    server.set(plan=["short"])
    got = [a for _, a in store.iter_get_arriving(["big"]) if a.done]
    assert bytes(got[0].view()) == data
    stats = server.stats()
    assert stats["fault short"] == 1 and stats[f"Range bytes={len(data) // 2}-"] == 1


@pytest.mark.parametrize("server_checks", [True, False])
def test_a_value_replaced_between_two_attempts_is_a_version_change(server, tmp_path,
                                                                   server_checks):
    """412 from the server, or (one that ignores the condition) an answer at another
    generation."""
    data = np.random.default_rng(23).integers(0, 255, 3 << 20, dtype=np.uint8).tobytes()
    _file(tmp_path, "big", data)
    store = _store(server)
    server.set(plan=["short", "error 503"], retry_after=1.0,
               ignore_if_match=not server_checks)

    def replace() -> None:
        deadline = time.monotonic() + 10
        while not server.stats()["fault error 503"] and time.monotonic() < deadline:
            time.sleep(0.02)
        _file(tmp_path, "big", data[::-1])  # (during the 1 s the reader waits)

    writer = threading.Thread(target=replace)
    writer.start()
    try:
        with pytest.raises(VersionChangedError):
            list(store.iter_get_arriving(["big"]))
    finally:
        writer.join()
    assert server.stats()["requests"] == 3


def test_errors_are_named_missing_values_are_none_and_503s_are_retried(server, tmp_path):
    _file(tmp_path, "k", b"abc")
    store = _store(server, retries=2)
    assert store.get("absent") is None
    server.set(plan=["error 503", "error 429"])
    assert store.get("k") == b"abc"
    server.set(plan=["error 403"])
    with pytest.raises(StoreError, match="403 injected"):
        store.get("k")


def test_credentials_authorize_each_request(server, tmp_path):
    _file(tmp_path, "k", b"abc")
    store = _store(server, token=Credentials("tok-1"))
    assert store.get("k") == b"abc" and store.get("k", (1, 2)) == b"b"
    assert server.stats()["Authorization Bearer tok-1"] == 2
    server.stats(reset=True)
    assert _store(server).get("k") == b"abc"
    assert not any(k.startswith("Authorization") for k in server.stats())


def test_credentials_about_to_run_out_are_refreshed_off_the_event_loop(server, tmp_path):
    """gcsfs refreshes with a blocking request: on the event loop it would stall every
    transfer there."""
    threads: list[str] = []

    class Expiring(Credentials):
        def refresh(self, request):
            threads.append(threading.current_thread().name)
            self.token = "tok-2"
            self.expiry = datetime.datetime.utcnow() + datetime.timedelta(hours=1)

    _file(tmp_path, "k", b"abc")
    soon = datetime.datetime.utcnow() + datetime.timedelta(seconds=250)  # (valid, but soon)
    store = _store(server, token=Expiring("tok-1", expiry=soon))
    assert store.get("k") == b"abc" and store.get("k") == b"abc"
    assert len(threads) == 1 and threads[0] != "fsspecIO"
    assert server.stats()["Authorization Bearer tok-2"] == 2


def test_filesystems_with_options_the_client_does_not_follow_keep_gcsfs(server, tmp_path):
    _file(tmp_path, "k", b"abc")
    for options in [{"requester_pays": True}, {"session_kwargs": {"trust_env": True}}]:
        store = _store(server, **options)
        assert store._gets is None
        assert store.get("k") == b"abc"


def test_stores_ask_no_bucket_layout_with_gcsfs_experimental_class_on(server, tmp_path):
    """gcsfs's default class (its experimental one) asks a gRPC API for each bucket's
    layout before its operations and logs a warning where it cannot (no application
    default credentials, anonymous reads of public data); a store's operations take the
    core class's JSON API, quietly, whatever that switch says."""
    _file(tmp_path, "v/info", b"{}")
    _file(tmp_path, "v/a/b", b"xyz")
    script = (
        "import sys\n"
        "from shardvol.kvstore.fsspec_store import FsspecStore\n"
        "s = FsspecStore('gs://bk/v', token='anon', endpoint_url=sys.argv[1])\n"
        "print(s.exists('info'), s.size('a/b'), s.get('a/b'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"}
    done = subprocess.run([sys.executable, "-c", script, server.url], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "True 3 b'xyz'"
    assert done.stderr == ""
