"""kvstore on S3: the object-store contract and the engine, against moto.

Everything here talks HTTP to a real S3 endpoint (``moto.server`` on
127.0.0.1, one server per session, one bucket per test; see conftest.py):

* the :class:`FsspecStore` contract: put / put_if_absent (an 8-thread race
  has exactly one winner, zero-byte creates never overwrite) / get /
  get_range / list / delete, fresh listings, the ``stats`` counters;
* the engine on ``s3://``: durable writes survive a reopen and a crash, the
  WAL is made of immutable objects, SST blocks are read with ranged GETs,
  readers, fencing (a second writer fences the first, whose writes raise
  FencedError and never become visible);
* the hypothesis state machine of tests/test_state_machine.py with an S3
  backend, a crash-point sweep (FaultyStore around an FsspecStore),
  checkpoints + GC + ``open_reader(checkpoint=...)``, transactions
  (write skew and lost update prevented), and ``wal_dir`` (a local journal
  while SSTs live on S3) with its trade-off.

Faults on the wire (500 after applying, timeouts, throttling) are in
tests/test_s3_faults.py.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import random
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import kvstore
from kvstore import Isolation, TransactionConflict, paths
from kvstore.clock import FakeClock
from kvstore.objstore import FaultyStore, FsspecStore, SimulatedCrash, open_store

pytestmark = pytest.mark.s3

FAST = {"fsync": False}


def _sibling(name: str) -> Any:
    """Import tests/<name>.py (tests is not a package) once, under its own name."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def s3_store(bucket: str, options: dict[str, Any], prefix: str = "store", **kw: Any) -> FsspecStore:
    return FsspecStore("s3", f"{bucket}/{prefix}", options, **kw)


@pytest.fixture
def store(s3_bucket: str, s3_options: dict[str, Any]) -> FsspecStore:
    return s3_store(s3_bucket, s3_options, "objs")


@pytest.fixture(autouse=True)
def _quiet_logs() -> Iterator[None]:
    # injected faults make the flush/retry paths log errors; keep output readable
    names = ("kvstore", "kvstore.objstore")
    old = {n: logging.getLogger(n).level for n in names}
    for n in names:
        logging.getLogger(n).setLevel(logging.CRITICAL)
    yield
    for n, level in old.items():
        logging.getLogger(n).setLevel(level)


# ======================================================================
# the FsspecStore contract against moto
# ======================================================================
def test_put_get_size_exists(store: FsspecStore) -> None:
    store.put("a/b/c.bin", b"hello")
    assert store.get("a/b/c.bin") == b"hello"
    store.put("a/b/c.bin", b"replaced")
    assert store.get("a/b/c.bin") == b"replaced"
    assert store.size("a/b/c.bin") == 8
    assert store.exists("a/b/c.bin")
    assert not store.exists("a/b/missing")
    assert store.describe().startswith("s3://")


def test_put_if_absent_refuses_existing_and_keeps_the_first(store: FsspecStore) -> None:
    store.put_if_absent("m/1", b"first")
    with pytest.raises(FileExistsError):
        store.put_if_absent("m/1", b"second")
    assert store.get("m/1") == b"first"
    assert store.stats["ambiguous_resolved"] == 0


def test_put_if_absent_of_our_own_bytes_again_is_success(store: FsspecStore) -> None:
    """The read-back rule: an object that already holds exactly our bytes was our write
    (a retried PUT that finds its own earlier attempt)."""
    store.put_if_absent("m/2", b"mine")
    store.put_if_absent("m/2", b"mine")
    assert store.stats["ambiguous_resolved"] == 1
    assert store.get("m/2") == b"mine"


def test_zero_byte_creates_never_overwrite(store: FsspecStore) -> None:
    """open(p, "xb") with zero bytes silently overwrites on s3fs; pipe_file(mode="create")
    does not."""
    store.put("z/full", b"data")
    with pytest.raises(FileExistsError):
        store.put_if_absent("z/full", b"")
    assert store.get("z/full") == b"data"
    store.put_if_absent("z/empty", b"")
    assert store.get("z/empty") == b""
    with pytest.raises(FileExistsError):
        store.put_if_absent("z/empty", b"x")
    assert store.get("z/empty") == b""


def test_missing_objects_raise_file_not_found(store: FsspecStore) -> None:
    with pytest.raises(FileNotFoundError):
        store.get("nope")
    with pytest.raises(FileNotFoundError):
        store.get_range("nope", 0, 1)
    with pytest.raises(FileNotFoundError):
        store.size("nope")
    assert store.stats["retries"] == 0  # a definite answer is never retried


