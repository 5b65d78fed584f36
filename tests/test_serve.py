"""shardvol's HTTP server: ranges, HEAD, CORS, .gz files, traversal, concurrency, real clients.

Every test talks to a real server on 127.0.0.1 with http.client (a standard client),
raw sockets (for request targets a client would normalise) and shardvol's own HTTP store
(fsspec + aiohttp).
"""

from __future__ import annotations

import gzip
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from shardvol import Volume
from shardvol.ops.serve import VolumeServer, find_volumes, parse_range, resolve, source_url

SECRET = b"top secret: outside the served tree"
SIZE = 10_000


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    base = tmp_path_factory.mktemp("serve")
    root, outside = base / "root", base / "outside"
    (root / "vol" / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_bytes(SECRET)
    payload = np.random.default_rng(0).integers(0, 256, SIZE, dtype=np.uint8).tobytes()
    (root / "vol" / "info").write_text(json.dumps({"hello": "world"}))
    (root / "vol" / "data.bin").write_bytes(payload)
    (root / "vol" / "chunk.gz").write_bytes(gzip.compress(payload[:3000]))
    (root / "vol" / "empty").write_bytes(b"")
    (root / "vol" / "sub" / "a b%.bin").write_bytes(b"spaces")
    os.symlink(root / "vol" / "data.bin", root / "vol" / "link_in")
    os.symlink(outside / "secret.txt", root / "vol" / "link_out")
    os.symlink(outside, root / "vol" / "dir_out")
    return root, payload


@pytest.fixture(scope="module")
def server(tree):
    accesses = []
    srv = VolumeServer(str(tree[0]), port=0, on_request=accesses.append)
    srv.start()
    srv.accesses = accesses
    yield srv
    srv.shutdown()
    srv.server_close()


def request(server, method, path, headers=None):
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def raw_request(server, target: bytes) -> tuple[int, bytes]:
    """Send a request line exactly as given (no client-side normalisation)."""
    with socket.create_connection(server.server_address[:2], timeout=10) as s:
        s.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, data.split(b"\r\n\r\n", 1)[1]


def assert_cors(headers):
    assert headers["access-control-allow-origin"] == "*"
    exposed = {h.strip().lower() for h in headers["access-control-expose-headers"].split(",")}
    assert {"content-range", "content-length", "accept-ranges", "content-encoding"} <= exposed


# ------------------------------------------------------------------ ranges
def test_whole_file(server, tree):
    status, headers, body = request(server, "GET", "/vol/data.bin")
    assert status == 200 and body == tree[1]
    assert headers["content-length"] == str(SIZE)
    assert headers["accept-ranges"] == "bytes"
    assert "content-range" not in headers
    assert_cors(headers)
    status, headers, body = request(server, "GET", "/vol/info")
    assert json.loads(body) == {"hello": "world"} and headers["content-type"] == "application/json"


@pytest.mark.parametrize("header, start, stop", [
    ("bytes=0-99", 0, 100),
    ("bytes=100-", 100, SIZE),
    ("bytes=-50", SIZE - 50, SIZE),
    ("bytes=9990-20000", 9990, SIZE),  # clipped at the end
    ("bytes=-20000", 0, SIZE),          # suffix longer than the file
    ("bytes=4242-4242", 4242, 4243),
])
def test_range(server, tree, header, start, stop):
    status, headers, body = request(server, "GET", "/vol/data.bin", {"Range": header})
    assert status == 206
    assert body == tree[1][start:stop]
    assert headers["content-length"] == str(stop - start)
    assert headers["content-range"] == f"bytes {start}-{stop - 1}/{SIZE}"
    assert_cors(headers)


@pytest.mark.parametrize("header", ["bytes=10000-", "bytes=20000-30000", "bytes=-0"])
def test_unsatisfiable_range(server, header):
    status, headers, body = request(server, "GET", "/vol/data.bin", {"Range": header})
    assert status == 416 and body == b""
    assert headers["content-range"] == f"bytes */{SIZE}"
    assert_cors(headers)
    status, headers, _ = request(server, "GET", "/vol/empty", {"Range": "bytes=0-0"})
    assert status == 416 and headers["content-range"] == "bytes */0"


@pytest.mark.parametrize("header", ["bytes=5-2", "bytes=0-1,5-6", "items=0-5", "bytes=x-",
                                    "bytes=" + "9" * 5000 + "-", "bytes=0-" + "9" * 5000])
def test_ignored_range_serves_whole_file(server, tree, header):
    """Malformed or multi-range headers may be ignored (RFC 9110 14.2): the whole file, 200."""
    status, headers, body = request(server, "GET", "/vol/data.bin", {"Range": header})
    assert status == 200 and body == tree[1] and headers["content-length"] == str(SIZE)


def test_parse_range_unit():
    assert parse_range("bytes=0-0", 1) == (0, 1)
    assert parse_range("bytes=1-", 1) is False
    assert parse_range("bytes=-1", 0) is False
    assert parse_range("bytes=-", 10) is None


def test_head(server):
    for headers_in, status_want, length in [({}, 200, SIZE), ({"Range": "bytes=10-19"}, 206, 10)]:
        status, headers, body = request(server, "HEAD", "/vol/data.bin", headers_in)
        assert status == status_want and body == b""
        assert headers["content-length"] == str(length)
        assert_cors(headers)
    status, headers, body = request(server, "HEAD", "/vol/missing")
    assert status == 404 and body == b""


def test_cors_preflight(server):
    status, headers, body = request(server, "OPTIONS", "/vol/data.bin", {
        "Origin": "http://example.org",
        "Access-Control-Request-Method": "GET",
        "Access-Control-Request-Headers": "range",
    })
    assert status == 204 and body == b""
    assert headers["access-control-allow-origin"] == "*"
    assert "GET" in headers["access-control-allow-methods"]
    assert "range" in headers["access-control-allow-headers"].lower()
    status, headers, _ = request(server, "OPTIONS", "/vol/data.bin")
    assert status == 204 and "range" in headers["access-control-allow-headers"].lower()
    assert "access-control-allow-private-network" not in headers
    status, headers, _ = request(server, "OPTIONS", "/vol/data.bin", {
        "Origin": "https://neuroglancer-demo.appspot.com",
        "Access-Control-Request-Method": "GET",
        "Access-Control-Request-Private-Network": "true",
    })
    assert status == 204 and headers["access-control-allow-private-network"] == "true"


def test_not_found_has_cors(server):
    """A browser must see a 404 (a missing chunk), not a CORS failure."""
    status, headers, _ = request(server, "GET", "/vol/nothing-here")
    assert status == 404
    assert_cors(headers)


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_read_only(server, tree, method):
    status, headers, _ = request(server, method, "/vol/data.bin")
    assert status == 405 and "GET" in headers["allow"]
    assert (tree[0] / "vol" / "data.bin").read_bytes() == tree[1]


# ---------------------------------------------------------------- gzip
def test_gz_served_under_plain_name(server, tree):
    plain = tree[1][:3000]
    status, headers, body = request(server, "GET", "/vol/chunk", {"Accept-Encoding": "gzip"})
    assert status == 200 and headers["content-encoding"] == "gzip"
    assert headers["content-length"] == str(len(body)) and gzip.decompress(body) == plain
    # a client that does not accept gzip gets the decompressed bytes
    status, headers, body = request(server, "GET", "/vol/chunk", {"Accept-Encoding": "identity"})
    assert status == 200 and "content-encoding" not in headers and body == plain
    # urllib sends no Accept-Encoding
    with urllib.request.urlopen(f"{server.base_url}/vol/chunk") as resp:
        assert resp.read() == plain
    # ranges address the decompressed bytes
    status, headers, body = request(server, "GET", "/vol/chunk",
                                    {"Range": "bytes=100-199", "Accept-Encoding": "gzip"})
    assert status == 206 and body == plain[100:200] and "content-encoding" not in headers
    assert headers["content-range"] == "bytes 100-199/3000"
    # a coding with q=0 is refused (RFC 9110 12.5.3)
    for refused in ("gzip;q=0", "identity, gzip;q=0", "*, gzip;q=0", "*;q=0"):
        status, headers, body = request(server, "GET", "/vol/chunk", {"Accept-Encoding": refused})
        assert status == 200 and "content-encoding" not in headers and body == plain
    # NAME.gz responses have no ETag: an If-Match tag a client holds is not current
    status, _, _ = request(server, "GET", "/vol/chunk", {"If-Match": '"1-2-3"'})
    assert status == 412
    assert request(server, "GET", "/vol/chunk", {"If-Match": "*"})[0] == 200
    # the .gz file itself is an ordinary file
    status, headers, body = request(server, "GET", "/vol/chunk.gz", {"Accept-Encoding": "gzip"})
    assert status == 200 and "content-encoding" not in headers
    assert body == (tree[0] / "vol" / "chunk.gz").read_bytes()


# ------------------------------------------------------------- traversal
TRAVERSALS = [
    b"/../outside/secret.txt",
    b"/vol/../../outside/secret.txt",
    b"/%2e%2e/outside/secret.txt",
    b"/%2E%2E/outside/secret.txt",
    b"/vol/%2e%2e/%2e%2e/outside/secret.txt",
    b"/..%2foutside%2fsecret.txt",
    b"/%2e%2e%2foutside%2fsecret.txt",
    b"/vol%2f..%2f..%2foutside%2fsecret.txt",
    b"/..%5coutside%5csecret.txt",
    b"/..\\outside\\secret.txt",
    b"/%252e%252e/outside/secret.txt",
    b"/vol/link_out",
    b"/vol/dir_out/secret.txt",
    b"/vol/./../../outside/secret.txt",
    b"http://x/../outside/secret.txt",
    b"//../outside/secret.txt",
    b"/vol/data.bin%00",
    b"/%ff%fe",
]


@pytest.mark.parametrize("target", TRAVERSALS)
def test_no_traversal(server, tree, target):
    status, body = raw_request(server, target)
    assert status in (403, 404)
    assert SECRET not in body


def test_absolute_paths_stay_inside(server, tmp_path):
    """``/etc/passwd`` names ROOT/etc/passwd, never the system file."""
    assert raw_request(server, b"/etc/passwd")[0] == 404
    assert raw_request(server, os.fsencode(tmp_path) + b"/x")[0] == 404


def test_resolve_unit(tree):
    root = os.path.realpath(tree[0])
    assert resolve(root, "/vol/link_in") == os.path.join(root, "vol", "data.bin")
    assert resolve(root, "/vol/sub/a%20b%25.bin?x=1#y") == os.path.join(
        root, "vol", "sub", "a b%.bin")
    assert resolve(root, "/vol") is None  # directories are not served
    assert resolve(root, "/") is None


def test_symlink_inside_and_encoded_names(server, tree):
    assert request(server, "GET", "/vol/link_in")[2] == tree[1]
    assert request(server, "GET", "/vol/sub/a%20b%25.bin")[2] == b"spaces"


# ----------------------------------------------------------- concurrency
def test_many_concurrent_clients(server, tree):
    payload = tree[1]
    rng = np.random.default_rng(1)
    jobs = [sorted(rng.integers(0, SIZE, 2).tolist()) for _ in range(400)]
    host, port = server.server_address[:2]
    local = threading.local()
    conns = []

    def fetch(job):
        start, stop = job
        if not hasattr(local, "conn"):  # one keep-alive connection per client thread
            local.conn = http.client.HTTPConnection(host, port, timeout=30)
            conns.append(local.conn)
        local.conn.request("GET", "/vol/data.bin", headers={"Range": f"bytes={start}-{stop}"})
        resp = local.conn.getresponse()
        return resp.status, resp.read() == payload[start:stop + 1]

    with ThreadPoolExecutor(40) as pool:
        results = list(pool.map(fetch, jobs))
    for conn in conns:
        conn.close()
    assert len(conns) > 1
    assert all(r == (206, True) for r in results)


def test_keep_alive_survives_errors(server, tree):
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=10)
    for path, want in [("/vol/missing", 404), ("/vol/data.bin", 200), ("/vol/missing", 404),
                       ("/vol/info", 200)]:
        conn.request("GET", path)
        resp = conn.getresponse()
        resp.read()
        assert resp.status == want
    conn.close()


