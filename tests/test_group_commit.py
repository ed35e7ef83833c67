"""Group commit: how a leader gathers the frames of its group before syncing.

The leader of a sync blocks (releasing the GIL) until as many frames as its
previous group had are buffered; the append that completes the group wakes
it. A group that never completes is synced after the gather timeout.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from kvstore import paths
from kvstore.format.wal import decode_segment, encode_record
from kvstore.objstore import LocalStore
from kvstore.wal import JournalWal

LIVENESS_S = 30.0  # only catches a hang; never a performance bound


def make_wal(root: Path) -> JournalWal:
    return JournalWal(LocalStore(str(root), fsync=True), 1, fence_check=lambda: None)


def frame(seq: int) -> bytes:
    return encode_record(seq, [b"k%d" % seq], [b"v%d" % seq])


def test_the_append_that_completes_the_group_wakes_the_leader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wal = make_wal(tmp_path)
    # the last group had 3 writers, and the gather could wait far longer than this test
    monkeypatch.setattr(JournalWal, "MAX_GATHER_S", 3600.0)
    wal._last_group, wal._last_sync_s = 3, 3600.0
    first = wal.append(frame(1))
    leader = threading.Thread(target=wal.sync, args=(first,))
    leader.start()
    give_up = time.monotonic() + LIVENESS_S
    while wal._gathering is None and time.monotonic() < give_up:
        time.sleep(0.001)  # until the leader is waiting for its group
    assert wal.syncs == 0 and wal._synced == 0
    wal.append(frame(2))
    assert wal._gathering is not None  # one frame short: still waiting
    last = wal.append(frame(3))
    assert wal._gathering is None  # this append released it
    leader.join(LIVENESS_S)
    assert not leader.is_alive()
    assert wal.syncs == 1 and wal._synced == last  # one sync for the whole group
    wal.close()
    records = decode_segment((tmp_path / paths.wal_segment_name(1)).read_bytes()).records
    assert [r.seq for r in records] == [1, 2, 3]


def test_an_incomplete_group_is_synced_after_the_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wal = make_wal(tmp_path)
    monkeypatch.setattr(JournalWal, "MAX_GATHER_S", 0.01)
    wal._last_group, wal._last_sync_s = 5, 1.0
    lsn = wal.append(frame(1))
    done = threading.Thread(target=wal.sync, args=(lsn,))
    done.start()
    done.join(LIVENESS_S)
    assert not done.is_alive()
    assert wal.syncs == 1 and wal._synced == lsn and wal._gathering is None
    assert wal._last_group == 1  # the next leader will not wait
    wal.close()


def test_a_lone_writer_never_gathers(tmp_path: Path) -> None:
    wal = make_wal(tmp_path)
    for seq in range(1, 6):
        wal.sync(wal.append(frame(seq)))
        assert wal._gathering is None and wal._last_group == 1
    assert wal.syncs == 5
    wal.close()


def test_threads_share_syncs(tmp_path: Path) -> None:
    """8 threads of 50 durable appends each: every frame is durable and in the file,
    and groups formed (fewer syncs than frames)."""
    wal = make_wal(tmp_path)
    seqs = iter(range(1, 10_000))
    lock = threading.Lock()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for _ in range(50):
                with lock:  # seq order = append order, as under the commit lock
                    lsn = wal.append(frame(next(seqs)))
                wal.sync(lsn)
                assert wal._synced >= lsn
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(LIVENESS_S)
    assert not errors and not any(t.is_alive() for t in threads)
    assert wal.syncs < 400
    wal.close()
    records = decode_segment((tmp_path / paths.wal_segment_name(1)).read_bytes()).records
    assert [r.seq for r in records] == list(range(1, 401))
