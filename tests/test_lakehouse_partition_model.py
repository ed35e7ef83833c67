"""Random partitioned-table histories against a model of the rows.

A hypothesis state machine appends, deletes, updates, replaces partitions,
compacts and changes the partition spec (``alter_table(partition_by=...)``) of
one table, and keeps the rows of every version in a plain Python model. After
every step the table reads exactly the model's rows, a read with a random
``where`` on the partition columns equals the model's filter (so partition and
bound pruning never drop a matching row), time travel to a random earlier
version (read whole and with a ``where``) equals that version's rows, and every
live file holds one partition of its own spec.

The model computes partitions itself: identity, ``day`` (days since 1970 of the
UTC instant), ``truncate(2, s)`` (the first two characters) and ``bucket(4, k)``
(Iceberg's murmur3_x86_32 of the 8-byte little-endian long, via ``mmh3``), so
``replace_partitions`` is checked against an independent statement of which
rows a partition holds.
"""

from __future__ import annotations

import datetime as dt
import re
import struct
import uuid
from collections.abc import Callable
from typing import Any

import hypothesis.strategies as st
import mmh3
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import lakehouse

T = "ns.t"
UTC = dt.UTC
SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("country", pa.string()),
        ("s", pa.string()),
        ("v", pa.int64()),
    ]
)
DAY0 = dt.datetime(2024, 3, 1, tzinfo=UTC)
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)

Row = tuple[int, dt.datetime, str | None, str | None, int]  # k, ts, country, s, v


def bucket4(k: int) -> int:
    return (mmh3.hash(struct.pack("<q", k), signed=True) & 0x7FFFFFFF) % 4


FIELD: dict[str, Callable[[Row], Any]] = {
    "country": lambda r: r[2],
    "day(ts)": lambda r: (r[1] - EPOCH).days,
    "bucket(4, k)": lambda r: bucket4(r[0]),
    "truncate(2, s)": lambda r: None if r[3] is None else r[3][:2],
}
SPECS: list[list[str]] = [
    [],
    ["country"],
    ["day(ts)"],
    ["bucket(4, k)"],
    ["truncate(2, s)"],
    ["country", "day(ts)"],
    ["day(ts)", "bucket(4, k)", "country", "truncate(2, s)"],
]


def partition_of(spec: list[str], r: Row) -> tuple[Any, ...]:
    return tuple(FIELD[f](r) for f in spec)


def columns_of(text: str) -> set[str]:
    """The table columns a where or a partition field names (literals left out)."""
    return set(re.findall(r"\b(k|ts|country|s)\b", re.sub(r"'[^']*'", "", text)))


def ts_sql(t: dt.datetime) -> str:
    return f"TIMESTAMP '{t:%Y-%m-%d %H:%M:%S}+00:00'"


def where_strategy() -> st.SearchStrategy[tuple[str, Callable[[Row], bool]]]:
    """(SQL, the same condition on a model row); SQL's null semantics (a comparison
    with null is not true)."""
    country = st.sampled_from(["us", "fr", "de", "zz"])
    day = st.integers(0, 4).map(lambda d: DAY0 + dt.timedelta(days=d))
    prefix = st.sampled_from(["aa", "ab", "ba", "b"])
    k = st.integers(0, 200)
    return st.one_of(
        country.map(lambda c: (f"country = '{c}'", lambda r, c=c: r[2] == c)),
        st.lists(country, min_size=1, max_size=3).map(
            lambda cs: (
                "country IN (" + ", ".join(f"'{c}'" for c in cs) + ")",
                lambda r, cs=tuple(cs): r[2] in cs,
            )
        ),
        st.just(("country IS NULL", lambda r: r[2] is None)),
        st.just(("s IS NOT NULL", lambda r: r[3] is not None)),
        day.map(lambda t: (f"ts >= {ts_sql(t)}", lambda r, t=t: r[1] >= t)),
        day.map(lambda t: (f"ts < {ts_sql(t)}", lambda r, t=t: r[1] < t)),
        prefix.map(lambda p: (f"s >= '{p}'", lambda r, p=p: r[3] is not None and r[3] >= p)),
        k.map(lambda n: (f"k = {n}", lambda r, n=n: r[0] == n)),
        k.map(lambda n: (f"k < {n}", lambda r, n=n: r[0] < n)),
        st.tuples(country, day).map(
            lambda cd: (
                f"country = '{cd[0]}' AND ts < {ts_sql(cd[1])}",
                lambda r, c=cd[0], t=cd[1]: r[2] == c and r[1] < t,
            )
        ),
    )


WHERES = where_strategy()


@st.composite
def row_batches(draw: st.DrawFn, max_size: int = 6) -> list[tuple[Any, ...]]:
    """Rows without keys (the machine numbers them): ts, country, s."""
    n = draw(st.integers(1, max_size))
    return [
        (
            DAY0 + dt.timedelta(days=draw(st.integers(0, 4)), hours=draw(st.integers(0, 23))),
            draw(st.sampled_from(["us", "fr", "de", None])),
            draw(st.sampled_from(["aa", "aab", "ab", "ba", "b", None])),
        )
        for _ in range(n)
    ]


def table_of(rows: list[Row]) -> pa.Table:
    return pa.table({f.name: [r[i] for r in rows] for i, f in enumerate(SCHEMA)}, schema=SCHEMA)


def rows_of(view: Any, **kw: Any) -> list[Row]:
    t = view.read(T, **kw)
    cols = [t.column(f.name).to_pylist() for f in SCHEMA]
    return sorted(zip(*cols, strict=True))


