"""The WAL on a local disk while manifests and SSTs live elsewhere (``wal_dir``)."""

from __future__ import annotations

import os
import uuid

import pytest

import kvstore
from kvstore.objstore import MemoryStore


@pytest.fixture
def remote():
    name = f"walplace-{uuid.uuid4().hex}"
    yield f"memory://{name}"
    MemoryStore.drop(name)


def test_wal_dir_holds_the_journal_and_survives_reopen(remote, tmp_path):
    wal_dir = tmp_path / "wal"
    db = kvstore.open(remote, wal_dir=str(wal_dir))
    for i in range(100):
        db.put(b"k%03d" % i, b"v%d" % i)
    segments = os.listdir(wal_dir / "wal")
    assert segments and all(s.endswith(".log") for s in segments)
    store = MemoryStore.named(remote.split("://")[1])
    assert store.list("wal/") == []  # no WAL objects on the remote store
    db._wal._journal.close()  # simulate a crash: no flush, no close
    db._closed = True

    db2 = kvstore.open(remote, wal_dir=wal_dir)
    assert [db2.get(b"k%03d" % i) for i in range(100)] == [b"v%d" % i for i in range(100)]
    reader = kvstore.open_reader(remote, wal_dir=wal_dir)
    db2.put(b"late", b"1")
    reader.refresh()
    assert reader.get(b"late") == b"1"
    db2.close()


def test_wal_journal_mode_needs_a_local_directory(remote):
    with pytest.raises(ValueError, match="journal"):
        kvstore.open(remote, wal="journal")


def test_wal_object_mode_on_local_directory(tmp_path):
    with kvstore.open(tmp_path, wal="object") as db:
        db.put(b"a", b"1")
        assert any(n.endswith(".wal") for n in os.listdir(tmp_path / "wal"))
    with kvstore.open(tmp_path, wal="object") as db:
        assert db.get(b"a") == b"1"
