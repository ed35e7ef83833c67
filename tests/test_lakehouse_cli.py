"""Smoke tests of ``python -m lakehouse`` (in-process through ``main``, plus one subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pytest

import lakehouse
from lakehouse.__main__ import main, parse_age, parse_schema, parse_time


def cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_end_to_end(tmp_path, capsys):
    url = str(tmp_path / "lh")
    assert cli(capsys, url, "init", "--isolation", "serializable")[0] == 0
    assert cli(capsys, url, "ns", "create", "sales", "--property", "owner=ada")[0] == 0
    schema = "id:int64!,total:decimal128(10,2)"
    code, out, _ = cli(
        capsys, url, "table", "create", "sales.orders", "--schema", schema, "--primary-key", "id"
    )
    assert code == 0 and "version 2: create table sales.orders" in out
    assert cli(capsys, url, "table", "alter", "sales.orders", "--set", "tier=gold")[0] == 0
    assert cli(capsys, url, "view", "create", "sales.v", "--sql", "SELECT 1")[0] == 0

    code, out, _ = cli(capsys, url, "list")
    assert "sales/" in out and "orders  (table)" in out and "v  (view)" in out
    code, out, _ = cli(capsys, url, "describe", "sales.orders")
    assert "decimal128(10, 2)" in out and "not null" in out and "tier = gold" in out
    code, out, _ = cli(capsys, "--json", url, "table", "describe", "sales.orders")
    obj = json.loads(out)
    assert obj["columns"][0] == {"id": 1, "name": "id", "type": "int64", "nullable": False}
    assert obj["properties"] == {"tier": "gold"} and obj["primary_key"] == ["id"]

    code, out, _ = cli(capsys, "--json", url, "history")
    hist = json.loads(out)
    assert [h["version"] for h in hist] == [4, 3, 2, 1, 0]
    assert hist[0]["changes"][0]["op"] == "create" and hist[0]["isolation"] == "serializable"
    code, out, _ = cli(capsys, url, "history", "--limit", "2")
    assert "create view sales.v" in out and "version" in out.splitlines()[0]

    code, out, _ = cli(capsys, "--json", url, "show", "--version", "1")
    assert json.loads(out)["tree"] == {
        "sales": {"properties": {"owner": "ada"}, "tables": [], "views": []}
    }
    with lakehouse.open(url) as lh:
        t2 = lh.version_info(2).created_ms
    code, out, _ = cli(capsys, "--json", url, "show", "--time", str(t2))
    assert json.loads(out)["version"] >= 2

    code, out, _ = cli(capsys, "--json", url, "ns", "drop", "sales")
    assert code == 1 and json.loads(out)["error"] == "NamespaceNotEmpty"
    code, out, _ = cli(capsys, url, "rollback", "1")
    assert code == 0 and "version 5" in out
    code, out, _ = cli(capsys, "--json", url, "table", "list", "sales")
    assert json.loads(out) == []
    dest = str(tmp_path / "copy")
    assert cli(capsys, url, "export", dest, "--version", "4", "--kind", "minimal")[0] == 0
    code, out, _ = cli(capsys, "--json", dest, "table", "list", "sales")
    assert json.loads(out) == ["orders"]
    code, out, _ = cli(capsys, url, "expire", "--keep-last", "2")
    assert "oldest retained version: 4" in out
    code, out, _ = cli(capsys, url, "show", "--version", "1")
    assert code == 1

    # errors: exit 1 with a message; --json turns it into an object
    code, _, err = cli(capsys, url, "table", "create", "nope.t", "--schema", "a:int64")
    assert code == 1 and "namespace 'nope' does not exist" in err
    code, _, err = cli(capsys, url, "table", "create", "sales.x", "--schema", "a:nonsense")
    assert code == 1 and "unknown column type" in err
    with pytest.raises(SystemExit) as exit_info:
        main([url, "frobnicate"])
    assert exit_info.value.code == 2
    capsys.readouterr()


def test_parsers():
    s = parse_schema("id:int64!, tags:list<string>, amt:decimal(12, 3), at:timestamp[ms]")
    assert s == pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            ("tags", pa.list_(pa.string())),
            ("amt", pa.decimal128(12, 3)),
            ("at", pa.timestamp("ms")),
        ]
    )
    assert parse_time("1700000000000") == 1_700_000_000_000
    assert parse_time("2024-01-01T00:00:00Z").utcoffset().total_seconds() == 0
    assert parse_time("2024-01-01T00:00:00").tzinfo is not None  # naive means UTC here
    assert parse_age("7d").days == 7
    with pytest.raises(ValueError):
        parse_schema("nocolon")
    with pytest.raises(ValueError):
        parse_time("yesterday")


def test_module_runs_as_a_script(tmp_path):
    url = str(tmp_path / "lh")
    r = subprocess.run(
        [sys.executable, "-m", "lakehouse", "--json", url, "init"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["version"] == 0
