"""lakehouse.model / codec / conflicts: validation, round trips, the conflict table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pyarrow as pa
import pytest

from lakehouse import codec
from lakehouse.conflicts import INCOMPATIBLE, RETRYABLE, WRITE_WRITE, Intent, check, listing_of
from lakehouse.errors import CorruptionError
from lakehouse.model import (
    Isolation,
    LakehouseDef,
    NamespaceDef,
    ObjectChange,
    TableDef,
    VersionInfo,
    ViewDef,
    assign_columns,
    check_name,
    check_schema,
    ms_to_datetime,
    schema_to_ipc,
    split_qualified,
    to_epoch_ms,
)


@pytest.mark.parametrize(
    ("name", "exc", "fragment"),
    [
        ("", ValueError, "empty"),
        ("a\x00b", ValueError, "control"),
        ("tab\there", ValueError, "control"),
        ("new\nline", ValueError, "control"),
        ("del\x7f", ValueError, "control"),
        ("c1\x85", ValueError, "control"),
        ("x" * 256, ValueError, "limit is 255"),
        (3, TypeError, "must be a str"),
        (None, TypeError, "must be a str"),
    ],
)
def test_bad_names(name, exc, fragment):
    with pytest.raises(exc, match=fragment):
        check_name(name, "table name", 255)


def test_name_rules():
    assert check_name("x" * 255, "n", 255) == "x" * 255
    assert check_name("ünïcödé 表", "n", 255) == "ünïcödé 表"
    assert check_name("with.dot", "table name", 255) == "with.dot"
    with pytest.raises(ValueError, match="dot"):
        check_name("a.b", "namespace name", 255, dots=False)
    with pytest.raises(ValueError, match="limit is 5"):
        check_name("toolong", "n", 5)


def test_split_qualified():
    assert split_qualified("ns.t", "table name", 255) == ("ns", "t")
    assert split_qualified("ns.t.with.dots", "table name", 255) == ("ns", "t.with.dots")
    assert split_qualified(("ns", "t"), "table name", 255) == ("ns", "t")
    with pytest.raises(ValueError, match="qualified"):
        split_qualified("nodot", "table name", 255)
    with pytest.raises(ValueError, match="empty"):
        split_qualified("ns.", "table name", 255)
    with pytest.raises(ValueError, match="empty"):
        split_qualified(".t", "table name", 255)
    with pytest.raises(TypeError):
        split_qualified(42, "table name", 255)


def test_schema_checks_and_column_ids():
    with pytest.raises(ValueError, match="duplicate column name 'a'"):
        check_schema(pa.schema([("a", pa.int64()), ("a", pa.string())]), 255)
    with pytest.raises(TypeError, match=r"pyarrow\.Schema"):
        check_schema({"a": "int64"}, 255)
    with pytest.raises(ValueError, match="control"):
        check_schema(pa.schema([("a\nb", pa.int64())]), 255)
    s1 = pa.schema([("a", pa.int64()), ("b", pa.string())])
    cols, last = assign_columns(s1)
    assert [(c.id, c.name, c.type) for c in cols] == [(1, "a", "int64"), (2, "b", "string")]
    # drop b, add c: a keeps id 1, c gets 3 (ids are never reused)
    s2 = pa.schema([("c", pa.float64()), ("a", pa.int64())])
    cols2, last2 = assign_columns(s2, cols, last)
    assert [(c.id, c.name) for c in cols2] == [(3, "c"), (1, "a")] and last2 == 3
    with pytest.raises(ValueError, match="cannot change type"):
        assign_columns(pa.schema([("a", pa.string())]), cols, last)


def _table() -> TableDef:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            ("tags", pa.list_(pa.string())),
            ("amount", pa.decimal128(10, 2)),
            ("at", pa.timestamp("us", tz="UTC")),
        ],
        metadata={"k": "v"},
    )
    cols, last = assign_columns(schema)
    return TableDef(
        "ns", "t.1", "abc", cols, last, schema_to_ipc(schema), {"b": "2", "a": "1"}, ("id",)
    )


def test_codec_round_trips():
    t = _table()
    back = codec.decode_def(codec.encode_def(t))
    assert back == t and back.schema.equals(t.schema, check_metadata=True)
    assert back.columns[0].nullable is False
    for d in (NamespaceDef("ns", {"x": "y"}), ViewDef("ns", "v", "select 1", ("ns.t",), {})):
        assert codec.decode_def(codec.encode_def(d)) == d
    lh = LakehouseDef("id1", 100, Isolation.SERIALIZABLE, 5.0, {"p": "q"}, 123)
    assert codec.decode_lakehouse(codec.encode_lakehouse(lh)) == lh
    rec = VersionInfo(
        7,
        1_700_000_000_123,
        6,
        Isolation.SERIALIZABLE,
        "tx",
        (ObjectChange("table", "ns.t", "alter", "a", "b"),),
        (("table", "ns.u"),),
        (("tables", "ns"),),
        rollback_of=3,
        base_seq=99,
    )
    assert codec.decode_record(codec.encode_record(rec)) == rec
    assert rec.created_at == datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)


def test_encoding_is_canonical_so_ids_identify_content():
    a = NamespaceDef("ns", {"a": "1", "b": "2"})
    b = NamespaceDef("ns", {"b": "2", "a": "1"})
    assert codec.encode_def(a) == codec.encode_def(b)
    assert codec.def_id(codec.encode_def(a)) == codec.def_id(codec.encode_def(b))


def test_properties_are_read_only_dicts():
    d = NamespaceDef("ns", {"a": "1"})
    assert isinstance(d.properties, dict) and d.properties == {"a": "1"}
    with pytest.raises(TypeError, match="read-only"):
        d.properties["b"] = "2"
    with pytest.raises(TypeError):
        d.properties.update(b="2")
    assert dict(d.properties) | {"b": "2"} == {"a": "1", "b": "2"}


def test_codec_rejects_unknown_format_and_garbage():
    with pytest.raises(CorruptionError, match="format byte"):
        codec.decode_def(b"\x02{}")
    with pytest.raises(CorruptionError, match="JSON"):
        codec.decode_def(b"\x01{nope")
    with pytest.raises(CorruptionError):
        codec.decode_record(b"\x01{}")


def test_times():
    assert to_epoch_ms(ms_to_datetime(1_700_000_000_123)) == 1_700_000_000_123
    plus2 = timezone(timedelta(hours=2))
    assert to_epoch_ms(datetime(1970, 1, 1, 2, 0, 0, 1000, tzinfo=plus2)) == 1
    with pytest.raises(ValueError, match="naive"):
        to_epoch_ms(datetime(2024, 1, 1))
    with pytest.raises(TypeError):
        to_epoch_ms(1.5)
    with pytest.raises(TypeError):
        to_epoch_ms(True)


# -- the conflict rules, as a table -------------------------------------------------
def _rec(*changes: tuple[str, str, str]) -> VersionInfo:
    return VersionInfo(
        4, 0, 3, Isolation.SNAPSHOT, "other", tuple(ObjectChange(k, n, op) for k, n, op in changes)
    )


S, Z = Isolation.SNAPSHOT, Isolation.SERIALIZABLE


def _refs(text: str) -> list[tuple[str, str]]:
    """'table ns.a, tables ns' -> [("table", "ns.a"), ("tables", "ns")]."""
    return [tuple(x.split()) if " " in x else (x, "") for x in filter(None, text.split(", "))]


# isolation, my writes ("op kind name"), my reads, my listings, their change, outcome
CASES = [
    # TrinityLake's example: different tables -> compatible
    (S, "alter table ns.t2", "", "", "alter table ns.t1", None),
    (S, "alter table ns.t", "", "", "alter table ns.t", RETRYABLE),
    (S, "create table ns.t", "", "", "create table ns.t", INCOMPATIBLE),
    (S, "alter table ns.t", "", "", "drop table ns.t", INCOMPATIBLE),
    (S, "drop table ns.t", "", "", "drop table ns.t", INCOMPATIBLE),
    (S, "drop table ns.t", "", "", "alter table ns.t", RETRYABLE),
    # write skew: allowed under SNAPSHOT, not under SERIALIZABLE
    (S, "alter table ns.b", "table ns.a", "", "alter table ns.a", None),
    (Z, "alter table ns.b", "table ns.a", "", "alter table ns.a", RETRYABLE),
    # phantoms through listings
    (Z, "create table ns.x", "", "tables ns", "create table ns.y", RETRYABLE),
    (S, "create table ns.x", "", "tables ns", "create table ns.y", None),
    (Z, "create table ns.x", "", "tables ns", "alter table ns.y", None),
    (Z, "create table ns.x", "", "tables other", "drop table ns.y", None),
    (Z, "create namespace b", "", "namespaces", "create namespace a", RETRYABLE),
    (Z, "create table ns.x", "", "views ns", "create view ns.v", RETRYABLE),
    # a read of an object that did not exist yet still counts
    (Z, "alter table ns.x", "view ns.v", "", "create view ns.v", RETRYABLE),
]


@pytest.mark.parametrize(("isolation", "writes", "reads", "listings", "theirs", "expected"), CASES)
def test_conflict_table(isolation, writes, reads, listings, theirs, expected):
    op, kind, name = writes.split()
    intent = Intent(
        isolation, {(kind, name): op}, frozenset(_refs(reads)), frozenset(_refs(listings))
    )
    t_op, t_kind, t_name = theirs.split()
    got = check(intent, _rec((t_kind, t_name, t_op)))
    assert (got and got.outcome) == expected
    if got is not None:
        assert got.version == 4


def test_write_write_table_is_complete_and_incompatible_wins():
    ops = ("create", "alter", "drop")
    assert set(WRITE_WRITE) == {(a, b) for a in ops for b in ops}
    intent = Intent(S, {("table", "ns.a"): "alter", ("table", "ns.b"): "alter"})
    got = check(intent, _rec(("table", "ns.a", "alter"), ("table", "ns.b", "drop")))
    assert got is not None and got.outcome == INCOMPATIBLE
    exclusive = Intent(S, {}, exclusive=True)
    assert check(exclusive, _rec(("namespace", "z", "create"))).outcome == RETRYABLE


def test_listing_of():
    assert listing_of(ObjectChange("table", "ns.t.x", "create")) == ("tables", "ns")
    assert listing_of(ObjectChange("view", "ns.v", "drop")) == ("views", "ns")
    assert listing_of(ObjectChange("namespace", "ns", "drop")) == ("namespaces", "")
    assert listing_of(ObjectChange("table", "ns.t", "alter")) is None