def test_get_range(store: FsspecStore) -> None:
    store.put("r", bytes(range(100)))
    assert store.get_range("r", 10, 5) == bytes(range(10, 15))
    assert store.get_range("r", 95, 10) == bytes(range(95, 100))
    # like the local and memory stores: an empty or past-the-end range is empty
    # (s3fs alone returns the whole object for end == start, and S3 answers 416
    # past the end: a definite answer, never retried)
    assert store.get_range("r", 0, 0) == b""
    assert store.get_range("r", 100, 5) == b""
    assert store.get_range("r", 500, 5) == b""
    assert store.stats["retries"] == 0
    with pytest.raises(FileNotFoundError):
        store.get_range("missing", 0, 0)
    reader = store.open_range_reader("r")
    assert reader.read(0, 3) == b"\x00\x01\x02"
    reader.close()


def test_list_is_sorted_prefix_filtered_and_fresh(store: FsspecStore) -> None:
    assert store.list("") == []
    names = ["wal/3", "wal/1", "wal/2", "manifest/1", "sst/x.sst", "walrus", "wal/10"]
    for name in names:
        store.put(name, b"x")
    assert store.list("wal/") == ["wal/1", "wal/10", "wal/2", "wal/3"]
    assert store.list("manifest/") == ["manifest/1"]
    assert store.list("wal") == sorted(["wal/1", "wal/10", "wal/2", "wal/3", "walrus"])
    assert store.list("") == sorted(names)
    assert store.list("nothing/") == []
    # no listings cache: a new object and a deletion show up at once
    store.put_if_absent("wal/4", b"y")
    assert "wal/4" in store.list("wal/")
    store.delete("wal/1")
    assert "wal/1" not in store.list("wal/")


def test_listing_by_another_client_is_fresh(s3_bucket: str, s3_options: dict) -> None:
    """Two stores (two filesystems, skip_instance_cache) see each other's writes at once."""
    a = s3_store(s3_bucket, s3_options, "shared")
    b = s3_store(s3_bucket, s3_options, "shared")
    assert a.fs is not b.fs
    assert b.list("manifest/") == []
    for i in range(1, 4):
        a.put_if_absent(f"manifest/{i}", b"m")
        assert b.list("manifest/") == [f"manifest/{j}" for j in range(1, i + 1)]
        assert b.exists(f"manifest/{i}")


def test_delete_is_idempotent(store: FsspecStore) -> None:
    store.put("d", b"x")
    store.delete("d")
    store.delete("d")
    assert not store.exists("d")
    assert store.list("") == []


@pytest.mark.parametrize("bad", ["", "/abs", "a/../b", "../x", "a//b", "./a"])
def test_names_cannot_escape(store: FsspecStore, bad: str) -> None:
    with pytest.raises(ValueError):
        store.put(bad, b"x")


