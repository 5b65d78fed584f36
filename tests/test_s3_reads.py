"""S3 reads through shardvol's client: SigV4 signatures (against botocore's signer, and
against moto's server checking them), the URLs botocore gives a bucket's keys, S3's error
answers, and the buckets whose reads go back to botocore."""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import pickle
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from urllib.parse import quote

import numpy as np
import pytest
from botocore.auth import S3SigV4Auth, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials

from shardvol import Volume
from shardvol.errors import StoreError
from shardvol.kvstore.fsspec_store import FsspecStore
from shardvol.kvstore.s3_reads import S3Reads, _Bucket, botocore_client
from shardvol.kvstore.sigv4 import Credentials, payload_hash, query, signed_headers

from .s3_server import new_bucket, public_http_url


def _botocore_signature(method: str, url: str, headers: dict[str, str],
                        creds: Credentials, region: str, service: str, body: bytes) -> str:
    """The Authorization header botocore's S3 signer makes for the same request (with
    ``body``, whose hash it checks) at the time the headers state (as a server that checks
    signatures recomputes it)."""
    request = AWSRequest(method=method, url=url, data=body,
                         headers={k: v for k, v in headers.items() if k != "Authorization"})
    request.context["timestamp"] = headers["X-Amz-Date"]
    auth = S3SigV4Auth(BotoCredentials(*creds), service, region)
    assert SigV4Auth.payload(auth, request) == headers["X-Amz-Content-SHA256"]
    canonical = auth.canonical_request(request)
    signature = auth.signature(auth.string_to_sign(request, canonical), request)
    scope = f"{headers['X-Amz-Date'][:8]}/{region}/{service}/aws4_request"
    return (f"AWS4-HMAC-SHA256 Credential={creds.access_key}/{scope}, SignedHeaders="
            f"{auth.signed_headers(auth.headers_to_sign(request))}, Signature={signature}")


def test_signatures_are_botocores():
    """Random methods, bodies (hashed in parts), keys (any characters, percent-encoded as
    S3 takes them), queries, hosts, ports, credentials with and without a session token,
    regions, services, times."""
    rng = np.random.default_rng(7)
    alphabet = [*"abcXYZ019-_.~/ !*'()&$@=;:+,?#[]%\"<>^`{|}", "é", "✓", "\xa0"]
    for _ in range(200):
        key = "".join(rng.choice(alphabet, rng.integers(1, 40))).lstrip("/") or "k"
        host = rng.choice(["bucket.s3.us-west-2.amazonaws.com", "127.0.0.1:9000",
                           "S3.Example.COM", "[::1]:8080"])
        url = f"{rng.choice(['http', 'https'])}://{host}/{'b/' * int(rng.integers(0, 2))}" \
              f"{quote(key, safe='/~')}"
        names = ["uploads", "partNumber", "uploadId", "a", "a-b", "Z", "x y"]
        fields = [(str(rng.choice(names)), "".join(rng.choice(alphabet, rng.integers(0, 8))))
                  for _ in range(int(rng.integers(0, 4)))]
        if fields:
            url += "?" + query(fields)
        creds = Credentials(f"AK{rng.integers(1 << 40)}", f"s/{rng.integers(1 << 60)}+=",
                            None if rng.random() < 0.5 else f"tok/{rng.integers(1 << 60)}==")
        region = str(rng.choice(["us-east-1", "eu-central-1", "ap-southeast-2"]))
        service = str(rng.choice(["s3", "s3-object-lambda"]))
        now = datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(
            seconds=int(rng.integers(0, 10 ** 9)))
        method = str(rng.choice(["GET", "HEAD", "PUT", "DELETE"]))
        body = rng.bytes(int(rng.integers(0, 3000))) if method == "PUT" else b""
        cuts = sorted(rng.integers(0, len(body) + 1, 3))
        parts = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)])]
        headers = signed_headers(method, url, creds, region, service, now,
                                 payload_hash(parts))
        assert headers["Authorization"] == _botocore_signature(method, url, headers, creds,
                                                               region, service, body), url
        assert headers["X-Amz-Date"] == now.strftime("%Y%m%dT%H%M%SZ")
        assert ("X-Amz-Security-Token" in headers) == (creds.token is not None)


