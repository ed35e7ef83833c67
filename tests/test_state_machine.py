"""Stateful property tests: kvstore against a dict model.

A hypothesis ``RuleBasedStateMachine`` drives random puts, deletes, write
batches, point reads, scans (bounded, reversed, by prefix), snapshots (taken,
read later, closed, and at explicit older seqs), flushes, clean reopens and
simulated crashes, compaction (``db.compact()`` and, with
``l0_compaction_trigger=2``, the background compactor), garbage collection
with no grace period, and checkpoints (created, read through
``open_reader(url, checkpoint=...)``, deleted), on the memory backend and on a
local directory. One machine runs with ``retention="all"``: there
``db.snapshot(seq=old)`` must reproduce the model at that seq for every seq at
or above the retention watermark (which the machine also raises). Small
memtables (4 KiB) and blocks make flushes to L0 SSTs happen often, and keys
come from a tiny alphabet (with 0x00 and 0xff bytes) so they collide.

Crash model: the writer is opened on a :class:`FaultyStore` wrapper; a crash
marks the wrapper dead, so every later store call of that writer (background
flush included) raises ``SimulatedCrash``. Durable writes and everything
before them must survive; of the non-durable writes after the last
durability point, exactly some prefix survives (the WAL is ordered).
Reopening alternates between the URL (the path users take) and a fresh
wrapper around the same store (so that a later crash is possible).
"""

from __future__ import annotations

import shutil
import tempfile
import uuid

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import kvstore
from kvstore.objstore import FaultyStore, LocalStore, MemoryStore, SimulatedCrash

KEYS = st.lists(st.sampled_from([b"a", b"b", b"\x00", b"\xff"]), min_size=1, max_size=3).map(
    b"".join
)
VALUES = st.one_of(
    st.binary(max_size=12),
    st.binary(min_size=150, max_size=700),  # big enough to fill a 4 KiB memtable quickly
)
BOUNDS = st.one_of(st.none(), st.just(b""), KEYS, KEYS.map(lambda k: k + b"\x7f"))
PREFIXES = st.one_of(st.just(b""), KEYS, KEYS.map(lambda k: k + b"\xff"), st.just(b"\xff\xff"))
DURABLE = st.sampled_from([True, True, True, False])
OPS = st.lists(st.tuples(KEYS, st.one_of(st.none(), VALUES)), min_size=1, max_size=8)

MAX_SNAPSHOTS = 4
CHECKPOINT_NAMES = st.sampled_from(["cp1", "cp2", "cp3"])

