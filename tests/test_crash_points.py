"""Crash-point sweeps with :class:`FaultyStore`.

A workload is first run without faults to count the store mutations it makes
(``N``); then it is run again once per crash point ``k = 1..N`` with
``crash_before=k`` (the k-th mutation raises ``SimulatedCrash`` and the store
is dead from then on), and the *inner* store is reopened and checked:

* prefix rule: the recovered contents equal the model after applying the
  first ``p`` operations, for some ``p`` that includes every acknowledged
  operation (a durable write or a flush acknowledges everything before it:
  the WAL is ordered). So nothing acknowledged is lost, no batch is partial,
  nothing is garbled and nothing appears that was never written;
* the recovered store takes new writes, flushes, closes and reopens with
  exactly the expected contents.

Backends: a :class:`MemoryStore` (object WAL: one WAL object per sync) and a
:class:`LocalStore` directory (journal WAL: append + fdatasync), the latter
also with ``torn=True`` (the crashing journal append writes half its bytes).

Sweeps:

a) flush sweep: crash points inside durable puts, batches, deletes,
   non-durable puts, ``flush()`` and ``close()`` (memtable freezes, WAL
   rotations, SST and manifest writes, WAL deletion), with the background
   flush thread on and off;
b) open sweep: crash points inside ``kvstore.open`` (claim manifest, fence
   object, journal creation, SST of the replayed WAL, manifest, WAL
   deletion), followed by a second crash inside the next open for a random
   point, then a clean open;
c) torn journal appends (``torn=True``): the torn tail is cut;
d) ``fail_before=k`` (an OSError on one mutation, the store keeps working):
   errors are reported as OSError / KvError, nothing acknowledged is lost
   after close + reopen, or after a later crash.
"""

from __future__ import annotations

import copy
import importlib.util
import logging
import os
import random
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import kvstore
from kvstore.format.wal import decode_object, decode_segment
from kvstore.objstore import FaultyStore, LocalStore, MemoryStore, SimulatedCrash

_spec = importlib.util.spec_from_file_location(
    "crash_writer", Path(__file__).with_name("crash_writer.py")
)
assert _spec is not None and _spec.loader is not None
crash_writer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(crash_writer)
make_value = crash_writer.make_value

BASE_OPTS: dict[str, Any] = dict(memtable_bytes=4096, wal_buffer_bytes=700)


@pytest.fixture(autouse=True)
def _quiet_kvstore_logs():
    # flush retries log an error per injected failure; keep the output readable
    logger = logging.getLogger("kvstore")
    old = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(old)


# ---------------------------------------------------------------------------
# backends
# ---------------------------------------------------------------------------
class Backend:
    """Creates and clones stores. ``fsync=False`` (local only) just saves time: a
    simulated crash kills the process, not the machine, so it changes nothing
    about what survives."""

    def __init__(self, kind: str, root: Path, *, fsync: bool = True) -> None:
        self.kind = kind
        self.root = root
        self.fsync = fsync
        self._n = 0

    def new(self) -> Any:
        self._n += 1
        if self.kind == "memory":
            return MemoryStore(f"crash-{self._n}")
        return LocalStore(self.root / f"s{self._n:05d}", fsync=self.fsync)

    def clone(self, store: Any) -> Any:
        new = self.new()
        if self.kind == "memory":
            for name, data in store.raw().items():
                new.put(name, data)
        else:
            shutil.rmtree(new.root)
            shutil.copytree(store.root, new.root)
        return new

    def discard(self, store: Any) -> None:
        if self.kind == "local":
            shutil.rmtree(store.root, ignore_errors=True)

    def fingerprint(self, store: Any) -> dict[str, bytes]:
        """Every object/file with its bytes (temp files included; a temp file that an
        in-flight put removes while we walk is left out)."""
        if self.kind == "memory":
            return store.raw()
        out = {}
        for dirpath, _dirs, files in os.walk(store.root):
            for fn in files:
                p = os.path.join(dirpath, fn)
                try:
                    with open(p, "rb") as f:
                        out[os.path.relpath(p, store.root)] = f.read()
                except FileNotFoundError:
                    assert fn.startswith(".tmp-"), p
        return out


def journal_segments(store: Any) -> dict[str, bytes]:
    return {n: store.get(n) for n in store.list("wal/") if n.endswith(".log")}


# ---------------------------------------------------------------------------
# the model
# ---------------------------------------------------------------------------
@dataclass
class Op:
    kind: str  # put | delete | batch | flush | close
    items: tuple[tuple[bytes, bytes | None], ...] = ()
    durable: bool = True
    status: str = "new"  # new | applied (returned, not durable) | acked | doubt (raised)


