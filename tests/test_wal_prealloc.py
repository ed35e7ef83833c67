"""Preallocated WAL journals (kvstore/objstore/local.py, docs/format/wal.md).

A local journal segment is pre-written with zeros ahead of its write position
(by a thread, or by append when it falls behind), so while it is open (and
after a crash) it ends in zero padding; a clean close truncates it to its content. Checked here:

* the file sizes: whole preallocation steps while open, with at least one
  zero byte after the last write; exactly the content after close;
* the torn-tail rule on a padded segment: a last frame cut anywhere (header
  or payload) before zeros is cut; a damaged frame followed by anything
  non-zero is CorruptionError; the documented blind spot (a damaged last
  frame before zeros is cut);
* recovery from copies taken while the writer is open, from a torn last frame
  written into such a copy, and from a writer process killed with SIGKILL;
* the pre-writer keeping ahead, and the fallback to plain appends when a pre-write
  fails with a full disk (other errors are raised);
* readers of a live journal: zero padding, and the re-read of a segment read
  while a write was in progress.
"""

from __future__ import annotations

import errno
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from itertools import accumulate
from pathlib import Path

import pytest

import kvstore
from kvstore import CorruptionError, paths
from kvstore.format.wal import (
    HEADER_SIZE,
    SEGMENT_HEADER_SIZE,
    WalRecord,
    decode_segment,
    encode_record,
    segment_header,
)
from kvstore.objstore import LocalStore, MemoryStore, local
from kvstore.wal import LIVE_REREADS, JournalWal, replay

STEP = local.JOURNAL_PREALLOCATE
REPO = Path(__file__).resolve().parents[1]


def segments(root: Path) -> list[Path]:
    return sorted((root / "wal").glob("*.log"))


def value(i: int) -> bytes:
    return b"value-%d-" % i + bytes([i % 251 + 1]) * (i % 40)


def put_many(db: kvstore.DB, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        db.put(b"k%06d" % i, value(i))


def flip(path: Path, pos: int, mask: int = 0x10) -> None:
    data = bytearray(path.read_bytes())
    data[pos] ^= mask
    path.write_bytes(bytes(data))


# ---------------------------------------------------------------------------
# the journal file
# ---------------------------------------------------------------------------


def test_journal_is_preallocated_while_open_and_exact_after_close(tmp_path: Path) -> None:
    j = LocalStore(tmp_path).open_journal("wal/1.log")
    assert j is not None
    j.append(b"abc")
    j.append(b"def")
    j.sync()
    path = tmp_path / "wal" / "1.log"
    data = path.read_bytes()
    assert len(data) == STEP and data[:6] == b"abcdef" and not any(data[6:])
    j.close()
    assert path.read_bytes() == b"abcdef"
    j.close()  # idempotent
    assert path.read_bytes() == b"abcdef"


def test_journal_extends_by_whole_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "JOURNAL_PREALLOCATE", 64)
    monkeypatch.setattr(local, "PREWRITE_IN_BACKGROUND", False)  # append pre-writes
    calls: list[tuple[int, int]] = []
    real = local._write_zeros

    def write_zeros(fd: int, offset: int, length: int) -> None:
        calls.append((offset, length))
        real(fd, offset, length)

    monkeypatch.setattr(local, "_write_zeros", write_zeros)
    j = LocalStore(tmp_path).open_journal("j")
    assert j is not None
    path = tmp_path / "j"
    written = b""
    for n in [10, 53, 1, 64, 200, 7]:  # 63 leaves one zero byte; 64 reaches the end
        chunk = bytes([n]) * n
        j.append(chunk)
        written += chunk
        data = path.read_bytes()
        assert len(data) % 64 == 0 and len(data) > len(written)  # a zero byte after the write
        assert data == written + bytes(len(data) - len(written))
    assert calls == [(0, 64), (64, 64), (128, 64), (192, 192)]
    j.close()
    assert path.read_bytes() == written


