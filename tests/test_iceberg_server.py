"""The Iceberg REST catalog server (lakehouse.iceberg.server / catalog), over real HTTP.

A real uvicorn server on loopback (``Server`` in a thread, and once as a subprocess
``python -m lakehouse serve-iceberg`` stopped by SIGTERM), httpx as the client: the
protocol's answers, its error model, auth, version namespaces, the read-only
refusals, and a server that keeps serving after every kind of error.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest

import lakehouse
from lakehouse.iceberg.catalog import IcebergCatalog, parse_namespace
from lakehouse.iceberg.server import Server

TOKEN = "s3cr3t-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ODD = "odd/name %"  # a table name that needs percent-encoding in a path
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def _has_writer() -> bool:
    try:
        from lakehouse.iceberg.writer import write_metadata  # noqa: F401
    except ImportError:
        return False
    return True


needs_writer = pytest.mark.skipif(
    not _has_writer(), reason="lakehouse.iceberg.writer.write_metadata is not there yet"
)


class Lake:
    """A lakehouse and the versions its tests name."""

    def __init__(self, path: Path) -> None:
        self.url = str(path / "lake")
        self.lh = lakehouse.open(self.url)
        with self.lh.begin() as t:
            t.create_namespace("sales", {"owner": "finance"})
            t.create_table("sales.orders", SCHEMA)
        self.created = self.lh.version
        self.lh.append("sales.orders", pa.table({"id": [1, 2], "name": ["a", "b"]}))
        self.first_append = self.lh.version
        with self.lh.begin() as t:
            t.create_namespace("ops")
            t.create_table("sales.items", SCHEMA)
            t.create_table(f"sales.{ODD}", SCHEMA)
        self.items_created = self.lh.version
        self.lh.append("sales.orders", pa.table({"id": [3], "name": ["c"]}))


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[Lake]:
    lk = Lake(tmp_path)
    try:
        yield lk
    finally:
        lk.lh.close()


@pytest.fixture
def server(lake: Lake) -> Iterator[Server]:
    with Server(lake.url, token=TOKEN) as s:
        yield s


@pytest.fixture
def client(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=30) as c:
        yield c


def _ns(name: str) -> str:
    from urllib.parse import quote

    return quote(name, safe="")


def assert_error(r: httpx.Response, code: int, kind: str, *, contains: str = "") -> str:
    """The protocol's error model, exactly: {"error": {"message", "type", "code"}}."""
    assert r.status_code == code, r.text
    assert r.headers["content-type"].startswith("application/json")
    doc = r.json()
    assert set(doc) == {"error"}
    assert set(doc["error"]) == {"message", "type", "code"}
    assert doc["error"]["code"] == code
    assert doc["error"]["type"] == kind
    message = doc["error"]["message"]
    assert isinstance(message, str) and message and "\n" not in message
    assert contains in message
    assert_no_traceback(r)
    return str(message)


def assert_no_traceback(r: httpx.Response) -> None:
    assert "Traceback" not in r.text
    assert 'File "' not in r.text


def assert_serving(c: httpx.Client) -> None:
    r = c.get("/v1/namespaces")
    assert r.status_code == 200
    assert r.json() == {"namespaces": [["ops"], ["sales"]]}


# -- the catalog without HTTP ----------------------------------------------------------------
def test_parse_namespace() -> None:
    assert parse_namespace("sales") == ("sales", None)
    assert parse_namespace("sales@v7") == ("sales", 7)
    assert parse_namespace("a@b@v12") == ("a@b", 12)
    for bad in ("sales@v", "sales@7", "sales@vx", "sales@v-1", "@v3", "sales@v1.5"):
        with pytest.raises(ValueError, match="<namespace>@v<version>"):
            parse_namespace(bad)


def test_catalog_calls(lake: Lake) -> None:
    with IcebergCatalog(lake.url) as cat:
        assert cat.namespaces() == ["ops", "sales"]
        assert cat.namespace("sales") == {"owner": "finance"}
        assert cat.tables("sales") == sorted(["items", "orders", ODD])
        assert cat.tables(f"sales@v{lake.first_append}") == ["orders"]
        assert cat.table_id("sales", "orders") == lake.lh.describe_table("sales.orders").table_id
        with pytest.raises(lakehouse.NotFound, match="'nope'"):
            cat.tables("nope")
        with pytest.raises(lakehouse.NotFound, match="'missing'"):
            cat.table_id("sales", "missing")
        with pytest.raises(ValueError, match="<namespace>@v<version>"):
            cat.tables("sales@vq")
        # the catalog follows the writer's commits
        with lake.lh.begin() as t:
            t.create_namespace("later")
        assert cat.namespaces() == ["later", "ops", "sales"]


