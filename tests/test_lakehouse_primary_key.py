"""Enforced primary keys (issue 22): the key index and the checks built on it.

Every test runs with inlined rows (the default) and with Parquet rows
(``inline.max_rows = "0"``) where the storage of the rows can change the path.
Results of the key-index paths are compared with the same operation on an
unkeyed twin table, where they take the scan paths that predate the index.
"""

from __future__ import annotations

import datetime as dt
import decimal
import random
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakehouse
from lakehouse import DuplicateKey

pytest_plugins = ["spark_fixtures"]

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("qty", pa.int64()),
    ]
)
T = "s.t"
MODES = {"inline": {}, "parquet": {"inline.max_rows": "0"}}


def props(mode: str, **more: str) -> dict[str, str]:
    return {"compaction.auto": "false", **MODES[mode], **more}


def rows(ids: list[int], tag: str = "r") -> pa.Table:
    return pa.table(
        {"id": ids, "name": [f"{tag}{i}" for i in ids], "qty": [i * 10 for i in ids]},
        schema=SCHEMA,
    )


def content(view: Any, table: str = T) -> list[dict[str, Any]]:
    t = view.read(table)
    return sorted(t.to_pylist(), key=lambda r: tuple(str(r[c]) for c in t.column_names))


def ids_of(view: Any, table: str = T) -> list[int]:
    return sorted(view.read(table, columns=["id"]).column("id").to_pylist())


def parquet_on_disk(root: Path) -> set[str]:
    data = root / "data"
    return {str(p.relative_to(data)) for p in data.rglob("*.parquet")} if data.exists() else set()


def referenced(lh: lakehouse.Lakehouse, table: str = T) -> set[str]:
    """The data files any version of ``table`` references."""
    out: set[str] = set()
    for h in lh.history():
        try:
            files = lh.at_version(h.version).list_data_files(table)
            out |= {f.path for f in files if not f.path.endswith(".inline")}
        except lakehouse.LakehouseError:  # before the table existed
            pass
    return out


@pytest.fixture(params=sorted(MODES))
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "lh"


@pytest.fixture
def lh(root: Path, mode: str) -> Iterator[lakehouse.Lakehouse]:
    with lakehouse.open(str(root)) as lh:
        with lh.begin() as txn:
            txn.create_namespace("s")
            txn.create_table(T, SCHEMA, props(mode), primary_key=["id"])
        lh.append(T, rows([1, 2, 3, 4, 5]))
        yield lh


def assert_refused(lh: lakehouse.Lakehouse, key: int) -> None:
    with pytest.raises(DuplicateKey, match=rf"id={key}\b"):
        lh.append(T, rows([key], "dup"))


# -- duplicates within one write: refused, nothing written, the transaction goes on ---------
def _partitioned_lh(root: Path, mode: str) -> lakehouse.Lakehouse:
    lh = lakehouse.open(str(root))
    with lh.begin() as txn:
        txn.create_namespace("s")
        txn.create_table(T, SCHEMA, props(mode), primary_key=["id"], partition_by=["qty"])
    lh.append(T, rows([1, 2, 3, 4, 5]))
    return lh


DUP_WRITES: dict[str, Callable[[lakehouse.Transaction], object]] = {
    "append": lambda txn: txn.append(T, rows([7, 8, 7])),
    "overwrite": lambda txn: txn.overwrite(T, rows([1, 9, 9])),
    "overwrite_where": lambda txn: txn.overwrite(T, rows([2, 2]), where="id = 2"),
    "replace_partitions": lambda txn: txn.replace_partitions(
        T, pa.table({"id": [11, 11], "name": ["a", "b"], "qty": [10, 20]}, schema=SCHEMA)
    ),
    # merge on a non-key column: two inserted rows share a primary key
    "merge_insert": lambda txn: txn.merge(
        T, pa.table({"id": [20, 20], "name": ["x", "y"], "qty": [0, 0]}, schema=SCHEMA), on="name"
    ),
    # merge on a non-key column whose update gives a matched row another row's key
    "merge_update": lambda txn: txn.merge(
        T, pa.table({"id": [3], "name": ["r1"], "qty": [0]}, schema=SCHEMA), on="name"
    ),
    "update_to_constant": lambda txn: txn.update(T, "id >= 4", {"id": 100}),
    "update_onto_live": lambda txn: txn.update(T, "id = 1", {"id": 5}),
    "update_shift_collides": lambda txn: txn.update(T, "id <= 2", {"id": "id + 1"}),
}
DUP_KEYS = {
    "append": 7,
    "overwrite": 9,
    "overwrite_where": 2,
    "replace_partitions": 11,
    "merge_insert": 20,
    "merge_update": 3,
    "update_to_constant": 100,
    "update_onto_live": 5,
    "update_shift_collides": 3,
}


@pytest.mark.parametrize("op", sorted(DUP_WRITES))
@pytest.mark.parametrize("partitioned", [False, True], ids=["flat", "partitioned"])
def test_duplicate_in_one_write_is_refused_and_writes_nothing(
    root: Path, mode: str, op: str, partitioned: bool
) -> None:
    if partitioned:
        lh = _partitioned_lh(root, mode)
    else:
        lh = lakehouse.open(str(root))
        with lh.begin() as txn:
            txn.create_namespace("s")
            txn.create_table(T, SCHEMA, props(mode), primary_key=["id"])
        lh.append(T, rows([1, 2, 3, 4, 5]))
    with lh:
        before, v0 = content(lh), lh.version
        with lh.begin() as txn:
            txn.append(T, rows([50]))  # earlier work of the transaction
            seen = content(txn)
            with pytest.raises(DuplicateKey, match=rf"id={DUP_KEYS[op]}\b") as err:
                DUP_WRITES[op](txn)
            assert isinstance(err.value, ValueError)
            assert isinstance(err.value, lakehouse.LakehouseError)
            assert "s.t" in str(err.value)
            assert content(txn) == seen  # the failed write left nothing
            txn.append(T, rows([51]))  # and the transaction goes on
        assert lh.version == v0 + 1
        assert content(lh) == sorted(
            before + rows([50, 51]).to_pylist(), key=lambda r: tuple(str(v) for v in r.values())
        )
        # the failed write's files are gone; every file on disk is referenced
        assert parquet_on_disk(root) == referenced(lh)
        assert_refused(lh, 50)
        assert_refused(lh, 1)
        # the key of the refused write is still free (unless live)
        if DUP_KEYS[op] not in ids_of(lh):
            lh.append(T, rows([DUP_KEYS[op]]))
            assert_refused(lh, DUP_KEYS[op])