def test_the_prewriter_keeps_ahead_of_the_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In steady state the thread pre-writes and append never waits for it; every
    frame lands in zeros that were written and synced before it (no extent or
    size change for the commit's fdatasync)."""
    monkeypatch.setattr(local, "JOURNAL_PREALLOCATE", 4096)
    j = LocalStore(tmp_path).open_journal("j")
    assert isinstance(j, local._FileJournal)
    frame = b"f" * 100
    for _ in range(2000):  # about 50 steps
        before = j._allocated
        j.append(frame)
        j.sync()
        assert j._pos <= before or j.prewrites[1] > 0  # only append's own step lands past
        # a commit takes far longer than one step's pre-write: wait until the
        # pre-writer is ahead again (the deadline only bounds a hang)
        deadline = time.monotonic() + 60
        while j._allocated - j._pos < 2048:
            assert time.monotonic() < deadline, "the pre-writer never got ahead"
            time.sleep(0.0005)
    assert j.prewrites[0] >= 40 and j.prewrites[1] == 1  # append only for the first step
    data = (tmp_path / "j").read_bytes()
    assert data[: j._pos] == frame * 2000 and not any(data[j._pos :])
    j.close()
    assert (tmp_path / "j").read_bytes() == frame * 2000


def test_no_preallocation_without_fsync(tmp_path: Path) -> None:
    j = LocalStore(tmp_path, fsync=False).open_journal("j")
    assert j is not None
    j.append(b"abc")
    assert (tmp_path / "j").read_bytes() == b"abc"
    j.close()


@pytest.mark.parametrize("how", ["EOPNOTSUPP", "EINVAL", "ENOSPC"])
def test_fallback_to_plain_appends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    code = getattr(errno, how)

    def refuse(fd: int, offset: int, length: int) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(local, "_write_zeros", refuse)
    db = kvstore.open(tmp_path / "db")
    put_many(db, 30)
    data = segments(tmp_path / "db")[-1].read_bytes()
    decoded = decode_segment(data)  # exactly its content, while open
    assert len(decoded.records) == 30 and not decoded.torn and decoded.valid_length == len(data)
    shutil.copytree(tmp_path / "db", tmp_path / "crashed")
    db.close()
    with kvstore.open(tmp_path / "crashed") as db2:
        assert [db2.get(b"k%06d" % i) for i in range(30)] == [value(i) for i in range(30)]


def test_unexpected_prewrite_error_is_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(local, "_write_zeros", broken)
    j = LocalStore(tmp_path).open_journal("j")
    assert j is not None
    with pytest.raises(OSError) as exc:
        j.append(b"abc")
    assert exc.value.errno == errno.EIO
    j.close()


def test_rotated_and_closed_segments_are_exact(tmp_path: Path) -> None:
    wal = JournalWal(LocalStore(tmp_path), 1, lambda: None)
    one, two = (tmp_path / paths.wal_segment_name(i) for i in (1, 2))
    wal.sync(wal.append(FRAMES[0]))
    assert one.stat().st_size == STEP
    assert wal.rotate() == 2
    assert one.read_bytes() == segment_header() + FRAMES[0]
    wal.sync(wal.append(FRAMES[1]))
    assert two.stat().st_size == STEP
    wal.close()
    assert two.read_bytes() == segment_header() + FRAMES[1]


def test_db_segment_padded_while_open_exact_after_close(tmp_path: Path) -> None:
    root = tmp_path / "db"
    db = kvstore.open(root)
    put_many(db, 100)
    data = segments(root)[-1].read_bytes()
    decoded = decode_segment(data)
    assert len(data) == STEP and len(decoded.records) == 100
    assert decoded.torn and not any(data[decoded.valid_length :])  # zero padding
    db.close()
    for path in segments(root):
        decoded = decode_segment(path.read_bytes())
        assert not decoded.torn and decoded.valid_length == path.stat().st_size
    with kvstore.open(root) as db2:
        assert [db2.get(b"k%06d" % i) for i in range(100)] == [value(i) for i in range(100)]


# ---------------------------------------------------------------------------
# the torn-tail rule on padded segments (pure)
# ---------------------------------------------------------------------------

RECORDS = [WalRecord(i, [b"key%d" % i], [b"v" * (10 * i)]) for i in range(1, 5)]
FRAMES = [encode_record(r.seq, r.keys, r.values) for r in RECORDS]
BODY = segment_header() + b"".join(FRAMES)
STARTS = list(accumulate((len(f) for f in FRAMES[:-1]), initial=SEGMENT_HEADER_SIZE))
PAD = bytes(200)
FIFTH = WalRecord(5, [b"torn"], [b"x" * 40])
F5 = encode_record(FIFTH.seq, FIFTH.keys, FIFTH.values)
LAST = F5 + encode_record(6, [b"also"], [b"y" * 8])  # one group commit: two frames
CUTS = [1, 4, 8, 11, 12, 13, 20, len(F5) - 1, len(F5), len(F5) + 5, len(F5) + 12, len(LAST) - 1]


@pytest.mark.parametrize("cut", CUTS)
def test_torn_last_write_before_zeros_is_cut(cut: int) -> None:
    """A write (two frames here) cut anywhere, the rest of it zeros: the frames
    before it are kept, the unfinished ones cut."""
    data = BODY + LAST[:cut] + bytes(len(LAST) - cut) + PAD
    decoded = decode_segment(data)
    whole = cut >= len(F5)
    assert decoded.records == RECORDS + ([FIFTH] if whole else []) and decoded.torn
    assert decoded.valid_length == len(BODY) + (len(F5) if whole else 0)


@pytest.mark.parametrize("cut", range(1, SEGMENT_HEADER_SIZE))
def test_torn_segment_header_before_zeros_is_empty(cut: int) -> None:
    assert decode_segment(segment_header()[:cut] + bytes(STEP - cut)).records == []
    assert decode_segment(segment_header()[:cut] + bytes(STEP - cut)).torn


def test_damaged_segment_header_is_corruption_unless_only_zeros_follow() -> None:
    bad = bytearray(segment_header())
    bad[9] ^= 0x01
    with pytest.raises(CorruptionError):
        decode_segment(bytes(bad))  # nothing after it: a closed, damaged segment
    with pytest.raises(CorruptionError):
        decode_segment(bytes(bad) + b"".join(FRAMES) + PAD)
    assert decode_segment(bytes(bad) + PAD).records == []  # no frame was ever behind it


def frame_positions(frame: int) -> dict[str, int]:
    s = STARTS[frame]
    return {"length": s, "header_crc": s + 4, "payload_crc": s + 8, "payload": s + HEADER_SIZE + 3}


@pytest.mark.parametrize("part", ["length", "header_crc", "payload_crc", "payload"])
@pytest.mark.parametrize("frame", [0, 1, 2])
def test_flip_in_a_middle_frame_is_corruption(frame: int, part: str) -> None:
    for tail in (PAD, b"", LAST[:20] + PAD):
        data = bytearray(BODY + tail)
        data[frame_positions(frame)[part]] ^= 0x10
        with pytest.raises(CorruptionError):
            decode_segment(bytes(data))


@pytest.mark.parametrize("part", ["length", "header_crc", "payload_crc", "payload"])
@pytest.mark.parametrize("garbage", [b"\x01", b"\x00" * 50 + b"\x80", LAST])
def test_flip_in_the_last_frame_before_non_zero_bytes_is_corruption(
    part: str, garbage: bytes
) -> None:
    data = bytearray(BODY + garbage + PAD)
    data[frame_positions(3)[part]] ^= 0x10
    with pytest.raises(CorruptionError):
        decode_segment(bytes(data))


@pytest.mark.parametrize("part", ["length", "header_crc", "payload_crc", "payload"])
def test_flip_in_the_last_frame_of_a_closed_segment_is_corruption(part: str) -> None:
    data = bytearray(BODY)  # a clean close leaves no padding
    data[frame_positions(3)[part]] ^= 0x10
    with pytest.raises(CorruptionError):
        decode_segment(bytes(data))


@pytest.mark.parametrize("part", ["payload_crc", "payload"])
def test_flip_in_the_last_frame_payload_before_zeros_is_cut(part: str) -> None:
    """The documented blind spot: indistinguishable from a torn write, so cut."""
    data = bytearray(BODY + PAD)
    data[frame_positions(3)[part]] ^= 0x10
    decoded = decode_segment(bytes(data))
    assert decoded.records == RECORDS[:3] and decoded.torn
    assert decoded.valid_length == STARTS[3]


@pytest.mark.parametrize("part", ["length", "header_crc"])
def test_flip_in_the_last_frame_header_before_zeros_is_corruption(part: str) -> None:
    """A bad header is followed by its (non-zero) payload: not a torn write."""
    data = bytearray(BODY + PAD)
    data[frame_positions(3)[part]] ^= 0x10
    with pytest.raises(CorruptionError):
        decode_segment(bytes(data))


# ---------------------------------------------------------------------------
# recovery of a store copied while its writer is open
# ---------------------------------------------------------------------------

N = 40


@pytest.fixture(scope="module")
def live_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store as a crash of the writer would leave it: N durable puts, open."""
    root = tmp_path_factory.mktemp("live") / "db"
    db = kvstore.open(root)
    put_many(db, N)
    copy = tmp_path_factory.mktemp("copy") / "db"
    shutil.copytree(root, copy)
    db.close()
    return copy


def damaged(live_copy: Path, dst: Path, edit: Callable[[Path, bytes], None]) -> Path:
    shutil.copytree(live_copy, dst)
    seg = segments(dst)[-1]
    edit(seg, seg.read_bytes())
    return dst


def expect_all(root: Path, n: int = N) -> None:
    with kvstore.open(root) as db:
        assert [db.get(b"k%06d" % i) for i in range(n)] == [value(i) for i in range(n)]
        assert db.get(b"k%06d" % n) is None


def test_recovery_from_a_copy_taken_while_open(live_copy: Path, tmp_path: Path) -> None:
    data = segments(live_copy)[-1].read_bytes()
    decoded = decode_segment(data)
    assert len(data) == STEP and len(decoded.records) == N
    assert decoded.torn and not any(data[decoded.valid_length :])
    expect_all(damaged(live_copy, tmp_path / "db", lambda p, d: None))


@pytest.mark.parametrize("cut", [1, 6, 11, 12, 13, 30, -1])
def test_recovery_cuts_a_torn_last_frame(live_copy: Path, tmp_path: Path, cut: int) -> None:
    """The next frame partially written into the preallocated space, then zeros."""
    frame = encode_record(N + 1, [b"k%06d" % N], [value(N)])

    def tear(p: Path, data: bytes) -> None:
        at = decode_segment(data).valid_length
        with open(p, "r+b") as f:
            f.seek(at)
            f.write(frame[:cut])

    expect_all(damaged(live_copy, tmp_path / "db", tear))


@pytest.mark.parametrize("which", ["middle", "last, garbage after"])
def test_recovery_reports_damage(live_copy: Path, tmp_path: Path, which: str) -> None:
    def edit(p: Path, data: bytes) -> None:
        end = decode_segment(data).valid_length
        if which == "middle":
            flip(p, SEGMENT_HEADER_SIZE + 40)
        else:
            flip(p, end - 2)  # the last frame's payload
            flip(p, end + 100, 0x01)  # non-zero bytes in the padding

    root = damaged(live_copy, tmp_path / "db", edit)
    with pytest.raises(CorruptionError):
        kvstore.open(root)


# ---------------------------------------------------------------------------
# a writer process killed with SIGKILL
# ---------------------------------------------------------------------------

CHILD = """
import sys
import kvstore
from kvstore.objstore import local

local.JOURNAL_PREALLOCATE = 16 << 10  # extend often
db = kvstore.open(sys.argv[1], memtable_bytes=64 << 10)  # and rotate often
start = int(sys.argv[2])
print("READY", flush=True)
i = start
while True:
    db.put(b"k%06d" % i, b"value-%d-" % i + bytes([i % 251 + 1]) * (i % 40))
    print(i, flush=True)
    i += 1
"""


def test_sigkill_loses_no_acknowledged_put(tmp_path: Path) -> None:
    root = tmp_path / "db"
    rng = random.Random(7)
    acked = 0
    for _run in range(3):  # kill, recover in the next run, kill again
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(root), str(acked)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"READY", proc.communicate()[1].decode()
        first = proc.stdout.readline()  # the kill lands after at least one acknowledgement
        time.sleep(rng.uniform(0.2, 0.6))
        proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL, err.decode()
        lines = (first + out).split(b"\n")[:-1]  # a line is acknowledged once it is complete
        assert lines, "the writer acknowledged nothing"
        acked = int(lines[-1]) + 1
    with kvstore.open(root) as db:
        missing = [i for i in range(acked) if db.get(b"k%06d" % i) != value(i)]
        assert not missing, f"{len(missing)} acknowledged puts lost, first {missing[:5]}"


# ---------------------------------------------------------------------------
# readers of a live journal
# ---------------------------------------------------------------------------


def test_reader_of_a_live_writer(tmp_path: Path) -> None:
    root = tmp_path / "db"
    with kvstore.open(root) as db:
        put_many(db, 20)
        reader = kvstore.open_reader(root)
        try:
            assert [reader.get(b"k%06d" % i) for i in range(20)] == [value(i) for i in range(20)]
            put_many(db, 20, start=20)
            reader.refresh()
            assert reader.get(b"k%06d" % 39) == value(39)
        finally:
            reader.close()


def test_reader_refreshing_during_durable_writes(tmp_path: Path) -> None:
    root = tmp_path / "db"
    db = kvstore.open(root, memtable_bytes=32 << 10)
    put_many(db, 1)
    reader = kvstore.open_reader(root)
    stop = threading.Event()
    written = [0]

    def write() -> None:
        i = 1
        while not stop.is_set():
            db.put(b"k%06d" % i, value(i))
            written[0] = i
            i += 1

    writer = threading.Thread(target=write)
    writer.start()
    try:
        deadline = time.monotonic() + 1.0
        last = 0
        while time.monotonic() < deadline:
            seen_before = written[0]
            seq = reader.refresh()  # never a CorruptionError from a write in progress
            assert seq >= last and reader.get(b"k%06d" % seen_before) == value(seen_before)
            last = seq
    finally:
        stop.set()
        writer.join()
        reader.close()
        db.close()


class _HoleThenWhole(MemoryStore):
    """The first ``holes`` reads of the segment return it with a hole (zeros, then data)."""

    def __init__(self, whole: bytes, hole: bytes, holes: int, *, then_gone: bool = False) -> None:
        super().__init__()
        self.put(paths.wal_segment_name(1), whole)
        self.hole, self.holes, self.gets, self.then_gone = hole, holes, 0, then_gone

    def get(self, name: str) -> bytes:
        self.gets += 1
        if self.gets <= self.holes:
            return self.hole
        if self.then_gone:  # deleted after the listing
            raise FileNotFoundError(name)
        return super().get(name)


def hole_in_last_write() -> tuple[bytes, bytes]:
    """A padded segment, and the same read while its last write was in progress:
    the last frame's start still zeros, its end already there."""
    whole = BODY + PAD
    hole = bytearray(whole)
    hole[STARTS[3] : STARTS[3] + 16] = bytes(16)
    return whole, bytes(hole)


def test_replay_rereads_a_segment_read_mid_write() -> None:
    whole, hole = hole_in_last_write()
    with pytest.raises(CorruptionError):
        decode_segment(hole)
    store = _HoleThenWhole(whole, hole, holes=LIVE_REREADS)
    assert replay(store, 0, 0).records == RECORDS
    assert store.gets == LIVE_REREADS + 1


def test_replay_raises_damage_that_stays() -> None:
    whole, hole = hole_in_last_write()
    store = _HoleThenWhole(whole, hole, holes=LIVE_REREADS + 1)
    with pytest.raises(CorruptionError):
        replay(store, 0, 0)
    assert store.gets == LIVE_REREADS + 1
    closed = BODY[:-1] + bytes([BODY[-1] ^ 1])  # no padding: never read again
    store = _HoleThenWhole(closed, closed, holes=0)
    with pytest.raises(CorruptionError):
        replay(store, 0, 0)
    assert store.gets == 1


def test_replay_segment_deleted_between_rereads() -> None:
    """The writer flushed and deleted the segment while it was being read again."""
    whole, hole = hole_in_last_write()
    store = _HoleThenWhole(whole, hole, holes=1, then_gone=True)
    assert replay(store, 0, 0, tolerate_missing=True).records == []
    assert store.gets == 2
    store = _HoleThenWhole(whole, hole, holes=1, then_gone=True)
    with pytest.raises(FileNotFoundError):
        replay(store, 0, 0)
