"""The public lakehouse calls (API.md, lakehouse section), one by one."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

import lakehouse
from kvstore.objstore import MemoryStore
from lakehouse import Isolation

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


@pytest.fixture(params=["memory", "local"])
def url(request, tmp_path):
    if request.param == "memory":
        name = f"lh-api-{uuid.uuid4().hex}"
        yield f"memory://{name}"
        MemoryStore.drop(f"{name}/meta")
        MemoryStore.drop(f"{name}/data")
    else:
        yield str(tmp_path / "lh")


@pytest.fixture
def lh(url):
    h = lakehouse.open(url, kv_options={"fsync": False})
    yield h
    h.close()


def make(lh, *names):
    with lh.begin() as txn:
        txn.create_namespace("ns")
        for n in names:
            txn.create_table(f"ns.{n}", SCHEMA)


def test_new_lakehouse_is_version_0_and_empty(lh):
    assert lh.version == 0
    view = lh.at_version(0)
    assert view.version == 0 and view.list_namespaces() == []
    (root,) = lh.history()
    assert root.version == 0 and root.changes == () and root.created_at.tzinfo is not None


def test_namespace_lifecycle(lh):
    with lh.begin() as txn:
        txn.create_namespace("sales", {"owner": "ada"})
        assert txn.list_namespaces() == ["sales"]  # own change visible
        assert txn.describe_namespace("sales").properties == {"owner": "ada"}
    assert lh.version == 1
    with lh.begin() as txn:
        txn.alter_namespace("sales", set_properties={"tier": "gold"}, remove_properties=["owner"])
        assert txn.describe_namespace("sales").properties == {"tier": "gold"}
    v = lh.at_version(2)
    d = v.describe_namespace("sales")
    assert d.name == "sales" and d.properties == {"tier": "gold"}
    with lh.begin() as txn:
        txn.drop_namespace("sales")
        assert txn.list_namespaces() == []
        assert not txn.namespace_exists("sales")
    assert lh.at_version(lh.version).list_namespaces() == []
    assert lh.at_version(2).list_namespaces() == ["sales"]


def test_table_lifecycle_and_reads_see_own_changes(lh):
    with lh.begin() as txn:
        txn.create_namespace("ns")
        txn.create_table("ns.t2", SCHEMA, {"a": "1"}, primary_key=["id"], sort_keys=["name"])
        txn.create_table("ns.t1", SCHEMA)
        assert txn.list_tables("ns") == ["t1", "t2"]
        t = txn.describe_table("ns.t2")
        assert t.name == "t2" and t.namespace == "ns" and t.qualified_name == "ns.t2"
        assert t.schema == SCHEMA and t.properties == {"a": "1"}
        assert t.primary_key == ("id",) and t.sort_keys == ("name",) and t.format == "parquet"
        assert [c.id for c in t.columns] == [1, 2]
    with lh.begin() as txn:
        new_schema = SCHEMA.append(pa.field("score", pa.float64()))
        txn.alter_table("ns.t2", set_properties={"b": "2"}, schema=new_schema)
        t = txn.describe_table("ns.t2")
        assert t.schema == new_schema and t.properties == {"a": "1", "b": "2"}
        assert [(c.id, c.name) for c in t.columns] == [(1, "id"), (2, "name"), (3, "score")]
        txn.drop_table("ns.t1")
        assert txn.list_tables("ns") == ["t2"]
        assert not txn.table_exists("ns.t1")
        with pytest.raises(lakehouse.NotFound):
            txn.describe_table("ns.t1")
    view = lh.at_version(lh.version)
    assert view.list_tables("ns") == ["t2"]
    assert view.describe_table("ns.t2").schema.names == ["id", "name", "score"]
    assert lh.at_version(1).list_tables("ns") == ["t1", "t2"]


def test_views(lh):
    make(lh, "t")
    with lh.begin() as txn:
        txn.create_view("ns.v", "SELECT id FROM ns.t", {"k": "v"}, referenced=["ns.t"])
        assert txn.list_views("ns") == ["v"]
        v = txn.describe_view("ns.v")
        assert (v.name, v.sql, v.properties, v.referenced) == (
            "v",
            "SELECT id FROM ns.t",
            {"k": "v"},
            ("ns.t",),
        )
        with pytest.raises(lakehouse.AlreadyExists, match="table"):
            txn.create_view("ns.t", "SELECT 1")
        with pytest.raises(lakehouse.AlreadyExists, match="view"):
            txn.create_table("ns.v", SCHEMA)
    with lh.begin() as txn:
        txn.alter_view("ns.v", sql="SELECT name FROM ns.t")
    assert lh.at_version(lh.version).describe_view("ns.v").sql == "SELECT name FROM ns.t"
    with lh.begin() as txn:
        txn.drop_view("ns.v")
        assert txn.list_views("ns") == []
    assert lh.at_version(lh.version).list_views("ns") == []


def test_errors(lh):
    make(lh, "t")
    txn = lh.begin()
    with pytest.raises(lakehouse.AlreadyExists):
        txn.create_namespace("ns")
    with pytest.raises(lakehouse.AlreadyExists):
        txn.create_table("ns.t", SCHEMA)
    with pytest.raises(lakehouse.NotFound, match="namespace 'nope'"):
        txn.create_table("nope.t", SCHEMA)
    with pytest.raises(lakehouse.NotFound, match="namespace"):
        txn.list_tables("nope")
    with pytest.raises(lakehouse.NotFound):
        txn.describe_table("ns.missing")
    with pytest.raises(lakehouse.NotFound):
        txn.drop_table("ns.missing")
    with pytest.raises(lakehouse.NotFound):
        txn.alter_namespace("nope", set_properties={"a": "b"})
    with pytest.raises(lakehouse.NamespaceNotEmpty, match="table t"):
        txn.drop_namespace("ns")
    with pytest.raises(ValueError, match="duplicate column name"):
        txn.create_table("ns.d", pa.schema([("a", pa.int8()), ("a", pa.int8())]))
    with pytest.raises(ValueError, match="control character"):
        txn.create_namespace("bad\x01name")
    with pytest.raises(ValueError, match="dot"):
        txn.create_namespace("a.b")
    with pytest.raises(ValueError, match="limit is 255"):
        txn.create_table("ns." + "x" * 256, SCHEMA)
    with pytest.raises(ValueError, match="qualified"):
        txn.create_table("unqualified", SCHEMA)
    with pytest.raises(TypeError, match=r"pyarrow\.Schema"):
        txn.create_table("ns.x", [("a", "int")])
    with pytest.raises(TypeError, match="str to str"):
        txn.create_namespace("p", {"a": 1})
    with pytest.raises(ValueError, match="primary_key"):
        txn.create_table("ns.x", SCHEMA, primary_key=["nope"])
    with pytest.raises(ValueError, match="empty"):
        txn.create_view("ns.v", "   ")
    with pytest.raises(TypeError):
        lh.begin(isolation="serializable")
    with pytest.raises(TypeError, match="unknown option"):
        lakehouse.open("memory://whatever", nonsense=1)
    txn.rollback()
    assert lh.version == 1  # nothing of the failed calls was committed


def test_transaction_lifecycle(lh):
    make(lh, "t")
    txn = lh.begin()
    assert txn.version == 1 and txn.status == "open"
    txn.create_table("ns.u", SCHEMA)
    txn.rollback()
    assert txn.status == "rolled back" and lh.version == 1
    with pytest.raises(lakehouse.ClosedError):
        txn.list_tables("ns")
    # read-only commit creates no version
    txn = lh.begin(Isolation.SERIALIZABLE)
    assert txn.list_tables("ns") == ["t"]
    assert txn.commit() == 1 and lh.version == 1
    # exception inside "with" rolls back
    with pytest.raises(RuntimeError), lh.begin() as txn:
        txn.create_table("ns.u", SCHEMA)
        raise RuntimeError("boom")
    assert lh.at_version(lh.version).list_tables("ns") == ["t"]
    txn = lh.begin()
    txn.create_table("ns.u", SCHEMA)
    assert txn.commit() == 2 and txn.committed_version == 2 and txn.status == "committed"
    with pytest.raises(lakehouse.ClosedError):
        txn.commit()


def test_noop_alter_creates_no_change(lh):
    make(lh, "t")
    with lh.begin() as txn:
        txn.alter_table("ns.t", set_properties={})
    assert lh.version == 1


def test_history_records_changes(lh):
    make(lh, "a", "b")
    with lh.begin(Isolation.SERIALIZABLE) as txn:
        txn.describe_table("ns.a")
        txn.list_views("ns")
        txn.alter_table("ns.b", set_properties={"x": "1"})
    h = lh.history()
    assert [i.version for i in h] == [2, 1, 0]
    latest = h[0]
    assert latest.isolation is Isolation.SERIALIZABLE and latest.parent == 1
    (change,) = latest.changes
    assert (change.kind, change.name, change.op) == ("table", "ns.b", "alter")
    assert change.old_id and change.new_id and change.old_id != change.new_id
    assert ("table", "ns.a") in latest.reads and ("views", "ns") in latest.listings
    created = {(c.kind, c.name, c.op) for c in h[1].changes}
    assert created == {
        ("namespace", "ns", "create"),
        ("table", "ns.a", "create"),
        ("table", "ns.b", "create"),
    }
    assert all(c.old_id is None for c in h[1].changes)
    assert h[0].created_at >= h[1].created_at >= h[2].created_at
    assert lh.history(limit=1) == h[:1]
    assert lh.version_info(1) == h[1]


def test_reopen_keeps_everything(url):
    with lakehouse.open(url, kv_options={"fsync": False}) as lh:
        make(lh, "t")
        with lh.begin() as txn:
            txn.alter_table("ns.t", set_properties={"k": "v"})
        lh_id = lh.definition.id
    with lakehouse.open(url, kv_options={"fsync": False}) as lh:
        assert lh.version == 2 and lh.definition.id == lh_id
        assert lh.at_version(1).describe_table("ns.t").properties == {}
        assert lh.at_version(2).describe_table("ns.t").properties == {"k": "v"}


def test_lakehouse_definition_options(url):
    with lakehouse.open(
        url,
        default_isolation="serializable",
        max_name_length=10,
        transaction_ttl=30,
        properties={"team": "data"},
        kv_options={"fsync": False},
    ) as lh:
        d = lh.definition
        assert (d.max_name_length, d.default_isolation, d.transaction_ttl) == (
            10,
            Isolation.SERIALIZABLE,
            30.0,
        )
        assert d.properties == {"team": "data"}
        assert lh.begin().isolation is Isolation.SERIALIZABLE
        with pytest.raises(ValueError, match="limit is 10"), lh.begin() as txn:
            txn.create_namespace("elevenchars")
    # creation-time options are stored: a later open does not change them
    with lakehouse.open(url, max_name_length=200, kv_options={"fsync": False}) as lh:
        assert lh.definition.max_name_length == 10


def test_transaction_ttl(url):
    from kvstore.clock import FakeClock

    clock = FakeClock()  # the injection point for time (no monkeypatching)
    with lakehouse.open(url, transaction_ttl=5, clock=clock, kv_options={"fsync": False}) as lh:
        txn = lh.begin()
        txn.create_namespace("late")
        clock.advance(6)
        with pytest.raises(lakehouse.TransactionExpired):
            txn.commit()
        assert isinstance(lakehouse.TransactionExpired("x"), lakehouse.RetryableConflict)
        assert lh.version == 0


def test_closed_lakehouse(url):
    lh = lakehouse.open(url, kv_options={"fsync": False})
    view = lh.at_version(0)
    lh.close()
    with pytest.raises(lakehouse.ClosedError):
        view.list_namespaces()
    lh.close()  # idempotent
    with pytest.raises(lakehouse.ClosedError):
        _ = lh.version
    with pytest.raises(lakehouse.ClosedError):
        lh.begin()


def test_view_is_read_only_and_closable(lh):
    make(lh, "t")
    with lh.at_version(1) as view:
        assert not hasattr(view, "create_table")
        assert view.seq > 0 and "version 1" in repr(view)
    with pytest.raises(lakehouse.ClosedError):
        view.list_namespaces()


def test_errors_hierarchy():
    for cls in (
        lakehouse.NotFound,
        lakehouse.AlreadyExists,
        lakehouse.CommitConflict,
        lakehouse.VersionExpired,
        lakehouse.NamespaceNotEmpty,
    ):
        assert issubclass(cls, lakehouse.LakehouseError)
    assert issubclass(lakehouse.RetryableConflict, lakehouse.CommitConflict)
    assert issubclass(lakehouse.IncompatibleConflict, lakehouse.CommitConflict)
    assert issubclass(lakehouse.NotFound, LookupError)


def test_create_false(tmp_path):
    missing = tmp_path / "missing"
    with pytest.raises(lakehouse.NotFound, match="no lakehouse"):
        lakehouse.open(str(missing), create=False)
    assert not missing.exists()  # nothing was created
    with lakehouse.open(str(missing), kv_options={"fsync": False}):
        pass
    with lakehouse.open(missing, create=False, kv_options={"fsync": False}) as lh:
        assert lh.version == 0


def test_store_instance_and_prefix_data_store():
    store = MemoryStore()
    with lakehouse.open(store) as lh:
        make(lh, "t")
        lh.data_store.put("t/f.parquet", b"x")
    assert store.exists("lakehouse-data/t/f.parquet")
    with lakehouse.open(store, create=False) as lh:
        assert lh.at_version(1).list_tables("ns") == ["t"]
        assert lh.data_store.list("t/") == ["t/f.parquet"]


@pytest.mark.s3
def test_s3_lakehouse(s3_url):
    url, storage_options = s3_url
    with lakehouse.open(url, storage_options=storage_options) as lh:
        make(lh, "t")
        with lh.begin() as txn:
            txn.alter_table("ns.t", set_properties={"on": "s3"})
    with lakehouse.open(url, storage_options=storage_options, create=False) as lh:
        assert lh.version == 2
        assert lh.at_version(1).describe_table("ns.t").properties == {}
        assert lh.at_version(2).describe_table("ns.t").properties == {"on": "s3"}