@dataclass
class Model:
    base: dict[bytes, bytes] = field(default_factory=dict)
    ops: list[Op] = field(default_factory=list)

    def state(self, upto: int | None = None) -> dict[bytes, bytes]:
        st = dict(self.base)
        for op in self.ops[:upto]:
            for k, v in op.items:
                if v is None:
                    st.pop(k, None)
                else:
                    st[k] = v
        return st

    def acknowledge_through(self, i: int) -> None:
        """A durable write or flush at index i returned: everything up to i is durable."""
        for op in self.ops[: i + 1]:
            if op.status == "applied":
                op.status = "acked"
        self.ops[i].status = "acked"

    def fresh(self) -> Model:
        return Model(base=self.state())


class OpGen:
    """Deterministic operations on keys under ``ns`` (unique keys, plus a few
    overwritten slots and deletes of earlier keys)."""

    def __init__(self, ns: str, seed: int) -> None:
        self.ns = ns.encode()
        self.rng = random.Random(seed)
        self.i = 0
        self.written: list[bytes] = []
        self.slot_ver: dict[int, int] = {}

    def _value(self, key: bytes, ver: int) -> bytes:
        return make_value(key, ver, self.rng.choice([8, 40, 300, 700, 1400]))

    def op(self) -> Op:
        self.i += 1
        r = self.rng.random()
        if r < 0.35:
            k = self.ns + b"/p/%05d" % self.i
            self.written.append(k)
            return Op("put", ((k, self._value(k, 0)),))
        if r < 0.55:
            n = self.rng.randint(2, 6)
            items = tuple(
                (k, self._value(k, n))
                for k in (self.ns + b"/b/%05d/%d" % (self.i, j) for j in range(n))
            )
            return Op("batch", items)
        if r < 0.7:
            slot = self.rng.randrange(4)
            ver = self.slot_ver[slot] = self.slot_ver.get(slot, 0) + 1
            k = self.ns + b"/o/%d" % slot
            return Op("put", ((k, self._value(k, ver)),))
        if r < 0.8 and self.written:
            k = self.written.pop(self.rng.randrange(len(self.written)))
            return Op("delete", ((k, None),))
        k = self.ns + b"/n/%05d" % self.i
        self.written.append(k)
        return Op("put", ((k, self._value(k, 0)),), durable=False)

    def burst(self) -> list[Op]:
        """Non-durable puts that fill the WAL buffer (wal_buffer_bytes) and write it out."""
        out = []
        for _ in range(self.rng.randint(2, 4)):
            self.i += 1
            k = self.ns + b"/n/%05d" % self.i
            self.written.append(k)
            out.append(Op("put", ((k, make_value(k, 0, 250)),), durable=False))
        return out

    def ops(self, n: int) -> list[Op]:
        out: list[Op] = []
        while len(out) < n:
            out.extend(self.burst() if self.rng.random() < 0.12 else [self.op()])
        return out


def workload(ns: str, seed: int, *, close: bool = True) -> list[Op]:
    g = OpGen(ns, seed)
    ops = [*g.ops(14), Op("flush"), *g.ops(14), Op("flush"), *g.ops(6)]
    if close:
        ops.append(Op("close"))
    return ops


def execute(db: kvstore.DB, op: Op) -> None:
    if op.kind == "put":
        ((k, v),) = op.items
        db.put(k, v, durable=op.durable)
    elif op.kind == "delete":
        ((k, _),) = op.items
        db.delete(k, durable=op.durable)
    elif op.kind == "batch":
        b = kvstore.WriteBatch()
        for k, v in op.items:
            b.put(k, v) if v is not None else b.delete(k)
        db.write(b, durable=op.durable)
    elif op.kind == "flush":
        db.flush()
    elif op.kind == "close":
        db.close()
    else:
        raise AssertionError(op.kind)


@dataclass
class RunResult:
    crashed: bool = False
    errors: list[tuple[int, BaseException]] = field(default_factory=list)


def run_ops(
    db: kvstore.DB,
    faulty: FaultyStore | None,
    model: Model,
    ops: list[Op],
    *,
    keep_going: bool = False,
) -> RunResult:
    """Run ``ops`` (appended to ``model``), recording what was acknowledged.

    A SimulatedCrash (or any error once the store has crashed) ends the run.
    Other OSError / KvError end it too unless ``keep_going``; anything else is
    a bug and propagates.
    """
    res = RunResult()
    for op in ops:
        model.ops.append(op)
        i = len(model.ops) - 1
        try:
            execute(db, op)
        except SimulatedCrash:
            op.status = "doubt"
            res.crashed = True
            return res
        except (OSError, kvstore.KvError) as exc:
            op.status = "doubt"
            if faulty is not None and faulty.crashed:
                res.crashed = True
                return res
            res.errors.append((i, exc))
            if not keep_going:
                raise
            continue
        if op.durable or op.kind in ("flush", "close"):
            model.acknowledge_through(i)
        else:
            op.status = "applied"
    return res