def test_failed_write_in_an_aborted_transaction_leaves_no_file(
    root: Path, lh: lakehouse.Lakehouse
) -> None:
    v0 = lh.version
    txn = lh.begin()
    txn.append(T, rows(list(range(100, 130))))
    with pytest.raises(DuplicateKey):
        txn.append(T, rows([*list(range(200, 230)), 3]))
    txn.rollback()
    assert lh.version == v0
    assert parquet_on_disk(root) == referenced(lh)
    lh.append(T, rows(list(range(200, 230))))  # none of them was indexed
    assert len(ids_of(lh)) == 35


def test_duplicate_against_the_table_and_the_transaction(lh: lakehouse.Lakehouse) -> None:
    assert_refused(lh, 3)
    with pytest.raises(DuplicateKey, match=r"id=4\b.*a live row already has it"):
        lh.append(T, rows([40, 4]))
    with lh.begin() as txn:
        txn.append(T, rows([60]))
        with pytest.raises(DuplicateKey, match=r"id=60\b"):
            txn.append(T, rows([60]))
        with pytest.raises(DuplicateKey, match=r"id=60\b"):
            txn.merge(T, rows([60, 61], "q"), on="name")  # no name matches: both inserted
        with pytest.raises(DuplicateKey, match=r"id=2\b"):
            txn.update(T, "id = 60", {"id": 2})
    assert ids_of(lh) == [1, 2, 3, 4, 5, 60]


def test_delete_then_insert_again(lh: lakehouse.Lakehouse) -> None:
    lh.delete(T, "id = 3")
    lh.append(T, rows([3], "again"))
    assert lh.read(T, where="id = 3").column("name").to_pylist() == ["again3"]
    assert_refused(lh, 3)
    with lh.begin() as txn:  # within one transaction too
        txn.delete(T, "id IN (1, 2)")
        txn.append(T, rows([1, 2], "b"))
        with pytest.raises(DuplicateKey):
            txn.append(T, rows([2]))
    assert ids_of(lh) == [1, 2, 3, 4, 5]
    lh.overwrite(T, rows([1, 2]))
    lh.append(T, rows([3, 4, 5]))  # overwritten away: free again
    assert_refused(lh, 5)


def test_update_not_changing_the_key_and_shifting_keys(lh: lakehouse.Lakehouse) -> None:
    assert lh.update(T, "id >= 2", {"qty": "qty + 1", "name": "'u'"}) == 4
    assert lh.update(T, "id = 1", {"id": 1, "name": "'same'"}) == 1
    assert_refused(lh, 2)
    assert lh.update(T, "TRUE", {"id": "id + 1"}) == 5  # every key moves onto the next one
    assert ids_of(lh) == [2, 3, 4, 5, 6]
    lh.append(T, rows([1]))
    assert_refused(lh, 6)
    with lh.begin() as txn:  # the rows of an update within the transaction are indexed too
        txn.update(T, "id = 6", {"id": 70})
        with pytest.raises(DuplicateKey, match=r"id=70\b"):
            txn.append(T, rows([70]))
        txn.append(T, rows([6]))
    assert ids_of(lh) == [1, 2, 3, 4, 5, 6, 70]


def test_update_and_delete_by_key(lh: lakehouse.Lakehouse) -> None:
    lh.append(T, rows(list(range(100, 200))))
    assert lh.update(T, "id = 150", {"name": "'k'"}) == 1
    assert lh.update(T, "id IN (1, 150, 999)", {"qty": 0}) == 2
    assert lh.update(T, "id = 150 AND qty = 7", {"qty": 1}) == 0
    assert lh.delete(T, "id IN (2, 151, 999)") == 2
    assert lh.delete(T, "id = 2") == 0
    got = {r["id"]: r for r in lh.read(T).to_pylist()}
    assert got[150] == {"id": 150, "name": "k", "qty": 0} and got[1]["qty"] == 0
    assert 2 not in got and 151 not in got and len(got) == 103
    lh.append(T, rows([2, 151]))
    assert_refused(lh, 150)


# -- merge without `on`: the index path equals the scan path ---------------------------------
def _twin(lh: lakehouse.Lakehouse, schema: pa.Schema, pk: list[str], mode: str, **kw: Any) -> None:
    with lh.begin() as txn:
        txn.create_namespace("s", if_not_exists=True)
        txn.create_table("s.k", schema, props(mode), primary_key=pk, **kw)
        txn.create_table("s.p", schema, props(mode), **kw)


