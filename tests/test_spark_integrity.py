"""Data-file integrity through the lakehouse's Spark reads.

A smaller sweep than tests/test_lakehouse_integrity.py (each read is a
Spark job): seeded bit flips over dictionary pages, data pages, footers and
the rest of the files of a table Spark wrote (read by Spark's own Parquet
reader, deletion vector included) and of a table with a ``timestamp[ns]``
column (read by the Python-task reader). Every read gives the original
rows or an error naming the damaged file: a CorruptionError from the
driver's footer check, or the failed job's error.
"""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from crc32c import crc32c
from integrity_flips import REGIONS, flipped, flips
from parquet_files import PARQUET

import lakehouse

pytest.importorskip("pyspark", reason="pyspark is not installed (the spark extra)")
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException

import lakehouse.spark as lhs
from lakehouse.spark.session import REQUIRED_CONF

pytest_plugins = ["spark_fixtures"]
pytestmark = pytest.mark.spark

JVM_T = "n.jvm"
PY_T = "n.py"
SEED = 1919


class Tables:
    def __init__(self, root: Path, spark: Any) -> None:
        self.lh = lh = lakehouse.open(str(root / "lh"))
        with lh.begin() as txn:
            txn.create_namespace("n")
            # files: their damage is the point
            txn.create_table(JVM_T, pa.schema([("i", pa.int64()), ("s", pa.string())]), PARQUET)
            schema = pa.schema([("i", pa.int64()), ("ts", pa.timestamp("ns"))])
            txn.create_table(PY_T, schema, PARQUET)
        df = spark.createDataFrame(
            [(i, f"v{i % 20}") for i in range(8000)], "i long, s string"
        ).repartition(2)
        lhs.write(lh, df, JVM_T)
        lhs.delete(lh, spark, JVM_T, "i % 101 = 0")
        t0 = dt.datetime(2026, 1, 1)
        for lo in (0, 3000):
            with lh.begin() as txn:
                txn.append(
                    PY_T,
                    pa.table(
                        {
                            "i": pa.array(range(lo, lo + 3000), pa.int64()),
                            "ts": pa.array(
                                [t0 + dt.timedelta(seconds=k) for k in range(lo, lo + 3000)],
                                pa.timestamp("ns"),
                            ),
                        }
                    ),
                )
        base = Path(lh.data_location()[0].removeprefix("file://"))
        self.files = {t: {base / f.path: f for f in lh.list_data_files(t)} for t in (JVM_T, PY_T)}


