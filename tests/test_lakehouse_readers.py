"""Many processes, one lakehouse: readers, the one-writer rule, wrong URLs, export targets,
and one error hierarchy (issue 13's lakehouse half)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest
from parquet_files import PARQUET

import kvstore
import lakehouse

SCHEMA = pa.schema([("id", pa.int64())])


@pytest.fixture
def path(tmp_path):
    p = str(tmp_path / "lh")
    with lakehouse.open(p) as lh, lh.begin() as txn:
        txn.create_namespace("s")
        txn.create_table("s.t", SCHEMA, PARQUET)  # exports copy, tests delete its files
        txn.append("s.t", pa.table({"id": [1, 2]}))
    return p


def test_reader_never_fences_and_converges_after_refresh(path):
    lh = lakehouse.open(path)
    r = lakehouse.open_reader(path)
    assert r.version == lh.version == 1
    assert r.read("s.t").num_rows == 2 and r.list_tables("s") == ["t"]
    with lh.begin() as txn:
        txn.append("s.t", pa.table({"id": [3]}))
    assert r.version == 1  # a fixed view until refreshed
    assert r.refresh() == 2 and r.read("s.t").num_rows == 3
    assert r.at_version(1).read("s.t").num_rows == 2
    assert [h.version for h in r.history()] == [2, 1, 0]
    with lh.begin() as txn:  # the writer was never fenced
        txn.append("s.t", pa.table({"id": [4]}))
    for call in (r.begin, lambda: r.rollback(1), lambda: r.expire_versions(keep_last=1)):
        with pytest.raises(lakehouse.ReadOnlyError):
            call()
    r.close()
    lh.close()


def test_reader_in_another_process_while_the_writer_commits(path):
    lh = lakehouse.open(path)
    script = textwrap.dedent(
        f"""
        import lakehouse
        r = lakehouse.open_reader({path!r})
        print(r.version, r.read("s.t").num_rows)
        """
    )
    for i in range(3):
        with lh.begin() as txn:
            txn.append("s.t", pa.table({"id": [10 + i]}))
        out = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True
        ).stdout.split()
        assert out == [str(lh.version), str(3 + i)]
    with lh.begin() as txn:  # still the writer
        txn.append("s.t", pa.table({"id": [99]}))
    lh.close()


def test_one_writer_per_local_lakehouse(path):
    lh = lakehouse.open(path)
    with pytest.raises(lakehouse.WriterActive, match="open_reader"):
        lakehouse.open(path)
    other = lakehouse.open(path, takeover=True)
    with pytest.raises(lakehouse.FencedError) as info, lh.begin() as txn:
        txn.append("s.t", pa.table({"id": [5]}))
    assert isinstance(info.value, kvstore.FencedError)  # one hierarchy, old catches still work
    assert isinstance(info.value, lakehouse.LakehouseError)
    assert other.read("s.t").num_rows == 2  # nothing of the fenced commit shows
    other.close()
    lh.close()


def test_a_crashed_writer_holds_nothing(path):
    code = f"import lakehouse, os; lh = lakehouse.open({path!r}); os._exit(0)"
    subprocess.run([sys.executable, "-c", code], check=True)
    with lakehouse.open(path) as lh:
        assert lh.version == 1


def test_wrong_urls_are_refused(path, tmp_path):
    with pytest.raises(lakehouse.AlreadyExists, match="key-value store"):
        lakehouse.open(os.path.join(path, "meta"))
    plain = str(tmp_path / "kv")
    with kvstore.open(plain) as db:
        db.put(b"user", b"data")
    with pytest.raises(lakehouse.AlreadyExists, match="key-value store"):
        lakehouse.open(plain)
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(lakehouse.AlreadyExists, match="file"):
        lakehouse.open(str(f))
    with pytest.raises(lakehouse.NotFound):
        lakehouse.open_reader(str(tmp_path / "nothing"))
    with kvstore.open(plain) as db:  # the refused opens wrote nothing
        assert list(db.scan()) == [(b"user", b"data")]


def test_export_targets(path, tmp_path):
    lh = lakehouse.open(path)
    with pytest.raises(lakehouse.AlreadyExists, match="onto itself"):
        lh.export(path)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    with pytest.raises(lakehouse.AlreadyExists, match="not empty"):
        lh.export(str(busy))
    with lh.begin() as txn:  # not fenced by the refused exports
        txn.append("s.t", pa.table({"id": [7]}))
    assert lh.export(str(tmp_path / "fresh"))["files_copied"] == 2
    lh.close()


def test_corruption_is_a_lakehouse_error(path):
    with lakehouse.open(path) as lh:
        f = lh.list_data_files("s.t")[0]
        lh.data_store.delete(f.path)
        with pytest.raises(lakehouse.CorruptionError, match="missing") as info:
            lh.read("s.t")
        assert isinstance(info.value, kvstore.CorruptionError)


def test_reader_opened_before_any_data_sees_it_after_refresh(tmp_path):
    p = str(tmp_path / "empty")
    with lakehouse.open(p) as lh:
        with lh.begin() as txn:
            txn.create_namespace("s")
            txn.create_table("s.t", SCHEMA)
        r = lakehouse.open_reader(p)
        assert r.read("s.t").num_rows == 0
        with lh.begin() as txn:
            txn.append("s.t", pa.table({"id": [1]}))
        r.refresh()
        assert r.read("s.t").num_rows == 1
        r.close()


def test_reader_exports_and_reports_stats_beside_the_writer(path, tmp_path):
    lh = lakehouse.open(path)
    r = lakehouse.open_reader(path)
    assert r.stats()["version"] == 1
    assert r.export(str(tmp_path / "copy"))["files_copied"] == 1
    with lh.begin() as txn:  # the writer was not fenced
        txn.append("s.t", pa.table({"id": [9]}))
    with lakehouse.open(str(tmp_path / "copy")) as copy:
        assert copy.read("s.t").num_rows == 2
    with pytest.raises(lakehouse.WriterActive, match=path) as info:
        lakehouse.open(path)
    assert "/meta" not in str(info.value).split(" is being")[0]
    r.close()
    lh.close()


def test_a_change_of_nothing_writes_no_version(path):
    with lakehouse.open(path) as lh:
        with lh.begin() as txn:
            assert txn.delete("s.t", "id > 100") == 0
            assert txn.append("s.t", pa.table({"id": pa.array([], pa.int64())})) == 0
        assert lh.version == 1
