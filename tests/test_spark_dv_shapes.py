"""``lakehouse.spark.read`` returns exactly the live rows, whatever the deletion vectors.

The reader may treat each data file by the shape of its deletion vector (none,
a few deleted ranges, many scattered positions; see lakehouse/spark/reader.py);
these tests know nothing of how, only what comes back. Every table is built by
the Python API with a model of its rows kept beside it (every row written and
which of them are live, per data file and position), and each Spark read is
compared, all columns, with that model (an independent pyarrow filter of the
rows written) and with ``lh.read`` (the Python reader).

Files hold up to 140k rows so a file spans several 32k- and 64k-row buckets;
tables have 2-6 files. Automatic compaction is off (it would rewrite the files with
deletions and so the shapes). One SparkSession per run (tests/spark_fixtures.py);
tables that are only read are built once per module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import lakehouse

pytest.importorskip("pyspark", reason="pyspark is not installed (the spark extra)")

import lakehouse.spark as lhs

pytest_plugins = ["spark_fixtures"]
pytestmark = pytest.mark.spark

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("g", pa.int32()),
        ("s", pa.string()),
        ("x", pa.float64()),
    ]
)
NOAUTO = {"compaction.auto": "false"}
#: every write makes a Parquet file (no inlined rows)
PARQUET = {"inline.max_rows": "0", **NOAUTO}
N = 70_000  # rows per file: three 32k buckets, the last one partial
BUCKET = 32_768
#: positions around the edges of 32k- and 64k-row buckets and 64-bit words (files
#: of 2 * N rows hold them all)
EDGES = [
    0,
    1,
    63,
    64,
    127,
    128,
    *(k * BUCKET + d for k in (1, 2, 3, 4) for d in (-1, 0)),
    2 * N - 1,
]


def rows(start: int, n: int, *, s: str = "s", names: dict[str, str] | None = None) -> pa.Table:
    """Rows with ids ``start .. start+n-1`` (nulls in ``x`` every 11th row)."""
    ids = np.arange(start, start + n, dtype=np.int64)
    x = pa.array(ids * 0.5, mask=(ids % 11 == 0))
    label = pc.binary_join_element_wise(s, pc.cast(pa.array(ids % 997), pa.string()), "")
    t = pa.table(
        {"id": ids, "g": pa.array(ids % 13, pa.int32()), "s": label, "x": x}, schema=SCHEMA
    )
    return t.rename_columns([(names or {}).get(c, c) for c in t.column_names])


Mask = Callable[[pa.Table], np.ndarray]


def between(a: int, b: int) -> tuple[str, Mask]:
    """A delete condition for the lakehouse and the same rows for the model."""

    def mask(t: pa.Table) -> np.ndarray:
        ids = t.column("id").to_numpy()
        hit: np.ndarray = (ids >= a) & (ids <= b)
        return hit

    return f"id BETWEEN {a} AND {b}", mask


def modulo(m: int) -> tuple[str, Mask]:
    def mask(t: pa.Table) -> np.ndarray:
        hit: np.ndarray = t.column("id").to_numpy() % m == 0
        return hit

    return f"id % {m} = 0", mask


class Model:
    """A table and what it should hold: per data file (one per append) the rows
    written, under the table's current column names, and which are live."""

    def __init__(self, lh: Any, name: str) -> None:
        self.lh, self.name = lh, name
        self.parts: list[pa.Table] = []
        self.alive: list[np.ndarray] = []
        self.paths: list[str] = []

    def _paths(self) -> set[str]:
        return {f.path for f in self.lh.list_data_files(self.name)}

    def append(self, t: pa.Table, *, stored_as: pa.Table | None = None) -> int:
        """Append ``t`` (written as ``stored_as``: old column names) as one data
        file; returns its index."""
        before = self._paths()
        with self.lh.begin() as txn:
            assert txn.append(self.name, t if stored_as is None else stored_as) == t.num_rows
        new = self._paths() - before
        assert len(new) == 1, f"one append made {len(new)} files"
        return self.adopt(t, new.pop())

    def adopt(self, t: pa.Table, path: str) -> int:
        self.parts.append(t)
        self.alive.append(np.ones(t.num_rows, dtype=bool))
        self.paths.append(path)
        return len(self.parts) - 1

    def delete_at(self, part: int, positions: Any) -> None:
        """Mark positions of one file deleted (``txn.delete_rows``)."""
        pos = np.unique(np.asarray(positions, dtype=np.int64))
        want = int(self.alive[part][pos].sum())
        with self.lh.begin() as txn:
            assert txn.delete_rows(self.name, {self.paths[part]: pos.tolist()}) == want
        self.alive[part][pos] = False

    def delete(self, cond: tuple[str, Mask]) -> None:
        """``txn.delete`` with a SQL condition; the model applies the same mask."""
        sql, mask = cond
        hits = [mask(t) for t in self.parts]
        with self.lh.begin() as txn:
            n = txn.delete(self.name, sql)
        assert n == self.kill(hits), sql

    def kill(self, hits: list[np.ndarray]) -> int:
        """Mark the rows of ``hits`` (a mask per file) deleted; returns how many were live."""
        n = 0
        for i, h in enumerate(hits):
            n += int((self.alive[i] & h).sum())
            self.alive[i] &= ~h
        return n

    def live(self) -> pa.Table:
        parts = [t.filter(pa.array(a)) for t, a in zip(self.parts, self.alive)]
        return pa.concat_tables(parts, promote_options="default")