def _random_merges(
    lh: lakehouse.Lakehouse,
    schema: pa.Schema,
    pk: list[str],
    make_key: Callable[[random.Random], tuple[Any, ...]],
    value: Callable[[random.Random, pa.Field], Any],
    seed: int,
    rounds: int = 12,
) -> None:
    rng = random.Random(seed)
    live: set[tuple[Any, ...]] = set()
    for rnd in range(rounds):
        n = rng.randint(1, 40)
        old = rng.sample(sorted(live, key=str), min(len(live), n // 2))
        new: set[tuple[Any, ...]] = set()
        while len(new) < n - len(old):
            k = make_key(rng)
            if k not in live:
                new.add(k)
        keys_ = old + sorted(new, key=str)
        rng.shuffle(keys_)
        others = [f for f in schema if f.name not in pk]
        if rnd and rng.random() < 0.5:  # a partial source: the target's values are read
            others = rng.sample(others, rng.randint(0, len(others)))
        cols = {n: [k[i] for k in keys_] for i, n in enumerate(pk)}
        for f in others:
            cols[f.name] = [value(rng, f) for _ in keys_]
        src = pa.table({n: pa.array(v, schema.field(n).type) for n, v in cols.items()})
        matched = rng.choice(["update", "update", "delete", "ignore"])
        if rnd == 0:
            matched = "update"
        not_matched = "insert" if rnd == 0 or rng.random() < 0.8 else "ignore"
        # a partial source inserts nulls: only nullable columns may be left out
        if not_matched == "insert" and any(not f.nullable for f in schema if f.name not in cols):
            not_matched = "ignore"
        with lh.begin() as txn:
            r1 = txn.merge("s.k", src, when_matched=matched, when_not_matched=not_matched)
            r2 = txn.merge("s.p", src, pk, when_matched=matched, when_not_matched=not_matched)
        assert r1 == r2, (seed, rnd)
        assert content(lh, "s.k") == content(lh, "s.p"), (seed, rnd, matched, not_matched)
        # and the change feed sees the same inserts, pre- and post-images, deletes
        feed = [sorted(map(str, lh.changes(t, lh.version).to_pylist())) for t in ("s.k", "s.p")]
        assert feed[0] == feed[1], (seed, rnd)
        live = {tuple(r[c] for c in pk) for r in lh.read("s.k", columns=pk).to_pylist()}
        if rnd % 4 == 3:  # the index keeps working across versions and within a transaction
            with lh.begin() as txn:
                txn.merge("s.k", src.slice(0, 1), when_not_matched="insert")
                txn.merge("s.p", src.slice(0, 1), pk, when_not_matched="insert")
                assert content(txn, "s.k") == content(txn, "s.p")
    assert live  # the sequence did something
    with pytest.raises(DuplicateKey):
        k = next(iter(live))
        lh.append("s.k", lh.read("s.k").filter(_eq(pk, k)))


def _eq(pk: list[str], key: tuple[Any, ...]) -> Any:
    import pyarrow.compute as pc

    expr = None
    for n, v in zip(pk, key, strict=True):
        e = pc.field(n) == v
        expr = e if expr is None else expr & e
    return expr


def _value(rng: random.Random, f: pa.Field) -> Any:
    if rng.random() < 0.15 and f.nullable:
        return None
    if pa.types.is_integer(f.type):
        return rng.randint(-1000, 1000)
    if pa.types.is_floating(f.type):
        return rng.random()
    return f"v{rng.randint(0, 99)}"


VALUE_SCHEMA = [
    pa.field("a", pa.string()),
    pa.field("b", pa.int64()),
    pa.field("c", pa.float64()),
]

KEY_KINDS: dict[str, tuple[list[pa.Field], Callable[[random.Random], tuple[Any, ...]]]] = {
    "int": ([pa.field("id", pa.int64(), nullable=False)], lambda r: (r.randint(-500, 500),)),
    "int32": ([pa.field("id", pa.int32(), nullable=False)], lambda r: (r.randint(-500, 500),)),
    "string": (
        [pa.field("id", pa.string(), nullable=False)],
        lambda r: ("".join(r.choice("ab\x00é/") for _ in range(r.randint(0, 4))),),
    ),
    "int_string": (
        [pa.field("k1", pa.int64(), nullable=False), pa.field("k2", pa.string(), nullable=False)],
        lambda r: (r.randint(0, 60), r.choice(["", "a", "a\x00", "ab", "b", "zz"])),
    ),
    "string_int": (
        [pa.field("k1", pa.string(), nullable=False), pa.field("k2", pa.int64(), nullable=False)],
        lambda r: (r.choice(["", "a", "a\x00", "ab", "b"]), r.randint(-30, 30)),
    ),
    "date": (
        [pa.field("id", pa.date32(), nullable=False)],
        lambda r: (dt.date(1960, 1, 1) + dt.timedelta(days=r.randint(0, 30000)),),
    ),
    "decimal": (
        [pa.field("id", pa.decimal128(12, 3), nullable=False)],
        lambda r: (decimal.Decimal(r.randint(-(10**6), 10**6)).scaleb(-3),),
    ),
    "timestamp": (
        [pa.field("id", pa.timestamp("us", tz="UTC"), nullable=False)],
        lambda r: (
            dt.datetime(1965, 1, 1, tzinfo=dt.UTC)
            + dt.timedelta(microseconds=r.randint(0, 10**15)),
        ),
    ),
    "bool_int": (
        [pa.field("k1", pa.bool_(), nullable=False), pa.field("k2", pa.int16(), nullable=False)],
        lambda r: (r.random() < 0.5, r.randint(-50, 50)),
    ),
}


@pytest.mark.parametrize("kind", sorted(KEY_KINDS))
def test_merge_without_on_equals_merge_by_scan(tmp_path: Path, mode: str, kind: str) -> None:
    fields, make_key = KEY_KINDS[kind]
    schema = pa.schema(fields + VALUE_SCHEMA)
    pk = [f.name for f in fields]
    with lakehouse.open(str(tmp_path / "lh")) as lh:
        _twin(lh, schema, pk, mode)
        _random_merges(lh, schema, pk, make_key, _value, seed=hash(kind) % 1000)


def test_merge_without_on_partitioned_and_compacted(tmp_path: Path, mode: str) -> None:
    fields, make_key = KEY_KINDS["int_string"]
    schema = pa.schema(fields + VALUE_SCHEMA)
    with lakehouse.open(str(tmp_path / "lh")) as lh:
        _twin(lh, schema, ["k1", "k2"], mode, partition_by=["k2"])
        _random_merges(lh, schema, ["k1", "k2"], make_key, _value, seed=5, rounds=6)
        with lh.begin() as txn:
            txn.compact("s.k")
            txn.compact("s.p")
        _random_merges_continue(lh, schema, ["k1", "k2"], make_key)


def _random_merges_continue(
    lh: lakehouse.Lakehouse, schema: pa.Schema, pk: list[str], make_key: Any
) -> None:
    """After compaction: merges of every live key (all matched) and new ones."""
    live = lh.read("s.k", columns=pk)
    src = live.append_column("a", pa.array(["after"] * live.num_rows))
    extra = pa.table({"k1": [100, 101], "k2": ["n", "n"], "a": ["new", "new"]})
    src = pa.concat_tables([src, extra.cast(src.schema)])
    with lh.begin() as txn:
        r1 = txn.merge("s.k", src)
        r2 = txn.merge("s.p", src, pk)
    assert r1 == r2 and r1.updated == live.num_rows and r1.inserted == 2
    assert content(lh, "s.k") == content(lh, "s.p")
    with pytest.raises(DuplicateKey, match=r"k1=100, k2='n'"):
        lh.append("s.k", extra)


def test_merge_without_on_needs_a_primary_key(lh: lakehouse.Lakehouse) -> None:
    with lh.begin() as txn:
        txn.create_table("s.plain", SCHEMA)
    with pytest.raises(ValueError, match=r"s\.plain has no primary key"):
        lh.merge("s.plain", rows([1]))


def test_merge_without_on_rejects_a_source_repeating_a_key(lh: lakehouse.Lakehouse) -> None:
    before = content(lh)
    with pytest.raises(ValueError, match="duplicate keys"):
        lh.merge(T, rows([9, 9]))
    assert content(lh) == before


def test_merge_without_on_within_a_transaction(lh: lakehouse.Lakehouse) -> None:
    with lh.begin() as txn:
        txn.append(T, rows([10, 11]))
        r = txn.merge(T, pa.table({"id": [10, 3, 12], "name": ["m", "m", "m"]}))
        assert (r.updated, r.inserted) == (2, 1)
        r = txn.merge(T, pa.table({"id": [10, 12]}), when_matched="delete")
        assert r.deleted == 2
        assert ids_of(txn) == [1, 2, 3, 4, 5, 11]
    got = {r["id"]: r for r in lh.read(T).to_pylist()}
    assert got[3] == {"id": 3, "name": "m", "qty": 30}
    assert sorted(got) == [1, 2, 3, 4, 5, 11]
    lh.append(T, rows([10, 12]))
    assert_refused(lh, 11)


# -- bad input -----------------------------------------------------------------------------
@pytest.mark.parametrize("t", [pa.float64(), pa.float32(), pa.float16()])
def test_float_keys_refused_at_create_and_alter(tmp_path: Path, t: pa.DataType) -> None:
    schema = pa.schema([pa.field("x", t, nullable=False), pa.field("id", pa.int64())])
    with lakehouse.open(str(tmp_path / "lh")) as lh:
        with lh.begin() as txn:
            txn.create_namespace("s")
        with pytest.raises(ValueError, match=r"primary key column 'x'.*floating"), lh.begin() as tx:
            tx.create_table(T, schema, primary_key=["x"])
        with pytest.raises(ValueError, match=r"'x'.*floating-point"), lh.begin() as txn:
            txn.create_table(T, schema, primary_key=["id", "x"])
        with lh.begin() as txn:
            txn.create_table(T, schema)
        lh.append(T, pa.table({"x": pa.array([1.0], t), "id": [1]}))
        v = lh.version
        with pytest.raises(ValueError, match=r"'x'.*floating-point"), lh.begin() as txn:
            txn.alter_table(T, primary_key=["x"])
        assert lh.version == v and lh.describe_table(T).primary_key == ()


def test_nested_key_refused(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("x", pa.list_(pa.int64())), pa.field("id", pa.int64())])
    with lakehouse.open(str(tmp_path / "lh")) as lh:
        with lh.begin() as txn:
            txn.create_namespace("s")
        with pytest.raises(ValueError, match=r"'x'"), lh.begin() as txn:
            txn.create_table(T, schema, primary_key=["x"])


def test_null_and_missing_key_columns(tmp_path: Path, mode: str) -> None:
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("k2", pa.string()), ("v", pa.int64())])
    with lakehouse.open(str(tmp_path / "lh")) as lh:
        with lh.begin() as txn:
            txn.create_namespace("s")
            txn.create_table(T, schema, props(mode), primary_key=["id", "k2"])
        lh.append(T, pa.table({"id": [1], "k2": ["a"], "v": [0]}))
        before = content(lh)
        with pytest.raises(ValueError, match=r"'k2'.*null") as err:
            lh.append(T, pa.table({"id": [2, 3], "k2": ["b", None], "v": [0, 0]}))
        assert not isinstance(err.value, DuplicateKey)
        with pytest.raises(ValueError, match=r"'id'"):
            lh.append(T, pa.table({"k2": ["c"], "v": [0]}))  # missing: would be null
        with pytest.raises(ValueError, match=r"'k2'"):
            lh.update(T, "id = 1", {"k2": None})
        with pytest.raises(ValueError, match=r"'id'"):
            lh.merge(T, pa.table({"id": pa.array([None], pa.int64()), "k2": ["x"]}))
        with pytest.raises(ValueError, match=r"'k2'"):
            lh.merge(T, pa.table({"id": [5], "v": [1]}))  # the source lacks a key column
        assert content(lh) == before
        lh.append(T, pa.table({"id": [1], "k2": ["b"], "v": [0]}))  # (1, 'b') is new


