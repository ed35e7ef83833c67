# mypy: disable-error-code="arg-type"
"""The foreign-exception sweep (issue 19, part 3; API.md "Integrity").

Every public call is fed bad input: wrong types, bad SQL, bad update
expressions, overflowing values, unknown columns, bad schemas, wrong names,
versions and timestamps, data that does not fit the table. Each case must
raise one of the documented exception types (``ValueError``, ``TypeError``,
``lakehouse.LakehouseError``; never ``KeyError``), never an exception of a
dependency (pyarrow, botocore, fsspec, s3fs, sqlglot: not even one that
subclasses ``ValueError``, such as ``pyarrow.ArrowInvalid``), with a message
naming what was wrong; and the lakehouse stays usable afterwards: the version
and rows are what they were (nothing half-written is visible), and a later
append and read work.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from parquet_files import PARQUET

import kvstore
import lakehouse

#: packages whose exceptions must never reach a caller
FOREIGN = frozenset({"pyarrow", "botocore", "boto3", "fsspec", "s3fs", "aiobotocore", "sqlglot"})
UTC = dt.UTC

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("qty", pa.int32()),
        ("label", pa.string()),
        ("day", pa.date32()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("amount", pa.decimal128(10, 2)),
        ("tags", pa.list_(pa.string())),
        ("meta", pa.struct([("a", pa.int32())])),
    ]
)
T = "s.t"


def rows(n: int, start: int = 0) -> pa.Table:
    ids = range(start, start + n)
    return pa.table(
        {
            "id": list(ids),
            "qty": list(ids),
            "label": [f"l{i}" for i in ids],
            "day": [dt.date(2024, 1, 1) + dt.timedelta(days=i) for i in ids],
            "ts": [dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(hours=i) for i in ids],
            "amount": [Decimal(f"{i}.25") for i in ids],
            "tags": [["a", str(i)] for i in ids],
            "meta": [{"a": i} for i in ids],
        },
        schema=SCHEMA,
    )


def with_column(name: str, values: Any, type_: pa.DataType | None = None) -> pa.Table:
    """One row of good data with column ``name`` replaced (or added)."""
    good = rows(1, 100)
    arr = pa.array(values, type=type_)
    if name in good.column_names:
        return good.set_column(good.column_names.index(name), name, arr)
    return good.append_column(name, arr)


def without(name: str) -> pa.Table:
    good = rows(1, 100)
    return good.drop_columns([name])


@dataclass(frozen=True)
class Env:
    lh: lakehouse.Lakehouse
    url: str
    tmp: Path


@dataclass(frozen=True)
class Case:
    id: str
    call: Callable[[Env], Any]
    #: a regular expression the message must contain (the argument, column or object)
    names: str
    #: the exception classes accepted (all documented ones by default)
    expect: tuple[type[BaseException], ...] = (ValueError, TypeError, lakehouse.LakehouseError)


def txn(fn: Callable[[Any], Any]) -> Callable[[Env], Any]:
    """Run ``fn`` in a transaction that commits on success."""

    def call(env: Env) -> Any:
        with env.lh.begin() as t:
            return fn(t)

    return call


def lh(fn: Callable[[lakehouse.Lakehouse], Any]) -> Callable[[Env], Any]:
    return lambda env: fn(env.lh)


def view(version: int, fn: Callable[[Any], Any]) -> Callable[[Env], Any]:
    def call(env: Env) -> Any:
        with env.lh.at_version(version) as v:
            return fn(v)

    return call


def reader(fn: Callable[[Any], Any]) -> Callable[[Env], Any]:
    def call(env: Env) -> Any:
        r = lakehouse.open_reader(env.url)
        try:
            return fn(r)
        finally:
            r.close()

    return call


def create_and_append(
    t: Any, schema: pa.Schema = SCHEMA, data: pa.Table | None = None, **layout: Any
) -> None:
    t.create_table("s.x", schema, **layout)
    t.append("s.x", rows(3) if data is None else data)


def _failing_batches() -> Any:
    yield rows(1, 200).to_batches()[0]
    raise ValueError("the data source failed")


def _committed(h: lakehouse.Lakehouse) -> Any:
    t = h.begin()
    t.commit()
    return t


def _closed_view(h: lakehouse.Lakehouse) -> Any:
    v = h.at_version(2)
    v.close()
    return v


def scan(**kwargs: Any) -> Callable[[Any], Any]:
    return lambda h: h.scan_batches(T, **kwargs).read_all()


NF = (lakehouse.NotFound,)
TE = (TypeError,)
VE = (ValueError,)
NAIVE = dt.datetime(2024, 1, 1)
PAST = dt.datetime(1990, 1, 1, tzinfo=UTC)
NESTED_SCHEMA = pa.schema([("m", pa.map_(pa.string(), pa.int32()))])

CASES: list[Case] = [
    # -- reads: table names ---------------------------------------------------------------
    Case("read-none-table", lh(lambda h: h.read(None)), "table", TE),
    Case("read-int-table", lh(lambda h: h.read(7)), "table", TE),
    Case("read-missing-namespace", lh(lambda h: h.read("nons.t")), "nons", NF),
    Case("read-missing-table", lh(lambda h: h.read("s.nosuch")), "nosuch", NF),
    Case("read-unqualified", lh(lambda h: h.read("t")), "t"),
    Case("read-three-parts", lh(lambda h: h.read("a.b.c")), "'a"),
    Case("table-stats-none", lh(lambda h: h.table_stats(None)), "table", TE),
    Case("table-stats-missing", lh(lambda h: h.table_stats("s.nosuch")), "nosuch", NF),
    Case("list-data-files-missing", lh(lambda h: h.list_data_files("s.nosuch")), "nosuch", NF),
    Case("describe-table-missing", lh(lambda h: h.describe_table("s.nosuch")), "nosuch", NF),
    Case("describe-namespace-none", lh(lambda h: h.describe_namespace(None)), "name", TE),
    Case("list-tables-missing", lh(lambda h: h.list_tables("nons")), "nons", NF),
    # -- reads: columns -------------------------------------------------------------------
    Case("read-unknown-column", lh(lambda h: h.read(T, columns=["nosuch"])), "nosuch"),
    Case("read-columns-int", lh(lambda h: h.read(T, columns=[1])), "column"),
    Case("read-columns-str", lh(lambda h: h.read(T, columns=5)), "columns"),
    # -- reads: where ---------------------------------------------------------------------
    Case("where-syntax", lh(lambda h: h.read(T, where="qty >")), "where|qty|syntax"),
    Case("where-unknown-column", lh(lambda h: h.read(T, where="nosuch = 1")), "nosuch"),
    Case("where-int", lh(lambda h: h.read(T, where=5)), "where", TE),
    Case("where-not-boolean", lh(lambda h: h.read(T, where="qty + 1")), "where|bool"),
    Case("where-statement", lh(lambda h: h.read(T, where="DROP TABLE s.t")), "where|DROP"),
    Case("where-two-statements", lh(lambda h: h.read(T, where="qty = 1; qty = 2")), "where|;"),
    Case("where-string-vs-int", lh(lambda h: h.read(T, where="label > 5")), "label"),
    Case("where-int-vs-string", lh(lambda h: h.read(T, where="qty = 'abc'")), "qty|abc"),
    Case("where-bad-date", lh(lambda h: h.read(T, where="day = '2024-13-45'")), "day|2024-13-45"),
    Case("where-date-vs-int", lh(lambda h: h.read(T, where="day > 5")), "day"),
    Case("where-bad-timestamp", lh(lambda h: h.read(T, where="ts > 'noon'")), "ts|noon"),
    Case("where-decimal-vs-string", lh(lambda h: h.read(T, where="amount > 'x'")), "amount"),
    Case("where-list-compare", lh(lambda h: h.read(T, where="tags = 'a'")), "tags"),
    Case("where-struct-compare", lh(lambda h: h.read(T, where="meta > 1")), "meta"),
    Case("where-division-by-zero", lh(lambda h: h.read(T, where="qty / 0 > 1")), "qty|zero"),
    Case("where-bad-cast", lh(lambda h: h.read(T, where="CAST(label AS INT) = 1")), "label"),
    Case("where-unknown-function", lh(lambda h: h.read(T, where="frob(qty) = 1")), "frob"),
    Case("where-subquery", lh(lambda h: h.read(T, where="qty IN (SELECT 1)")), "where|SELECT"),
    Case("where-expr-unknown", lh(lambda h: h.read(T, where=pc.field("nosuch") == 1)), "nosuch"),
    Case("where-expr-types", lh(lambda h: h.read(T, where=pc.field("label") > 5)), "label"),
    Case(
        "where-expr-not-boolean", lh(lambda h: h.read(T, where=pc.field("qty") + 1)), "where|bool"
    ),
    Case(
        "where-division-by-zero-after-delete",
        txn(lambda t: (t.delete(T, "id = 0"), t.read(T, where="qty / 0 > 1"))),
        "qty|zero",
    ),
    Case(
        "where-bad-cast-after-delete",
        txn(lambda t: (t.delete(T, "id = 0"), t.read(T, where="CAST(label AS INT) = 1"))),
        "label",
    ),
    Case("scan-division-by-zero", lh(scan(where="qty / 0 > 1")), "qty|zero"),
    Case("scan-unknown-column", lh(scan(columns=["nosuch"])), "nosuch"),
    Case("scan-where-types", lh(scan(where="label > 5")), "label"),
    Case("scan-where-syntax", lh(scan(where="(((")), "where|syntax|\\("),
    # -- views and readers ----------------------------------------------------------------
    Case("at-version-negative", lh(lambda h: h.at_version(-1)), "version", VE),
    Case("at-version-future", lh(lambda h: h.at_version(999)), "999", NF),
    Case("at-version-str", lh(lambda h: h.at_version("1")), "version", TE),
    Case("at-version-float", lh(lambda h: h.at_version(1.5)), "version", TE),
    Case("at-version-none", lh(lambda h: h.at_version(None)), "version", TE),
    Case("at-time-naive", lh(lambda h: h.at_time(NAIVE)), "naive|timezone|time"),
    Case("at-time-str", lh(lambda h: h.at_time("yesterday")), "yesterday|time|ts"),
    Case("at-time-none", lh(lambda h: h.at_time(None)), "time|ts"),
    Case("at-time-before", lh(lambda h: h.at_time(PAST)), "exist|time"),
    Case("at-time-nan", lh(lambda h: h.at_time(float("nan"))), "time|ts|nan"),
    Case("version-at-naive", lh(lambda h: h.version_at(NAIVE)), "naive|timezone|time"),
    Case("version-info-future", lh(lambda h: h.version_info(999)), "999", NF),
    Case("version-info-str", lh(lambda h: h.version_info("x")), "version"),
    Case("view-read-before-table", view(0, lambda v: v.read(T)), "s", NF),
    Case("view-where-types", view(2, lambda v: v.read(T, where="label > 5")), "label"),
    Case("view-unknown-column", view(2, lambda v: v.read(T, columns=["nosuch"])), "nosuch"),
    Case("view-table-stats-missing", view(2, lambda v: v.table_stats("s.nosuch")), "nosuch", NF),
    Case("reader-read-missing", reader(lambda r: r.read("s.nosuch")), "nosuch", NF),
    Case("reader-where-types", reader(lambda r: r.read(T, where="label > 5")), "label"),
    Case("reader-at-version", reader(lambda r: r.at_version(999)), "999", NF),
    Case("reader-begin", reader(lambda r: r.begin()), "read-only", (lakehouse.ReadOnlyError,)),
    Case("at-version-huge", lh(lambda h: h.at_version(2**70)), "version|2361183241434822606848"),
    Case("at-time-inf", lh(lambda h: h.at_time(float("inf"))), "time|ts|inf"),
    Case("at-time-bool", lh(lambda h: h.at_time(True)), "time|ts", TE),
    Case(
        "version-info-huge", lh(lambda h: h.version_info(2**70)), "version|2361183241434822606848"
    ),
    Case(
        "where-deep-nesting",
        lh(lambda h: h.read(T, where="(" * 3000 + "qty = 1" + ")" * 3000)),
        "where|deep|nest|long",
    ),
    Case(
        "where-nul-byte",
        lh(lambda h: h.read(T, where="label = 'a\x00' AND qty =")),
        "where|label|qty",
    ),
    Case(
        "where-overflow",
        lh(lambda h: h.read(T, where="id + 9223372036854775807 > 0")),
        "id|overflow",
    ),
    Case(
        "where-cast-overflow",
        lh(lambda h: h.read(T, where="CAST(amount * 100 AS TINYINT) > 0")),
        "amount|TINYINT|overflow|range",
    ),
    Case("where-like-int", lh(lambda h: h.read(T, where="qty LIKE 'a%'")), "qty|LIKE"),
    Case("where-lower-int", lh(lambda h: h.read(T, where="lower(qty) = 'a'")), "qty|lower"),
    Case("where-length-list", lh(lambda h: h.read(T, where="length(tags) > 1")), "tags|length"),
    Case(
        "where-between-strings", lh(lambda h: h.read(T, where="qty BETWEEN 'a' AND 'b'")), "qty|'a'"
    ),
    Case("where-in-mixed", lh(lambda h: h.read(T, where="qty IN (1, 'a')")), "qty|'a'"),
    Case(
        "where-coalesce-mixed",
        lh(lambda h: h.read(T, where="coalesce(qty, 'x') = 1")),
        "qty|coalesce|'x'",
    ),
    Case("where-round-string", lh(lambda h: h.read(T, where="round(label) = 1")), "label|round"),
    Case("where-abs-timestamp", lh(lambda h: h.read(T, where="abs(ts) > 1")), "ts|abs"),
    Case(
        "where-timestamp-offset",
        lh(lambda h: h.read(T, where="ts > '2024-01-01T00:00:00+99:00'")),
        "ts|99",
    ),
    Case(
        "where-huge-int",
        lh(lambda h: h.read(T, where="id = 99999999999999999999999999999")),
        "id|9999",
    ),
    Case("where-struct-field", lh(lambda h: h.read(T, where="meta.a = 1")), "meta"),
    Case(
        "where-expr-division",
        lh(lambda h: h.read(T, where=pc.divide(pc.field("qty"), 0) > 1)),
        "where|zero",
    ),
    # -- history, changes, rollback, export, expiry -----------------------------------------
    Case("history-limit-str", lh(lambda h: h.history(limit="3")), "limit", TE),
    Case("changes-missing-table", lh(lambda h: h.changes("s.nosuch", 1)), "nosuch", NF),
    Case("changes-negative", lh(lambda h: h.changes(T, -1)), "version"),
    Case("changes-str", lh(lambda h: h.changes(T, "1")), "version", TE),
    Case("changes-reversed", lh(lambda h: h.changes(T, 2, 1)), "version"),
    Case("changes-future", lh(lambda h: h.changes(T, 1, 999)), "999"),
    Case("changes-none", lh(lambda h: h.changes(None, 1)), "table", TE),
    Case("rollback-negative", lh(lambda h: h.rollback(-1)), "version"),
    Case("rollback-future", lh(lambda h: h.rollback(999)), "999", NF),
    Case("rollback-str", lh(lambda h: h.rollback("1")), "version", TE),
    Case("export-none", lh(lambda h: h.export(None)), "url|dest", TE),
    Case("export-bad-kind", lambda e: e.lh.export(str(e.tmp / "x"), kind="half"), "kind"),
    Case("export-bad-version", lambda e: e.lh.export(str(e.tmp / "x"), version=999), "999"),
    Case("export-bad-scheme", lh(lambda h: h.export("memory:/x")), "memory"),
    Case("expire-keep-negative", lh(lambda h: h.expire_versions(keep_last=-1)), "keep_last"),
    Case("expire-keep-str", lh(lambda h: h.expire_versions(keep_last="2")), "keep_last", TE),
    Case("expire-older-int", lh(lambda h: h.expire_versions(older_than="x")), "older_than"),
    Case("expire-grace-str", lh(lambda h: h.expire_versions(keep_last=1, grace="1h")), "grace"),
    Case(
        "expire-grace-negative",
        lh(lambda h: h.expire_versions(keep_last=1, grace=dt.timedelta(-1))),
        "grace",
    ),
    Case("orphans-older-str", lh(lambda h: h.remove_orphan_files(older_than="x")), "older_than"),
    Case(
        "orphans-older-negative",
        lh(lambda h: h.remove_orphan_files(older_than=dt.timedelta(-1))),
        "older_than",
    ),
    Case("changes-huge", lh(lambda h: h.changes(T, 1, 2**70)), "version|2361183241434822606848"),
    Case("rollback-huge", lh(lambda h: h.rollback(2**70)), "version|2361183241434822606848"),
    Case(
        "export-huge-version",
        lambda e: e.lh.export(str(e.tmp / "x"), version=2**70),
        "version|2361183241434822606848",
    ),
    Case("history-limit-negative", lh(lambda h: h.history(limit=-1)), "limit"),
    Case(
        "expire-older-naive",
        lh(lambda h: h.expire_versions(older_than=NAIVE)),
        "older_than|naive|time",
    ),
    Case("expire-keep-zero", lh(lambda h: h.expire_versions(keep_last=0)), "keep_last"),
    Case("app-version-long", lh(lambda h: h.app_version("x" * 100_000)), "app_id"),
    Case("app-version-nul", lh(lambda h: h.app_version("a\x00b")), "app_id"),
    Case("app-version-none", lh(lambda h: h.app_version(None)), "app_id", TE),
    Case("begin-isolation-str", lh(lambda h: h.begin("snapshot")), "isolation", TE),
    Case("begin-app-version-negative", lh(lambda h: h.begin(app_id="a", app_version=-1)), "app"),
    # -- definitions ----------------------------------------------------------------------
    Case("create-namespace-none", txn(lambda t: t.create_namespace(None)), "name", TE),
    Case("create-namespace-empty", txn(lambda t: t.create_namespace("")), "name"),
    Case("create-namespace-exists", txn(lambda t: t.create_namespace("s")), "s"),
    Case("create-namespace-props", txn(lambda t: t.create_namespace("n", {"a": 1})), "propert"),
    Case("create-table-no-schema", txn(lambda t: t.create_table("s.x", None)), "schema", TE),
    Case("create-table-str-schema", txn(lambda t: t.create_table("s.x", "id int")), "schema", TE),
    Case("create-table-exists", txn(lambda t: t.create_table(T, SCHEMA)), "s.t"),
    Case("create-table-no-namespace", txn(lambda t: t.create_table("nons.x", SCHEMA)), "nons"),
    Case(
        "create-table-duplicate-columns",
        txn(lambda t: t.create_table("s.x", pa.schema([("a", pa.int32()), ("a", pa.int64())]))),
        "a",
    ),
    Case(
        "create-table-empty-column-name",
        txn(lambda t: t.create_table("s.x", pa.schema([("", pa.int32())]))),
        "column|name",
    ),
    Case(
        "create-table-sort-unknown",
        txn(lambda t: t.create_table("s.x", SCHEMA, sort_keys=["nosuch"])),
        "nosuch",
    ),
    Case(
        "create-table-key-unknown",
        txn(lambda t: t.create_table("s.x", SCHEMA, primary_key=["nosuch"])),
        "nosuch",
    ),
    Case(
        "create-table-interval",
        txn(
            lambda t: create_and_append(
                t,
                schema=pa.schema([("i", pa.month_day_nano_interval())]),
                data=pa.table({"i": pa.array([(1, 2, 3)], pa.month_day_nano_interval())}),
            )
        ),
        "i|interval",
    ),
    Case(
        "create-table-name-nul",
        txn(lambda t: t.create_table("s.x", pa.schema([("a\x00", pa.int32())]))),
        "column|name",
    ),
    Case(
        "create-table-name-long",
        txn(lambda t: t.create_table("s." + "x" * 100_000, SCHEMA)),
        "name|long",
    ),
    Case("create-namespace-nul", txn(lambda t: t.create_namespace("a\x00")), "name"),
    Case(
        "create-table-huge-decimal",
        txn(
            lambda t: (
                t.create_table("s.x", pa.schema([("d", pa.decimal256(76, 0))])),
                t.append("s.x", pa.table({"d": pa.array([Decimal(10**75)], pa.decimal256(76, 0))})),
                t.update("s.x", "true", {"d": "d * 10"}),
            )
        ),
        "d",
    ),
    Case("drop-table-missing", txn(lambda t: t.drop_table("s.nosuch")), "nosuch", NF),
    Case(
        "alter-narrowing",
        txn(lambda t: t.alter_table(T, schema=SCHEMA.set(0, pa.field("id", pa.int32(), False)))),
        "id",
    ),
    Case(
        "alter-int-to-string",
        txn(lambda t: t.alter_table(T, schema=SCHEMA.set(1, pa.field("qty", pa.string())))),
        "qty",
    ),
    Case(
        "alter-rename-unknown",
        txn(lambda t: t.alter_table(T, rename_columns={"nosuch": "x"})),
        "nosuch",
    ),
    Case(
        "alter-rename-collision",
        txn(lambda t: t.alter_table(T, rename_columns={"qty": "label"})),
        "label",
    ),
    Case(
        "alter-rename-none",
        txn(lambda t: t.alter_table(T, rename_columns={"qty": None})),
        "qty|name",
    ),
    Case("alter-schema-str", txn(lambda t: t.alter_table(T, schema="x")), "schema", TE),
    Case("create-view-none", txn(lambda t: t.create_view("s.v", None)), "sql", TE),
    # -- append / overwrite ---------------------------------------------------------------
    Case("append-none", txn(lambda t: t.append(T, None)), "data", TE),
    Case("append-str", txn(lambda t: t.append(T, "1,2,3")), "data", TE),
    Case("append-missing-table", txn(lambda t: t.append("s.nosuch", rows(1))), "nosuch", NF),
    Case(
        "append-unknown-column",
        txn(lambda t: t.append(T, with_column("nosuch", [1]))),
        "nosuch",
    ),
    Case(
        "append-string-for-int",
        txn(lambda t: t.append(T, with_column("qty", ["abc"]))),
        "qty",
    ),
    Case(
        "append-int64-overflow",
        txn(lambda t: t.append(T, with_column("qty", [3_000_000_000], pa.int64()))),
        "qty",
    ),
    Case(
        "append-float-for-int",
        txn(lambda t: t.append(T, with_column("qty", [1.5], pa.float64()))),
        "qty",
    ),
    Case(
        "append-null-in-required",
        txn(lambda t: t.append(T, with_column("id", [None], pa.int64()))),
        "id",
    ),
    Case("append-missing-required", txn(lambda t: t.append(T, without("id"))), "id"),
    Case(
        "append-naive-timestamp",
        txn(lambda t: t.append(T, with_column("ts", [NAIVE], pa.timestamp("us")))),
        "ts",
    ),
    Case(
        "append-bad-date-string",
        txn(lambda t: t.append(T, with_column("day", ["2024-13-01"]))),
        "day",
    ),
    Case(
        "append-decimal-overflow",
        txn(lambda t: t.append(T, with_column("amount", [Decimal("1e30")], pa.decimal128(38, 0)))),
        "amount",
    ),
    Case(
        "append-decimal-scale",
        txn(lambda t: t.append(T, with_column("amount", [Decimal("1.255")]))),
        "amount",
    ),
    Case(
        "append-list-of-int",
        txn(lambda t: t.append(T, with_column("tags", [[1, 2]], pa.list_(pa.int64())))),
        "tags",
    ),
    Case(
        "append-list-for-string",
        txn(lambda t: t.append(T, with_column("label", [["a"]]))),
        "label",
    ),
    Case(
        "append-struct-extra-field",
        txn(lambda t: t.append(T, with_column("meta", [{"a": 1, "b": "x"}]))),
        "meta|b",
    ),
    Case(
        "append-struct-wrong-field-type",
        txn(lambda t: t.append(T, with_column("meta", [{"a": "x"}]))),
        "meta|a",
    ),
    Case(
        "append-struct-for-int",
        txn(lambda t: t.append(T, with_column("qty", [{"a": 1}]))),
        "qty",
    ),
    Case(
        "append-struct-missing-field",
        txn(lambda t: t.append(T, with_column("meta", [{"b": 1}]))),
        "meta",
    ),
    Case(
        "append-map-for-struct",
        txn(
            lambda t: t.append(
                T, with_column("meta", [[("a", 1)]], pa.map_(pa.string(), pa.int64()))
            )
        ),
        "meta",
    ),
    Case(
        "append-timestamp-nanos",
        txn(lambda t: t.append(T, with_column("ts", [1], pa.timestamp("ns", tz="UTC")))),
        "ts",
    ),
    Case(
        "append-binary-bad-utf8",
        txn(lambda t: t.append(T, with_column("label", [b"\xff"], pa.binary()))),
        "label",
    ),
    Case(
        "append-nan-for-int",
        txn(lambda t: t.append(T, with_column("qty", [float("nan")], pa.float64()))),
        "qty",
    ),
    Case(
        "append-reader-unknown-column",
        txn(
            lambda t: t.append(
                T,
                pa.RecordBatchReader.from_batches(
                    with_column("nosuch", [1]).schema, with_column("nosuch", [1]).to_batches()
                ),
            )
        ),
        "nosuch",
    ),
    Case(
        "append-reader-failing",
        txn(lambda t: t.append(T, pa.RecordBatchReader.from_batches(SCHEMA, _failing_batches()))),
        "data|source|fail",
    ),
    Case(
        "append-duplicate-columns",
        txn(lambda t: t.append(T, pa.table([[1], [2]], names=["id", "id"]))),
        "id",
    ),
    Case(
        "append-dict-of-lists",
        txn(lambda t: t.append(T, {"id": [1]})),
        "data",
        TE,
    ),
    Case(
        "append-pandas-mixed-object",
        txn(lambda t: t.append(T, _pandas({"id": [1, 2], "qty": [1, "two"]}))),
        "qty",
    ),
    Case(
        "append-pandas-overflow",
        txn(lambda t: t.append(T, _pandas({"id": [1], "qty": [2**40]}))),
        "qty",
    ),
    Case(
        "overwrite-rows-outside-where",
        txn(lambda t: t.overwrite(T, rows(1, 50), where="id < 5")),
        "where|match",
    ),
    Case(
        "overwrite-where-types",
        txn(lambda t: t.overwrite(T, rows(1, 0), where="label > 5")),
        "label",
    ),
    # -- delete ---------------------------------------------------------------------------
    Case("delete-none", txn(lambda t: t.delete(T, None)), "where"),
    Case("delete-empty", txn(lambda t: t.delete(T, "")), "where"),
    Case("delete-int", txn(lambda t: t.delete(T, 3)), "where", TE),
    Case("delete-unknown-column", txn(lambda t: t.delete(T, "nosuch = 1")), "nosuch"),
    Case("delete-types", txn(lambda t: t.delete(T, "qty = 'abc'")), "qty|abc"),
    Case("delete-string-vs-int", txn(lambda t: t.delete(T, "label < 3")), "label"),
    Case("delete-bad-cast", txn(lambda t: t.delete(T, "CAST(label AS INT) = 1")), "label"),
    Case("delete-division-by-zero", txn(lambda t: t.delete(T, "qty / 0 = 1")), "qty|zero"),
    Case("delete-missing-table", txn(lambda t: t.delete("s.nosuch", "id = 1")), "nosuch", NF),
    # -- update ---------------------------------------------------------------------------
    Case(
        "update-overflow",
        txn(lambda t: t.update(T, "id >= 0", {"qty": "qty * 3000000000"})),
        "qty",
    ),
    Case(
        "update-overflow-literal",
        txn(lambda t: t.update(T, "id >= 0", {"qty": 2**40})),
        "qty",
    ),
    Case(
        "update-overflow-sql-literal",
        txn(lambda t: t.update(T, "id >= 0", {"qty": "3000000000"})),
        "qty",
    ),
    Case(
        "update-int64-overflow",
        txn(lambda t: t.update(T, "id >= 0", {"id": "id * 9223372036854775807"})),
        "id",
    ),
    Case("update-unknown-column", txn(lambda t: t.update(T, "true", {"nosuch": "1"})), "nosuch"),
    Case(
        "update-unknown-in-expression",
        txn(lambda t: t.update(T, "true", {"qty": "nosuch + 1"})),
        "nosuch",
    ),
    Case("update-string-to-int", txn(lambda t: t.update(T, "true", {"qty": "'abc'"})), "qty"),
    Case("update-syntax", txn(lambda t: t.update(T, "true", {"qty": "qty +"})), "qty"),
    Case("update-null-required", txn(lambda t: t.update(T, "true", {"id": None})), "id"),
    Case("update-values-none", txn(lambda t: t.update(T, "true", None)), "values", TE),
    Case("update-values-list", txn(lambda t: t.update(T, "true", [("qty", 1)])), "values", TE),
    Case("update-values-empty", txn(lambda t: t.update(T, "true", {})), "values"),
    Case("update-float-literal", txn(lambda t: t.update(T, "true", {"qty": 1.5})), "qty"),
    Case("update-division-by-zero", txn(lambda t: t.update(T, "true", {"qty": "qty / 0"})), "qty"),
    Case(
        "update-string-arithmetic",
        txn(lambda t: t.update(T, "true", {"label": "label * 2"})),
        "label",
    ),
    Case("update-bad-date", txn(lambda t: t.update(T, "true", {"day": "'2024-02-30'"})), "day"),
    Case("update-object-literal", txn(lambda t: t.update(T, "true", {"qty": object()})), "qty"),
    Case("update-list-from-string", txn(lambda t: t.update(T, "true", {"tags": "'x'"})), "tags"),
    Case(
        "update-bad-cast",
        txn(lambda t: t.update(T, "true", {"qty": "CAST(label AS INT)"})),
        "qty|label",
    ),
    Case(
        "update-decimal-overflow",
        txn(lambda t: t.update(T, "true", {"amount": "amount * 1000000000000"})),
        "amount",
    ),
    Case(
        "update-int64-overflow-plus",
        txn(lambda t: t.update(T, "true", {"id": "id + 9223372036854775807"})),
        "id",
    ),
    Case("update-key-int", txn(lambda t: t.update(T, "true", {1: "2"})), "column|1"),
    Case(
        "update-decimal-nan", txn(lambda t: t.update(T, "true", {"amount": float("nan")})), "amount"
    ),
    Case(
        "update-decimal-inf", txn(lambda t: t.update(T, "true", {"amount": float("inf")})), "amount"
    ),
    Case("update-bad-utf8", txn(lambda t: t.update(T, "true", {"label": b"\xff"})), "label"),
    Case("update-huge-int-literal", txn(lambda t: t.update(T, "true", {"id": 2**70})), "id"),
    Case(
        "update-huge-sql-literal",
        txn(lambda t: t.update(T, "true", {"id": "99999999999999999999999999999"})),
        "id",
    ),
    Case("update-struct-literal", txn(lambda t: t.update(T, "true", {"meta": {"b": 1}})), "meta"),
    Case("update-list-literal", txn(lambda t: t.update(T, "true", {"tags": [1, 2]})), "tags"),
    Case(
        "update-deep-nesting",
        txn(lambda t: t.update(T, "true", {"qty": "(" * 3000 + "1" + ")" * 3000})),
        "qty",
    ),
    Case("update-where-types", txn(lambda t: t.update(T, "label > 5", {"qty": 1})), "label"),
    Case("update-where-syntax", txn(lambda t: t.update(T, "id >", {"qty": 1})), "where|id"),
    # -- merge ----------------------------------------------------------------------------
    Case("merge-on-unknown", txn(lambda t: t.merge(T, rows(2, 5), on=["nosuch"])), "nosuch"),
    Case("merge-on-missing-in-source", txn(lambda t: t.merge(T, without("id"), on="id")), "id"),
    Case("merge-on-none", txn(lambda t: t.merge(T, rows(2, 5), on=None)), "on"),
    Case(
        "merge-duplicate-source-keys",
        txn(lambda t: t.merge(T, pa.concat_tables([rows(1, 3), rows(1, 3)]), on="id")),
        "id|key|match",
    ),
    Case(
        "merge-bad-when-matched",
        txn(lambda t: t.merge(T, rows(2, 5), on="id", when_matched="upsert")),
        "when_matched",
    ),
    Case(
        "merge-bad-when-not-matched",
        txn(lambda t: t.merge(T, rows(2, 5), on="id", when_not_matched="x")),
        "when_not_matched",
    ),
    Case(
        "merge-string-for-int",
        txn(lambda t: t.merge(T, with_column("qty", ["x"]), on="id")),
        "qty",
    ),
    Case(
        "merge-overflow",
        txn(lambda t: t.merge(T, with_column("qty", [2**40], pa.int64()), on="id")),
        "qty",
    ),
    Case("merge-data-none", txn(lambda t: t.merge(T, None, on="id")), "data", TE),
    Case(
        "merge-on-list-column",
        txn(lambda t: t.merge(T, rows(2, 5), on="tags")),
        "tags",
    ),
    Case("create-view-empty", txn(lambda t: t.create_view("s.v", "")), "sql"),
    Case(
        "alter-add-required",
        txn(lambda t: t.alter_table(T, schema=SCHEMA.append(pa.field("z", pa.int32(), False)))),
        "z",
    ),
    Case("append-zero-columns", txn(lambda t: t.append(T, pa.table({}))), "id"),
    Case(
        "merge-pandas-mixed",
        txn(lambda t: t.merge(T, _pandas({"id": [1, 2], "qty": [1, "two"]}), on="id")),
        "qty",
    ),
    Case(
        "update-where-expr-unknown",
        txn(lambda t: t.update(T, pc.field("nosuch") == 1, {"qty": 1})),
        "nosuch",
    ),
    Case("clone-target-no-namespace", txn(lambda t: t.clone_table(T, "nons.c")), "nons", NF),
    Case(
        "delete-rows-negative",
        txn(lambda t: t.delete_rows(T, {t.list_data_files(T)[0].path: [-1]})),
        "position|-1",
    ),
    Case(
        "delete-rows-past-end",
        txn(lambda t: t.delete_rows(T, {t.list_data_files(T)[0].path: [10**12]})),
        "position|1000000000000",
    ),
    Case(
        "delete-rows-str",
        txn(lambda t: t.delete_rows(T, {t.list_data_files(T)[0].path: "1"})),
        "position",
    ),
    Case(
        "delete-rows-op-compact",
        txn(lambda t: t.delete_rows(T, {t.list_data_files(T)[0].path: [0]}, op="compact")),
        "op must be .*'compact'",
        (ValueError,),
    ),
    Case(
        "delete-rows-op-unknown",
        txn(lambda t: t.delete_rows(T, {t.list_data_files(T)[0].path: [0]}, op="nosuch")),
        "op must be .*'nosuch'",
        (ValueError,),
    ),
    Case("remove-files-str", txn(lambda t: t.remove_files(T, "x.parquet")), "paths", TE),
    Case("expire-keep-bool", lh(lambda h: h.expire_versions(keep_last=True)), "keep_last", TE),
    # -- one-call writes on the lakehouse, closed handles -----------------------------------
    Case("lh-append-string-for-int", lh(lambda h: h.append(T, with_column("qty", ["abc"]))), "qty"),
    Case(
        "lh-update-overflow",
        lh(lambda h: h.update(T, "id >= 0", {"qty": "qty * 3000000000"})),
        "qty",
    ),
    Case("lh-delete-types", lh(lambda h: h.delete(T, "label > 5")), "label"),
    Case("lh-merge-on-unknown", lh(lambda h: h.merge(T, rows(2, 5), on="nosuch")), "nosuch"),
    Case(
        "txn-after-commit",
        lh(lambda h: _committed(h).append(T, rows(1, 500))),
        "closed|commit",
        (lakehouse.LakehouseError,),
    ),
    Case(
        "view-after-close",
        lh(lambda h: _closed_view(h).read(T)),
        "closed",
        (lakehouse.ClosedError,),
    ),
    Case("txn-read-where-types", txn(lambda t: t.read(T, where="label > 5")), "label"),
    Case(
        "txn-scan-division-by-zero",
        txn(lambda t: t.scan_batches(T, where="qty / 0 > 1").read_all()),
        "qty|zero",
    ),
    # -- compact, restore, clone, low-level file calls -------------------------------------
    Case(
        "compact-negative", txn(lambda t: t.compact(T, target_file_bytes=-1)), "target_file_bytes"
    ),
    Case("compact-str", txn(lambda t: t.compact(T, target_file_bytes="1MB")), "target_file_bytes"),
    Case("compact-zero", txn(lambda t: t.compact(T, target_file_bytes=0)), "target_file_bytes"),
    Case(
        "restore-huge", txn(lambda t: t.restore_table(T, 2**70)), "version|2361183241434822606848"
    ),
    Case(
        "clone-huge",
        txn(lambda t: t.clone_table(T, "s.c", version=2**70)),
        "version|2361183241434822606848",
    ),
    Case("compact-missing", txn(lambda t: t.compact("s.nosuch")), "nosuch", NF),
    Case("restore-future", txn(lambda t: t.restore_table(T, 999)), "999"),
    Case("restore-negative", txn(lambda t: t.restore_table(T, -1)), "version"),
    Case("restore-str", txn(lambda t: t.restore_table(T, "1")), "version", TE),
    Case("restore-before-create", txn(lambda t: t.restore_table(T, 0)), "'s'|s.t"),
    Case("clone-onto-itself", txn(lambda t: t.clone_table(T, T)), "s.t"),
    Case("clone-missing", txn(lambda t: t.clone_table("s.nosuch", "s.c")), "nosuch", NF),
    Case("clone-bad-version", txn(lambda t: t.clone_table(T, "s.c", version=999)), "999"),
    Case("clone-target-none", txn(lambda t: t.clone_table(T, None)), "target|name", TE),
    Case(
        "add-files-missing",
        txn(lambda t: t.add_files(T, ["nosuch.parquet"])),
        "nosuch.parquet",
    ),
    Case("add-files-str", txn(lambda t: t.add_files(T, 5)), "paths", TE),
    Case(
        "delete-rows-unknown-file",
        txn(lambda t: t.delete_rows(T, {"nosuch.parquet": [0]})),
        "nosuch.parquet",
    ),
    Case(
        "remove-files-unknown",
        txn(lambda t: t.remove_files(T, ["nosuch.parquet"])),
        "nosuch.parquet",
    ),
]


def _pandas(columns: dict[str, list[Any]]) -> Any:
    import pandas as pd

    return pd.DataFrame(columns)


def foreign_classes(exc: BaseException) -> list[str]:
    """Classes of ``exc`` (its MRO) that belong to a dependency."""
    return [
        f"{c.__module__}.{c.__qualname__}"
        for c in type(exc).__mro__
        if c.__module__.split(".")[0] in FOREIGN
    ]


def check_documented(exc: BaseException, expect: tuple[type[BaseException], ...]) -> None:
    assert not foreign_classes(exc), (
        f"a dependency's exception escaped: {foreign_classes(exc)}: {exc}"
    )
    assert not isinstance(exc, KeyError), f"KeyError escaped: {exc!r}"
    assert isinstance(exc, expect), f"{type(exc).__name__} is not one of {expect}: {exc}"


def test_the_sweep_covers_every_public_call() -> None:
    """Each call the contract lists has at least one case."""
    ids = " ".join(c.id for c in CASES)
    for call in (
        "read", "scan", "at-version", "at-time", "table-stats", "list-data-files", "changes",
        "history", "rollback", "export", "expire", "orphans", "create-table", "alter", "append",
        "overwrite", "delete", "update", "merge", "compact", "restore", "clone", "view",
        "reader",
    ):  # fmt: skip
        assert call in ids, call
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.fixture
def env(tmp_path: Path) -> Any:
    url = str(tmp_path / "lh")
    h = lakehouse.open(url)
    with h.begin() as t:
        t.create_namespace("s")
        t.create_table(T, SCHEMA)
    for start in (0, 5):  # two files: multi-file reads take Arrow's dataset path
        with h.begin() as t:
            t.append(T, rows(5, start))
    yield Env(h, url, tmp_path)
    h.close()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_raises_a_documented_error(
    case: Case, env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(env.tmp)  # a URL mistaken for a path would land here
    before_version = env.lh.version
    before = env.lh.read(T).sort_by("id")
    with pytest.raises(BaseException) as info:
        case.call(env)
    exc = info.value
    check_documented(exc, case.expect)
    assert re.search(case.names, str(exc), re.IGNORECASE), (
        f"{type(exc).__name__} does not name {case.names!r}: {exc}"
    )
    # nothing half-written is visible, and the lakehouse still reads and commits
    assert env.lh.version == before_version
    assert env.lh.read(T).sort_by("id").equals(before)
    with env.lh.begin() as t:
        t.append(T, rows(1, 1000))
    assert env.lh.read(T).num_rows == before.num_rows + 1
    assert env.lh.read(T, where="id = 1000").column("label").to_pylist() == ["l1000"]


# -- URLs -------------------------------------------------------------------------------
@pytest.mark.parametrize("url", ["memory:/x", "memory:x", "s3:/b", "S3:/b", "file:/x", "gs:/b"])
@pytest.mark.parametrize(
    "opener", [lakehouse.open, lakehouse.open_reader, kvstore.open, kvstore.open_reader]
)
def test_scheme_without_slashes_is_refused(
    url: str, opener: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=re.escape(url.split(":")[0]) + ".*://") as info:
        opener(url)
    check_documented(info.value, VE)
    assert os.listdir(tmp_path) == []  # no local directory named "memory:" or "s3:"


@pytest.mark.parametrize("opener", [lakehouse.open, lakehouse.open_reader])
def test_a_regular_file_is_not_a_lakehouse(opener: Callable[..., Any], tmp_path: Path) -> None:
    path = tmp_path / "afile"
    path.write_text("not a lakehouse")
    with pytest.raises(lakehouse.LakehouseError, match="is a file") as info:
        opener(str(path))
    check_documented(info.value, (lakehouse.LakehouseError,))
    assert path.read_text() == "not a lakehouse"


@pytest.mark.parametrize(
    ("call", "names", "expect"),
    [
        (lambda: lakehouse.open(None), "url", TE),
        (lambda: lakehouse.open(42), "url", TE),
        (lambda: lakehouse.open(""), "url", VE),
        (lambda: lakehouse.open("ftp://host/x"), "ftp", VE),
        (lambda: lakehouse.open("memory://x", bogus=1), "bogus", TE),
        (lambda: lakehouse.open("memory://x", storage_options="x"), "storage_options", TE),
        (lambda: lakehouse.open_reader(None), "url", TE),
        (lambda: lakehouse.open_reader("memory://nothing-here"), "nothing-here", NF),
    ],
    ids=[
        "open-none", "open-int", "open-empty", "open-ftp", "open-unknown-option",
        "open-storage-options-str", "reader-none", "reader-missing",
    ],
)  # fmt: skip
def test_bad_open_arguments(
    call: Callable[[], Any], names: str, expect: tuple[type[BaseException], ...]
) -> None:
    with pytest.raises(BaseException) as info:
        call().close()
    check_documented(info.value, expect)
    assert re.search(names, str(info.value), re.IGNORECASE), str(info.value)


# -- S3: missing bucket, bad or missing credentials, unreachable endpoint -------------------
def _s3_error(opener: Callable[..., Any], url: str, options: dict[str, Any]) -> BaseException:
    with pytest.raises(lakehouse.LakehouseError) as info:
        opener(url, storage_options=options).close()
    check_documented(info.value, (lakehouse.LakehouseError,))
    assert url in str(info.value), f"the message does not name {url}: {info.value}"
    return info.value


OPENERS = pytest.mark.parametrize(
    "opener", [lakehouse.open, lakehouse.open_reader], ids=["open", "open_reader"]
)


@pytest.mark.s3
@OPENERS
def test_s3_missing_bucket(opener: Callable[..., Any], s3_options: dict[str, Any]) -> None:
    url = f"s3://no-such-bucket-{uuid.uuid4().hex[:12]}/lh"
    exc = _s3_error(opener, url, s3_options)
    if opener is lakehouse.open:
        assert "bucket" in str(exc)


@pytest.mark.s3
@OPENERS
def test_s3_bad_credentials(
    opener: Callable[..., Any], s3_bucket: str, s3_options: dict[str, Any]
) -> None:
    from moto.core.authorization import enable_iam_authentication

    url = f"s3://{s3_bucket}/lh"
    lakehouse.open(url, storage_options=s3_options).close()
    bad = {**s3_options, "key": "AKIANOBODY", "secret": "wrong"}
    with enable_iam_authentication():  # moto checks keys only when asked to
        exc = _s3_error(opener, url, bad)
    assert "credential" in str(exc).lower() or "access" in str(exc).lower()


@pytest.mark.s3
@OPENERS
def test_s3_missing_credentials(
    opener: Callable[..., Any],
    s3_bucket: str,
    moto_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    exc = _s3_error(opener, f"s3://{s3_bucket}/lh", {"endpoint_url": moto_endpoint})
    assert "credential" in str(exc).lower()


@pytest.mark.s3
@OPENERS
def test_s3_unreachable_endpoint(opener: Callable[..., Any]) -> None:
    pytest.importorskip("s3fs")
    options = {
        "endpoint_url": "http://127.0.0.1:1",  # nothing listens on port 1
        "key": "k",
        "secret": "s",
        "config_kwargs": {"connect_timeout": 1, "retries": {"max_attempts": 0}},
    }
    exc = _s3_error(opener, "s3://bucket/lh", options)
    assert "127.0.0.1:1" in str(exc) or "connect" in str(exc).lower()


@pytest.mark.s3
def test_s3_credentials_revoked_after_open(s3_bucket: str, s3_options: dict[str, Any]) -> None:
    """Storage that fails after the lakehouse opened: every call, and a stream already
    returned, raises StorageError naming the URL; the lakehouse works again after."""
    from moto.core.authorization import enable_iam_authentication

    url = f"s3://{s3_bucket}/lh"
    h = lakehouse.open(url, storage_options=s3_options)
    with h.begin() as t:
        t.create_namespace("s")
        t.create_table(T, SCHEMA, PARQUET)  # reads fetch data files (inlined rows: none)
    for start in (0, 5):
        h.append(T, rows(5, start))
    before = h.version
    r = lakehouse.open_reader(url, storage_options=s3_options)
    try:
        with enable_iam_authentication():  # no request is authorised now
            for call in (
                lambda: h.read(T),
                lambda: h.scan_batches(T).read_all(),
                lambda: h.append(T, rows(1, 100)),
                lambda: r.refresh(),
                lambda: r.read(T),
            ):
                # the lakehouse's URL, or the data file that could not be read
                named = f"{re.escape(url)}|data file [^ ]+\\.parquet"
                with pytest.raises(lakehouse.StorageError, match=named) as info:
                    call()
                check_documented(info.value, (lakehouse.StorageError,))
        assert h.version == before
        h.append(T, rows(1, 100))
        assert sorted(h.read(T).column("id").to_pylist()) == [*range(10), 100]
        r.refresh()
        assert r.read(T).num_rows == 11
    finally:
        r.close()
        h.close()
