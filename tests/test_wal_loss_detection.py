"""A missing WAL is found, never silently skipped (issue 13, items 10 and 13).

* item 10: the journal segment the latest manifest's ``wal_replay_from``
  names must exist (its writer created it before any manifest named it);
  missing, reopening raises CorruptionError unless ``accept_wal_loss=True``.
* item 13: ``open_reader`` reads the WAL where the manifest says its writer
  keeps it, and refuses a ``wal_dir`` that is another location, or a
  recorded one that is gone. ``FaultyStore`` has epoch cells only where its
  inner store does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kvstore
from kvstore import paths
from kvstore.manifest_store import ManifestStore
from kvstore.objstore import FaultyStore, LocalStore, MemoryStore

REPO = Path(__file__).resolve().parent.parent

CHILD = r"""
import os, sys, kvstore
wal_dir = sys.argv[2] or None
db = kvstore.open(sys.argv[1], wal_dir=wal_dir)
db.put(b"flushed", b"1")
db.flush()
for i in range(5):
    db.put(b"acked%d" % i, b"v")
os._exit(0)  # dies: nothing flushed after the first key
"""


def _die_after_writes(path: Path, wal_dir: Path | None = None) -> None:
    p = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(wal_dir or "")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr


def _live_segment(path: Path, wal_root: Path) -> Path:
    m = ManifestStore(LocalStore(path, create=False)).load_latest()
    assert m is not None and m.wal_journal
    return wal_root / paths.wal_segment_name(m.wal_replay_from)


def test_the_acknowledged_writes_survive_when_nothing_is_missing(tmp_path: Path) -> None:
    path = tmp_path / "db"
    _die_after_writes(path)
    with kvstore.open_reader(path) as r:
        assert r.get(b"acked4") == b"v"
    with kvstore.open(path) as db:
        assert db.get(b"acked4") == b"v"


def test_a_missing_live_segment_is_corruption(tmp_path: Path) -> None:
    path = tmp_path / "db"
    _die_after_writes(path)
    segment = _live_segment(path, path)
    segment.unlink()
    with pytest.raises(kvstore.CorruptionError, match="missing"):
        kvstore.open(path)
    with pytest.raises(kvstore.CorruptionError, match="missing"):
        kvstore.open_reader(path)
    with kvstore.open(path, accept_wal_loss=True) as db:  # the user gives them up
        assert db.get(b"flushed") == b"1"
        assert db.get(b"acked0") is None
    with kvstore.open(path) as db:  # and from then on the store is whole again
        assert db.get(b"flushed") == b"1"


def test_a_missing_wal_folder_of_a_wal_dir_is_corruption(tmp_path: Path) -> None:
    path, wal_dir = tmp_path / "db", tmp_path / "wal"
    wal_dir.mkdir()
    _die_after_writes(path, wal_dir)
    assert _live_segment(path, wal_dir).exists()
    shutil.rmtree(wal_dir / "wal")
    with pytest.raises(kvstore.CorruptionError, match="missing"):
        kvstore.open(path, wal_dir=str(wal_dir))
    with pytest.raises(kvstore.CorruptionError, match="missing"):
        kvstore.open_reader(path, wal_dir=str(wal_dir))
    with kvstore.open(path, wal_dir=str(wal_dir), accept_wal_loss=True) as db:
        assert db.get(b"flushed") == b"1" and db.get(b"acked0") is None


def test_a_clean_close_needs_no_segment(tmp_path: Path) -> None:
    path = tmp_path / "db"
    with kvstore.open(path) as db:
        db.put(b"k", b"v")
    for name in os.listdir(path / "wal"):
        os.unlink(path / "wal" / name)
    with kvstore.open(path) as db:
        assert db.get(b"k") == b"v"


# ---------------------------------------------------------------------------
# item 13
# ---------------------------------------------------------------------------
def test_open_reader_uses_the_recorded_wal_dir(tmp_path: Path) -> None:
    path, wal_dir = tmp_path / "db", tmp_path / "wal"
    wal_dir.mkdir()
    _die_after_writes(path, wal_dir)
    with kvstore.open_reader(path) as r:  # no wal_dir: the recorded one
        assert r.get(b"acked4") == b"v" and r.last_seq == 6
    with kvstore.open_reader(path, wal_dir=str(wal_dir)) as r:
        assert r.get(b"acked4") == b"v"


def test_open_reader_refuses_another_wal_dir(tmp_path: Path) -> None:
    path, wal_dir, other = tmp_path / "db", tmp_path / "wal", tmp_path / "other"
    wal_dir.mkdir()
    other.mkdir()
    _die_after_writes(path, wal_dir)
    with pytest.raises(ValueError, match="not the WAL"):
        kvstore.open_reader(path, wal_dir=str(other))
    with kvstore.open(tmp_path / "db2", wal_dir=str(other)) as db2:  # another store's WAL
        db2.put(b"x", b"y")
    with pytest.raises(ValueError, match="not the WAL"):
        kvstore.open_reader(path, wal_dir=str(other))


def test_open_reader_refuses_when_the_recorded_wal_dir_is_gone(tmp_path: Path) -> None:
    path, wal_dir = tmp_path / "db", tmp_path / "wal"
    wal_dir.mkdir()
    _die_after_writes(path, wal_dir)
    shutil.rmtree(wal_dir)
    with pytest.raises(ValueError, match="wal_dir"):
        kvstore.open_reader(path)


def test_open_reader_of_a_store_with_its_wal_inside_refuses_a_wal_dir(tmp_path: Path) -> None:
    path, other = tmp_path / "db", tmp_path / "other"
    other.mkdir()
    _die_after_writes(path)
    with pytest.raises(ValueError, match="not the WAL"):
        kvstore.open_reader(path, wal_dir=str(other))


def test_open_reader_after_a_clean_close_needs_no_wal(tmp_path: Path) -> None:
    path, wal_dir = tmp_path / "db", tmp_path / "wal"
    with kvstore.open(path, wal_dir=str(wal_dir)) as db:
        db.put(b"k", b"v")
    shutil.rmtree(wal_dir)
    with kvstore.open_reader(path) as r:  # everything is in SSTs
        assert r.get(b"k") == b"v"


def test_faulty_store_has_epoch_cells_only_when_its_inner_store_does(tmp_path: Path) -> None:
    assert not hasattr(FaultyStore(MemoryStore()), "open_epoch_cell")
    assert hasattr(FaultyStore(LocalStore(tmp_path / "s")), "open_epoch_cell")


def test_recovery_through_faulty_store_switching_wal_location(tmp_path: Path) -> None:
    """The last writer kept its WAL in a store without epoch cells (through
    FaultyStore); the next one uses a wal_dir and must fence and replay the old WAL
    there (this used to fail on the None that FaultyStore.open_epoch_cell returned)."""
    inner = MemoryStore()
    db = kvstore.open(FaultyStore(inner), background_compaction=False)
    db.put(b"k", b"acked")  # durable, in a WAL object; then the writer is abandoned
    with kvstore.open(FaultyStore(inner), wal_dir=str(tmp_path / "wal")) as new:
        assert new.get(b"k") == b"acked"
    with pytest.raises(kvstore.FencedError):
        db.put(b"k", b"late")
    db.close()
