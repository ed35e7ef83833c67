"""The DuckLake side of the scale benchmark, run in a virtualenv of its own.

DuckLake is the ``ducklake`` extension of DuckDB; the package
``duckdb-extension-ducklake`` on the package index ships it as a file
(``duckdb_extension_ducklake/extensions/v<duckdb version>/ducklake.duckdb_extension``)
built for ``duckdb==1.5.5``, while the test extras pin duckdb 2.x. So it
lives in ``.venv-ducklake`` (``make .venv-ducklake``), and
:mod:`lakehouse.bench.scale` runs this file there as a subprocess::

    .venv-ducklake/bin/python -I lakehouse/bench/ducklake_side.py

It is loaded with ``LOAD '<that file>'`` on a connection with
``allow_unsigned_extensions`` (nothing is downloaded), and the table is a
DuckLake catalog in a DuckDB file with its data files on local disk:
``ATTACH 'ducklake:<root>/meta.ducklake' AS lake (DATA_PATH '<root>/data/')``.

The protocol is one JSON object a line each way: the parent writes a
command on stdin, this answers it on stdout (``{"error": ...}`` when it
failed). Commands:

* ``{"op": "create", "root": dir, "rows": n, "per_day": d}``: attach the
  catalog, create the table, insert batch 0 (its first snapshot);
* ``{"op": "append", "start": a, "stop": b}``: one ``INSERT`` per batch
  ``a..b-1`` (one transaction and one Parquet file each; 100 rows are above
  DuckLake's inlining limit of 10), answering the seconds of each;
* ``{"op": "measure", "files": n, "reads": r, "ids": [...]}``: median
  seconds of reading every row (``SELECT *`` into Arrow), of ``id = x`` for
  each id, and of every row as of the first snapshot;
* ``{"op": "quit"}``.

The keys benchmark (:mod:`lakehouse.bench.keys`) uses commands of its own,
on catalogs attached by root directory (rows come from Arrow IPC files the
parent wrote, so both sides use the same rows and nothing here needs numpy):

* ``{"op": "k_attach", "root": dir, "inline": n | null}``: attach a catalog
  (``DATA_INLINING_ROW_LIMIT n`` on the ``ATTACH`` when ``n`` is given,
  DuckLake's default otherwise);
* ``{"op": "k_table", "root": dir, "table": t, "files": [...]}``: create
  ``t (id BIGINT NOT NULL, name VARCHAR, amount DOUBLE)`` and insert each
  file's rows, one ``INSERT`` (one commit) per file;
* ``{"op": "k_load", "file": f}``: read a file of record batches, kept for
  ``k_insert``; ``{"op": "k_insert", "root", "table", "file", "index": i}``
  inserts its batch ``i`` in one ``INSERT`` and answers the seconds;
* ``{"op": "k_merge", "root", "table", "file"}``: ``MERGE INTO`` the table
  from the file's rows on ``id`` (update all columns when matched, insert
  when not), answering the seconds of that statement and the rows after;
* ``{"op": "k_count", "root", "table"}``: rows and Parquet files of the table.

This module imports only the standard library and pyarrow at the top (the
main project imports :func:`batch` from it, so both sides append the same
rows); duckdb is imported when the table is created.
"""

from __future__ import annotations

import datetime
import glob
import json
import os
import statistics
import sys
import time
from typing import Any

import pyarrow as pa

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("ts", pa.timestamp("us")),
        ("name", pa.string()),
        ("amount", pa.float64()),
    ]
)
EPOCH = datetime.datetime(2020, 1, 1)