def stop_crashed(
    db: kvstore.DB,
    backend: Backend,
    inner: Any,
    *,
    check_no_io: bool,
    faulty: FaultyStore | None = None,
) -> None:
    """Stop a crashed DB's threads; with ``check_no_io``, assert the inner store is unchanged.

    Background threads (the compactor runs even without a background flush) may
    have had one mutation under way when the crash hit: it passed the fault
    check before the crash and lands while we look. Only the objects such
    in-flight mutations name (logged by ``faulty`` before the crash point) and
    the LocalStore temp files next to them may change; anything else is I/O
    after the crash.
    """
    before = backend.fingerprint(inner) if check_no_io else None
    try:
        db.close()  # every store call raises SimulatedCrash now; this only stops threads
    except BaseException:
        pass
    for attr in ("flusher", "compactor"):
        part = getattr(db.parts, attr, None)
        if part is not None:
            part.join(10)
            assert not part.alive(), f"the crashed DB's {attr} thread is still running"
    if check_no_io:
        assert before is not None and faulty is not None
        after = backend.fingerprint(inner)
        started = {name for k, _op, name in faulty.log if k != faulty.crash_before}
        dirs = {os.path.dirname(n) for n in started}
        changed = sorted(n for n in before.keys() | after.keys() if before.get(n) != after.get(n))
        unexpected = [
            n
            for n in changed
            if n not in started
            and not (os.path.basename(n).startswith(".tmp-") and os.path.dirname(n) in dirs)
        ]
        assert not unexpected, f"the crashed DB touched the store: {unexpected}"


def describe_diff(got: dict[bytes, bytes], want: dict[bytes, bytes]) -> str:
    lines = []
    for k in sorted(set(got) | set(want)):
        if got.get(k) != want.get(k):
            g, w = got.get(k), want.get(k)
            lines.append(
                f"  {k!r}: got {None if g is None else g[:24]!r}, "
                f"want {None if w is None else w[:24]!r}"
            )
    return "\n".join(lines[:20]) + (f"\n  ... {len(lines)} keys differ" if len(lines) > 20 else "")


def check_prefix(recovered: dict[bytes, bytes], model: Model) -> int:
    """The recovered state is the model after some prefix covering every ack; returns p."""
    ops = model.ops
    last_acked = max((i for i, op in enumerate(ops) if op.status == "acked"), default=-1)
    last_tried = max((i for i, op in enumerate(ops) if op.status != "new"), default=-1)
    st = model.state(last_acked + 1)
    for p in range(last_acked + 1, last_tried + 2):
        if p > last_acked + 1:
            for k, v in ops[p - 1].items:
                if v is None:
                    st.pop(k, None)
                else:
                    st[k] = v
        if st == recovered:
            return p
    raise AssertionError(
        f"recovered state matches no prefix of ops {last_acked + 1}..{last_tried + 1} "
        f"(acked through op {last_acked}: {ops[last_acked] if last_acked >= 0 else None}); "
        f"diff against the acknowledged state:\n"
        f"{describe_diff(recovered, model.state(last_acked + 1))}"
    )


def check_per_key(recovered: dict[bytes, bytes], model: Model) -> None:
    """Weaker check for runs with errors: per key, the last acknowledged value or a
    later unacknowledged one; batches all-or-nothing; no unknown keys."""
    allowed: dict[bytes, set[bytes | None]] = {k: {v} for k, v in model.base.items()}
    for op in model.ops:
        if op.status == "new":
            continue
        for k, v in op.items:
            cur = allowed.setdefault(k, {None})
            if op.status == "acked":
                allowed[k] = {v}
            else:
                cur.add(v)
    problems = []
    for k in set(allowed) | set(recovered):
        got = recovered.get(k)
        if got not in allowed.get(k, {None}):
            problems.append(
                f"{k!r}: got {None if got is None else got[:24]!r}, allowed "
                f"{[None if a is None else a[:24] for a in allowed.get(k, {None})]}"
            )
    for op in model.ops:
        if op.kind == "batch" and op.status != "new":
            present = [recovered.get(k) == v for k, v in op.items]
            if any(present) and not all(present):
                problems.append(f"partial batch {op.items[0][0]!r}: {present}")
    assert not problems, "\n".join(problems[:20])


def read_all(db: kvstore.DB) -> dict[bytes, bytes]:
    items = list(db.scan())
    d = dict(items)
    assert len(d) == len(items), "scan returned a key twice"
    return d


def verify_and_continue(
    inner: Any, model: Model, opts: dict[str, Any], *, prefix: bool, post_ns: str
) -> None:
    """Reopen the inner store, check it, write more, flush, close, reopen, check again."""
    db = kvstore.open(inner, **opts)
    try:
        recovered = read_all(db)
        if prefix:
            check_prefix(recovered, model)
        else:
            check_per_key(recovered, model)
        m2 = Model(base=recovered)
        g = OpGen(post_ns, 99)
        res = run_ops(db, None, m2, [*g.ops(8), Op("flush"), *g.ops(4), Op("close")])
        assert not res.crashed and not res.errors
    finally:
        db.close()
    with kvstore.open(inner, **opts) as db:
        got = read_all(db)
        assert got == m2.state(), describe_diff(got, m2.state())


