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


# ---------------------------------------------------------------------------
# a writer opened where the last writer's WAL is not (the manifest records it)
# ---------------------------------------------------------------------------
QUIET = {"background_flush": False, "background_compaction": False}


def crash(db: kvstore.DB) -> None:
    """Abandon a writer as a killed process would: no flush, no close."""
    journal = getattr(db._wal, "_journal", None)
    if journal is not None:
        journal.close()
    db._closed = True


def write_and_crash(url, n: int, **opts) -> None:
    db = kvstore.open(url, **QUIET, **opts)
    for i in range(n):
        db.put(b"k%03d" % i, b"v%d" % i)  # durable: acknowledged
    crash(db)


def test_the_manifest_records_where_the_wal_lives(remote, tmp_path):
    with kvstore.open(remote, wal_dir=tmp_path / "w") as db:
        assert db._manifest.wal_dir == str(tmp_path / "w")
        db.put(b"a", b"1")
    with kvstore.open(remote, wal_dir=tmp_path / "w") as db:
        assert db._manifest.wal_dir == str(tmp_path / "w") and db.get(b"a") == b"1"
    with kvstore.open(remote) as db:  # the last writer closed cleanly: nothing left there
        assert db._manifest.wal_dir is None and db.get(b"a") == b"1"


@pytest.mark.parametrize("wrong", ["none", "typo"])
def test_opening_without_the_wal_dir_that_holds_acknowledged_writes_is_refused(
    remote, tmp_path, wrong
):
    wal = tmp_path / "wal-a"
    write_and_crash(remote, 5, wal_dir=wal)
    opts = {} if wrong == "none" else {"wal_dir": tmp_path / "typo"}
    with pytest.raises(ValueError, match="holds 5 acknowledged writes") as err:
        kvstore.open(remote, **opts)
    assert f"wal_dir={str(wal)!r}" in str(err.value) and "accept_wal_loss" in str(err.value)
    with kvstore.open(remote, wal_dir=wal) as db:  # nothing was lost or changed
        assert len(dict(db.scan())) == 5


def test_moving_to_a_wal_dir_leaves_no_unflushed_write_of_the_store_wal_behind(tmp_path):
    path = tmp_path / "db"
    write_and_crash(path, 3)  # local journal inside the store
    with pytest.raises(ValueError, match="kept its WAL in the store, which holds 3"):
        kvstore.open(path, wal_dir=tmp_path / "w")
    with kvstore.open(path) as db:  # recovers them, flushes on close
        assert len(dict(db.scan())) == 3
    with kvstore.open(path, wal_dir=tmp_path / "w") as db:  # now the move is safe
        assert len(dict(db.scan())) == 3


def test_a_moved_wal_dir_is_recognised_by_its_segments(remote, tmp_path):
    write_and_crash(remote, 4, wal_dir=tmp_path / "before")
    os.rename(tmp_path / "before", tmp_path / "after")
    with kvstore.open(remote, wal_dir=tmp_path / "after") as db:
        assert len(dict(db.scan())) == 4
        assert db._manifest.wal_dir == str(tmp_path / "after")


def test_a_lost_wal_dir_needs_accept_wal_loss(remote, tmp_path):
    with kvstore.open(remote, wal_dir=tmp_path / "gone") as db:
        db.put(b"flushed", b"1")
        db.flush()
    write_and_crash(remote, 2, wal_dir=tmp_path / "gone")
    for p in sorted((tmp_path / "gone").rglob("*"), reverse=True):  # the disk is gone
        p.unlink() if p.is_file() else p.rmdir()
    (tmp_path / "gone").rmdir()
    with pytest.raises(ValueError, match="which is not there"):
        kvstore.open(remote, wal_dir=tmp_path / "new")
    with pytest.raises(TypeError, match="accept_wal_loss"):
        kvstore.open(remote, wal_dir=tmp_path / "new", accept_wal_loss="yes")
    with kvstore.open(remote, wal_dir=tmp_path / "new", accept_wal_loss=True) as db:
        assert db.get(b"flushed") == b"1" and db.get(b"k000") is None
