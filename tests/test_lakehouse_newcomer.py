"""What a newcomer hit (issue 19, part 8), outside the CLI and Spark.

``if_not_exists`` on create_namespace/create_table; one-call writes on the
lakehouse (``lh.append`` ...: one transaction each, refused by readers);
compaction progress; the fenced-writer warnings say what was kept; the docs
point to the project's own API page; the packaging metadata setuptools no
longer deprecates. The CLI's side is in test_lakehouse_cli.py, Spark's in
test_spark_errors.py.
"""

from __future__ import annotations

import logging
import re
import tomllib
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from parquet_files import parquet_only

import lakehouse

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("q", pa.int64())])
ROWS = pa.table({"id": [1, 2, 3, 4], "q": [10, 20, 30, 40]}, schema=SCHEMA)


@pytest.fixture
def lh(tmp_path: Path):
    with lakehouse.open(str(tmp_path / "lh")) as lh:
        with lh.begin() as txn:
            txn.create_namespace("s", {"owner": "ana"})
            txn.create_table("s.t", SCHEMA, {"p": "1"})
        yield lh


def _sorted(t: pa.Table) -> pa.Table:
    return t.sort_by("id")


# ---------------------------------------------------------------------------
# if_not_exists
# ---------------------------------------------------------------------------
def test_create_namespace_if_not_exists(lh: lakehouse.Lakehouse) -> None:
    before = lh.version
    with lh.begin() as txn:
        assert txn.create_namespace("s", {"owner": "bo"}, if_not_exists=True) is False
        assert txn.describe_namespace("s").properties == {"owner": "ana"}
    assert lh.version == before  # nothing was recorded: no new version
    with lh.begin() as txn:
        assert txn.create_namespace("n2", if_not_exists=True) is True
        assert txn.create_namespace("n2", if_not_exists=True) is False  # its own create
    assert lh.version == before + 1 and lh.namespace_exists("n2")
    with lh.begin() as txn, pytest.raises(lakehouse.AlreadyExists):
        txn.create_namespace("s")  # the default is still an error
    with lh.begin() as txn, pytest.raises(TypeError, match="if_not_exists"):
        txn.create_namespace("n3", if_not_exists="yes")  # type: ignore[arg-type]


def test_create_table_if_not_exists_leaves_a_different_table_alone(
    lh: lakehouse.Lakehouse,
) -> None:
    lh.append("s.t", ROWS)
    before = lh.version
    other = pa.schema([("zzz", pa.string())])
    with lh.begin() as txn:
        assert txn.create_table("s.t", other, {"p": "2"}, if_not_exists=True) is False
    assert lh.version == before
    d = lh.describe_table("s.t")
    assert d.schema == SCHEMA and dict(d.properties) == {"p": "1"}
    assert _sorted(lh.read("s.t")).equals(ROWS)
    with lh.begin() as txn:
        assert txn.create_table("s.u", other, if_not_exists=True) is True
    assert lh.describe_table("s.u").schema == other
    with lh.begin() as txn:
        txn.create_view("s.v", "SELECT 1")
    with lh.begin() as txn, pytest.raises(lakehouse.AlreadyExists, match="view"):
        txn.create_table("s.v", other, if_not_exists=True)  # a view holds the name
    with lh.begin() as txn, pytest.raises(lakehouse.NotFound):
        txn.create_table("nope.t", other, if_not_exists=True)
    with lh.begin() as txn, pytest.raises(ValueError):  # arguments are still checked
        txn.create_table("s.t", other, primary_key=["missing"], if_not_exists=True)
    with lh.begin() as txn, pytest.raises(lakehouse.AlreadyExists):
        txn.create_table("s.t", other)


# ---------------------------------------------------------------------------
# one-call writes
# ---------------------------------------------------------------------------
def test_one_call_writes_are_one_transaction_each(lh: lakehouse.Lakehouse) -> None:
    v = lh.version
    assert lh.append("s.t", ROWS) == 4
    assert lh.version == v + 1
    assert lh.delete("s.t", "id = 1") == 1
    assert lh.update("s.t", "id >= 3", {"q": "q * 2"}) == 2
    res = lh.merge("s.t", pa.table({"id": [2, 9], "q": [-2, -9]}), on="id")
    assert isinstance(res, lakehouse.MergeResult)
    assert (res.inserted, res.updated, res.deleted) == (1, 1, 0)
    assert lh.version == v + 4
    expected = pa.table({"id": [2, 3, 4, 9], "q": [-2, 60, 80, -9]}, schema=SCHEMA)
    assert _sorted(lh.read("s.t")).equals(expected)
    ops = [[c.op for c in h.changes] for h in lh.history(limit=4)]
    assert all(len(o) == 1 for o in ops)  # each call: one version, one change
    assert lh.overwrite("s.t", ROWS.slice(0, 1), where="id < 5") == 1
    assert lh.version == v + 5
    got = _sorted(lh.read("s.t"))
    assert got.column("id").to_pylist() == [1, 9]
    res = lh.merge("s.t", pa.table({"id": [9]}), ["id"], when_matched="delete")
    assert res.deleted == 1 and lh.read("s.t").column("id").to_pylist() == [1]


