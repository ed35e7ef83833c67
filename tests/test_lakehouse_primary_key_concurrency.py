"""Enforced primary keys under concurrency (issue 22).

Two transactions begun at one version that insert one key never both commit
(the second gets RetryableConflict, and re-run gets DuplicateKey); threads
inserting, upserting and deleting over a small key space never leave two
live rows with one key, at any version; compaction, explicit or automatic,
running alongside updates keeps the key index right in either commit order.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakehouse
from lakehouse import DuplicateKey, RetryableConflict

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("qty", pa.int64()),
    ]
)
T = "s.t"
MODES = {"inline": {}, "parquet": {"inline.max_rows": "0"}}


def rows(ids: list[int], tag: str = "r") -> pa.Table:
    return pa.table(
        {"id": ids, "name": [f"{tag}{i}" for i in ids], "qty": [i for i in ids]}, schema=SCHEMA
    )


def ids_of(view: Any) -> list[int]:
    return sorted(view.read(T, columns=["id"]).column("id").to_pylist())


def no_duplicates(view: Any, where: str = "") -> None:
    dup = [k for k, n in Counter(ids_of(view)).items() if n > 1]
    assert not dup, f"{where}: keys {dup} live twice"


def enforced(lh: lakehouse.Lakehouse, space: range) -> None:
    """Every live key is refused on re-insert; every other key of ``space`` is
    accepted (in a transaction rolled back afterwards)."""
    live = set(ids_of(lh))
    for k in space:
        txn = lh.begin()
        try:
            if k in live:
                with pytest.raises(DuplicateKey, match=rf"id={k}\b"):
                    txn.append(T, rows([k], "again"))
            else:
                txn.append(T, rows([k], "again"))
                assert txn.read(T, where=f"id = {k}").num_rows == 1
        finally:
            txn.rollback()


@pytest.fixture(params=sorted(MODES))
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def lh(tmp_path: Path, mode: str) -> Iterator[lakehouse.Lakehouse]:
    with lakehouse.open(str(tmp_path / "lh")) as lh:
        with lh.begin() as txn:
            txn.create_namespace("s")
            txn.create_table(
                T, SCHEMA, {"compaction.auto": "false", **MODES[mode]}, primary_key=["id"]
            )
        lh.append(T, rows([1, 2, 3]))
        yield lh


# -- two transactions begun at one version -------------------------------------------------------
INSERTS: dict[str, Callable[[lakehouse.Transaction, int], object]] = {
    "append": lambda txn, k: txn.append(T, rows([k, 100 + k])),
    "merge": lambda txn, k: txn.merge(T, rows([k, 1])),
    "merge_on_name": lambda txn, k: txn.merge(T, rows([k]), on="name"),
    "update_key": lambda txn, k: txn.update(T, "id = 3", {"id": k}),
    "overwrite_where": lambda txn, k: txn.overwrite(T, rows([k]), where=f"id = {k}"),
}


@pytest.mark.parametrize("first", sorted(INSERTS))
@pytest.mark.parametrize("second", ["append", "merge", "update_key"])
def test_two_transactions_insert_one_key(lh: lakehouse.Lakehouse, first: str, second: str) -> None:
    k = 50
    v0 = lh.version
    a, b = lh.begin(), lh.begin()
    INSERTS[first](a, k)
    if second == "update_key" and first == "update_key":
        b.update(T, "id = 2", {"id": k})  # another row moved onto the same key
    else:
        INSERTS[second](b, k)
    a.commit()
    with pytest.raises(RetryableConflict):
        b.commit()
    assert lh.version == v0 + 1
    no_duplicates(lh, f"{first} then {second}")
    # re-run: the key is taken now (a merge re-run updates the row instead)
    with lh.begin() as txn:
        if second == "merge":
            assert txn.merge(T, rows([k], "again")).updated == 1
        else:
            with pytest.raises(DuplicateKey, match=rf"id={k}\b"):
                if second == "update_key":
                    txn.update(T, "id = 2", {"id": k})
                else:
                    INSERTS[second](txn, k)
    no_duplicates(lh, "after the re-run")


def test_merge_rerun_updates_instead(lh: lakehouse.Lakehouse) -> None:
    a, b = lh.begin(), lh.begin()
    a.merge(T, rows([60], "a"))
    b.merge(T, rows([60], "b"))
    a.commit()
    with pytest.raises(RetryableConflict):
        b.commit()
    with lh.begin() as txn:  # the re-run's merge finds the row now
        r = txn.merge(T, rows([60], "b"))
    assert (r.updated, r.inserted) == (1, 0)
    assert lh.read(T, where="id = 60").column("name").to_pylist() == ["b60"]
    no_duplicates(lh)


def test_disjoint_keys_both_commit(lh: lakehouse.Lakehouse) -> None:
    a, b = lh.begin(), lh.begin()
    a.append(T, rows([70]))
    b.merge(T, rows([71, 1], "m"))
    a.commit()
    b.commit()
    assert ids_of(lh) == [1, 2, 3, 70, 71]
    enforced(lh, range(0, 75))


def test_delete_and_reinsert_race(lh: lakehouse.Lakehouse) -> None:
    """One transaction deletes key 2, another inserts key 2 (refused: it is live
    at its begin version), a third deletes and re-inserts it; at most one row."""
    a, b = lh.begin(), lh.begin()
    a.delete(T, "id = 2")
    b.delete(T, "id = 2")
    b.append(T, rows([2], "b"))
    with pytest.raises(DuplicateKey):
        a.append(T, rows([2, 3]))
    a.commit()
    try:  # both deleted the same row: b may commit (deletes merge) or conflict
        b.commit()
    except RetryableConflict:
        pass
    no_duplicates(lh)
    if 2 not in ids_of(lh):
        lh.append(T, rows([2], "c"))
    enforced(lh, range(0, 5))


# -- threads --------------------------------------------------------------------------------
@pytest.mark.parametrize("round_", range(3))
@pytest.mark.parametrize("auto", [False, True], ids=["manual", "auto-compaction"])
def test_threads_never_leave_two_rows_with_one_key(
    tmp_path: Path, mode: str, auto: bool, round_: int
) -> None:
    space = range(12)
    compaction = {"compaction.min-files": "2"} if auto else {"compaction.auto": "false"}
    with lakehouse.open(str(tmp_path / "lh")) as lh:
        with lh.begin() as txn:
            txn.create_namespace("s")
            txn.create_table(T, SCHEMA, {**compaction, **MODES[mode]}, primary_key=["id"])
        versions: list[int] = []
        errors: list[BaseException] = []
        counts = Counter[str]()
        lock = threading.Lock()

        def worker(seed: int) -> None:
            rng = random.Random(seed)
            try:
                for _ in range(30):
                    op = rng.choice(["insert", "insert", "upsert", "delete", "move"])
                    ks = rng.sample(space, rng.randint(1, 3))
                    while True:
                        try:
                            with lh.begin() as txn:
                                if op == "insert":
                                    txn.append(T, rows(ks, f"t{seed}-"))
                                elif op == "upsert":
                                    txn.merge(T, rows(ks, f"u{seed}-"))
                                elif op == "delete":
                                    txn.delete(T, f"id IN ({', '.join(map(str, ks))})")
                                else:  # a key changes: update of one key onto another
                                    txn.update(T, f"id = {ks[0]}", {"id": rng.choice(space)})
                            v = txn.committed_version
                            with lock:
                                counts[op] += 1
                                if v is not None:
                                    versions.append(v)
                            if v is not None:  # (None: it changed nothing)
                                no_duplicates(lh.at_version(v), f"version {v}")
                            break
                        except RetryableConflict:
                            with lock:
                                counts["retry"] += 1
                        except DuplicateKey:
                            with lock:
                                counts["duplicate"] += 1
                            break
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(10 * round_ + s,)) for s in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors[0]
        # every committed version, in order, has unique keys
        for h in lh.history():
            try:
                view = lh.at_version(h.version)
                view.list_data_files(T)
            except lakehouse.LakehouseError:
                continue  # before the table
            no_duplicates(view, f"version {h.version}")
        assert counts["insert"] and counts["duplicate"] and counts["delete"]
        if auto:
            assert lh.wait_for_compaction(60)
            no_duplicates(lh, "after automatic compaction")
        enforced(lh, space)


# -- compaction alongside updates -----------------------------------------------------------------
def _setup_many(lh: lakehouse.Lakehouse) -> None:
    for i in range(5):
        lh.append(T, rows(list(range(10 + 10 * i, 20 + 10 * i))))
    lh.delete(T, "id % 4 = 0")


UPDATES: dict[str, Callable[[lakehouse.Transaction], object]] = {
    "move_keys": lambda txn: txn.update(T, "id IN (11, 21, 31)", {"id": "id + 1000"}),
    "delete": lambda txn: txn.delete(T, "id IN (13, 23, 33, 2)"),
    "upsert": lambda txn: txn.merge(T, rows([15, 25, 16, 500], "m")),
    "delete_reinsert": lambda txn: (
        txn.delete(T, "id IN (17, 27)"),
        txn.append(T, rows([17, 27], "re")),
    ),
    "value_update": lambda txn: txn.update(T, "id >= 40", {"qty": -1}),
}


@pytest.mark.parametrize("compaction_first", [True, False], ids=["compact-first", "update-first"])
@pytest.mark.parametrize("upd", sorted(UPDATES))
def test_explicit_compaction_alongside_an_update(
    lh: lakehouse.Lakehouse, upd: str, compaction_first: bool
) -> None:
    _setup_many(lh)
    c, u = lh.begin(), lh.begin()
    c.compact(T)
    UPDATES[upd](u)
    expect = sorted(u.read(T).to_pylist(), key=lambda r: r["id"])
    for txn in (c, u) if compaction_first else (u, c):
        txn.commit()
    got = sorted(lh.read(T).to_pylist(), key=lambda r: r["id"])
    assert got == expect
    no_duplicates(lh)
    enforced(lh, range(0, 1100, 1) if upd == "move_keys" else range(0, 600))
    # merges still find every live row
    live = ids_of(lh)
    r = lh.merge(T, pa.table({"id": live, "name": ["z"] * len(live)}))
    assert (r.updated, r.inserted) == (len(live), 0)


def test_automatic_compaction_alongside_updates(tmp_path: Path, mode: str) -> None:
    rng = random.Random(11)
    with lakehouse.open(str(tmp_path / "lh")) as lh:
        with lh.begin() as txn:
            txn.create_namespace("s")
            txn.create_table(
                T,
                SCHEMA,
                {"compaction.min-files": "2", "inline.flush_rows": "5", **MODES[mode]},
                primary_key=["id"],
            )
        live: set[int] = set()
        for step in range(40):
            new = rng.sample([k for k in range(200) if k not in live], 4)
            while True:
                try:
                    with lh.begin() as txn:
                        txn.append(T, rows(new))
                        if live:
                            gone = rng.sample(sorted(live), min(2, len(live)))
                            txn.delete(T, f"id IN ({', '.join(map(str, gone))})")
                            moved = rng.choice(sorted(live - set(gone)))
                            txn.update(T, f"id = {moved}", {"id": 1000 + step})
                        else:
                            gone, moved = [], None
                    break
                except RetryableConflict:  # a compaction never fails a writer; be sure
                    raise
            live |= set(new)
            live -= set(gone)
            if moved is not None:
                live = (live - {moved}) | {1000 + step}
            if step % 10 == 9:
                assert lh.wait_for_compaction(60)
                assert set(ids_of(lh)) == live
                no_duplicates(lh, f"step {step}")
        assert lh.wait_for_compaction(60)
        stats = lh.table_stats(T)
        assert stats.files <= 3 and stats.inlined_rows == 0  # compaction ran
        assert stats.rows == len(live)
        assert set(ids_of(lh)) == live
        enforced(lh, range(0, 1040))
        src = pa.table({"id": sorted(live), "name": ["z"] * len(live)})
        r = lh.merge(T, src)
        assert (r.updated, r.inserted) == (len(live), 0)


@pytest.mark.parametrize("alter_first", [True, False], ids=["alter-first", "append-first"])
def test_setting_a_key_alongside_an_insert(tmp_path: Path, alter_first: bool) -> None:
    """alter_table(primary_key=...) indexes the rows it saw: a concurrent insert of
    rows (here a duplicate key) and it never both commit."""
    with lakehouse.open(str(tmp_path / "lh")) as lh:
        with lh.begin() as txn:
            txn.create_namespace("s")
            txn.create_table(T, SCHEMA, {"compaction.auto": "false"})
        lh.append(T, rows([1, 2]))
        a, b = lh.begin(), lh.begin()
        a.alter_table(T, primary_key=["id"])
        b.append(T, rows([2]))
        first, second = (a, b) if alter_first else (b, a)
        first.commit()
        with pytest.raises(RetryableConflict):
            second.commit()
        if alter_first:
            assert ids_of(lh) == [1, 2] and lh.describe_table(T).primary_key == ("id",)
            enforced(lh, range(5))
        else:
            assert ids_of(lh) == [1, 2, 2] and lh.describe_table(T).primary_key == ()
            with pytest.raises(DuplicateKey, match=r"id=2\b"), lh.begin() as txn:  # re-run
                txn.alter_table(T, primary_key=["id"])