SETTINGS = settings(
    max_examples=100,
    stateful_step_count=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def apply_ops(model, ops):
    for k, v in ops:
        if v is None:
            model.pop(k, None)
        else:
            model[k] = v


def model_scan(model, start, end, reverse):
    out = sorted(
        (k, v)
        for k, v in model.items()
        if (start is None or k >= start) and (end is None or k < end)
    )
    return out[::-1] if reverse else out


class KvMachine(RuleBasedStateMachine):
    backend = "memory"
    options: dict = {}
    #: retention="all": every seq at or above ``self.watermark`` must stay readable
    exact_history = False

    def __init__(self):
        super().__init__()
        self.opts = {
            "memtable_bytes": 4096,
            "block_bytes": 256,
            "fsync": False,
            "l0_compaction_trigger": 2,
            **self.options,
        }
        self.tmpdirs = []
        self.mem_names = []
        self.url = self._new_location()
        self.faulty = None  # the FaultyStore the current writer uses, if any
        self.db = self._open(crashable=True)
        self.model = {}  # what the writer must show
        self.durable = {}  # what must survive a crash
        self.durable_seq = 0
        self.pending = []  # (seq, ops) written with durable=False since the last durable point
        self.last_seq = 0
        self.history = {0: {}}  # seq -> model at that seq (for db.snapshot(seq=...))
        self.snaps = []  # (Snapshot, model copy)
        self.checkpoints = {}  # name -> (seq, model copy at creation)
        self.watermark = 0  # retention watermark (exact_history machines)

    # -- helpers ---------------------------------------------------------
    def _new_location(self):
        if self.backend == "memory":
            name = f"test-sm-{uuid.uuid4().hex}"
            self.mem_names.append(name)
            return f"memory://{name}"
        path = tempfile.mkdtemp(prefix="kvstore-sm-")
        self.tmpdirs.append(path)
        return path

    def _open(self, crashable):
        if not crashable:
            self.faulty = None
            return kvstore.open(self.url, **self.opts)
        if self.backend == "memory":
            inner = MemoryStore.named(self.url.split("://", 1)[1])
        else:
            inner = LocalStore(self.url, fsync=False)
        self.faulty = FaultyStore(inner)
        return kvstore.open(self.faulty, **self.opts)

    def _committed(self, seq, ops, durable):
        assert isinstance(seq, int)
        assert seq > self.last_seq, (seq, self.last_seq)
        assert self.db.last_seq == seq
        apply_ops(self.model, ops)
        self.last_seq = seq
        self.history[seq] = dict(self.model)
        if durable:
            self._durable_point()
        else:
            self.pending.append((seq, list(ops)))

    def _durable_point(self):
        self.durable = dict(self.model)
        self.durable_seq = self.last_seq
        self.pending = []

    def _drop_snapshots_after_reopen(self, old_db):
        for snap, _ in self.snaps:
            try:
                snap.get(b"a")
            except kvstore.ClosedError:
                pass
            else:
                raise AssertionError("a snapshot of a closed database still reads")
            snap.close()
        self.snaps = []
        assert self.db.stats()["open_snapshots"] == 0
        assert old_db is not self.db

    def _check_full_state(self, reader, model):
        assert list(reader.scan()) == sorted(model.items())

    # -- writes ----------------------------------------------------------
    @rule(key=KEYS, value=VALUES, durable=DURABLE)
    def put(self, key, value, durable):
        seq = self.db.put(key, value, durable=durable)
        self._committed(seq, [(key, value)], durable)

    @rule(
        entries=st.lists(
            st.tuples(KEYS, st.one_of(st.none(), VALUES), DURABLE), min_size=1, max_size=12
        ),
        all_nondurable=st.booleans(),
    )
    def put_many(self, entries, all_nondurable):
        """Several writes in one step; often a run of non-durable ones (a crash then
        keeps some prefix of them)."""
        for key, value, durable in entries:
            durable = durable and not all_nondurable
            if value is None:
                seq = self.db.delete(key, durable=durable)
            else:
                seq = self.db.put(key, value, durable=durable)
            self._committed(seq, [(key, value)], durable)

    @rule(key=KEYS, durable=DURABLE)
    def delete(self, key, durable):
        seq = self.db.delete(key, durable=durable)
        self._committed(seq, [(key, None)], durable)

    @rule(ops=OPS, repeat_first=st.one_of(st.none(), VALUES, st.just(b"")), durable=DURABLE)
    def write_batch(self, ops, repeat_first, durable):
        ops = list(ops)
        if repeat_first is not None:  # same key twice in one batch: last op wins
            ops.append((ops[0][0], repeat_first if repeat_first else None))
        batch = kvstore.WriteBatch()
        for k, v in ops:
            if v is None:
                batch.delete(k)
            else:
                batch.put(k, v)
        assert len(batch) == len({k for k, _ in ops})
        seq = self.db.write(batch, durable=durable)
        self._committed(seq, ops, durable)

    # -- reads -----------------------------------------------------------
    @rule(key=KEYS)
    def get(self, key):
        assert self.db.get(key) == self.model.get(key)

    @rule(start=BOUNDS, end=BOUNDS, reverse=st.booleans())
    def scan(self, start, end, reverse):
        got = list(self.db.scan(start, end, reverse=reverse))
        assert got == model_scan(self.model, start, end, reverse)

    @rule(prefix=PREFIXES, reverse=st.booleans())
    def scan_prefix(self, prefix, reverse):
        want = sorted((k, v) for k, v in self.model.items() if k.startswith(prefix))
        if reverse:
            want.reverse()
        assert list(self.db.scan_prefix(prefix, reverse=reverse)) == want

    # -- snapshots -------------------------------------------------------
    @precondition(lambda self: len(self.snaps) < MAX_SNAPSHOTS)
    @rule()
    def take_snapshot(self):
        snap = self.db.snapshot()
        assert snap.seq == self.last_seq
        self.snaps.append((snap, dict(self.model)))

    @precondition(lambda self: self.snaps)
    @rule(
        index=st.integers(0, MAX_SNAPSHOTS - 1),
        key=KEYS,
        start=BOUNDS,
        end=BOUNDS,
        reverse=st.booleans(),
    )
    def read_snapshot(self, index, key, start, end, reverse):
        snap, model = self.snaps[index % len(self.snaps)]
        assert snap.get(key) == model.get(key)
        assert list(snap.scan(start, end, reverse=reverse)) == model_scan(
            model, start, end, reverse
        )
        prefix = key[:1]
        assert list(snap.scan_prefix(prefix)) == sorted(
            (k, v) for k, v in model.items() if k.startswith(prefix)
        )

    @precondition(lambda self: self.snaps)
    @rule(index=st.integers(0, MAX_SNAPSHOTS - 1))
    def close_snapshot(self, index):
        snap, model = self.snaps.pop(index % len(self.snaps))
        self._check_full_state(snap, model)
        snap.close()
        try:
            snap.get(b"a")
        except kvstore.ClosedError:
            pass
        else:
            raise AssertionError("a closed snapshot still reads")

    @rule(choice=st.integers(0, 10**6))
    def snapshot_at_seq(self, choice):
        seqs = sorted(self.history)
        seq = seqs[choice % len(seqs)]
        try:
            snap = self.db.snapshot(seq=seq)
        except kvstore.SnapshotTooOld:
            assert not (self.exact_history and seq >= self.watermark), (
                f"seq {seq} is at or above the retention watermark {self.watermark}"
            )
            return
        with snap:
            assert snap.seq == seq
            self._check_full_state(snap, self.history[seq])

    # -- maintenance -----------------------------------------------------
    @rule()
    def flush(self):
        self.db.flush()
        self._durable_point()

    @rule()
    def compact(self):
        self.db.compact()
        self._durable_point()  # compact() flushes first
        stats = self.db.stats()
        assert stats["l0_ssts"] == 0
        assert stats["sorted_runs"] == (1 if self.db.manifest.all_ssts() else 0)
        if not self.snaps and self.db.retention_watermark is None:
            # nothing can read a tombstone any more: the bottom run has none
            assert sum(m.tombstones for m in self.db.manifest.all_ssts()) == 0
        self._check_full_state(self.db, self.model)

    @rule()
    def collect_garbage(self):
        got = self.db.collect_garbage(grace_seconds=0)
        assert set(got) == {"ssts", "manifests"}
        self._check_full_state(self.db, self.model)

    @rule(name=CHECKPOINT_NAMES)
    def create_checkpoint(self, name):
        if name in self.checkpoints:
            try:
                self.db.create_checkpoint(name)
            except ValueError:
                return
            raise AssertionError("a duplicate checkpoint name was accepted")
        cp = self.db.create_checkpoint(name)
        self._durable_point()  # it flushes first
        assert cp["name"] == name
        assert cp["seq"] == self.last_seq
        self.checkpoints[name] = (cp["seq"], dict(self.model))

    @precondition(lambda self: self.checkpoints)
    @rule(index=st.integers(0, 2), key=KEYS, reverse=st.booleans())
    def read_checkpoint(self, index, key, reverse):
        name = sorted(self.checkpoints)[index % len(self.checkpoints)]
        seq, model = self.checkpoints[name]
        with kvstore.open_reader(self.url, checkpoint=name) as reader:
            assert reader.last_seq == seq
            assert list(reader.scan(reverse=reverse)) == model_scan(model, None, None, reverse)
            assert reader.get(key) == model.get(key)
        assert sorted(c["name"] for c in self.db.list_checkpoints()) == sorted(self.checkpoints)

    @rule(name=CHECKPOINT_NAMES)
    def delete_checkpoint(self, name):
        if name not in self.checkpoints:
            try:
                self.db.delete_checkpoint(name)
            except KeyError:
                return
            raise AssertionError("deleting an unknown checkpoint did not raise KeyError")
        self.db.delete_checkpoint(name)
        del self.checkpoints[name]
        try:
            kvstore.open_reader(self.url, checkpoint=name)
        except KeyError:
            pass
        else:
            raise AssertionError("a deleted checkpoint is still readable")

    @precondition(lambda self: self.exact_history)
    @rule(choice=st.integers(0, 10**6))
    def raise_watermark(self, choice):
        seqs = sorted(self.history)
        seq = seqs[choice % len(seqs)]
        w = self.db.set_retention_watermark(seq)
        assert w == max(seq, self.watermark)
        assert self.db.retention_watermark == w
        self.watermark = w

    @rule(crashable=st.booleans())
    def reopen(self, crashable):
        old = self.db
        old.close()
        old.close()  # idempotent
        self.db = self._open(crashable)
        self._drop_snapshots_after_reopen(old)
        assert self.db.last_seq == self.last_seq
        self._check_full_state(self.db, self.model)
        self._durable_point()

    @precondition(lambda self: self.faulty is not None)
    @rule(crashable=st.booleans())
    def crash_and_reopen(self, crashable):
        self._crash_and_reopen(crashable)

    @precondition(lambda self: self.faulty is not None)
    @rule(
        ops=st.lists(st.tuples(KEYS, st.one_of(st.none(), VALUES)), min_size=1, max_size=15),
        crashable=st.booleans(),
    )
    def nondurable_writes_then_crash(self, ops, crashable):
        for key, value in ops:
            if value is None:
                seq = self.db.delete(key, durable=False)
            else:
                seq = self.db.put(key, value, durable=False)
            self._committed(seq, [(key, value)], False)
        self._crash_and_reopen(crashable)

    def _crash_and_reopen(self, crashable):
        old = self.db
        self.faulty.crashed = True  # the process dies here
        try:
            old.close()  # stops its flush thread; its store calls all fail
        except (SimulatedCrash, kvstore.KvError):
            pass  # a dead writer may report its death; only what it left behind matters
        self.db = self._open(crashable)
        self._drop_snapshots_after_reopen(old)

        recovered_seq, model = self._match_durable_prefix(dict(self.db.scan()), self.db.last_seq)
        self.model = model
        self.last_seq = recovered_seq
        self.history = {s: m for s, m in self.history.items() if s <= recovered_seq}
        for k in set(self.model) | set(self.durable):
            assert self.db.get(k) == self.model.get(k)
        self._durable_point()

    def _match_durable_prefix(self, actual, seq):
        """``actual`` at ``seq`` must be the durable state plus a prefix of the pending writes."""
        candidate = dict(self.durable)
        candidates = [(self.durable_seq, dict(candidate))]
        for pending_seq, ops in self.pending:
            apply_ops(candidate, ops)
            candidates.append((pending_seq, dict(candidate)))
        for cand_seq, model in candidates:
            if cand_seq == seq and model == actual:
                return cand_seq, model
        raise AssertionError(
            f"store holds {actual!r} at seq {seq}; expected the durable state (seq "
            f"{self.durable_seq}) plus a prefix of the non-durable writes "
            f"{[s for s, _ in self.pending]}"
        )

    @rule(refresh_twice=st.booleans())
    def reader_sees_durable_state(self, refresh_twice):
        with kvstore.open_reader(self.url) as reader:
            if refresh_twice:
                reader.refresh()
            _, seen = self._match_durable_prefix(dict(reader.scan()), reader.last_seq)
            for key in set(self.model) | set(self.durable):
                assert reader.get(key) == seen.get(key)

    # -- invariants and cleanup -----------------------------------------
    @invariant()
    def memtables_are_consistent(self):
        state = self.db.parts.commit.state
        for mt in (state.active, *state.immutable):
            check = getattr(mt, "_check", None)
            if check is not None:
                check()

    @invariant()
    def last_seq_matches(self):
        assert self.db.last_seq == self.last_seq

    @invariant()
    def l0_is_bounded(self):
        state = self.db.parts.commit.state
        assert len(state.l0) <= self.db.options.l0_max_ssts

    def teardown(self):
        try:
            for snap, _ in self.snaps:
                snap.close()
            self.db.close()
        finally:
            for name in self.mem_names:
                MemoryStore.drop(name)
            for path in self.tmpdirs:
                shutil.rmtree(path, ignore_errors=True)


class MemoryKvMachine(KvMachine):
    backend = "memory"


class LocalKvMachine(KvMachine):
    backend = "local"


class MemorySyncFlushKvMachine(KvMachine):
    """Flushes on the writing thread, one frozen memtable at most."""

    backend = "memory"
    options = {"background_flush": False, "max_immutable_memtables": 1}


class LocalObjectWalKvMachine(KvMachine):
    """A local directory with the object-store WAL instead of the journal."""

    backend = "local"
    options = {"wal": "object", "compression": "none", "bloom_bits_per_key": 0}


class MemoryRetainAllKvMachine(KvMachine):
    """retention="all": snapshots at any old seq (above the watermark) are exact."""

    backend = "memory"
    options = {"retention": "all"}
    exact_history = True


class LocalRetainAllKvMachine(KvMachine):
    backend = "local"
    options = {"retention": "all", "background_flush": False}
    exact_history = True


TestMemoryStateMachine = MemoryKvMachine.TestCase
TestMemoryStateMachine.settings = settings(SETTINGS, max_examples=150)
TestLocalStateMachine = LocalKvMachine.TestCase
TestLocalStateMachine.settings = SETTINGS
TestMemorySyncFlushStateMachine = MemorySyncFlushKvMachine.TestCase
TestMemorySyncFlushStateMachine.settings = settings(SETTINGS, max_examples=60)
TestLocalObjectWalStateMachine = LocalObjectWalKvMachine.TestCase
TestLocalObjectWalStateMachine.settings = settings(SETTINGS, max_examples=60)
TestMemoryRetainAllStateMachine = MemoryRetainAllKvMachine.TestCase
TestMemoryRetainAllStateMachine.settings = settings(SETTINGS, max_examples=40)
TestLocalRetainAllStateMachine = LocalRetainAllKvMachine.TestCase
TestLocalRetainAllStateMachine.settings = settings(SETTINGS, max_examples=25)
