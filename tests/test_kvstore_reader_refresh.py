"""``Reader.refresh`` costs what changed (kvstore/reader.py, "A refresh costs what changed").

A writer commits in steps and a reader refreshes between them; after every
refresh the reader must show exactly the writer's data (full scans, seqs),
across flushes, compactions, a rotation of the live journal segment, a writer
reopened or fenced, a frame half-written at refresh time and a writer that
crashed in the middle of a frame; snapshots taken before a refresh keep
reading their old state. Counters (WAL bytes read through a wrapping store,
frames decoded) show that a refresh with nothing new decodes no frame and
reads no WAL byte before the last frame end, and that a refresh after a few
commits decodes only those.

Backends: a local journal without pre-writing (``fsync=False``), a local
journal with pre-written zero padding (``fsync=True``), and WAL objects on
the memory store.
"""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kvstore
import kvstore.format.wal as walfmt
from kvstore import paths
from kvstore.errors import CorruptionError
from kvstore.format.wal import SEGMENT_HEADER_SIZE, decode_segment, encode_record
from kvstore.memtable import ABSENT, Memtable
from kvstore.objstore import LocalStore, MemoryStore, open_store
from kvstore.objstore.faults import FaultyStore, SimulatedCrash
from kvstore.reader import Reader
from kvstore.wal import list_wal_ids

BACKENDS = ["journal", "journal-prealloc", "objects"]
QUIET = {"background_flush": False, "background_compaction": False}


class CountingStore:
    """A store that counts what is read of the WAL (whole gets and ranged reads)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.wal_gets: list[str] = []
        self.wal_ranges: list[tuple[str, int]] = []
        self.wal_bytes = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def reset(self) -> None:
        self.wal_gets.clear()
        self.wal_ranges.clear()
        self.wal_bytes = 0

    def get(self, name: str) -> bytes:
        data: bytes = self.inner.get(name)
        if name.startswith(paths.WAL_DIR):
            self.wal_gets.append(name)
            self.wal_bytes += len(data)
        return data

    def get_range(self, name: str, start: int, length: int) -> bytes:
        data: bytes = self.inner.get_range(name, start, length)
        if name.startswith(paths.WAL_DIR):
            self.wal_ranges.append((name, start))
            self.wal_bytes += len(data)
        return data


class Setup:
    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        if kind == "objects":
            self.url = f"memory://reader-refresh-{uuid.uuid4().hex}"
        else:
            self.url = str(tmp_path / "db")
        self.options: dict[str, Any] = {"fsync": kind == "journal-prealloc"}

    def open(self, **options: Any) -> kvstore.DB:
        return kvstore.open(self.url, **{**self.options, **options})

    def store(self) -> Any:
        if self.kind == "objects":
            return open_store(self.url)
        return LocalStore(self.url, create=False)

    def reader(self) -> tuple[Reader, CountingStore]:
        counting = CountingStore(self.store())
        return Reader(counting), counting

    def drop(self) -> None:
        if self.kind == "objects":
            MemoryStore.drop(self.url.removeprefix("memory://"))


@pytest.fixture(params=BACKENDS)
def setup(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Setup]:
    s = Setup(request.param, tmp_path)
    yield s
    s.drop()


@pytest.fixture
def frames(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the WAL frames decoded (every frame goes through ``decode_payload``)."""
    count = [0]
    real = walfmt.decode_payload

    def counting(payload: bytes, *, where: str = "WAL") -> walfmt.WalRecord:
        count[0] += 1
        return real(payload, where=where)

    monkeypatch.setattr(walfmt, "decode_payload", counting)
    return count


def same(reader: Any, db: kvstore.DB) -> None:
    assert reader.last_seq == db.last_seq
    assert list(reader.scan()) == list(db.scan())


def commit_step(db: kvstore.DB, rng: random.Random, step: int) -> None:
    """A few commits: puts, deletes, and a batch rewriting keys that exist among new ones."""
    for _ in range(rng.randint(1, 4)):
        what = rng.random()
        if what < 0.5:
            db.put(b"k%03d" % rng.randrange(60), b"v%d-%d" % (step, rng.randrange(1000)))
        elif what < 0.7:
            db.delete(b"k%03d" % rng.randrange(60))
        else:
            batch = kvstore.WriteBatch()
            for i in rng.sample(range(60), 3):  # rewritten among many new keys: bulk path
                batch.put(b"k%03d" % i, b"b%d" % step)
            for i in range(rng.randint(10, 30)):
                batch.put(b"n%04d-%03d" % (step, i), b"x" * rng.randint(0, 40))
            db.write(batch)


