"""gs:// reads through shardvol's client (media downloads of GCS's JSON API): against the
fault server answering as GCS does (generations, ``ifGenerationMatch``, JSON errors),
which the emulator of test_gcs.py does not (it sends no generation and ignores
preconditions); volumes TensorStore wrote, read back; versions, resumes, errors,
credentials, and the filesystems that keep gcsfs's reads."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from google.oauth2 import service_account
from google.oauth2.credentials import Credentials

from shardvol import Volume
from shardvol.errors import StoreError, VersionChangedError
from shardvol.kvstore.fsspec_store import FsspecStore
from shardvol.kvstore.gcs_reads import GcsTransport, GoogleAuth

from .fault_server import FaultServer
from .gcs_server import gcs_server
from .http_server import Serving
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


class _TokenServer(Serving):
    """An OAuth token endpoint: each refresh of an authorized user's credentials gets a
    new access token (``tok-<n>``), valid for ``lifetime`` seconds."""

    def __init__(self, lifetime: int = 3600) -> None:
        import http.server

        outer = self
        self.issued = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                outer.issued += 1
                body = json.dumps({"access_token": f"tok-{outer.issued}",
                                   "expires_in": lifetime}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(Handler, "/token")


def _default_credentials(tmp_path, token_url: str) -> str:
    """An application default credentials file (a service account's, with a new key)
    whose token endpoint is ``token_url``."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    path = tmp_path / "adc.json"
    path.write_text(json.dumps({"type": "service_account", "project_id": "p",
                                "private_key_id": "k1", "private_key": pem,
                                "client_email": "reader@p.iam.gserviceaccount.com",
                                "client_id": "1", "token_uri": token_url}))
    return str(path)


def test_default_credentials_without_gcsfs_authorize_and_refresh_off_the_loop(
        server, tmp_path, monkeypatch):
    """With no token given, the application default credentials are found as gcsfs finds
    them (here a file named by GOOGLE_APPLICATION_CREDENTIALS), with google-auth alone,
    and refreshed off the event loop when they are about to run out."""
    _file(tmp_path, "k", b"abc")
    tokens = _TokenServer(lifetime=200)  # (each shorter than the refresh margin)
    try:
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS",
                           _default_credentials(tmp_path, tokens.url))
        store = FsspecStore(f"gs://{BUCKET}", endpoint_url=server.url,
                            skip_instance_cache=True)
        assert isinstance(store._gets.transport.auth, GoogleAuth)
        threads: list[str] = []
        refresh = service_account.Credentials.refresh
        monkeypatch.setattr(service_account.Credentials, "refresh",
                            lambda self, request: threads.append(
                                threading.current_thread().name) or refresh(self, request))
        assert store.get("k") == b"abc" and store.get("k", (1, 2)) == b"b"
        stats = server.stats()
        assert stats["Authorization Bearer tok-1"] == 1 and stats["Authorization Bearer tok-2"] == 1
        assert len(threads) == 2 and "fsspecIO" not in threads
        assert store._fs is None
    finally:
        tokens.close()


def test_reads_without_a_token_or_default_credentials_are_anonymous_and_need_no_gcsfs(
        server, tmp_path):
    """A process that opens, reads and writes a volume on gs:// (no token, no application
    default credentials: anonymous, as gcsfs falls back to) imports no gcsfs, the largest
    import of a fresh process; "google_default" without them is an error that says so."""
    data = np.random.default_rng(3).integers(0, 255, (20, 10, 5, 1), dtype=np.uint8)
    ts_create(str(tmp_path / BUCKET / "v"), data_type="uint8", num_channels=1,
              size=[20, 10, 5], chunk_size=[8, 8, 8], encoding="raw")[...] = data
    script = ("import sys, shardvol\n"
              "from shardvol.kvstore.fsspec_store import FsspecStore\n"
              "vol = shardvol.Volume(FsspecStore(sys.argv[1], endpoint_url=sys.argv[2]))\n"
              "vol[1:9, 2:10, 0:5] = vol[1:9, 2:10, 0:5] // 2\n"
              "store = FsspecStore(sys.argv[1], endpoint_url=sys.argv[2])\n"
              "store.set('gone', b'x')\n"
              "store.delete('gone')\n"
              "print(vol[...].sum(), sorted({m.split('.')[0] for m in sys.modules\n"
              "      if m.split('.')[0] in ('gcsfs', 'aiohttp')}))\n"
              "FsspecStore(sys.argv[1], endpoint_url=sys.argv[2], token='google_default',\n"
              "            retries=0).get('k')\n")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GOOGLE_", "GCE_", "CLOUDSDK_"))}
    env["HOME"] = str(tmp_path)  # (no gcloud configuration)
    done = subprocess.run([sys.executable, "-c", script, f"gs://{BUCKET}/v", server.url],
                          env=env, capture_output=True, text=True, timeout=120)
    data[1:9, 2:10] //= 2
    assert done.stdout.split() == [str(int(data.sum())), "[]"], done.stderr
    np.testing.assert_array_equal(ts_read(str(tmp_path / BUCKET / "v")), data)
    assert not (tmp_path / BUCKET / "v" / "gone").exists()
    assert "no Google application default credentials" in done.stderr
    assert not any(k.startswith("Authorization") for k in server.stats())