class Findings:
    """Failures of a sweep, collected so that one report lists every bad point."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.points = 0
        self.items: list[str] = []

    def run(self, where: str, fn: Any) -> Any:
        self.points += 1
        try:
            return fn()
        except Exception as exc:  # AssertionError, or kvstore raising on reopen
            msg = str(exc).replace("\n", "\n      ")
            self.items.append(f"{where}: {type(exc).__name__}: {msg[:1500]}")
            return None

    def check(self) -> None:
        assert not self.items, (
            f"{self.label}: {len(self.items)} of {self.points} points failed:\n  "
            + "\n  ".join(self.items[:6])
        )


# ---------------------------------------------------------------------------
# setup: templates
# ---------------------------------------------------------------------------
CONFIGS = {
    # name: (backend kind, fsync, torn, background_flush)
    "memory": ("memory", False, False, False),
    "memory-bg": ("memory", False, False, True),
    "local": ("local", True, False, False),
    "local-nofsync": ("local", False, False, False),
    "local-bg": ("local", False, False, True),
    "local-torn": ("local", False, True, False),
}


def build_flushed_template(backend: Backend, opts: dict[str, Any]) -> tuple[Any, Model]:
    """A store with data in SSTs and (after a clean close) nothing to replay."""
    inner = backend.new()
    model = Model()
    db = kvstore.open(inner, **opts)
    g = OpGen("setup", 1)
    res = run_ops(db, None, model, [*g.ops(20), Op("flush"), *g.ops(10), Op("close")])
    assert not res.errors
    return inner, model


def build_replay_template(
    backend: Backend, opts: dict[str, Any], *, torn_tail: bool = False
) -> tuple[Any, Model]:
    """A store whose last writer crashed with many WAL segments/objects and several
    frozen memtables to replay: SSTs exist from an earlier session, then every
    SST upload failed (flushes kept retrying) while durable writes went on."""
    inner, model = build_flushed_template(backend, opts)
    model = model.fresh()
    state = {"dead": False, "arm_torn": False}
    faulty: FaultyStore

    def on_mutation(k: int, op: str, name: str) -> None:
        if state["arm_torn"] and op == "append":
            faulty.crash_before = k  # this append is torn and crashes
            faulty.torn = True
            return
        if state["dead"]:
            raise SimulatedCrash("template writer is dead")
        if name.startswith("sst/"):
            raise OSError("injected: SST upload refused")

    faulty = FaultyStore(inner, on_mutation=on_mutation)
    db = kvstore.open(faulty, **{**opts, "background_flush": True, "max_immutable_memtables": 1000})
    g = OpGen("replay", 2)
    res = run_ops(db, faulty, model, g.ops(30))
    assert not res.errors and not res.crashed
    if torn_tail:
        state["arm_torn"] = True
        k = b"replay/torn"
        res = run_ops(db, faulty, model, [Op("put", ((k, make_value(k, 0, 2000)),))])
        assert res.crashed
    state["dead"] = True
    faulty.crashed = True
    stop_crashed(db, backend, inner, check_no_io=False)
    if torn_tail:
        assert any(_is_torn(d) for d in journal_segments(inner).values()), "no torn tail made"
    return inner, model


def _is_torn(data: bytes) -> bool:
    """A journal segment (``.log``: 16-byte header, then frames) with a cut tail."""
    return decode_segment(data).torn


def config_opts(config: str, root: Path) -> tuple[Backend, bool, dict[str, Any]]:
    kind, fsync, torn, bg = CONFIGS[config]
    return Backend(kind, root, fsync=fsync), torn, {**BASE_OPTS, "background_flush": bg}


# ---------------------------------------------------------------------------
# a) + c): crash points in writes, flush and close
# ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "config", ["memory", "memory-bg", "local-nofsync", "local-bg", "local-torn"]
)
def test_flush_sweep(tmp_path: Path, config: str) -> None:
    backend, torn, opts = config_opts(config, tmp_path)
    template, setup_model = build_flushed_template(backend, opts)

    def attempt(k: int | None) -> tuple[FaultyStore, Any, Model, RunResult, int]:
        """Run the workload with a crash before its k-th mutation; also returns how
        many mutations the workload made (all of them when it did not crash)."""
        inner = backend.clone(template)
        faulty = FaultyStore(inner, torn=torn)
        db = kvstore.open(faulty, **opts)
        m0 = faulty.mutations
        if k is not None:
            faulty.crash_before = m0 + k
        model = setup_model.fresh()
        res = run_ops(db, faulty, model, workload("w", 5))
        if res.crashed:
            stop_crashed(
                db, backend, inner, check_no_io=not opts["background_flush"], faulty=faulty
            )
        return faulty, inner, model, res, faulty.mutations - m0

    inner = backend.clone(template)
    faulty = FaultyStore(inner)
    db = kvstore.open(faulty, **opts)
    m0 = faulty.mutations
    model = setup_model.fresh()
    res = run_ops(db, faulty, model, workload("w", 5))
    assert not res.crashed and not res.errors
    n = faulty.mutations - m0
    kinds = {op for k, op, _ in faulty.log if k > m0}
    assert n > 30, f"the workload made only {n} mutations"
    verify_and_continue(inner, model, opts, prefix=True, post_ns="post")

    findings = Findings(f"flush sweep [{config}], N={n}")
    counts = {"crashes": 0, "torn_appends": 0, "torn_tails": 0}
    # The background compactor makes a timing-dependent number of mutations, so a
    # run may be a few mutations shorter than the clean one: a crash point that
    # did not fire must lie beyond the end of its own run.
    run_lengths = [n]

    def one(k: int) -> None:
        faulty, inner, model, res, made = attempt(k)
        # (a crash can also hit the compactor thread inside close(), unseen by run_ops)
        fired = res.crashed or faulty.crashed
        counts["crashes"] += fired
        if not fired:
            run_lengths.append(made)
            assert made < k, f"crash point {k} did not fire in a run of {made} mutations"
        if res.crashed and torn and faulty.log[-1][1] == "append":
            counts["torn_appends"] += 1
            # (half of a group of frames may end exactly on a frame boundary)
            counts["torn_tails"] += any(_is_torn(d) for d in journal_segments(inner).values())
        try:
            verify_and_continue(inner, model, opts, prefix=True, post_ns="post")
        finally:
            backend.discard(inner)

    for k in range(1, n + 3):
        findings.run(f"crash before mutation {k}", lambda k=k: one(k))
    findings.check()
    shortest = min(run_lengths)
    assert shortest > 30 and counts["crashes"] >= shortest, (
        f"only {counts['crashes']} of {n} crash points crashed (runs of {sorted(run_lengths)})"
    )
    if backend.kind == "local":
        assert {"append", "create_journal", "put_if_absent", "delete"} <= kinds
    if torn:
        assert counts["torn_appends"] >= 10, f"only {counts['torn_appends']} torn appends"
        assert counts["torn_tails"] >= counts["torn_appends"] // 2, counts


# ---------------------------------------------------------------------------
# b) + c): crash points inside kvstore.open (recovery)
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("config", ["memory", "local", "local-torn"])
def test_open_sweep(tmp_path: Path, config: str) -> None:
    backend, torn, opts = config_opts(config, tmp_path)
    template, model = build_replay_template(backend, opts, torn_tail=torn)
    rng = random.Random(3)

    # a clean open: how many mutations does recovery make?
    inner = backend.clone(template)
    faulty = FaultyStore(inner)
    db = kvstore.open(faulty, **opts)
    n_open = faulty.mutations
    db.close()
    n = faulty.mutations  # recovery's, then the clean close's manifest
    ops_in_open = [op for _, op, _ in faulty.log[:n_open]]
    assert n_open > 10, f"recovery made only {n_open} mutations: {faulty.log[:n_open]}"
    assert ops_in_open.count("put_if_absent") >= 3 and "delete" in ops_in_open

    def check(inner: Any) -> None:
        verify_and_continue(inner, copy.deepcopy(model), opts, prefix=True, post_ns="post")

    check(inner)

    findings = Findings(f"open sweep [{config}], N={n}")

    def one(k: int) -> None:
        inner = backend.clone(template)
        faulty = FaultyStore(inner, crash_before=k, torn=torn)
        try:
            kvstore.open(faulty, **opts).close()
            crashed = False
        except SimulatedCrash:
            crashed = True
        assert crashed == (k <= n), f"crash point {k} of {n}"
        where = faulty.log[-1]
        # crash again during the next recovery, at a random point
        j = rng.randint(1, n + 2)
        faulty2 = FaultyStore(inner, crash_before=j)
        try:
            kvstore.open(faulty2, **opts).close()
        except SimulatedCrash:
            pass
        try:
            check(inner)
        except AssertionError as exc:
            raise AssertionError(
                f"crash in open at {where}, then in the next open before "
                f"mutation {j} {faulty2.log[-1]}: {exc}"
            ) from exc
        finally:
            backend.discard(inner)

    for k in range(1, n + 2):
        findings.run(f"crash before mutation {k}", lambda k=k: one(k))
    findings.check()


def test_open_sweep_new_store(tmp_path: Path) -> None:
    """Crash points while creating a brand-new store."""
    for kind in ("memory", "local"):
        backend = Backend(kind, tmp_path / kind)
        faulty = FaultyStore(backend.new())
        kvstore.open(faulty, **BASE_OPTS).close()
        n = len([1 for _, op, _ in faulty.log])
        assert n >= 4
        for k in range(1, n + 1):
            inner = backend.new()
            with pytest.raises(SimulatedCrash):
                kvstore.open(FaultyStore(inner, crash_before=k), **BASE_OPTS).close()
            verify_and_continue(inner, Model(), BASE_OPTS, prefix=True, post_ns="post")


# ---------------------------------------------------------------------------
# d): one failing mutation (OSError), the store keeps working
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("config", ["memory", "memory-bg", "local-nofsync"])
@pytest.mark.parametrize(
    "fault,then", [("fail_before", "close"), ("fail_before", "crash"), ("error_after", "close")]
)
def test_fail_sweep(tmp_path: Path, config: str, fault: str, then: str) -> None:
    """``fail_before=k`` (an OSError instead of mutation k) or ``error_after=k``
    (mutation k happens, then an OSError: an ambiguous outcome) for every
    mutation k of the workload. ``then="close"``: the workload goes on (errors
    recorded), closes, and the store is reopened. ``then="crash"``: the
    process also crashes 1-4 mutations after the failure (before a flush can
    paper over a lost WAL frame). Every error must be an OSError or KvError;
    after reopening, nothing acknowledged is missing."""
    backend, _torn, opts = config_opts(config, tmp_path)
    template, setup_model = build_flushed_template(backend, opts)

    faulty = FaultyStore(backend.clone(template))
    db = kvstore.open(faulty, **opts)
    m0 = faulty.mutations
    run_ops(db, faulty, setup_model.fresh(), workload("w", 5))
    n = faulty.mutations - m0
    assert n > 30

    findings = Findings(f"{fault} sweep [{config}, then {then}], N={n}")
    reported = {"n": 0, "foreground": 0}

    def one(k: int) -> None:
        inner = backend.clone(template)
        faulty = FaultyStore(inner)
        db = kvstore.open(faulty, **opts)
        point = faulty.mutations + k
        hit: dict[str, str] = {}

        def note(j: int, op: str, name: str) -> None:  # runs in the mutating thread
            if j == point:
                hit.update(thread=threading.current_thread().name, op=op, name=name)
                hit["during"] = str(len(model.ops) - 1)  # the operation then running

        faulty.on_mutation = note
        setattr(faulty, fault, point)
        if then == "crash":
            faulty.crash_before = point + 1 + k % 4
        model = setup_model.fresh()
        res = run_ops(db, faulty, model, workload("w", 5, close=(then == "close")), keep_going=True)
        failed = [e for e in faulty.log if e[0] == point]
        for _i, exc in res.errors:
            assert isinstance(exc, (OSError, kvstore.KvError)), repr(exc)
        reported["n"] += bool(res.errors)
        # A call whose own write failed must not return success: it raises (or the
        # process crashes before it returns). Exempt where the store copes by
        # design: deleting obsolete WAL segments is best effort, and a manifest
        # write that errs after landing is resolved by reading it back.
        # (Background flushes and compactions retry and report via stats.)
        if hit.get("thread") == threading.current_thread().name and not (
            hit["op"] == "delete"
            or (fault == "error_after" and hit["name"].startswith("manifest/"))
        ):
            reported["foreground"] += 1
            op = model.ops[int(hit["during"])]
            assert op.status == "doubt", (
                f"{fault} on {hit['op']} {hit['name']} during a {op.kind} that returned "
                f"success ({op.status})"
            )
        if then == "close":
            assert not res.crashed
            if model.ops[-1].status != "acked":
                try:
                    db.close()  # may raise again; the handle is closed either way
                except (OSError, kvstore.KvError):
                    pass
        else:
            faulty.crashed = True  # the process dies (if it has not yet)
            stop_crashed(
                db, backend, inner, check_no_io=not opts["background_flush"], faulty=faulty
            )
        try:
            verify_and_continue(inner, model, opts, prefix=False, post_ns="post")
        except AssertionError as exc:
            errs = [(model.ops[i].kind, type(e).__name__, str(e)) for i, e in res.errors]
            raise AssertionError(f"{fault} at {failed}; API errors {errs[:2]}: {exc}") from exc
        finally:
            backend.discard(inner)

    for k in range(1, n + 1):
        findings.run(f"{fault}={k}", lambda k=k: one(k))
    findings.check()
    # (how many failures land in background threads depends on timing; these do not)
    assert reported["foreground"] >= n // 5, (
        f"only {reported['foreground']} of {n} failures hit the writing thread"
    )


# ---------------------------------------------------------------------------
# d) targeted: a failed journal write must not let later acknowledgements
#    cover frames that never reached the journal
# ---------------------------------------------------------------------------
def _crash_and_reopen(db: kvstore.DB, faulty: FaultyStore, inner: Any) -> dict[bytes, bytes]:
    faulty.crashed = True  # the process dies
    try:
        db.close()
    except BaseException:
        pass
    with kvstore.open(inner) as db2:
        return read_all(db2)


@pytest.mark.parametrize("failing", ["write_out", "rotate"])
def test_failed_write_out_then_durable_write(tmp_path: Path, failing: str) -> None:
    """Single thread: a non-durable put returns, then the journal append that
    hands the buffer to the file fails (OSError, reported) - a write-out of the
    WAL buffer, or the append in a memtable rotation - then a durable put is
    acknowledged. The durable ack covers every earlier write (the WAL is
    ordered), so after a crash the earlier put that *returned* must be there
    too - or the durable put must not have been acknowledged. (SST uploads are
    refused so that no flush persists the memtable before the crash.)"""
    inner = LocalStore(tmp_path / "s")

    def refuse_ssts(k: int, op: str, name: str) -> None:
        if name.startswith("sst/"):  # no flush may persist the memtable meanwhile
            raise OSError("injected: SST upload refused")

    faulty = FaultyStore(inner, on_mutation=refuse_ssts)
    db = kvstore.open(
        faulty,
        memtable_bytes=1 << 20 if failing == "write_out" else 2000,
        wal_buffer_bytes=100 if failing == "write_out" else 1 << 20,
        background_flush=True,
    )
    db.put(b"a", b"1" * 50)
    db.put(b"b", b"2" * 50, durable=False)  # returns: applied, buffered
    faulty.fail_before = faulty.mutations + 1  # the next journal append fails
    with pytest.raises(OSError):
        # write_out: the buffer reaches 100 bytes; rotate: the memtable is full
        db.put(b"c", b"3" * (80 if failing == "write_out" else 2000), durable=False)
    assert faulty.log[-1][1] == "append"
    try:
        db.put(b"d", b"4" * 10)  # durable
        d_acked = True
    except (OSError, kvstore.KvError):
        d_acked = False  # reporting the WAL as failed would be fine too
    recovered = _crash_and_reopen(db, faulty, inner)
    assert recovered.get(b"a") == b"1" * 50
    if d_acked:
        assert recovered.get(b"d") == b"4" * 10, "acknowledged durable put lost"
        assert recovered.get(b"b") == b"2" * 50, (
            f"put b (seq before the acknowledged durable put d) was lost: the failed "
            f"{failing} append dropped its WAL frame but a later sync acknowledged past "
            f"it; recovered keys {sorted(recovered)}"
        )


class _GatedLocalStore(LocalStore):
    """A LocalStore where the WAL leader's fence check after fdatasync blocks, for
    the thread named ``gated_thread``, until ``gate``. The fence check reads the
    epoch cell (a shared-memory hint) and, failing that, asks whether a newer
    manifest ``exists``: both are gated."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, fsync=False)
        self.gate = threading.Event()
        self.gate.set()
        self.blocked = threading.Event()
        self.gated_thread: str | None = None

    def _hold(self) -> None:
        if threading.current_thread().name == self.gated_thread:
            self.blocked.set()
            self.gate.wait(120)  # only bounds a hang: the test opens the gate (after <= 60 s)

    def exists(self, name: str) -> bool:
        if name.startswith("manifest/"):
            self._hold()
        return super().exists(name)

    def open_epoch_cell(self, name: str) -> Any:
        return _GatedCell(self, super().open_epoch_cell(name))