class PartitionedTable(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.lh = lakehouse.open(f"memory://partition-model-{uuid.uuid4().hex}")
        self.rows: list[Row] = []
        self.versions: dict[int, list[Row]] = {}
        self.spec: list[str] = []
        #: source columns of every spec the table had
        self.partition_columns: set[str] = set()
        self.next_k = 0

    @initialize(spec=st.sampled_from(SPECS), sort=st.booleans())
    def create(self, spec: list[str], sort: bool) -> None:
        with self.lh.begin() as txn:
            txn.create_namespace("ns")
            txn.create_table(
                T,
                SCHEMA,
                {"compaction.auto": "false"},
                partition_by=spec,
                sort_keys=["k"] if sort else None,
            )
        self.spec = spec
        self.partition_columns = set().union(*(columns_of(f) for f in spec))
        self.commit_model(self.rows)

    def commit_model(self, rows: list[Row]) -> None:
        self.rows = sorted(rows)
        self.versions[self.lh.version] = self.rows

    def keyed(self, batch: list[tuple[Any, ...]]) -> list[Row]:
        out = []
        for ts, country, s in batch:
            out.append((self.next_k, ts, country, s, self.next_k * 10))
            self.next_k += 1
        return out

    # -- writes -------------------------------------------------------------------------
    @rule(batch=row_batches())
    def append(self, batch: list[tuple[Any, ...]]) -> None:
        new = self.keyed(batch)
        self.lh.append(T, table_of(new))
        self.commit_model(self.rows + new)

    @rule(where=WHERES)
    def delete(self, where: tuple[str, Callable[[Row], bool]]) -> None:
        sql, pred = where
        before = self.lh.version
        n = self.lh.delete(T, sql)
        assert n == sum(map(pred, self.rows)), sql
        if self.lh.version != before:
            self.commit_model([r for r in self.rows if not pred(r)])

    @rule(where=WHERES)
    def update(self, where: tuple[str, Callable[[Row], bool]]) -> None:
        sql, pred = where
        before = self.lh.version
        with self.lh.begin() as txn:
            n = txn.update(T, sql, {"v": "v + 1"})
        assert n == sum(map(pred, self.rows)), sql
        if self.lh.version != before:
            self.commit_model([(*r[:4], r[4] + 1) if pred(r) else r for r in self.rows])

    @rule(batch=row_batches(max_size=4))
    def replace_partitions(self, batch: list[tuple[Any, ...]]) -> None:
        new = self.keyed(batch)
        self.lh.replace_partitions(T, table_of(new))
        if self.spec:
            gone = {partition_of(self.spec, r) for r in new}
            kept = [r for r in self.rows if partition_of(self.spec, r) not in gone]
        else:  # unpartitioned: an overwrite
            kept = []
        self.commit_model(kept + new)

    @rule(spec=st.sampled_from(SPECS))
    def alter_partition_by(self, spec: list[str]) -> None:
        with self.lh.begin() as txn:
            txn.alter_table(T, partition_by=spec)
        assert list(self.lh.describe_table(T).partition_by) == spec
        self.spec = spec
        self.partition_columns |= set().union(*(columns_of(f) for f in spec))
        self.commit_model(self.rows)

    @rule(scope=st.one_of(st.none(), WHERES))
    def compact(self, scope: tuple[str, Callable[[Row], bool]] | None) -> None:
        before = self.lh.version
        if scope is not None and not columns_of(scope[0]) <= self.partition_columns:
            # a compaction's where names partition columns only (of any spec)
            with pytest.raises(ValueError, match="partition columns"), self.lh.begin() as txn:
                txn.compact(T, where=scope[0])
            assert self.lh.version == before
            return
        with self.lh.begin() as txn:
            if scope is None:
                txn.compact(T)
            else:
                txn.compact(T, where=scope[0])
        if self.lh.version != before:
            self.commit_model(self.rows)

    # -- reads --------------------------------------------------------------------------
    @rule(where=WHERES)
    def read_where(self, where: tuple[str, Callable[[Row], bool]]) -> None:
        sql, pred = where
        assert rows_of(self.lh, where=sql) == [r for r in self.rows if pred(r)], sql

    @rule(data=st.data(), where=st.one_of(st.none(), WHERES))
    def time_travel(self, data: st.DataObject, where: Any) -> None:
        v = data.draw(st.sampled_from(sorted(self.versions)))
        want = self.versions[v]
        with self.lh.at_version(v) as view:
            if where is None:
                assert rows_of(view) == want, f"version {v}"
            else:
                got = rows_of(view, where=where[0])
                assert got == [r for r in want if where[1](r)], f"version {v}: {where[0]}"

    @invariant()
    def reads_the_model(self) -> None:
        if not self.versions:
            return
        assert rows_of(self.lh) == self.rows
        assert self.lh.table_stats(T).rows == len(self.rows)

    @invariant()
    def files_hold_one_partition(self) -> None:
        if not self.versions:
            return
        d = self.lh.describe_table(T)
        assert list(d.partition_by) == self.spec
        for f in self.lh.list_data_files(T):
            part = f.partition
            st_ = f.stats
            if "country" in part:
                c = st_["country"]
                assert (c.min, c.max) == (part["country"], part["country"]) or (
                    part["country"] is None and c.null_count == f.rows
                ), (f.path, part)
            if "ts_day" in part and part["ts_day"] is not None:
                t = st_["ts"]
                assert (t.min - EPOCH).days == (t.max - EPOCH).days == part["ts_day"]

    def teardown(self) -> None:
        self.lh.close()


PartitionedTable.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
test_partitioned_table_matches_the_model = PartitionedTable.TestCase
