"""``lakehouse.spark.merge(..., clauses=[MergeClause, ...])``: Delta's WHEN clauses.

Each case runs a merge with clauses on a table holding rows in Parquet files
and inlined rows (with deleted rows of both), and compares the table after it
and the counts with a reference computed here in plain Python from the same
rows: the clauses written a second time as Python functions, applied with
SQL's rules (a source row matching no target row takes the first NOT MATCHED
clause that holds; each matched pair the first MATCHED clause that holds; a
null condition does not hold). Both recording paths run: the driver's (few
changes, what the one job returned) and the executors' (``DRIVER_ROWS``
patched to 0). One SparkSession for the run (tests/spark_fixtures.py).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakehouse

pytest.importorskip("pyspark", reason="pyspark is not installed (the spark extra)")

import lakehouse.spark as lhs
from lakehouse.spark import MergeClause

mc = importlib.import_module("lakehouse.spark.merge_clauses")

pytest_plugins = ["spark_fixtures"]
pytestmark = pytest.mark.spark

T = "s.t"
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("name", pa.string()),
        ("qty", pa.int32()),
        ("grp", pa.string()),
    ]
)
COLS = SCHEMA.names
PROPS = {"inline.max_rows": "20", "compaction.auto": "false"}
SRC_SCHEMA = "id long, name string, qty int, grp string, note string"

Row = dict[str, Any]


def target_rows(ids: Any) -> list[Row]:
    return [{"id": i, "name": f"n{i}", "qty": i % 7, "grp": f"g{i % 3}"} for i in ids]


def make(root: Path, **create: Any) -> Any:
    """Rows 0..59 in a Parquet file, 60..69 inlined; 5 (file) and 65 (inline) deleted."""
    h = lakehouse.open(str(root), kv_options={"fsync": False})
    with h.begin() as txn:
        txn.create_namespace("s")
        txn.create_table(T, SCHEMA, PROPS, **create)
    h.append(T, pa.Table.from_pylist(target_rows(range(0, 60)), schema=SCHEMA))
    h.append(T, pa.Table.from_pylist(target_rows(range(60, 70)), schema=SCHEMA))
    h.delete(T, "id IN (5, 65)")
    return h


#: matched (3, 4, 40 in the file; 61, 62 inlined), deleted (5, 65), new (100..103);
#: qty null in one matched and one new row
SOURCE: list[Row] = [
    {"id": 3, "name": "a", "qty": 9, "grp": "g1", "note": "x"},
    {"id": 4, "name": "b", "qty": 1, "grp": "g0", "note": None},
    {"id": 40, "name": "c", "qty": None, "grp": "g2", "note": "y"},
    {"id": 61, "name": "d", "qty": 6, "grp": "g1", "note": None},
    {"id": 62, "name": "e", "qty": 2, "grp": "g2", "note": None},
    {"id": 5, "name": "f", "qty": 4, "grp": "g0", "note": None},
    {"id": 65, "name": "g", "qty": 8, "grp": "g1", "note": None},
    {"id": 100, "name": "h", "qty": 3, "grp": "g1", "note": None},
    {"id": 101, "name": "i", "qty": None, "grp": "g0", "note": None},
    {"id": 102, "name": "j", "qty": 7, "grp": "g1", "note": None},
    {"id": 103, "name": "k", "qty": 0, "grp": "g2", "note": None},
]


def gt(a: Any, b: Any) -> bool:
    return a is not None and b is not None and a > b


# a Python clause: (matched: True, False or "source" (NOT MATCHED BY SOURCE), action,
# condition(t, s) or None, values(t, s) or None = *)
PyClause = tuple[
    bool | str, str, Callable[[Row, Row], bool] | None, Callable[[Row, Row], Row] | None
]


def reference(
    target: list[Row], source: list[Row], clauses: list[PyClause]
) -> tuple[tuple[int, int, int], list[Row]]:
    """The merge by SQL's rules: ((inserted, updated, deleted), rows after)."""
    changes: dict[int, tuple[str, Row | None]] = {}
    inserted: list[Row] = []
    for s in source:
        hits = [i for i, t in enumerate(target) if t["id"] == s["id"]]
        for i in hits:
            t = target[i]
            for matched, action, cond, values in clauses:
                if matched is True and (cond is None or cond(t, s)):
                    if action == "delete":
                        new = None
                    else:
                        new = dict(t)
                        set_ = values(t, s) if values else {c: s[c] for c in COLS if c in s}
                        new.update(set_)
                    if i in changes and not (action == "delete" == changes[i][0]):
                        raise AssertionError("ambiguous")
                    changes[i] = (action, new)
                    break
        if not hits:
            for matched, _action, cond, values in clauses:
                if matched is False and (cond is None or cond({}, s)):
                    given = values({}, s) if values else {c: s[c] for c in COLS if c in s}
                    inserted.append({c: given.get(c) for c in COLS})
                    break
    matched_ids = {s["id"] for s in source}
    for i, t in enumerate(target):
        if t["id"] in matched_ids:
            continue
        for matched, action, cond, values in clauses:
            if matched == "source" and (cond is None or cond(t, {})):
                new = None if action == "delete" else {**t, **values(t, {})}  # type: ignore[misc]
                changes[i] = (action, new)
                break
    rows = []
    for i, t in enumerate(target):
        if i not in changes:
            rows.append(t)
        elif changes[i][1] is not None:
            rows.append(changes[i][1])
    updated = sum(1 for a, _ in changes.values() if a == "update")
    deleted = sum(1 for a, _ in changes.values() if a == "delete")
    return (len(inserted), updated, deleted), sorted_rows(rows + inserted)


