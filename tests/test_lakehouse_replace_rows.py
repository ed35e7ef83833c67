"""``txn.replace_rows``: new versions of rows named by (data file, position).

Checked against ``txn.update`` where both apply (same table contents after),
with the change feed's pre/post images, primary keys, conflicts with a
concurrent delete, atomicity and bad input.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakehouse

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
T = "s.t"


def rows(ids: list[int], tag: str = "a") -> pa.Table:
    return pa.table({"id": ids, "v": [f"{tag}{i}" for i in ids]}, schema=SCHEMA)


def at(*pairs: tuple[str, int]) -> pa.Table:
    return pa.table(
        {"path": [p for p, _ in pairs], "position": [i for _, i in pairs]},
        schema=pa.schema([("path", pa.string()), ("position", pa.int64())]),
    )


def make(
    path: Path, props: dict[str, str] | None = None, pk: list[str] | None = None
) -> tuple[lakehouse.Lakehouse, list[str]]:
    """A table of ids 0..9 (file 0) and 10..19 (file 1); returns the two files' paths."""
    lh = lakehouse.open(str(path))
    with lh.begin() as txn:
        txn.create_namespace("s")
        txn.create_table(T, SCHEMA, properties=props, primary_key=pk)
    files: list[str] = []
    for ids in (list(range(10)), list(range(10, 20))):
        before = {f.path for f in lh.list_data_files(T)}
        lh.append(T, rows(ids))
        (new,) = {f.path for f in lh.list_data_files(T)} - before
        files.append(new)
    return lh, files


@pytest.fixture(params=["parquet", "inline"])
def table(request: Any, tmp_path: Path) -> Iterator[tuple[lakehouse.Lakehouse, list[str]]]:
    props = {"inline.max_rows": "0"} if request.param == "parquet" else {}
    lh, files = make(tmp_path / "lh", props)
    with lh:
        yield lh, files


def state(lh: lakehouse.Lakehouse) -> list[tuple[int, str]]:
    return sorted((r["id"], r["v"]) for r in lh.read(T).to_pylist())


def test_replace_equals_update_with_pre_and_post_images(
    table: tuple[lakehouse.Lakehouse, list[str]], tmp_path: Path
) -> None:
    lh, (f0, f1) = table
    v0 = lh.version
    with lh.begin() as txn:
        n = txn.replace_rows(
            T, at((f0, 3), (f1, 5), (f0, 7)), pa.table({"v": ["x3", "x15", "x7"], "id": [3, 15, 7]})
        )
    assert n == 3
    other, _ = make(tmp_path / "copy")
    with other:
        with other.begin() as txn:
            txn.update(T, "id IN (3, 7, 15)", {"v": "'x' || CAST(id AS VARCHAR)"})
        assert state(lh) == state(other)
    feed = lh.changes(T, v0 + 1)
    got = sorted((r["_change_type"], r["id"], r["v"]) for r in feed.to_pylist())
    assert got == sorted(
        [("update_preimage", i, f"a{i}") for i in (3, 7, 15)]
        + [("update_postimage", i, f"x{i}") for i in (3, 7, 15)]
    )


def test_rows_of_an_earlier_update_stay_updates_own_inserts_stay_inserts(
    table: tuple[lakehouse.Lakehouse, list[str]],
) -> None:
    lh, (f0, _) = table
    v0 = lh.version
    with lh.begin() as txn:
        txn.update(T, "id = 1", {"v": "'u1'"})
        txn.append(T, rows([100]))
        holding = {f.stats["id"].min: f.path for f in txn.list_data_files(T) if f.record_count == 1}
        assert set(holding) == {1, 100}
        n = txn.replace_rows(
            T, at((holding[100], 0), (holding[1], 0), (f0, 2)), rows([100, 1, 2], "r")
        )
        assert n == 3
    feed = lh.changes(T, v0 + 1)
    got = sorted((r["_change_type"], r["id"], r["v"]) for r in feed.to_pylist())
    assert got == [
        ("insert", 100, "r100"),
        ("update_postimage", 1, "r1"),
        ("update_postimage", 2, "r2"),
        ("update_preimage", 1, "a1"),
        ("update_preimage", 2, "a2"),
    ]
    assert dict(state(lh))[1] == "r1" and len(state(lh)) == 21


