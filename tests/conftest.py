"""Shared fixtures: a moto S3 endpoint on loopback for the ``s3`` tests.

``moto_endpoint`` starts one :class:`moto.server.ThreadedMotoServer` on
127.0.0.1 (port 0: the OS picks a free port) for the whole session, lazily,
so test runs without S3 tests never start it. Every test that asks for
``s3_bucket`` / ``s3_url`` gets its own freshly created bucket, emptied and
removed afterwards.

moto checks ``If-None-Match: *`` and then stores the object in two steps
without a lock, so two concurrent conditional PUTs of one key can both
succeed on its threaded server (real S3 decides atomically: one 200, the
rest 412). :func:`make_moto_conditional_puts_atomic` serialises moto's
PutObject handler to give the test endpoint S3's guarantee; without it the
thread race in tests/test_s3.py finds two winners.

::

    def test_something(s3_url):
        url, storage_options = s3_url
        with kvstore.open(url, storage_options=storage_options) as db:
            ...

It also loads a hypothesis profile without a per-example deadline: a loaded
CI machine (or a CPython GC pass) can make one example take longer than
hypothesis's default 200 ms, which is not a failure of the code under test.
"""

from __future__ import annotations

import functools
import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import settings

S3_KEY = "testing"
S3_SECRET = "testing"
S3_REGION = "us-east-1"

settings.register_profile("kvstore", deadline=None)
settings.load_profile("kvstore")


def s3_storage_options(endpoint: str, **extra: Any) -> dict[str, Any]:
    """s3fs options for a moto endpoint (fixed test credentials, path-style URLs)."""
    return {"endpoint_url": endpoint, "key": S3_KEY, "secret": S3_SECRET, **extra}


def _client(endpoint: str) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=S3_REGION,
        aws_access_key_id=S3_KEY,
        aws_secret_access_key=S3_SECRET,
    )


def _drop_bucket(client: Any, bucket: str) -> None:
    """Empty and delete a bucket (best effort: moto keeps everything in memory)."""
    try:
        paginator = client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=bucket):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                client.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
        client.delete_bucket(Bucket=bucket)
    except Exception:  # the server may already be gone; nothing to leak
        pass


def make_moto_conditional_puts_atomic() -> None:
    """Serialise moto's PutObject handler (check of If-None-Match + store): atomic, as
    on S3. Affects only moto running in this process; idempotent."""
    from moto.s3.responses import S3Response

    original = S3Response.put_object
    if getattr(original, "_kvstore_atomic", False):
        return
    lock = threading.Lock()

    @functools.wraps(original)
    def put_object(self: Any, *args: Any, **kwargs: Any) -> Any:
        with lock:
            return original(self, *args, **kwargs)

    put_object._kvstore_atomic = True  # type: ignore[attr-defined]
    S3Response.put_object = put_object  # type: ignore[method-assign]


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """``http://127.0.0.1:<port>`` of a moto S3 server shared by the session."""
    server_mod = pytest.importorskip("moto.server", reason="moto[server] is not installed")
    pytest.importorskip("s3fs", reason="s3fs is not installed")
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    make_moto_conditional_puts_atomic()
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3_client(moto_endpoint: str) -> Any:
    """A boto3 client of the moto endpoint (for setup and raw inspection)."""
    return _client(moto_endpoint)


@pytest.fixture
def s3_bucket_factory(s3_client: Any) -> Iterator[Callable[[], str]]:
    """Call it to create one more fresh bucket; all are removed after the test."""
    made: list[str] = []

    def make() -> str:
        name = f"kv-{uuid.uuid4().hex[:20]}"  # a valid S3 bucket name
        s3_client.create_bucket(Bucket=name)
        made.append(name)
        return name

    yield make
    for name in made:
        _drop_bucket(s3_client, name)


@pytest.fixture
def s3_bucket(s3_bucket_factory: Callable[[], str]) -> str:
    """A fresh, empty bucket of its own for this test."""
    return s3_bucket_factory()


@pytest.fixture
def s3_options(moto_endpoint: str) -> dict[str, Any]:
    """``storage_options`` for ``kvstore.open("s3://...")`` against the moto endpoint."""
    return s3_storage_options(moto_endpoint)


@pytest.fixture
def s3_url(s3_bucket: str, s3_options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``("s3://<fresh bucket>/store", storage_options)``."""
    return f"s3://{s3_bucket}/store", dict(s3_options)