def rotate(db: kvstore.DB) -> None:
    """Close the live journal segment and start the next, without a flush: the
    manifest stays (a flush would rotate too, then write a manifest)."""
    with db.parts.commit.cond:
        db.parts.commit.wal.rotate()


def live_id(root: str) -> int:
    return max(i for i, kind in list_wal_ids(LocalStore(root)) if kind == "log")


def live_segment(root: str) -> Path:
    return Path(root) / paths.wal_segment_name(live_id(root))


# ----------------------------------------------------------------------
# the reader follows the writer
# ----------------------------------------------------------------------
def test_reader_follows_the_writer_step_by_step(setup: Setup) -> None:
    rng = random.Random(7)
    db = setup.open(memtable_bytes=1 << 30, **QUIET)
    db.put(b"k000", b"first")
    reader, _ = setup.reader()
    same(reader, db)
    # (snapshot, seq, its items) since the last change of manifest; older ones are
    # allowed to lose SSTs to compaction and GC
    snaps: list[tuple[Any, int, list[tuple[bytes, bytes]]]] = []
    for step in range(60):
        commit_step(db, rng, step)
        op = step % 12
        if op == 4:
            db.flush()
        elif op == 8:
            db.flush()
            db.compact()
        elif op == 10 and setup.kind != "objects":
            rotate(db)
        manifest_before = reader.manifest.id
        reader.refresh()
        same(reader, db)
        if reader.manifest.id != manifest_before:
            snaps.clear()
        for snap, seq, expect in snaps:
            assert snap.seq == seq and list(snap.scan()) == expect
            assert list(reader.snapshot(seq).scan()) == expect
        snaps.append((reader.snapshot(), reader.last_seq, list(reader.scan())))
    db.close()
    reader.refresh()
    with setup.open() as again:
        same(reader, again)


def test_a_rotated_segment_is_read_on_from_where_the_last_refresh_stopped(
    setup: Setup, frames: list[int]
) -> None:
    if setup.kind == "objects":
        pytest.skip("WAL objects have no live segment")
    db = setup.open(memtable_bytes=1 << 30, **QUIET)
    for i in range(20):
        db.put(b"a%02d" % i, b"1")
    reader, counting = setup.reader()
    manifest = reader.manifest.id
    for i in range(3):  # these land in the segment about to close
        db.put(b"b%02d" % i, b"2")
    rotate(db)
    for i in range(4):
        db.put(b"c%02d" % i, b"3")
    frames[0] = 0
    counting.reset()
    reader.refresh()
    same(reader, db)
    assert reader.manifest.id == manifest  # no flush: the same manifest, read on
    assert frames[0] == 7
    assert counting.wal_gets == [paths.wal_segment_name(live_id(setup.url))]
    db.close()


# ----------------------------------------------------------------------
# what a refresh reads
# ----------------------------------------------------------------------
def test_a_refresh_reads_only_what_changed(setup: Setup, frames: list[int]) -> None:
    db = setup.open(memtable_bytes=1 << 30, **QUIET)
    for i in range(200):
        db.put(b"k%04d" % i, b"v" * 30)
    reader, counting = setup.reader()
    same(reader, db)

    def refresh_counting() -> int:
        frames[0] = 0
        counting.reset()
        reader.refresh()
        same(reader, db)
        return frames[0]

    end = 0
    if setup.kind != "objects":
        end = decode_segment(live_segment(setup.url).read_bytes()).valid_length
    for _ in range(3):  # nothing new: no frame decoded, nothing before the last frame end read
        assert refresh_counting() == 0
        assert counting.wal_gets == []
        assert all(start >= end for _, start in counting.wal_ranges)
        if setup.kind != "journal-prealloc":
            assert counting.wal_bytes == 0  # (a pre-written segment has zeros to look at)

    db.put(b"one", b"more")
    assert refresh_counting() == 1
    if setup.kind == "objects":
        assert len(counting.wal_gets) == 1  # the new WAL object only
    else:
        assert counting.wal_gets == [] and all(s >= end for _, s in counting.wal_ranges)
        assert counting.wal_bytes < 2 << 20  # not the 200 frames before

    for i in range(5):
        db.put(b"five%d" % i, b"x")
    assert refresh_counting() == 5
    assert refresh_counting() == 0

    db.flush()  # a new manifest: the full path (which has nothing left to replay)
    db.put(b"after", b"flush")
    assert refresh_counting() == 1
    db.put(b"after2", b"flush")
    assert refresh_counting() == 1
    db.close()


