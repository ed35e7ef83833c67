"""The change feed and history ops against a replay of table states (issue 19, parts 5, 7).

A second, independent replay check beside test_lakehouse_changes.py. Each
scenario runs operations one transaction (one version) at a time. The
expected changes of version ``v`` are computed without the feed, by diffing
the table's rows read at ``v - 1`` and at ``v`` keyed by the row id column
``id``: a key only before is a delete, only after an insert; a key whose
values changed is an update pre/post-image pair for ``update`` and
``merge``, and a delete plus an insert for the other operations (an
overwrite replaces rows; a restore brings back other rows); identical rows
are no change. ``lh.changes`` must give exactly that, as a multiset, for
each version alone and for the whole range.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest

import lakehouse

SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), ("s", pa.string()), ("x", pa.float64())]
)
T = "s.t"

Row = tuple[Any, ...]
Step = tuple[str, Callable[[Any], Any]]


def rows(ids: list[int], s: str = "a") -> pa.Table:
    return pa.table({"id": ids, "s": [s] * len(ids), "x": [float(i) for i in ids]}, schema=SCHEMA)


@pytest.fixture
def lh() -> Iterator[lakehouse.Lakehouse]:
    h = lakehouse.open(f"memory://changes-{uuid.uuid4().hex}")
    with h.begin() as txn:
        txn.create_namespace("s")
        txn.create_table(T, SCHEMA)
    yield h
    h.close()


def _state(
    lh: Any, version: int, table: str, born: int, rename: dict[str, str]
) -> dict[Any, dict[str, Any]]:
    """The table's rows at ``version`` by id, in column names as of the end (``rename``
    maps older names); {} before the table's creation (``born``)."""
    if version < born:
        return {}
    with lh.at_version(version) as v:
        t = v.read(table)
    return {r["id"]: {rename.get(k, k): val for k, val in r.items()} for r in t.to_pylist()}


def _expected(
    lh: Any, table: str, v: int, op: str, born: int, names: list[str], rename: dict[str, str]
) -> Counter:
    before = _state(lh, v - 1, table, born, rename)
    after = _state(lh, v, table, born, rename)
    paired = op in ("update", "merge")

    def tup(r: dict[str, Any], kind: str) -> Row:
        return (*(r.get(n) for n in names), kind, v)

    out: Counter = Counter()
    for k in before.keys() | after.keys():
        b, a = before.get(k), after.get(k)
        if b is not None and a is not None:
            if tup(b, "") == tup(a, ""):
                continue
            out[tup(b, "update_preimage" if paired else "delete")] += 1
            out[tup(a, "update_postimage" if paired else "insert")] += 1
        elif b is not None:
            out[tup(b, "delete")] += 1
        else:
            assert a is not None
            out[tup(a, "insert")] += 1
    return out


def _feed(lh: Any, table: str, start: int, end: int) -> Counter:
    t = lh.changes(table, start, end)
    names = [n for n in t.column_names if n not in ("_change_type", "_version")]
    return Counter(
        (*(r[n] for n in names), r["_change_type"], r["_version"]) for r in t.to_pylist()
    )


def _run(lh: Any, steps: list[Step], table: str = T, born: int = 1) -> None:
    """Run ``steps`` (op name, function of a transaction), one version each, then check
    every version's feed alone and the whole range against the replay."""
    ops: dict[int, str] = {}
    for op, fn in steps:
        with lh.begin() as txn:
            fn(txn)
        ops[lh.version] = op
    end = lh.version
    with lh.at_version(end) as view:
        names = view.read(table).column_names
    total: Counter = Counter()
    for v, op in ops.items():
        want = _expected(lh, table, v, op, born, names, {})
        assert _feed(lh, table, v, v) == want, (v, op)
        total += want
    assert _feed(lh, table, min(ops), end) == total


def _history_ops(lh: Any, version: int) -> list[tuple[str, str, str]]:
    info = next(i for i in lh.history() if i.version == version)
    return [(c.op, c.kind, c.name) for c in info.changes]


# -- one scenario per operation -------------------------------------------------------------
def test_append(lh):
    _run(
        lh,
        [
            ("append", lambda t: t.append(T, rows([1, 2, 3]))),
            ("append", lambda t: t.append(T, rows([4]))),
        ],
    )


def test_overwrite(lh):
    _run(
        lh,
        [
            ("append", lambda t: t.append(T, rows([1, 2, 3]))),
            ("overwrite", lambda t: t.overwrite(T, rows([7, 8]))),
        ],
    )


def test_overwrite_where(lh):
    _run(
        lh,
        [
            ("append", lambda t: t.append(T, rows([1, 2, 3, 4]))),
            ("overwrite", lambda t: t.overwrite(T, rows([10, 11], s="b"), where="id >= 3")),
        ],
    )


