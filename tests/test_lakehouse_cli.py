"""``lakehouse`` / ``python -m lakehouse``: the lakehouse CLI, in process and as a subprocess.

In process: ``main([...])`` with capsys (stdout = the command's output, stderr
= remarks and errors). A few runs go through ``sys.executable -m lakehouse``
to prove the entry point, exit statuses, read-only directories, closed pipes
and the absence of tracebacks.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakehouse
from lakehouse.cli.main import main
from lakehouse.cli.parse import parse_age, parse_duration, parse_schema, parse_time
from lakehouse.cli.parser import build_parser, commands, reorder

ORDERS = "id:int64!,status:string,total:decimal128(10,2)"


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.out, captured.err


def cli_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any]:
    code, out, _ = cli(capsys, *args, "--json")
    return code, json.loads(out)


def run(*args: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, sys.executable, "-m", "lakehouse", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def orders(capsys: pytest.CaptureFixture[str], tmp_path: Path, rows: int = 3) -> str:
    """A lakehouse with sales.orders holding ``rows`` rows (appended from a CSV file)
    in a Parquet file (these tests damage, count and remove data files)."""
    url = str(tmp_path / "lh")
    assert cli(capsys, "init", url)[0] == 0
    assert cli(capsys, "ns", "create", url, "sales")[0] == 0
    create = ("table", "create", url, "sales.orders", "--schema", ORDERS)
    assert cli(capsys, *create, "--property", "inline.max_rows=0")[0] == 0
    csv = tmp_path / "orders.csv"
    lines = ["id,status,total"]
    lines += [f"{i},{'shipped' if i % 2 == 0 else 'open'},{i}.50" for i in range(1, rows + 1)]
    csv.write_text("\n".join(lines) + "\n")
    code, _, err = cli(capsys, "append", url, "sales.orders", str(csv))
    assert code == 0, err
    return url


def data_path(url: str, capsys: pytest.CaptureFixture[str]) -> Path:
    code, doc = cli_json(capsys, "files", url, "sales.orders")
    assert code == 0
    return Path(url) / "data" / doc["files"][0]["path"]


def flip(path: Path, start: int, length: int) -> None:
    data = bytearray(path.read_bytes())
    for i in range(start, min(start + length, len(data))):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


# ---------------------------------------------------------------------------
# definitions and versions
# ---------------------------------------------------------------------------
def test_cli_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = str(tmp_path / "lh")
    assert cli(capsys, "init", url, "--isolation", "serializable")[0] == 0
    assert cli(capsys, "ns", "create", url, "sales", "--property", "owner=ada")[0] == 0
    schema = "id:int64!,total:decimal128(10,2)"
    code, out, _ = cli(
        capsys, "table", "create", url, "sales.orders", "--schema", schema, "--primary-key", "id"
    )
    assert code == 0 and "version 2: create table sales.orders" in out
    assert cli(capsys, "table", "alter", url, "sales.orders", "--set", "tier=gold")[0] == 0
    assert cli(capsys, "view", "create", url, "sales.v", "--sql", "SELECT 1")[0] == 0

    code, out, _ = cli(capsys, "list", url)
    assert "sales/" in out and "orders  (table)" in out and "v  (view)" in out
    code, out, _ = cli(capsys, "describe", url, "sales.orders")
    assert "decimal128(10, 2)" in out and "not null" in out and "tier = gold" in out
    code, obj = cli_json(capsys, "table", "describe", url, "sales.orders")
    assert obj["columns"][0] == {"id": 1, "name": "id", "type": "int64", "nullable": False}
    assert obj["properties"] == {"tier": "gold"} and obj["primary_key"] == ["id"]

    code, hist = cli_json(capsys, "history", url)
    assert [h["version"] for h in hist] == [4, 3, 2, 1, 0]
    assert hist[0]["changes"][0]["op"] == "create" and hist[0]["isolation"] == "serializable"
    code, out, _ = cli(capsys, "history", url, "--limit", "2")
    assert "create view sales.v" in out and "version" in out.splitlines()[0]
    assert "create table" not in out  # only the newest 2

    code, doc = cli_json(capsys, "show", url, "--version", "1")
    assert doc["tree"] == {"sales": {"properties": {"owner": "ada"}, "tables": [], "views": []}}
    with lakehouse.open_reader(url) as r:
        t2 = r.version_info(2).created_ms
    code, doc = cli_json(capsys, "show", url, "--time", str(t2))
    assert doc["version"] >= 2
    code, doc = cli_json(capsys, "list", url, "--at", str(t2))
    assert doc["version"] >= 2

    code, doc = cli_json(capsys, "ns", "drop", url, "sales")
    assert code == 1 and doc["error"]["type"] == "NamespaceNotEmpty"
    assert doc["error"]["exit_code"] == 1 and "still holds" in doc["error"]["message"]
    code, out, _ = cli(capsys, "rollback", url, "1")
    assert code == 0 and "version 5" in out
    code, doc = cli_json(capsys, "table", "list", url, "sales")
    assert doc == []
    dest = str(tmp_path / "copy")
    assert cli(capsys, "export", url, dest, "--version", "4", "--kind", "minimal")[0] == 0
    code, doc = cli_json(capsys, "table", "list", dest, "sales")
    assert doc == ["orders"]
    code, out, _ = cli(capsys, "expire", url, "--keep-last", "2")
    assert "oldest retained version: 4" in out
    code, _, err = cli(capsys, "show", url, "--version", "1")
    assert code == 1 and "expired" in err

    # errors: exit 1 with a one-line message; --json turns it into a document
    code, _, err = cli(capsys, "table", "create", url, "nope.t", "--schema", "a:int64")
    assert code == 1 and "namespace 'nope' does not exist" in err
    assert err.count("\n") == 1 and err.startswith("lakehouse: ")
    code, _, err = cli(capsys, "table", "create", url, "sales.x", "--schema", "a:nonsense")
    assert code == 2 and "unknown column type" in err  # a bad argument: a usage error
    code, _, err = cli(capsys, "frobnicate", url)
    assert code == 2 and "invalid choice" in err


def test_old_argument_order_still_works(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = str(tmp_path / "lh")
    code, out, err = cli(capsys, url, "init")
    assert code == 0 and "created" in out and "old argument order" in err
    assert cli(capsys, url, "ns", "create", "sales")[0] == 0
    assert cli(capsys, url, "table", "create", "sales.t", "--schema", "a:int64")[0] == 0
    code, doc = cli_json(capsys, url, "table", "list", "sales")
    assert doc == ["t"]
    code, out, _ = cli(capsys, "--json", url, "history")
    assert [h["version"] for h in json.loads(out)] == [2, 1, 0]
    code, out, _ = cli(capsys, url, "show", "--version", "1")
    assert code == 0 and "sales/" in out
    # the new order prints no note; a URL that is a command name is read as the command
    code, _, err = cli(capsys, "list", url)
    assert code == 0 and err == ""
    names = commands(build_parser())
    assert reorder(["-o", "a=b", "/x", "--json", "ns", "list"], names) == [
        "-o", "a=b", "--json", "ns", "list", "/x"
    ]  # fmt: skip
    assert reorder(["list", "/x"], names) is None
    assert reorder(["/x", "nonsense"], names) is None


def test_parsers() -> None:
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
    t = parse_time("2024-01-01T00:00:00Z")
    assert not isinstance(t, int) and t.utcoffset() == timedelta(0)
    naive = parse_time("2024-01-01T00:00:00")
    assert not isinstance(naive, int) and naive.tzinfo is not None  # naive means UTC here
    assert parse_age("7d") == timedelta(days=7)
    assert parse_duration("90") == timedelta(seconds=90) == parse_duration("1.5m")
    for bad in ("nocolon", "a:nonsense", ""):
        with pytest.raises(ValueError):
            parse_schema(bad)
    for text in ("yesterday",):
        with pytest.raises(ValueError):
            parse_time(text)
    for text in ("-1", "soon", "nan"):
        with pytest.raises(ValueError):
            parse_duration(text)


def test_init_checks_an_existing_lakehouse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = str(tmp_path / "lh")
    code, doc = cli_json(capsys, "init", url, "--max-name-length", "64", "--property", "a=b")
    assert code == 0 and doc["created"] and doc["max_name_length"] == 64
    code, doc = cli_json(capsys, "init", url)  # no settings asked: nothing to disagree with
    assert code == 0 and not doc["created"] and doc["id"]
    code, doc = cli_json(capsys, "init", url, "--max-name-length", "64", "--property", "a=b")
    assert code == 0 and not doc["created"]
    code, _, err = cli(capsys, "init", url, "--isolation", "serializable", "--property", "a=c")
    assert code == 1 and "already exists" in err and "nothing was changed" in err
    assert "default isolation snapshot (asked: serializable)" in err and "'a': 'c'" in err
    with lakehouse.open_reader(url) as r:
        assert r.definition.default_isolation is lakehouse.Isolation.SNAPSHOT
        assert r.version == 0

    a_file = tmp_path / "a-file"
    a_file.write_text("not a lakehouse")
    code, _, err = cli(capsys, "init", str(a_file))
    assert code == 1 and "is a file" in err
    code, _, err = cli(capsys, "list", str(a_file))
    assert code == 1 and "not a directory" in err
    code, _, err = cli(capsys, "list", str(tmp_path / "missing"))
    assert code == 1 and "no lakehouse at" in err
    assert not (tmp_path / "missing").exists()  # reads create nothing


def test_info_and_history_of_data_versions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = orders(capsys, tmp_path)
    assert cli(capsys, "delete", url, "sales.orders", "id = 2")[0] == 0
    code, out, _ = cli(capsys, "info", url)
    assert code == 0 and "version            4" in out
    assert "2 rows in 1 file" in out and "1 more row marked deleted" in out
    code, doc = cli_json(capsys, "info", url)
    assert doc["tables"] == 1 and doc["namespaces"] == 1 and doc["version"] == 4
    assert doc["data"] == {"rows": 2, "files": 1, "deleted_rows": 1, "bytes": doc["data"]["bytes"]}
    code, out, _ = cli(capsys, "history", url, "--limit", "2")
    assert "delete sales.orders (rows deleted in 1 file)" in out
    assert "append sales.orders (+1 file)" in out and "alter table" not in out
    code, hist = cli_json(capsys, "history", url, "--limit", "1")
    assert hist[0]["data"] == [
        {
            "table": "sales.orders",
            "ops": ["delete"],
            "files_added": 0,
            "files_removed": 0,
            "files_with_new_deletes": 1,
        }
    ]


def test_usage_errors_honour_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = str(tmp_path / "lh")
    cli(capsys, "init", url)
    for args, needle in [
        (("history", url, "--limit", "-1"), "--limit: must be an integer >= 0"),
        (("head", url, "s.t", "-n", "x"), "-n: must be an integer >= 0"),
        (("expire", url), "give --keep-last N, --older-than AGE, or both"),
        (("ns", "create", url, "x", "--property", "novalue"), "expected KEY=VALUE"),
        (("show", url, "--version", "1", "--at", "5"), "not allowed with argument"),
        (("remove-orphans", url, "--older-than", "soon"), "neither seconds nor a duration"),
        ((), "a command is required"),
    ]:
        code, out, err = cli(capsys, "--json", *args)
        assert code == 2, args
        doc = json.loads(out)
        assert doc["error"]["type"] == "usage" and doc["error"]["exit_code"] == 2
        assert needle in doc["error"]["message"] and needle in err, (args, err)
    code, out, err = cli(capsys, "history", url, "--limit", "-1")
    assert code == 2 and out == ""


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "--version")
    assert code == 0 and out.strip() == f"lakehouse {lakehouse.__version__}"
    code, out, _ = cli(capsys, "--help")
    assert code == 0 and "remove-orphans" in out and "--takeover" in out
    code, out, _ = cli(capsys, "head", "--help")
    assert code == 0 and "--where" in out and "--columns" in out


# ---------------------------------------------------------------------------
# table data
# ---------------------------------------------------------------------------
def test_head_stats_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = orders(capsys, tmp_path, rows=30)
    code, out, _ = cli(capsys, "head", url, "sales.orders", "-n", "3")
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == ["id", "status", "total"]
    assert lines[2].split() == ["1", "open", "1.50"] and len(lines) == 6
    assert lines[-1] == "(first 3 rows of sales.orders at version 3; more match)"
    code, doc = cli_json(
        capsys,
        "head",
        url,
        "sales.orders",
        "--where",
        "status = 'shipped' AND total > 20",
        "--columns",
        "id,total",
    )
    assert doc["columns"] == ["id", "total"] and doc["count"] == 6 and not doc["truncated"]
    assert doc["rows"][0] == {"id": 20, "total": "20.50"}  # decimals exact, as strings
    code, doc = cli_json(capsys, "head", url, "sales.orders", "--version", "2")
    assert code == 0 and doc["rows"] == [] and doc["version"] == 2
    code, out, _ = cli(capsys, "head", url, "sales.orders", "--version", "2")
    assert out == "(0 rows of sales.orders at version 2)\n"
    code, _, err = cli(capsys, "head", url, "sales.orders", "--where", "nope = 1")
    assert code == 1 and "nope" in err
    code, _, err = cli(capsys, "head", url, "sales.orders", "--columns", "id,nope")
    assert code == 1 and "no column 'nope'" in err
    code, _, err = cli(capsys, "head", url, "sales.missing")
    assert code == 1 and "does not exist" in err

    code, doc = cli_json(capsys, "stats", url, "sales.orders")
    assert doc["rows"] == 30 and doc["files"] == 1 and doc["deleted_rows"] == 0
    code, doc = cli_json(capsys, "files", url, "sales.orders")
    (f,) = doc["files"]
    assert f["rows"] == 30 and f["deleted_rows"] == 0 and f["bytes"] > 0
    assert f["columns"]["id"] == {"min": 1, "max": 30, "null_count": 0}
    assert f["columns"]["total"]["min"] == "1.50"
    code, out, _ = cli(capsys, "files", url, "sales.orders")
    assert "1 data file" in out and f["path"] in out and "rows 30" in out
    code, out, _ = cli(capsys, "stats", url, "sales.orders", "--version", "2")
    assert "rows          0" in out


def test_delete_changes_compact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = orders(capsys, tmp_path, rows=10)
    code, out, _ = cli(capsys, "delete", url, "sales.orders", "status = 'shipped'")
    assert code == 0 and out == "version 4: deleted 5 rows from sales.orders\n"
    code, doc = cli_json(capsys, "delete", url, "sales.orders", "id > 100")
    assert code == 0 and doc == {"version": None, "table": "sales.orders", "deleted": 0}
    code, _, err = cli(capsys, "delete", url, "sales.orders", "total >>> 3")
    assert code == 1 and "lakehouse: " in err
    code, doc = cli_json(capsys, "stats", url, "sales.orders")
    assert (doc["rows"], doc["deleted_rows"], doc["version"]) == (5, 5, 4)

    code, doc = cli_json(capsys, "changes", url, "sales.orders", "4")
    assert doc["count"] == 5 and doc["end_version"] == 4
    assert {r["_change_type"] for r in doc["rows"]} == {"delete"}
    assert sorted(r["id"] for r in doc["rows"]) == [2, 4, 6, 8, 10]
    code, out, _ = cli(capsys, "changes", url, "sales.orders", "3", "3")
    assert "(10 changed rows of sales.orders in versions 3..3)" in out and "insert" in out
    code, _, err = cli(capsys, "changes", url, "sales.orders", "0")
    assert code == 1 and "start_version" in err

    code, doc = cli_json(capsys, "compact", url, "sales.orders")
    assert code == 0 and doc["version"] == 5 and doc["rows"] == 5
    assert (doc["files_removed"], doc["files_added"]) == (1, 1)
    code, doc = cli_json(capsys, "stats", url, "sales.orders")
    assert (doc["rows"], doc["deleted_rows"]) == (5, 0)
    code, out, _ = cli(capsys, "compact", url, "sales.orders")
    assert code == 0 and "nothing to compact" in out
    code, doc = cli_json(capsys, "head", url, "sales.orders", "--at", str(2**62))
    assert [r["id"] for r in doc["rows"]] == [1, 3, 5, 7, 9]


def test_append_formats(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = orders(capsys, tmp_path, rows=1)
    jl = tmp_path / "more.jsonl"
    jl.write_text('{"id": 2, "status": "open", "total": "2.25"}\n{"id": 3}\n')
    code, out, err = cli(capsys, "append", url, "sales.orders", str(jl))
    assert code == 0 and "appended 2 rows" in out, err
    pq.write_table(pa.table({"id": pa.array([4], pa.int32())}), tmp_path / "p.pq")  # widened
    code, doc = cli_json(capsys, "append", url, "sales.orders", str(tmp_path / "p.pq"))
    assert code == 0 and doc["appended"] == 1
    code, doc = cli_json(capsys, "head", url, "sales.orders")
    assert [r["id"] for r in doc["rows"]] == [1, 2, 3, 4]
    assert doc["rows"][2] == {"id": 3, "status": None, "total": None}
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 5, "color": "red"}\n')
    code, _, err = cli(capsys, "append", url, "sales.orders", str(bad))
    assert code == 1 and "color" in err
    code, _, err = cli(capsys, "append", url, "sales.orders", str(tmp_path / "x.txt"))
    assert code == 2 and "--format" in err
    code, _, err = cli(capsys, "append", url, "sales.orders", str(tmp_path / "no.csv"))
    assert code == 1 and "no such file" in err
    code, doc = cli_json(capsys, "stats", url, "sales.orders")
    assert doc["rows"] == 4


def test_remove_orphans(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = orders(capsys, tmp_path)
    live = data_path(url, capsys)
    orphan = live.parent / "0000000000001-00000000000000ab.parquet"  # named as made in 1970
    shutil.copy(live, orphan)
    fresh = live.parent / f"{9_999_999_999_999}-00000000000000cd.parquet"  # "just written"
    shutil.copy(live, fresh)
    code, doc = cli_json(capsys, "remove-orphans", url, "--older-than", "3600")
    assert code == 0 and doc["count"] == 1 and doc["removed"][0].endswith(orphan.name)
    assert not orphan.exists() and live.exists() and fresh.exists()
    code, out, _ = cli(capsys, "remove-orphans", url)
    assert code == 0 and "removed 0 orphan data files" in out and "3600 s" in out
    code, doc = cli_json(capsys, "head", url, "sales.orders")
    assert doc["count"] == 3


def test_export_refuses_a_non_empty_destination(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = orders(capsys, tmp_path)
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "keep.txt").write_text("mine")
    code, _, err = cli(capsys, "export", url, str(dest))
    assert code == 1 and "not empty" in err
    code, _, err = cli(capsys, "export", url, url)
    assert code == 1 and "onto itself" in err
    code, doc = cli_json(capsys, "export", url, str(tmp_path / "copy"))
    assert code == 0 and doc["files_copied"] == 1
    code, doc = cli_json(capsys, "head", str(tmp_path / "copy"), "sales.orders")
    assert doc["count"] == 3


# ---------------------------------------------------------------------------
# many processes: readers never fence, writers refuse a live writer
# ---------------------------------------------------------------------------
def test_reads_never_fence_and_writes_refuse_a_live_writer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = orders(capsys, tmp_path)
    app = lakehouse.open(url)  # the running application
    try:
        for args in (
            ("list", url),
            ("history", url),
            ("info", url),
            ("head", url, "sales.orders"),
            ("stats", url, "sales.orders"),
            ("verify", url),
        ):
            assert cli(capsys, *args)[0] == 0, args
        with app.begin() as txn:  # not fenced by any of them
            txn.create_namespace("app")
        code, _, err = cli(capsys, "ns", "create", url, "cli")
        assert code == 1 and "is being written by" in err and "--takeover" in err
        code, doc = cli_json(capsys, "delete", url, "sales.orders", "id = 1")
        assert code == 1 and doc["error"]["type"] == "writer_active"
        with app.begin() as txn:  # still the writer
            txn.create_namespace("app2")
        code, out, _ = cli(capsys, "list", url)  # the reader sees the application's commits
        assert "app2/" in out
        code, out, _ = cli(capsys, "ns", "create", url, "cli", "--takeover")
        assert code == 0 and "create namespace cli" in out
        with pytest.raises(lakehouse.FencedError), app.begin() as txn:
            txn.create_namespace("lost")
    finally:
        app.close()
    code, doc = cli_json(capsys, "ns", "list", url)
    assert doc == ["app", "app2", "cli", "sales"]


def test_writer_active_as_a_subprocess(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = orders(capsys, tmp_path)
    with lakehouse.open(url) as app:
        p = run("rollback", url, "1")
        assert p.returncode == 1 and "Traceback" not in p.stderr
        assert p.stderr.count("\n") == 1 and "is being written by pid" in p.stderr
        p = run("head", url, "sales.orders", "--json")
        assert p.returncode == 0 and json.loads(p.stdout)["count"] == 3
        assert app.version == 3
        with app.begin() as txn:
            txn.create_namespace("still_mine")


# ---------------------------------------------------------------------------
# no tracebacks: damaged bytes, read-only directories, closed pipes
# ---------------------------------------------------------------------------
def test_damaged_data_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = orders(capsys, tmp_path)
    path = data_path(url, capsys)
    assert cli(capsys, "verify", url)[0] == 0
    flip(path, 100, 200)
    code, out, err = cli(capsys, "head", url, "sales.orders")
    assert code == 3 and out == "" and err.count("\n") == 1
    assert "data is corrupt" in err and "lakehouse verify" in err
    code, doc = cli_json(capsys, "head", url, "sales.orders")
    assert code == 3 and doc["error"]["type"] == "corruption" and doc["error"]["exit_code"] == 3
    code, doc = cli_json(capsys, "verify", url)
    assert code == 3 and not doc["ok"]
    assert doc["damaged_objects"] == [f"data/{path.parent.name}/{path.name}"]
    code, out, err = cli(capsys, "stats", url, "sales.orders")  # stats need no file: fine
    assert code == 0
    path.unlink()
    code, doc = cli_json(capsys, "verify", url)
    assert code == 3 and doc["problems"][0]["kind"] == "missing"
    p = run("head", url, "sales.orders")
    assert p.returncode == 3 and "Traceback" not in p.stderr and p.stderr.count("\n") == 1


def test_verify_all_versions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file only older versions read is checked by --all-versions, not by default."""
    url = orders(capsys, tmp_path)
    old = data_path(url, capsys)
    assert cli(capsys, "delete", url, "sales.orders", "id = 1")[0] == 0
    assert cli(capsys, "compact", url, "sales.orders")[0] == 0
    assert data_path(url, capsys) != old and old.exists()
    flip(old, 100, 200)
    code, out, _ = cli(capsys, "verify", url)
    assert code == 0 and "OK: no damage found" in out
    code, doc = cli_json(capsys, "verify", url, "--all-versions")
    assert code == 3 and doc["damaged_objects"] == [f"data/{old.parent.name}/{old.name}"]
    assert doc["checked"]["trees"] == 6 and doc["checked"]["versions"] == 6


