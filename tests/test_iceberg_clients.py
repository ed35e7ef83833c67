"""Real Iceberg clients read the lakehouse (issue 24, API.md "Iceberg catalog").

One lakehouse (tests/iceberg_fixtures.build_lakehouse: appends, positional deletes, an
update, a merge, renamed/dropped/added columns, a column re-added under its old name, a
partitioned table, inlined rows, a compaction) is read by:

* pyiceberg's ``RestCatalog`` against ``lakehouse.iceberg.Server``: namespaces, tables,
  the latest version and every snapshot the metadata lists, and ``ns@v<N>`` namespaces;
* pyiceberg's ``StaticTable`` on ``write_metadata``'s location;
* DuckDB 1.5.5 with its iceberg extension (its own venv, tests/duckdb_iceberg_side.py):
  ``iceberg_scan`` of the metadata of every version and of the latest with
  ``snapshot_from_id``, and ``ATTACH`` of the REST catalog with ``AT (VERSION => s)``;
* polars' ``scan_iceberg`` on the metadata location.

Every read must return exactly ``lh.at_version(s).read(table)``: the same column names (of
version s, less the columns Iceberg has no type for) and the same rows as a multiset.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from iceberg_fixtures import (
    CLIENTS,
    FILES_ONLY,
    NO_AUTO,
    TYPE_CASES,
    Built,
    arrow_filter,
    build_lakehouse,
    build_types_lakehouse,
    expected_columns,
    iceberg_predicate,
    omitted_columns,
    predicates,
    rows,
    run_duckdb,
    snapshot_ids,
    sql_predicate,
    table_versions,
    without_nan,
)
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import NoSuchTableError, RESTError
from pyiceberg.table import StaticTable

import lakehouse
from lakehouse.iceberg import Server, write_metadata

TOKEN = "s3cret-token"
#: polars plans the scan with pyiceberg (its planner plugin is not installed) and says so
pytestmark = pytest.mark.filterwarnings("ignore:Iceberg scan planning with the polars_iceberg")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    b = build_lakehouse(tmp_path_factory.mktemp("iceberg-clients") / "lh")
    yield b
    b.lh.close()


@pytest.fixture(scope="module")
def latest(built: Built) -> dict[str, tuple[str, dict[str, Any]]]:
    """Per table: the metadata location of the latest version and its JSON."""
    out = {}
    for t in built.tables:
        loc = write_metadata(built.lh, t)
        out[t] = (loc, json.loads(Path(loc).read_text()))
    return out


@pytest.fixture(scope="module")
def server(built: Built) -> Iterator[Any]:
    with Server(built.url, token=TOKEN) as srv:
        yield srv


@pytest.fixture(scope="module")
def rest(server: Any) -> RestCatalog:
    return RestCatalog("lakehouse", uri=server.url, token=TOKEN)


def mismatch(
    what: str, actual: pa.Table, b: Built, table: str, version: int, omitted: set[str]
) -> str | None:
    """None when ``actual`` is the table at ``version``; else a one-paragraph diff."""
    want_cols = expected_columns(b.lh, table, version, omitted)
    if actual.column_names != want_cols:
        return f"{what}: columns {actual.column_names} != {want_cols}"
    got, want = rows(actual), rows(b.lh.at_version(version).read(table), want_cols)
    if got != want:
        extra, missing = got - want, want - got
        return (
            f"{what}: {actual.num_rows} rows, want {sum(want.values())}; "
            f"unexpected {list(extra.elements())[:3]}, missing {list(missing.elements())[:3]}"
        )
    return None


def check_all(problems: list[str | None]) -> None:
    found = [p for p in problems if p is not None]
    assert not found, f"{len(found)} mismatches:\n" + "\n".join(found)


TABLES = [
    "sales.orders",
    "sales.events",
    "misc.small",
    "misc.reused",
    "misc.types",
    "misc.clone",
    "misc.tmp",
]


# -- the metadata itself ------------------------------------------------------------------
@pytest.mark.parametrize("table", TABLES)
def test_one_snapshot_per_version_that_changed_the_table(
    built: Built, latest: dict[str, tuple[str, dict[str, Any]]], table: str
) -> None:
    loc, meta = latest[table]
    versions = table_versions(built.lh, table)
    assert snapshot_ids(meta) == versions
    assert meta["current-snapshot-id"] == versions[-1]
    assert meta["format-version"] == 2
    assert Path(loc).is_absolute() and Path(loc).exists()
    parents = {s["snapshot-id"]: s.get("parent-snapshot-id") for s in meta["snapshots"]}
    assert [parents[v] for v in versions] == [None, *versions[:-1]]
    assert all(s["sequence-number"] == s["snapshot-id"] for s in meta["snapshots"])


def test_omitted_columns_are_named(latest: dict[str, tuple[str, dict[str, Any]]]) -> None:
    assert omitted_columns(latest["sales.events"][1]) == {"big"}
    assert omitted_columns(latest["sales.orders"][1]) == set()
    assert omitted_columns(latest["misc.types"][1]) == {"ts_ns", "f16"}


# -- pyiceberg RestCatalog ----------------------------------------------------------------
def test_rest_lists_namespaces_and_tables(rest: RestCatalog) -> None:
    assert sorted(rest.list_namespaces()) == [("misc",), ("sales",)]
    assert sorted(rest.list_tables("sales")) == [("sales", "events"), ("sales", "orders")]
    assert sorted(rest.list_tables("misc")) == [
        ("misc", "clone"),
        ("misc", "reused"),
        ("misc", "small"),
        ("misc", "tmp"),
        ("misc", "types"),
    ]
    with pytest.raises(NoSuchTableError):
        rest.load_table("sales.nope")
    assert rest.load_namespace_properties("sales") == {
        "owner": "ops",
        "comment": "orders and events",
    }
    assert rest.namespace_exists("misc") and not rest.namespace_exists("nope")
    assert rest.table_exists("sales.orders") and not rest.table_exists("sales.nope")
    assert rest.table_exists("sales@v2.orders") and not rest.table_exists("sales@v0.events")


def test_rest_needs_the_token(server: Any) -> None:
    with pytest.raises(RESTError, match="NotAuthorizedException"):
        RestCatalog("wrong", uri=server.url, token="wrong").list_namespaces()


@pytest.mark.parametrize("table", TABLES)
def test_pyiceberg_rest_every_snapshot(
    built: Built, rest: RestCatalog, latest: dict[str, tuple[str, dict[str, Any]]], table: str
) -> None:
    tbl = rest.load_table(table)
    omitted = omitted_columns(latest[table][1])
    head = built.lh.version
    problems = [mismatch("latest", tbl.scan().to_arrow(), built, table, head, omitted)]
    ids = [s.snapshot_id for s in tbl.metadata.snapshots]
    assert sorted(ids) == snapshot_ids(latest[table][1])
    for s in ids:
        got = tbl.scan(snapshot_id=s).to_arrow()
        problems.append(mismatch(f"snapshot {s}", got, built, table, s, omitted))
    check_all(problems)


@pytest.mark.parametrize("table", ["sales.orders", "misc.small"])
def test_pyiceberg_version_namespaces(
    built: Built, rest: RestCatalog, latest: dict[str, tuple[str, dict[str, Any]]], table: str
) -> None:
    ns, name = table.split(".")
    versions = table_versions(built.lh, table)
    omitted = omitted_columns(latest[table][1])
    problems = []
    for v in range(versions[0], built.lh.version + 1):
        tbl = rest.load_table((f"{ns}@v{v}", name))
        effective = max(u for u in versions if u <= v)
        assert tbl.metadata.current_snapshot_id == effective, v
        problems.append(mismatch(f"{ns}@v{v}", tbl.scan().to_arrow(), built, table, v, omitted))
    check_all(problems)
    assert (f"{ns}@v{versions[-1]}",) not in rest.list_namespaces()


# -- pyiceberg StaticTable ----------------------------------------------------------------
@pytest.mark.parametrize("table", TABLES)
def test_static_table_every_snapshot(
    built: Built, latest: dict[str, tuple[str, dict[str, Any]]], table: str
) -> None:
    loc, meta = latest[table]
    tbl = StaticTable.from_metadata(loc)
    omitted = omitted_columns(meta)
    problems = [mismatch("latest", tbl.scan().to_arrow(), built, table, built.lh.version, omitted)]
    for s in snapshot_ids(meta):
        got = tbl.scan(snapshot_id=s).to_arrow()
        problems.append(mismatch(f"snapshot {s}", got, built, table, s, omitted))
    check_all(problems)


# -- DuckDB -------------------------------------------------------------------------------
def test_duckdb_iceberg_scan_every_version(
    built: Built, latest: dict[str, tuple[str, dict[str, Any]]]
) -> None:
    labels: list[tuple[str, str, int]] = []
    requests: list[dict[str, Any]] = []
    for t in TABLES:
        loc, meta = latest[t]
        requests.append({"mode": "snapshots", "metadata": loc})
        labels.append((f"{t} snapshots", t, -1))
        requests.append({"mode": "scan", "metadata": loc, "snapshot": None})
        labels.append((f"{t} latest", t, built.lh.version))
        for s in snapshot_ids(meta):
            requests.append({"mode": "scan", "metadata": loc, "snapshot": s})
            labels.append((f"{t} snapshot_from_id={s}", t, s))
            at_s = write_metadata(built.lh, t, version=s)
            requests.append({"mode": "scan", "metadata": at_s, "snapshot": None})
            labels.append((f"{t} metadata of version {s}", t, s))
    problems: list[str | None] = []
    for (what, t, v), result in zip(labels, run_duckdb(requests), strict=True):
        if not result["ok"]:
            problems.append(f"{what}: {result['error']}")
        elif v == -1:
            if result["value"] != snapshot_ids(latest[t][1]):
                problems.append(f"{what}: {result['value']}")
        else:
            problems.append(
                mismatch(what, result["table"], built, t, v, omitted_columns(latest[t][1]))
            )
    check_all(problems)


def test_duckdb_rest_attach(
    built: Built, server: Any, latest: dict[str, tuple[str, dict[str, Any]]]
) -> None:
    base = {"endpoint": server.url, "token": TOKEN}
    labels: list[tuple[str, str, int]] = [("tables", "", -1)]
    requests: list[dict[str, Any]] = [{"mode": "rest_tables", **base}]
    for t in TABLES:
        ns, name = t.split(".")
        requests.append({"mode": "rest", **base, "namespace": ns, "table": name})
        labels.append((f"{t} latest", t, built.lh.version))
        for s in snapshot_ids(latest[t][1]):
            requests.append({"mode": "rest", **base, "namespace": ns, "table": name, "snapshot": s})
            labels.append((f"{t} AT (VERSION => {s})", t, s))
            requests.append({"mode": "rest", **base, "namespace": f"{ns}@v{s}", "table": name})
            labels.append((f'"{ns}@v{s}".{name}', t, s))
    orders = table_versions(built.lh, "sales.orders")
    for v in range(orders[0], built.lh.version + 1):  # every version, snapshot or not
        requests.append({"mode": "rest", **base, "namespace": f"sales@v{v}", "table": "orders"})
        labels.append((f'"sales@v{v}".orders', "sales.orders", v))
    requests.append({"mode": "rest", **base, "namespace": "sales", "table": "nope"})
    labels.append(("missing table", "", -2))
    problems: list[str | None] = []
    for (what, t, v), result in zip(labels, run_duckdb(requests), strict=True):
        if v == -2:
            if result["ok"] or "nope" not in result["error"]:
                problems.append(f"{what}: {result}")
        elif not result["ok"]:
            problems.append(f"{what}: {result['error']}")
        elif v == -1:
            listed = {tuple(x) for x in result["value"]}
            want = {tuple(x.split(".")) for x in TABLES}
            if not want <= listed:
                problems.append(f"{what}: {sorted(listed)}")
        else:
            problems.append(
                mismatch(what, result["table"], built, t, v, omitted_columns(latest[t][1]))
            )
    check_all(problems)


# -- polars -------------------------------------------------------------------------------
@pytest.mark.parametrize("table", TABLES)
def test_polars_scan_iceberg(
    built: Built, latest: dict[str, tuple[str, dict[str, Any]]], table: str
) -> None:
    pl = pytest.importorskip("polars")
    loc, meta = latest[table]
    omitted = omitted_columns(meta)
    got = pl.scan_iceberg(loc).collect().to_arrow()
    problems = [mismatch("latest", got, built, table, built.lh.version, omitted)]
    for s in snapshot_ids(meta):
        got = pl.scan_iceberg(loc, snapshot_id=s).collect().to_arrow()
        problems.append(mismatch(f"snapshot {s}", got, built, table, s, omitted))
    check_all(problems)


# -- expiry -------------------------------------------------------------------------------
def test_expired_versions_are_no_snapshots(tmp_path: Path) -> None:
    """After expiry the first snapshot is the table at the oldest retained version; older
    versions are gone for every client (VersionExpired, the protocol's 404)."""
    lh = lakehouse.open(str(tmp_path / "lh"))
    try:
        with lh.begin() as txn:
            txn.create_namespace("ns")
            txn.create_table("ns.t", pa.schema([("a", pa.int64())]), FILES_ONLY)
            txn.create_table("ns.u", pa.schema([("a", pa.int64())]), NO_AUTO)
        for i in range(4):
            lh.append("ns.t", pa.table({"a": [i, i + 10]}))
        lh.delete("ns.t", "a = 11")  # positional deletes carried into the first snapshot
        for i in range(3):  # versions that do not change ns.t
            lh.append("ns.u", pa.table({"a": [i]}))
        lh.expire_versions(keep_last=2, grace=dt.timedelta(0))
        oldest = min(h.version for h in lh.history())
        lh.append("ns.t", pa.table({"a": [99]}))
        loc = write_metadata(lh, "ns.t")
        meta = json.loads(Path(loc).read_text())
        assert snapshot_ids(meta) == [oldest, lh.version]
        tbl = StaticTable.from_metadata(loc)
        for s in snapshot_ids(meta):
            got = tbl.scan(snapshot_id=s).to_arrow()
            assert rows(got) == rows(lh.at_version(s).read("ns.t")), s
        with pytest.raises(lakehouse.VersionExpired):
            write_metadata(lh, "ns.t", version=oldest - 1)
        with Server(str(tmp_path / "lh")) as srv:
            rest = RestCatalog("expiry", uri=srv.url)
            assert rest.load_table(f"ns@v{oldest}.t").metadata.current_snapshot_id == oldest
            with pytest.raises(NoSuchTableError, match=r"NoSuchNamespaceException.*expired"):
                rest.load_table(f"ns@v{oldest - 1}.t")
            result = run_duckdb(
                [
                    {"mode": "rest", "endpoint": srv.url, "namespace": "ns", "table": "t"},
                    {"mode": "scan", "metadata": loc, "snapshot": oldest},
                ]
            )
            assert rows(result[0]["table"]) == rows(lh.read("ns.t"))
            assert rows(result[1]["table"]) == rows(lh.at_version(oldest).read("ns.t"))
    finally:
        lh.close()


# -- column types -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def types_lakehouse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    lh, locations = build_types_lakehouse(tmp_path_factory.mktemp("iceberg-types") / "lh")
    names = list(TYPE_CASES)
    scans = run_duckdb([{"mode": "scan", "metadata": locations[n]} for n in names])
    yield {"lh": lh, "locations": locations, "duckdb": dict(zip(names, scans, strict=True))}
    lh.close()


def read_with(client: str, case: str, types: dict[str, Any]) -> pa.Table:
    loc = types["locations"][case]
    if client == "pyiceberg":
        return StaticTable.from_metadata(loc).scan().to_arrow()
    if client == "polars":
        import polars as pl

        return pl.scan_iceberg(loc).collect().to_arrow()
    result = types["duckdb"][case]
    assert result["ok"], result["error"]
    table: pa.Table = result["table"]
    return table


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("case", list(TYPE_CASES))
def test_column_types(case: str, client: str, types_lakehouse: dict[str, Any]) -> None:
    """Each column type (a table of id and c, with positional deletes) reads exactly in each
    client; a type with no Iceberg type is omitted and the rest of the row still reads."""
    lh, loc = types_lakehouse["lh"], types_lakehouse["locations"][case]
    omitted = omitted_columns(json.loads(Path(loc).read_text()))
    assert omitted == ({"c"} if case in OMITTED_CASES else set())
    got = read_with(client, case, types_lakehouse)
    problem = mismatch(client, got, Built(lh, "", []), f"types.{case}", lh.version, omitted)
    assert problem is None, problem


OMITTED_CASES = {"timestamp_ns", "time64_ns", "duration", "uint64", "float16"}


# -- filters: pruning by partitions and column bounds never drops a live row --------------
@pytest.mark.parametrize("table", TABLES)
def test_filters_return_exactly_the_matching_rows(
    built: Built, latest: dict[str, tuple[str, dict[str, Any]]], table: str
) -> None:
    loc, meta = latest[table]
    omitted = omitted_columns(meta)
    data = built.lh.read(table)
    cols = [c for c in data.column_names if c not in omitted]
    preds = predicates(data, omitted)
    assert preds
    tbl = StaticTable.from_metadata(loc)
    duck = run_duckdb(
        [{"mode": "scan", "metadata": loc, "where": sql_predicate(*p)} for p in preds]
    )
    problems = []
    for p, d in zip(preds, duck, strict=True):
        want = rows(arrow_filter(data, *p), cols)
        got = rows(tbl.scan(row_filter=iceberg_predicate(*p)).to_arrow())
        if got != want:
            problems.append(f"pyiceberg {p}: {sum(got.values())} rows, want {sum(want.values())}")
        if not d["ok"]:
            problems.append(f"duckdb {p}: {d['error']}")
        elif rows(without_nan(d["table"], p[0]) if p[1] in (">", ">=") else d["table"]) != want:
            problems.append(f"duckdb {p}: {d['table'].num_rows} rows, want {want.total()}")
    assert not problems, f"{len(problems)} of {len(preds)} filters:\n" + "\n".join(problems)


# -- a lakehouse on S3 (moto) -------------------------------------------------------------
@pytest.mark.s3
def test_clients_read_a_lakehouse_on_s3(
    s3_url: tuple[str, dict[str, Any]], moto_endpoint: str
) -> None:
    """Metadata, manifests, data, positional delete and materialised inline files on S3: the
    clients bring their own S3 settings (endpoint, keys) and read every snapshot exactly."""
    from conftest import S3_KEY, S3_REGION, S3_SECRET

    url, options = s3_url
    lh = lakehouse.open(url, storage_options=options)
    try:
        with lh.begin() as txn:
            txn.create_namespace("ns")
            txn.create_table("ns.t", pa.schema([("id", pa.int64()), ("v", pa.string())]), NO_AUTO)
        lh.append("ns.t", pa.table({"id": list(range(20_000)), "v": ["x"] * 20_000}))  # a file
        lh.append("ns.t", pa.table({"id": [-1, -2], "v": ["in", "lined"]}))  # inlined
        lh.delete("ns.t", "id % 1000 = 7 OR id = -2")
        lh.update("ns.t", "id < 3", {"v": "'u'"})
        loc = write_metadata(lh, "ns.t")
        assert loc.startswith(url + "/iceberg/")
        versions = table_versions(lh, "ns.t")
        s3_props = {
            "s3.endpoint": moto_endpoint,
            "s3.access-key-id": S3_KEY,
            "s3.secret-access-key": S3_SECRET,
            "s3.region": S3_REGION,
        }
        host = moto_endpoint.removeprefix("http://")
        secret = (
            f"CREATE SECRET moto (TYPE s3, KEY_ID '{S3_KEY}', SECRET '{S3_SECRET}', "
            f"REGION '{S3_REGION}', ENDPOINT '{host}', URL_STYLE 'path', USE_SSL false)"
        )
        with Server(url, storage_options=options) as srv:
            rest = RestCatalog("s3", uri=srv.url, **s3_props)
            tbl = rest.load_table("ns.t")
            assert [s.snapshot_id for s in tbl.metadata.snapshots] == versions
            static = StaticTable.from_metadata(loc, properties=s3_props)
            requests: list[dict[str, Any]] = []
            for v in versions:
                want = rows(lh.at_version(v).read("ns.t"))
                assert rows(tbl.scan(snapshot_id=v).to_arrow()) == want, v
                assert rows(static.scan(snapshot_id=v).to_arrow()) == want, v
                requests.append({"mode": "scan", "metadata": loc, "snapshot": v})
                requests.append(
                    {
                        "mode": "rest",
                        "endpoint": srv.url,
                        "namespace": "ns",
                        "table": "t",
                        "snapshot": v,
                    }
                )
            results = run_duckdb(requests, setup=[secret])
        for i, r in enumerate(results):
            v = versions[i // 2]
            assert r["ok"], (v, r.get("error"))
            assert rows(r["table"]) == rows(lh.at_version(v).read("ns.t")), v
    finally:
        lh.close()


# -- time travel by timestamp; pyiceberg's inspect tables ----------------------------------
@pytest.mark.parametrize("table", ["sales.orders", "misc.small"])
def test_time_travel_by_timestamp(built: Built, server: Any, rest: RestCatalog, table: str) -> None:
    """As of each snapshot's timestamp: the newest version that changed the table at or
    before lh.at_time(ts) (pyiceberg snapshot_as_of_timestamp, DuckDB AT (TIMESTAMP => ..))."""
    tbl = rest.load_table(table)
    versions = table_versions(built.lh, table)
    ns, name = table.split(".")
    requests, wants = [], []
    for s in tbl.metadata.snapshots:
        head = built.lh.at_time(s.timestamp_ms).version
        want = max(v for v in versions if v <= head)
        assert tbl.snapshot_as_of_timestamp(s.timestamp_ms).snapshot_id == want
        ts = dt.datetime.fromtimestamp(s.timestamp_ms / 1000, dt.UTC).isoformat()
        requests.append(
            {
                "mode": "rest",
                "endpoint": server.url,
                "token": TOKEN,
                "namespace": ns,
                "table": name,
                "at": f"TIMESTAMP => TIMESTAMPTZ '{ts}'",
            }
        )
        wants.append(want)
    for want, r in zip(wants, run_duckdb(requests), strict=True):
        assert r["ok"], r.get("error")
        assert rows(r["table"]) == rows(built.lh.at_version(want).read(table)), want


@pytest.mark.parametrize("table", TABLES)
def test_pyiceberg_inspect_tables(
    latest: dict[str, tuple[str, dict[str, Any]]], table: str
) -> None:
    loc, meta = latest[table]
    inspect = StaticTable.from_metadata(loc).inspect
    assert inspect.snapshots().num_rows == len(meta["snapshots"])
    assert sorted(inspect.history()["snapshot_id"].to_pylist()) == snapshot_ids(meta)
    live = inspect.files()["file_path"].to_pylist()  # data and delete files
    assert len(live) == len(set(live)) > 0
    for name in ("partitions", "manifests", "refs", "all_manifests", "all_files"):
        getattr(inspect, name)()


@pytest.mark.parametrize("table", TABLES)
def test_pyiceberg_inspect_entries(
    latest: dict[str, tuple[str, dict[str, Any]]], table: str
) -> None:
    inspect = StaticTable.from_metadata(latest[table][0]).inspect
    live = sorted(inspect.files()["file_path"].to_pylist())
    entries = inspect.entries().to_pylist()
    assert live == sorted(e["data_file"]["file_path"] for e in entries if e["status"] != 2)


def test_a_table_dropped_and_created_again(built: Built, rest: RestCatalog, server: Any) -> None:
    """``misc.tmp`` was dropped and created again: the version namespace of the first one
    serves that table (its own table-uuid, schema and rows), the plain name the new one."""
    v = built.notes["tmp_first"]
    old, new = rest.load_table(f"misc@v{v}.tmp"), rest.load_table("misc.tmp")
    assert old.metadata.table_uuid != new.metadata.table_uuid
    assert old.metadata.current_snapshot_id == v
    assert old.metadata.location != new.metadata.location
    for tbl, at in ((old, v), (new, built.lh.version)):
        want = built.lh.at_version(at).read("misc.tmp")
        got = tbl.scan().to_arrow()
        assert got.column_names == want.column_names and rows(got) == rows(want)
    first = table_versions(built.lh, "misc.tmp", upto=v)
    assert [s.snapshot_id for s in old.metadata.snapshots] == first
    duck = run_duckdb(
        [
            {
                "mode": "rest",
                "endpoint": server.url,
                "token": TOKEN,
                "namespace": f"misc@v{v}",
                "table": "tmp",
            }
        ]
    )
    assert rows(duck[0]["table"]) == rows(built.lh.at_version(v).read("misc.tmp"))


@pytest.mark.parametrize("kind", ["minimal", "full"])
def test_an_exported_lakehouse(built: Built, tmp_path: Path, kind: str) -> None:
    """A minimal export names the source's data files by absolute path (external files); a
    full export copies them. Both read through their own Iceberg metadata."""
    dest = str(tmp_path / f"export-{kind}")
    built.lh.export(dest, kind=kind)
    exported = lakehouse.open(dest)
    try:
        requests, wants = [], []
        for t in ("sales.orders", "sales.events", "misc.small"):
            loc = write_metadata(exported, t)
            assert loc.startswith(dest)
            want = built.lh.read(t)
            omitted = omitted_columns(json.loads(Path(loc).read_text()))
            cols = [c for c in want.column_names if c not in omitted]
            got = StaticTable.from_metadata(loc).scan().to_arrow()
            assert got.column_names == cols and rows(got) == rows(want, cols), t
            requests.append({"mode": "scan", "metadata": loc})
            wants.append(rows(want, cols))
        for want, r in zip(wants, run_duckdb(requests), strict=True):
            assert r["ok"], r.get("error")
            assert rows(r["table"]) == want
    finally:
        exported.close()


def test_names_beyond_plain_ascii(tmp_path: Path) -> None:
    """Namespaces, tables and columns with non-ASCII letters, spaces, dashes and dots travel
    through the REST paths and the name mapping (pyiceberg and DuckDB)."""
    cols = ["a.b", "with space", "ü", "CamelCase", "x-y", "select"]
    lh = lakehouse.open(str(tmp_path / "lh"))
    try:
        with lh.begin() as txn:
            for ns in ("ünï", "a-b"):
                txn.create_namespace(ns)
            for t in ("ünï.tàble", "a-b.x y"):
                txn.create_table(t, pa.schema([(c, pa.int64()) for c in cols]), FILES_ONLY)
        for t in ("ünï.tàble", "a-b.x y"):
            lh.append(t, pa.table({c: [1, 2, 3] for c in cols}))
            lh.delete(t, '"with space" = 2')
        with Server(str(tmp_path / "lh")) as srv:
            rest = RestCatalog("names", uri=srv.url)
            assert sorted(rest.list_namespaces()) == [("a-b",), ("ünï",)]
            assert rest.list_tables("ünï") == [("ünï", "tàble")]
            requests = []
            for t in ("ünï.tàble", "a-b.x y"):
                ns, name = t.split(".")
                got = rest.load_table((ns, name)).scan().to_arrow()
                assert got.column_names == cols and rows(got) == rows(lh.read(t)), t
                requests.append(
                    {"mode": "rest", "endpoint": srv.url, "namespace": ns, "table": name}
                )
            for t, r in zip(("ünï.tàble", "a-b.x y"), run_duckdb(requests), strict=True):
                assert r["ok"], r.get("error")
                assert r["table"].column_names == cols and rows(r["table"]) == rows(lh.read(t))
    finally:
        lh.close()
