"""An S3 server for tests: moto's, on 127.0.0.1, with conditional writes and deletes.

Clients find it through the standard AWS environment variables (``AWS_ENDPOINT_URL``
and dummy credentials), which subprocesses inherit.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import fsspec

ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
       "AWS_DEFAULT_REGION": "us-east-1"}


@contextmanager
def s3_server() -> Iterator[str]:
    """Run the server and point the AWS environment at it; yields its endpoint URL."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    saved = {k: os.environ.get(k) for k in (*ENV, "AWS_ENDPOINT_URL")}
    os.environ.update(ENV, AWS_ENDPOINT_URL=endpoint)
    fsspec.filesystem("s3").clear_instance_cache()
    try:
        yield endpoint
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        fsspec.filesystem("s3").clear_instance_cache()


def new_bucket() -> str:
    """A fresh, empty bucket's URL."""
    name = f"b{uuid.uuid4().hex[:20]}"
    fsspec.filesystem("s3").mkdir(name)
    return f"s3://{name}"


def public_http_url(endpoint: str, bucket: str) -> str:
    """Let anyone read ``bucket``'s objects (a bucket policy); its plain HTTP URL, at which
    moto answers ranged GETs with the objects' ETags and honours If-Match (412)."""
    import json

    import boto3

    name = bucket.removeprefix("s3://")
    policy = {"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
        "Resource": f"arn:aws:s3:::{name}/*"}]}
    boto3.client("s3", endpoint_url=endpoint).put_bucket_policy(Bucket=name,
                                                               Policy=json.dumps(policy))
    return f"{endpoint}/{name}"