def test_missing_non_nullable_key_column(lh: lakehouse.Lakehouse) -> None:
    with pytest.raises(ValueError, match=r"'id'"):
        lh.append(T, pa.table({"name": ["x"]}))


# -- alter_table(primary_key=...) and renames ----------------------------------------------
def test_setting_a_primary_key(root: Path, mode: str) -> None:
    with lakehouse.open(str(root)) as lh:
        with lh.begin() as txn:
            txn.create_namespace("s")
            txn.create_table(T, SCHEMA, props(mode))
        lh.append(T, rows([1, 2, 3]))
        lh.append(T, rows([3, 4]))
        lh.delete(T, "id = 4")
        v, before = lh.version, content(lh)
        with pytest.raises(DuplicateKey, match=r"id=3\b"), lh.begin() as txn:
            txn.alter_table(T, primary_key=["id"])
        assert lh.version == v and content(lh) == before
        assert lh.describe_table(T).primary_key == ()
        lh.append(T, rows([3]))  # still no key: duplicates allowed
        lh.delete(T, "id = 3")
        lh.append(T, rows([3, 4]))
        with lh.begin() as txn:
            txn.alter_table(T, primary_key=["id"])
            with pytest.raises(DuplicateKey, match=r"id=4\b"):  # enforced at once
                txn.append(T, rows([4]))
        assert lh.describe_table(T).primary_key == ("id",)
        for k in (1, 2, 3, 4):
            assert_refused(lh, k)
        lh.append(T, rows([5]))
        r = lh.merge(T, rows([4, 6], "m"))
        assert (r.updated, r.inserted) == (1, 1)
        # another key: (name) is unique too; then back to id
        with lh.begin() as txn:
            txn.alter_table(T, primary_key=["name"])
        with pytest.raises(DuplicateKey, match=r"name='m4'"):
            lh.append(T, pa.table({"id": [77], "name": ["m4"]}))
        lh.append(T, rows([1], "other"))  # id is no longer the key
        with pytest.raises(DuplicateKey, match=r"id=1\b"), lh.begin() as txn:
            txn.alter_table(T, primary_key=["id"])
        lh.delete(T, "name = 'other1'")
        with lh.begin() as txn:
            txn.alter_table(T, primary_key=["id"])
        for k in (1, 2, 3, 4, 5, 6):
            assert_refused(lh, k)
        assert ids_of(lh) == [1, 2, 3, 4, 5, 6]
        with lh.begin() as txn:  # dropping the key
            txn.alter_table(T, primary_key=[])
        lh.append(T, rows([1]))
        assert ids_of(lh).count(1) == 2