def assert_rows(got: pa.Table, want: pa.Table, what: str) -> None:
    """``got`` holds exactly ``want``'s rows (any order; ids unique or whole rows
    repeated), every column compared."""
    want = want.sort_by("id")
    got = got.select(want.column_names).sort_by("id")
    g, w = got.column("id").to_numpy(), want.column("id").to_numpy()
    if not np.array_equal(g, w):
        missing, extra = np.setdiff1d(w, g), np.setdiff1d(g, w)
        raise AssertionError(
            f"{what}: {got.num_rows} rows, want {want.num_rows}; {len(missing)} ids missing "
            f"(first {missing[:8].tolist()}), {len(extra)} extra (first {extra[:8].tolist()})"
        )
    for name in want.column_names[1:]:
        a, b = got.column(name).combine_chunks(), want.column(name).combine_chunks()
        if a.type != b.type:
            a = a.cast(b.type)
        if not a.equals(b):
            bad = next(i for i, (u, v) in enumerate(zip(a.to_pylist(), b.to_pylist())) if u != v)
            raise AssertionError(
                f"{what}: column {name} differs first at id {w[bad]}: "
                f"{a[bad].as_py()!r} != {b[bad].as_py()!r}"
            )


def check(
    spark: Any, m: Model, *, version: int | None = None, want: pa.Table | None = None
) -> None:
    """Spark's rows == the model's == the Python reader's, plus a filtered count
    (column pruning and filter pushdown through whatever drops deleted rows)."""
    want = m.live() if want is None else want
    view = m.lh if version is None else m.lh.at_version(version)
    frame = lhs.read(m.lh, spark, m.name, version=version)
    assert_rows(frame.toArrow(), want, f"spark read of {m.name} (version {version})")
    assert_rows(view.read(m.name), want, f"python read of {m.name} (version {version})")
    g3 = int(pc.sum(pc.equal(want.column("g"), 3)).as_py() or 0)
    assert frame.where("g = 3").count() == g3


# -- tables that are only read: built once ----------------------------------------------------
@pytest.fixture(scope="module")
def lh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    h = lakehouse.open(str(tmp_path_factory.mktemp("dv") / "lh"), kv_options={"fsync": False})
    with h.begin() as txn:
        txn.create_namespace("ns")
    yield h
    h.close()


def model(lh: Any, name: str, props: dict[str, str] = PARQUET, **kw: Any) -> Model:
    with lh.begin() as txn:
        txn.create_table(f"ns.{name}", SCHEMA, props, **kw)
    return Model(lh, f"ns.{name}")


def files(m: Model, count: int, n: int = N, start: int = 0) -> list[int]:
    return [m.append(rows(start + i * n, n)) for i in range(count)]


def clustered(m: Model, a: pa.Table, b: pa.Table) -> int:
    """The first file of a table with sort keys: ``a`` and ``b`` (ids ascending)
    appended and compacted into one clustered file of several row groups."""
    with m.lh.begin() as txn:
        txn.append(m.name, a)
        txn.append(m.name, b)
    with m.lh.begin() as txn:
        txn.compact(m.name)
    (only,) = m.lh.list_data_files(m.name)
    base = m.lh.data_location()[0][len("file://") :]
    assert pq.ParquetFile(f"{base}/{only.path}").num_row_groups > 1
    return m.adopt(pa.concat_tables([a, b]), only.path)


