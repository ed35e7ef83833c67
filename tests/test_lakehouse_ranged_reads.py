"""Point reads of large data files read only the row groups their terms allow.

A read with a ``where`` whose terms can exclude row groups reads a file
larger than ``RANGED_READ_BYTES`` by byte ranges: its tail (checked against
the record's footer length and CRC), then the column chunks of the row
groups whose footer statistics allow the terms (page checksums verified).
Here the threshold is lowered to 0 and compaction writes 100-row groups, so
small clustered files take that path. Its results must equal the whole-file
path's (deletion vectors included), a damaged footer or a damaged byte in a
row group it reads is a CorruptionError naming the file, and damage in a
row group it does not read leaves the rows correct.
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from integrity_flips import flipped

import lakehouse
from lakehouse.data import compaction
from lakehouse.data import files as datafiles

T = "n.t"
SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("s", pa.string()), ("f", pa.float64())])
GROUP_ROWS = 100


@pytest.fixture(autouse=True)
def small_groups(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Clustered files of 100-row groups, every file read by ranges when it can be."""
    monkeypatch.setattr(compaction, "CLUSTERED_ROW_GROUP_ROWS", GROUP_ROWS)
    monkeypatch.setattr(datafiles, "RANGED_READ_BYTES", 0)
    yield


class Counting:
    """Wraps datafiles.read_ranges: how many reads it served (not None)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.served = 0
        self.declined = 0
        inner = datafiles.read_ranges

        def spy(*args: Any, **kwargs: Any) -> Any:
            out = inner(*args, **kwargs)
            if out is None:
                self.declined += 1
            else:
                self.served += 1
            return out

        monkeypatch.setattr(datafiles, "read_ranges", spy)


def rows(rng: random.Random, start: int, n: int, nulls: bool) -> pa.Table:
    ks = [None if nulls and rng.random() < 0.05 else rng.randrange(0, 2000) for _ in range(n)]
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "k": pa.array(ks, pa.int64()),
            "s": pa.array([f"s{rng.randrange(40):02d}" for _ in range(n)]),
            "f": pa.array([None if rng.random() < 0.1 else rng.random() for _ in range(n)]),
        },
        schema=SCHEMA,
    )


def build(
    root: str, seed: int, batches: int, nulls: bool, deletes: list[str], **options: Any
) -> Any:
    """A table compacted into one file clustered by ``k``, then ``deletes`` applied
    (a delete's point or range reads the file by ranges too)."""
    rng = random.Random(seed)
    lh = lakehouse.open(root, **options)
    with lh.begin() as txn:
        txn.create_namespace("n")
        txn.create_table(T, SCHEMA, {"compaction.auto": "false"})
    for b in range(batches):
        with lh.begin() as txn:
            txn.append(T, rows(rng, b * 1000, 1000, nulls))
    with lh.begin() as txn:
        txn.alter_table(T, sort_keys=["k"])
    with lh.begin() as txn:
        txn.compact(T)
    for where in deletes:
        with lh.begin() as txn:
            txn.delete(T, where)
    return lh


def whole(lh: Any, where: str, monkeypatch: pytest.MonkeyPatch) -> pa.Table:
    """The rows the whole-file path reads."""
    with monkeypatch.context() as m:
        m.setattr(datafiles, "RANGED_READ_BYTES", 1 << 62)
        return lh.read(T, where=where)


def same(a: pa.Table, b: pa.Table) -> bool:
    return bool(a.sort_by("id").equals(b.sort_by("id")))


KS = st.integers(-10, 2010)
TERMS = st.one_of(
    KS.map(lambda v: f"k = {v}"),
    st.lists(KS, min_size=1, max_size=4).map(lambda vs: f"k IN ({', '.join(map(str, vs))})"),
    st.tuples(st.sampled_from(["<", "<=", ">", ">="]), KS).map(lambda t: f"k {t[0]} {t[1]}"),
    st.tuples(KS, st.integers(0, 300)).map(lambda t: f"k BETWEEN {t[0]} AND {t[0] + t[1]}"),
    st.just("k IS NULL"),
    st.integers(0, 3000).map(lambda v: f"id = {v}"),
    st.integers(0, 39).map(lambda v: f"s = 's{v:02d}'"),
)
WHERES = st.one_of(
    TERMS,
    st.tuples(TERMS, TERMS).map(lambda t: f"{t[0]} AND {t[1]}"),
    st.tuples(TERMS, TERMS).map(lambda t: f"{t[0]} OR {t[1]}"),
    st.tuples(TERMS, st.floats(0, 1)).map(lambda t: f"{t[0]} AND f < {t[1]:.3f}"),
)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    seed=st.integers(0, 2**16),
    batches=st.integers(2, 3),
    nulls=st.booleans(),
    deletes=st.lists(
        st.one_of(
            st.integers(0, 30).map(lambda m: ("mod", m, 0)),
            KS.map(lambda v: ("between", v, v)),
            st.tuples(KS, st.integers(0, 100)).map(lambda t: ("between", t[0], t[0] + t[1])),
        ),
        max_size=3,
    ),
    wheres=st.lists(WHERES, min_size=4, max_size=8),
)
def test_ranged_reads_equal_whole_file_reads(
    monkeypatch: pytest.MonkeyPatch,
    seed: int,
    batches: int,
    nulls: bool,
    deletes: list[tuple[str, int, int]],
    wheres: list[str],
) -> None:
    sql = [
        f"id % 31 = {a}" if kind == "mod" else f"k BETWEEN {a} AND {b}" for kind, a, b in deletes
    ]
    with monkeypatch.context() as m, tempfile.TemporaryDirectory() as tmp:
        count = Counting(m)
        lh = build(str(Path(tmp) / "lh"), seed, batches, nulls, sql)
        try:
            (f,) = lh.list_data_files(T)
            assert f.rows == batches * 1000
            # the deletes (positions found by ranged reads) deleted exactly their rows
            rng = random.Random(seed)
            everything = pa.concat_tables(
                [rows(rng, b * 1000, 1000, nulls) for b in range(batches)]
            ).to_pylist()
            kept = [
                r
                for r in everything
                if not any(
                    (r["id"] % 31 == a)
                    if kind == "mod"
                    else (r["k"] is not None and a <= r["k"] <= b)
                    for kind, a, b in deletes
                )
            ]
            want = pa.Table.from_pylist(kept, schema=SCHEMA)
            assert same(whole(lh, "TRUE", monkeypatch), want)
            # a point read of a present value always takes the ranged path
            k = lh.read(T, columns=["k"]).column("k").drop_null()
            if len(k):
                point = f"k = {k[len(k) // 2].as_py()}"
                before = count.served
                assert same(lh.read(T, where=point), whole(lh, point, monkeypatch))
                assert count.served == before + 1
            for where in wheres:
                got = lh.read(T, where=where)
                assert same(got, whole(lh, where, monkeypatch)), where
                batches_got = lh.scan_batches(T, where=where).read_all()
                assert same(batches_got, got), where
        finally:
            lh.close()