def test_catalog_refreshes_are_shared(lake: Lake) -> None:
    """Every call returns after a refresh that started after it was made (so it sees
    every commit made before it), and concurrent calls share refreshes."""
    with IcebergCatalog(lake.url) as cat:
        reader = cat.lakehouse
        real = reader.refresh
        refreshes: list[tuple[int, int]] = []  # (start, end) ticks of each refresh
        clock = iter(range(10**9))
        tick_lock = threading.Lock()

        def tick() -> int:
            with tick_lock:
                return next(clock)

        def slow_refresh() -> int:
            start = tick()
            threading.Event().wait(0.002)  # long enough for others to arrive
            version = real()
            refreshes.append((start, tick()))
            return int(version)

        reader.refresh = slow_refresh
        calls: list[tuple[int, int]] = []
        errors: list[BaseException] = []
        barrier = threading.Barrier(8)

        def work() -> None:
            try:
                barrier.wait()
                for _ in range(10):
                    t0 = tick()
                    cat.refresh()
                    calls.append((t0, tick()))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work) for _ in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors and len(calls) == 80
        for t0, t1 in calls:
            assert any(t0 < s and e < t1 for s, e in refreshes), (t0, t1)
        assert len(refreshes) < len(calls)  # shared
        assert cat.stats["refreshes"] == len(refreshes)


def test_catalog_of_an_open_lakehouse_leaves_it_open(lake: Lake) -> None:
    cat = IcebergCatalog(lake.lh)
    assert cat.namespaces() == ["ops", "sales"]
    cat.close()
    assert lake.lh.list_namespaces() == ["ops", "sales"]
    with pytest.raises(ValueError, match="storage_options"):
        IcebergCatalog(lake.lh, storage_options={"key": "x"})


# -- config, namespaces, tables ----------------------------------------------------------------
def test_config(client: httpx.Client) -> None:
    r = client.get("/v1/config", params={"warehouse": "anything"})
    assert r.status_code == 200
    doc = r.json()
    assert doc["defaults"] == {} and doc["overrides"] == {}
    assert "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}" in doc["endpoints"]
    assert "HEAD /v1/{prefix}/namespaces/{namespace}" in doc["endpoints"]
    # nothing that writes is offered
    assert not [e for e in doc["endpoints"] if e.split()[0] in ("POST", "PUT", "DELETE")]


def test_namespaces(client: httpx.Client, lake: Lake) -> None:
    assert_serving(client)
    r = client.get("/v1/namespaces/sales")
    assert r.status_code == 200
    assert r.json() == {"namespace": ["sales"], "properties": {"owner": "finance"}}
    r = client.head("/v1/namespaces/sales")
    assert r.status_code == 204 and r.content == b""
    r = client.head("/v1/namespaces/nope")
    assert r.status_code == 404 and r.content == b""
    # one level: a namespace has no children; an unknown parent is 404
    r = client.get("/v1/namespaces", params={"parent": "sales"})
    assert r.status_code == 200 and r.json() == {"namespaces": []}
    assert_error(
        client.get("/v1/namespaces", params={"parent": "nope"}), 404, "NoSuchNamespaceException"
    )


def test_head_of_other_routes_is_get_without_a_body(client: httpx.Client) -> None:
    # only the protocol's existence checks (namespace, table) answer 204; HEAD of any
    # other GET route is that GET's status and headers, no body (RFC 9110)
    for path in ("/v1/config", "/v1/namespaces", "/v1/namespaces/sales/tables"):
        got, head = client.get(path), client.head(path)
        assert got.status_code == 200 and got.content
        assert head.status_code == 200 and head.content == b"", path
        assert head.headers["content-type"] == got.headers["content-type"]
        assert int(head.headers["content-length"]) == len(got.content)
    assert client.head("/v1/namespaces/sales/views").status_code == 200
    assert client.head("/v1/namespaces/sales/views/v").status_code == 404
    assert client.head("/v1/namespaces/nope/tables").status_code == 404
    assert client.head("/v1/nothing").status_code == 404
    anon = httpx.head(str(client.base_url) + "/v1/config", timeout=30)
    assert anon.status_code == 401 and anon.content == b""
    assert_serving(client)