def test_renaming_a_key_column_keeps_enforcement(lh: lakehouse.Lakehouse) -> None:
    with lh.begin() as txn:
        txn.alter_table(T, rename_columns={"id": "key"})
    assert lh.describe_table(T).primary_key == ("key",)
    with pytest.raises(DuplicateKey, match=r"key=3\b"):
        lh.append(T, pa.table({"key": [3], "name": ["x"]}))
    r = lh.merge(T, pa.table({"key": [3, 30], "name": ["m", "n"]}))
    assert (r.updated, r.inserted) == (1, 1)
    assert lh.read(T, where="key = 3").column("qty").to_pylist() == [30]
    with pytest.raises(DuplicateKey, match=r"key=30\b"):
        lh.append(T, pa.table({"key": [30]}))
    with lh.begin() as txn:  # widening another column keeps it too
        txn.alter_table(T, rename_columns={"key": "id"})
    assert_refused(lh, 30)


def test_widening_an_int32_key_keeps_enforcement(tmp_path: Path, mode: str) -> None:
    schema = pa.schema([pa.field("id", pa.int32(), nullable=False), pa.field("v", pa.string())])
    with lakehouse.open(str(tmp_path / "lh")) as lh:
        with lh.begin() as txn:
            txn.create_namespace("s")
            txn.create_table(T, schema, props(mode), primary_key=["id"])
        lh.append(T, pa.table({"id": pa.array([-1, 1, 2], pa.int32()), "v": ["a", "b", "c"]}))
        with lh.begin() as txn:
            txn.alter_table(
                T,
                schema=pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())]),
            )
        with pytest.raises(DuplicateKey, match=r"id=-1\b"):
            lh.append(T, pa.table({"id": [-1]}))
        r = lh.merge(T, pa.table({"id": [2, 2**40], "v": ["x", "y"]}))
        assert (r.updated, r.inserted) == (1, 1)


# -- versions: time travel, restore, rollback, clone, export ------------------------------
def test_time_travel_restore_and_rollback(lh: lakehouse.Lakehouse) -> None:
    v1 = lh.version  # 1..5 live, in their first files
    lh.delete(T, "id = 3")
    lh.append(T, rows([3], "second"))  # key 3 now lives elsewhere
    lh.update(T, "id = 4", {"id": 40})
    v2 = lh.version
    lh.delete(T, "id IN (1, 2, 3)")
    lh.append(T, rows([1], "third"))
    v3 = lh.version
    # reading old versions
    assert ids_of(lh.at_version(v1)) == [1, 2, 3, 4, 5]
    assert ids_of(lh.at_version(v2)) == [1, 2, 3, 5, 40]
    assert ids_of(lh.at_version(v3)) == [1, 5, 40]
    # restore to v1: 3 and 4 live again (from their first files), 40 gone
    with lh.begin() as txn:
        txn.restore_table(T, v1)
        with pytest.raises(DuplicateKey, match=r"id=3\b"):
            txn.append(T, rows([3]))
    assert content(lh) == content(lh.at_version(v1))
    for k in (1, 2, 3, 4, 5):
        assert_refused(lh, k)
    lh.append(T, rows([40]))
    r = lh.merge(T, rows([3, 4], "m"))
    assert (r.updated, r.inserted) == (2, 0)
    v4 = lh.version
    # rollback to v2, then to v3
    lh.rollback(v2)
    assert content(lh) == content(lh.at_version(v2))
    for k in (1, 2, 3, 5, 40):
        assert_refused(lh, k)
    lh.append(T, rows([4]))
    lh.rollback(v3)
    for k in (1, 5, 40):
        assert_refused(lh, k)
    lh.append(T, rows([2, 3, 4]))
    lh.rollback(v4)
    assert ids_of(lh) == [1, 2, 3, 4, 5, 40]
    for k in (1, 2, 3, 4, 5, 40):
        assert_refused(lh, k)
    assert lh.merge(T, rows([3], "n")).updated == 1