def batch(k: int, rows: int, per_day: int) -> pa.Table:
    """Append ``k`` of the scale benchmark: ids ``k*rows ..``, all on day
    ``k // per_day`` after 2020-01-01 (one second apart), deterministic."""
    ids = range(k * rows, (k + 1) * rows)
    day = EPOCH + datetime.timedelta(days=k // per_day, seconds=(k % per_day) * rows)
    return pa.table(
        [
            pa.array(ids, pa.int64()),
            pa.array(
                [day + datetime.timedelta(seconds=i) for i in range(rows)], pa.timestamp("us")
            ),
            pa.array([f"name-{x}" for x in ids], pa.string()),
            pa.array([(x * 7919) % 100_000 / 100 for x in ids], pa.float64()),
        ],
        schema=SCHEMA,
    )


def extension_path() -> str:
    """The ``ducklake.duckdb_extension`` file of the installed package, for this duckdb."""
    import duckdb
    import duckdb_extension_ducklake

    top = os.path.join(os.path.dirname(duckdb_extension_ducklake.__file__), "extensions")
    found = sorted(glob.glob(os.path.join(top, "*", "ducklake.duckdb_extension")))
    mine = [p for p in found if os.path.basename(os.path.dirname(p)) == f"v{duckdb.__version__}"]
    if not (mine or found):
        raise FileNotFoundError(f"no ducklake.duckdb_extension under {top}")
    return (mine or found)[0]


class Side:
    """One DuckLake table, driven by the commands above."""

    def __init__(self) -> None:
        self.con: Any = None
        self.rows = 100
        self.per_day = 10
        self.first = 0

    def _arrow(self, sql: str, params: list[Any] | None = None) -> pa.Table:
        res = self.con.execute(sql, params or [])
        get = getattr(res, "to_arrow_table", None) or res.fetch_arrow_table
        return get()

    def create(self, root: str, rows: int, per_day: int) -> dict[str, Any]:
        import duckdb

        self.rows, self.per_day = rows, per_day
        path = extension_path()
        self.con = duckdb.connect(
            config={
                "allow_unsigned_extensions": "true",
                "autoinstall_known_extensions": "false",
                "autoload_known_extensions": "false",
            }
        )
        self.con.execute(f"LOAD '{path}'")
        os.makedirs(root, exist_ok=True)
        meta, data = os.path.join(root, "meta.ducklake"), os.path.join(root, "data") + os.sep
        self.con.execute(f"ATTACH 'ducklake:{meta}' AS lake (DATA_PATH '{data}')")
        self.con.execute(
            "CREATE TABLE lake.t (id BIGINT, ts TIMESTAMP, name VARCHAR, amount DOUBLE)"
        )
        self.appends(0, 1)
        self.first = int(
            self.con.execute("SELECT max(snapshot_id) FROM lake.snapshots()").fetchone()[0]
        )
        return {"duckdb": duckdb.__version__, "extension": path, "first_snapshot": self.first}

    def appends(self, start: int, stop: int) -> dict[str, Any]:
        times = []
        for k in range(start, stop):
            self.con.register("incoming", batch(k, self.rows, self.per_day))
            t0 = time.perf_counter()
            self.con.execute("INSERT INTO lake.t SELECT * FROM incoming")
            times.append(time.perf_counter() - t0)
            self.con.unregister("incoming")
        return {"times": times}

    def _check(self, t: pa.Table, want: int, what: str) -> None:
        if t.num_rows != want:
            raise AssertionError(f"ducklake: {what} returned {t.num_rows} rows, expected {want}")

    def measure(self, files: int, reads: int, ids: list[int]) -> dict[str, Any]:
        latest, point, first = [], [], []
        for _ in range(reads):
            t0 = time.perf_counter()
            t = self._arrow("SELECT * FROM lake.t")
            latest.append(time.perf_counter() - t0)
            self._check(t, files * self.rows, "read latest")
        for x in ids:
            t0 = time.perf_counter()
            t = self._arrow("SELECT * FROM lake.t WHERE id = ?", [x])
            point.append(time.perf_counter() - t0)
            self._check(t, 1, f"id = {x}")
        for _ in range(reads):
            t0 = time.perf_counter()
            t = self._arrow(f"SELECT * FROM lake.t AT (VERSION => {self.first})")
            first.append(time.perf_counter() - t0)
            self._check(t, self.rows, "read of the first snapshot")
        return {
            "latest": statistics.median(latest),
            "point": statistics.median(point),
            "first": statistics.median(first),
        }


class Keys:
    """The DuckLake catalogs of the keys benchmark (the ``k_*`` commands above)."""

    def __init__(self) -> None:
        self.con: Any = None
        self.lakes: dict[str, str] = {}
        self.loaded: dict[str, list[pa.Table]] = {}

    def attach(self, root: str, inline: int | None) -> dict[str, Any]:
        import duckdb

        if self.con is None:
            self.con = duckdb.connect(
                config={
                    "allow_unsigned_extensions": "true",
                    "autoinstall_known_extensions": "false",
                    "autoload_known_extensions": "false",
                }
            )
            self.con.execute(f"LOAD '{extension_path()}'")
        os.makedirs(root, exist_ok=True)
        alias = f"k{len(self.lakes)}"
        meta, data = os.path.join(root, "meta.ducklake"), os.path.join(root, "data") + os.sep
        opts = f"DATA_PATH '{data}'" + (
            "" if inline is None else f", DATA_INLINING_ROW_LIMIT {inline}"
        )
        self.con.execute(f"ATTACH 'ducklake:{meta}' AS {alias} ({opts})")
        self.lakes[root] = alias
        return {"duckdb": duckdb.__version__, "extension": extension_path(), "alias": alias}

    def _name(self, root: str, table: str) -> str:
        return f"{self.lakes[root]}.{table}"

    def _insert(self, name: str, rows: pa.Table) -> float:
        self.con.register("incoming", rows)
        try:
            t0 = time.perf_counter()
            self.con.execute(f"INSERT INTO {name} SELECT id, name, amount FROM incoming")
            return time.perf_counter() - t0
        finally:
            self.con.unregister("incoming")

    def table(self, root: str, table: str, files: list[str]) -> dict[str, Any]:
        name = self._name(root, table)
        self.con.execute(f"CREATE TABLE {name} (id BIGINT NOT NULL, name VARCHAR, amount DOUBLE)")
        for f in files:
            with pa.memory_map(f) as src:
                self._insert(name, pa.ipc.open_file(src).read_all())
        return self.count(root, table)

    def load(self, file: str) -> dict[str, Any]:
        with pa.memory_map(file) as src:
            r = pa.ipc.open_file(src)
            self.loaded[file] = [
                pa.Table.from_batches([r.get_batch(i)]) for i in range(r.num_record_batches)
            ]
        return {"batches": len(self.loaded[file])}

    def insert(self, root: str, table: str, file: str, index: int) -> dict[str, Any]:
        return {"seconds": self._insert(self._name(root, table), self.loaded[file][index])}

    def merge(self, root: str, table: str, file: str) -> dict[str, Any]:
        name = self._name(root, table)
        with pa.memory_map(file) as f:
            src = pa.ipc.open_file(f).read_all()
        self.con.register("source", src)
        try:
            t0 = time.perf_counter()
            self.con.execute(
                f"MERGE INTO {name} AS tgt USING source AS src ON tgt.id = src.id "
                "WHEN MATCHED THEN UPDATE SET name = src.name, amount = src.amount "
                "WHEN NOT MATCHED THEN INSERT VALUES (src.id, src.name, src.amount)"
            )
            seconds = time.perf_counter() - t0
        finally:
            self.con.unregister("source")
        return {"seconds": seconds, **self.count(root, table)}

    def count(self, root: str, table: str) -> dict[str, Any]:
        rows = int(
            self.con.execute(f"SELECT count(*) FROM {self._name(root, table)}").fetchone()[0]
        )
        files = len(glob.glob(os.path.join(root, "data", "**", "*.parquet"), recursive=True))
        return {"rows": rows, "parquet_files": files}


def serve(lines: Any, out: Any) -> None:
    side = Side()
    keys = Keys()
    for line in lines:
        cmd = json.loads(line)
        op = cmd.pop("op")
        if op == "quit":
            break
        try:
            if op == "create":
                res = side.create(cmd["root"], cmd["rows"], cmd["per_day"])
            elif op == "append":
                res = side.appends(cmd["start"], cmd["stop"])
            elif op == "measure":
                res = side.measure(cmd["files"], cmd["reads"], cmd["ids"])
            elif op == "k_attach":
                res = keys.attach(cmd["root"], cmd["inline"])
            elif op == "k_table":
                res = keys.table(cmd["root"], cmd["table"], cmd["files"])
            elif op == "k_load":
                res = keys.load(cmd["file"])
            elif op == "k_insert":
                res = keys.insert(cmd["root"], cmd["table"], cmd["file"], cmd["index"])
            elif op == "k_merge":
                res = keys.merge(cmd["root"], cmd["table"], cmd["file"])
            elif op == "k_count":
                res = keys.count(cmd["root"], cmd["table"])
            else:
                raise ValueError(f"unknown command {op!r}")
        except Exception as exc:
            res = {"error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(res) + "\n")
        out.flush()


if __name__ == "__main__":
    serve(sys.stdin, sys.stdout)