def test_namespace_pages(client: httpx.Client, lake: Lake) -> None:
    with lake.lh.begin() as t:
        for name in ("n1", "n2", "n3"):
            t.create_namespace(name)
    names: list[list[str]] = []
    token = None
    pages = 0
    while True:
        params = {"pageSize": "2"} | ({"pageToken": token} if token else {})
        doc = client.get("/v1/namespaces", params=params).json()
        assert len(doc["namespaces"]) <= 2
        names.extend(doc["namespaces"])
        pages += 1
        token = doc.get("next-page-token")
        if not token:
            break
    assert names == [["n1"], ["n2"], ["n3"], ["ops"], ["sales"]]
    assert pages == 3
    for bad in ({"pageSize": "0"}, {"pageSize": "x"}, {"pageToken": "nope"}):
        assert_error(client.get("/v1/namespaces", params=bad), 400, "BadRequestException")


def test_tables(client: httpx.Client, lake: Lake) -> None:
    r = client.get("/v1/namespaces/sales/tables")
    assert r.status_code == 200
    assert r.json() == {
        "identifiers": [
            {"namespace": ["sales"], "name": n} for n in sorted(["items", "orders", ODD])
        ]
    }
    assert client.get("/v1/namespaces/ops/tables").json() == {"identifiers": []}
    r = client.get("/v1/namespaces/sales/tables", params={"pageSize": "1"})
    assert len(r.json()["identifiers"]) == 1 and r.json()["next-page-token"]
    # views are not served: the list is empty, of an existing namespace only
    assert client.get("/v1/namespaces/sales/views").json() == {"identifiers": []}
    assert_error(client.get("/v1/namespaces/nope/views"), 404, "NoSuchNamespaceException")
    assert_error(client.get("/v1/namespaces/sales/views/v"), 404, "NoSuchViewException")
    assert_error(client.get("/v1/namespaces/nope/views/v"), 404, "NoSuchNamespaceException")
    # a table name with '/', ' ' and '%' travels percent-encoded
    r = client.head(f"/v1/namespaces/sales/tables/{_ns(ODD)}")
    assert r.status_code == 204
    r = client.head("/v1/namespaces/sales/tables/missing")
    assert r.status_code == 404 and r.content == b""


def test_the_server_follows_the_writer(client: httpx.Client, lake: Lake) -> None:
    assert_error(client.get("/v1/namespaces/fresh"), 404, "NoSuchNamespaceException")
    with lake.lh.begin() as t:
        t.create_namespace("fresh", {"k": "v"})
        t.create_table("fresh.t", SCHEMA)
    assert client.get("/v1/namespaces/fresh").json()["properties"] == {"k": "v"}
    assert client.get("/v1/namespaces/fresh/tables").json()["identifiers"] == [
        {"namespace": ["fresh"], "name": "t"}
    ]
    with lake.lh.begin() as t:
        t.drop_table("fresh.t")
    assert client.get("/v1/namespaces/fresh/tables").json() == {"identifiers": []}


# -- version namespaces --------------------------------------------------------------------------
def test_version_namespaces(client: httpx.Client, lake: Lake) -> None:
    v = lake.first_append
    r = client.get(f"/v1/namespaces/sales@v{v}")
    assert r.status_code == 200
    assert r.json() == {"namespace": [f"sales@v{v}"], "properties": {"owner": "finance"}}
    assert client.head(f"/v1/namespaces/sales@v{v}").status_code == 204
    r = client.get(f"/v1/namespaces/sales@v{v}/tables")
    assert r.json() == {"identifiers": [{"namespace": [f"sales@v{v}"], "name": "orders"}]}
    r = client.get(f"/v1/namespaces/sales@v{lake.items_created}/tables")
    assert [i["name"] for i in r.json()["identifiers"]] == sorted(["items", "orders", ODD])
    assert client.head(f"/v1/namespaces/sales@v{v}/tables/orders").status_code == 204
    assert client.head(f"/v1/namespaces/sales@v{v}/tables/items").status_code == 404
    # not listed
    assert_serving(client)
    # ops did not exist then; a version past the head does not exist
    assert_error(client.get(f"/v1/namespaces/ops@v{v}"), 404, "NoSuchNamespaceException")
    head = lake.lh.version
    message = assert_error(
        client.get(f"/v1/namespaces/sales@v{head + 5}/tables"), 404, "NoSuchNamespaceException"
    )
    assert str(head + 5) in message
    assert_error(client.get(f"/v1/namespaces/sales@v{v}/tables/items"), 404, "NoSuchTableException")