def test_delete(lh):
    _run(
        lh,
        [
            ("append", lambda t: t.append(T, rows([1, 2, 3, 4]))),
            ("append", lambda t: t.append(T, rows([5, 6]))),
            ("delete", lambda t: t.delete(T, "id IN (2, 5)")),
            ("delete", lambda t: t.delete(T, "id = 99")),  # matches nothing
        ],
    )


def test_update(lh):
    _run(
        lh,
        [
            ("append", lambda t: t.append(T, rows([1, 2, 3, 4]))),
            ("append", lambda t: t.append(T, rows([5, 6]))),
            ("update", lambda t: t.update(T, "id IN (2, 3, 6)", {"s": "'u'", "x": "x * 10"})),
            ("update", lambda t: t.update(T, "id = 2", {"x": "x + 1"})),
        ],
    )


@pytest.mark.parametrize("when_matched", ["update", "delete", "ignore"])
@pytest.mark.parametrize("partial", [False, True])
def test_merge(lh, when_matched, partial):
    src = rows([2, 3, 9], s="m")
    if partial:  # a source without `x`: matched rows keep theirs
        src = src.drop_columns(["x"])
    _run(
        lh,
        [
            ("append", lambda t: t.append(T, rows([1, 2, 3, 4]))),
            ("merge", lambda t: t.merge(T, src, on="id", when_matched=when_matched)),
        ],
    )


def test_update_then_merge_in_one_transaction(lh):
    """A row updated and then merged again by one transaction is still one update."""

    def both(t):
        t.update(T, "id IN (1, 3)", {"s": "'u'"})
        t.merge(T, rows([1, 2, 5], s="m"), on="id")
        t.update(T, "id = 3", {"x": "x + 1"})

    _run(lh, [("append", lambda t: t.append(T, rows([1, 2, 3]))), ("merge", both)])


def test_update_then_delete_in_one_transaction(lh):
    def both(t):
        t.update(T, "id IN (1, 2)", {"s": "'u'"})
        t.delete(T, "id = 1")
        t.merge(T, rows([2]), on="id", when_matched="delete")

    _run(lh, [("append", lambda t: t.append(T, rows([1, 2, 3]))), ("delete", both)])


def test_update_twice_then_overwrite_in_one_transaction(lh):
    """Rows updated twice in one transaction and then overwritten: deletes of the
    committed rows; a row updated twice and kept: one pre/post pair."""

    def steps(t):
        t.update(T, "id IN (1, 2, 3)", {"s": "'u'"})
        t.update(T, "id = 1", {"x": "x + 1"})
        t.overwrite(T, rows([2, 3], s="o"), where="id >= 2")

    with lh.begin() as txn:
        txn.append(T, rows([1, 2, 3]))
    with lh.begin() as txn:  # both kinds in one version: checked row by row
        steps(txn)
    got = _feed(lh, T, lh.version, lh.version)
    v = lh.version
    assert got == Counter(
        {
            (1, "a", 1.0, "update_preimage", v): 1,
            (1, "u", 2.0, "update_postimage", v): 1,
            (2, "a", 2.0, "delete", v): 1,
            (3, "a", 3.0, "delete", v): 1,
            (2, "o", 2.0, "insert", v): 1,
            (3, "o", 3.0, "insert", v): 1,
        }
    )


def test_compact_reports_nothing_and_deletes_after_it_stay_exact(lh):
    def adder(i: int) -> Callable[[Any], Any]:
        return lambda t: t.append(T, rows([2 * i, 2 * i + 1]))

    steps: list[Step] = [("append", adder(i)) for i in range(4)]
    steps += [
        ("delete", lambda t: t.delete(T, "id = 3")),
        ("compact", lambda t: t.compact(T)),
        ("delete", lambda t: t.delete(T, "id IN (0, 5)")),
        ("update", lambda t: t.update(T, "id = 6", {"s": "'z'"})),
    ]
    _run(lh, steps)
    compacted = lh.version - 2
    assert lh.changes(T, compacted, compacted).num_rows == 0


def test_restore_table(lh):
    _run(
        lh,
        [
            ("append", lambda t: t.append(T, rows([1, 2, 3]))),
            ("append", lambda t: t.append(T, rows([4, 5]))),
            ("delete", lambda t: t.delete(T, "id = 1")),
            ("update", lambda t: t.update(T, "id = 4", {"s": "'u'"})),
            ("append", lambda t: t.append(T, rows([6]))),
            ("restore", lambda t: t.restore_table(T, 3)),  # after the two appends
        ],
    )


def test_restore_across_a_compaction(lh):
    _run(
        lh,
        [
            ("append", lambda t: t.append(T, rows([1, 2]))),
            ("append", lambda t: t.append(T, rows([3, 4]))),
            ("delete", lambda t: t.delete(T, "id = 2")),
            ("compact", lambda t: t.compact(T)),
            ("restore", lambda t: t.restore_table(T, 3)),  # before the delete and compaction
        ],
    )