@pytest.fixture(scope="module")
def tables(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    t = Tables(tmp_path_factory.mktemp("spark_integrity"), spark)
    yield t
    t.lh.close()


def rows(frame: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in frame.collect())


def test_spark_written_files_record_checksums(tables: Tables) -> None:
    """add_files (the adoption of what Spark wrote) records footer and file CRCs."""
    for path, f in tables.files[JVM_T].items():
        data = path.read_bytes()
        assert f.crc == crc32c(data) and f.size == len(data)
        flen = int.from_bytes(data[-8:-4], "little")
        assert f.footer_size == flen
        assert f.footer_crc == crc32c(data[-8 - flen : -8])


@pytest.mark.parametrize("table", [JVM_T, PY_T])
def test_bit_flip_sweep_through_spark(spark: Any, tables: Tables, table: str) -> None:
    lh = tables.lh
    reads = {
        "all": lambda: lhs.read(lh, spark, table),
        "where": lambda: lhs.read(lh, spark, table).where("i >= 2000 AND i < 7000"),
    }
    want = {how: rows(read()) for how, read in reads.items()}
    assert len(want["all"]) > len(want["where"]) > 0
    originals = {p: p.read_bytes() for p in tables.files[table]}
    outcomes: Counter[tuple[str, str]] = Counter()
    for path, region, offset, bit in flips(random.Random(SEED), originals, per_region=5):
        path.write_bytes(flipped(originals[path], offset, bit))
        try:
            for how, read in reads.items():
                try:
                    got = rows(read())
                except (lakehouse.CorruptionError, PySparkException, Py4JJavaError) as exc:
                    assert path.name in str(exc), (how, region, offset, bit, str(exc)[:500])
                    outcomes[region, "error"] += 1
                    continue
                assert got == want[how], f"wrong answer: {how} {path.name} {region} @{offset}"
                outcomes[region, "same rows"] += 1
        finally:
            path.write_bytes(originals[path])
    regions = {r for r, _ in outcomes}
    assert regions >= {"data", "footer", "other"} and (table == PY_T or "dictionary" in regions)
    assert outcomes["data", "error"] > 0 and outcomes["footer", "error"] > 0
    assert set(regions) <= set(REGIONS)
    assert rows(reads["all"]()) == want["all"]


def test_configured_session_verifies_page_checksums(spark: Any, tables: Tables) -> None:
    """A session built without the Hadoop setting (a user's own) verifies page
    checksums once :func:`lakehouse.spark.configure` (run by every call of
    lakehouse.spark) has set the SQL setting: a flip Spark reads silently
    wrong without it fails with it, even in a plain spark.read.parquet."""
    key = "parquet.page.verify-checksum.enabled"
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    saved = hadoop.get(key)
    path = next(iter(tables.files[JVM_T]))
    original = path.read_bytes()
    good = spark.read.parquet(str(path)).toArrow().sort_by("i")
    found = False
    hadoop.set(key, "false")
    try:
        for p, _, offset, bit in flips(random.Random(SEED), {path: original}, per_region=40):
            path.write_bytes(flipped(original, offset, bit))
            try:
                spark.conf.unset(key)
                try:
                    silent = spark.read.parquet(str(p)).toArrow().sort_by("i")
                except (PySparkException, Py4JJavaError):
                    continue
                if silent.equals(good):
                    continue
                found = True  # a wrong answer without verification; with the setting:
                spark.conf.set(key, REQUIRED_CONF[key])
                with pytest.raises((PySparkException, Py4JJavaError)):
                    spark.read.parquet(str(p)).collect()
                break
            finally:
                path.write_bytes(original)
    finally:
        hadoop.set(key, saved)
        spark.conf.set(key, REQUIRED_CONF[key])
    assert found, "no flip gave a wrong answer without verification"


def test_a_storage_error_names_the_file(spark: Any, tables: Tables) -> None:
    """A data file storage cannot read (a directory where the file was) is a
    StorageError naming it, from the driver's footer check, not a raw OSError."""
    path = next(iter(tables.files[JVM_T]))
    original = path.read_bytes()
    path.unlink()
    path.mkdir()
    try:
        with pytest.raises(lakehouse.StorageError, match=path.name):
            lhs.read(tables.lh, spark, JVM_T)
    finally:
        path.rmdir()
        path.write_bytes(original)
    assert len(rows(lhs.read(tables.lh, spark, JVM_T))) == 8000 - 80


def test_python_tasks_check_the_whole_file(spark: Any, tables: Tables) -> None:
    """The Python-task reader reads each file whole and checks it against the
    record: a file grown by a copy of its own footer (whose rows a Parquet reader
    would still return) is an error naming it, as is one byte fewer."""
    path = next(iter(tables.files[PY_T]))
    original = path.read_bytes()
    flen = int.from_bytes(original[-8:-4], "little")
    try:
        for bad in (original + original[-8 - flen :], original[:-1]):
            path.write_bytes(bad)
            with pytest.raises(
                (lakehouse.CorruptionError, PySparkException, Py4JJavaError)
            ) as info:
                rows(lhs.read(tables.lh, spark, PY_T))
            assert path.name in str(info.value)
    finally:
        path.write_bytes(original)
    assert len(rows(lhs.read(tables.lh, spark, PY_T))) == 6000


def test_spark_reads_refuse_a_file_of_another_length(spark: Any, tables: Tables) -> None:
    """Spark's own reader finds a file's footer at its end: a file grown by a copy
    of its own footer would read as the same rows from bytes the commit never
    recorded. The driver checks each file's length too (CorruptionError naming it)."""
    path = next(iter(tables.files[JVM_T]))
    original = path.read_bytes()
    flen = int.from_bytes(original[-8:-4], "little")
    path.write_bytes(original + original[-8 - flen :])
    try:
        with pytest.raises(lakehouse.CorruptionError, match=path.name):
            lhs.read(tables.lh, spark, JVM_T)
    finally:
        path.write_bytes(original)
    assert len(rows(lhs.read(tables.lh, spark, JVM_T))) == 8000 - 80