def test_restore_after_compaction(lh: lakehouse.Lakehouse) -> None:
    v1 = lh.version
    lh.append(T, rows([6, 7]))
    lh.delete(T, "id = 2")
    with lh.begin() as txn:
        txn.compact(T)
    lh.append(T, rows([2]))
    with lh.begin() as txn:
        txn.restore_table(T, v1)
    for k in (1, 2, 3, 4, 5):
        assert_refused(lh, k)
    lh.append(T, rows([6, 7]))
    assert ids_of(lh) == [1, 2, 3, 4, 5, 6, 7]


def test_clone_is_enforced_on_its_own(lh: lakehouse.Lakehouse) -> None:
    v = lh.version
    lh.delete(T, "id = 5")
    with lh.begin() as txn:
        txn.clone_table(T, "s.c")
        txn.clone_table(T, "s.old", version=v)
    assert lh.describe_table("s.c").primary_key == ("id",)
    with pytest.raises(DuplicateKey, match=r"id=4\b"):
        lh.append("s.c", rows([4]))
    with pytest.raises(DuplicateKey, match=r"id=5\b"):
        lh.append("s.old", rows([5]))
    lh.append("s.c", rows([5, 9]))
    lh.append(T, rows([9]))  # independent of the clone
    lh.delete("s.c", "id = 1")
    assert_refused(lh, 1)
    lh.append("s.c", rows([1]))
    assert lh.merge("s.c", rows([2, 10])).inserted == 1
    assert ids_of(lh, "s.c") == [1, 2, 3, 4, 5, 9, 10]
    assert ids_of(lh) == [1, 2, 3, 4, 9]


def test_export_keeps_the_index(lh: lakehouse.Lakehouse, tmp_path: Path) -> None:
    lh.delete(T, "id = 2")
    lh.append(T, rows([2, 6], "x"))
    lh.update(T, "id = 6", {"id": 60})
    dest = tmp_path / "exported"
    lh.export(str(dest))
    with lakehouse.open(str(dest)) as ex:
        assert content(ex) == content(lh)
        for k in (1, 2, 3, 4, 5, 60):
            assert_refused(ex, k)
        ex.append(T, rows([6]))
        r = ex.merge(T, rows([2, 7], "m"))
        assert (r.updated, r.inserted) == (1, 1)
        assert ex.read(T, where="id = 2").column("name").to_pylist() == ["m2"]


# -- compaction -------------------------------------------------------------------------------
def test_compaction_keeps_enforcement_and_merges(lh: lakehouse.Lakehouse) -> None:
    for i in range(4):
        lh.append(T, rows(list(range(100 + 10 * i, 110 + 10 * i))))
    lh.delete(T, "id % 3 = 0")
    lh.update(T, "id = 101", {"id": 1001})
    with lh.begin() as txn:
        res = txn.compact(T)
    assert res is not None
    assert lh.table_stats(T).inlined_rows == 0
    live = ids_of(lh)
    for k in live:
        assert_refused(lh, k)
    gone = [k for k in range(100, 140) if k not in live]
    lh.append(T, rows(gone))  # every deleted key is free again
    src = pa.table({"id": [*live, 5000], "name": ["m"] * (len(live) + 1)})
    r = lh.merge(T, src)
    assert (r.updated, r.inserted) == (len(live), 1)
    assert len(ids_of(lh)) == len(live) + len(gone) + 1
    # a compaction within the transaction that wrote the rows
    with lh.begin() as txn:
        txn.append(T, rows([7000, 7001]))
        txn.compact(T)
        with pytest.raises(DuplicateKey):
            txn.append(T, rows([7001]))
        assert txn.merge(T, pa.table({"id": [7000], "name": ["z"]})).updated == 1
    assert lh.read(T, where="id = 7000").column("name").to_pylist() == ["z"]


# -- the index finds rows without reading the table ------------------------------------------
def test_merge_by_key_on_a_large_table_reads_no_target_file(root: Path) -> None:
    n, batch = 200_000, 50_000
    with lakehouse.open(str(root)) as lh:
        with lh.begin() as txn:
            txn.create_namespace("s")
            txn.create_table(T, SCHEMA, props("parquet"), primary_key=["id"])
        for start in range(0, n, batch):
            lh.append(T, rows(list(range(start, start + batch))))
        files = [f.path for f in lh.list_data_files(T)]
        assert len(files) == n // batch
        rng = random.Random(7)
        keys_ = rng.sample(range(n), 1000)
        src = pa.table(
            {"id": keys_ + list(range(n, n + 10)), "name": ["m"] * 1010, "qty": [-1] * 1010},
            schema=SCHEMA,
        )
        # the target's files are out of reach: a merge reading one of them fails
        hidden = root.parent / "hidden"
        hidden.mkdir()
        for p in files:
            shutil.move(root / "data" / p, hidden / p.replace("/", "_"))
        try:
            r = lh.merge(T, src)
            assert (r.updated, r.inserted) == (1000, 10)
            with pytest.raises(DuplicateKey, match=rf"id={keys_[1]}\b"):
                lh.append(T, rows([n + 20, keys_[1]]))
        finally:
            for p in files:
                shutil.move(hidden / p.replace("/", "_"), root / "data" / p)
        assert lh.delete(T, f"id IN ({keys_[0]}, {n + 1})") == 2
        assert lh.table_stats(T).rows == n + 10 - 2
        got = lh.read(T, where="qty = -1", columns=["id"]).column("id").to_pylist()
        assert sorted(got) == sorted(set(keys_[1:]) | set(range(n, n + 10)) - {n + 1})
        with pytest.raises(DuplicateKey):
            lh.append(T, rows([keys_[2]]))
        lh.append(T, rows([keys_[0]]))