class _GatedCell:
    def __init__(self, owner: _GatedLocalStore, inner: Any) -> None:
        self._owner = owner
        self._inner = inner

    def read(self) -> int:
        self._owner._hold()
        return self._inner.read()

    def raise_to(self, value: int) -> None:
        self._inner.raise_to(value)

    def close(self) -> None:
        self._inner.close()


def test_failed_write_out_loses_no_concurrent_durable_write(tmp_path: Path) -> None:
    """Thread A's durable put has appended its frame and waits for the sync
    leader; meanwhile a non-durable put writes the WAL buffer out (with A's
    frame) and that journal append fails. A must then not be acknowledged as
    durable. (A rotation's append has the same flaw; it is not forced here
    because rotate waits for the leader, so the interleaving is not
    deterministic - see test_failed_write_out_then_durable_write[rotate].)"""
    inner = _GatedLocalStore(tmp_path / "s")
    faulty = FaultyStore(inner)
    db = kvstore.open(faulty, memtable_bytes=1 << 20, wal_buffer_bytes=64, background_flush=False)
    db.put(b"base", b"0")
    results: dict[str, Any] = {}

    def put(key: bytes) -> None:
        try:
            results[key.decode()] = db.put(key, b"v-" + key)
        except BaseException as exc:
            results[key.decode()] = exc

    inner.gated_thread = "leader"
    inner.gate.clear()
    leader = threading.Thread(target=put, args=(b"leader",), name="leader")
    leader.start()
    assert inner.blocked.wait(30), "the leader never reached its fence check"
    seq = db.last_seq
    a = threading.Thread(target=put, args=(b"a",), name="a")
    a.start()
    deadline = time.monotonic() + 30
    while db.last_seq < seq + 1 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert db.last_seq == seq + 1, "A did not commit"
    while not db.parts.commit.wal._cv._waiters and time.monotonic() < deadline:
        time.sleep(0.001)  # until A waits for the leader's sync
    assert db.parts.commit.wal._cv._waiters, "A never waited for the leader"
    faulty.fail_before = faulty.mutations + 1
    try:
        db.put(b"n", b"x" * 100, durable=False)  # buffer >= 64 bytes: write_out
        n_error: BaseException | None = None
    except (OSError, kvstore.KvError) as exc:
        n_error = exc
    inner.gate.set()
    leader.join(10)
    a.join(10)
    inner.gated_thread = None
    assert n_error is not None, "the injected failure was not reported"
    assert any(e[1] == "append" for e in faulty.log if e[0] == faulty.fail_before)
    recovered = _crash_and_reopen(db, faulty, inner)
    if isinstance(results["leader"], int):
        assert recovered.get(b"leader") == b"v-leader"
    if isinstance(results["a"], int):
        assert recovered.get(b"a") == b"v-a", (
            f"durable put of b'a' was acknowledged (seq {results['a']}) but is lost after "
            f"a crash: its WAL frame was taken by the failed write_out append "
            f"({n_error!r}) and a later sync acknowledged past it"
        )


