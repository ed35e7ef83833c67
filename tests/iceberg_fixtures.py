"""Shared helpers of the Iceberg tests (client tests and unit tests of lakehouse.iceberg).

* ``build_lakehouse(path)`` makes the lakehouse the client tests read: appends in several
  versions, positional deletes, an update, a merge, a renamed, a dropped and an added column,
  a column dropped and added again under its name, a partitioned table (identity, day(ts),
  bucket), a table of inlined rows and a compaction, interleaved so each table's snapshots
  are a subset of the lakehouse's versions.
* ``rows(table)`` is a table's rows as a multiset of plain Python tuples (decimals, dates,
  timestamps compare by value; lists and structs become tuples), so a client's Arrow types
  (int widened, large_string, tz spelled ``+00:00``) do not matter, values do.
* ``lakehouse_with_namespace(path)`` is the body of the unit tests' ``lh`` fixture and
  ``data_file_path(lh, f)`` the local path of a data file.
* ``run_duckdb(requests)`` runs tests/duckdb_iceberg_side.py in the DuckDB 1.5.5 venv.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import random
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import lakehouse
from lakehouse.model import DataFile

REPO = Path(__file__).resolve().parent.parent
DUCKDB_PYTHON = REPO / ".venv-ducklake" / "bin" / "python"
DUCKDB_SIDE = Path(__file__).resolve().parent / "duckdb_iceberg_side.py"
NO_AUTO = {"compaction.auto": "false"}
FILES_ONLY = {"compaction.auto": "false", "inline.max_rows": "0"}
OMITTED = "lakehouse.iceberg.omitted-columns"


def lakehouse_with_namespace(path: Path, namespace: str = "ns") -> Iterator[lakehouse.Lakehouse]:
    """The body of an ``lh`` fixture: a local lakehouse at ``path/lh`` with one namespace,
    closed when the test ends (``yield from lakehouse_with_namespace(tmp_path)``)."""
    h = lakehouse.open(str(path / "lh"))
    try:
        with h.begin() as t:
            t.create_namespace(namespace)
        yield h
    finally:
        h.close()


def data_file_path(lh: lakehouse.Lakehouse, f: DataFile) -> Path:
    """The local path of a data file of a local lakehouse."""
    assert lh.data_url is not None
    return Path(lh.data_url.removeprefix("file://")) / f.path


UTC = dt.UTC
ORDERS = pa.schema(
    [
        ("id", pa.int64()),
        ("customer", pa.string()),
        ("amount", pa.decimal128(12, 2)),
        ("qty", pa.int32()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("day", pa.date32()),
        ("price", pa.float64()),
        ("flag", pa.bool_()),
        ("tags", pa.list_(pa.string())),
    ]
)
EVENTS = pa.schema(
    [
        ("id", pa.int64()),
        ("region", pa.string()),
        ("ts", pa.timestamp("us")),
        ("small", pa.int16()),
        ("big", pa.uint64()),  # no Iceberg type: omitted from the Iceberg schema
        ("payload", pa.struct([("k", pa.string()), ("n", pa.int32())])),
    ]
)
SMALL = pa.schema([("k", pa.int64()), ("v", pa.string()), ("w", pa.float32())])
REUSED = pa.schema([("a", pa.int64()), ("b", pa.int64())])
#: a mix of column types (TYPE_CASES below has one table per type, with the known gaps)
TYPES = pa.schema(
    [
        ("id", pa.int32()),
        ("i8", pa.int8()),
        ("u8", pa.uint8()),
        ("u16", pa.uint16()),
        ("u32", pa.uint32()),
        ("f32", pa.float32()),
        ("t64", pa.time64("us")),
        ("ts_s", pa.timestamp("s")),
        ("ts_ms_utc", pa.timestamp("ms", tz="UTC")),
        ("ls", pa.large_string()),
        ("bin", pa.binary()),
        ("lbin", pa.large_binary()),
        ("fsb", pa.binary(4)),
        ("dec38", pa.decimal128(38, 10)),
        ("m", pa.map_(pa.string(), pa.int64())),
        ("ll", pa.large_list(pa.int64())),
        ("st", pa.struct([("a", pa.list_(pa.int32())), ("m", pa.map_(pa.int32(), pa.string()))])),
        ("ts_ns", pa.timestamp("ns")),  # omitted
        ("f16", pa.float16()),  # omitted
    ]
)


def orders_rows(ids: range, rng: random.Random, *, note: bool = False) -> pa.Table:
    base = dt.datetime(2026, 3, 1, tzinfo=UTC)
    cols: dict[str, Any] = {
        "id": list(ids),
        "customer": [rng.choice(["ann", "bob", "cy", None, "dé"]) for _ in ids],
        "amount": [Decimal(rng.randint(-10_000, 10_000)) / 100 for _ in ids],
        "qty": [rng.randint(-5, 500) for _ in ids],
        "ts": [base + dt.timedelta(microseconds=rng.randint(0, 10**12)) for _ in ids],
        "day": [dt.date(2026, 1, 1) + dt.timedelta(days=rng.randint(0, 400)) for _ in ids],
        "price": [rng.random() * 1e6 - 5e5 for _ in ids],
        "flag": [rng.choice([True, False, None]) for _ in ids],
        "tags": [[rng.choice("xyz") for _ in range(rng.randint(0, 3))] for _ in ids],
    }
    return pa.table(cols)


def events_rows(ids: range, rng: random.Random) -> pa.Table:
    base = dt.datetime(2026, 5, 1)
    return pa.table(
        {
            "id": list(ids),
            "region": [rng.choice(["eu", "us", None]) for _ in ids],
            "ts": [base + dt.timedelta(seconds=rng.randint(0, 2 * 86_400 - 1)) for _ in ids],
            "small": [rng.randint(-300, 300) for _ in ids],
            "big": [rng.randint(0, 2**64 - 1) for _ in ids],
            "payload": [{"k": rng.choice("abc"), "n": rng.randint(0, 9)} for _ in ids],
        },
        schema=EVENTS,
    )


@dataclass
class Built:
    lh: Any
    url: str
    tables: list[str]
    notes: dict[str, Any] = field(default_factory=dict)


def build_lakehouse(path: Path, seed: int = 24) -> Built:
    """The client tests' lakehouse; every step is its own version."""
    rng = random.Random(seed)
    url = str(path)
    lh = lakehouse.open(url)
    with lh.begin() as txn:
        txn.create_namespace("sales", {"owner": "ops", "comment": "orders and events"})
        txn.create_namespace("misc")
        txn.create_table("sales.orders", ORDERS, FILES_ONLY)
        txn.create_table(
            "sales.events",
            EVENTS,
            FILES_ONLY,
            partition_by=["region", "day(ts)", "bucket(2, id)"],
        )
        txn.create_table("misc.small", SMALL, NO_AUTO)  # default inline.max_rows: inlined
        txn.create_table("misc.reused", REUSED, FILES_ONLY)
    o, e, s = "sales.orders", "sales.events", "misc.small"
    lh.append(o, orders_rows(range(0, 60), rng))
    lh.append(e, events_rows(range(0, 80), rng))
    lh.append(s, pa.table({"k": [1, 2, 3], "v": ["a", "b", None], "w": [0.5, -1.25, 3.0]}))
    lh.append(o, orders_rows(range(60, 100), rng))
    lh.append(s, pa.table({"k": [4, 5], "v": ["d", "e"], "w": [None, 2.5]}))
    lh.append(e, events_rows(range(80, 140), rng))
    lh.delete(o, "id % 7 = 0")  # deletion vectors -> positional deletes
    lh.delete(s, "k = 2")  # a deletion vector on an inlined batch
    lh.update(o, "id < 20", {"qty": "qty + 1000", "customer": "'upd'"})
    lh.delete(e, "small < -200")
    merge_src = orders_rows(range(90, 110), random.Random(seed + 1))
    lh.merge(o, merge_src, on="id")
    lh.update(s, "k = 4", {"v": "'dd'"})
    before_rename = lh.version
    with lh.begin() as txn:
        txn.alter_table(o, rename_columns={"customer": "client"})
    lh.append(o, orders_rows(range(110, 120), rng).rename_columns(_renamed(ORDERS)))
    with lh.begin() as txn:  # drop flag
        cur = txn.describe_table(o).schema
        txn.alter_table(o, schema=pa.schema([f for f in cur if f.name != "flag"]))
    with lh.begin() as txn:  # add note
        cur = txn.describe_table(o).schema
        txn.alter_table(o, schema=cur.append(pa.field("note", pa.string())))
    more = orders_rows(range(120, 150), rng).rename_columns(_renamed(ORDERS)).drop(["flag"])
    lh.append(o, more.append_column("note", pa.array([f"n{i}" for i in range(30)])))
    lh.delete(o, "id BETWEEN 120 AND 125")
    with lh.begin() as txn:
        txn.compact(o)
    lh.delete(o, "id = 121 OR id = 130")  # after the compaction: deletes on the new file
    lh.append(s, pa.table({"k": [6], "v": ["f"], "w": [1.0]}))
    # a column dropped and added again under its name (new id): older files materialised
    r = "misc.reused"
    lh.append(r, pa.table({"a": [1, 2, 3], "b": [10, 20, 30]}))
    with lh.begin() as txn:
        txn.alter_table(r, schema=pa.schema([("a", pa.int64())]))
    with lh.begin() as txn:
        txn.alter_table(r, schema=pa.schema([("a", pa.int64()), ("b", pa.string())]))
    lh.append(r, pa.table({"a": [4], "b": ["four"]}))
    lh.delete(r, "a = 2")
    lh.append(e, events_rows(range(140, 150), rng))
    # every table back to its state before the rename (schemas too), then written again
    lh.rollback(before_rename)
    lh.append(o, orders_rows(range(200, 210), rng))
    lh.append(r, pa.table({"a": [7, 8], "b": [70, 80]}))
    ty = "misc.types"
    with lh.begin() as txn:
        txn.create_table(ty, TYPES, FILES_ONLY)
    lh.append(ty, types_rows(range(0, 40), rng))
    lh.append(ty, types_rows(range(40, 50), rng))
    lh.delete(ty, "id % 3 = 1")
    # partition evolution: a second spec for new files, deletes across both specs
    with lh.begin() as txn:
        txn.alter_table(e, partition_by=["year(ts)", "truncate(1, region)", "hour(ts)"])
    lh.append(e, events_rows(range(150, 190), rng))
    lh.delete(e, "id % 5 = 0")
    with lh.begin() as txn:
        txn.alter_table(e, sort_keys=["id"])
    lh.append(e, events_rows(range(190, 200), rng))
    # a clone sharing the orders' files (at an older version), then changed on its own
    with lh.begin() as txn:
        txn.clone_table(o, "misc.clone", version=before_rename)
    lh.delete("misc.clone", "id > 50")
    # a table dropped and created again under its name (another table id)
    tmp = "misc.tmp"
    with lh.begin() as txn:
        txn.create_table(tmp, pa.schema([("x", pa.int64())]), FILES_ONLY)
    lh.append(tmp, pa.table({"x": [1, 2, 3]}))
    lh.delete(tmp, "x = 2")
    notes = {"tmp_first": lh.version}
    with lh.begin() as txn:
        txn.drop_table(tmp)
    with lh.begin() as txn:
        txn.create_table(tmp, pa.schema([("y", pa.string())]), NO_AUTO)
    lh.append(tmp, pa.table({"y": ["new"]}))
    # a table restored to an older state of its own
    with lh.begin() as txn:
        txn.restore_table(s, before_rename - 3)
    return Built(lh, url, [o, e, s, r, ty, "misc.clone", tmp], notes)