# -- damaged bytes ------------------------------------------------------------------------
@pytest.fixture
def clustered(tmp_path: Path) -> Iterator[Any]:
    lh = build(str(tmp_path / "lh"), 7, 3, False, ["id % 13 = 0"])
    yield lh
    lh.close()


def the_file(lh: Any) -> tuple[Path, Any]:
    (f,) = lh.list_data_files(T)
    base = lh.data_location()[0].removeprefix("file://")
    return Path(base) / f.path, f


def group_of(path: Path, k: int) -> tuple[int, list[tuple[int, int]]]:
    """The row group holding ``k`` and the byte ranges of its column chunks."""
    meta = pq.ParquetFile(str(path)).metadata
    kcol = meta.schema.names.index("k")
    for r in range(meta.num_row_groups):
        st_ = meta.row_group(r).column(kcol).statistics
        if st_.min <= k <= st_.max:
            spans = []
            for j in range(meta.num_columns):
                c = meta.row_group(r).column(j)
                spans.append((c.data_page_offset, c.data_page_offset + c.total_compressed_size))
            return r, spans
    raise AssertionError(f"no row group holds k = {k}")


def test_point_read_fetches_a_fraction_of_the_file(
    clustered: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, f = the_file(clustered)
    assert pq.ParquetFile(str(path)).metadata.num_row_groups >= 20
    fetched: list[int] = []
    from kvstore.objstore import local

    inner_get, inner_range = local.LocalStore.get, local.LocalStore.get_range

    def get(self: Any, name: str) -> bytes:
        data = inner_get(self, name)
        if name.endswith(".parquet"):
            fetched.append(len(data))
        return data

    def get_range(self: Any, name: str, start: int, length: int) -> bytes:
        if name.endswith(".parquet"):
            fetched.append(length)
        return inner_range(self, name, start, length)

    k = clustered.read(T, columns=["k"]).column("k")[1500].as_py()
    monkeypatch.setattr(local.LocalStore, "get", get)
    monkeypatch.setattr(local.LocalStore, "get_range", get_range)
    got = clustered.read(T, where=f"k = {k}")
    assert got.num_rows >= 1 and fetched
    assert sum(fetched) < f.size / 4, (sum(fetched), f.size)


def test_damaged_footer_is_corruption(clustered: Any) -> None:
    path, f = the_file(clustered)
    data = path.read_bytes()
    flen = int.from_bytes(data[-8:-4], "little")
    k = clustered.read(T, columns=["k"]).column("k")[10].as_py()
    rng = random.Random(3)
    for _ in range(5):
        offset = rng.randrange(len(data) - 8 - flen, len(data) - 8)
        path.write_bytes(flipped(data, offset, rng.randrange(8)))
        with pytest.raises(lakehouse.CorruptionError, match=f.path):
            clustered.read(T, where=f"k = {k}")
    path.write_bytes(data)
    assert clustered.read(T, where=f"k = {k}").num_rows >= 1


def test_damage_in_the_row_group_read_is_corruption(
    clustered: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, f = the_file(clustered)
    data = path.read_bytes()
    ks = clustered.read(T, columns=["k"]).column("k")
    rng = random.Random(5)
    for i in (100, 1200, 2500):
        k = ks[i].as_py()
        _, spans = group_of(path, k)
        a, b = spans[rng.randrange(len(spans))]
        path.write_bytes(flipped(data, rng.randrange(a, b), rng.randrange(8)))
        count = Counting(monkeypatch)
        with pytest.raises(lakehouse.CorruptionError, match=f.path):
            clustered.read(T, where=f"k = {k}")
        assert count.served == 0  # never rows from damaged bytes
    path.write_bytes(data)


def test_damage_in_a_row_group_not_read_leaves_the_rows(
    clustered: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, f = the_file(clustered)
    data = path.read_bytes()
    ks = clustered.read(T, columns=["k"]).column("k")
    lo, hi = ks[5].as_py(), ks[len(ks) - 5].as_py()
    where = f"k = {lo}"
    want = clustered.read(T, where=where)
    r_lo, _ = group_of(path, lo)
    r_hi, spans = group_of(path, hi)
    assert r_hi > r_lo + 2  # far apart: not fetched with the group read
    rng = random.Random(9)
    for _ in range(5):
        a, b = spans[rng.randrange(len(spans))]
        path.write_bytes(flipped(data, rng.randrange(a, b), rng.randrange(8)))
        count = Counting(monkeypatch)
        assert same(clustered.read(T, where=where), want)
        assert count.served == 1
        with pytest.raises(lakehouse.CorruptionError, match=f.path):
            clustered.read(T)  # the whole file: the damage is real
    path.write_bytes(data)


def test_shorter_file_is_corruption(clustered: Any) -> None:
    path, f = the_file(clustered)
    data = path.read_bytes()
    k = clustered.read(T, columns=["k"]).column("k")[10].as_py()
    path.write_bytes(data[:-100])
    with pytest.raises(lakehouse.CorruptionError, match=f.path):
        clustered.read(T, where=f"k = {k}")
    path.write_bytes(data)


def test_external_files_are_read_by_ranges_through_their_store(
    clustered: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A minimal export references the source's files by absolute URL."""
    path, _ = the_file(clustered)
    dest = str(tmp_path / "export")
    clustered.export(dest, kind="minimal")
    ks = clustered.read(T, columns=["k"]).column("k")
    with lakehouse.open(dest) as ex:
        (f,) = ex.list_data_files(T)
        assert f.is_external
        count = Counting(monkeypatch)
        for i in (0, 1400, 2700):
            where = f"k = {ks[i].as_py()}"
            assert same(ex.read(T, where=where), whole(clustered, where, monkeypatch))
        assert count.served == 3
        data = path.read_bytes()
        path.write_bytes(flipped(data, len(data) - 20, 2))  # in the footer
        with pytest.raises(lakehouse.CorruptionError, match=f.path):
            ex.read(T, where=f"k = {ks[0].as_py()}")
        path.write_bytes(data)


@pytest.mark.s3
def test_s3_files_are_read_by_ranges(
    s3_url: tuple[str, dict[str, Any]], s3_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, options = s3_url
    lh = build(url, 11, 3, True, ["k BETWEEN 100 AND 300"], storage_options=options)
    try:
        (f,) = lh.list_data_files(T)
        ks = lh.read(T, columns=["k"]).column("k").drop_null()
        count = Counting(monkeypatch)
        for i in (3, 1300, 2400):
            where = f"k = {ks[i].as_py()}"
            assert same(lh.read(T, where=where), whole(lh, where, monkeypatch))
        assert count.served == 3
        bucket, _, prefix = lh.data_location()[0].removeprefix("s3://").partition("/")
        key = f"{prefix.rstrip('/')}/{f.path}".lstrip("/")
        data = s3_client.get_object(Bucket=bucket, Key=key)["Body"].read()
        assert len(data) == f.size
        s3_client.put_object(Bucket=bucket, Key=key, Body=flipped(data, len(data) - 20, 1))
        with pytest.raises(lakehouse.CorruptionError, match=f.path):
            lh.read(T, where=f"k = {ks[3].as_py()}")
    finally:
        lh.close()