def test_access_records(server):
    before = len(server.accesses)
    request(server, "GET", "/vol/data.bin", {"Range": "bytes=0-9"})
    a = server.accesses[before]
    assert (a.client, a.method, a.path, a.range, a.status, a.length) == (
        "127.0.0.1", "GET", "/vol/data.bin", "bytes=0-9", 206, 10)


def test_etag_and_if_match(server, tree):
    """A strong ETag that changes when the file is replaced; If-Match per RFC 9110 (strong
    comparison; a list of tags; *); the gz representation carries none."""
    status, headers, _ = request(server, "GET", "/vol/data.bin", {"Range": "bytes=0-9"})
    etag = headers["etag"]
    assert status == 206 and etag.startswith('"') and "etag" in headers[
        "access-control-expose-headers"].lower()
    assert request(server, "HEAD", "/vol/data.bin")[1]["etag"] == etag
    for ok in (etag, f'"x", {etag}', "*"):
        status, _, body = request(server, "GET", "/vol/data.bin",
                                  {"Range": "bytes=0-9", "If-Match": ok})
        assert status == 206 and body == tree[1][:10]
    for bad in ('"x"', "W/" + etag):
        status, headers, body = request(server, "GET", "/vol/data.bin", {"If-Match": bad})
        assert status == 412 and body == b"" and headers["etag"] == etag
    assert "etag" not in request(server, "GET", "/vol/chunk")[1]
    path = tree[0] / "vol" / "replaced.bin"
    path.write_bytes(b"one")
    first = request(server, "GET", "/vol/replaced.bin")[1]["etag"]
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(b"two")
    os.replace(tmp, path)  # as shardvol writes: a new file renamed over the old
    status, headers, _ = request(server, "GET", "/vol/replaced.bin", {"If-Match": first})
    assert status == 412 and headers["etag"] != first