@pytest.fixture(scope="module")
def shapes(lh: Any) -> dict[str, Model]:
    """One table per shape, every file of it of that shape."""
    rng = np.random.default_rng(25)
    out = {}

    m = out["none"] = model(lh, "none")
    files(m, 3, n=30_000)

    m = out["single"] = model(lh, "single")
    f = files(m, 3, n=30_000)
    m.delete_at(f[0], [0])  # first row of a file
    m.delete_at(f[1], [29_999])  # last
    m.delete_at(f[2], [15_000])  # middle

    m = out["ranges"] = model(lh, "ranges")
    files(m, 4)
    m.delete(between(100, 199))  # inside a bucket
    m.delete(between(BUCKET - 10, BUCKET + 10))  # across a bucket edge
    m.delete(between(N - 50, N + 49))  # end of one file, start of the next
    m.delete(between(2 * N + 5_000, 2 * N + 40_000))  # a long one over several buckets
    m.delete(between(3 * N + 69_000, 3 * N + 69_999))  # the tail of the last file
    m.delete(between(150, 160))  # inside a range already deleted (no new rows)

    m = out["many_ranges"] = model(lh, "many_ranges")
    f = files(m, 3)
    starts = np.sort(rng.choice(N // 500, 40, replace=False)) * 500  # 40 runs of 1..400 rows
    m.delete_at(f[0], np.concatenate([np.arange(a, a + rng.integers(1, 400)) for a in starts]))
    m.delete_at(f[1], np.arange(0, 31 * 2_000, 2_000))  # 31 single rows

    m = out["scattered"] = model(lh, "scattered")
    f = [*files(m, 3), m.append(rows(3 * N, 2 * N)), *files(m, 1, start=5 * N)]
    m.delete_at(f[0], np.arange(0, N, 7))  # every 7th row
    m.delete_at(f[1], rng.choice(N, N // 2, replace=False))  # random 50%
    m.delete_at(f[2], rng.choice(N, N * 99 // 100, replace=False))  # random 99%
    # random 10% and every bucket edge (32k and 64k buckets, 64-bit words)
    m.delete_at(f[3], np.r_[rng.choice(2 * N, 2 * N // 10, replace=False), EDGES])
    # only the first and the last bit of every 64-bit word
    m.delete_at(f[4], np.flatnonzero(np.isin(np.arange(N) % 64, (0, 63))))

    m = out["edges"] = model(lh, "edges")
    f = [*files(m, 3), m.append(rows(3 * N, 2 * N)), *files(m, 1, n=10_000, start=5 * N)]
    m.delete_at(f[0], np.delete(np.arange(N), 40_000))  # all but one row
    m.delete_at(f[1], np.arange(N))  # every row
    m.delete_at(f[2], [N - 1])  # the last row alone
    m.delete_at(f[3], EDGES)  # bucket edges, a few runs
    # f[4]: no deletions
    return out


@pytest.mark.parametrize("shape", ["none", "single", "ranges", "many_ranges", "scattered", "edges"])
def test_one_shape_per_table(spark: Any, shapes: Any, shape: Any) -> None:
    check(spark, shapes[shape])


def test_files_of_every_shape_in_one_table(spark: Any, lh: Any) -> None:
    """Files without deletions, with ranges, scattered, a single row, ranges and
    scattered rows in one file, and a file of several row groups (a clustered
    compaction's), all in one table."""
    rng = np.random.default_rng(7)
    m = model(lh, "mixed", sort_keys=["id"])
    big = clustered(m, rows(0, 40_000), rows(40_000, 40_000))
    f = [big, *files(m, 5, n=50_000, start=100_000)]
    # f[1], f[2]: none
    m.delete(between(100_000 + 3 * 50_000 + 10, 100_000 + 3 * 50_000 + 20_000))  # f[4] range
    m.delete_at(f[3], rng.choice(50_000, 20_000, replace=False))  # scattered
    m.delete_at(f[5], [49_999])  # a single row
    m.delete_at(big, np.arange(3, 80_000, 5))  # scattered over the row groups
    m.delete(between(16_000, 17_000))  # and a range across a row group edge
    check(spark, m)


def test_files_of_equal_size(spark: Any, lh: Any) -> None:
    """Pairs of byte-identical files (the same rows written twice), each file with
    its own deletions: equal sizes must not mix the files' deletion vectors. In
    one table with scattered deletions, in another with ranges only."""
    m = model(lh, "equal")
    one, two = rows(0, N), rows(N, 50_000)
    f = [m.append(one), m.append(one), m.append(two), m.append(two), m.append(rows(200_000, 1000))]
    sizes = {f.path: f.bytes for f in lh.list_data_files(m.name)}
    assert sizes[m.paths[f[0]]] == sizes[m.paths[f[1]]]
    assert sizes[m.paths[f[2]]] == sizes[m.paths[f[3]]]
    m.delete_at(f[0], np.arange(0, N, 2))  # scattered
    m.delete_at(f[1], np.arange(1, N, 3))  # scattered, other rows
    m.delete_at(f[2], np.arange(1_000, 30_000))  # a range
    m.delete_at(f[3], np.arange(0, 50_000, 9))  # scattered
    check(spark, m)

    m = model(lh, "equal_ranges")
    f = [m.append(one), m.append(one), m.append(two)]
    m.delete_at(f[0], np.arange(0, 20_000))
    m.delete_at(f[1], np.r_[np.arange(10_000, 50_000), [N - 1]])
    check(spark, m)


def test_renamed_and_added_columns(spark: Any, lh: Any) -> None:
    """Files written before a rename carry the old name, files written before a
    column was added lack it (nulls); deletions of every shape in both."""
    rng = np.random.default_rng(3)
    m = model(lh, "renamed")

    def written(start: int, n: int) -> pa.Table:
        return rows(start, n, names={"s": "label"})

    a = m.append(written(0, 60_000), stored_as=rows(0, 60_000))
    b = m.append(written(60_000, 60_000), stored_as=rows(60_000, 60_000))
    with lh.begin() as txn:
        txn.alter_table(m.name, rename_columns={"s": "label"})
    c = m.append(written(120_000, 60_000))
    with lh.begin() as txn:
        schema = txn.describe_table(m.name).schema
        txn.alter_table(m.name, schema=schema.append(pa.field("extra", pa.int64())))
    t = written(180_000, 60_000)
    d = m.append(t.append_column("extra", pc.multiply(t.column("id"), 2)))
    m.delete(between(1_000, 3_000))  # range, old names
    m.delete_at(b, rng.choice(60_000, 6_000, replace=False))  # scattered, old names
    m.delete_at(c, np.arange(0, 60_000, 4))  # scattered, new name
    m.delete(between(170_000, 190_000))  # range over the rename and the new column
    m.delete_at(d, rng.choice(60_000, 30_000, replace=False))
    want = m.live()
    assert want.column_names == ["id", "g", "label", "x", "extra"]
    assert want.column("extra").null_count == sum(int(m.alive[i].sum()) for i in (a, b, c))
    check(spark, m, want=want)


def test_inlined_rows_and_files_with_deletions(spark: Any, lh: Any) -> None:
    """Small appends are inlined (rows in the kvstore), large ones make files;
    deletions reach both."""
    m = model(lh, "inline", NOAUTO)  # default inline.max_rows
    f = [m.append(rows(i * 50_000, 50_000)) for i in range(3)]
    small = [m.append(rows(200_000 + i * 500, 300)) for i in range(6)]
    inline = {x.path for x in lh.list_data_files(m.name) if x.is_inline}
    assert {m.paths[i] for i in small} == inline and not inline & {m.paths[i] for i in f}
    m.delete(modulo(7))  # scattered everywhere
    m.delete(between(49_990, 50_100))  # a range over two files
    m.delete(between(200_000 + 500 + 10, 200_000 + 1_000 + 50))  # over inline files
    m.delete_at(small[3], [0, 299])
    m.delete_at(small[5], np.arange(300))  # a whole inline file
    m.delete_at(f[2], np.arange(0, 50_000, 3))
    assert lh.table_stats(m.name).inlined_rows > 0
    check(spark, m)


# -- time travel ------------------------------------------------------------------------------
def test_versions_with_different_deletions(spark: Any, lh: Any) -> None:
    """Each version read, in one session, gives its own rows; a version read again
    after a new delete commit (and a lazy frame built before it) is unchanged."""
    rng = np.random.default_rng(11)
    m = model(lh, "versions")
    f = files(m, 3, n=40_000)
    seen = {lh.version: m.live()}
    m.delete(between(1_000, 9_000))
    seen[lh.version] = m.live()
    m.delete_at(f[1], rng.choice(40_000, 15_000, replace=False))
    seen[lh.version] = m.live()
    m.delete_at(f[1], rng.choice(40_000, 15_000, replace=False))  # the same file again
    m.delete_at(f[2], np.arange(0, 40_000, 2))
    seen[lh.version] = m.live()
    v0, v1, v2, v3 = sorted(seen)
    for v in (v1, v2, v3, v0, v2):  # v2 twice, other versions between
        assert_rows(lhs.read(lh, spark, m.name, version=v).toArrow(), seen[v], f"version {v}")
    latest, at_v2 = lhs.read(lh, spark, m.name), lhs.read(lh, spark, m.name, version=v2)
    m.delete(between(30_000, 50_000))
    m.delete_at(f[2], np.arange(1, 40_000, 2))
    assert_rows(latest.toArrow(), seen[v3], "a frame of the latest version built before a delete")
    assert_rows(at_v2.toArrow(), seen[v2], "a frame of a version built before a delete")
    check(spark, m, version=v2, want=seen[v2])
    check(spark, m)

    # a transaction's own deletions, not committed: its read has them, a read of
    # the latest version (the one it started from) does not
    committed = m.live()
    pos = np.arange(2_000, 38_000, 3)
    kept = m.alive[f[0]].copy()
    m.alive[f[0]][pos] = False
    mine = m.live()
    m.alive[f[0]] = kept
    with lh.begin() as txn:
        txn.delete_rows(m.name, {m.paths[f[0]]: pos.tolist()})
        assert_rows(lhs.read(lh, spark, m.name, txn=txn).toArrow(), mine, "a transaction's read")
        assert_rows(lhs.read(lh, spark, m.name).toArrow(), committed, "a read beside it")
        txn.rollback()
    assert_rows(lhs.read(lh, spark, m.name).toArrow(), committed, "after its rollback")


def test_two_lakehouses_same_table_same_version(spark: Any, tmp_path: Any) -> None:
    """Two lakehouses with a table of one name, the same rows (files of equal
    sizes) and versions, different deletions: each read gives its own rows."""
    models = []
    for k, every in enumerate((3, 5)):
        h = lakehouse.open(str(tmp_path / f"lh{k}"), kv_options={"fsync": False})
        with h.begin() as txn:
            txn.create_namespace("ns")
        m = model(h, "t")
        f = files(m, 2, n=20_000)
        m.delete_at(f[0], np.arange(k, 20_000, every))
        m.delete_at(f[1], np.arange(1_000 * (k + 1), 10_000))
        models.append(m)
    try:
        assert models[0].lh.version == models[1].lh.version
        for m in (*models, models[0]):
            assert_rows(lhs.read(m.lh, spark, m.name).toArrow(), m.live(), str(m.lh))
    finally:
        for m in models:
            m.lh.close()


# -- the Python reader ------------------------------------------------------------------------
TS = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("g", pa.int32()),
        ("at", pa.timestamp("ns", tz="UTC")),
    ]
)


def ts_rows(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    at = pa.array(1_700_000_000_000_000_000 + ids * 1_000_000, TS.field("at").type)
    return pa.table({"id": ids, "g": pa.array(ids % 13, pa.int32()), "at": at}, schema=TS)


def test_python_reader_timestamp_ns(spark: Any, lh: Any) -> None:
    """A timestamp[ns] column: Spark's Parquet reader cannot read it, Python tasks
    read the files and drop deleted rows; scattered and ranges, then a delete."""
    rng = np.random.default_rng(5)
    with lh.begin() as txn:
        txn.create_table("ns.nanos", TS, PARQUET, sort_keys=["id"])
    m = Model(lh, "ns.nanos")
    # f[0]: several row groups (a task reads them one by one)
    f = [clustered(m, ts_rows(0, 20_000), ts_rows(20_000, 20_000))]
    f += [m.append(ts_rows(i * 40_000, 25_000)) for i in (1, 2)]
    m.delete_at(f[0], rng.choice(40_000, 12_000, replace=False))
    m.delete(between(16_000, 16_800))  # across a row group edge
    m.delete(between(45_000, 70_000))  # f[1]'s tail
    m.delete_at(f[2], [0, 63, 64, 24_999])
    check(spark, m)
    hits = [(t.column("g").to_numpy() == 3) & a for t, a in zip(m.parts, m.alive)]
    assert lhs.delete(lh, spark, m.name, "g = 3") == m.kill(hits)
    check(spark, m)


@pytest.mark.s3
def test_python_reader_on_s3_scattered(spark: Any, s3_bucket: Any, s3_options: Any) -> None:
    rng = np.random.default_rng(9)
    h = lakehouse.open(f"s3://{s3_bucket}/lh", storage_options=s3_options)
    try:
        with h.begin() as txn:
            txn.create_namespace("ns")
            txn.create_table("ns.t", SCHEMA, PARQUET)
        m = Model(h, "ns.t")
        f = files(m, 2, n=40_000)
        m.delete_at(f[0], rng.choice(40_000, 8_000, replace=False))
        m.delete_at(f[1], np.arange(0, 40_000, 7))
        m.delete(between(BUCKET - 5, BUCKET + 5))
        check(spark, m)
    finally:
        h.close()


# -- readers with positions: delete and merge -------------------------------------------------
def test_delete_merge_update_over_deletions(spark: Any, lh: Any) -> None:
    """Spark deletes of overlapping conditions, a merge and an update on a table
    whose files already have deletions of each shape: counts exact, rows exact."""
    rng = np.random.default_rng(13)
    m = model(lh, "ops")
    f = files(m, 4, n=50_000)
    m.delete(between(60_000, 75_000))  # f[1]: a range
    m.delete_at(f[2], rng.choice(50_000, 5_000, replace=False))  # f[2]: scattered
    m.delete_at(f[3], np.arange(0, 50_000, 3))  # f[3]: every 3rd
    ids = [t.column("id").to_numpy() for t in m.parts]
    five = [i % 5 == 0 for i in ids]
    assert lhs.delete(lh, spark, m.name, "id % 5 = 0") == m.kill(five)
    # overlapping the first: only the live multiples of 3 count
    both = [(i % 5 == 0) | (i % 3 == 0) for i in ids]
    assert lhs.delete(lh, spark, m.name, "id % 5 = 0 OR id % 3 = 0") == m.kill(both)
    check(spark, m)

    # merge: 300 live keys (updated), 300 deleted keys and 300 new ones (inserted)
    every = pa.concat_tables(m.parts).column("id").to_numpy()
    alive = np.concatenate(m.alive)
    live_ids = rng.choice(every[alive], 300, replace=False)
    dead_ids = rng.choice(every[~alive], 300, replace=False)
    new_ids = np.arange(1_000_000, 1_000_300)
    keys = np.sort(np.concatenate([live_ids, dead_ids, new_ids]))
    src = pa.table(
        {
            "id": keys,
            "g": pa.array(keys % 13, pa.int32()),
            "s": pa.array(["m"] * len(keys)),
            "x": pa.array(-keys.astype(np.float64)),
        },
        schema=SCHEMA,
    )
    r = lhs.merge(lh, spark.createDataFrame(src), m.name, on="id")
    assert (r.inserted, r.updated, r.deleted) == (600, 300, 0)
    m.kill([np.isin(t.column("id").to_numpy(), live_ids) for t in m.parts])
    m.adopt(src, "")  # (the model needs no path of rows it does not delete by position)
    check(spark, m)

    # update: the live rows of g = 4 below id 120,000, over all those deletions
    hits = [
        (t.column("g").to_numpy() == 4) & (t.column("id").to_numpy() < 120_000) for t in m.parts
    ]
    new = pa.concat_tables([t.filter(pa.array(a & h)) for t, a, h in zip(m.parts, m.alive, hits)])
    n = lhs.update(lh, spark, m.name, "g = 4 AND id < 120000", {"x": "x + 1"})
    assert n == m.kill(hits) == new.num_rows > 0
    m.adopt(new.set_column(3, SCHEMA.field("x"), pc.add(new.column("x"), 1.0)), "")
    check(spark, m)