def test_put_if_absent_race_between_threads_has_one_winner(
    s3_bucket: str, s3_options: dict
) -> None:
    """8 threads, each with its own client, create the same object: exactly one wins,
    every other gets FileExistsError, and the object holds the winner's bytes."""
    stores = [s3_store(s3_bucket, s3_options, "race") for _ in range(8)]
    for rnd in range(3):
        winners: list[int] = []
        errors: list[BaseException] = []
        barrier = threading.Barrier(8)
        threads = [
            threading.Thread(
                target=_race, args=(stores[i], f"obj-{rnd}", i, barrier, winners, errors)
            )
            for i in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not errors, errors
        assert len(winners) == 1, f"round {rnd}: winners {winners}"
        assert stores[0].get(f"obj-{rnd}") == f"writer {winners[0]}".encode() * 50


def _race(
    store: FsspecStore,
    name: str,
    i: int,
    barrier: threading.Barrier,
    winners: list[int],
    errors: list[BaseException],
) -> None:
    barrier.wait()
    try:
        store.put_if_absent(name, f"writer {i}".encode() * 50)
        winners.append(i)
    except FileExistsError:
        pass
    except BaseException as exc:
        errors.append(exc)


def test_open_store_s3_url(s3_bucket: str, s3_options: dict) -> None:
    st = open_store(f"s3://{s3_bucket}/p/q", s3_options)
    assert isinstance(st, FsspecStore)
    assert st.root == f"{s3_bucket}/p/q"
    st.put_if_absent("x", b"1")
    st2 = open_store(f"s3://{s3_bucket}/p/q", s3_options)
    assert st2.fs is not st.fs  # skip_instance_cache: no shared, stale filesystem
    assert st2.get("x") == b"1"
    assert st.stats["requests"] >= 1 and st.stats["retries"] == 0


def test_each_store_call_is_one_request(store: FsspecStore) -> None:
    """Counted on the wire: s3fs alone would add a HEAD to every whole-object GET and
    a LIST to every probe of a missing object (the next manifest, at each fence
    check). Only a create that finds the name taken costs a second request (the
    read-back)."""
    from kvstore.bench.s3 import WireCounter

    wire = WireCounter()
    wire.attach(store)

    def cost(fn: Callable[[], object]) -> dict[str, int]:
        before = wire.snapshot()
        try:
            fn()
        except (FileNotFoundError, FileExistsError):
            pass
        after = wire.snapshot()
        return {k: after[k] - before[k] for k in after if after[k] != before[k]}

    assert cost(lambda: store.put_if_absent("a/1", b"x")) == {"PUT": 1}
    assert cost(lambda: store.put_if_absent("a/1", b"y")) == {"PUT": 1, "GET": 1}
    assert cost(lambda: store.put("a/2", b"z")) == {"PUT": 1}
    assert cost(lambda: store.get("a/1")) == {"GET": 1}
    assert cost(lambda: store.get("a/missing")) == {"GET": 1}
    assert cost(lambda: store.get_range("a/1", 0, 1)) == {"GET": 1}
    assert cost(lambda: store.exists("a/1")) == {"HEAD": 1}
    assert cost(lambda: store.exists("a/missing")) == {"HEAD": 1}
    assert cost(lambda: store.size("a/1")) == {"HEAD": 1}
    assert cost(lambda: store.list("a/")) == {"LIST": 1}
    assert cost(lambda: store.delete("a/1")) == {"DELETE": 1}


# ======================================================================
# kvstore on S3
# ======================================================================
def open_s3(s3_url: tuple[str, dict], **options: Any) -> kvstore.DB:
    url, so = s3_url
    return kvstore.open(url, storage_options=so, **{**FAST, **options})


def test_durable_writes_survive_reopen(s3_url: tuple[str, dict], s3_options: dict) -> None:
    with open_s3(s3_url) as db:
        seqs = [db.put(b"k%03d" % i, b"v%d" % i) for i in range(30)]
        assert seqs == sorted(seqs) and len(set(seqs)) == 30
        db.delete(b"k005")
        db.write(kvstore.WriteBatch().put(b"b1", b"x").put(b"b2", b"y").delete(b"k006"))
        assert isinstance(db.parts.commit.wal, kvstore.wal.ObjectWal)  # object WAL on S3
        last = db.last_seq
    with open_s3(s3_url) as db:
        assert db.last_seq == last
        want = {b"k%03d" % i: b"v%d" % i for i in range(30) if i not in (5, 6)}
        want.update({b"b1": b"x", b"b2": b"y"})
        assert dict(db.scan()) == want
        assert list(db.scan(b"k010", b"k013", reverse=True)) == [
            (b"k012", b"v12"),
            (b"k011", b"v11"),
            (b"k010", b"v10"),
        ]


def test_wal_objects_are_immutable_objects_one_per_group(
    s3_url: tuple[str, dict], s3_bucket: str, s3_options: dict
) -> None:
    db = open_s3(s3_url)
    try:
        raw = s3_store(s3_bucket, s3_options)
        before = [n for n in raw.list("wal/") if n.endswith(".wal")]
        for i in range(5):
            db.put(b"k%d" % i, b"v")
        after = [n for n in raw.list("wal/") if n.endswith(".wal")]
        assert len(after) - len(before) == 5  # one object per durable commit (alone)
        db.put(b"n1", b"v", durable=False)
        db.put(b"n2", b"v", durable=False)
        assert len([n for n in raw.list("wal/") if n.endswith(".wal")]) == len(after)
        db.put(b"d", b"v")  # one object carries the two buffered writes and this one
        assert len([n for n in raw.list("wal/") if n.endswith(".wal")]) == len(after) + 1
    finally:
        db.close()


def test_crash_keeps_every_durable_write(s3_bucket: str, s3_options: dict) -> None:
    inner = s3_store(s3_bucket, s3_options)
    faulty = FaultyStore(inner)
    db = kvstore.open(faulty, memtable_bytes=4096, **FAST)
    acked = {}
    for i in range(40):
        k, v = b"k%03d" % i, os.urandom(200)
        db.put(k, v)
        acked[k] = v
    faulty.crashed = True  # the process dies: no flush, no close
    try:
        db.close()
    except (SimulatedCrash, kvstore.KvError):
        pass
    with kvstore.open(inner, **FAST) as db2:
        assert dict(db2.scan()) == acked


class _CountingStore(FsspecStore):
    """An FsspecStore that records which objects were read whole or by range."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.calls: list[tuple[str, str]] = []

    def get(self, name: str) -> bytes:
        self.calls.append(("get", name))
        return super().get(name)

    def get_range(self, name: str, start: int, length: int) -> bytes:
        self.calls.append(("get_range", name))
        return super().get_range(name, start, length)


def test_sst_blocks_are_read_with_ranged_gets(s3_bucket: str, s3_options: dict) -> None:
    store = s3_store(s3_bucket, s3_options)
    with kvstore.open(store, block_bytes=512, **FAST) as db:
        for i in range(400):
            db.put(b"k%05d" % i, b"value-%05d" % i * 4, durable=False)
        db.flush()
    counting = _CountingStore("s3", f"{s3_bucket}/store", s3_options)
    with kvstore.open(counting, block_bytes=512, block_cache_bytes=1 << 20, **FAST) as db:
        counting.calls.clear()
        assert db.get(b"k00123") == b"value-00123" * 4
        ssts = [(op, n) for op, n in counting.calls if n.startswith(paths.SST_DIR)]
        assert ssts and all(op == "get_range" for op, _ in ssts), ssts
        assert len(ssts) <= 3  # one data block (index, bloom and footer are cached)


def test_reader_on_s3(s3_url: tuple[str, dict]) -> None:
    url, so = s3_url
    with open_s3(s3_url) as db:
        db.put(b"a", b"1")
        reader = kvstore.open_reader(url, storage_options=so)
        assert reader.get(b"a") == b"1"
        db.put(b"b", b"2")
        db.delete(b"a")
        assert reader.get(b"b") is None
        assert reader.refresh() == db.last_seq
        assert reader.get(b"b") == b"2" and reader.get(b"a") is None
        db.flush()
        db.put(b"c", b"3")
        reader.refresh()
        assert dict(reader.scan()) == {b"b": b"2", b"c": b"3"}
        with pytest.raises(kvstore.ReadOnlyError):
            reader.put(b"x", b"y")  # type: ignore[attr-defined]
        reader.close()


# ----------------------------------------------------------------------
# fencing
# ----------------------------------------------------------------------
FENCED_WRITES: dict[str, Callable[[kvstore.DB], object]] = {
    "put_durable": lambda db: db.put(b"stale", b"x"),
    "put_nondurable": lambda db: db.put(b"stale", b"x", durable=False),
    "write": lambda db: db.write(kvstore.WriteBatch().put(b"stale", b"x").delete(b"shared")),
    "transaction": lambda db: _txn_put(db, b"stale", b"x"),
}


def _txn_put(db: kvstore.DB, k: bytes, v: bytes) -> None:
    with db.transaction() as t:
        t.put(k, v)


@pytest.mark.parametrize("first_op", sorted(FENCED_WRITES))
def test_second_writer_fences_the_first(s3_url: tuple[str, dict], first_op: str) -> None:
    url, so = s3_url
    # fence_check_interval=0: non-durable writes check the manifest every time
    # (by default at most once a second on remote stores)
    old = open_s3(s3_url, fence_check_interval=0)
    old.put(b"shared", b"v1")
    old.put(b"unflushed", b"u", durable=False)
    old.flush()
    old.put(b"in-wal", b"w")  # durable, in a WAL object, not flushed
    new = open_s3(s3_url)
    try:
        with pytest.raises(kvstore.FencedError):
            FENCED_WRITES[first_op](old)
        for op in sorted(FENCED_WRITES):  # and every later write too
            with pytest.raises(kvstore.FencedError):
                FENCED_WRITES[op](old)
        with pytest.raises(kvstore.FencedError):
            old.delete(b"shared")
        assert new.get(b"stale") is None
        assert new.get(b"shared") == b"v1"
        assert new.get(b"unflushed") == b"u"
        assert new.get(b"in-wal") == b"w"
        new.put(b"fresh", b"f")
        with kvstore.open_reader(url, storage_options=so) as reader:
            assert reader.get(b"stale") is None
            assert reader.get(b"shared") == b"v1"
            assert reader.get(b"fresh") == b"f"
    finally:
        old.close()  # must not raise
    new.close()
    with open_s3(s3_url) as third:
        assert third.get(b"stale") is None
        assert third.get(b"shared") == b"v1"
        assert third.get(b"in-wal") == b"w"
        assert third.get(b"fresh") == b"f"


def test_fenced_writer_learns_within_the_check_interval(s3_url: tuple[str, dict]) -> None:
    """With the default interval a non-durable write may still be accepted in memory
    right after the fence, but it never reaches the store, and a durable write or
    the next check raises FencedError."""
    clock = FakeClock()  # the old writer's time passes only when the test says
    old = open_s3(s3_url, fence_check_interval=0.2, clock=clock)
    old.put(b"a", b"1")
    new = open_s3(s3_url)
    clock.advance(0.25)  # past the check interval: the next write asks the manifest
    with pytest.raises(kvstore.FencedError):
        old.put(b"late", b"x", durable=False)
    old.close()
    new.close()
    with open_s3(s3_url) as db:
        assert db.get(b"late") is None and db.get(b"a") == b"1"


class _OldWriter(threading.Thread):
    """Durable puts in a loop until ``stop`` is set or it is fenced."""

    def __init__(self, db: kvstore.DB) -> None:
        super().__init__(daemon=True)
        self.db = db
        self.acked: dict[bytes, bytes] = {}
        self.fenced: BaseException | None = None
        self.stop = threading.Event()
        self.commits = 0

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            k = b"old/%05d" % i
            try:
                self.db.put(k, b"o")
            except kvstore.FencedError as exc:
                self.fenced = exc
                return
            self.acked[k] = b"o"
            self.commits += 1
            i += 1


def _open_in_thread(s3_url: tuple[str, dict]) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["db"] = open_s3(s3_url)
        except BaseException as exc:
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def _check_old_and_new(s3_url: tuple[str, dict], old: _OldWriter, new_acked: dict) -> None:
    with open_s3(s3_url) as db:
        got = dict(db.scan())
    # every acknowledged write of the old writer was in a WAL object the new writer
    # replayed (its fence object comes after them); a write that found the fence
    # raised FencedError and is not there
    assert {k for k in got if k.startswith(b"old/")} == set(old.acked)
    for k, v in new_acked.items():
        assert got.get(k) == v


def test_open_while_the_old_writer_commits(s3_url: tuple[str, dict]) -> None:
    """A second writer opens while the first is committing durable writes (so the new
    writer's fence object races the old writer's WAL objects for the same ids). The
    old writer stops after 10 more commits; the open then completes, the old writer
    is fenced, and every write it acknowledged is there."""
    old_db = open_s3(s3_url)
    old = _OldWriter(old_db)
    old.start()
    while old.commits < 5:
        time.sleep(0.01)
    opener, out = _open_in_thread(s3_url)
    target = old.commits + 10
    while old.commits < target and old.is_alive():
        time.sleep(0.005)
    old.stop.set()
    old.join(30)
    opener.join(60)
    assert not opener.is_alive(), "kvstore.open did not return after the old writer stopped"
    assert "error" not in out, out.get("error")
    new = out["db"]
    with pytest.raises(kvstore.FencedError):
        old_db.put(b"old/after-fence", b"x")
    new_acked = {}
    for i in range(5):
        new.put(b"new/%d" % i, b"n")
        new_acked[b"new/%d" % i] = b"n"
    old_db.close()
    new.close()
    _check_old_and_new(s3_url, old, new_acked)


@pytest.mark.slow
def test_open_fences_a_writer_that_never_pauses(s3_url: tuple[str, dict]) -> None:
    """A busy old writer checks the manifest every fence_check_interval, learns of
    the new epoch and stops, so the new writer's fence stops being chased."""
    old_db = open_s3(s3_url)
    old = _OldWriter(old_db)
    old.start()
    while old.commits < 5:
        time.sleep(0.01)
    opener, out = _open_in_thread(s3_url)
    # Before the fix the open never returned; the bound only has to be far
    # above fence_check_interval (0.5 s) plus a loaded machine's scheduling.
    opener.join(30)
    opened = not opener.is_alive()
    old.stop.set()  # unblock the opener either way, so nothing is left running
    old.join(30)
    opener.join(60)
    try:
        assert opened, (
            f"kvstore.open did not return within 30 s while the old writer committed "
            f"{old.commits} writes (fenced: {old.fenced is not None})"
        )
        assert old.fenced is not None
    finally:
        old_db.close()
        if "db" in out:
            out["db"].close()
    _check_old_and_new(s3_url, old, {})


# ======================================================================
# the hypothesis state machine, on S3
# ======================================================================
@pytest.mark.slow
def test_state_machine_on_s3(s3_bucket_factory: Callable[[], str], s3_options: dict) -> None:
    from hypothesis import settings
    from hypothesis.stateful import run_state_machine_as_test

    sm = _sibling("test_state_machine")

    class S3KvMachine(sm.KvMachine):
        """The memory/local machine of test_state_machine.py with an S3 store: the
        URL is an FsspecStore over a fresh bucket per example; crashable writers
        wrap it in a FaultyStore."""

        backend = "s3"

        def _new_location(self) -> FsspecStore:
            return s3_store(s3_bucket_factory(), s3_options, "sm")

        def _open(self, crashable: bool) -> kvstore.DB:
            if not crashable:
                self.faulty = None
                return kvstore.open(self.url, **self.opts)
            self.faulty = FaultyStore(self.url)
            return kvstore.open(self.faulty, **self.opts)

    run_state_machine_as_test(
        S3KvMachine, settings=settings(sm.SETTINGS, max_examples=10, stateful_step_count=20)
    )


# ======================================================================
# crash-point sweep with FaultyStore around an FsspecStore
# ======================================================================
@pytest.mark.slow
def test_crash_point_sweep_on_s3(s3_bucket: str, s3_options: dict) -> None:
    """Like test_crash_points.test_flush_sweep, on S3, for a sample of crash points
    (each run is a few hundred HTTP requests): the first mutation of every kind of
    object (claim manifest, fence object, WAL object, SST, flush manifest, WAL
    deletion), the first and last points, and a seeded random sample. Crash points
    count from the start of ``kvstore.open`` of a new store, so recovery of a new
    store is swept too."""
    cp = _sibling("test_crash_points")
    opts = {**cp.BASE_OPTS, "background_flush": False, "background_compaction": False, **FAST}
    counter = iter(range(10**6))

    def fresh() -> FsspecStore:
        return s3_store(s3_bucket, s3_options, f"crash-{next(counter):03d}")

    def ops() -> list[Any]:
        g = cp.OpGen("w", 5)
        return [*g.ops(8), cp.Op("flush"), *g.ops(6), cp.Op("close")]

    # the clean run: how many mutations, and of which kinds?
    inner = fresh()
    faulty = FaultyStore(inner)
    model = cp.Model()
    db = kvstore.open(faulty, **opts)
    res = cp.run_ops(db, faulty, model, ops())
    assert not res.crashed and not res.errors
    n = faulty.mutations
    cp.verify_and_continue(inner, model, opts, prefix=True, post_ns="post")

    def kind(op: str, name: str) -> tuple[str, str]:
        return op, name.split("/", 1)[0]

    first_of_kind: dict[tuple[str, str], int] = {}
    manifest_puts = [k for k, op, name in faulty.log if name.startswith("manifest/")]
    for k, op, name in faulty.log:
        first_of_kind.setdefault(kind(op, name), k)
    points = set(first_of_kind.values()) | {1, n, n + 1}
    points |= set(manifest_puts[:4])  # claim, recovery, first flush
    points |= set(random.Random(7).sample(range(1, n + 1), min(3, n)))
    assert {("put_if_absent", "manifest"), ("put_if_absent", "wal")} <= set(first_of_kind)
    assert ("put_if_absent", "sst") in first_of_kind and ("delete", "wal") in first_of_kind

    findings = cp.Findings(f"S3 crash sweep, N={n}, points {sorted(points)}")

    def one(k: int) -> None:
        inner = fresh()
        faulty = FaultyStore(inner, crash_before=k)
        model = cp.Model()
        try:
            db = kvstore.open(faulty, **opts)
        except SimulatedCrash:
            assert k <= n
        else:
            res = cp.run_ops(db, faulty, model, ops())
            assert res.crashed == (k <= n), (k, n, res)
            if res.crashed:
                cp.stop_crashed(db, None, inner, check_no_io=False)
        cp.verify_and_continue(inner, model, opts, prefix=True, post_ns="post")

    for k in sorted(points):
        findings.run(f"crash before mutation {k}", lambda k=k: one(k))
    findings.check()


# ======================================================================
# checkpoints, GC, open_reader(checkpoint=...)
# ======================================================================
def test_checkpoints_and_gc_on_s3(s3_url: tuple[str, dict], s3_bucket: str, s3_options: dict):
    url, so = s3_url
    raw = s3_store(s3_bucket, s3_options)
    db = open_s3(s3_url, memtable_bytes=8192, background_compaction=False)
    try:
        for i in range(50):
            db.put(b"k%03d" % i, b"v1-%03d" % i, durable=False)
        cp1 = db.create_checkpoint("cp1")
        assert cp1["name"] == "cp1" and cp1["seq"] == db.last_seq
        with pytest.raises(ValueError):
            db.create_checkpoint("cp1")
        for i in range(50):
            db.put(b"k%03d" % i, b"v2-%03d" % i, durable=False)
        db.delete(b"k000")
        db.compact()  # every version into one run; cp1's SSTs stay pinned
        db.collect_garbage(grace_seconds=0)
        assert [c["name"] for c in db.list_checkpoints()] == ["cp1"]

        with kvstore.open_reader(url, storage_options=so, checkpoint="cp1") as r:
            assert r.last_seq == cp1["seq"]
            assert dict(r.scan()) == {b"k%03d" % i: b"v1-%03d" % i for i in range(50)}
        with kvstore.open_reader(url, storage_options=so) as r:
            assert r.get(b"k001") == b"v2-001" and r.get(b"k000") is None
        with pytest.raises(KeyError):
            kvstore.open_reader(url, storage_options=so, checkpoint="nope")

        ssts_pinned = set(raw.list(paths.SST_DIR))
        live = {paths.sst_name(s.id) for s in db.manifest.all_ssts()}
        assert ssts_pinned > live  # the checkpoint's old SSTs are still there

        db.delete_checkpoint("cp1")
        deleted = db.collect_garbage(grace_seconds=0)
        assert deleted["ssts"] >= 1 and deleted["manifests"] >= 1
        assert set(raw.list(paths.SST_DIR)) == live
        with pytest.raises(KeyError):
            kvstore.open_reader(url, storage_options=so, checkpoint="cp1")
        assert db.get(b"k049") == b"v2-049"
    finally:
        db.close()
    with open_s3(s3_url) as db:
        assert db.get(b"k049") == b"v2-049" and db.get(b"k000") is None
        assert len(dict(db.scan())) == 49


def test_expired_checkpoint_is_collected(s3_url: tuple[str, dict]) -> None:
    clock = FakeClock()
    with open_s3(s3_url, clock=clock) as db:
        db.put(b"a", b"1")
        db.create_checkpoint("short", expires_in=0.05)
        db.collect_garbage(grace_seconds=0)
        assert [c["name"] for c in db.list_checkpoints()] == ["short"]  # not yet expired
        clock.advance(0.1)
        db.collect_garbage(grace_seconds=0)
        assert db.list_checkpoints() == []


# ======================================================================
# transactions on S3
# ======================================================================
def test_serializable_prevents_write_skew(s3_url: tuple[str, dict]) -> None:
    """Two on-call doctors; each transaction checks that the other is on call and
    goes off. Under SERIALIZABLE the second commit conflicts."""
    with open_s3(s3_url) as db:
        db.put(b"oncall/alice", b"1")
        db.put(b"oncall/bob", b"1")
        t1 = db.transaction(Isolation.SERIALIZABLE)
        t2 = db.transaction(Isolation.SERIALIZABLE)
        assert len(list(t1.scan_prefix(b"oncall/"))) == 2
        assert len(list(t2.scan_prefix(b"oncall/"))) == 2
        t1.delete(b"oncall/alice")
        t2.delete(b"oncall/bob")
        assert isinstance(t1.commit(), int)
        with pytest.raises(TransactionConflict):
            t2.commit()
    with open_s3(s3_url) as db:
        assert dict(db.scan_prefix(b"oncall/")) == {b"oncall/bob": b"1"}


def test_snapshot_allows_write_skew_but_prevents_lost_update(s3_url: tuple[str, dict]) -> None:
    with open_s3(s3_url) as db:
        db.put(b"counter", b"0")
        t1 = db.transaction(Isolation.SNAPSHOT)
        t2 = db.transaction(Isolation.SNAPSHOT)
        for t in (t1, t2):
            t.put(b"counter", b"%d" % (int(t.get(b"counter")) + 1))
        t1.commit()
        with pytest.raises(TransactionConflict):
            t2.commit()
        assert db.get(b"counter") == b"1"

        # write skew is SNAPSHOT's known anomaly: both commit
        db.put(b"x", b"1")
        db.put(b"y", b"1")
        a = db.transaction(Isolation.SNAPSHOT)
        b = db.transaction(Isolation.SNAPSHOT)
        a.get(b"y")
        b.get(b"x")
        a.put(b"x", b"0")
        b.put(b"y", b"0")
        a.commit()
        b.commit()
    with open_s3(s3_url) as db:
        assert db.get(b"counter") == b"1"
        assert (db.get(b"x"), db.get(b"y")) == (b"0", b"0")


def test_concurrent_counter_transactions(s3_url: tuple[str, dict]) -> None:
    """4 threads increment one counter with retried SNAPSHOT transactions (durable
    commits through group commit): no increment is lost or applied twice."""
    db = open_s3(s3_url)
    db.put(b"c", b"0")
    per_thread = 8
    conflicts = [0]

    def work() -> None:
        for _ in range(per_thread):
            while True:
                t = db.transaction()
                t.put(b"c", b"%d" % (int(t.get(b"c")) + 1))
                try:
                    t.commit()
                    break
                except TransactionConflict:
                    conflicts[0] += 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    db.close()
    with open_s3(s3_url) as db:
        assert db.get(b"c") == b"%d" % (4 * per_thread)


# ======================================================================
# wal_dir: the WAL journal on local disk, SSTs and manifests on S3
# ======================================================================
def _crash(db: kvstore.DB, faulty: FaultyStore) -> None:
    """The machine dies: nothing more reaches S3, the local journal stays as fsynced."""
    faulty.crashed = True
    try:
        db.close()
    except BaseException:
        pass
    db.abandon()  # the local journal's segment is closed as it stands


def test_wal_dir_keeps_the_journal_local(s3_bucket: str, s3_options: dict, tmp_path: Path) -> None:
    wal_dir = tmp_path / "wal"
    inner = s3_store(s3_bucket, s3_options)
    faulty = FaultyStore(inner)
    db = kvstore.open(faulty, wal_dir=str(wal_dir))
    assert isinstance(db.parts.commit.wal, kvstore.wal.JournalWal)
    puts_before = len([e for e in faulty.log if e[1] == "put_if_absent"])
    for i in range(50):
        db.put(b"k%03d" % i, b"v%d" % i)  # durable: an fdatasync of the local journal
    assert len([e for e in faulty.log if e[1] == "put_if_absent"]) == puts_before  # no S3 PUT
    assert inner.list("wal/") == []  # no WAL objects on S3
    segments = os.listdir(wal_dir / "wal")
    assert segments and all(s.endswith(".log") for s in segments)
    _crash(db, faulty)

    # same machine, same wal_dir: every acknowledged write is replayed
    db2 = kvstore.open(inner, wal_dir=str(wal_dir))
    assert [db2.get(b"k%03d" % i) for i in range(50)] == [b"v%d" % i for i in range(50)]
    with kvstore.open_reader(inner, wal_dir=wal_dir) as reader:
        db2.put(b"late", b"1")
        reader.refresh()
        assert reader.get(b"late") == b"1" and reader.get(b"k049") == b"v49"
    db2.close()
    with kvstore.open(inner) as db3:  # after a clean close everything is on S3
        assert db3.get(b"late") == b"1" and db3.get(b"k000") == b"v0"


def test_wal_dir_trade_off_machine_loss_loses_unflushed_writes(
    s3_bucket: str, s3_options: dict, tmp_path: Path
) -> None:
    """The documented trade-off (docs/s3.md): with ``wal_dir`` a durable write is
    acknowledged once it is on the local disk. Until a flush puts it in an SST on
    S3, that disk is its only copy: losing the machine loses it. Flushed writes
    survive. (With the WAL on S3 - the default - they would all survive.)"""
    inner = s3_store(s3_bucket, s3_options)
    faulty = FaultyStore(inner)
    db = kvstore.open(faulty, wal_dir=str(tmp_path / "wal-a"))
    db.put(b"flushed", b"1")
    db.flush()  # now in an SST on S3
    db.put(b"acked-not-flushed", b"2")  # durable: fsynced to wal-a only
    _crash(db, faulty)
    shutil.rmtree(tmp_path / "wal-a")  # the machine and its disk are gone

    # a new machine: the writer must say it accepts losing what only wal-a held
    with pytest.raises(ValueError, match="accept_wal_loss"):
        kvstore.open(inner, wal_dir=str(tmp_path / "wal-b"))
    with kvstore.open(inner, wal_dir=str(tmp_path / "wal-b"), accept_wal_loss=True) as db2:
        assert db2.get(b"flushed") == b"1"
        assert db2.get(b"acked-not-flushed") is None  # acknowledged, and lost

    # the same sequence with the WAL on S3 loses nothing
    inner2 = s3_store(s3_bucket, s3_options, "wal-on-s3")
    faulty2 = FaultyStore(inner2)
    db = kvstore.open(faulty2)
    db.put(b"flushed", b"1")
    db.flush()
    db.put(b"acked-not-flushed", b"2")
    _crash(db, faulty2)
    with kvstore.open(inner2) as db3:
        assert db3.get(b"acked-not-flushed") == b"2"


def test_wal_dir_with_url_and_storage_options(s3_url: tuple[str, dict], tmp_path: Path) -> None:
    url, so = s3_url
    with kvstore.open(url, storage_options=so, wal_dir=tmp_path / "w") as db:
        for i in range(20):
            db.put(b"k%d" % i, b"v")
    with kvstore.open(url, storage_options=so, wal_dir=tmp_path / "w") as db:
        assert len(dict(db.scan())) == 20