def sorted_rows(rows: list[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: tuple(str(r[c]) for c in COLS))


def live_target() -> list[Row]:
    return target_rows(i for i in range(70) if i not in (5, 65))


# name: (SQL clauses, the same as Python clauses)
CASES: dict[str, tuple[list[MergeClause], list[PyClause]]] = {
    "update_star": (
        [MergeClause(True, "update")],
        [(True, "update", None, None)],
    ),
    "update_with_condition": (
        [
            MergeClause(
                True, "update", "s.qty > t.qty", {"qty": "s.qty", "name": "concat(t.name, '+')"}
            )
        ],
        [
            (
                True,
                "update",
                lambda t, s: gt(s["qty"], t["qty"]),
                lambda t, s: {"qty": s["qty"], "name": t["name"] + "+"},
            )
        ],
    ),
    "delete": ([MergeClause(True, "delete")], [(True, "delete", None, None)]),
    "delete_with_condition_and_insert": (
        [MergeClause(True, "delete", "s.qty < 3"), MergeClause(False, "insert")],
        [
            (True, "delete", lambda t, s: s["qty"] is not None and s["qty"] < 3, None),
            (False, "insert", None, None),
        ],
    ),
    "several_matched_first_wins": (
        [
            MergeClause(True, "update", "s.qty > 4", {"name": "'big'"}),
            MergeClause(True, "delete", "s.qty > 1"),
            MergeClause(True, "update", None, {"name": "'small'", "qty": "t.qty * 10"}),
        ],
        [
            (True, "update", lambda t, s: gt(s["qty"], 4), lambda t, s: {"name": "big"}),
            (True, "delete", lambda t, s: gt(s["qty"], 1), None),
            (True, "update", None, lambda t, s: {"name": "small", "qty": t["qty"] * 10}),
        ],
    ),
    "insert_with_condition": (
        [MergeClause(False, "insert", "s.qty >= 3")],
        [(False, "insert", lambda t, s: s["qty"] is not None and s["qty"] >= 3, None)],
    ),
    "insert_explicit_values": (
        [
            MergeClause(
                False, "insert", "s.grp = 'g1'", {"id": "s.id + 1000", "name": "upper(s.name)"}
            ),
            MergeClause(False, "insert", None, {"id": "s.id", "qty": "7", "grp": "note"}),
        ],
        [
            (
                False,
                "insert",
                lambda t, s: s["grp"] == "g1",
                lambda t, s: {"id": s["id"] + 1000, "name": s["name"].upper()},
            ),
            (False, "insert", None, lambda t, s: {"id": s["id"], "qty": 7, "grp": s["note"]}),
        ],
    ),
    "no_clause_holds": (
        [
            MergeClause(True, "update", "s.qty > 100", {"qty": "0"}),
            MergeClause(False, "insert", "s.qty > 100"),
        ],
        [
            (True, "update", lambda t, s: gt(s["qty"], 100), lambda t, s: {"qty": 0}),
            (False, "insert", lambda t, s: gt(s["qty"], 100), None),
        ],
    ),
    "everything": (
        [
            MergeClause(True, "update", "s.qty IS NULL", {"grp": "'none'"}),
            MergeClause(True, "delete", "s.grp = t.grp"),
            MergeClause(True, "update"),
            MergeClause(False, "insert", "s.qty > 2", {"id": "s.id", "name": "s.note"}),
            MergeClause(False, "insert"),
        ],
        [
            (True, "update", lambda t, s: s["qty"] is None, lambda t, s: {"grp": "none"}),
            (True, "delete", lambda t, s: s["grp"] == t["grp"], None),
            (True, "update", None, None),
            (
                False,
                "insert",
                lambda t, s: gt(s["qty"], 2),
                lambda t, s: {"id": s["id"], "name": s["note"]},
            ),
            (False, "insert", None, None),
        ],
    ),
    "not_matched_by_source": (
        [
            MergeClause(True, "update"),
            MergeClause(False, "insert", "s.qty > 3"),
            MergeClause(False, "delete", "t.qty > 4", by_source=True),
            MergeClause(
                False, "update", "grp = 'g1'", {"name": "concat(t.name, '-')"}, by_source=True
            ),
            MergeClause(False, "update", None, {"qty": "t.qty + 100"}, by_source=True),
        ],
        [
            (True, "update", None, None),
            (False, "insert", lambda t, s: gt(s["qty"], 3), None),
            ("source", "delete", lambda t, s: gt(t["qty"], 4), None),
            (
                "source",
                "update",
                lambda t, s: t["grp"] == "g1",
                lambda t, s: {"name": t["name"] + "-"},
            ),
            ("source", "update", None, lambda t, s: {"qty": t["qty"] + 100}),
        ],
    ),
}


@pytest.fixture(params=["driver", "executors"])
def path(request, monkeypatch):
    if request.param == "executors":
        monkeypatch.setattr(mc, "DRIVER_ROWS", 0)
    return request.param


def source_df(spark, rows: list[Row], drop: tuple[str, ...] = ()) -> Any:
    df = spark.createDataFrame([tuple(r.values()) for r in rows], SRC_SCHEMA)
    return df.drop(*drop) if drop else df


def check(spark, lh, clauses, py, src=SOURCE, drop=(), on: Any = "t.id = s.id") -> Any:
    before = lh.version
    res = lhs.merge(lh, source_df(spark, src, drop), T, on, clauses=clauses)
    py_src = [{k: v for k, v in r.items() if k not in drop} for r in src]
    want_counts, want_rows = reference(live_target(), py_src, py)
    assert (res.inserted, res.updated, res.deleted) == want_counts
    assert sorted_rows(lh.read(T).to_pylist()) == want_rows
    assert lh.version >= before
    return res


#: the executors' path (more work per merge) runs the cases that use every action
EXECUTOR_CASES = (
    "several_matched_first_wins",
    "insert_explicit_values",
    "everything",
    "not_matched_by_source",
)


@pytest.mark.parametrize(
    ("case", "path"),
    [(c, "driver") for c in CASES] + [(c, "executors") for c in EXECUTOR_CASES],
    indirect=["path"],
)
def test_clauses_match_the_python_reference(spark, tmp_path, path, case):
    lh = make(tmp_path / "lh")
    try:
        clauses, py = CASES[case]
        check(spark, lh, clauses, py)
    finally:
        lh.close()


def test_star_keeps_the_columns_the_source_lacks_and_key_names_as_on(spark, tmp_path, path):
    lh = make(tmp_path / "lh")
    try:
        clauses = [MergeClause(True, "update"), MergeClause(False, "insert")]
        py: list[PyClause] = [(True, "update", None, None), (False, "insert", None, None)]
        check(spark, lh, clauses, py, drop=("grp", "name"), on=["id"])
    finally:
        lh.close()


def test_empty_source_and_a_source_matching_nothing(spark, tmp_path):
    lh = make(tmp_path / "lh")
    try:
        clauses = [MergeClause(True, "update", "s.qty > 1"), MergeClause(True, "delete")]
        v = lh.version
        res = lhs.merge(lh, source_df(spark, []), T, "id", clauses=clauses)
        assert (res.inserted, res.updated, res.deleted) == (0, 0, 0)
        new = [r for r in SOURCE if r["id"] >= 100]
        res = lhs.merge(lh, source_df(spark, new), T, "t.id = s.id", clauses=clauses)
        assert (res.inserted, res.updated, res.deleted) == (0, 0, 0)
        assert sorted_rows(lh.read(T).to_pylist()) == sorted_rows(live_target())
        assert lh.version >= v
    finally:
        lh.close()


def data_files(root: Path) -> set[str]:
    return {os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".parquet")}


