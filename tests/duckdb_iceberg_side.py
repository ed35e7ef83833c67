"""DuckDB's side of the Iceberg client tests, run by the DuckDB 1.5.5 interpreter.

The tests run this script with `.venv-ducklake/bin/python` (duckdb==1.5.5 with the
iceberg, avro and httpfs extensions as pip packages; the lakehouse is not importable
there). It reads one JSON request on stdin and writes one JSON answer on stdout:

    {"setup": ["<SQL run first, e.g. CREATE SECRET ...>"],   (optional)
     "requests": [
        {"mode": "scan", "metadata": "/abs/.../x.metadata.json", "snapshot": 7 | null,
         "where": "<SQL condition>" | null},
        {"mode": "snapshots", "metadata": "/abs/.../x.metadata.json"},
        {"mode": "rest", "endpoint": "http://127.0.0.1:PORT", "token": "t" | null,
         "namespace": "ns" | "ns@v7", "table": "t", "snapshot": 7 | null, "where": ...,
         "at": "TIMESTAMP => TIMESTAMPTZ '...'" | null},
        {"mode": "rest_tables", "endpoint": ..., "token": ...},
        {"mode": "sql", "sql": "SELECT ..."}
    ]}
    ->
    {"results": [{"ok": true, "ipc": "<base64 Arrow IPC stream>"} |
                 {"ok": true, "value": [...]} | {"ok": false, "error": "..."}]}

Rows travel as an Arrow IPC stream (exact values: decimals, timestamps and floats are not
formatted). Extensions are loaded by path from their packages, with autoinstall and
autoload off, so nothing is fetched from the network.
"""

from __future__ import annotations

import base64
import importlib
import json
import pathlib
import sys
from typing import Any

import duckdb
import pyarrow as pa

EXTENSIONS = ("avro", "httpfs", "iceberg")  # iceberg's LOAD needs avro; REST needs httpfs


def extension_path(name: str) -> pathlib.Path:
    package = importlib.import_module(f"duckdb_extension_{name}")
    return next(pathlib.Path(package.__path__[0]).rglob(f"{name}.duckdb_extension"))


def connect() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(
        config={
            "allow_unsigned_extensions": "true",
            "autoinstall_known_extensions": "false",
            "autoload_known_extensions": "false",
        }
    )
    for name in EXTENSIONS:
        con.execute(f"LOAD '{extension_path(name)}'")
    con.execute("SET TimeZone = 'UTC'")
    return con


def quote_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def quote_ident(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def ipc(table: pa.Table) -> str:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return base64.b64encode(sink.getvalue().to_pybytes()).decode("ascii")


def where(request: dict[str, Any]) -> str:
    return f" WHERE {request['where']}" if request.get("where") else ""


class Session:
    def __init__(self) -> None:
        self.con = connect()
        self.catalogs: dict[tuple[str, str | None], str] = {}

    def catalog(self, endpoint: str, token: str | None) -> str:
        key = (endpoint, token)
        if key not in self.catalogs:
            name = f"cat{len(self.catalogs)}"
            auth = (
                f"TOKEN {quote_literal(token)}"
                if token is not None
                else "AUTHORIZATION_TYPE 'none'"
            )
            self.con.execute(
                f"ATTACH '' AS {name} (TYPE iceberg, ENDPOINT {quote_literal(endpoint)}, {auth})"
            )
            self.catalogs[key] = name
        return self.catalogs[key]

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        mode = request["mode"]
        if mode == "scan":
            args = quote_literal(request["metadata"])
            if request.get("snapshot") is not None:
                args += f", snapshot_from_id={int(request['snapshot'])}"
            sql = f"SELECT * FROM iceberg_scan({args})" + where(request)
            return {"ok": True, "ipc": ipc(self.arrow(sql))}
        if mode == "sql":  # anything else, e.g. iceberg_metadata('<path>')
            return {"ok": True, "ipc": ipc(self.arrow(request["sql"]))}
        if mode == "snapshots":
            rows = self.con.execute(
                "SELECT snapshot_id FROM iceberg_snapshots("
                f"{quote_literal(request['metadata'])}) ORDER BY snapshot_id"
            ).fetchall()
            return {"ok": True, "value": [r[0] for r in rows]}
        if mode == "rest":
            cat = self.catalog(request["endpoint"], request.get("token"))
            name = f"{cat}.{quote_ident(request['namespace'])}.{quote_ident(request['table'])}"
            sql = f"SELECT * FROM {name}"
            if request.get("snapshot") is not None:
                sql += f" AT (VERSION => {int(request['snapshot'])})"
            elif request.get("at"):  # e.g. "TIMESTAMP => TIMESTAMPTZ '2026-...'"
                sql += f" AT ({request['at']})"
            sql += where(request)
            return {"ok": True, "ipc": ipc(self.arrow(sql))}
        if mode == "rest_tables":
            cat = self.catalog(request["endpoint"], request.get("token"))
            rows = self.con.execute(
                "SELECT schema, name FROM (SHOW ALL TABLES) WHERE database = ? "
                "ORDER BY schema, name",
                [cat],
            ).fetchall()
            return {"ok": True, "value": [[s, n] for s, n in rows]}
        raise ValueError(f"unknown mode {mode!r}")

    def arrow(self, sql: str) -> pa.Table:
        return self.con.execute(sql).to_arrow_table()


def main() -> None:
    doc = json.load(sys.stdin)
    session = Session()
    for sql in doc.get("setup", []):  # e.g. CREATE SECRET for an S3 endpoint
        session.con.execute(sql)
    requests = doc["requests"]
    results = []
    for request in requests:
        try:
            results.append(session.run(request))
        except duckdb.Error as e:
            results.append({"ok": False, "error": f"{type(e).__name__}: {e}"})
    json.dump({"results": results}, sys.stdout)


if __name__ == "__main__":
    main()