def test_damaged_metadata(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = orders(capsys, tmp_path)
    ssts = sorted((Path(url) / "meta" / "sst").iterdir())
    assert ssts
    for sst in ssts:
        flip(sst, 20, 40)
    for args in (("list", url), ("history", url), ("head", url, "sales.orders"), ("info", url)):
        code, _, err = cli(capsys, *args)
        assert code == 3 and "data is corrupt" in err and err.count("\n") == 1, (args, err)
    code, doc = cli_json(capsys, "verify", url)
    assert code == 3 and any(o.startswith("meta/sst/") for o in doc["damaged_objects"])
    p = run("verify", url)
    assert p.returncode == 3 and "Traceback" not in p.stderr and "DAMAGED" in p.stdout


def _read_only_prefix() -> tuple[str, ...]:
    """How to run a process that the permission bits bind (root ignores them)."""
    if os.geteuid() != 0:
        return ()
    setpriv = shutil.which("setpriv")
    drop = ("--bounding-set", "-dac_override,-dac_read_search")
    if setpriv is None or subprocess.run([setpriv, *drop, "true"]).returncode != 0:
        pytest.skip("root without setpriv: cannot make a directory read-only")
    return (setpriv, *drop)


def test_read_only_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = orders(capsys, tmp_path)
    prefix = _read_only_prefix()
    paths = [tmp_path, *tmp_path.rglob("*")]
    for path in paths:
        path.chmod(path.stat().st_mode & ~0o222)
    try:
        for args in (
            ("list", url),
            ("head", url, "sales.orders", "-n", "1"),
            ("changes", url, "sales.orders", "3"),
            ("verify", url),
        ):
            p = run(*args, prefix=prefix)
            assert p.returncode == 0 and p.stderr == "", (args, p.stderr)
        p = run("delete", url, "sales.orders", "id = 1", prefix=prefix)
        assert p.returncode == 1 and "Traceback" not in p.stderr
        assert "permission denied" in p.stderr and "write access" in p.stderr
        p = run("init", str(tmp_path / "new"), prefix=prefix)
        assert p.returncode == 1 and "permission denied" in p.stderr, p.stderr
        assert "Traceback" not in p.stderr
    finally:
        for path in paths:
            path.chmod(path.stat().st_mode | 0o200)
    assert cli_json(capsys, "stats", url, "sales.orders")[1]["rows"] == 3  # nothing deleted


def test_closed_pipe_is_quiet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = orders(capsys, tmp_path, rows=3000)
    for args in (
        ("head", url, "sales.orders", "-n", "3000"),
        ("changes", url, "sales.orders", "1"),
    ):
        proc = subprocess.Popen(
            [sys.executable, "-m", "lakehouse", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline()
        proc.stdout.close()  # `| head -1`
        err = proc.stderr.read().decode()
        proc.stderr.close()
        assert proc.wait(timeout=120) in (0, 141)
        assert "Traceback" not in err and "Exception ignored" not in err, err


def test_module_runs_as_a_script(tmp_path: Path) -> None:
    url = str(tmp_path / "lh")
    r = run("--json", "init", url)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["version"] == 0
    r = run("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"lakehouse {lakehouse.__version__}"
    r = run(url, "list")  # the old order, as a script
    assert r.returncode == 0 and "(no namespaces)" in r.stdout and "old argument order" in r.stderr
    r = run("history", url, "--limit", "-1", "--json")
    assert r.returncode == 2 and json.loads(r.stdout)["error"]["type"] == "usage"


# ---------------------------------------------------------------------------
# S3
# ---------------------------------------------------------------------------
@pytest.mark.s3
def test_s3_with_storage_options(
    s3_url: tuple[str, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, options = s3_url
    opts = [arg for k, v in options.items() for arg in ("-o", f"{k}={v}")]
    code, _, err = cli(capsys, "list", url, *opts)
    assert code == 1 and "no lakehouse at" in err
    assert cli(capsys, "init", url, *opts)[0] == 0
    assert cli(capsys, "ns", "create", url, "s", *opts)[0] == 0
    assert cli(capsys, "table", "create", url, "s.t", "--schema", "a:int64", *opts)[0] == 0
    csv = tmp_path / "a.csv"
    csv.write_text("a\n1\n2\n3\n")
    assert cli(capsys, "append", url, "s.t", str(csv), *opts)[0] == 0
    assert cli(capsys, "delete", url, "s.t", "a = 2", *opts)[0] == 0
    code, doc = cli_json(capsys, "head", url, "s.t", *opts)
    assert [r["a"] for r in doc["rows"]] == [1, 3]
    code, doc = cli_json(capsys, "verify", url, *opts)
    assert code == 0 and doc["ok"] and doc["checked"]["data_files"] == 1
    code, doc = cli_json(capsys, "info", url, *opts)
    assert doc["data"]["rows"] == 2 and doc["data_url"].startswith("s3://")


# ---------------------------------------------------------------------------
# what a newcomer hit (issue 19, part 8)
# ---------------------------------------------------------------------------
def test_update_merge_restore_clone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = orders(capsys, tmp_path, rows=4)  # version 3
    code, doc = cli_json(
        capsys, "update", url, "sales.orders", "id >= 3", "--set", "status='void'",
        "--set", "total=total * 2",
    )  # fmt: skip
    assert code == 0 and doc == {"version": 4, "table": "sales.orders", "updated": 2}
    code, out, _ = cli(capsys, "update", url, "sales.orders", "id > 99", "--set", "total=0")
    assert code == 0 and "nothing updated" in out
    code, _, err = cli(capsys, "update", url, "sales.orders", "id = 1", "--set", "colour='red'")
    assert code == 1 and "colour" in err
    code, _, err = cli(capsys, "update", url, "sales.orders", "id = 1")
    assert code == 2 and "--set" in err
    code, doc = cli_json(capsys, "head", url, "sales.orders")
    assert [(r["id"], r["status"], r["total"]) for r in doc["rows"]] == [
        (1, "open", "1.50"), (2, "shipped", "2.50"), (3, "void", "7.00"), (4, "void", "9.00"),
    ]  # fmt: skip

    src = tmp_path / "changes.csv"
    src.write_text("id,status,total\n2,lost,0.25\n9,new,9.99\n")
    code, doc = cli_json(capsys, "merge", url, "sales.orders", str(src), "--on", "id")
    assert code == 0 and doc["version"] == 5 and doc["on"] == ["id"]
    assert (doc["inserted"], doc["updated"], doc["deleted"]) == (1, 1, 0)
    code, _, err = cli(capsys, "merge", url, "sales.orders", str(src))  # no key to merge on
    assert code == 2 and "--on" in err
    gone = tmp_path / "gone.parquet"
    pq.write_table(pa.table({"id": [9, 4], "status": ["x", "x"]}), gone)
    code, out, _ = cli(
        capsys, "merge", url, "sales.orders", str(gone), "--on", "id",
        "--when-matched", "delete", "--when-not-matched", "ignore",
    )  # fmt: skip
    assert code == 0 and "version 6" in out and "2 rows deleted" in out
    code, doc = cli_json(capsys, "head", url, "sales.orders")
    assert sorted((r["id"], r["status"]) for r in doc["rows"]) == [
        (1, "open"), (2, "lost"), (3, "void"),
    ]  # fmt: skip

    code, out, _ = cli(capsys, "restore", url, "sales.orders", "3")
    assert code == 0 and out == "version 7: sales.orders restored to its state at version 3\n"
    code, doc = cli_json(capsys, "head", url, "sales.orders")
    assert [r["status"] for r in sorted(doc["rows"], key=lambda r: r["id"])] == [
        "open", "shipped", "open", "shipped",
    ]  # fmt: skip
    code, _, err = cli(capsys, "restore", url, "sales.orders", "99")
    assert code == 1 and "99" in err

    code, doc = cli_json(capsys, "clone", url, "sales.orders", "sales.v4", "--version", "4")
    assert code == 0 and doc == {
        "version": 8, "source": "sales.orders", "target": "sales.v4", "source_version": 4,
    }  # fmt: skip
    code, doc = cli_json(capsys, "head", url, "sales.v4")
    assert [r["status"] for r in sorted(doc["rows"], key=lambda r: r["id"])] == [
        "open", "shipped", "void", "void",
    ]  # fmt: skip
    code, out, _ = cli(capsys, "clone", url, "sales.orders", "sales.now")
    assert code == 0 and "cloned sales.orders (as of version 8) as sales.now" in out
    code, _, err = cli(capsys, "clone", url, "sales.orders", "sales.v4")
    assert code == 1 and "already exists" in err
    code, doc = cli_json(capsys, "history", url, "--limit", "1")
    assert doc[0]["version"] == 9


def test_create_if_not_exists(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = orders(capsys, tmp_path, rows=1)
    code, out, _ = cli(capsys, "ns", "create", url, "sales", "--if-not-exists")
    assert code == 0 and out == "namespace sales exists; left as it is (version 3)\n"
    code, doc = cli_json(
        capsys, "table", "create", url, "sales.orders", "--schema", "x:string", "--if-not-exists"
    )
    assert code == 0 and doc["exists"] and doc["version"] == 3
    code, doc = cli_json(capsys, "describe", url, "sales.orders")
    assert [c["name"] for c in doc["columns"]] == ["id", "status", "total"]
    code, out, _ = cli(capsys, "table", "create", url, "sales.b", "--schema", "x:string",
                       "--if-not-exists")  # fmt: skip
    assert code == 0 and out == "version 4: create table sales.b\n"


def test_compact_progress(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = orders(capsys, tmp_path, rows=2)
    csv = tmp_path / "orders.csv"
    for _ in range(3):
        assert cli(capsys, "append", url, "sales.orders", str(csv))[0] == 0
    code, doc = cli_json(capsys, "files", url, "sales.orders")
    total = sum(f["bytes"] for f in doc["files"])
    code, out, err = cli(capsys, "compact", url, "sales.orders", "--progress")
    assert code == 0 and "compacted sales.orders: 4 files -> 1 file" in out
    frames = [f.strip() for f in err.split("\r") if f.strip()]
    assert frames and all(f.startswith("compact [") for f in frames) and err.endswith("\n")
    from kvstore.cli.codec import human_bytes

    size = human_bytes(total)  # all four files are rewritten: the bar counts their bytes
    assert "100%" in frames[-1] and f"{size}/{size}" in frames[-1]
    for _ in range(2):
        assert cli(capsys, "append", url, "sales.orders", str(csv))[0] == 0
    code, out, err = cli(capsys, "compact", url, "sales.orders", "--no-progress")
    assert code == 0 and "compacted" in out and err == ""
    code, out, err = cli(capsys, "compact", url, "sales.orders", "--progress")
    assert code == 0 and "nothing to compact" in out and err == ""  # no bar for no work


def test_csv_errors_name_the_row_and_the_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = orders(capsys, tmp_path, rows=1)
    bad = tmp_path / "bad.csv"
    rows = [f"{i},open,{i}.25" for i in range(1, 17)] + ["17,open,lots", "18,open,1.00"]
    bad.write_text("id,status,total\n" + "\n".join(rows) + "\n")
    code, _, err = cli(capsys, "append", url, "sales.orders", str(bad))
    assert code == 1 and "row 17, column 'total'" in err and "lots" in err
    empty = tmp_path / "empty_id.csv"
    empty.write_text("id,status,total\n5,open,1.00\n,open,2.00\n")
    code, _, err = cli(capsys, "append", url, "sales.orders", str(empty))
    assert code == 1 and "row 2, column 'id'" in err and "NOT NULL" in err
    code, _, err = cli(capsys, "merge", url, "sales.orders", str(bad), "--on", "id")
    assert code == 1 and "row 17, column 'total'" in err
    code, doc = cli_json(capsys, "stats", url, "sales.orders")
    assert doc["rows"] == 1 and doc["version"] == 3


def test_storage_options_take_json_values() -> None:
    from lakehouse.cli.parse import storage_option

    assert storage_option("anon=true") == ("anon", True)
    assert storage_option("anon=False") == ("anon", False)
    assert storage_option('config_kwargs={"connect_timeout": 1}') == (
        "config_kwargs",
        {"connect_timeout": 1},
    )
    assert storage_option("max_concurrency=4") == ("max_concurrency", 4)
    assert storage_option("endpoint_url=http://127.0.0.1:9000") == (
        "endpoint_url",
        "http://127.0.0.1:9000",
    )
    assert storage_option('key="12345"') == ("key", "12345")  # quoted: kept a string
    assert storage_option("k=NaN") == ("k", "NaN") and storage_option("k=") == ("k", "")
    args = build_parser().parse_args(
        ["list", "s3://b/p", "-o", "anon=true", "-o", 'client_kwargs={"region_name": "eu"}']
    )
    assert dict(args.storage_options) == {"anon": True, "client_kwargs": {"region_name": "eu"}}
    from kvstore.cli.main import _storage_option as kv_option  # the sibling CLI agrees

    for text in ("anon=true", 'config_kwargs={"connect_timeout": 1}', "n=4", "u=http://x", "k=NaN"):
        assert kv_option(text) == storage_option(text)