# ---------------------------------------------------------------------------
# ambiguous outcomes and WAL garbage
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("bg", [False, True], ids=["inline-flush", "background-flush"])
def test_ambiguous_manifest_write_does_not_wedge_the_writer(bg: bool) -> None:
    """A flush's manifest PUT succeeds but the call reports an OSError (a timeout
    after the write landed: ``error_after``). The writer may fail that flush,
    but must not wedge: writes must neither hang nor fail forever with a
    CorruptionError (the store is not corrupt), and nothing acknowledged may be
    lost after reopening."""
    inner = MemoryStore("ambiguous")
    faulty = FaultyStore(inner)
    db = kvstore.open(faulty, memtable_bytes=4096, background_flush=bg)

    def on_mutation(k: int, op: str, name: str) -> None:
        if name.startswith("manifest/") and faulty.error_after is None:
            faulty.error_after = k  # the next manifest write lands, then "fails"

    faulty.on_mutation = on_mutation
    acked: dict[bytes, bytes] = {}
    errors: list[BaseException] = []

    def work() -> None:
        for i in range(120):
            key, value = b"k%04d" % i, make_value(b"k%04d" % i, 0, 300)
            try:
                db.put(key, value)
                acked[key] = value
            except (OSError, kvstore.KvError) as exc:
                errors.append(exc)

    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(30)
    hung = t.is_alive()
    stats = db.stats()
    faulty.crashed = True  # end it (unblocks a stalled writer), then reopen
    try:
        db.close()
    except BaseException:
        pass
    t.join(10)
    with kvstore.open(inner) as db2:
        recovered = read_all(db2)
    lost = [k for k, v in acked.items() if recovered.get(k) != v]
    assert not lost, f"acknowledged writes lost: {lost[:5]}"
    assert faulty.error_after is not None
    assert not hung, (
        f"writers hang after an ambiguous manifest write (background error: "
        f"{stats.get('background_error')})"
    )
    corruption = [e for e in errors if isinstance(e, kvstore.CorruptionError)]
    assert not corruption, (
        f"{len(corruption)} of 120 writes failed with a false "
        f"CorruptionError after one ambiguous manifest write, e.g. "
        f"{corruption[0]!r}; {len(acked)} succeeded"
    )