def types_rows(ids: range, rng: random.Random) -> pa.Table:
    n = len(ids)

    def maybe(v: Any) -> Any:
        return None if rng.random() < 0.2 else v

    base, utc = dt.datetime(2026, 1, 1), dt.datetime(2026, 1, 1, tzinfo=UTC)
    cols: dict[str, list[Any]] = {
        "id": list(ids),
        "i8": [maybe(rng.randint(-128, 127)) for _ in range(n)],
        "u8": [maybe(rng.randint(0, 255)) for _ in range(n)],
        "u16": [maybe(rng.randint(0, 65535)) for _ in range(n)],
        "u32": [maybe(rng.randint(0, 2**32 - 1)) for _ in range(n)],
        "f32": [maybe(rng.choice([math.nan, rng.randint(-1000, 1000) / 8])) for _ in range(n)],
        "t64": [
            maybe(dt.time(rng.randint(0, 23), 0, 0, rng.randint(0, 999_999))) for _ in range(n)
        ],
        "ts_s": [
            maybe(base + dt.timedelta(seconds=rng.randint(-(10**9), 10**9))) for _ in range(n)
        ],
        "ts_ms_utc": [
            maybe(utc + dt.timedelta(milliseconds=rng.randint(0, 10**11))) for _ in range(n)
        ],
        "ls": [maybe(rng.choice(["", "x", "é" * 3, "long " * 20])) for _ in range(n)],
        "bin": [maybe(rng.randbytes(rng.randint(0, 5))) for _ in range(n)],
        "lbin": [maybe(rng.randbytes(3)) for _ in range(n)],
        "fsb": [maybe(rng.randbytes(4)) for _ in range(n)],
        "dec38": [maybe(Decimal(rng.randint(-(10**37), 10**37)) / 10**10) for _ in range(n)],
        "m": [maybe([(f"k{j}", maybe(j)) for j in range(rng.randint(0, 3))]) for _ in range(n)],
        "ll": [maybe([rng.randint(-9, 9) for _ in range(rng.randint(0, 3))]) for _ in range(n)],
        "st": [
            maybe({"a": maybe([rng.randint(0, 9)]), "m": maybe([(rng.randint(0, 9), "v")])})
            for _ in range(n)
        ],
        "ts_ns": [maybe(base + dt.timedelta(microseconds=rng.randint(0, 10**9))) for _ in range(n)],
        "f16": [maybe(np.float16(rng.randint(0, 9))) for _ in range(n)],
    }
    return pa.table(cols, schema=TYPES)


