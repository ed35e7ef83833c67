"""The S3 endpoint of ``python -m kvstore.bench.s3`` and the requests sent to it.

Owns everything about the endpoint itself rather than kvstore on it: a moto
S3 server in a child process (:func:`moto_server`, with S3's atomic
conditional PUT), a boto3 client for making and dropping the benchmark's
bucket (:func:`boto_client`, :func:`drop_bucket`), and :class:`WireCounter`,
which counts every HTTP attempt a store's s3fs client sends, by verb
(:data:`VERBS`), from botocore's ``before-send`` events.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kvstore.objstore import FsspecStore

log = logging.getLogger("kvstore.bench.s3")

#: the child process running moto: S3's atomic conditional PUT (moto checks
#: If-None-Match and stores in two steps; a lock makes that one step)
_MOTO_CHILD = r"""
import functools, logging, sys, threading
logging.getLogger("werkzeug").setLevel(logging.WARNING)
from moto.s3.responses import S3Response
from moto.server import ThreadedMotoServer
_orig = S3Response.put_object
_lock = threading.Lock()
@functools.wraps(_orig)
def put_object(self, *a, **kw):
    with _lock:
        return _orig(self, *a, **kw)
S3Response.put_object = put_object
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
host, port = server.get_host_and_port()
print(f"READY http://{host}:{port}", flush=True)
sys.stdin.read()  # until the parent closes our stdin (or exits)
server.stop()
"""


# ---------------------------------------------------------------------------
# the endpoint
# ---------------------------------------------------------------------------
@contextmanager
def moto_server() -> Iterator[str]:
    """A moto S3 server in a child process (its own interpreter: no GIL shared with
    the benchmark). Yields the endpoint URL."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _MOTO_CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        endpoint = None
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith("READY "):
                endpoint = line.split()[1]
                break
        if endpoint is None:
            raise RuntimeError("the moto server did not start (is moto[server] installed?)")
        yield endpoint
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def boto_client(endpoint: str, key: str | None, secret: str | None) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
        aws_access_key_id=key,
        aws_secret_access_key=secret,
    )


# ---------------------------------------------------------------------------
# counting requests on the wire
# ---------------------------------------------------------------------------
_VERBS = {
    "PutObject": "PUT",
    "GetObject": "GET",
    "HeadObject": "HEAD",
    "ListObjectsV2": "LIST",
    "ListObjects": "LIST",
    "DeleteObject": "DELETE",
    "DeleteObjects": "DELETE",
}
VERBS = ("PUT", "GET", "HEAD", "LIST", "DELETE")


class WireCounter:
    """Counts HTTP requests (every attempt) a store's s3fs client sends, by verb."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def attach(self, store: FsspecStore) -> FsspecStore:
        store.fs.s3.meta.events.register("before-send.s3", self._on_send)
        return store

    def _on_send(self, event_name: str = "", **_: Any) -> None:
        op = event_name.rsplit(".", 1)[-1]
        with self._lock:
            self.counts[_VERBS.get(op, "OTHER")] += 1

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.counts)


def drop_bucket(client: Any, bucket: str) -> None:
    """Delete every object of ``bucket``, then the bucket (best effort: a warning)."""
    try:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                client.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
        client.delete_bucket(Bucket=bucket)
    except Exception as exc:  # best effort
        log.warning("could not remove bucket %s: %s", bucket, exc)
