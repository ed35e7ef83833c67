"""The WAL on a local disk while manifests and SSTs live elsewhere (``wal_dir``)."""

from __future__ import annotations

import os
import uuid

import pytest

import kvstore
from kvstore.engine.manifests import ManifestWriter
from kvstore.engine.recovery import Recovery
from kvstore.objstore import MemoryStore, SimulatedCrash


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
    db.abandon()  # simulate a crash: no flush, no close

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
    db.abandon()


def write_and_crash(url, n: int, **opts) -> None:
    db = kvstore.open(url, **QUIET, **opts)
    for i in range(n):
        db.put(b"k%03d" % i, b"v%d" % i)  # durable: acknowledged
    crash(db)


def test_the_manifest_records_where_the_wal_lives(remote, tmp_path):
    with kvstore.open(remote, wal_dir=tmp_path / "w") as db:
        assert db.manifest.wal_dir == str(tmp_path / "w")
        db.put(b"a", b"1")
    with kvstore.open(remote, wal_dir=tmp_path / "w") as db:
        assert db.manifest.wal_dir == str(tmp_path / "w") and db.get(b"a") == b"1"
    with kvstore.open(remote) as db:  # the last writer closed cleanly: nothing left there
        assert db.manifest.wal_dir is None and db.get(b"a") == b"1"


@pytest.mark.parametrize("elsewhere", ["none", "other"])
def test_opening_elsewhere_replays_the_wal_dir_that_holds_acknowledged_writes(
    remote, tmp_path, elsewhere
):
    """The manifest says where the last writer's journal is: a writer opening with
    another WAL location (or none) replays it there, then writes its own."""
    wal = tmp_path / "wal-a"
    write_and_crash(remote, 5, wal_dir=wal)
    opts = {} if elsewhere == "none" else {"wal_dir": tmp_path / "other"}
    with kvstore.open(remote, **opts) as db:
        assert len(dict(db.scan())) == 5
        recorded = db.manifest.wal_dir
        assert recorded == (None if elsewhere == "none" else str(tmp_path / "other"))
    with kvstore.open(remote, **opts) as db:
        assert len(dict(db.scan())) == 5


def test_moving_to_a_wal_dir_leaves_no_unflushed_write_of_the_store_wal_behind(tmp_path):
    path = tmp_path / "db"
    write_and_crash(path, 3)  # local journal inside the store
    with kvstore.open(path, wal_dir=tmp_path / "w") as db:  # replays the store's journal
        assert len(dict(db.scan())) == 3
    with kvstore.open(path) as db:  # and back again
        assert len(dict(db.scan())) == 3


def test_a_moved_wal_dir_is_recognised_by_its_segments(remote, tmp_path):
    write_and_crash(remote, 4, wal_dir=tmp_path / "before")
    os.rename(tmp_path / "before", tmp_path / "after")
    with kvstore.open(remote, wal_dir=tmp_path / "after") as db:
        assert len(dict(db.scan())) == 4
        assert db.manifest.wal_dir == str(tmp_path / "after")


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


def test_switching_back_to_an_old_wal_dir_does_not_skip_the_newer_one(remote, tmp_path):
    """W1, closed cleanly; W2, acknowledged writes, crash; reopening with W1 must not
    replay W1's old (empty) segment as if it were the WAL: the writes are in W2."""
    w1, w2 = tmp_path / "w1", tmp_path / "w2"
    with kvstore.open(remote, wal_dir=w1) as db:
        db.put(b"a", b"1")
    write_and_crash(remote, 3, wal_dir=w2)
    with kvstore.open(remote, wal_dir=w1) as db:  # replays W2, not W1's old segment
        assert db.get(b"a") == b"1" and len(dict(db.scan())) == 4
    with kvstore.open(remote, wal_dir=w2) as db:
        assert len(dict(db.scan())) == 4


def test_a_clean_close_lets_the_next_writer_use_any_wal_location(remote, tmp_path):
    with kvstore.open(remote, wal_dir=tmp_path / "temp") as db:
        db.put(b"a", b"1")
        assert not db.manifest.wal_clean
    m = kvstore.open_reader(remote).manifest
    assert m is not None and m.wal_clean and m.wal_id and m.store_id
    for p in sorted((tmp_path / "temp").rglob("*"), reverse=True):
        p.unlink() if p.is_file() else p.rmdir()
    (tmp_path / "temp").rmdir()
    with kvstore.open(remote) as db:  # the temporary wal_dir is gone, nothing was in it
        assert db.get(b"a") == b"1" and not db.manifest.wal_clean


def test_a_new_empty_wal_dir_at_the_same_path_is_not_the_old_wal(remote, tmp_path):
    """Failover to a host whose wal_dir has the same path: the identity differs."""
    wal = tmp_path / "wal"
    write_and_crash(remote, 2, wal_dir=wal)
    os.rename(wal, tmp_path / "the-old-host")
    wal.mkdir()
    with pytest.raises(ValueError, match="which is not there"):
        kvstore.open(remote, wal_dir=wal)
    with kvstore.open(remote, wal_dir=wal, accept_wal_loss=True) as db:
        assert db.get(b"k000") is None


def test_two_stores_cannot_share_a_wal_dir(tmp_path):
    wal = tmp_path / "wal"
    write_and_crash(f"memory://{uuid.uuid4().hex}", 1, wal_dir=wal)  # s1 died: its WAL stays
    other = f"memory://{uuid.uuid4().hex}"
    with pytest.raises(ValueError, match="holds the WAL of another store"):
        kvstore.open(other, wal_dir=wal)


