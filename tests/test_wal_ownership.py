"""The WAL owns its frame encoding and the deletion of its old segments.

``append_record`` is ``append(encode_record(...))``: the same bytes, the same
LSN. ``delete_before`` removes what a flush made redundant: journal segments
(``.log``) or this writer's WAL data objects below the first live id,
best effort (a failure is logged, never raised). The clock a WAL is given
times its fence checks and its re-reads.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from kvstore import paths
from kvstore.clock import FakeClock
from kvstore.errors import CorruptionError, FencedError
from kvstore.format.wal import (
    decode_object,
    decode_segment,
    encode_object,
    encode_record,
    fence_object,
    segment_header,
)
from kvstore.objstore import LocalStore, MemoryStore
from kvstore.objstore.faults import FaultyStore
from kvstore.wal import JournalWal, ObjectWal, decode_journal, list_wal_ids, replay

RECORDS: list[tuple[int, list[bytes], list[bytes | None]]] = [
    (1, [b"a"], [b"x"]),
    (2, [b"b", b"c"], [b"yy", None]),
    (3, [], []),
    (4, [b"d" * 300], [b"v" * 5000]),
]


def journal(root: Path, *, clock: FakeClock | None = None) -> JournalWal:
    return JournalWal(LocalStore(str(root), fsync=False), 1, lambda: None, clock=clock)


# -- append_record ---------------------------------------------------------------------


def test_journal_append_record_matches_append_of_encode_record(tmp_path: Path) -> None:
    by_record = journal(tmp_path / "a")
    by_frame = journal(tmp_path / "b")
    for seq, keys, values in RECORDS:
        lsn = by_record.append_record(seq, keys, values)
        assert lsn == by_frame.append(encode_record(seq, keys, values))
    by_record.sync(lsn)
    by_frame.sync(lsn)
    by_record.close()
    by_frame.close()
    name = paths.wal_segment_name(1)
    a = (tmp_path / "a" / name).read_bytes()
    assert a == (tmp_path / "b" / name).read_bytes()
    records = decode_segment(a).records
    assert [(r.seq, r.keys, r.values) for r in records] == RECORDS


def test_object_append_record_matches_append_of_encode_record() -> None:
    stores = MemoryStore(), MemoryStore()
    by_record, by_frame = ObjectWal(stores[0], 1), ObjectWal(stores[1], 1)
    lsns = []
    for seq, keys, values in RECORDS:
        lsns.append(by_record.append_record(seq, keys, values))
        assert lsns[-1] == by_frame.append(encode_record(seq, keys, values))
    assert lsns == sorted(lsns) and len(set(lsns)) == len(lsns)
    by_record.sync(lsns[-1])
    by_frame.sync(lsns[-1])
    name = paths.wal_object_name(1)
    assert stores[0].get(name) == stores[1].get(name)
    records, fence = decode_object(stores[0].get(name))
    assert not fence
    assert [(r.seq, r.keys, r.values) for r in records] == RECORDS
    assert by_record.data_ids == [1]


# -- delete_before: journal ------------------------------------------------------------


def test_journal_delete_before_removes_only_older_log_segments(tmp_path: Path) -> None:
    wal = journal(tmp_path)
    for seq in range(1, 4):
        wal.sync(wal.append_record(seq, [b"k"], [b"v"]))
        wal.rotate()  # segments 1, 2, 3 closed; 4 live
    store = LocalStore(str(tmp_path))
    store.put(paths.wal_object_name(2), fence_object())  # not a journal segment: stays
    wal.delete_before(3)
    assert list_wal_ids(store) == [(2, "wal"), (3, "log"), (4, "log")]
    wal.delete_before(3)  # nothing left below: a no-op
    wal.delete_before(5)  # the live segment too, as the DB asks once it is flushed
    assert list_wal_ids(store) == [(2, "wal")]
    wal.close()


def test_journal_delete_before_logs_a_failure_and_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    inner = LocalStore(str(tmp_path), fsync=False)
    store = FaultyStore(inner)
    wal = JournalWal(store, 1, lambda: None)
    wal.rotate()
    wal.rotate()  # segments 1, 2 closed; 3 live
    store.fail_before = store.mutations + 2  # the second delete fails
    with caplog.at_level(logging.WARNING, logger="kvstore"):
        wal.delete_before(3)  # does not raise
    assert "could not delete old WAL segments" in caplog.text
    assert list_wal_ids(inner) == [(2, "log"), (3, "log")]  # stopped at the failure
    wal.delete_before(3)  # a later flush retries
    assert list_wal_ids(inner) == [(3, "log")]
    wal.close()


# -- delete_before: objects ------------------------------------------------------------


def _write_objects(wal: ObjectWal, seqs: range) -> None:
    for seq in seqs:
        wal.sync(wal.append_record(seq, [b"k%d" % seq], [b"v"]))


def test_object_delete_before_removes_data_objects_and_their_ids() -> None:
    store = MemoryStore()
    store.put(paths.wal_object_name(1), fence_object())  # the fence this writer placed
    wal = ObjectWal(store, 2, [])
    _write_objects(wal, range(1, 5))  # objects 2..5
    assert wal.data_ids == [2, 3, 4, 5]
    wal.delete_before(4)
    assert wal.data_ids == [4, 5]
    assert list_wal_ids(store) == [(1, "wal"), (4, "wal"), (5, "wal")]  # the fence stays
    wal.delete_before(100)
    assert wal.data_ids == []
    assert list_wal_ids(store) == [(1, "wal")]


def test_object_delete_before_only_touches_ids_it_knows() -> None:
    # objects of an earlier writer are not in data_ids: sweep_wal_objects owns those
    store = MemoryStore()
    store.put(paths.wal_object_name(1), encode_object(encode_record(1, [b"a"], [b"b"]), 1))
    wal = ObjectWal(store, 2, [])
    _write_objects(wal, range(2, 4))
    wal.delete_before(10)
    assert list_wal_ids(store) == [(1, "wal")]


def test_object_delete_before_keeps_ids_it_could_not_delete(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = FaultyStore(MemoryStore())
    wal = ObjectWal(store, 1, [])
    _write_objects(wal, range(1, 5))  # objects 1..4
    store.fail_before = store.mutations + 2  # the delete of object 2 fails
    with caplog.at_level(logging.WARNING, logger="kvstore"):
        wal.delete_before(4)
    assert "could not delete old WAL segments" in caplog.text
    assert wal.data_ids == [2, 3, 4]  # 1 went; 2 failed, so 2 and 3 wait
    assert [i for i, _ in list_wal_ids(store.inner)] == [2, 3, 4]
    wal.delete_before(4)
    assert wal.data_ids == [4]
    assert [i for i, _ in list_wal_ids(store.inner)] == [4]


def test_deleted_objects_are_not_replayed_and_the_rest_are() -> None:
    store = MemoryStore()
    wal = ObjectWal(store, 1, [])
    _write_objects(wal, range(1, 5))
    wal.delete_before(3)
    result = replay(store, 1, 0)
    assert [r.seq for r in result.records] == [3, 4]
    assert result.data_ids == [3, 4]


# -- the clock -------------------------------------------------------------------------


def test_object_wal_checks_its_fence_on_the_clock_it_was_given() -> None:
    clock = FakeClock()
    checks: list[float] = []
    fenced = False

    def check() -> None:
        checks.append(clock.monotonic())
        if fenced:
            raise FencedError("a newer writer")

    wal = ObjectWal(MemoryStore(), 1, [], fence_check=check, clock=clock)
    _write_objects(wal, range(1, 4))
    assert checks == []  # no fake time passed: no check, however many syncs
    clock.advance(1.0)
    _write_objects(wal, range(4, 5))
    assert checks == [clock.monotonic()]
    _write_objects(wal, range(5, 6))
    assert len(checks) == 1
    fenced = True
    clock.advance(1.0)
    _write_objects(wal, range(6, 7))  # acknowledged: it lies below the fence
    with pytest.raises(FencedError):
        wal.append_record(7, [b"k"], [b"v"])
        wal.sync(wal.appended)


def test_decode_journal_rereads_on_the_clock_it_was_given() -> None:
    store = MemoryStore()
    frame = encode_record(1, [b"k"], [b"v"])
    good = segment_header() + frame
    # a read caught mid-write: the frame's first page copied before the write
    torn = segment_header() + b"\0" * 8 + frame[8:] + b"\0" * 16
    store.put("seg", good)
    clock = FakeClock()
    data, decoded = decode_journal(store, "seg", torn, clock=clock)
    assert data == good and [r.seq for r in decoded.records] == [1]
    assert clock.sleeps == [0.001]
    store.put("seg", torn)
    clock = FakeClock()
    with pytest.raises(CorruptionError):
        decode_journal(store, "seg", torn, clock=clock)
    assert clock.sleeps == [0.001, 0.002, 0.004]  # LIVE_REREADS re-reads, no real waits


def test_journal_wal_times_its_syncs_on_its_clock(tmp_path: Path) -> None:
    clock = FakeClock()
    wal = journal(tmp_path, clock=clock)
    wal.sync(wal.append_record(1, [b"k"], [b"v"]))
    assert wal._last_sync_s == 0.0  # fake time does not pass while syncing
    wal.close()
