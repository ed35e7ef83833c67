"""Workloads: generate transactions, interleave them, record the history.

CPython threads rarely interleave short transactions, so the main driver is
a *seeded single-thread scheduler*. It keeps ``concurrency`` transactions
open at once and advances one of them, chosen at random, by one step (begin,
one operation, or commit), recording every step it takes::

    seed 7, concurrency 3        steps: 0 1 0 2 1 0 3 ...
    T0  begin ── r 5 ─────────────── append 5 ── commit
    T1        begin ──── r 6 ── commit
    T2               begin ──────────── scan [4, 8) ...
    T3                                       begin ...   (T1's slot, reused)

The same seed gives the same plans, the same steps and (for a deterministic
engine) the same history, byte for byte. The step list is a *schedule*:
:func:`replay` runs any subset of its transactions in the same relative
order, which is how :func:`shrink` cuts a failing run of hundreds of
transactions down to the handful that show the anomaly. The scenario catalog
is written as schedules too.

:func:`run_threaded` is the other driver: real threads that ``time.sleep(0)``
between operations so the interpreter switches between them; not
reproducible, but it exercises an engine's locking.

Keys are integers drawn from a pool of ``keys`` active keys; a key that has
had ``writes_per_key`` appends retires and a fresh key takes its place, so
new keys keep appearing, inside ranges other transactions have scanned
(phantoms), and lists stay short. In the list-append model an ``append`` is
done as get + put on engines without a native append, and the get is
recorded as a read (``["r", k, prior]``) before the append: the history
shows exactly what the engine was asked.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kvstore.isolation.adapters import Aborted, Engine, EngineTxn
from kvstore.isolation.history import FAIL, INFO, OK, Event, Key, MicroOp, Recorder

log = logging.getLogger(__name__)

MODELS = ("list-append", "rw-register")


@dataclass(frozen=True)
class Workload:
    """The knobs of a generated workload (defaults: the detection budget)."""

    txns: int = 500
    concurrency: int = 4
    keys: int = 6
    writes_per_key: int = 6
    min_ops: int = 1
    max_ops: int = 4
    read_share: float = 0.5  # of single-key operations, the share that reads
    scan_share: float = 0.3  # of all operations, the share that scans a range
    scan_width: int = 4  # key ids per scanned range
    model: str = "list-append"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"model must be one of {MODELS}, not {self.model!r}")
        for name in ("txns", "concurrency", "keys", "writes_per_key", "min_ops", "scan_width"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.max_ops < self.min_ops:
            raise ValueError("max_ops must be at least min_ops")
        for name in ("read_share", "scan_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be within [0, 1]")


@dataclass
class Plan:
    """One transaction to run: its operations (results unfilled)."""

    ops: list[MicroOp]
    commit: bool = True  # False: end with a rollback (scenarios)
    process: int = 0

    @property
    def steps(self) -> int:
        return len(self.ops) + 2


def generate(w: Workload) -> list[Plan]:
    """The transactions of workload ``w`` (a pure function of its fields)."""
    rng = random.Random(w.seed)
    active = list(range(w.keys))
    next_key = w.keys
    writes = dict.fromkeys(active, 0)
    counter: dict[int, int] = {}
    plans: list[Plan] = []
    read_cut = w.scan_share + (1.0 - w.scan_share) * w.read_share
    for _ in range(w.txns):
        ops: list[MicroOp] = []
        for _ in range(rng.randint(w.min_ops, w.max_ops)):
            x = rng.random()
            if x < w.scan_share:
                lo = rng.randint(min(active), max(active) + 1)
                ops.append(["scan", [lo, lo + w.scan_width], None])
                continue
            k = rng.choice(active)
            if x < read_cut:
                ops.append(["r", k, None])
                continue
            counter[k] = counter.get(k, 0) + 1
            ops.append(["append" if w.model == "list-append" else "w", k, counter[k]])
            writes[k] += 1
            if writes[k] >= w.writes_per_key:
                active.remove(k)
                del writes[k]
                active.append(next_key)
                writes[next_key] = 0
                next_key += 1
        plans.append(Plan(ops))
    return plans


# ----------------------------------------------------------------------
# encoding keys and values as bytes
# ----------------------------------------------------------------------
def encode_key(k: Key) -> bytes:
    if isinstance(k, int):
        if k < 0:
            raise ValueError(f"integer keys must be >= 0, got {k}")
        return b"%012d" % k
    return k.encode()


def decode_key(b: bytes, ints: bool) -> Key:
    return int(b) if ints else b.decode()


def _encode_list(v: Sequence[Any]) -> bytes:
    return ",".join(str(e) for e in v).encode()


def _decode_list(b: bytes | None) -> list[Any]:
    if not b:
        return []
    return [int(x) if x.lstrip(b"-").isdigit() else x.decode() for x in b.split(b",")]


def _decode_register(b: bytes | None) -> Any:
    if b is None:
        return None
    return int(b) if b.lstrip(b"-").isdigit() else b.decode()


@dataclass(frozen=True)
class Codec:
    """How history keys and values become engine bytes."""

    model: str = "list-append"
    int_keys: bool = True


# ----------------------------------------------------------------------
# one transaction, step by step
# ----------------------------------------------------------------------
class TxnRunner:
    """Runs one plan against an engine one step at a time, recording its events."""

    def __init__(
        self,
        engine: Engine,
        level: str,
        plan: Plan,
        process: int,
        recorder: Recorder,
        codec: Codec = Codec(),
    ) -> None:
        self.engine = engine
        self.codec = codec
        self.level = level
        self.plan = plan
        self.process = process
        self.rec = recorder
        self.done_ops: list[MicroOp] = []
        self.txn: EngineTxn | None = None
        self.next = 0  # 0: begin, 1..n: operation next-1, n+1: commit
        self.status: str | None = None  # ok | fail | info once finished

    @property
    def finished(self) -> bool:
        return self.status is not None

    def step(self) -> None:
        if self.finished:
            return
        i = self.next
        self.next += 1
        if i == 0:
            self.rec.invoke(self.process, self.plan.ops)
            try:
                self.txn = self.engine.begin(self.level)
            except Aborted as exc:
                self._finish(FAIL, str(exc))
            return
        if i <= len(self.plan.ops):
            try:
                self._op(self.plan.ops[i - 1])
            except Aborted as exc:
                self._finish(FAIL, str(exc))
            except Exception as exc:  # the engine broke; the transaction did not commit
                self._rollback()
                self._finish(FAIL, f"{type(exc).__name__}: {exc}")
            return
        assert self.txn is not None
        if not self.plan.commit:
            self._rollback()
            self._finish(FAIL, "rolled back")
            return
        try:
            self.txn.commit()
        except Aborted as exc:
            self._finish(FAIL, str(exc))
        except Exception as exc:  # commit outcome unknown
            self._rollback()
            self._finish(INFO, f"{type(exc).__name__}: {exc}")
        else:
            self._finish(OK)

    def run_to_end(self) -> None:
        while not self.finished:
            self.step()

    def _rollback(self) -> None:
        if self.txn is not None:
            try:
                self.txn.rollback()
            except Exception:  # the engine may already have dropped it
                log.debug("rollback after failure raised", exc_info=True)

    def _finish(self, status: str, error: str | None = None) -> None:
        self.status = status
        self.rec.complete(status, self.process, self.done_ops, error)

    def _op(self, op: MicroOp) -> None:
        txn = self.txn
        assert txn is not None
        f = op[0]
        if f == "r":
            k = op[1]
            raw = txn.get(encode_key(k))
            register = self.codec.model == "rw-register"
            value = _decode_register(raw) if register else _decode_list(raw) or None
            self.done_ops.append(["r", k, value])
        elif f == "append":
            k, e = op[1], op[2]
            prior = _decode_list(txn.get(encode_key(k)))
            self.done_ops.append(["r", k, prior or None])
            txn.put(encode_key(k), _encode_list([*prior, e]))
            self.done_ops.append(["append", k, e])
        elif f == "w":
            k, v = op[1], op[2]
            txn.put(encode_key(k), str(v).encode())
            self.done_ops.append(["w", k, v])
        elif f == "scan":
            lo, hi = op[1]
            rows = txn.scan(
                None if lo is None else encode_key(lo), None if hi is None else encode_key(hi)
            )
            ints = self.codec.int_keys
            dec = _decode_register if self.codec.model == "rw-register" else _decode_list
            self.done_ops.append(
                ["scan", [lo, hi], [[decode_key(k, ints), dec(v)] for k, v in rows]]
            )
        else:
            raise ValueError(f"unknown micro-operation {f!r}")


# ----------------------------------------------------------------------
# runs
# ----------------------------------------------------------------------
@dataclass
class Run:
    """A recorded run: its history and, for seeded runs, the schedule that made it."""

    events: list[Event]
    plans: list[Plan]
    steps: list[int] = field(default_factory=list)
    level: str = "serializable"
    codec: Codec = Codec()

    def _count(self, status: str) -> int:
        return sum(1 for e in self.events if e.type == status)

    @property
    def committed(self) -> int:
        return self._count(OK)

    @property
    def aborted(self) -> int:
        return self._count(FAIL)

    @property
    def unknown(self) -> int:
        return self._count(INFO)

    @property
    def abort_rate(self) -> float:
        done = self.committed + self.aborted
        return self.aborted / done if done else 0.0


def _final_read(engine: Engine, level: str, recorder: Recorder, process: int, codec: Codec) -> None:
    """Observe every key once everything has finished, so final versions are ordered."""
    plan = Plan([["scan", [None, None], None]])
    TxnRunner(engine, level, plan, process, recorder, codec).run_to_end()


def run_seeded(engine: Engine, level: str, w: Workload) -> Run:
    """Interleave ``w.txns`` generated transactions on one thread (reproducible)."""
    plans = generate(w)
    codec = Codec(w.model, int_keys=True)
    rng = random.Random(w.seed * 1_000_003 + 17)
    rec = Recorder()
    slots: list[TxnRunner | None] = [None] * w.concurrency
    procs = list(range(w.concurrency))
    next_proc = w.concurrency
    slot_plan = [-1] * w.concurrency
    steps: list[int] = []
    next_plan = 0
    while True:
        for s in range(w.concurrency):
            if slots[s] is None and next_plan < len(plans):
                plans[next_plan].process = procs[s]
                slots[s] = TxnRunner(engine, level, plans[next_plan], procs[s], rec, codec)
                slot_plan[s] = next_plan
                next_plan += 1
        open_slots = [s for s in range(w.concurrency) if slots[s] is not None]
        if not open_slots:
            break
        s = rng.choice(open_slots)
        runner = slots[s]
        assert runner is not None
        runner.step()
        steps.append(slot_plan[s])
        if runner.finished:
            if runner.status == INFO:  # a process whose outcome is unknown is never reused
                procs[s] = next_proc
                next_proc += 1
            slots[s] = None
    _final_read(engine, level, rec, next_proc, codec)
    return Run(rec.events, plans, steps, level, codec)


def replay(
    engine: Engine,
    level: str,
    plans: Sequence[Plan],
    steps: Iterable[int],
    keep: set[int] | None = None,
    codec: Codec = Codec(),
) -> Run:
    """Run a schedule: advance plan ``i`` once per ``i`` in ``steps`` (only ``keep``).

    A transaction that finishes early (aborted) ignores its remaining steps;
    one still open when the steps run out is run to its end.
    """
    rec = Recorder()
    runners: dict[int, TxnRunner] = {}
    busy: dict[int, int] = {}  # process -> plan running on it
    retired: set[int] = set()
    remap: dict[int, int] = {}
    next_proc = max((p.process for p in plans), default=0) + 1
    taken: list[int] = []

    def process_for(i: int) -> int:
        nonlocal next_proc
        p = remap.get(plans[i].process, plans[i].process)
        if p in retired or p in busy:
            p = next_proc
            next_proc += 1
        return p

    def finish(i: int, r: TxnRunner) -> None:
        busy.pop(r.process, None)
        if r.status == INFO:
            retired.add(r.process)

    for i in steps:
        if keep is not None and i not in keep:
            continue
        r = runners.get(i)
        if r is None:
            p = process_for(i)
            r = runners[i] = TxnRunner(engine, level, plans[i], p, rec, codec)
            busy[p] = i
        if r.finished:
            continue
        r.step()
        taken.append(i)
        if r.finished:
            finish(i, r)
    for i, r in runners.items():
        if not r.finished:
            r.run_to_end()
            finish(i, r)
    _final_read(engine, level, rec, next_proc, codec)
    return Run(rec.events, list(plans), taken, level, codec)


def shrink(
    make_engine: Callable[[], Engine],
    run: Run,
    fails: Callable[[list[Event]], bool],
    *,
    max_attempts: int = 300,
) -> Run:
    """A smaller schedule that still ``fails``: prefix bisection, then one-by-one removal."""
    order: list[int] = []
    for i in run.steps:
        if i not in order:
            order.append(i)
    attempts = 0

    def attempt(keep: set[int]) -> Run | None:
        nonlocal attempts
        attempts += 1
        engine = make_engine()
        try:
            r = replay(engine, run.level, run.plans, run.steps, keep, run.codec)
        finally:
            engine.close()
        return r if fails(r.events) else None

    best = run
    lo, hi = 1, len(order)  # smallest failing prefix length lies in [lo, hi]
    while lo < hi and attempts < max_attempts:
        mid = (lo + hi) // 2
        r = attempt(set(order[:mid]))
        if r is not None:
            hi, best = mid, r
        else:
            lo = mid + 1
    kept = order[:hi]
    for i in reversed(list(kept)):
        if attempts >= max_attempts or len(kept) <= 1:
            break
        trial = [j for j in kept if j != i]
        r = attempt(set(trial))
        if r is not None:
            kept, best = trial, r
    log.info("shrunk %d transactions to %d in %d attempts", len(order), len(kept), attempts)
    return best


def run_threaded(engine: Engine, level: str, w: Workload, *, pause: float = 0.0) -> Run:
    """``w.concurrency`` threads, each running transactions and yielding between steps."""
    plans = generate(w)
    codec = Codec(w.model, int_keys=True)
    started = time.monotonic_ns()
    rec = Recorder(clock=lambda: time.monotonic_ns() - started)
    lock = threading.Lock()
    it = iter(range(len(plans)))
    errors: list[BaseException] = []

    def worker(slot: int) -> None:
        process = slot
        try:
            while True:
                with lock:
                    i = next(it, None)
                if i is None:
                    return
                plans[i].process = process
                r = TxnRunner(engine, level, plans[i], process, rec, codec)
                while not r.finished:
                    r.step()
                    time.sleep(pause)
                if r.status == INFO:
                    process += w.concurrency
        except BaseException as exc:  # surfaced to the caller below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(w.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    _final_read(engine, level, rec, 10 * w.concurrency + 1_000_000, codec)
    return Run(rec.events, plans, [], level, codec)


def with_seed(w: Workload, seed: int) -> Workload:
    return replace(w, seed=seed)