# ------------------------------------------------- shardvol's HTTP store
@pytest.mark.parametrize("sharding", [None, "auto", {
    "@type": "neuroglancer_uint64_sharded_v1", "hash": "murmurhash3_x86_128",
    "preshift_bits": 0, "minishard_bits": 2, "shard_bits": 2,
    "minishard_index_encoding": "gzip", "data_encoding": "gzip"}])
def test_shardvol_reads_through_server(tmp_path, sharding):
    rng = np.random.default_rng(2)
    data = rng.integers(0, 5, (70, 50, 20, 1)).astype(np.uint64)
    vol = Volume.create(str(tmp_path / "seg"), size=(70, 50, 20), type="segmentation",
                        data_type="uint64", chunk_size=(16, 16, 8), voxel_offset=(3, -4, 5),
                        encoding="compressed_segmentation", sharding=sharding)
    vol[...] = data
    if sharding is None:  # store every chunk the way CloudVolume's gzip option does: NAME.gz
        for path in (tmp_path / "seg").glob("*/*"):
            path.with_name(path.name + ".gz").write_bytes(gzip.compress(path.read_bytes()))
            path.unlink()
    with VolumeServer(str(tmp_path), port=0) as srv:
        srv.start()
        try:
            # (no decoded-chunk cache: its cached chunks would serve until a read sees a change)
            remote = Volume(f"{srv.base_url}/seg", cache_bytes=0)
            np.testing.assert_array_equal(remote[...], data)
            np.testing.assert_array_equal(remote[10:40, -4:7, 9:25], vol[10:40, -4:7, 9:25])
            if sharding is not None:  # shards rewritten here: the remote reader's cached
                data[:40] = rng.integers(0, 9, (40, 50, 20, 1))  # indexes are noticed
                vol[3:43] = data[:40]
                np.testing.assert_array_equal(remote[...], data)
        finally:
            srv.shutdown()