def test_clone_table(lh):
    with lh.begin() as txn:
        txn.append(T, rows([1, 2, 3]))
        txn.delete(T, "id = 2")
    with lh.begin() as txn:
        txn.clone_table(T, "s.c")
    born = lh.version
    _run(
        lh, [("update", lambda t: t.update("s.c", "id = 1", {"s": "'c'"}))], table="s.c", born=born
    )
    # the clone's creation shows its rows as inserts; its feed starts there
    got = _feed(lh, "s.c", born, born)
    assert got == Counter({(1, "a", 1.0, "insert", born): 1, (3, "a", 3.0, "insert", born): 1})
    assert lh.changes("s.c", 1).num_rows == 4


def test_drop_and_recreate_is_followed_by_table_id(lh):
    with lh.begin() as txn:
        txn.append(T, rows([1, 2]))
    with lh.begin() as txn:
        txn.drop_table(T)
    dropped = lh.version
    with lh.begin() as txn:
        txn.create_table(T, SCHEMA)
    born = lh.version
    _run(
        lh,
        [
            ("append", lambda t: t.append(T, rows([5, 6]))),
            ("delete", lambda t: t.delete(T, "id = 5")),
        ],
        born=born,
    )
    # versions before the new table's creation, the drop included, are not its changes
    for start in (1, dropped, born):
        assert _feed(lh, T, start, lh.version) == _feed(lh, T, born, lh.version)
    assert lh.changes(T, 1, born).num_rows == 0


def test_column_rename_and_added_column(lh):
    with lh.begin() as txn:
        txn.append(T, rows([1, 2, 3]))
    first = lh.version
    with lh.begin() as txn:
        txn.alter_table(T, rename_columns={"s": "label"})
    with lh.begin() as txn:
        txn.update(T, "id = 2", {"label": "'r'"})
    with lh.begin() as txn:
        wider = pa.schema([*lh.describe_table(T).schema, ("y", pa.int32())])
        txn.alter_table(T, schema=wider)
    with lh.begin() as txn:
        txn.append(T, pa.table({"id": [4], "label": ["n"], "x": [4.0], "y": [7]}))
        txn.delete(T, "id = 1")
    got = lh.changes(T, first).to_pylist()
    assert {"label", "y"} <= set(got[0]) and "s" not in got[0]
    # names as of the end: the whole range's feed against the replay
    with lh.at_version(lh.version) as view:
        names = view.read(T).column_names
    ops = {first + 2: "update"}
    replay: Counter = Counter()
    for v in range(first, lh.version + 1):
        replay += _expected(lh, T, v, ops.get(v, "other"), 1, names, {"s": "label"})
    assert _feed(lh, T, first, lh.version) == replay
    assert (2, "r", 2.0, None, "update_postimage", first + 2) in replay  # the replay is real


def test_start_before_creation_starts_at_creation(lh):
    with lh.begin() as txn:
        txn.create_table("s.late", SCHEMA)
    born = lh.version
    with lh.begin() as txn:
        txn.append("s.late", rows([1]))
    assert _feed(lh, "s.late", 1, lh.version) == Counter({(1, "a", 1.0, "insert", born + 1): 1})


# -- history ops ----------------------------------------------------------------------------
def test_history_names_each_operation(lh):
    expect: list[tuple[int, list[tuple[str, str, str]]]] = []

    def step(fn: Callable[[Any], Any], want: list[tuple[str, str, str]]) -> None:
        with lh.begin() as txn:
            fn(txn)
        expect.append((lh.version, want))

    step(lambda t: t.append(T, rows([1, 2, 3])), [("append", "table", T)])
    step(lambda t: t.append(T, rows([4, 5])), [("append", "table", T)])
    step(lambda t: t.overwrite(T, rows([6]), where="id >= 5"), [("overwrite", "table", T)])
    step(lambda t: t.delete(T, "id = 1"), [("delete", "table", T)])
    step(lambda t: t.update(T, "id = 2", {"s": "'u'"}), [("update", "table", T)])
    step(lambda t: t.merge(T, rows([3, 9]), on="id"), [("merge", "table", T)])
    step(lambda t: t.compact(T), [("compact", "table", T)])
    step(lambda t: t.restore_table(T, 2), [("restore", "table", T)])
    step(lambda t: t.alter_table(T, set_properties={"k": "v"}), [("alter", "table", T)])
    step(lambda t: t.create_table("s.other", SCHEMA), [("create", "table", "s.other")])
    step(lambda t: t.drop_table("s.other"), [("drop", "table", "s.other")])
    for version, want in expect:
        assert _history_ops(lh, version) == want, version

    with lh.begin() as txn:  # several operations: one item each, in the order applied
        txn.append(T, rows([20]))
        txn.delete(T, "id = 20")
        txn.create_table("s.more", SCHEMA)
    got = _history_ops(lh, lh.version)
    assert ("append", "table", T) in got and ("delete", "table", T) in got
    assert got.index(("append", "table", T)) < got.index(("delete", "table", T))
    assert ("create", "table", "s.more") in got