def test_flushed_wal_objects_are_deleted() -> None:
    """After a flush, the WAL objects the SST covers are deleted (db.py: the flush
    'deletes the WAL segments the SST now covers'), also after a recovery."""
    from kvstore import paths
    from kvstore.manifest_store import ManifestStore

    inner = MemoryStore("walgc")
    db = kvstore.open(inner, memtable_bytes=4096)
    for i in range(60):
        db.put(b"k%04d" % i, b"v" * 300)
    db.flush()
    db.close()
    with kvstore.open(inner) as db:  # a second session, then recovery of nothing
        for i in range(60):
            db.put(b"j%04d" % i, b"v" * 300)
    m = ManifestStore(inner).load_latest()
    assert m is not None
    stale = []
    fences = 0
    for name in inner.list("wal/"):
        parsed = paths.parse_wal_name(name)
        if parsed is None or parsed[0] >= m.wal_replay_from:
            continue
        # a fence object (24-byte header with the fence flag) holds no frames and stays
        _records, fence = decode_object(inner.get(name), where=name)
        if fence:
            fences += 1
        else:
            stale.append(name)
    assert fences == 2  # one per writer session, each taken before its first object
    assert not stale, (
        f"{len(stale)} WAL objects below wal_replay_from="
        f"{m.wal_replay_from} were never deleted, e.g. {stale[:3]}"
    )