def _renamed(schema: pa.Schema) -> list[str]:
    return ["client" if n == "customer" else n for n in schema.names]


# -- comparing rows ---------------------------------------------------------------------------
NAN = ("NaN",)


def plain(value: Any) -> Any:
    """A hashable Python value that compares by value across Arrow type spellings."""
    if isinstance(value, dict):
        return tuple(sorted((k, plain(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(plain(v) for v in value)
    if isinstance(value, float) and math.isnan(value):
        return NAN  # NaN != NaN: one token for all of them
    return value


def rows(table: pa.Table, columns: list[str] | None = None) -> Counter[tuple[Any, ...]]:
    if columns is not None:
        table = table.select(columns)
    return Counter(tuple(plain(v) for v in r.values()) for r in table.to_pylist())


def omitted_columns(metadata: dict[str, Any]) -> set[str]:
    text = metadata.get("properties", {}).get(OMITTED, "")
    return {n for n in text.split(",") if n}


def expected_columns(lh: Any, table: str, version: int, omitted: set[str]) -> list[str]:
    names = lh.at_version(version).describe_table(table).schema.names
    return [n for n in names if n not in omitted]


def table_versions(lh: Any, table: str, upto: int | None = None) -> list[int]:
    """The versions whose history names the table (what the contract makes snapshots), since
    the table of that name was last created (at or before ``upto``)."""
    out: list[int] = []
    for h in sorted(lh.history(), key=lambda h: h.version):
        if upto is not None and h.version > upto:
            break
        ops = [c.op for c in h.changes if c.kind == "table" and c.name == table]
        if "create" in ops:
            out = []
        if ops:
            out.append(h.version)
    return out


def snapshot_ids(metadata: dict[str, Any]) -> list[int]:
    return sorted(s["snapshot-id"] for s in metadata.get("snapshots", []))


# -- DuckDB -----------------------------------------------------------------------------------
def duckdb_python() -> Path:
    if not DUCKDB_PYTHON.exists():
        pytest.skip(f"{DUCKDB_PYTHON} missing: `make .venv-ducklake` builds it")
    return DUCKDB_PYTHON


def run_duckdb(
    requests: list[dict[str, Any]], timeout: float = 300, setup: list[str] | None = None
) -> list[dict[str, Any]]:
    """Each request's result; "table" holds the rows (a pyarrow.Table) where DuckDB read some.
    ``setup``: SQL statements run first (an S3 secret)."""
    done = subprocess.run(
        [str(duckdb_python()), str(DUCKDB_SIDE)],
        input=json.dumps({"requests": requests, "setup": setup or []}),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    results: list[dict[str, Any]] = json.loads(done.stdout)["results"]
    for r in results:
        if "ipc" in r:
            r["table"] = pa.ipc.open_stream(base64.b64decode(r.pop("ipc"))).read_all()
    return results


# -- one table per column type ---------------------------------------------------------------
D = Decimal
TYPE_CASES: dict[str, tuple[pa.DataType, list[Any]]] = {
    "int8": (pa.int8(), [1, -2, None, 127]),
    "uint16": (pa.uint16(), [65535, 0, None, 7]),
    "uint32": (pa.uint32(), [4294967295, 0, 1, None]),
    "float32": (pa.float32(), [1.5, -0.0, None, 3.25]),
    "date32": (
        pa.date32(),
        [dt.date(2020, 1, 1), None, dt.date(1969, 12, 31), dt.date(9999, 1, 1)],
    ),
    "date64": (
        pa.date64(),
        [dt.date(2020, 1, 1), None, dt.date(1969, 12, 31), dt.date(2000, 2, 29)],
    ),
    "time32_s": (pa.time32("s"), [dt.time(1, 2, 3), None, dt.time(23, 59, 59), dt.time(0)]),
    "time32_ms": (pa.time32("ms"), [dt.time(1, 2, 3, 4000), None, dt.time(23, 59, 59), dt.time(0)]),
    "time64_us": (pa.time64("us"), [dt.time(0, 0, 0, 1), None, dt.time(12), dt.time(23)]),
    "timestamp_s": (
        pa.timestamp("s"),
        [dt.datetime(2020, 1, 1, 1, 1, 1), None, dt.datetime(1960, 1, 1), dt.datetime(2000, 1, 1)],
    ),
    "timestamp_ms_utc": (
        pa.timestamp("ms", tz="UTC"),
        [
            dt.datetime(2020, 1, 1, tzinfo=UTC),
            None,
            dt.datetime(1950, 6, 1, 12, tzinfo=UTC),
            dt.datetime(2000, 1, 1, tzinfo=UTC),
        ],
    ),
    "timestamp_us_paris": (
        pa.timestamp("us", tz="Europe/Paris"),
        [
            dt.datetime(2020, 1, 1, tzinfo=UTC),
            None,
            dt.datetime(2021, 6, 1, 12, tzinfo=UTC),
            dt.datetime(2000, 1, 1, tzinfo=UTC),
        ],
    ),
    "large_string": (pa.large_string(), ["a", None, "é", ""]),
    "binary": (pa.binary(), [b"\x00\xff", None, b"", b"x"]),
    "fixed4": (pa.binary(4), [b"abcd", None, b"\x00\x00\x00\x01", b"zzzz"]),
    "decimal38": (
        pa.decimal128(38, 10),
        [D("1234567890123456789012345678.0123456789"), None, D("-1"), D(0)],
    ),
    "map": (pa.map_(pa.string(), pa.int64()), [[("a", 1), ("b", None)], None, [], [("c", 3)]]),
    "list_struct": (
        pa.list_(pa.struct([("x", pa.int32()), ("y", pa.string())])),
        [[{"x": 1, "y": "q"}], [], [{"x": None, "y": None}], [{"x": 2, "y": "r"}]],
    ),
    "large_list": (pa.large_list(pa.int64()), [[1, 2], None, [], [3]]),
    # omitted from the Iceberg schema (no Iceberg type); the column must not stop a read
    "timestamp_ns": (
        pa.timestamp("ns"),
        [dt.datetime(2020, 1, 1), None, None, dt.datetime(2000, 1, 1)],
    ),
    "time64_ns": (pa.time64("ns"), [dt.time(1), None, None, dt.time(2)]),
    "duration": (pa.duration("us"), [dt.timedelta(1), None, None, dt.timedelta(seconds=1)]),
    "uint64": (pa.uint64(), [2**64 - 1, None, 0, 1]),
    "float16": (pa.float16(), [np.float16(1.0), None, None, np.float16(2.0)]),
}
CLIENTS = ("pyiceberg", "duckdb", "polars")


def build_types_lakehouse(path: Path) -> tuple[Any, dict[str, str]]:
    """One table ``types.<case>`` (id, c) per TYPE_CASES entry: an append, a delete (positional
    deletes) and a second append; returns the lakehouse and each table's metadata location."""
    from lakehouse.iceberg import write_metadata

    lh = lakehouse.open(str(path))
    with lh.begin() as txn:
        txn.create_namespace("types")
        for name, (typ, _) in TYPE_CASES.items():
            txn.create_table(
                f"types.{name}", pa.schema([("id", pa.int64()), ("c", typ)]), FILES_ONLY
            )
    with lh.begin() as txn:
        for name, (typ, values) in TYPE_CASES.items():
            txn.append(f"types.{name}", pa.table({"id": [0, 1, 2], "c": pa.array(values[:3], typ)}))
    with lh.begin() as txn:
        for name in TYPE_CASES:
            txn.delete(f"types.{name}", "id = 1")
    with lh.begin() as txn:
        for name, (typ, values) in TYPE_CASES.items():
            txn.append(f"types.{name}", pa.table({"id": [3], "c": pa.array(values[3:], typ)}))
    return lh, {name: write_metadata(lh, f"types.{name}") for name in TYPE_CASES}


# -- filters (file pruning by partition values and column bounds) -----------------------------
OPS = ("=", "<", "<=", ">", ">=", "IS NULL", "IS NOT NULL")


def filterable(typ: pa.DataType) -> bool:
    return bool(
        (pa.types.is_integer(typ) and typ != pa.uint64())
        or pa.types.is_float32(typ)
        or pa.types.is_float64(typ)
        or pa.types.is_decimal(typ)
        or pa.types.is_string(typ)
        or pa.types.is_large_string(typ)
        or pa.types.is_date32(typ)
        or (pa.types.is_timestamp(typ) and typ.unit != "ns")
        or pa.types.is_boolean(typ)
    )


def predicates(table: pa.Table, omitted: set[str]) -> list[tuple[str, str, Any]]:
    """(column, op, value) over every filterable column: its min, median and max, each
    compared every way, and IS [NOT] NULL."""
    out: list[tuple[str, str, Any]] = []
    for f in table.schema:
        if f.name in omitted or not filterable(f.type):
            continue
        values = sorted({v for v in table[f.name].to_pylist() if v is not None and v == v})
        out += [(f.name, "IS NULL", None), (f.name, "IS NOT NULL", None)]
        for v in {values[0], values[len(values) // 2], values[-1]} if values else ():
            out += [(f.name, op, v) for op in OPS[:5]]
    return out


def arrow_filter(table: pa.Table, column: str, op: str, value: Any) -> pa.Table:
    """The rows matching ``column op value``; a NaN matches no comparison (Iceberg's rule)."""
    import pyarrow.compute as pc

    col = table[column]
    if op == "IS NULL":
        return table.filter(pc.is_null(col))
    if op == "IS NOT NULL":
        return table.filter(pc.is_valid(col))
    fn = {"=": pc.equal, "<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal}
    return table.filter(fn[op](col, pa.scalar(value, type=col.type)))


def without_nan(table: pa.Table, column: str) -> pa.Table:
    """DuckDB orders NaN above every number (``NaN > x``), yet prunes files by Iceberg bounds,
    which leave NaN out, so ``x > v`` returns the NaN rows of some files only (also for tables
    pyiceberg writes; it ignores nan_value_counts): its NaN rows are not compared (F5)."""
    import pyarrow.compute as pc

    col = table[column]
    if not pa.types.is_floating(col.type):
        return table
    return table.filter(pc.invert(pc.fill_null(pc.is_nan(col), False)))


def sql_predicate(column: str, op: str, value: Any) -> str:
    name = '"' + column.replace('"', '""') + '"'
    if value is None:
        return f"{name} {op}"
    if isinstance(value, bool):
        lit = "true" if value else "false"
    elif isinstance(value, int | Decimal):
        lit = str(value)
    elif isinstance(value, float):
        lit = repr(value)
    elif isinstance(value, str):
        lit = "'" + value.replace("'", "''") + "'"
    elif isinstance(value, dt.datetime):
        lit = f"TIMESTAMPTZ '{value.isoformat()}'" if value.tzinfo else f"TIMESTAMP '{value}'"
    elif isinstance(value, dt.date):
        lit = f"DATE '{value.isoformat()}'"
    else:
        raise TypeError(f"no SQL literal for {value!r}")
    return f"{name} {op} {lit}"


def iceberg_predicate(column: str, op: str, value: Any) -> Any:
    from pyiceberg import expressions as ex

    if op == "IS NULL":
        return ex.IsNull(term=ex.Reference(column))
    if op == "IS NOT NULL":
        return ex.NotNull(term=ex.Reference(column))
    cls = {
        "=": ex.EqualTo,
        "<": ex.LessThan,
        "<=": ex.LessThanOrEqual,
        ">": ex.GreaterThan,
        ">=": ex.GreaterThanOrEqual,
    }[op]
    return cls(column, value)
