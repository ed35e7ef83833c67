"""Pieces of the Iceberg write path kept cheap: a sidecar's change found from the ids
a snapshot touched (state.Touched), and manifests stored in the background
(ManifestWriter(defer=True)) whose failure still reaches the caller."""

from __future__ import annotations

import os
import signal
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import lakehouse
from kvstore.objstore import MemoryStore
from lakehouse.iceberg import objects
from lakehouse.iceberg.state import FileRef, SnapshotState, Touched, delta_of
from lakehouse.model import TableDef


def state(u: int, files: dict[str, FileRef]) -> SnapshotState:
    return SnapshotState(snapshot={"snapshot-id": u}, schema={}, files=files)


def ref(k: int) -> FileRef:
    return FileRef(f"/d/{k}.parquet", f"m{k}", 1, k, 10 * k, 0)


@pytest.mark.parametrize("touched", [True, False])
def test_delta_from_touched_ids_equals_the_full_comparison(touched: bool) -> None:
    prev = state(1, {f"f{k}": ref(k) for k in range(100)})
    files: dict[str, FileRef] = Touched(prev.files) if touched else dict(prev.files)
    files["f3"] = replace(files["f3"], dv="1:00")
    files.pop("f7")
    del files["f8"]
    files["new"] = ref(7)
    files["f9"] = files["f9"]  # set to the same ref: not a change
    s = state(2, files)
    delta_of(s, prev)
    assert s.base == 1 and s.depth == 1
    assert set(s.changed) == {"f3", "new"}
    assert s.removed == ["f7", "f8"]
    if touched:
        assert isinstance(files, Touched) and files.touched == {"f3", "f7", "f8", "new", "f9"}


def test_a_big_change_is_stored_whole() -> None:
    prev = state(1, {f"f{k}": ref(k) for k in range(10)})
    files = Touched(prev.files)
    for k in range(6):
        files.pop(f"f{k}")
    s = state(2, files)
    delta_of(s, prev)
    assert s.base is None and not s.changed


class FailingStore(MemoryStore):
    def put_if_absent(self, name: str, data: bytes) -> None:
        raise OSError(f"disk full writing {name}")


def table(tmp_path: Path) -> TableDef:
    lh = lakehouse.open(str(tmp_path / "lh"))
    with lh.begin() as txn:
        txn.create_namespace("n")
        txn.create_table("n.t", pa.schema([("a", pa.int64())]))
    d: TableDef = lh.describe_table("n.t")
    lh.close()
    return d


def entry_at(u: int) -> dict[str, Any]:
    return {
        "status": 1,
        "snapshot_id": u,
        "sequence_number": u,
        "file_sequence_number": u,
        "data_file": {"content": 0, "file_path": "/d/x.parquet", "file_format": "PARQUET",
                      "partition": {}, "record_count": 1, "file_size_in_bytes": 9},
    }  # fmt: skip


def test_deferred_manifest_write_failure_reaches_wait(tmp_path: Path) -> None:
    store = FailingStore()
    t = objects.Target("0" * 32, store, "/ice", store, "/data")
    schema = {"schema-id": 1, "type": "struct", "fields": []}
    c = objects.ManifestWriter(t, 5, table(tmp_path), schema, defer=True)
    c.write_manifest([entry_at(5)], "data", 0)  # returns before the object is stored
    with pytest.raises(OSError, match="disk full"):
        c.wait()
    c.wait()  # nothing pending any more


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_background_writes_work_in_a_forked_child(tmp_path: Path) -> None:
    store = MemoryStore()
    t = objects.Target("0" * 32, store, "/ice", store, "/data")
    d = table(tmp_path)
    schema = {"schema-id": 1, "type": "struct", "fields": []}

    def one(u: int) -> str:
        c = objects.ManifestWriter(t, u, d, schema, defer=True)
        name, _ = c.write_manifest([entry_at(u)], "data", 0)
        c.wait()
        return name

    assert store.exists(one(1))  # the parent's pool has threads now
    pid = os.fork()
    if pid == 0:  # the child: its own pool (the parent's threads are not here)
        signal.alarm(30)
        try:
            os._exit(0 if store.exists(one(2)) else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