def test_expired_version_namespace(client: httpx.Client, lake: Lake) -> None:
    v = lake.first_append
    assert client.get(f"/v1/namespaces/sales@v{v}").status_code == 200
    lake.lh.expire_versions(keep_last=1)
    for path in (f"/v1/namespaces/sales@v{v}", f"/v1/namespaces/sales@v{v}/tables"):
        message = assert_error(client.get(path), 404, "NoSuchNamespaceException")
        assert "expired" in message and str(v) in message
    assert client.head(f"/v1/namespaces/sales@v{v}").status_code == 404
    assert client.get(f"/v1/namespaces/sales@v{lake.lh.version}").status_code == 200


def test_a_namespace_named_like_a_version_is_itself(client: httpx.Client, lake: Lake) -> None:
    with lake.lh.begin() as t:
        t.create_namespace("odd@v1", {"real": "yes"})
    r = client.get(f"/v1/namespaces/{_ns('odd@v1')}")
    assert r.json()["properties"] == {"real": "yes"}

    # and names beyond ASCII travel as percent-encoded UTF-8
    with lake.lh.begin() as t:
        t.create_namespace("été")
        t.create_table("été.clé/ü", SCHEMA)
    r = client.get(f"/v1/namespaces/{_ns('été')}/tables")
    assert r.json() == {"identifiers": [{"namespace": ["été"], "name": "clé/ü"}]}
    assert client.head(f"/v1/namespaces/{_ns('été')}/tables/{_ns('clé/ü')}").status_code == 204


# -- errors ----------------------------------------------------------------------------------------
def test_not_found_bodies(client: httpx.Client) -> None:
    assert_error(
        client.get("/v1/namespaces/nope"), 404, "NoSuchNamespaceException", contains="nope"
    )
    assert_error(client.get("/v1/namespaces/nope/tables"), 404, "NoSuchNamespaceException")
    assert_error(client.get("/v1/namespaces/nope/tables/orders"), 404, "NoSuchNamespaceException")
    assert_error(
        client.get("/v1/namespaces/sales/tables/missing"),
        404,
        "NoSuchTableException",
        contains="missing",
    )
    # a multi-level namespace (parts joined by %1F) does not exist here
    assert_error(client.get("/v1/namespaces/sales%1Fx"), 404, "NoSuchNamespaceException")
    assert_error(client.get("/v2/namespaces"), 404, "NoSuchEndpointException")
    assert_error(client.get("/v1/nothing"), 404, "NoSuchEndpointException")
    assert_serving(client)


def test_bad_requests(client: httpx.Client) -> None:
    for path in (
        "/v1/namespaces/sales@vx",
        "/v1/namespaces/sales@v",
        "/v1/namespaces/sales@v-2/tables",
        "/v1/namespaces/sales@v1.0/tables/orders",
    ):
        assert_error(client.get(path), 400, "BadRequestException", contains="@v")
        assert_serving(client)
    assert_error(
        client.get("/v1/namespaces/sales/tables/orders", params={"snapshots": "some"}),
        400,
        "BadRequestException",
    )
    assert_error(client.get("/v1/namespaces/sales/tables/"), 400, "BadRequestException")
    assert_serving(client)