# ----------------------------------------------------------------------
# torn frames
# ----------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["journal", "journal-prealloc"])
@pytest.mark.parametrize("half", ["same", "other"])
def test_a_frame_half_written_at_refresh_time(
    tmp_path: Path, kind: str, half: str, frames: list[int]
) -> None:
    """The reader sees the complete frames, and reads on from the last one's end
    once the writer has finished the frame (its bytes rewrite the half frame)."""
    setup = Setup(kind, tmp_path)
    db = setup.open(memtable_bytes=1 << 30, **QUIET)
    for i in range(10):
        db.put(b"k%02d" % i, b"v%d" % i)
    reader, _ = setup.reader()
    seq = reader.last_seq
    seg = live_segment(setup.url)
    end = decode_segment(seg.read_bytes()).valid_length
    nxt = encode_record(seq + 1, [b"k03"], [b"new"])
    if half == "other":
        nxt = encode_record(seq + 1, [b"zz"], [b"q"])  # (shorter: the writer's frame covers it)
    with open(seg, "r+b") as f:
        f.seek(end)
        f.write(nxt[: len(nxt) // 2])
    for _ in range(2):
        assert reader.refresh() == seq
        assert reader.get(b"k03") == b"v3" and reader.get(b"zz") is None
    db.put(b"k03", b"new")
    frames[0] = 0
    assert reader.refresh() == seq + 1
    same(reader, db)
    assert frames[0] == 1
    db.put(b"k04", b"newer")
    reader.refresh()
    same(reader, db)
    db.close()


@pytest.mark.parametrize("kind", ["journal", "journal-prealloc"])
def test_a_writer_that_died_in_the_middle_of_a_frame(tmp_path: Path, kind: str) -> None:
    setup = Setup(kind, tmp_path)
    faulty = FaultyStore(LocalStore(setup.url), torn=True)
    db = kvstore.open(faulty, **{**setup.options, **QUIET})
    for i in range(10):
        db.put(b"k%02d" % i, b"v%d" % i)
    reader, _ = setup.reader()
    before = list(db.scan())
    seq = db.last_seq
    faulty.crash_before = faulty.mutations + 1
    with pytest.raises(SimulatedCrash):
        db.put(b"k05", b"torn" * 50)
    assert reader.refresh() == seq  # the half frame is cut, again and again
    assert reader.refresh() == seq
    assert list(reader.scan()) == before
    try:
        db.abandon()
    except SimulatedCrash:
        pass
    with setup.open(**QUIET) as again:  # cuts the torn tail, writes a new manifest
        reader.refresh()
        same(reader, again)
        again.put(b"k05", b"after")
        reader.refresh()
        same(reader, again)


# ----------------------------------------------------------------------
# writers reopened, fenced
# ----------------------------------------------------------------------
def test_a_new_writer_reopened_or_fencing(setup: Setup, frames: list[int]) -> None:
    first = setup.open(**QUIET)
    for i in range(30):
        first.put(b"k%02d" % i, b"one")
    reader, _ = setup.reader()
    same(reader, first)
    first.put(b"k00", b"one-more")
    reader.refresh()
    same(reader, first)

    second = setup.open(takeover=True, **QUIET)  # fences the first: a new epoch, manifest
    reader.refresh()
    same(reader, second)
    assert reader.get(b"k00") == b"one-more"
    second.put(b"k01", b"two")
    frames[0] = 0
    reader.refresh()
    same(reader, second)
    assert frames[0] == 1  # the new writer's WAL, read on incrementally
    with pytest.raises(kvstore.KvError):
        first.put(b"k02", b"stale")  # fenced: never visible
    reader.refresh()
    same(reader, second)
    assert reader.get(b"k02") == b"one"
    second.close()
    first.close()

    reader.refresh()
    with setup.open(**QUIET) as third:
        reader.refresh()
        same(reader, third)
        third.delete(b"k03")
        reader.refresh()
        same(reader, third)


# ----------------------------------------------------------------------
# snapshots handed out before a refresh
# ----------------------------------------------------------------------
def test_snapshots_keep_their_state_while_refreshes_apply_new_writes(setup: Setup) -> None:
    db = setup.open(memtable_bytes=1 << 30, **QUIET)
    for i in range(50):
        db.put(b"k%02d" % i, b"v0")
    reader, _ = setup.reader()
    snap = reader.snapshot()
    expect = list(snap.scan())
    problems: list[str] = []
    stop = threading.Event()

    def read_old() -> None:
        while not stop.is_set():
            got = list(snap.scan())
            if got != expect:
                problems.append(f"scan at {snap.seq} changed")
            for k, v in expect[::7]:
                if snap.get(k) != v:
                    problems.append(f"get({k!r}) at {snap.seq} changed")

    thread = threading.Thread(target=read_old)
    thread.start()
    try:
        for r in range(40):
            batch = kvstore.WriteBatch()
            for i in range(0, 50, 10):  # rewritten among new keys (the memtable's bulk path)
                batch.put(b"k%02d" % i, b"v%d" % (r + 1))
            for i in range(40):
                batch.put(b"new%02d-%02d" % (r, i), b"n")
            db.write(batch)
            db.delete(b"k%02d" % (r % 50))
            reader.refresh()
            same(reader, db)
    finally:
        stop.set()
        thread.join()
    assert problems == []
    assert list(snap.scan()) == expect
    assert list(reader.snapshot(snap.seq).scan()) == expect
    db.close()


def test_a_bulk_write_never_hides_older_versions_from_a_concurrent_read() -> None:
    """White box: the memtable's bulk path puts a rewritten key's new version on its
    version list before the new keys land, so a read at an older seq in between
    still finds its version (a reader applies refreshes under live snapshots)."""
    mt = Memtable(0)
    mt.apply(1, [b"head"], [b"h1"])
    mt.apply(2, [b"list"], [b"l2"])
    mt.apply(3, [b"list"], [b"l3"])
    seen: list[object] = []

    class Watching(dict):  # type: ignore[type-arg]
        def update(self, *args: Any, **kwargs: Any) -> None:
            super().update(*args, **kwargs)
            seen.append((mt.value(b"head", 3), mt.value(b"list", 3)))

    mt._versions = Watching(mt._versions)
    keys = [b"head", b"list"] + [b"new%02d" % i for i in range(30)]
    values: list[bytes | None] = [b"h4", b"l4", *[b"n"] * 30]
    mt.apply(4, keys, values)
    assert seen == [(b"h1", b"l3")]
    assert mt.value(b"head", 4) == b"h4" and mt.value(b"new05", 3) is ABSENT
    mt._check()


# ----------------------------------------------------------------------
# what is not a continuation goes the full way, with its errors
# ----------------------------------------------------------------------
def test_a_segment_read_before_and_now_gone_is_an_error(tmp_path: Path) -> None:
    setup = Setup("journal", tmp_path)
    db = setup.open(memtable_bytes=1 << 30, **QUIET)
    for i in range(5):
        db.put(b"a%d" % i, b"1")
    first = live_segment(setup.url)
    rotate(db)
    db.put(b"b", b"2")
    reader, _ = setup.reader()
    same(reader, db)
    first.unlink()  # damage: the manifest still says replay starts there
    db.put(b"c", b"3")
    with pytest.raises(CorruptionError):
        reader.refresh()
    db.abandon()


def test_a_live_segment_cut_below_what_was_read_is_read_again_whole(tmp_path: Path) -> None:
    """Never the case for a live writer (a close trims only padding); if it happens,
    the refresh goes the full way and shows what a new reader shows."""
    setup = Setup("journal", tmp_path)
    db = setup.open(memtable_bytes=1 << 30, **QUIET)
    for i in range(5):
        db.put(b"a%d" % i, b"1")
    reader, _ = setup.reader()
    seg = live_segment(setup.url)
    first_two = decode_segment(seg.read_bytes()).records[:2]
    keep = SEGMENT_HEADER_SIZE + sum(len(encode_record(r.seq, r.keys, r.values)) for r in first_two)
    with open(seg, "r+b") as f:
        f.truncate(keep)
    fresh, _ = setup.reader()
    reader.refresh()
    assert reader.last_seq == fresh.last_seq
    assert list(reader.scan()) == list(fresh.scan())
    db.abandon()
