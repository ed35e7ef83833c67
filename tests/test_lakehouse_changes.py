"""The change feed (``lh.changes``) per operation, against a replay of table states.

For every version ``v`` a scenario makes, the rows the feed reports as removed
(``delete`` and ``update_preimage``) and as added (``insert`` and
``update_postimage``) must equal, as multisets, the difference between the
table read at ``v - 1`` and at ``v`` (``lh.at_version``). On top of that each
operation's own rule is checked: an update and a merge update give one pre-
and one post-image per row (paired by key), compaction gives nothing, a
restore only the rows whose visible state changed, a table dropped and
created again is followed by its id, a renamed column keeps its rows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakehouse

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
T = "s.t"
REMOVED = ("delete", "update_preimage")
ADDED = ("insert", "update_postimage")


def rows(ids: list[int], tag: str = "a") -> pa.Table:
    return pa.table({"id": ids, "v": [f"{tag}{i}" for i in ids]}, schema=SCHEMA)


@pytest.fixture
def lh(tmp_path: Path) -> Iterator[lakehouse.Lakehouse]:
    with lakehouse.open(str(tmp_path / "lh")) as lh:
        with lh.begin() as txn:
            txn.create_namespace("s")
            txn.create_table(T, SCHEMA)
        lh.append(T, rows(list(range(10))))
        lh.append(T, rows(list(range(10, 20))))
        yield lh


def _bag(t: pa.Table, names: list[str]) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r[n] for n in names) for r in t.select(names).to_pylist())


def _state(lh: lakehouse.Lakehouse, v: int, table: str = T) -> pa.Table | None:
    with lh.at_version(v) as view:
        return view.read(table) if view.table_exists(table) else None


def check_replay(lh: lakehouse.Lakehouse, v: int, table: str = T) -> pa.Table:
    """The feed of version ``v`` agrees with the difference of the table states."""
    feed = lh.changes(table, v, v)
    names = [n for n in feed.column_names if not n.startswith("_")]
    before, after = _state(lh, v - 1, table), _state(lh, v, table)
    b = Counter() if before is None else _bag(before, names)
    a = Counter() if after is None else _bag(after, names)
    kinds = feed.column("_change_type").to_pylist()
    removed = _bag(feed.filter(pa.array([k in REMOVED for k in kinds], pa.bool_())), names)
    added = _bag(feed.filter(pa.array([k in ADDED for k in kinds], pa.bool_())), names)
    assert set(kinds) <= set(REMOVED + ADDED)
    # net of rows updated to the values they had (a pre- and post-image alike)
    assert removed - added == b - a, f"version {v}: removed rows differ from the replay"
    assert added - removed == a - b, f"version {v}: added rows differ from the replay"
    same = removed & added  # only an update's images may be equal
    assert sum(same.values()) <= min(
        kinds.count("update_preimage"), kinds.count("update_postimage")
    )
    assert set(feed.column("_version").to_pylist()) <= {v}
    return feed


def kinds_of(feed: pa.Table) -> Counter[str]:
    return Counter(feed.column("_change_type").to_pylist())


def _pairs(feed: pa.Table) -> tuple[dict[int, str], dict[int, str]]:
    pre = {r["id"]: r["v"] for r in feed.to_pylist() if r["_change_type"] == "update_preimage"}
    post = {r["id"]: r["v"] for r in feed.to_pylist() if r["_change_type"] == "update_postimage"}
    return pre, post


# one scenario per operation: (name, the operation, the feed kinds it must give)
SCENARIOS: list[tuple[str, Callable[[lakehouse.Lakehouse], Any], dict[str, int]]] = [
    ("append", lambda lh: lh.append(T, rows([100, 101])), {"insert": 2}),
    ("overwrite all", lambda lh: lh.overwrite(T, rows([1, 2], "o")), {"delete": 20, "insert": 2}),
    (
        "overwrite where",
        lambda lh: lh.overwrite(T, rows([3, 4], "w"), where="id < 5"),
        {"delete": 5, "insert": 2},
    ),
    ("delete", lambda lh: lh.delete(T, "id % 3 = 0"), {"delete": 7}),
    (
        "update",
        lambda lh: lh.update(T, "id BETWEEN 5 AND 12", {"v": "'u' || CAST(id AS VARCHAR)"}),
        {"update_preimage": 8, "update_postimage": 8},
    ),
    (
        "merge update and insert",
        lambda lh: lh.merge(T, rows([18, 19, 30, 31], "m"), "id"),
        {"update_preimage": 2, "update_postimage": 2, "insert": 2},
    ),
    (
        "merge delete",
        lambda lh: lh.merge(T, rows([1, 2, 40], "m"), "id", when_matched="delete"),
        {"delete": 2, "insert": 1},
    ),
    (
        "merge from a partial source",
        lambda lh: lh.merge(T, pa.table({"id": [7]}), "id", when_not_matched="ignore"),
        {"update_preimage": 1, "update_postimage": 1},
    ),
]


@pytest.mark.parametrize(("name", "op", "expected"), SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_feed_per_operation(
    lh: lakehouse.Lakehouse,
    name: str,
    op: Callable[[lakehouse.Lakehouse], Any],
    expected: dict[str, int],
) -> None:
    op(lh)
    feed = check_replay(lh, lh.version)
    assert kinds_of(feed) == Counter(expected)
    pre, post = _pairs(feed)
    assert pre.keys() == post.keys()  # one pre-image and one post-image per updated row


def test_update_pairs_pre_and_post_images(lh: lakehouse.Lakehouse) -> None:
    lh.update(T, "id IN (3, 4)", {"v": "'new'"})
    pre, post = _pairs(check_replay(lh, lh.version))
    assert pre == {3: "a3", 4: "a4"} and post == {3: "new", 4: "new"}


def test_compaction_reports_nothing_and_deletes_across_it_stay_exact(
    lh: lakehouse.Lakehouse,
) -> None:
    lh.delete(T, "id = 1")
    with lh.begin() as txn:
        txn.compact(T)
    assert lh.changes(T, lh.version).num_rows == 0
    check_replay(lh, lh.version)
    lh.delete(T, "id = 2")  # on the compacted file
    assert kinds_of(check_replay(lh, lh.version)) == Counter({"delete": 1})
    lh.update(T, "id = 3", {"v": "'x'"})
    assert kinds_of(check_replay(lh, lh.version)) == Counter(
        {"update_preimage": 1, "update_postimage": 1}
    )


def test_compaction_racing_an_update_keeps_the_images(lh: lakehouse.Lakehouse) -> None:
    """An update committed after a concurrent compaction moved its rows: its deletes are
    carried onto the compacted file, and still reported as pre-images."""
    updater = lh.begin()
    updater.update(T, "id = 4", {"v": "'late'"})
    with lh.begin() as txn:
        txn.compact(T)
    updater.commit()
    feed = check_replay(lh, lh.version)
    assert _pairs(feed) == ({4: "a4"}, {4: "late"})


@pytest.mark.parametrize("compact_between", [False, True])
def test_restore_reports_only_rows_whose_visibility_changed(
    lh: lakehouse.Lakehouse, compact_between: bool
) -> None:
    target = lh.version
    lh.update(T, "id = 2", {"v": "'two'"})
    lh.delete(T, "id IN (5, 6)")
    lh.append(T, rows([50]))
    if compact_between:
        with lh.begin() as txn:
            txn.compact(T)
    with lh.begin() as txn:
        txn.restore_table(T, target)
    feed = check_replay(lh, lh.version)
    got = Counter((r["_change_type"], r["id"], r["v"]) for r in feed.to_pylist())
    assert got == Counter(
        {
            ("insert", 2, "a2"): 1,
            ("delete", 2, "two"): 1,
            ("insert", 5, "a5"): 1,
            ("insert", 6, "a6"): 1,
            ("delete", 50, "a50"): 1,
        }
    )


def test_clone_shows_its_rows_as_inserts(lh: lakehouse.Lakehouse) -> None:
    with lh.begin() as txn:
        txn.clone_table(T, "s.c")
    feed = check_replay(lh, lh.version, "s.c")
    assert kinds_of(feed) == Counter({"insert": 20})


def test_drop_and_create_again_is_followed_by_table_id(lh: lakehouse.Lakehouse) -> None:
    first = lh.version
    with lh.begin() as txn:
        txn.drop_table(T)
    with lh.begin() as txn:
        txn.create_table(T, pa.schema([("id", pa.int64()), ("w", pa.float64())]))
    created = lh.version
    lh.append(T, pa.table({"id": [7], "w": [0.5]}))
    # the old table's versions (its appends, its drop) are not this table's changes
    feed = lh.changes(T, 1)
    assert feed.to_pylist() == [
        {"id": 7, "w": 0.5, "_change_type": "insert", "_version": created + 1}
    ]
    assert lh.changes(T, first, created).num_rows == 0
    check_replay(lh, lh.version)


def test_renamed_column_keeps_its_rows(lh: lakehouse.Lakehouse) -> None:
    start = lh.version
    lh.delete(T, "id = 0")
    with lh.begin() as txn:
        txn.alter_table(T, rename_columns={"v": "label"})
    lh.append(T, pa.table({"id": [99], "label": ["z"]}))
    feed = lh.changes(T, start + 1)
    assert feed.select(["id", "label", "_change_type"]).to_pylist() == [
        {"id": 0, "label": "a0", "_change_type": "delete"},
        {"id": 99, "label": "z", "_change_type": "insert"},
    ]


def test_added_column_reads_null_in_older_changes(lh: lakehouse.Lakehouse) -> None:
    start = lh.version
    lh.delete(T, "id = 1")
    with lh.begin() as txn:
        txn.alter_table(T, schema=SCHEMA.append(pa.field("n", pa.int32())))
    feed = lh.changes(T, start + 1)
    assert feed.to_pylist() == [
        {"id": 1, "v": "a1", "n": None, "_change_type": "delete", "_version": start + 1}
    ]


def test_rows_added_and_changed_in_one_transaction_are_inserts(lh: lakehouse.Lakehouse) -> None:
    with lh.begin() as txn:
        txn.append(T, rows([60, 61, 62]))
        txn.update(T, "id IN (61, 3)", {"v": "'x'"})
        txn.merge(T, rows([62, 4], "m"), "id")
        txn.delete(T, "id = 60")
    feed = check_replay(lh, lh.version)
    got = Counter((r["_change_type"], r["id"], r["v"]) for r in feed.to_pylist())
    assert got == Counter(
        {
            ("insert", 61, "x"): 1,
            ("insert", 62, "m62"): 1,
            ("update_preimage", 3, "a3"): 1,
            ("update_postimage", 3, "x"): 1,
            ("update_preimage", 4, "a4"): 1,
            ("update_postimage", 4, "m4"): 1,
        }
    )


def test_a_seeded_history_replays(lh: lakehouse.Lakehouse) -> None:
    """Random operations; every version's feed agrees with the replay."""
    import random

    rng = random.Random(19)
    next_id = 1000
    start = lh.version + 1
    for _ in range(25):
        pick = rng.randrange(6)
        lo = rng.randrange(0, 60)
        if pick == 0:
            ids = list(range(next_id, next_id + rng.randrange(1, 4)))
            next_id += len(ids)
            lh.append(T, rows(ids, "r"))
        elif pick == 1:
            lh.delete(T, f"id % 7 = {lo % 7}")
        elif pick == 2:
            lh.update(T, f"id % 5 = {lo % 5}", {"v": f"'u{_}'"})
        elif pick == 3:
            lh.merge(T, rows([lo, next_id], f"m{_}"), "id")
            next_id += 1
        elif pick == 4:
            with lh.begin() as txn:
                txn.compact(T)
        else:
            with lh.begin() as txn:
                txn.restore_table(T, rng.randrange(2, lh.version + 1))
    for v in range(start, lh.version + 1):
        check_replay(lh, v)


def test_history_names_each_operation(lh: lakehouse.Lakehouse) -> None:
    lh.update(T, "id = 1", {"v": "'x'"})
    lh.merge(T, rows([2]), "id")
    with lh.begin() as txn:
        txn.delete(T, "id = 3")
        txn.compact(T)
    lh.overwrite(T, rows([1]))
    with lh.begin() as txn:
        txn.restore_table(T, 3)
    with lh.begin() as txn:
        txn.create_table("s.n", SCHEMA)
        txn.append("s.n", rows([1]))
    with lh.begin() as txn:
        txn.alter_table(T, set_properties={"k": "v"})
    ops = [[(c.op, c.kind, c.name) for c in h.changes] for h in reversed(lh.history())]
    assert ops[2:] == [
        [("append", "table", T)],
        [("append", "table", T)],
        [("update", "table", T)],
        [("merge", "table", T)],
        [("delete", "table", T), ("compact", "table", T)],
        [("overwrite", "table", T)],
        [("restore", "table", T)],
        [("create", "table", "s.n"), ("append", "table", "s.n")],
        [("alter", "table", T)],
    ]
    assert [c.op for c in lh.version_info(lh.version - 3).changes] == ["overwrite"]