def test_a_failed_one_call_write_changes_nothing(lh: lakehouse.Lakehouse) -> None:
    parquet_only(lh, "s.t")  # files on disk are counted
    lh.append("s.t", ROWS)
    v, files = lh.version, {f.path for f in lh.list_data_files("s.t")}
    with pytest.raises(ValueError):
        lh.delete("s.t", "nosuch = 1")
    with pytest.raises(ValueError):
        lh.append("s.t", pa.table({"id": [5], "colour": ["red"]}))
    with pytest.raises(ValueError):
        lh.merge("s.t", pa.table({"id": [1, 1], "q": [0, 0]}), "id")  # a key twice
    with pytest.raises(lakehouse.NotFound):
        lh.update("s.nope", "id = 1", {"q": 0})
    assert lh.version == v and {f.path for f in lh.list_data_files("s.t")} == files
    data = Path(lh.data_location()[0].removeprefix("file://"))
    on_disk = {str(p.relative_to(data)) for p in data.rglob("*.parquet")}
    assert on_disk == files  # the failed writes left no file behind


def test_a_reader_refuses_every_one_call_write(lh: lakehouse.Lakehouse) -> None:
    lh.append("s.t", ROWS)
    with lakehouse.open_reader(lh.url) as r:
        calls = {
            "append": lambda: r.append("s.t", ROWS),
            "overwrite": lambda: r.overwrite("s.t", ROWS),
            "delete": lambda: r.delete("s.t", "id = 1"),
            "update": lambda: r.update("s.t", "id = 1", {"q": 0}),
            "merge": lambda: r.merge("s.t", ROWS, "id"),
        }
        for name, call in calls.items():
            with pytest.raises(lakehouse.ReadOnlyError, match="read-only"):
                call()
            assert r.refresh() == lh.version, name
    assert lh.table_stats("s.t").rows == 4


# ---------------------------------------------------------------------------
# compaction progress
# ---------------------------------------------------------------------------
def test_compact_reports_progress_in_bytes(lh: lakehouse.Lakehouse) -> None:
    for i in range(5):
        lh.append("s.t", pa.table({"id": [i], "q": [i]}, schema=SCHEMA))
    lh.delete("s.t", "id = 0")
    calls: list[tuple[int, int]] = []
    with lh.begin() as txn:
        res = txn.compact("s.t", progress=lambda done, total: calls.append((done, total)))
    assert res.files_removed == 5 and len(calls) == res.files_removed
    dones = [d for d, _ in calls]
    assert dones == sorted(dones) and len(set(dones)) == len(dones)
    assert {t for _, t in calls} == {res.bytes_before} and dones[-1] == res.bytes_before
    with lh.begin() as txn:  # nothing to rewrite: no call
        calls.clear()
        txn.compact("s.t", progress=lambda done, total: calls.append((done, total)))
    assert calls == []


# ---------------------------------------------------------------------------
# the fenced writer
# ---------------------------------------------------------------------------
def test_the_fenced_writer_is_told_what_was_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = str(tmp_path / "lh")
    old = lakehouse.open(url)
    with old.begin() as txn:
        txn.create_namespace("s")
        txn.create_table("s.t", SCHEMA)
    old.append("s.t", ROWS)
    kept = old.version
    with caplog.at_level(logging.WARNING):
        new = lakehouse.open(url, takeover=True)
        with pytest.raises(lakehouse.FencedError) as info:
            old.append("s.t", ROWS)
        with pytest.raises(lakehouse.FencedError):
            old.delete("s.t", "id = 1")
    msg = str(info.value)
    assert f"Versions up to {kept} are kept" in msg
    assert "this transaction was not committed" in msg
    assert "can no longer commit" in msg and "open the lakehouse again" in msg
    ours = [r.getMessage() for r in caplog.records if r.name == "lakehouse"]
    assert ours == [msg]  # logged once per handle, with the error's words
    kv = [r.getMessage() for r in caplog.records if "this handle is fenced" in r.getMessage()]
    kv = [m for m in kv if "Kept: every write up to seq" in m]
    assert len(kv) == 1 and "can no longer write" in kv[0]
    seq = int(re.search(r"up to seq (\d+)", kv[0]).group(1))  # type: ignore[union-attr]
    assert f"lost: seq {seq + 1}.." in kv[0] or "nothing this handle wrote was lost" in kv[0]
    assert new.version == kept and new.read("s.t").num_rows == 4
    assert pc.sum(new.read("s.t").column("q")).as_py() == 100
    new.close()
    old.close()


# ---------------------------------------------------------------------------
# docs and packaging
# ---------------------------------------------------------------------------
def test_docs_point_to_the_projects_own_api_page() -> None:
    api = ROOT / "docs" / "api.md"
    text = api.read_text()
    for name in ("if_not_exists", "lh.append(table, data)", "ReadOnlyError", "txn.merge"):
        assert name in text, name
    files = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    files += [*(ROOT / "lakehouse").rglob("*.py"), *(ROOT / "kvstore").rglob("*.py")]
    for f in files:
        body = f.read_text(errors="replace")
        assert "shared/API.md" not in body and "../shared" not in body, f
    for link in re.findall(r"\]\(([a-z0-9_.-]+\.md)\)", text):  # api.md's own links resolve
        assert (ROOT / "docs" / link).is_file(), link


def test_packaging_uses_no_deprecated_setuptools_metadata() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    # a TOML table for project.license is deprecated since setuptools 77 (PEP 639)
    assert isinstance(meta["project"]["license"], str)
    assert not any("License ::" in c for c in meta["project"].get("classifiers", []))
    (req,) = [r for r in meta["build-system"]["requires"] if r.startswith("setuptools")]
    assert int(re.search(r">=(\d+)", req).group(1)) >= 77  # type: ignore[union-attr]