def test_a_target_row_two_source_rows_change_is_refused_with_nothing_written(spark, tmp_path, path):
    lh = make(tmp_path / "lh")
    try:
        twice = [*SOURCE, {"id": 40, "name": "z", "qty": 1, "grp": "g0", "note": None}]
        v, files = lh.version, data_files(tmp_path / "lh")
        with pytest.raises(ValueError, match="several source rows matched the same target row"):
            lhs.merge(
                lh,
                source_df(spark, twice),
                T,
                "t.id = s.id",
                clauses=[MergeClause(True, "update"), MergeClause(False, "insert")],
            )
        assert lh.version == v
        assert data_files(tmp_path / "lh") == files
        assert sorted_rows(lh.read(T).to_pylist()) == sorted_rows(live_target())
        # the other source row matched only where no clause changes it: not ambiguous
        res = lhs.merge(
            lh,
            source_df(spark, twice),
            T,
            "t.id = s.id",
            clauses=[MergeClause(True, "update", "s.name <> 'z'")],
        )
        assert res.updated == 5
        # two source rows deleting the same row delete it once
        res = lhs.merge(lh, source_df(spark, twice), T, "id", clauses=[MergeClause(True, "delete")])
        assert res.deleted == 5
        assert {r["id"] for r in lh.read(T).to_pylist()} & {3, 4, 40, 61, 62} == set()
    finally:
        lh.close()


