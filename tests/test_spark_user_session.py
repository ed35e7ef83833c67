"""lakehouse.spark on a SparkSession the user built (not ``local_session``).

A driver script runs in a subprocess (its own JVM; the shared test session
is not touched) on ``SparkSession.builder.master("local[2]").getOrCreate()``
with nothing of the lakehouse's settings, a ``PYSPARK_PYTHON`` that cannot
import pyarrow (the interpreter with ``-S``: no site-packages, as a system
``python3`` on ``PATH`` would be), and the user's own settings that would
break the lakehouse's files or reads if they applied to them: LEGACY
date/time rebasing for Parquet writes and reads, corrupt files ignored.
Write, read, delete, update and merge give exact rows (dates before 1582,
timestamps before 1900, a bucket-partitioned table written through Python
tasks); a corrupted data file fails the read instead of vanishing; a session
whose Python tasks are pointed at a Python without the package gets
:class:`lakehouse.spark.SparkConfigError` naming the setting.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed (the spark extra)")

pytestmark = pytest.mark.spark

UTC = dt.UTC
D0 = dt.date(1500, 1, 1)  # + 1000 days per id: crosses the 1582 calendar cutover
T0 = dt.datetime(1890, 1, 1, tzinfo=UTC)  # + 100 days per id: crosses 1900
N = 40

DRIVER = r'''
import datetime as dt, glob, json, logging, sys
import pyarrow as pa
from pyspark.sql import SparkSession, functions as F
import lakehouse
import lakehouse.spark as lhs
from lakehouse.spark.session import PYTHON_CONF

root, broken, out_path = sys.argv[1:4]
UTC = dt.UTC
D0, T0, N = dt.date(1500, 1, 1), dt.datetime(1890, 1, 1, tzinfo=UTC), 40
S0 = int((T0 - dt.datetime(1970, 1, 1, tzinfo=UTC)).total_seconds())
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)

spark = SparkSession.builder.master("local[2]").getOrCreate()
# the user's own settings, for their own files
USER = {
    "spark.sql.parquet.datetimeRebaseModeInWrite": "LEGACY",
    "spark.sql.parquet.datetimeRebaseModeInRead": "LEGACY",
    "spark.sql.files.ignoreCorruptFiles": "true",
}
for k, v in USER.items():
    spark.conf.set(k, v)
out = {"python_before": spark.conf.get(PYTHON_CONF, None)}

SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    ("name", pa.string()),
    ("d", pa.date32()),
    ("ts", pa.timestamp("us", tz="UTC")),
])
lh = lakehouse.open(root + "/lh", kv_options={"fsync": False})
with lh.begin() as t:
    t.create_namespace("ns")
    t.create_table("ns.t", SCHEMA, {"inline.max_rows": "0"})
    t.create_table("ns.b", SCHEMA, {"inline.max_rows": "0"}, partition_by=["bucket(2, id)"])


def frame(lo, hi, name="n"):
    i = F.col("id")
    return spark.range(lo, hi, numPartitions=2).select(
        i.alias("id"),
        F.concat(F.lit(name), i.cast("string")).alias("name"),
        F.date_add(F.lit(D0.isoformat()).cast("date"), (i * 1000).cast("int")).alias("d"),
        F.timestamp_seconds(F.lit(S0) + i * 8_640_000).alias("ts"),
    )


def rows(table):
    """(the lakehouse's own read: pyarrow, the Spark read) as JSON-able rows by id"""
    def norm(rs):
        return sorted(
            [r["id"], r["name"], r["d"].isoformat(), r["ts"].astimezone(UTC).isoformat()]
            for r in rs
        )
    mine = norm(lh.read(table).to_pylist())
    theirs = norm(lhs.read(lh, spark, table).toArrow().to_pylist())
    return {"lh": mine, "spark": theirs}


out["write"] = lhs.write(lh, frame(0, N), "ns.t")
out["write_b"] = lhs.write(lh, frame(0, N), "ns.b")
out["python_after"] = spark.conf.get(PYTHON_CONF, None)
out["written"] = rows("ns.t")
out["written_b"] = rows("ns.b")
out["delete"] = lhs.delete(lh, spark, "ns.t", "id % 3 = 0")
out["delete_b"] = lhs.delete(lh, spark, "ns.b", "id % 3 = 0")
for k, v in USER.items():  # set again between calls: the next call sets its own again
    spark.conf.set(k, v)
out["update"] = lhs.update(lh, spark, "ns.t", "id < 10", {"name": "concat(name, '!')"})
m = lhs.merge(lh, frame(35, 45, "m"), "ns.t", on=["id"])
out["merge"] = [m.inserted, m.updated, m.deleted]
out["final"] = rows("ns.t")
out["final_b"] = rows("ns.b")
out["user_conf"] = {k: spark.conf.get(k, None) for k in USER}

# damaged data files: the read fails (ignoreCorruptFiles would drop their rows)
with lh.begin() as txn:
    table_dir = lh.data_location()[0][len("file://"):] + "/" + txn.data_dir("ns.t")
for victim in glob.glob(table_dir + "/**/*.parquet", recursive=True):
    data = bytearray(open(victim, "rb").read())
    data[4:40] = bytes(36)  # the first page header
    open(victim, "wb").write(bytes(data))
try:
    got = lhs.read(lh, spark, "ns.t").collect()
    out["corrupt"] = ["rows", len(got)]
except Exception as exc:
    out["corrupt"] = ["raised", type(exc).__name__]

# a session whose Python tasks are pointed (by the user) at a Python without the package
other = spark.newSession()
other.conf.set(PYTHON_CONF, broken)
try:
    lhs.read(lh, other, "ns.b").collect()
    out["misconfigured"] = None
except lhs.SparkConfigError as exc:
    out["misconfigured"] = str(exc)
json.dump(out, open(out_path, "w"))
spark.stop()
'''


def _expected() -> dict[str, list[list[object]]]:
    def row(i: int, name: str) -> list[object]:
        d = D0 + dt.timedelta(days=1000 * i)
        ts = T0 + dt.timedelta(seconds=8_640_000 * i)
        return [i, name, d.isoformat(), ts.isoformat()]

    written = [row(i, f"n{i}") for i in range(N)]
    after_delete = {i: row(i, f"n{i}") for i in range(N) if i % 3}
    final = {i: (row(i, f"n{i}!") if i < 10 else r) for i, r in after_delete.items()}
    for i in range(35, 45):
        final[i] = row(i, f"m{i}")
    return {
        "written": written,
        "final_b": [after_delete[i] for i in sorted(after_delete)],
        "final": [final[i] for i in sorted(final)],
    }


def _broken_python(tmp: Path) -> Path:
    """This interpreter without site-packages: pyspark's worker starts (Spark puts
    its zips on PYTHONPATH) but pyarrow and lakehouse cannot be imported."""
    p = tmp / "python-without-packages"
    p.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    p.chmod(0o755)
    return p


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    tmp = tmp_path_factory.mktemp("user_session")
    script = tmp / "driver.py"
    script.write_text(DRIVER)
    out = tmp / "out.json"
    broken = _broken_python(tmp)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    env.update(PYSPARK_PYTHON=str(broken), SPARK_LOCAL_IP="127.0.0.1")
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp), str(broken), str(out)],
        env=env,
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result: dict[str, object] = json.loads(out.read_text())
    result["stderr"] = proc.stderr
    return result


def test_calls_are_exact_on_a_plain_session(run: dict[str, object]) -> None:
    want = _expected()
    assert run["written"] == {"lh": want["written"], "spark": want["written"]}
    assert run["written_b"] == {"lh": want["written"], "spark": want["written"]}
    assert run["delete"] == run["delete_b"] == len([i for i in range(N) if i % 3 == 0])
    assert run["update"] == len([i for i in range(10) if i % 3])
    # 35, 37, 38 matched; 36 and 39 (deleted) and 40..44 new
    assert run["merge"] == [7, 3, 0]
    assert run["final"] == {"lh": want["final"], "spark": want["final"]}
    assert run["final_b"] == {"lh": want["final_b"], "spark": want["final_b"]}


def test_python_tasks_pointed_at_this_interpreter_with_a_warning(run: dict[str, object]) -> None:
    assert run["python_before"] is None
    assert run["python_after"] == sys.executable
    assert "spark.sql.execution.pyspark.python" in str(run["stderr"])


def test_user_settings_left_for_their_data_but_not_applied_to_lakehouse_files(
    run: dict[str, object],
) -> None:
    conf = run["user_conf"]
    assert isinstance(conf, dict)
    # reads pass their own options: the user's read settings stay
    assert conf["spark.sql.parquet.datetimeRebaseModeInRead"] == "LEGACY"
    assert conf["spark.sql.files.ignoreCorruptFiles"] == "true"
    # the write setting is the session's only: the lakehouse's calls set it
    assert conf["spark.sql.parquet.datetimeRebaseModeInWrite"] == "CORRECTED"
    assert run["corrupt"][0] == "raised"  # type: ignore[index]


def test_tasks_without_the_package_raise_a_config_error(run: dict[str, object]) -> None:
    msg = run["misconfigured"]
    assert isinstance(msg, str)
    assert "No module named" in msg
    assert "python-without-packages" in msg
    assert "PYSPARK_PYTHON" in msg
    assert "spark.sql.execution.pyspark.python" in msg
