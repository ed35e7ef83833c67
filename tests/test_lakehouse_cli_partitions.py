"""The CLI on partitioned tables: ``partitions``, ``files --partition``, ``table
create/alter --partition-by/--sort-key`` and ``describe``.

Runs the CLI in process (``main([...])`` with capsys) as tests/test_lakehouse_cli.py
does, on real lakehouses with real Parquet files; expected values come from the
rows written and from the Python API (``lh.list_data_files``), never from the CLI
itself.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakehouse
from lakehouse.cli.main import main
from lakehouse.cli.parse import partition_filter
from lakehouse.cli.partitions import human, parse_value
from lakehouse.partition import PartitionField, Transform

EVENTS = "id:int64!,ts:timestamp[us],country:string"
EPOCH = dt.date(1970, 1, 1)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.out, captured.err


def cli_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any]:
    code, out, _ = cli(capsys, *args, "--json")
    return code, json.loads(out)


# rows of sales.events: (id, ts, country); one null ts, one country holding "/" and "="
ROWS = [
    (1, "2024-01-02 10:00:00", "DE"),
    (2, "2024-01-02 11:30:00", "FR"),
    (3, "2024-01-03 00:00:00", "DE"),
    (4, "", "DE"),
    (5, "2024-01-02 12:00:00", "DE"),
    (6, "2024-01-02 13:00:00", "a/b=c"),
    (7, "1969-12-31 23:00:00", "FR"),
]


def write_csv(path: Path, rows: list[tuple[int, str, str]]) -> str:
    path.write_text("id,ts,country\n" + "".join(f"{i},{t},{c}\n" for i, t, c in rows))
    return str(path)


def events(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, *partition_by: str, sort: str = "id"
) -> str:
    """A lakehouse with sales.events partitioned by ``partition_by``, holding ROWS."""
    url = str(tmp_path / "lh")
    assert cli(capsys, "init", url)[0] == 0
    assert cli(capsys, "ns", "create", url, "sales")[0] == 0
    args = ["table", "create", url, "sales.events", "--schema", EVENTS, "--sort-key", sort]
    for p in partition_by:
        args += ["--partition-by", p]
    code, _, err = cli(capsys, *args)
    assert code == 0, err
    code, _, err = cli(capsys, "append", url, "sales.events", write_csv(tmp_path / "e.csv", ROWS))
    assert code == 0, err
    return url


def day_of(ts: str) -> int | None:
    return None if not ts else (dt.date.fromisoformat(ts[:10]) - EPOCH).days


def api_files(url: str, table: str = "sales.events", version: int | None = None) -> list[Any]:
    with lakehouse.open_reader(url) as r:
        view = r.at_version(r.version if version is None else version)
        with view as v:
            return list(v.list_data_files(table))


# ---------------------------------------------------------------------------
# partitions
# ---------------------------------------------------------------------------
def test_partitions_lists_each_partition_sorted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = events(capsys, tmp_path, "day(ts)", "country")
    code, doc = cli_json(capsys, "partitions", url, "sales.events")
    assert code == 0 and doc["partition_by"] == ["day(ts)", "country"] and doc["spec_id"] == 0
    expected = Counter((day_of(t), c) for _, t, c in ROWS)
    got = [(p["partition"]["ts_day"], p["partition"]["country"]) for p in doc["partitions"]]
    assert Counter(got) == Counter(expected.keys())  # one entry per partition
    # sorted by values, nulls first (the order of the table-state keys)
    order = [((v is not None, v or 0), c) for v, c in got]
    assert order == sorted(order)
    assert got[0][0] is None
    for p in doc["partitions"]:
        key = (p["partition"]["ts_day"], p["partition"]["country"])
        assert p["rows"] == expected[key] and p["deleted_rows"] == 0 and p["spec_id"] == 0
    # files and bytes agree with the data files the Python API lists
    files = api_files(url)
    assert sum(p["files"] for p in doc["partitions"]) == len(files)
    assert sum(p["bytes"] for p in doc["partitions"]) == sum(f.bytes for f in files)

    # the text form spells days as dates, escapes '/' and '=' in values
    code, out, _ = cli(capsys, "partitions", url, "sales.events")
    lines = out.splitlines()
    assert lines[0].startswith("sales.events at version 3, partitioned by day(ts), country: ")
    assert f"{len(expected)} partitions, {len(files)} data files, {len(ROWS)} rows" in lines[0]
    assert lines[1].split() == ["spec", "partition", "files", "rows", "deleted", "bytes"]
    body = [line.split() for line in lines[3:]]
    assert len(body) == len(expected)
    paths = [b[1] for b in body]
    assert paths[0] == "ts_day=null/country=DE"
    assert "ts_day=2024-01-02/country=a%2Fb%3Dc" in paths
    assert "ts_day=1969-12-31/country=FR" in paths  # before 1970: a negative day, as a date
    assert [b[1] for b in body] == [p["path"] for p in doc["partitions"]]


def test_partitions_counts_deleted_rows_and_time_travel(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = events(capsys, tmp_path, "day(ts)")
    code, _, err = cli(capsys, "delete", url, "sales.events", "id = 1")
    assert code == 0, err
    code, doc = cli_json(capsys, "partitions", url, "sales.events")
    day = {p["path"]: p for p in doc["partitions"]}["ts_day=2024-01-02"]
    n = sum(1 for _, t, _ in ROWS if t.startswith("2024-01-02"))
    assert day["rows"] == n - 1 and day["deleted_rows"] == 1
    assert sum(p["rows"] for p in doc["partitions"]) == len(ROWS) - 1
    code, doc = cli_json(capsys, "partitions", url, "sales.events", "--version", "3")
    day = {p["path"]: p for p in doc["partitions"]}["ts_day=2024-01-02"]
    assert doc["version"] == 3 and day["rows"] == n and day["deleted_rows"] == 0


def test_unpartitioned_table_has_one_partition(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = str(tmp_path / "lh")
    for args in (("init", url), ("ns", "create", url, "s")):
        assert cli(capsys, *args)[0] == 0
    assert cli(capsys, "table", "create", url, "s.t", "--schema", EVENTS)[0] == 0
    code, doc = cli_json(capsys, "partitions", url, "s.t")  # empty: one empty partition
    assert code == 0 and doc["partition_by"] == []
    assert doc["partitions"] == [
        {
            "spec_id": 0,
            "partition": {},
            "path": "",
            "files": 0,
            "rows": 0,
            "deleted_rows": 0,
            "bytes": 0,
        }
    ]
    for _ in range(2):
        assert cli(capsys, "append", url, "s.t", write_csv(tmp_path / "e.csv", ROWS))[0] == 0
    code, doc = cli_json(capsys, "partitions", url, "s.t")
    code, stats = cli_json(capsys, "stats", url, "s.t")
    (only,) = doc["partitions"]
    assert only["files"] == stats["files"] == 2 and only["rows"] == stats["rows"]
    assert only["bytes"] == stats["bytes"] and only["partition"] == {}
    code, out, _ = cli(capsys, "partitions", url, "s.t")
    assert "partitioned by nothing (unpartitioned): 1 partition, 2 data files" in out
    assert "(unpartitioned)" in out.splitlines()[3]
    # files of an unpartitioned table show no partition line; their JSON an empty one
    code, out, _ = cli(capsys, "files", url, "s.t")
    assert "  partition " not in out
    code, doc = cli_json(capsys, "files", url, "s.t")
    assert all(f["partition"] == {} and f["spec_id"] == 0 for f in doc["files"])
    code, doc = cli_json(capsys, "files", url, "s.t", "--partition", "ts_day=2024-01-02")
    assert code == 1 and doc["error"]["type"] == "ValueError"
    assert "no partition field 'ts_day'" in doc["error"]["message"]
    assert "not partitioned" in doc["error"]["message"]


# ---------------------------------------------------------------------------
# files --partition
# ---------------------------------------------------------------------------
def test_files_partition_filter(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = events(capsys, tmp_path, "day(ts)", "country")
    files = api_files(url)
    by_path = {f.path: f for f in files}

    def chosen(*filters: str) -> set[str]:
        args = ["files", url, "sales.events"]
        for f in filters:
            args += ["--partition", f]
        code, doc = cli_json(capsys, *args)
        assert code == 0, doc
        for f in doc["files"]:  # each file's JSON carries its partition as stored
            assert f["partition"] == dict(by_path[f["path"]].partition)
        return {f["path"] for f in doc["files"]}

    jan2 = day_of("2024-01-02")
    want = {f.path for f in files if f.partition["ts_day"] == jan2}
    assert chosen("ts_day=2024-01-02") == want and len(want) == 3  # ids 1 and 5 share one
    de = {f.path for f in files if f.partition["country"] == "DE"}
    assert chosen("ts_day=2024-01-02", "country=DE") == want & de  # AND-ed
    assert chosen("ts_day=2024-01-02/country=DE") == want & de  # the path spelling
    assert chosen("country=DE/ts_day=2024-01-02") == want & de
    assert len(want & de) == 1 and by_path[(want & de).pop()].rows == 2
    odd = {f.path for f in files if f.partition["country"] == "a/b=c"}
    assert chosen("country=a%2Fb%3Dc") == odd and len(odd) == 1  # escaped as printed
    nulls = {f.path for f in files if f.partition["ts_day"] is None}
    assert chosen("ts_day=null") == nulls and len(nulls) == 1
    assert chosen("ts_day=2030-01-01") == set()
    assert chosen("country=DE", "country=FR") == set()  # one field, two values

    # text: each file shows its partition; the header says what was chosen
    code, out, _ = cli(capsys, "files", url, "sales.events", "--partition", "country=a%2Fb%3Dc")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("sales.events at version 3: 1 data file in partitions matching ")
    assert lines[0].split("matching ")[1].startswith("country=a%2Fb%3Dc,")
    assert lines[2] == "  partition ts_day=2024-01-02/country=a%2Fb%3Dc (spec 0)"
    _, out, _ = cli(capsys, "files", url, "sales.events")
    assert out.count("  partition ts_day=") == len(files)


def test_transforms_spelled_as_iceberg(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """year/month/hour as Iceberg's human strings, bucket and truncate values; every
    printed path selects exactly the files of its partition."""
    url = events(capsys, tmp_path, "year(ts)", "month(ts)", "hour(ts)", "bucket(4, id)")
    assert cli(capsys, "table", "create", url, "sales.t", "--schema", EVENTS)[0] == 0
    code, doc = cli_json(capsys, "partitions", url, "sales.events")
    files = api_files(url)
    names = ["ts_year", "ts_month", "ts_hour", "id_bucket"]
    assert [list(p["partition"]) for p in doc["partitions"]] == [names] * len(doc["partitions"])
    for p in doc["partitions"]:
        raw = p["partition"]
        shown = dict(item.split("=", 1) for item in p["path"].split("/"))
        if raw["ts_hour"] is None:
            assert shown["ts_year"] == shown["ts_month"] == shown["ts_hour"] == "null"
        else:
            when = dt.datetime(1970, 1, 1) + dt.timedelta(hours=raw["ts_hour"])
            assert shown["ts_hour"] == when.strftime("%Y-%m-%d-%H")
            assert shown["ts_month"] == when.strftime("%Y-%m")
            assert shown["ts_year"] == when.strftime("%Y")
            assert raw["ts_year"] == when.year - 1970
            assert raw["ts_month"] == (when.year - 1970) * 12 + when.month - 1
        assert shown["id_bucket"] == str(raw["id_bucket"]) and 0 <= raw["id_bucket"] < 4
        code, sel = cli_json(capsys, "files", url, "sales.events", "--partition", p["path"])
        mine = {f.path for f in files if dict(f.partition) == raw}
        assert {f["path"] for f in sel["files"]} == mine and len(mine) == p["files"]
    # the hour before 1970 is 1969-12-31-23
    assert any(
        p["path"].startswith("ts_year=1969/ts_month=1969-12/ts_hour=1969-12-31-23/")
        for p in doc["partitions"]
    )
    code, _, err = cli(capsys, "files", url, "sales.events", "--partition", "id_bucket=4")
    assert code == 2 and "bucket numbers are 0..3" in err


def test_truncate_and_identity_types(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = str(tmp_path / "lh")
    for args in (("init", url), ("ns", "create", url, "s")):
        assert cli(capsys, *args)[0] == 0
    schema = "id:int64!,sku:string,price:decimal128(10,2),d:date32,ok:bool"
    code, _, err = cli(
        capsys, "table", "create", url, "s.p", "--schema", schema,
        "--partition-by", "truncate(2, sku)", "--partition-by", "truncate(10, price)",
        "--partition-by", "d", "--partition-by", "ok",
    )  # fmt: skip
    assert code == 0, err
    csv = tmp_path / "p.csv"
    csv.write_text("id,sku,price,d,ok\n1,abc,1.25,2024-02-29,true\n2,abd,1.21,2024-02-29,true\n")
    assert cli(capsys, "append", url, "s.p", str(csv))[0] == 0
    code, doc = cli_json(capsys, "partitions", url, "s.p")
    (p,) = doc["partitions"]  # both rows: sku "ab", price 1.20 (unscaled 125, 121 -> 120)
    assert p["path"] == "sku_trunc=ab/price_trunc=1.20/d=2024-02-29/ok=true"
    assert p["partition"] == {
        "sku_trunc": "ab",
        "price_trunc": "1.20",
        "d": "2024-02-29",
        "ok": True,
    }
    for spelled in (
        "price_trunc=1.2",
        "price_trunc=1.20",
        "d=2024-02-29",
        "ok=TRUE",
        "sku_trunc=ab",
    ):
        code, sel = cli_json(capsys, "files", url, "s.p", "--partition", spelled)
        assert code == 0 and len(sel["files"]) == 1, spelled
    for bad in ("price_trunc=cheap", "d=yesterday", "ok=maybe"):
        code, doc = cli_json(capsys, "files", url, "s.p", "--partition", bad)
        assert code == 2 and doc["error"]["type"] == "usage", bad
        assert bad.split("=")[0] in doc["error"]["message"]


def test_float32_and_nanosecond_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = str(tmp_path / "lh")
    schema = pa.schema(
        [("id", pa.int64()), ("f", pa.float32()), ("tsn", pa.timestamp("ns")), ("b", pa.binary())]
    )
    with lakehouse.open(url, create=True) as lh, lh.begin() as txn:
        txn.create_namespace("s")
        txn.create_table("s.t", schema, partition_by=["f", "tsn", "b"])
    with lakehouse.open(url) as lh, lh.begin() as txn:
        txn.append(
            "s.t",
            pa.table(
                {
                    "id": [1, 2],
                    "f": pa.array([1.1, None], pa.float32()),
                    "tsn": pa.array([1_700_000_000_123_456_789, None], pa.timestamp("ns")),
                    "b": [b"\x00/", None],
                },
                schema=schema,
            ),
        )
    code, doc = cli_json(capsys, "partitions", url, "s.t")
    assert [p["path"] for p in doc["partitions"]] == [
        "f=null/tsn=null/b=null",
        "f=1.1/tsn=2023-11-14T22:13:20.123456789/b=002f",
    ]
    for spelled in ("f=1.1", "tsn=2023-11-14 22:13:20.123456789", "b=002F", "f=null/b=null"):
        code, sel = cli_json(capsys, "files", url, "s.t", "--partition", spelled)
        assert code == 0 and len(sel["files"]) == 1, spelled
    code, sel = cli_json(capsys, "files", url, "s.t", "--partition", "tsn=2023-11-14T22:13:20.123")
    assert code == 0 and sel["files"] == []  # a different instant


def test_compact_by_partition(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = events(capsys, tmp_path, "day(ts)", "country")
    off = ("table", "alter", url, "sales.events", "--set", "compaction.auto=false")
    assert cli(capsys, *off)[0] == 0  # compaction only when asked, not in the background
    for _ in range(2):
        assert cli(capsys, "append", url, "sales.events", str(tmp_path / "e.csv"))[0] == 0

    def files_per_partition() -> dict[str, int]:
        _, doc = cli_json(capsys, "partitions", url, "sales.events")
        return {p["path"]: p["files"] for p in doc["partitions"]}

    before = files_per_partition()
    assert set(before.values()) == {3}
    code, doc = cli_json(capsys, "compact", url, "sales.events", "--partition", "ts_day=2024-01-02")
    assert code == 0, doc
    jan2 = {k for k in before if k.startswith("ts_day=2024-01-02/")}
    assert doc["files_removed"] == 3 * len(jan2) and doc["files_added"] == len(jan2)
    after = files_per_partition()
    assert after == {k: 1 if k in jan2 else 3 for k in before}
    # --where on partition columns: the partitions it selects
    code, doc = cli_json(capsys, "compact", url, "sales.events", "--where", "country = 'FR'")
    assert code == 0, doc
    fr = {k for k in before if k.endswith("/country=FR") and k not in jan2}
    assert files_per_partition() == {k: 1 if k in jan2 | fr else 3 for k in before}
    code, out, _ = cli(capsys, "compact", url, "sales.events", "--partition", "ts_day=2030-01-01")
    assert code == 0 and out == "sales.events: nothing to compact\n"
    code, doc = cli_json(capsys, "compact", url, "sales.events", "--partition", "day=2024-01-02")
    assert code == 1 and "no partition field 'day'" in doc["error"]["message"]
    code, doc = cli_json(capsys, "compact", url, "sales.events", "--where", "id = 1")
    assert code == 1 and "partition columns" in doc["error"]["message"]
    code, _, err = cli(
        capsys, "compact", url, "sales.events", "--where", "id = 1", "--partition", "ts_day=null"
    )
    assert code == 2 and "not allowed with" in err
    assert files_per_partition() == {k: 1 if k in jan2 | fr else 3 for k in before}


# ---------------------------------------------------------------------------
# create / alter / describe
# ---------------------------------------------------------------------------
def test_describe_and_partition_evolution(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = events(capsys, tmp_path, "day(ts)", "country")
    code, out, _ = cli(capsys, "describe", url, "sales.events")
    assert "partition by: day(ts), country (spec 0)" in out and "sort keys: id" in out
    code, obj = cli_json(capsys, "table", "describe", url, "sales.events")
    assert obj["partition_by"] == ["day(ts)", "country"] and obj["sort_keys"] == ["id"]
    with lakehouse.open_reader(url) as r:
        d = r.describe_table("sales.events")
    assert obj["partition_by"] == list(d.partition_by)
    fields = obj["partition_specs"][0]["fields"]
    assert [(f["name"], f["transform"]) for f in fields] == [
        ("ts_day", "day"),
        ("country", "identity"),
    ]
    assert [f["field_id"] for f in fields] == [f.field_id for f in d.spec.fields]

    code, _, err = cli(
        capsys, "table", "alter", url, "sales.events", "--partition-by", "month(ts)",
        "--sort-key", "country", "--sort-key", "id",
    )  # fmt: skip
    assert code == 0, err
    assert cli(capsys, "append", url, "sales.events", write_csv(tmp_path / "e.csv", ROWS))[0] == 0
    code, out, _ = cli(capsys, "describe", url, "sales.events")
    assert "partition by: month(ts) (spec 1)" in out and "sort keys: country, id" in out
    assert "earlier partition specs (their files keep them): 0: day(ts), country" in out
    code, doc = cli_json(capsys, "partitions", url, "sales.events")
    specs = [p["spec_id"] for p in doc["partitions"]]
    assert specs == sorted(specs) and set(specs) == {0, 1}  # spec 0 first, then spec 1
    months = [p for p in doc["partitions"] if p["spec_id"] == 1]
    assert {p["path"] for p in months} == {
        "ts_month=null",
        "ts_month=1969-12",
        "ts_month=2024-01",
    }
    assert sum(p["rows"] for p in months) == len(ROWS)
    # a filter on a field of one spec selects files of that spec only
    code, sel = cli_json(capsys, "files", url, "sales.events", "--partition", "ts_month=2024-01")
    assert [f["spec_id"] for f in sel["files"]] == [1]
    code, sel = cli_json(capsys, "files", url, "sales.events", "--partition", "country=DE")
    assert {f["spec_id"] for f in sel["files"]} == {0}
    # the version before the alter knows only spec 0
    code, doc = cli_json(capsys, "partitions", url, "sales.events", "--version", "3")
    assert {p["spec_id"] for p in doc["partitions"]} == {0} and doc["partition_by"][0] == "day(ts)"

    code, _, err = cli(
        capsys, "table", "alter", url, "sales.events", "--unpartitioned", "--no-sort-keys"
    )
    assert code == 0, err
    code, obj = cli_json(capsys, "describe", url, "sales.events")
    assert obj["partition_by"] == [] and obj["sort_keys"] == []
    code, out, _ = cli(capsys, "describe", url, "sales.events")
    assert "partition by: nothing (unpartitioned)" in out and "sort keys" not in out
    assert "1: month(ts)" in out and "0: day(ts), country" in out

    code, _, err = cli(
        capsys, "table", "alter", url, "sales.events", "--unpartitioned", "--partition-by", "id"
    )
    assert code == 2 and "not allowed with" in err


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("day(country)", ["day", "country"]),  # a transform on a type it does not apply to
        ("bucket(0, id)", ["bucket"]),
        ("nope", ["nope"]),
        ("frobnicate(ts)", ["frobnicate"]),
        ("truncate(-1, country)", ["truncate"]),
    ],
)
def test_bad_partition_by_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: str, words: list[str]
) -> None:
    url = str(tmp_path / "lh")
    for args in (("init", url), ("ns", "create", url, "s")):
        assert cli(capsys, *args)[0] == 0
    code, doc = cli_json(
        capsys, "table", "create", url, "s.t", "--schema", EVENTS, "--partition-by", spec
    )
    assert code == 1 and doc["error"]["exit_code"] == 1, doc
    assert all(w in doc["error"]["message"] for w in words), doc
    code, names = cli_json(capsys, "table", "list", url, "s")
    assert names == []  # nothing written
    assert cli(capsys, "table", "create", url, "s.t", "--schema", EVENTS)[0] == 0
    code, doc = cli_json(capsys, "table", "alter", url, "s.t", "--partition-by", spec)
    assert code == 1 and all(w in doc["error"]["message"] for w in words), doc
    code, obj = cli_json(capsys, "describe", url, "s.t")
    assert obj["partition_by"] == [] and len(obj["partition_specs"]) == 1


def test_bad_partition_filters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = events(capsys, tmp_path, "day(ts)")
    code, doc = cli_json(capsys, "files", url, "sales.events", "--partition", "tsday=2024-01-02")
    assert code == 1 and doc["error"]["type"] == "ValueError"
    assert "no partition field 'tsday'" in doc["error"]["message"]
    assert "ts_day" in doc["error"]["message"]  # names the fields there are
    for bad in ("ts_day", "=2024-01-02", "ts_day=2024-01-02/x"):
        code, doc = cli_json(capsys, "files", url, "sales.events", "--partition", bad)
        assert code == 2 and doc["error"]["type"] == "usage", bad
        assert "expected FIELD=VALUE" in doc["error"]["message"]
    code, _, err = cli(capsys, "files", url, "sales.events", "--partition", "ts_day=2024-13-01")
    assert code == 2 and "ts_day" in err and "expected a date (2024-01-02) or null" in err
    assert err.startswith("lakehouse: ") and err.count("\n") == 1


def test_partitions_through_the_entry_point(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = events(capsys, tmp_path, "day(ts)")
    p = subprocess.run(
        [sys.executable, "-m", "lakehouse", "partitions", url, "sales.events"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0 and "ts_day=2024-01-03" in p.stdout and p.stderr == ""
    p = subprocess.run(
        [sys.executable, "-m", "lakehouse", "partitions", url, "sales.nope"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 1 and "Traceback" not in p.stderr and "nope" in p.stderr


# ---------------------------------------------------------------------------
# spelling values: what is printed reads back as the same value
# ---------------------------------------------------------------------------
def _field(name: str, param: int | None = None) -> PartitionField:
    return PartitionField(2, Transform(name, param), f"c_{name}", 1000)


@pytest.mark.parametrize("name", ["year", "month", "day", "hour"])
def test_time_transforms_read_back(name: str) -> None:
    f = _field(name)
    for v in [-20_000, -13, -1, 0, 1, 11, 12, 19_724, 90_000]:  # years 303..9470
        text = human(f, v)
        assert parse_value(f, pa.timestamp("us"), text) == v, (v, text)
    assert parse_value(f, pa.timestamp("us"), "null") is None and human(f, None) == "null"


def test_identity_values_read_back() -> None:
    f = _field("identity")
    cases: list[tuple[pa.DataType, Any]] = [
        (pa.int32(), -7),
        (pa.float64(), 2.5),
        (pa.float32(), pa.scalar(1.1, pa.float32()).as_py()),
        (pa.decimal128(10, 2), Decimal("-3.10")),
        (pa.string(), "München"),
        (pa.binary(), b"\x00\xff"),
        (pa.date32(), dt.date(1969, 7, 20)),
        (pa.timestamp("us"), dt.datetime(2024, 1, 2, 3, 4, 5, 6)),
        (pa.timestamp("us", "UTC"), dt.datetime(2024, 1, 2, 3, 4, tzinfo=dt.UTC)),
        (pa.timestamp("ns"), pa.scalar(1_700_000_000_123_456_789, pa.timestamp("ns")).as_py()),
        (
            pa.timestamp("us", "Europe/Berlin"),
            pa.scalar(1_700_000_000_000_000, pa.timestamp("us", "Europe/Berlin")).as_py(),
        ),
        (pa.time64("us"), dt.time(23, 59, 1)),
        (pa.bool_(), False),
    ]
    for t, v in cases:
        text = human(f, v, t)
        assert parse_value(f, t, text) == v, (t, v, text)
        assert human(f, parse_value(f, t, text), t) == text
    assert human(f, pa.scalar(1.1, pa.float32()).as_py(), pa.float32()) == "1.1"
    berlin = pa.timestamp("us", "Europe/Berlin")
    assert (
        human(f, parse_value(f, berlin, "2024-01-02 10:00"), berlin) == "2024-01-02T10:00:00+00:00"
    )
    assert parse_value(f, berlin, "2024-01-02T11:00+01:00") == parse_value(
        f, berlin, "2024-01-02T10:00"
    )  # no zone given: UTC
    with pytest.raises(ValueError, match="c_identity"):
        parse_value(f, pa.int64(), "1.5")


def test_partition_filter_text() -> None:
    assert partition_filter("a=1/b=x%2Fy") == [("a", "1"), ("b", "x/y")]
    assert partition_filter("a=") == [("a", "")]
    for bad in ("a", "=1", "a=1/", ""):
        with pytest.raises(ValueError, match="FIELD=VALUE"):
            partition_filter(bad)