def test_auth(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as anon:
        for headers in (
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": TOKEN},
            {"Authorization": f"Basic {TOKEN}"},
            {"Authorization": "Bearer"},
        ):
            for path in ("/v1/config", "/v1/namespaces", "/v1/namespaces/sales/tables/orders"):
                r = anon.get(path, headers=headers)
                assert_error(r, 401, "NotAuthorizedException")
                assert r.headers["www-authenticate"] == "Bearer"
                assert TOKEN not in r.text
        # writes are refused as unauthorized first
        assert_error(anon.post("/v1/namespaces", json={}), 401, "NotAuthorizedException")
        r = anon.get("/v1/namespaces", headers={"Authorization": f"bearer {TOKEN}"})
        assert r.status_code == 200
        # no tokens are issued: static bearer tokens only (an OAuth error document)
        r = anon.post("/v1/oauth/tokens", data={"grant_type": "client_credentials"})
        assert r.status_code == 400
        assert r.json()["error"] == "unsupported_grant_type"
        assert "bearer" in r.json()["error_description"]


def test_without_a_token_no_auth_is_needed(lake: Lake) -> None:
    with Server(lake.url) as s:
        r = httpx.get(s.url + "/v1/namespaces", timeout=30)
        assert r.status_code == 200
    with pytest.raises(ValueError, match="token"):
        Server(lake.url, token="")


@pytest.mark.parametrize("bad", [" t", "t\n", "\tt ", "", " "])
def test_a_token_with_whitespace_around_it_is_refused(lake: Lake, bad: str) -> None:
    # clients' Authorization values are compared stripped: such a token never matches
    from lakehouse.iceberg.server import app, check_token, serve

    catalog = IcebergCatalog(lake.url)
    try:
        for make in (
            lambda: Server(lake.url, token=bad),
            lambda: app(catalog, token=bad),
            lambda: serve(lake.url, port=0, token=bad),  # refused before it binds
            lambda: check_token(bad),
        ):
            with pytest.raises(ValueError, match="token must not"):
                make()
    finally:
        catalog.close()
    with pytest.raises(TypeError, match="token"):
        check_token(b"t")
    assert check_token("a b") == "a b" and check_token(None) is None


def test_a_port_in_use_is_refused(server: Server, lake: Lake) -> None:
    port = int(server.url.rsplit(":", 1)[1])
    other = Server(lake.url, port=port)
    with pytest.raises(OSError):
        other.start()
    other.stop()  # nothing to stop: harmless
    assert httpx.get(server.url + "/v1/config", headers=AUTH, timeout=30).status_code == 200


WRITES = [
    ("POST", "/v1/namespaces"),
    ("DELETE", "/v1/namespaces/sales"),
    ("POST", "/v1/namespaces/sales/properties"),
    ("POST", "/v1/namespaces/sales/tables"),
    ("POST", "/v1/namespaces/sales/tables/orders"),
    ("DELETE", "/v1/namespaces/sales/tables/orders"),
    ("PUT", "/v1/namespaces/sales/tables/orders"),
    ("POST", "/v1/namespaces/sales/register"),
    ("POST", "/v1/tables/rename"),
    ("POST", "/v1/transactions/commit"),
    ("POST", "/v1/namespaces/sales/views"),
    ("DELETE", "/v1/namespaces/sales/views/v"),
    ("POST", "/v1/views/rename"),
    ("POST", "/v1/namespaces/nope/tables"),
]


@pytest.mark.parametrize("method,path", WRITES)
def test_writes_are_refused(client: httpx.Client, lake: Lake, method: str, path: str) -> None:
    before = lake.lh.version
    r = client.request(method, path, json={"name": "x", "updates": {}, "requirements": []})
    assert_error(r, 406, "UnsupportedOperationException", contains="read-only")
    assert lake.lh.version == before
    assert_serving(client)


def test_an_unexpected_failure_is_a_500_and_the_server_goes_on(
    server: Server, client: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    catalog = server.catalog
    assert catalog is not None

    def broken() -> list[str]:
        raise RuntimeError("disk on fire\nsecond line")

    original = catalog.namespaces
    catalog.namespaces = broken  # type: ignore[method-assign]
    try:
        with caplog.at_level(logging.INFO, logger="lakehouse.iceberg"):
            r = client.get("/v1/namespaces")
    finally:
        catalog.namespaces = original  # type: ignore[method-assign]
    message = assert_error(r, 500, "InternalServerError", contains="disk on fire")
    assert "second line" in message  # one line
    # the traceback is in the server's log only
    assert any(rec.exc_info for rec in caplog.records if rec.levelno >= logging.ERROR)
    assert any("GET /v1/namespaces 500" in rec.getMessage() for rec in caplog.records)
    assert_serving(client)


def test_one_log_line_per_request(client: httpx.Client, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="lakehouse.iceberg"):
        client.get("/v1/namespaces/sales")
        client.get("/v1/namespaces/nope")
    lines = [r.getMessage() for r in caplog.records if r.name == "lakehouse.iceberg"]
    assert len(lines) == 2
    assert lines[0].startswith("GET /v1/namespaces/sales 200 ") and lines[0].endswith("ms")
    assert lines[1].startswith("GET /v1/namespaces/nope 404 ")


# -- the CLI: a real subprocess stopped by SIGTERM -------------------------------------------------
def _start_cli(args: list[str], env: dict[str, str] | None = None) -> tuple[Any, str, Any]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "lakehouse", "serve-iceberg", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    seen: list[str] = []
    while True:
        line = lines.get(timeout=60)
        if line is None:
            raise AssertionError(f"the server exited: {''.join(seen)}")
        seen.append(line)
        if " on http://" in line:
            url = line.split(" on ", 1)[1].split()[0]
            return proc, url, (lines, seen)


def _stop_cli(proc: Any, pumped: Any) -> str:
    lines, seen = pumped
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    while (line := lines.get(timeout=60)) is not None:
        seen.append(line)
    assert proc.stdout is not None
    assert proc.stdout.read() == ""  # nothing on stdout
    return "".join(seen)


def test_cli_serves_until_sigterm(lake: Lake, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    proc, url, pumped = _start_cli([lake.url, "--port", "0", "--token-file", str(token_file)])
    try:
        assert url.startswith("http://127.0.0.1:")
        assert httpx.get(url + "/v1/namespaces", timeout=30).status_code == 401
        r = httpx.get(url + "/v1/namespaces", headers=AUTH, timeout=30)
        assert r.json() == {"namespaces": [["ops"], ["sales"]]}
        # the writer (this process) keeps committing; the server follows, fencing nothing
        with lake.lh.begin() as t:
            t.create_namespace("zz")
        r = httpx.get(url + "/v1/namespaces", headers=AUTH, timeout=30)
        assert ["zz"] in r.json()["namespaces"]
        lake.lh.append("sales.orders", pa.table({"id": [9], "name": ["z"]}))
    except BaseException:
        proc.kill()
        raise
    log = _stop_cli(proc, pumped)
    assert "stopped" in log
    assert "GET /v1/namespaces 401" in log and "GET /v1/namespaces 200" in log
    assert "Traceback" not in log


def test_cli_token_from_the_environment(lake: Lake) -> None:
    proc, url, pumped = _start_cli(
        [lake.url, "--port", "0"], env={"LAKEHOUSE_ICEBERG_TOKEN": TOKEN}
    )
    try:
        assert httpx.get(url + "/v1/config", timeout=30).status_code == 401
        assert httpx.get(url + "/v1/config", headers=AUTH, timeout=30).status_code == 200
    except BaseException:
        proc.kill()
        raise
    assert "stopped" in _stop_cli(proc, pumped)


def test_cli_bad_input(lake: Lake, tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "lakehouse", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )

    r = run("serve-iceberg", lake.url, "--port", "70000")
    assert r.returncode == 2 and "port" in r.stderr
    empty = tmp_path / "empty"
    empty.write_text("")
    r = run("serve-iceberg", lake.url, "--token-file", str(empty))
    assert r.returncode == 2 and "empty" in r.stderr
    r = run("serve-iceberg", lake.url, "--port", "0", "--token", " t")
    assert r.returncode == 2 and "whitespace" in r.stderr
    r = run("serve-iceberg", str(tmp_path / "none"), "--port", "0")
    assert r.returncode == 1 and "no lakehouse" in r.stderr
    assert "Traceback" not in r.stderr


# -- loading tables (needs lakehouse.iceberg.writer) -------------------------------------------
def _load(client: httpx.Client, ns: str, table: str) -> dict[str, Any]:
    r = client.get(f"/v1/namespaces/{_ns(ns)}/tables/{_ns(table)}")
    assert r.status_code == 200, r.text
    doc = r.json()
    assert set(doc) == {"metadata-location", "metadata", "config"}
    return dict(doc)


@needs_writer
def test_load_table_follows_the_writer(client: httpx.Client, lake: Lake) -> None:
    doc = _load(client, "sales", "orders")
    meta = doc["metadata"]
    assert meta["format-version"] == 2
    assert meta["current-snapshot-id"] == lake.lh.version
    # the body's metadata is the stored document, byte for byte
    raw = client.get("/v1/namespaces/sales/tables/orders").content
    stored = Path(doc["metadata-location"]).read_bytes()
    assert stored in raw
    assert json.loads(stored) == meta
    # the location is the ETag: an unchanged table answers 304
    etag = client.get("/v1/namespaces/sales/tables/orders").headers["etag"]
    r = client.get("/v1/namespaces/sales/tables/orders", headers={"If-None-Match": etag})
    assert r.status_code == 304 and r.content == b""
    # a commit while the server runs: the next load names it
    lake.lh.append("sales.orders", pa.table({"id": [4], "name": ["d"]}))
    doc2 = _load(client, "sales", "orders")
    assert doc2["metadata"]["current-snapshot-id"] == lake.lh.version
    assert doc2["metadata-location"] != doc["metadata-location"]
    r = client.get("/v1/namespaces/sales/tables/orders", headers={"If-None-Match": etag})
    assert r.status_code == 200 and r.headers["etag"] != etag
    # a commit of another table leaves this one's snapshot as it was
    lake.lh.append("sales.items", pa.table({"id": [1], "name": ["x"]}))
    doc3 = _load(client, "sales", "orders")
    assert doc3["metadata"]["current-snapshot-id"] == doc2["metadata"]["current-snapshot-id"]


@needs_writer
def test_load_table_in_a_version_namespace(client: httpx.Client, lake: Lake) -> None:
    v = lake.first_append
    doc = _load(client, f"sales@v{v}", "orders")
    assert doc["metadata"]["current-snapshot-id"] == v
    assert all(s["snapshot-id"] <= v for s in doc["metadata"]["snapshots"])
    _load(client, "sales", ODD)


@needs_writer
def test_loads_are_cached(server: Server, client: httpx.Client) -> None:
    catalog = server.catalog
    assert catalog is not None
    _load(client, "sales", "orders")
    reads = catalog.stats["documents_read"]
    calls = catalog.stats["metadata_calls"]
    for _ in range(5):
        _load(client, "sales", "orders")
    assert catalog.stats["documents_read"] == reads
    assert catalog.stats["metadata_calls"] == calls


@needs_writer
def test_pyiceberg_rest_catalog(server: Server, lake: Lake) -> None:
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    cat = RestCatalog("lh", uri=server.url, token=TOKEN)
    assert cat.list_namespaces() == [("ops",), ("sales",)]
    assert sorted(cat.list_tables("sales")) == sorted(
        [("sales", "items"), ("sales", "orders"), ("sales", ODD)]
    )
    assert cat.load_namespace_properties("sales") == {"owner": "finance"}
    assert cat.namespace_exists("sales") and not cat.namespace_exists("nope")
    assert cat.table_exists("sales.orders") and not cat.table_exists("sales.nope")
    tbl = cat.load_table("sales.orders")
    assert tbl.metadata.current_snapshot_id == lake.lh.version
    assert sorted(tbl.scan().to_arrow().column("id").to_pylist()) == [1, 2, 3]
    old = cat.load_table(f"sales@v{lake.first_append}.orders")
    assert sorted(old.scan().to_arrow().column("id").to_pylist()) == [1, 2]
    with pytest.raises(NoSuchTableError):
        cat.load_table("sales.nope")
    with pytest.raises(NoSuchNamespaceError):
        cat.list_tables("nope")
    with pytest.raises(NotImplementedError):  # writes are not offered by the config
        cat.create_namespace("new")


@needs_writer
def test_cli_iceberg_metadata(lake: Lake) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "lakehouse", "iceberg-metadata", lake.url, "sales.orders"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    location = r.stdout.strip()
    assert json.loads(Path(location).read_text())["current-snapshot-id"] == lake.lh.version
    r = subprocess.run(
        [sys.executable, "-m", "lakehouse", "iceberg-metadata", lake.url, "sales.nope"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1 and "nope" in r.stderr


@needs_writer
@pytest.mark.s3
def test_a_lakehouse_on_s3(s3_url: tuple[str, dict[str, Any]]) -> None:
    url, options = s3_url
    lh = lakehouse.open(url, storage_options=options)
    try:
        with lh.begin() as t:
            t.create_namespace("sales")
            t.create_table("sales.orders", SCHEMA)
        lh.append("sales.orders", pa.table({"id": [1], "name": ["a"]}))
        with (
            Server(url, token=TOKEN, storage_options=options) as s,
            httpx.Client(base_url=s.url, headers=AUTH, timeout=60) as c,
        ):
            assert c.get("/v1/namespaces").json() == {"namespaces": [["sales"]]}
            doc = _load(c, "sales", "orders")
            assert doc["metadata-location"].startswith(url + "/iceberg/")
            assert doc["metadata"]["current-snapshot-id"] == lh.version
            lh.append("sales.orders", pa.table({"id": [2], "name": ["b"]}))
            assert _load(c, "sales", "orders")["metadata"]["current-snapshot-id"] == lh.version
    finally:
        lh.close()