# -- files written by someone else (Spark executors): add_files ------------------------------
def _external(root: Path, lh: lakehouse.Lakehouse, table: str, name: str, t: pa.Table) -> str:
    import pyarrow.parquet as pq

    table_dir = lh.list_data_files(table)[0].path.split("/")[0]
    (root / "data" / table_dir).mkdir(parents=True, exist_ok=True)
    pq.write_table(t, root / "data" / table_dir / name)
    return f"{table_dir}/{name}"


def zero(ids: list[int]) -> pa.Table:
    """Rows with ``qty`` 0 (one partition of the tables partitioned by qty)."""
    return rows(ids).set_column(2, "qty", pa.array([0] * len(ids), pa.int64()))


@pytest.mark.parametrize("partitioned", [False, True], ids=["flat", "partitioned"])
def test_adopted_files_are_checked_and_indexed(root: Path, partitioned: bool) -> None:
    lh = _partitioned_lh(root, "parquet") if partitioned else lakehouse.open(str(root))
    if not partitioned:
        with lh.begin() as txn:
            txn.create_namespace("s")
            txn.create_table(T, SCHEMA, props("parquet"), primary_key=["id"])
        lh.append(T, rows([1, 2, 3, 4, 5]))
    with lh:
        before = content(lh)
        dup = _external(root, lh, T, "dup.parquet", zero([8, 3]))
        with lh.begin() as txn:
            with pytest.raises(DuplicateKey, match=r"id=3\b"):
                txn.add_files(T, [dup])
            assert content(txn) == before
        twice = [_external(root, lh, T, f"twice{i}.parquet", zero([9, 10 + i])) for i in (0, 1)]
        with pytest.raises(DuplicateKey, match=r"id=9\b"), lh.begin() as txn:
            txn.add_files(T, twice)
        assert content(lh) == before
        ok = _external(root, lh, T, "ok.parquet", zero([20, 21]))
        with lh.begin() as txn:
            assert txn.add_files(T, [ok]) == 2
        assert_refused(lh, 21)
        assert lh.merge(T, rows([20], "m")).updated == 1
        # files replacing the rows they re-key (Spark's replace_partitions / overwrite)
        same = rows([1, 2], "new") if not partitioned else rows([1], "new")
        again = _external(root, lh, T, "again.parquet", same)
        with lh.begin() as txn:
            txn.add_files(T, [again], replace_partitions=True)
        assert lh.read(T, where="id = 1").column("name").to_pylist() == ["new1"]
        assert ids_of(lh) == ([1, 2, 3, 4, 5, 20, 21] if partitioned else [1, 2])
        assert_refused(lh, 1)
        lh.append(T, zero([100]))


@pytest.mark.spark
@pytest.mark.parametrize("mode", sorted(MODES))
def test_spark_writes_to_a_keyed_table(spark: Any, root: Path, mode: str) -> None:
    """Spark's overwrite and replace_partitions may re-write the keys of the rows they
    replace; its appends and merges are held to the key like the lakehouse's own."""
    from lakehouse.spark.ops import write

    def df(ids: list[int], tag: str, qty: int = 0) -> Any:
        return spark.createDataFrame(
            [(i, f"{tag}{i}", qty) for i in ids], "id long, name string, qty long"
        ).repartition(2)

    with lakehouse.open(str(root)) as lh:
        with lh.begin() as txn:
            txn.create_namespace("s")
            txn.create_table(T, SCHEMA, props(mode), primary_key=["id"])
            txn.create_table("s.p", SCHEMA, props(mode), primary_key=["id"], partition_by=["qty"])
        lh.append(T, rows([1, 2, 3]))
        lh.append("s.p", zero([1, 2, 3]))
        write(lh, df(list(range(1, 500)), "o"), T, mode="overwrite")
        assert ids_of(lh) == list(range(1, 500))
        write(lh, df([1, 2], "s"), T, mode="overwrite")  # small: inlined, or not
        assert ids_of(lh) == [1, 2]
        with pytest.raises(DuplicateKey, match=r"id=2\b"):
            write(lh, df([5, 2], "a"), T)
        assert ids_of(lh) == [1, 2]
        write(lh, df([2, 7], "w"), T, mode="overwrite", where="id >= 2")
        assert ids_of(lh) == [1, 2, 7]
        write(lh, df([1, 2, 9], "r"), "s.p", mode="replace_partitions")
        assert ids_of(lh, "s.p") == [1, 2, 9]
        with pytest.raises(DuplicateKey, match=r"id=9\b"):
            write(lh, df([9], "q", qty=1), "s.p")  # another partition, a live key
        assert_refused(lh, 7)