@contextlib.contextmanager
def _signatures_checked(s3: str) -> Iterator[tuple[str, str]]:
    """An IAM user allowed every S3 action, and moto checking every request's signature
    until the end: (access key, secret)."""
    import boto3

    iam = boto3.client("iam", endpoint_url=s3)
    name = f"u{np.random.default_rng().integers(1 << 40)}"
    iam.create_user(UserName=name)
    iam.put_user_policy(UserName=name, PolicyName="all", PolicyDocument=json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
    key = iam.create_access_key(UserName=name)["AccessKey"]

    def checking(count: str) -> None:
        urllib.request.urlopen(urllib.request.Request(
            f"{s3}/moto-api/reset-auth", data=count.encode(), method="POST",
            headers={"Content-Type": "text/plain"})).read()

    checking("0")
    try:
        yield key["AccessKeyId"], key["SecretAccessKey"]
    finally:
        checking("inf")


@pytest.mark.parametrize("resolver", ["shardvol", "botocore"])
def test_moto_accepts_the_signatures_and_refuses_a_wrong_secret(s3, resolver, monkeypatch):
    """A volume written, then read through the client from a server that checks every
    signature (whole values, ranges, streamed shards); with a wrong secret, a clear error
    naming S3's code.  The bucket's URL and region resolved by the reads themselves, or
    by botocore's client (a setting they leave to it: here one that changes nothing)."""
    if resolver == "botocore":
        monkeypatch.setenv("AWS_USE_FIPS_ENDPOINT", "false")
    bucket = new_bucket()
    data = np.random.default_rng(2).integers(0, 1 << 16, (48, 40, 36, 1), dtype=np.uint16)
    spec = {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 0, "hash": "identity",
            "minishard_bits": 1, "shard_bits": 1, "minishard_index_encoding": "gzip",
            "data_encoding": "gzip"}
    for name, sharding in (("plain", None), ("sharded", spec)):
        Volume.create(f"{bucket}/{name}", size=data.shape[:3], data_type="uint16",
                      chunk_size=[16, 16, 16], encoding="raw", sharding=sharding)[...] = data
    with _signatures_checked(s3) as (access, secret):  # (after the writes: the tests' user)
        for name in ("plain", "sharded"):
            store = FsspecStore(f"{bucket}/{name}", skip_instance_cache=True, key=access,
                                secret=secret)
            assert isinstance(store._gets, S3Reads)
            assert (store._gets.direct.transport.static is None) == (resolver == "botocore")
            vol = Volume(store, cache_bytes=0)
            assert np.array_equal(vol[...], data)
            assert np.array_equal(vol[5:37, 3:29, 1:33], data[5:37, 3:29, 1:33])
            assert store.get("info", (0, 1)) == b"{"
            assert store.get("absent") is None
        wrong = FsspecStore(f"{bucket}/plain", skip_instance_cache=True, key=access,
                            secret=secret + "x")
        with pytest.raises(StoreError, match="SignatureDoesNotMatch"):
            wrong.get("info")


def test_anonymous_reads_of_a_public_bucket_are_not_signed(s3):
    bucket = new_bucket()
    FsspecStore(bucket, skip_instance_cache=True).set("k/a b", b"public")
    public_http_url(s3, bucket)
    store = FsspecStore(bucket, anon=True, skip_instance_cache=True)
    assert store.get("k/a b") == b"public" and store.get("k/a b", (1, 3)) == b"ub"
    assert store.get("absent") is None
    assert store._gets.direct.transport._buckets[bucket.removeprefix("s3://")].region is None


def test_a_bucket_that_does_not_exist_is_an_error_not_a_missing_key(s3):
    store = FsspecStore(f"s3://no-such-bucket-{np.random.default_rng().integers(1 << 30)}/r",
                        skip_instance_cache=True)
    with pytest.raises(StoreError, match="NoSuchBucket"):
        store.get("info")


class _OtherRegion:
    """A server that answers every request as S3 answers one signed for the wrong region
    (301, ``x-amz-bucket-region``), counting them."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.requests = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                self.requests += 1
                body = (b"<Error><Code>PermanentRedirect</Code><Message>elsewhere</Message>"
                        b"</Error>")
                conn.sendall(b"HTTP/1.1 301 Moved Permanently\r\nx-amz-bucket-region: "
                             b"eu-west-1\r\nConnection: close\r\nContent-Length: "
                             + str(len(body)).encode() + b"\r\n\r\n" + body)


@pytest.mark.parametrize("first", ["get", "set", "set_if", "delete"])
def test_a_bucket_in_another_region_is_read_and_written_through_botocore(s3, first):
    """S3 says the bucket is elsewhere: that request and the later ones of the bucket,
    reads and writes, go through botocore (which follows S3 there), with the same
    answers."""
    bucket = new_bucket()
    store = FsspecStore(bucket, skip_instance_cache=True)
    store.set("k", b"value")
    reads = store._gets
    assert isinstance(reads, S3Reads)
    elsewhere = _OtherRegion()
    name = bucket.removeprefix("s3://")
    reads.direct.transport._buckets[name] = _Bucket(f"{elsewhere.url}/{name}/", "us-east-1",
                                                    "s3")
    ops = {"get": lambda: store.get("k") == b"value",
           "set": lambda: store.set("k2", b"two") is None,
           "set_if": lambda: store.set_if("k3", b"three", None),
           "delete": lambda: store.delete("gone") is None}
    assert ops.pop(first)() and all(op() for op in ops.values())
    assert store.get("k", (1, 3)) == b"al" and store.get("absent") is None
    assert not store.set_if("k3", b"other", None) and store.get("k3") == b"three"
    store.delete("k2")
    assert store.get("k2") is None
    assert elsewhere.requests == 1
    elsewhere.sock.close()


@pytest.mark.parametrize("options", [{"requester_pays": True},
                                     {"s3_additional_kwargs": {"ServerSideEncryption": "AES256"}},
                                     {"client_kwargs": {"verify": False}},
                                     {"config_kwargs": {"proxies": {}}},
                                     {"version_aware": True}])
def test_options_the_client_does_not_follow_keep_botocores_reads(s3, options):
    bucket = new_bucket()
    FsspecStore(bucket, skip_instance_cache=True).set("k", b"v")
    store = FsspecStore(bucket, skip_instance_cache=True, **options)
    assert not isinstance(store._gets, S3Reads)
    assert store.get("k") == b"v"


def test_stores_share_botocores_parsed_models(s3):
    """Opening another S3 store does not parse botocore's models again."""
    a, b = (FsspecStore(new_bucket(), skip_instance_cache=True) for _ in range(2))
    assert a.fs is not b.fs and a.fs.session is not b.fs.session
    assert a.fs.session.get_component("data_loader") is b.fs.session.get_component(
        "data_loader")


def test_a_store_that_reads_and_writes_makes_no_s3fs_filesystem(s3):
    """Reads and writes take botocore's own client for the bucket's URL and credentials (or
    none): a process that writes a volume, takes a lock, updates by compare-and-swap,
    uploads a value in parts and reads imports neither s3fs, aiobotocore nor aiohttp (a
    fresh process's largest imports); a listing makes s3fs's filesystem then, and a store
    pickled before its first read reads where it is unpickled."""
    bucket = new_bucket()
    data = np.random.default_rng(4).integers(0, 255, (30, 20, 10, 1), dtype=np.uint8)
    script = ("import sys, numpy as np, shardvol\n"
              "from shardvol.kvstore.fsspec_store import FsspecStore\n"
              "data = np.random.default_rng(4).integers(0, 255, (30, 20, 10, 1), np.uint8)\n"
              "shardvol.Volume.create(sys.argv[1], size=data.shape[:3], data_type='uint8',\n"
              "                       chunk_size=[16, 16, 8])[...] = data\n"
              "store = FsspecStore(sys.argv[1])\n"
              "with store.lock('locked'):\n"
              "    store.set('locked', b'1')\n"
              "assert store.set_if('cas', b'a', None) and not store.set_if('cas', b'b', None)\n"
              "FsspecStore(sys.argv[1], multipart_threshold=5 << 20, part_size=5 << 20).set(\n"
              "    'big', bytes(range(256)) * 45_000)  # (in parts)\n"
              "store.delete('locked')\n"
              "vol = shardvol.open(sys.argv[1])\n"
              "print(vol[...].sum(), sorted({m.split('.')[0] for m in sys.modules\n"
              "      if m.split('.')[0] in ('s3fs', 'aiobotocore', 'aiohttp')}))\n")
    done = subprocess.run([sys.executable, "-c", script, f"{bucket}/v"], capture_output=True,
                          text=True, timeout=120)
    assert done.stdout.split() == [str(int(data.sum())), "[]"], done.stderr
    assert [k for k in FsspecStore(f"{bucket}/v").list() if "/" not in k] == [
        "big", "cas", "info"]
    assert FsspecStore(f"{bucket}/v").get("big") == bytes(range(256)) * 45_000
    store = FsspecStore(f"{bucket}/v", skip_instance_cache=True)
    assert store.get("cas") == b"a"
    again = pickle.loads(pickle.dumps(store))
    assert np.array_equal(Volume(again)[...], data) and again._fs is None
    store.set("k", b"v")
    assert store._fs is None and again.get("k") == b"v"
    assert "k" in store.list() and store._fs is not None


def test_no_credentials_anywhere_is_an_error_that_says_so(s3, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ENDPOINT_URL=s3, AWS_EC2_METADATA_DISABLED="true",
               AWS_CONFIG_FILE=str(tmp_path / "none"),
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"))
    script = ("from shardvol.kvstore.fsspec_store import FsspecStore\n"
              "FsspecStore('s3://some-bucket/v', retries=0).get('info')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 1
    assert "no AWS credentials found" in done.stderr and "anon=True" in done.stderr


def test_credentials_about_to_run_out_are_refreshed_off_the_event_loop(s3):
    """botocore refreshes temporary credentials with blocking requests (STS, the instance's
    metadata): on the event loop that would stall every transfer there."""
    from botocore.credentials import RefreshableCredentials

    bucket = new_bucket()
    FsspecStore(bucket, skip_instance_cache=True).set("k", b"value")
    threads: list[str] = []

    def refresh() -> dict[str, str]:
        threads.append(threading.current_thread().name)
        later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
        return {"access_key": "AK2", "secret_key": "s2", "token": "t2",
                "expiry_time": later.isoformat()}

    store = FsspecStore(bucket, skip_instance_cache=True)
    transport = store._gets.direct.transport
    transport.static = None  # (credentials of botocore's finding: here, temporary ones)
    transport._client = botocore_client(transport.options)
    soon = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=300)
    transport._client._request_signer._credentials = RefreshableCredentials(
        "AK1", "s1", "t1", soon, refresh, "test")
    assert store.get("k") == b"value" and store.get("k", (1, 3)) == b"al"
    assert len(threads) == 1 and threads[0] != "fsspecIO"


_CONFIGS = [  # (options, environment besides the credentials)
    ({}, {}), ({"anon": True}, {}), ({"key": "k2", "secret": "s2"}, {}),
    ({"key": "k2", "secret": "s2", "token": "t2"}, {"AWS_SESSION_TOKEN": "t1"}),
    ({}, {"AWS_SESSION_TOKEN": "t1"}), ({}, {"AWS_DEFAULT_REGION": "eu-central-1"}),
    ({"anon": True}, {"AWS_DEFAULT_REGION": "us-west-2"}),
    ({"client_kwargs": {"region_name": "ap-southeast-2"}}, {"AWS_DEFAULT_REGION": "eu-west-1"}),
    ({"endpoint_url": "http://127.0.0.1:9000"}, {}),
    ({"client_kwargs": {"endpoint_url": "https://minio.example.org/base/"}}, {}),
    ({}, {"AWS_ENDPOINT_URL": "http://a.example:1", "AWS_ENDPOINT_URL_S3": "http://b:2"}),
    ({}, {"AWS_ENDPOINT_URL": "http://a.example:1/"}),
    ({"use_ssl": False}, {"AWS_DEFAULT_REGION": "sa-east-1"}),
    ({"config_kwargs": {"retries": {"total_max_attempts": 1}, "read_timeout": 5}}, {}),
]
_BUCKETS = ["mybucket", "my.bucket", "ab", "My_Bucket", "a-b-c", "1.2.3.4", "x" * 63, "-x1"]


def test_a_store_configured_by_its_options_and_environment_resolves_as_botocore_does(
        monkeypatch, tmp_path):
    """When only the options, the environment and the default profile's region and keys
    in the shared files say it, a bucket's URL, the region signed for and the credentials
    are resolved without botocore (its import and client are some 150 ms of a fresh
    process): each as botocore's own client resolves them, which is the oracle here;
    anything else is left to botocore."""
    from shardvol.kvstore.s3_reads import _locate, static

    for k in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for options, env in _CONFIGS:
        with monkeypatch.context() as m:
            m.setenv("AWS_ACCESS_KEY_ID", "k1")
            m.setenv("AWS_SECRET_ACCESS_KEY", "s1")
            for k, v in env.items():
                m.setenv(k, v)
            resolved = static(options)
            assert resolved is not None, (options, env)
            client = botocore_client(options)
            for bucket in _BUCKETS:
                found = resolved.bucket(bucket)
                assert found in (None, _locate(client, bucket)), (options, env, bucket)
                assert (found is None) == (resolved.endpoint is None and (
                    len(bucket) < 3 or bucket != bucket.lower() or "." in bucket
                    or bucket[0] == "-")), (options, env, bucket)
            if options.get("anon"):
                assert resolved.credentials is None
            else:
                frozen = client._request_signer._credentials.get_frozen_credentials()
                assert resolved.credentials == Credentials(frozen.access_key,
                                                           frozen.secret_key, frozen.token)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k1")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s1")
    for options in [{"profile": "p"}, {"config_kwargs": {"s3": {"addressing_style": "path"}}},
                    {"client_kwargs": {"region_name": "cn-north-1"}}]:
        assert static(options) is None, options
    for k, v in [("AWS_PROFILE", "p"), ("AWS_USE_FIPS_ENDPOINT", "true"),
                 ("AWS_REGION", "eu-west-1"), ("AWS_DEFAULT_REGION", "us-gov-west-1")]:
        with monkeypatch.context() as m:
            m.setenv(k, v)
            assert static({}) is None, k
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    assert static({}) is None and static({"anon": True}) is not None  # (no credentials)
    # the files `aws configure` writes, read as botocore reads them; any other setting of
    # the default profile leaves the store to botocore
    (tmp_path / ".aws").mkdir()
    config, shared = tmp_path / ".aws" / "config", tmp_path / ".aws" / "credentials"
    for config_text, shared_text, simple in [
        ("[default]\nregion = eu-west-1\noutput = json\n",
         "[default]\naws_access_key_id = k3\naws_secret_access_key = s3\n", True),
        ("[profile other]\nregion = ap-south-1\n[default]\n",
         "[default]\naws_access_key_id = k3\naws_secret_access_key = s3\n"
         "aws_session_token = t3\n[other]\naws_access_key_id = x\n", True),
        ("", "[default]\naws_access_key_id = k3\naws_secret_access_key = s3\n", True),
        ("[default]\nregion = eu-west-1\nrole_arn = arn:aws:iam::1:role/r\n"
         "source_profile = default\n",
         "[default]\naws_access_key_id = k3\naws_secret_access_key = s3\n", False),
        ("[default]\ns3 =\n  addressing_style = path\n",
         "[default]\naws_access_key_id = k3\naws_secret_access_key = s3\n", False),
        ("[profile default]\nregion = eu-west-1\n",
         "[default]\naws_access_key_id = k3\naws_secret_access_key = s3\n", False),
        ("[default]\nregion = eu-west-1\n",
         "[default]\naws_access_key_id = k3\naws_secret_access_key = s3\nregion = x\n",
         False),
        ("[default]\nregion = eu-west-1\n", "[other]\naws_access_key_id = k3\n", False),
    ]:
        config.write_text(config_text)
        shared.write_text(shared_text)
        resolved = static({})
        assert (resolved is not None) == simple, config_text
        if resolved is not None:
            client = botocore_client({})
            assert resolved.bucket("mybucket") == _locate(client, "mybucket")
            frozen = client._request_signer._credentials.get_frozen_credentials()
            assert resolved.credentials == Credentials(frozen.access_key, frozen.secret_key,
                                                       frozen.token)
            assert resolved.region == client._request_signer._region_name


@contextlib.contextmanager
def _https_s3(tmp_path) -> Iterator[tuple[str, str]]:
    """An S3-like https server (path-style GETs of ``b/k`` and of what was PUT, PUTs kept
    if their body is the one signed) whose certificate a CA of its own signed: (endpoint
    URL, that CA's certificate file)."""
    import http.server
    import ipaddress
    import ssl

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    def name(text: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(name("test CA")).issuer_name(name("test CA"))
          .public_key(ca_key.public_key()).serial_number(1).not_valid_before(now)
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    cert = (x509.CertificateBuilder().subject_name(name("127.0.0.1")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(2).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
            .sign(ca_key, hashes.SHA256()))
    (tmp_path / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "server.pem").write_bytes(
        cert.public_bytes(serialization.Encoding.PEM) + key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))

    objects = {"/b/k": b"value"}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            found = self.path in objects
            body = objects[self.path] if found else b"<Error><Code>NoSuchKey</Code></Error>"
            self.send_response(200 if found else 404)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("ETag", '"e1"')
            self.end_headers()
            self.wfile.write(body)

        def do_PUT(self) -> None:  # (the body kept if it is the one signed)
            body = self.rfile.read(int(self.headers["Content-Length"]))
            ok = hashlib.sha256(body).hexdigest() == self.headers["X-Amz-Content-SHA256"]
            if ok:
                objects[self.path] = body
            self.send_response(200 if ok else 400)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(tmp_path / "server.pem"))
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"https://127.0.0.1:{httpd.server_address[1]}", str(tmp_path / "ca.pem")
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_https_endpoints_are_verified_with_botocores_ca_bundle(monkeypatch, tmp_path):
    """AWS_CA_BUNDLE (or ``ca_bundle`` in the configuration file, which botocore reads)
    names the certificates an https endpoint is verified with, as botocore's requests
    would be; without it, the system's, which do not know this server's CA."""
    for k in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k1")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s1")
    with _https_s3(tmp_path) as (endpoint, ca):
        def store() -> FsspecStore:
            return FsspecStore("s3://b", endpoint_url=endpoint, skip_instance_cache=True,
                               retries=0)

        with pytest.raises(StoreError, match="CERTIFICATE_VERIFY_FAILED"):
            store().get("k")
        monkeypatch.setenv("AWS_CA_BUNDLE", ca)
        plain = store()
        assert plain._gets.direct.transport.static is not None
        assert plain.get("k") == b"value" and plain.get("absent") is None
        value = np.random.default_rng(9).bytes(3 << 20)  # (sent over TLS as it is taken)
        plain.set("w", value)
        assert plain.get("w") == value
        monkeypatch.delenv("AWS_CA_BUNDLE")
        (tmp_path / ".aws").mkdir()
        (tmp_path / ".aws" / "config").write_text(f"[default]\nca_bundle = {ca}\n")
        configured = store()
        assert configured._gets.direct.transport.static is None
        assert configured.get("k", (1, 3)) == b"al"