def test_primary_key_unchanged_keys_are_free_and_collisions_refused(tmp_path: Path) -> None:
    lh, (f0, f1) = make(tmp_path / "lh", pk=["id"])
    with lh:
        with lh.begin() as txn:  # the same keys again: the old rows are gone first
            assert txn.replace_rows(T, at((f0, 0), (f1, 0)), rows([0, 10], "b")) == 2
        with lh.begin() as txn:  # a key moved to a free one
            txn.replace_rows(T, at((f0, 1)), rows([1001], "b"))
        before = state(lh)
        with lh.begin() as txn:
            with pytest.raises(lakehouse.DuplicateKey):  # 2 -> 3, still live
                txn.replace_rows(T, at((f0, 2)), rows([3], "c"))
            # swapping two keys is fine: both old rows are deleted first
            txn.replace_rows(T, at((f0, 4), (f0, 5)), rows([5, 4], "swap"))
        after = dict(state(lh))
        assert after[4] == "swap4" and after[5] == "swap5"
        assert after[2] == "a2" and after[3] == "a3"
        assert len(after) == len(before)
        assert lh.read(T, where="id = 1001").column("v").to_pylist() == ["b1001"]


def test_all_or_nothing(table: tuple[lakehouse.Lakehouse, list[str]]) -> None:
    lh, (f0, f1) = table
    with lh.begin() as txn:
        with pytest.raises(ValueError, match="past"):
            txn.replace_rows(T, at((f0, 1), (f1, 10)), rows([1, 10], "z"))
        with pytest.raises(ValueError):  # a value the schema cannot take: nothing deleted
            txn.replace_rows(T, at((f0, 1)), pa.table({"id": ["not a number"], "v": ["z"]}))
        assert state_of(txn) == [(i, f"a{i}") for i in range(20)]
        txn.replace_rows(T, at((f0, 1)), rows([1], "ok"))
    assert dict(state(lh))[1] == "ok1"
    assert len(state(lh)) == 20


def state_of(txn: Any) -> list[tuple[int, str]]:
    return sorted((r["id"], r["v"]) for r in txn.read(T).to_pylist())


def test_concurrent_delete_of_the_same_row_retries(
    table: tuple[lakehouse.Lakehouse, list[str]],
) -> None:
    lh, (f0, _) = table
    a = lh.begin()
    b = lh.begin()
    a.replace_rows(T, at((f0, 4)), rows([4], "new"))
    b.delete(T, "id = 4")
    b.commit()
    with pytest.raises(lakehouse.RetryableConflict):
        a.commit()
    assert 4 not in dict(state(lh))


def test_concurrent_delete_of_another_row_rebases(
    table: tuple[lakehouse.Lakehouse, list[str]],
) -> None:
    lh, (f0, _) = table
    a = lh.begin()
    b = lh.begin()
    a.replace_rows(T, at((f0, 4)), rows([4], "new"), op="merge")
    b.delete(T, "id = 5")
    b.commit()
    a.commit()
    got = dict(state(lh))
    assert got[4] == "new4" and 5 not in got and len(got) == 19


@pytest.mark.parametrize(
    ("positions", "message"),
    [
        (lambda f0, f1: at((f0, 2), ("nope.parquet", 0)), "not a data file"),
        (lambda f0, f1: at((f1, 2), (f0, 10)), "past the 10 rows"),
        (lambda f0, f1: at((f0, 2), (f0, -1)), "out of range"),
        (lambda f0, f1: at((f0, 2), (f0, 2)), "twice"),
        (lambda f0, f1: at((f1, 2), (f0, 1)), "already deleted"),
        (lambda f0, f1: at((f0, 2), (f1, 2), (f1, 3)), "3 positions given for 2 rows"),
        (lambda f0, f1: pa.table({"path": [f0, f1]}), "position"),
    ],
)
def test_bad_input_names_it_and_changes_nothing(
    table: tuple[lakehouse.Lakehouse, list[str]], positions: Any, message: str
) -> None:
    lh, (f0, f1) = table
    lh.delete(T, "id = 1")
    before, v = state(lh), lh.version
    with lh.begin() as txn:
        with pytest.raises(ValueError, match=message):
            txn.replace_rows(T, positions(f0, f1), rows([2, 12], "z"))
        with pytest.raises(ValueError, match="op must be"):
            txn.replace_rows(T, at((f0, 2), (f1, 2)), rows([2, 12], "z"), op="delete")
    assert state(lh) == before and lh.version == v