def test_merge_joins_the_callers_transaction(spark, tmp_path):
    lh = make(tmp_path / "lh")
    try:
        v = lh.version
        txn = lh.begin()
        res = lhs.merge(
            lh,
            source_df(spark, SOURCE),
            T,
            "t.id = s.id",
            clauses=[MergeClause(True, "delete"), MergeClause(False, "insert")],
            txn=txn,
        )
        assert (res.inserted, res.deleted) == (6, 5)
        assert lh.version == v
        txn.rollback()
        assert sorted_rows(lh.read(T).to_pylist()) == sorted_rows(live_target())
    finally:
        lh.close()


@pytest.mark.parametrize(
    ("clauses", "message"),
    [
        ([MergeClause(True, "update", None, {"nope": "1"})], "no column 'nope'"),
        ([MergeClause(True, "update", None, {"qty": "s.nope + 1"})], "no column 'nope'"),
        ([MergeClause(True, "update", "t.nope > 1")], "no column 'nope'"),
        ([MergeClause(True, "update", None, {"qty": "s.id"})], "column 'qty'.*cast"),
        ([MergeClause(True, "update", None, {"qty": "'x'"})], "does not fit"),
        ([MergeClause(False, "insert", "t.qty > 1")], "only the source's columns"),
        ([MergeClause(False, "insert", None, {"name": "s.name"})], "column 'id'"),
        ([MergeClause(True, "insert")], "action"),
        ([MergeClause(True, "delete"), MergeClause(True, "update")], "only the last"),
        ([MergeClause(True, "update", "s.qty + 1")], "not boolean"),
        ([MergeClause(False, "delete", "s.qty > 1", by_source=True)], "only the target's"),
        ([MergeClause(False, "update", by_source=True)], "not \\*"),
        ([MergeClause(False, "insert", by_source=True)], "action"),
        ([], "at least one"),
    ],
)
def test_bad_clauses_raise_before_any_job(spark, tmp_path, clauses, message):
    lh = make(tmp_path / "lh")
    try:
        v = lh.version
        with pytest.raises(ValueError, match=message):
            lhs.merge(lh, source_df(spark, SOURCE), T, "t.id = s.id", clauses=clauses)
        assert lh.version == v
    finally:
        lh.close()


def test_bad_merge_conditions_and_arguments(spark, tmp_path):
    lh = make(tmp_path / "lh")
    try:
        src = source_df(spark, SOURCE)
        delete = [MergeClause(True, "delete")]
        with pytest.raises(ValueError, match="no column 'nope'"):
            lhs.merge(lh, src, T, "t.id = s.nope", clauses=delete)
        with pytest.raises(ValueError, match="merge key 'nope'"):
            lhs.merge(lh, src, T, ["nope"], clauses=delete)
        with pytest.raises(ValueError, match="no primary key"):
            lhs.merge(lh, src, T, None, clauses=delete)
        with pytest.raises(ValueError, match="not both"):
            lhs.merge(lh, src, T, "id", clauses=delete, when_matched="delete")
        with pytest.raises(ValueError, match="different aliases"):
            lhs.merge(lh, src, T, "id", clauses=delete, source_alias="t")
    finally:
        lh.close()


@pytest.mark.parametrize(
    "create",
    [{"primary_key": ["id"]}, {"partition_by": ["grp"]}],
    ids=["primary_key", "partitioned"],
)
def test_primary_key_and_partitioned_tables(spark, tmp_path, path, create):
    lh = make(tmp_path / "lh", **create)
    try:
        clauses, py = CASES["everything"]
        check(spark, lh, clauses, py)
        if "primary_key" in create:  # an insert of a key the table holds: refused
            v = lh.version
            src = [{"id": 3, "name": "dup", "qty": 1, "grp": "g0", "note": None}]
            with pytest.raises(ValueError):
                lhs.merge(
                    lh,
                    source_df(spark, src),
                    T,
                    "t.id = s.id + 1000",
                    clauses=[MergeClause(False, "insert")],
                )
            assert lh.version == v
    finally:
        lh.close()