def test_a_writer_at_another_wal_location_fences_the_old_one_through_its_cell(tmp_path):
    """A keeps its WAL in W1 and has flushed everything; B opens with W2. B raises
    the epoch cell in W1 too, so A's next durable write is refused, not acknowledged
    into a WAL nobody replays."""
    path = tmp_path / "db"
    a = kvstore.open(path, wal_dir=tmp_path / "w1", **QUIET)
    try:
        a.put(b"a", b"1")
        a.flush()
        with kvstore.open(path, wal_dir=tmp_path / "w2", takeover=True, **QUIET) as b:
            with pytest.raises(kvstore.FencedError):
                a.put(b"lost?", b"no")
            b.put(b"b", b"2")
    finally:
        try:
            a.close()
        except (OSError, kvstore.KvError):
            pass
    with kvstore.open(path, wal_dir=tmp_path / "w2") as db:
        assert dict(db.scan()) == {b"a": b"1", b"b": b"2"}


def test_old_segments_at_a_wal_location_used_again_are_never_replayed(tmp_path):
    """Seqs 4-5 were given up in W1 (accept_wal_loss), seqs 4-5 then went to other
    data in W2; back in W1, its old segments must not resurrect the lost writes."""
    path = tmp_path / "db"
    with kvstore.open(path, wal_dir=tmp_path / "w1") as db:
        for i in range(3):
            db.put(b"k%d" % i, b"flushed")
    write_and_crash(path, 2, wal_dir=tmp_path / "w1")  # k000, k001 only in W1
    os.rename(tmp_path / "w1", tmp_path / "w1-unplugged")  # W1 cannot be found: given up
    with kvstore.open(path, wal_dir=tmp_path / "w2", accept_wal_loss=True) as db:
        db.put(b"new4", b"x")
        db.put(b"new5", b"y")
    os.rename(tmp_path / "w1-unplugged", tmp_path / "w1")  # back, with its old segments
    with kvstore.open(path, wal_dir=tmp_path / "w1") as db:
        assert dict(db.scan()) == {
            b"k0": b"flushed",
            b"k1": b"flushed",
            b"k2": b"flushed",
            b"new4": b"x",
            b"new5": b"y",
        }


def test_a_crash_while_switching_wal_locations_resurrects_nothing(tmp_path, monkeypatch):
    """An open at B crashes after its claim, before its final manifest. The claim
    still names the last writer's location, so the next open at B replays that one,
    not B's old segments (which hold an overwritten value)."""
    path, a, b = tmp_path / "s", tmp_path / "a", tmp_path / "b"
    write_and_crash(path, 1, wal_dir=b)  # k000 = v0, only in B
    os.rename(b, tmp_path / "b-away")
    with kvstore.open(path, wal_dir=a, accept_wal_loss=True, **QUIET) as db:  # B given up
        db.put(b"k000", b"newer")
    os.rename(tmp_path / "b-away", b)

    def crash_at_final_manifest(self, m):
        raise SimulatedCrash("power loss before the final manifest")

    real = ManifestWriter.write
    monkeypatch.setattr(ManifestWriter, "write", crash_at_final_manifest)
    with pytest.raises(SimulatedCrash):
        kvstore.open(path, wal_dir=b, **QUIET)
    monkeypatch.setattr(ManifestWriter, "write", real)
    with kvstore.open(path, wal_dir=b, **QUIET) as db:
        assert db.get(b"k000") == b"newer"


def test_a_live_old_writer_is_fenced_before_its_wal_is_read(tmp_path, monkeypatch):
    """W1 (journal in A) acknowledges a write while W2 opens at B: the write is either
    replayed by W2 or refused to W1, never acknowledged and lost."""
    path = tmp_path / "s"
    w1 = kvstore.open(path, wal_dir=tmp_path / "a", **QUIET)
    w1.put(b"x", b"0")
    w1.flush()
    real = Recovery.check_wal_location

    def w1_writes_meanwhile(self, m, store_id):
        got = real(self, m, store_id)
        w1.put(b"k", b"acked-by-w1")  # durable: acknowledged when it returns
        return got

    monkeypatch.setattr(Recovery, "check_wal_location", w1_writes_meanwhile)
    w2 = kvstore.open(path, wal_dir=tmp_path / "b", takeover=True, **QUIET)  # W1 is live
    monkeypatch.setattr(Recovery, "check_wal_location", real)
    try:
        assert w2.get(b"k") == b"acked-by-w1"
        with pytest.raises(kvstore.FencedError):
            w1.put(b"k2", b"v")
    finally:
        w2.close()
        crash(w1)
    with kvstore.open(path, wal_dir=tmp_path / "a") as db:
        assert db.get(b"k") == b"acked-by-w1"


def test_a_live_old_writer_on_an_object_wal_is_fenced_by_a_fence_object(remote, tmp_path):
    """W1 writes WAL objects into the store; W2 opens with a wal_dir. W2 places a
    fence in the store's WAL, so W1's next durable write is refused, not lost."""
    w1 = kvstore.open(remote, **QUIET)
    w1.put(b"a", b"1")
    w2 = kvstore.open(remote, wal_dir=tmp_path / "w", **QUIET)
    try:
        assert w2.get(b"a") == b"1"
        with pytest.raises(kvstore.FencedError):
            w1.put(b"b", b"2")
    finally:
        w2.close()
        crash(w1)
    with kvstore.open(remote, wal_dir=tmp_path / "w") as db:
        assert db.get(b"a") == b"1" and db.get(b"b") is None
