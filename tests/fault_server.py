"""An HTTP server that behaves like an object store on a bad day: latency, 503s, dropped
connections, bodies cut short or slow, hung requests.

It serves the files below a directory (GET and HEAD, one byte range, strong ETags,
``If-Match``; PUT and DELETE as S3 takes them: each file replaced whole, ``If-Match`` and
``If-None-Match: *``, the body checked against a signed ``X-Amz-Content-SHA256``), also
as the objects of GCS's JSON API (``/storage/v1/b/BUCKET/o/NAME`` is the file
``BUCKET/NAME``: its metadata, or its bytes with ``alt=media`` and their generation in
``x-goog-generation``; ``ifGenerationMatch``; media and multipart uploads, the latter's
``crc32c`` checked, and DELETEs; errors in JSON), or forwards
every request to an upstream server (``--upstream``: an S3 server such as moto's) and
injects the same faults into the answers.  It runs in its own
process, so that its work does not share the client's interpreter:

    python -m tests.fault_server ROOT [--latency 0.025] [--upstream URL]

prints ``PORT <n>`` once it listens.  Faults and latency are set at run time with
``POST /_faults`` (JSON, see :class:`Faults`), counted requests (and the most in flight at
once, in all and below each top-level directory) read with ``GET /_stats`` and reset with
``POST /_stats``.  :class:`FaultServer` starts and drives one from Python.
Independent of shardvol's code: it is the peer the stores are tested against.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import glob
import hashlib
import json
import logging
import os
import random
import re
import shutil
import subprocess
import sys
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any, BinaryIO

import crc32c
from aiohttp import ClientSession, ClientTimeout, web

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")
#: GCS's JSON API: an object's metadata, or with ``alt=media`` its bytes (also below
#: ``/download``, where clients send media downloads)
_GCS_OBJECT = re.compile(r"/(?:download/)?storage/v1/b/([^/]+)/o/(.+)")
_GCS_UPLOAD = re.compile(r"/upload/storage/v1/b/([^/]+)/o")  # (the name: a query field)
_S3_CODES = {400: "InvalidRequest", 403: "AccessDenied", 409: "ConditionalRequestConflict",
             412: "PreconditionFailed", 500: "InternalError", 503: "SlowDown"}
CONTROL = "/_"  # paths of the control endpoints start with this


@dataclass
class Faults:
    """What happens to the requests (control endpoints excepted).

    Each request is delayed by ``latency`` seconds before its answer (time to first
    byte); then at most one fault hits it, drawn with these probabilities: ``error``
    (answered ``error_status``, with ``Retry-After: retry_after`` if set), ``reset`` (the
    connection is dropped before any answer), ``lost`` (the request is carried out, by
    the upstream server too, then the connection is dropped before the answer),
    ``short`` (headers with the full Content-Length, half the body, then the connection
    is dropped), ``slow`` (the body trickles out over ``slow_seconds``), ``hang`` (no
    answer for an hour).  In front of an upstream (S3) server, errors come as S3's XML
    (``<Code>SlowDown</Code>`` for 503, ...).  ``plan``: the faults of the next requests,
    in the order the server has read them, before any drawn one ("error", "error <status>",
    "reset", "lost", "short", "slow", "hang" or "ok").  ``ignore_range``: ranges are
    answered with the whole file (200), as some servers do; ``wrong_range``: with the bytes
    from one past the start asked for (and a Content-Range that says so);
    ``ignore_if_match``: files are served whatever version ``If-Match`` (or a generation
    condition) asks for.
    """

    latency: float = 0.0
    error: float = 0.0
    error_status: int = 503
    retry_after: float | None = None
    reset: float = 0.0
    lost: float = 0.0
    short: float = 0.0
    slow: float = 0.0
    slow_seconds: float = 0.5
    hang: float = 0.0
    plan: list[str] = field(default_factory=list)
    ignore_range: bool = False
    wrong_range: bool = False
    ignore_if_match: bool = False
    seed: int | None = None


class _State:
    def __init__(self, faults: Faults) -> None:
        self.faults = faults
        self.rng = random.Random(faults.seed)
        self.stats: Counter[str] = Counter()
        self.in_flight = 0
        self.in_flight_below: Counter[str] = Counter()  # by the path's first segment

    def draw(self) -> str:
        f = self.faults
        if f.plan:
            return f.plan.pop(0)
        x = self.rng.random()
        for kind in ("error", "reset", "lost", "short", "slow", "hang"):
            p = getattr(f, kind)
            if x < p:
                return kind
            x -= p
        return "ok"


def _etag(st: os.stat_result) -> str:
    return f'"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}"'


def _write_file(request: web.Request, path: str, body: bytes,
                gcs: tuple[str, str] | None) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of the answer to an S3 PUT or DELETE (``gcs`` None), or to
    a GCS media or multipart upload or DELETE of (bucket, name), of the file at ``path``
    (replaced whole, atomically), with each API's conditions and errors."""
    exists = os.path.isfile(path)
    st = os.stat(path) if exists else None
    if gcs is not None:
        wanted = request.query.get("ifGenerationMatch")
        if wanted is not None and wanted != (_generation(st) if st else "0"):
            return _gcs_error(412, "Precondition Failed")
        if request.method == "DELETE" and not exists:
            return _gcs_error(404, f"No such object: {gcs[0]}/{gcs[1]}")
    else:
        wanted = request.headers.get("If-Match")
        if wanted is not None and st is None:
            return _s3_error(404, "NoSuchKey")
        if (wanted is not None and st is not None and wanted.strip() != _etag(st)) or (
                request.headers.get("If-None-Match", "").strip() == "*" and exists):
            return _s3_error(412, "PreconditionFailed")
        sha256 = request.headers.get("X-Amz-Content-SHA256", "UNSIGNED-PAYLOAD")
        if request.method == "PUT" and not sha256.startswith(("UNSIGNED", "STREAMING")) and (
                hashlib.sha256(body).hexdigest() != sha256):
            return _s3_error(400, "XAmzContentSHA256Mismatch")
    if request.method == "DELETE":
        if exists:
            os.unlink(path)
        return 204, {}, b""
    if gcs is not None:
        meta, body = (_multipart(request, body) if request.query.get("uploadType") == "multipart"
                      else ({}, body))
        crc = base64.b64encode(crc32c.crc32c(body).to_bytes(4, "big")).decode()
        if meta.get("crc32c", crc) != crc:
            return _gcs_error(400, "Provided CRC32C \"{}\" doesn't match calculated CRC32C "
                                   "\"{}\".".format(meta["crc32c"], crc))
    st = _replace_file(path, lambda f: f.write(body))
    if gcs is None:
        return 200, {"ETag": _etag(st)}, b""
    return 200, {"Content-Type": "application/json"}, json.dumps({
        "kind": "storage#object", "bucket": gcs[0], "name": gcs[1], "size": str(st.st_size),
        "generation": _generation(st), "metageneration": "1", "crc32c": crc}).encode()