# -- a seeded serial replay against a model ---------------------------------------------------
@pytest.mark.parametrize("seed", range(6))
def test_random_operations_match_a_model(tmp_path: Path, mode: str, seed: int) -> None:
    """Random appends, merges without on, key-changing updates, deletes, overwrites by
    key, compactions, restores and rollbacks against a dict model: after every step
    the table equals the model, a live key is refused and a free key accepted."""
    rng = random.Random(seed)
    space = list(range(60))
    with lakehouse.open(str(tmp_path / "lh")) as lh:
        with lh.begin() as txn:
            txn.create_namespace("s")
            txn.create_table(T, SCHEMA, props(mode), primary_key=["id"])
        model: dict[int, tuple[str, int]] = {}
        history: dict[int, dict[int, tuple[str, int]]] = {lh.version: {}}

        def rows_of(ids: list[int], tag: str) -> pa.Table:
            return pa.table(
                {"id": ids, "name": [f"{tag}{i}" for i in ids], "qty": [len(tag) + i for i in ids]},
                schema=SCHEMA,
            )

        for step in range(45):
            op = rng.choice(
                [
                    "append",
                    "append",
                    "merge",
                    "merge",
                    "update",
                    "delete",
                    "overwrite",
                    "compact",
                    "restore",
                    "rollback",
                ]
            )
            free = [k for k in space if k not in model]
            live = sorted(model)
            tag = f"s{step}-"
            expect = dict(model)
            dup = False
            call: tuple[str, tuple[Any, ...], dict[str, Any]] | None = None
            if op == "append":
                ks = rng.sample(free, min(len(free), rng.randint(1, 6)))
                if live and rng.random() < 0.3:
                    ks.append(rng.choice(live))
                    dup = True
                for k in ks:
                    expect[k] = (f"{tag}{k}", len(tag) + k)
                call = ("append", (T, rows_of(ks, tag)), {})
            elif op == "merge":
                ks = rng.sample(space, rng.randint(1, 8))
                for k in ks:
                    expect[k] = (f"{tag}{k}", len(tag) + k)
                call = ("merge", (T, rows_of(ks, tag)), {})
            elif op == "update" and live:
                a = rng.choice(live)
                b = rng.choice(space)
                dup = b != a and b in model
                expect.pop(a)
                expect[b] = model[a]
                call = ("update", (T, f"id = {a}", {"id": b}), {})
            elif op == "delete" and live:
                ks = rng.sample(live, min(len(live), rng.randint(1, 4)))
                for k in ks:
                    expect.pop(k)
                call = ("delete", (T, f"id IN ({', '.join(map(str, ks))})"), {})
            elif op == "overwrite":
                k = rng.choice(space)
                expect[k] = (f"{tag}{k}", len(tag) + k)
                call = ("overwrite", (T, rows_of([k], tag)), {"where": f"id = {k}"})
            elif op == "compact":
                call = ("compact", (T,), {})
            elif op == "restore":
                v = rng.choice(sorted(history))
                expect = dict(history[v])
                call = ("restore_table", (T, v), {})
            elif op == "rollback":
                v = rng.choice(sorted(history))
                lh.rollback(v)
                model = dict(history[v])
                history[lh.version] = dict(model)
            else:
                continue
            if call is not None:
                name, args, kwargs = call
                if dup:
                    with pytest.raises(DuplicateKey), lh.begin() as txn:
                        getattr(txn, name)(*args, **kwargs)
                else:
                    with lh.begin() as txn:
                        getattr(txn, name)(*args, **kwargs)
                    model = expect
                    history[lh.version] = dict(model)
            got = {r["id"]: (r["name"], r["qty"]) for r in lh.read(T).to_pylist()}
            assert lh.table_stats(T).rows == len(got) == len(model), (seed, step, op)
            assert got == model, (seed, step, op)
            if model:
                assert_refused(lh, rng.choice(sorted(model)))
            free = [k for k in space if k not in model]
            if free:
                txn = lh.begin()
                txn.append(T, rows([rng.choice(free)]))
                txn.rollback()
        assert len(history) > 20 and any(history.values())  # it did something


def test_a_key_too_long_for_the_index_is_refused_naming_the_key(lh: lakehouse.Lakehouse) -> None:
    with lh.begin() as txn:
        txn.create_table(
            "s.w",
            pa.schema([pa.field("id", pa.string(), nullable=False), ("v", pa.int64())]),
            primary_key=["id"],
        )
    lh.append("s.w", pa.table({"id": ["a" * 60_000], "v": [1]}))
    with pytest.raises(ValueError, match=r"primary key \(id\) of s\.w: row 1 .*at most") as err:
        lh.append("s.w", pa.table({"id": ["b", "c" * 70_000], "v": [1, 2]}))
    assert not isinstance(err.value, DuplicateKey)
    with pytest.raises(ValueError, match=r"primary key \(id\) of s\.w"):
        lh.merge("s.w", pa.table({"id": ["c" * 70_000]}))
    assert lh.read("s.w", columns=["v"]).column("v").to_pylist() == [1]
    with pytest.raises(DuplicateKey):
        lh.append("s.w", pa.table({"id": ["a" * 60_000]}))


@pytest.mark.spark
def test_spark_merge_without_on(spark: Any, root: Path) -> None:
    from lakehouse.spark.merge import merge

    with lakehouse.open(str(root)) as lh:
        with lh.begin() as txn:
            txn.create_namespace("s")
            txn.create_table(T, SCHEMA, props("parquet"), primary_key=["id"])
            txn.create_table("s.p", SCHEMA, props("parquet"))
        base = rows(list(range(0, 400, 2)))
        lh.append(T, base)
        lh.append("s.p", base)
        src = [(i, f"m{i}") for i in range(0, 600, 3)]
        r1 = merge(lh, spark.createDataFrame(src, "id long, name string"), T)
        r2 = lh.merge(
            "s.p", pa.table({"id": [i for i, _ in src], "name": [n for _, n in src]}), "id"
        )
        assert r1 == r2
        assert content(lh) == content(lh, "s.p")
        assert_refused(lh, 3)
        assert_refused(lh, 4)
        lh.append(T, rows([5]))