# ------------------------------------------------------------ discovery
def test_find_volumes(tmp_path):
    for rel in ["a/info", "a/4_4_40/info", "b/c/info", "z/zarr.json", "g/h/i/j/info.gz",
                "too/deep/x/y/z/info", ".hidden/info", "plain/file.txt"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("{}")
    found = sorted(find_volumes(str(tmp_path)))
    assert found == [("precomputed", "a"), ("precomputed", os.path.join("b", "c")),
                     ("precomputed", os.path.join("g", "h", "i", "j")), ("zarr3", "z")]
    assert source_url("http://127.0.0.1:9", "precomputed", "b/c d") == \
        "precomputed://http://127.0.0.1:9/b/c%20d"
    assert source_url("http://h:1", "precomputed", "") == "precomputed://http://h:1"


def test_a_file_cut_short_while_sent_ends_the_connection(tmp_path, monkeypatch):
    # the body is then shorter than its Content-Length: the connection must not carry on
    from shardvol.ops import serve

    (tmp_path / "big.bin").write_bytes(b"A" * 1000)
    (tmp_path / "small.bin").write_bytes(b"B" * 10)
    copy = serve.VolumeRequestHandler._copy

    def cut_then_copy(self, f, offset, count):
        if self.path == "/big.bin":
            os.truncate(tmp_path / "big.bin", 100)  # another program rewrites it in place
        return copy(self, f, offset, count)

    monkeypatch.setattr(serve.VolumeRequestHandler, "_copy", cut_then_copy)
    srv = VolumeServer(str(tmp_path), port=0, log=lambda line: None)
    srv.start()
    try:
        with socket.create_connection(srv.server_address[:2], timeout=10) as s:
            s.sendall(b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n"
                      b"GET /small.bin HTTP/1.1\r\nHost: x\r\n\r\n")
            data = b""
            while chunk := s.recv(65536):  # the server closes: no hang
                data += chunk
    finally:
        srv.shutdown()
        srv.server_close()
    assert data.count(b"HTTP/1.1 200") == 1 and data.endswith(b"A" * 100)


def test_the_access_log_escapes_control_characters(tmp_path):
    lines = []
    srv = VolumeServer(str(tmp_path), port=0, log=lines.append)
    srv.start()
    try:
        with socket.create_connection(srv.server_address[:2], timeout=10) as s:
            s.sendall(b"GET /x\x1b]0;owned\x07 HTTP/1.1\r\nHost: x\r\nRange: bytes=0-1\x1b[31m\r\n"
                      b"Connection: close\r\n\r\n")
            while s.recv(65536):
                pass
    finally:
        srv.shutdown()
        srv.server_close()
    assert lines and not any("\x1b" in line or "\x07" in line for line in lines)
    assert "\\x1b]0;owned\\x07" in lines[0]


# ------------------------------------------------------- limits and hard edges
@pytest.fixture
def small_server(tmp_path):
    """A server of a fresh directory with low limits; its log lines in ``srv.lines``."""
    made = []

    def make(**options):
        lines = []
        srv = VolumeServer(str(tmp_path), port=0, log=lines.append, **options)
        srv.lines = lines
        srv.start()
        made.append(srv)
        return srv

    yield make
    for srv in made:
        srv.shutdown()
        srv.server_close()


def _read_all(s: socket.socket) -> bytes:
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    return data


def test_headers_have_a_deadline_however_slowly_they_trickle(small_server):
    srv = small_server(header_timeout=1.0)
    with socket.create_connection(srv.server_address[:2], timeout=10) as s:
        start = time.monotonic()
        closed = False
        for byte in b"GET /x HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 40:
            try:
                s.sendall(bytes([byte]))
            except OSError:
                closed = True
                break
            s.settimeout(0.25)  # a byte every 0.25 s: each read's own wait is short
            try:
                if s.recv(1) == b"":
                    closed = True
                    break
            except TimeoutError:
                pass
        assert closed and time.monotonic() - start < 4
    # an idle keep-alive connection is closed at the deadline too; a prompt one is served
    with socket.create_connection(srv.server_address[:2], timeout=10) as s:
        start = time.monotonic()
        assert _read_all(s) == b"" and 0.5 < time.monotonic() - start < 4


def test_connections_beyond_the_cap_get_503_not_a_hang(small_server, tmp_path):
    (tmp_path / "f").write_bytes(b"hello")
    srv = small_server(max_connections=3)
    idle = [socket.create_connection(srv.server_address[:2], timeout=10) for _ in range(3)]
    try:
        time.sleep(0.2)
        with socket.create_connection(srv.server_address[:2], timeout=10) as s:
            s.sendall(b"GET /f HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _read_all(s).startswith(b"HTTP/1.1 503")
    finally:
        for s in idle:
            s.close()
    time.sleep(0.2)
    status, _, body = request(srv, "GET", "/f")
    assert (status, body) == (200, b"hello")
    assert any("refused: 3 connections open" in line for line in srv.lines)


def test_out_of_descriptors_the_server_neither_spins_nor_hangs(tmp_path):
    """With 64 descriptors and 100 idle clients, a new client is answered at once and the
    server stays idle (it spun, refusing everyone, when accept() failed with EMFILE)."""
    import resource

    (tmp_path / "f").write_bytes(b"hello")
    proc = subprocess.Popen(
        [sys.executable, "-m", "shardvol", "serve", str(tmp_path), "--port", "0", "-q"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64)))
    try:
        line = proc.stdout.readline()
        port = int(line.split("http://127.0.0.1:")[1].split("/")[0])
        idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(100)]
        time.sleep(1.0)
        ticks = os.sysconf("SC_CLK_TCK")

        def cpu() -> float:
            with open(f"/proc/{proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / ticks

        before = cpu()
        time.sleep(2.0)
        assert cpu() - before < 0.5
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"GET /f HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert _read_all(s).startswith(b"HTTP/1.1 503")
        for s in idle:
            s.close()
        time.sleep(0.5)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"GET /f HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert _read_all(s).endswith(b"hello")
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert "Traceback" not in err


def test_a_client_gone_mid_body_is_a_log_line_not_a_traceback(small_server, tmp_path, capfd):
    (tmp_path / "big").write_bytes(os.urandom(64 << 20))
    srv = small_server()
    for _ in range(3):
        with socket.create_connection(srv.server_address[:2], timeout=10) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
            s.recv(1000)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    time.sleep(0.5)
    assert "Traceback" not in capfd.readouterr().err
    assert sum("connection ended" in line for line in srv.lines) == 3


def test_a_body_on_a_get_is_never_read_as_a_request(server):
    smuggled = b"GET /vol/data.bin HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection(server.server_address[:2], timeout=10) as s:
        s.sendall(b"GET /vol/info HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                  % len(smuggled) + smuggled)
        data = _read_all(s)  # the server closes the connection: no hang
    assert data.count(b"HTTP/1.1 ") == 1 and data.endswith(b'{"hello": "world"}')
    assert b"Connection: close" in data


def test_gz_inflated_as_sent_in_bounded_memory(small_server, tmp_path):
    """A gzip file of 96 MiB of zeros (96 KiB stored) served to a client that does not take
    gzip: exact bytes, ranges of them, and the server's Python allocations stay far below
    the inflated size (it inflated the whole file in memory, per request)."""
    import tracemalloc

    plain = bytes(96 << 20)
    (tmp_path / "zeros.gz").write_bytes(gzip.compress(plain, 9) + gzip.compress(b"tail"))
    (tmp_path / "bad.gz").write_bytes(gzip.compress(b"x" * 1000)[:-30])
    srv = small_server()
    tracemalloc.start()
    try:
        status, headers, body = request(srv, "GET", "/zeros", {"Accept-Encoding": "identity"})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert status == 200 and body == plain + b"tail" and "content-encoding" not in headers
    assert int(headers["content-length"]) == len(plain) + 4
    assert peak - len(body) < 16 << 20
    status, headers, body = request(srv, "GET", "/zeros", {"Range": f"bytes={len(plain) - 2}-"})
    assert (status, body) == (206, b"\0\0tail")
    assert headers["content-range"] == f"bytes {len(plain) - 2}-{len(plain) + 3}/{len(plain) + 4}"
    status, headers, _ = request(srv, "HEAD", "/zeros")
    assert status == 200 and headers["content-length"] == str(len(plain) + 4)
    assert request(srv, "GET", "/bad", {"Accept-Encoding": "identity"})[0] == 500


def test_brotli_and_zstd_copies_are_served_to_clients_that_take_them(small_server, tmp_path):
    import brotli
    import zstandard

    plain = os.urandom(5000)
    (tmp_path / "a.br").write_bytes(brotli.compress(plain))
    (tmp_path / "b.zstd").write_bytes(zstandard.ZstdCompressor().compress(plain))
    srv = small_server()
    for name, coding, decode in (("a", "br", brotli.decompress),
                                 ("b", "zstd", zstandard.ZstdDecompressor().decompress)):
        status, headers, body = request(srv, "GET", f"/{name}",
                                        {"Accept-Encoding": f"gzip, {coding}"})
        assert status == 200 and headers["content-encoding"] == coding and decode(body) == plain
        status, _, body = request(srv, "GET", f"/{name}", {"Accept-Encoding": "gzip"})
        assert status == 406 and f"Accept-Encoding: {coding}" in body.decode()
    # shardvol's own HTTP store reads them decoded
    from shardvol.kvstore import open_store

    assert open_store(srv.base_url).get("a") == plain


def test_cors_origin_can_be_one_origin_or_none(small_server, tmp_path, capsys):
    (tmp_path / "f").write_bytes(b"x")
    one = small_server(cors_origin="https://neuroglancer-demo.appspot.com")
    _, headers, _ = request(one, "GET", "/f")
    assert headers["access-control-allow-origin"] == "https://neuroglancer-demo.appspot.com"
    assert "Origin" in headers["vary"]
    none = small_server(cors_origin=None)
    _, headers, _ = request(none, "GET", "/f")
    assert "access-control-allow-origin" not in headers
    status, headers, _ = request(none, "OPTIONS", "/f",
                                 {"Access-Control-Request-Private-Network": "true"})
    assert status == 204 and "access-control-allow-private-network" not in headers
    from shardvol.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="cors_origin"):
        VolumeServer(str(tmp_path), port=0, cors_origin="https://x.org\r\nX-Evil: 1")