def _replace_file(path: str, write: Callable[[BinaryIO], object]) -> os.stat_result:
    """Replace the file at ``path`` (or create it) atomically by what ``write`` writes to
    a file beside it; the new file's stat."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temporary = f"{path}.{os.getpid()}.{random.getrandbits(48):x}.part"
    with open(temporary, "wb") as f:
        write(f)
    os.replace(temporary, path)
    return os.stat(path)


def _s3_multipart(request: web.Request, path: str,
                  body: bytes) -> tuple[int, dict[str, str], bytes]:
    """S3's multipart uploads of the file at ``path``: created (``?uploads``), parts put
    (``?partNumber&uploadId``: files beside it), completed (the parts joined into the file,
    atomically; ``If-None-Match: *`` honoured) or aborted (``DELETE ?uploadId``)."""
    query = request.query
    if "uploads" in query:
        upload = f"{random.getrandbits(64):016x}"
        return 200, {"Content-Type": "application/xml"}, (
            "<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key>"
            f"<UploadId>{upload}</UploadId></InitiateMultipartUploadResult>").encode()
    upload = query["uploadId"]
    if not re.fullmatch(r"[0-9a-f]{16}", upload):
        return _s3_error(404, "NoSuchUpload")
    part = f"{path}.upload-{upload}-"
    parts = sorted(glob.glob(glob.escape(part) + "*"), key=lambda p: int(p.rsplit("-", 1)[1]))
    if request.method == "DELETE":
        for p in parts:
            os.unlink(p)
        return 204, {}, b""
    if request.method == "PUT":
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(part + str(int(query["partNumber"])), "wb") as f:
            f.write(body)
        return 200, {"ETag": f'"{hashlib.md5(body).hexdigest()}"'}, b""
    if not parts:
        return _s3_error(404, "NoSuchUpload")
    if request.headers.get("If-None-Match", "").strip() == "*" and os.path.isfile(path):
        return _s3_error(412, "PreconditionFailed")
    def join(out: BinaryIO) -> None:
        for p in parts:
            with open(p, "rb") as f:
                shutil.copyfileobj(f, out, 16 << 20)

    etag = _etag(_replace_file(path, join))
    for p in parts:
        os.unlink(p)
    return 200, {"Content-Type": "application/xml"}, (
        f"<CompleteMultipartUploadResult><ETag>{etag}</ETag>"
        "</CompleteMultipartUploadResult>").encode()


def _multipart(request: web.Request, body: bytes,
               metadata_only: bool = False) -> tuple[dict, bytes]:
    """The metadata and the object's bytes of a GCS multipart upload (lines ended by CRLF
    or LF)."""
    separator = b"--" + request.headers["Content-Type"].split("boundary=", 1)[1].strip(
        '"').encode()
    first = body.index(separator) + len(separator)
    second = body.index(separator, first)
    meta = json.loads(re.split(rb"\r?\n\r?\n", body[first:second], maxsplit=1)[1])
    if metadata_only:
        return meta, b""
    end = body.rindex(separator + b"--")
    data = memoryview(body)[second + len(separator):end]
    start = re.search(rb"\r?\n\r?\n", data).end()  # type: ignore[union-attr]
    return meta, bytes(data[start:]).removesuffix(b"\n").removesuffix(b"\r")


def _s3_error(status: int, code: str) -> tuple[int, dict[str, str], bytes]:
    return status, {"Content-Type": "application/xml"}, (
        f"<Error><Code>{code}</Code><Message>{code}</Message></Error>".encode())


def _gcs_error(status: int, message: str) -> tuple[int, dict[str, str], bytes]:
    return status, {"Content-Type": "application/json"}, json.dumps(
        {"error": {"code": status, "message": message}}).encode()


def _generation(st: os.stat_result) -> str:
    """A GCS generation of the file: a positive integer that changes when it is replaced."""
    return str((st.st_mtime_ns * 4099 + st.st_ino) % (1 << 62) + 1)


def _byte_range(header: str | None, size: int) -> tuple[int, int] | str | None:
    """(start, stop) of a Range header; None without one; "bad" or "unsatisfiable"."""
    if not header:
        return None
    m = _RANGE.match(header.strip())
    if not m or (not m.group(1) and not m.group(2)):
        return "bad"
    if m.group(1):
        start = int(m.group(1))
        stop = min(size, int(m.group(2)) + 1) if m.group(2) else size
    else:
        start, stop = max(0, size - int(m.group(2))), size
    if start >= size or stop <= start:
        return "unsatisfiable"
    return start, stop


async def _deliver(request: web.Request, state: _State, status: int, headers: dict[str, str],
                   body: bytes, fault: str, length: int | None = None) -> web.StreamResponse:
    """Send an answer, with the body fault ``fault`` (short, slow) applied; ``length``: the
    Content-Length (of a HEAD's body not sent), else the body's."""
    if fault == "lost":
        assert request.transport is not None
        request.transport.abort()
        return web.Response()
    resp = web.StreamResponse(status=status, headers=headers)
    resp.content_length = len(body) if length is None else length
    await resp.prepare(request)
    if request.method == "HEAD" or not body:
        await resp.write_eof()
        return resp
    if fault == "short":
        await resp.write(body[: len(body) // 2])
        state.stats["bytes"] += len(body) // 2
        assert request.transport is not None
        request.transport.abort()
        return resp
    if fault == "slow":
        pieces = 10
        step = -(-len(body) // pieces)
        for i in range(0, len(body), step):
            await resp.write(body[i : i + step])
            await asyncio.sleep(state.faults.slow_seconds / pieces)
    else:
        await resp.write(body)
    state.stats["bytes"] += len(body)
    await resp.write_eof()
    return resp


async def _send_file(request: web.Request, state: _State, status: int,
                     headers: dict[str, str], f: Any, start: int, stop: int) -> web.StreamResponse:
    """Answer with bytes ``[start, stop)`` of the open file ``f`` by sendfile(2): the
    server's copies would otherwise take the CPU the clients measured beside it need."""
    resp = web.StreamResponse(status=status, headers=headers)
    resp.content_length = stop - start
    await resp.prepare(request)
    if stop > start:
        assert request.transport is not None
        await asyncio.get_running_loop().sendfile(request.transport, f, start, stop - start)
    state.stats["bytes"] += stop - start
    await resp.write_eof()
    return resp


def make_app(root: str, faults: Faults, upstream: str | None = None) -> web.Application:
    state = _State(faults)
    app = web.Application(client_max_size=1 << 31)
    sessions: list[ClientSession] = []

    async def control(request: web.Request) -> web.Response:
        if request.path == "/_faults" and request.method == "POST":
            given = await request.json()
            names = {f.name for f in fields(Faults)}
            unknown = set(given) - names
            if unknown:
                return web.json_response({"unknown": sorted(unknown)}, status=400)
            state.faults = Faults(**{**asdict(state.faults), **given})
            if "seed" in given:
                state.rng = random.Random(given["seed"])
            return web.json_response(asdict(state.faults))
        if request.path == "/_stats":
            out = dict(state.stats)
            if request.method == "POST":
                state.stats.clear()
            return web.json_response(out)
        return web.json_response({"error": "unknown control path"}, status=404)

    async def handle(request: web.Request) -> web.StreamResponse:
        if request.path.startswith(CONTROL):
            return await control(request)
        gcs = _GCS_OBJECT.fullmatch(request.path)  # (a GCS object's top: its bucket)
        top = "/" + (request.path.lstrip("/").split("/", 1)[0] if gcs is None else gcs[1])
        state.in_flight += 1
        state.in_flight_below[top] += 1
        state.stats["max in flight"] = max(state.stats["max in flight"], state.in_flight)
        peak = f"max in flight {top}"
        state.stats[peak] = max(state.stats[peak], state.in_flight_below[top])
        try:
            resp = await answer(request)
            state.stats[f"status {resp.status}"] += 1
            return resp
        finally:
            state.in_flight -= 1
            state.in_flight_below[top] -= 1

    async def answer(request: web.Request) -> web.StreamResponse:
        body_in = await request.read()
        state.stats["requests"] += 1
        state.stats[request.method] += 1
        for name in ("Range", "Authorization"):
            if name in request.headers:
                state.stats[f"{name} {request.headers[name]}"] += 1
        fault = state.draw()
        state.stats[f"fault {fault}"] += 1
        if state.faults.latency:
            await asyncio.sleep(state.faults.latency)
        if fault == "hang":
            await asyncio.sleep(3600)
        if fault == "reset":
            assert request.transport is not None
            request.transport.abort()
            return web.Response()
        if fault.startswith("error"):
            headers = {}
            if state.faults.retry_after is not None:
                headers["Retry-After"] = f"{state.faults.retry_after:g}"
            status = int(fault.split()[1]) if " " in fault else state.faults.error_status
            if _GCS_OBJECT.fullmatch(request.path):  # (as GCS's JSON API words its errors)
                return web.json_response({"error": {"code": status, "message": "injected"}},
                                         status=status, headers=headers)
            if upstream is None:
                return web.Response(status=status, headers=headers, text="SlowDown")
            code = _S3_CODES.get(status, "InternalError")  # (as S3 words its errors)
            return web.Response(status=status, headers=headers, content_type="application/xml",
                                text=f"<Error><Code>{code}</Code><Message>injected</Message>"
                                     "</Error>")
        if upstream is not None:
            return await forward(request, body_in, fault)
        return await serve_file(request, fault, body_in)

    async def serve_file(request: web.Request, fault: str,
                         body_in: bytes) -> web.StreamResponse:
        gcs = _GCS_OBJECT.fullmatch(request.path)
        upload = _GCS_UPLOAD.fullmatch(request.path)
        if upload is not None and request.method == "POST":
            kind = request.query.get("uploadType")
            if kind == "multipart":  # (the name is in the metadata, the first part)
                name = _multipart(request, body_in, metadata_only=True)[0]["name"]
            elif kind == "media" and "name" in request.query:
                name = request.query["name"]
            else:
                return web.Response(status=501)
            target: tuple[str, str] | None = (upload[1], name)
        elif gcs is not None:
            target = (gcs[1], gcs[2])
        else:
            target = None
        multipart = target is None and ("uploads" in request.query
                                        or "uploadId" in request.query)
        writes = (("DELETE", "POST") if target is not None else
                  ("PUT", "DELETE", "POST") if multipart else ("PUT", "DELETE"))
        if request.method not in ("GET", "HEAD", *writes) or (
                request.method == "POST" and upload is None and not multipart):
            return web.Response(status=405)
        name = request.path.lstrip("/") if target is None else "/".join(target)
        path = os.path.realpath(os.path.join(root, name))
        if not path.startswith(os.path.realpath(root) + os.sep):
            return web.Response(status=403)
        if request.method in writes:
            status, headers, body = (_s3_multipart(request, path, body_in) if multipart
                                     else _write_file(request, path, body_in, target))
            return await _deliver(request, state, status, headers, body, fault)
        if not os.path.isfile(path):
            if gcs is not None:
                return web.json_response({"error": {"code": 404, "message": "No such object: "
                                                    f"{gcs[1]}/{gcs[2]}"}}, status=404)
            return web.Response(status=404)
        with open(path, "rb") as f:  # (only the bytes asked for are read)
            st = os.fstat(f.fileno())
            size = st.st_size
            etag, generation = _etag(st), _generation(st)
            wanted = None if state.faults.ignore_if_match else request.headers.get("If-Match")
            wanted_generation = (None if gcs is None or state.faults.ignore_if_match
                                 else request.query.get("ifGenerationMatch"))
            if (wanted is not None and wanted.strip() not in ("*", etag)) or (
                    wanted_generation is not None and wanted_generation != generation):
                return web.Response(status=412)
            if gcs is not None and request.query.get("alt") != "media":
                return web.json_response({
                    "kind": "storage#object", "bucket": gcs[1], "name": gcs[2],
                    "size": str(size), "generation": generation, "metageneration": "1",
                    "etag": etag, "updated": "2026-01-01T00:00:00.000Z"})
            headers = {"ETag": etag, "Accept-Ranges": "bytes",
                       "Content-Type": "application/octet-stream"}
            if gcs is not None:
                headers["x-goog-generation"] = generation
            span = None if state.faults.ignore_range else _byte_range(
                request.headers.get("Range"), size)
            if span == "bad":
                return web.Response(status=400)
            if span == "unsatisfiable":
                return web.Response(status=416, headers={"Content-Range": f"bytes */{size}"})
            if span is None:
                start, stop = 0, size
            else:
                assert isinstance(span, tuple)
                start, stop = span
                if state.faults.wrong_range and start + 1 < stop:
                    start += 1  # (the answer says so in its Content-Range)
                headers["Content-Range"] = f"bytes {start}-{stop - 1}/{size}"
            status = 200 if span is None else 206
            if request.method == "GET" and fault == "ok":
                return await _send_file(request, state, status, headers, f, start, stop)
            f.seek(start)
            data = f.read(stop - start) if request.method == "GET" else b""
            return await _deliver(request, state, status, headers, data, fault, stop - start)

    async def forward(request: web.Request, body_in: bytes, fault: str) -> web.StreamResponse:
        if not sessions:
            sessions.append(ClientSession(timeout=ClientTimeout(total=None),
                                          auto_decompress=False))
        assert upstream is not None
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() not in ("content-length", "transfer-encoding")}
        async with sessions[0].request(request.method, upstream + request.path_qs,
                                       headers=headers, data=body_in,
                                       allow_redirects=False) as r:
            body = await r.read()
            out = {k: v for k, v in r.headers.items()
                   if k.lower() not in ("content-length", "transfer-encoding", "connection",
                                        "content-encoding")}
            return await _deliver(request, state, r.status, out, body, fault)

    async def close_sessions(_app: web.Application) -> None:
        for s in sessions:
            await s.close()

    app.router.add_route("*", "/{tail:.*}", handle)
    app.on_cleanup.append(close_sessions)
    return app


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", help="directory whose files are served")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--latency", type=float, default=0.0)
    ap.add_argument("--upstream", help="forward every request to this server instead")
    args = ap.parse_args(argv)
    logging.getLogger("aiohttp").setLevel(logging.CRITICAL)

    async def run() -> None:
        runner = web.AppRunner(make_app(args.root, Faults(latency=args.latency),
                                        args.upstream), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", args.port, backlog=1024)
        await site.start()
        port = runner.addresses[0][1]
        print(f"PORT {port}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(run())


class FaultServer:
    """A fault server in a child process: ``url``, ``set(**faults)``, ``stats()``, ``close()``."""

    def __init__(self, root: str, latency: float = 0.0, upstream: str | None = None) -> None:
        cmd = [sys.executable, "-m", "tests.fault_server", root, "--latency", str(latency)]
        if upstream:
            cmd += ["--upstream", upstream]
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        self.proc = subprocess.Popen(cmd, cwd=here, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("PORT "):
            self.proc.kill()
            raise RuntimeError(f"fault server did not start: {line!r}")
        self.url = f"http://127.0.0.1:{int(line.split()[1])}"

    def _call(self, path: str, payload: dict[str, Any] | None = None,
              method: str = "GET") -> dict[str, Any]:
        data = None if payload is None else json.dumps(payload).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        with urllib.request.urlopen(req, timeout=10) as r:
            result: dict[str, Any] = json.loads(r.read())
            return result

    def set(self, **faults: Any) -> dict[str, Any]:
        """Change the faults (fields of :class:`Faults`; the others keep their values)."""
        return self._call("/_faults", faults, "POST")

    def stats(self, reset: bool = False) -> Counter[str]:
        """Requests counted so far (``requests``, by method, ``fault <kind>``, ``bytes``,
        ``max in flight``: the most answered at once, and ``max in flight /<name>``: the
        most at once below the path's first segment ``/<name>`` (a GCS object's: its
        bucket), ``Range <header>``: by range asked, ``Authorization <header>``: by
        credentials sent, ``status <n>``: by status answered)."""
        return Counter(self._call("/_stats", {} if reset else None,
                                  "POST" if reset else "GET"))

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> FaultServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if __name__ == "__main__":
    main()
