"""The catalog of named scenarios: Hermitage and the PostgreSQL classics, as data.

Each scenario is a fixed interleaving written as lines of text and run as a
schedule (:func:`kvstore.isolation.workload.replay`), so every engine sees
exactly the same steps. The history it leaves is handed to the checker; the
scenario's anomaly *happened* when the checker finds an anomaly that
``anomaly_level`` forbids. That makes the matrix read like Hermitage's: the
G1c scenario at SNAPSHOT leaves a write-skew cycle, which read committed
allows, so G1c counts as prevented, exactly as Hermitage records for
PostgreSQL REPEATABLE READ.

Script lines (keys are words; ``*`` is an open scan bound)::

    init k1 k2 ...         one committed transaction appending to each key
    t1 begin               t1 takes its snapshot here
    t1 r k                 read k
    t1 append k            append the next element to k (get + put)
    t1 scan lo hi          read every key in [lo, hi)
    t1 commit | rollback

Writes of the originals (``update``, ``insert``, ``delete``) are appends
here: what matters is which keys each transaction reads and writes, and
list-append lets the checker recover the version order. ``postgres`` records
what Hermitage and the PostgreSQL isolation specs say PostgreSQL does at
REPEATABLE READ (snapshot isolation) and SERIALIZABLE.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvstore.isolation.adapters import Engine
from kvstore.isolation.history import MicroOp
from kvstore.isolation.workload import Codec, Plan, Run, replay

PREVENTED, ANOMALY = "prevented", "anomaly"
CODEC = Codec("list-append", int_keys=False)


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    source: str
    #: the weakest level whose forbidden anomalies mean "it happened"
    anomaly_level: str
    #: PostgreSQL's result at "snapshot" (REPEATABLE READ) and "serializable"
    postgres: dict[str, str]
    script: str
    note: str = ""
    plans: list[Plan] = field(default_factory=list, compare=False, repr=False)
    steps: list[int] = field(default_factory=list, compare=False, repr=False)

    def __post_init__(self) -> None:
        plans, steps = parse(self.name, self.script)
        self.plans.extend(plans)
        self.steps.extend(steps)

    def run(self, engine: Engine, level: str) -> Run:
        return replay(engine, level, self.plans, self.steps, codec=CODEC)


def parse(name: str, script: str) -> tuple[list[Plan], list[int]]:
    """A script as plans (one per transaction) and the schedule of their steps."""
    plans: list[Plan] = []
    steps: list[int] = []
    index: dict[str, int] = {}
    state: dict[str, str] = {}  # txn -> "open" | "done"
    counters: dict[str, int] = {}

    def element(k: str) -> int:
        counters[k] = counters.get(k, 0) + 1
        return counters[k]

    def bound(word: str) -> Any:
        return None if word == "*" else word

    for lineno, raw in enumerate(script.strip().splitlines(), 1):
        words = raw.split("#", 1)[0].split()
        if not words:
            continue
        where = f"scenario {name}, line {lineno}: {raw.strip()!r}"
        if words[0] == "init":
            if len(words) < 2:
                raise ValueError(f"{where}: init needs keys")
            plans.append(Plan([["append", k, element(k)] for k in words[1:]], process=len(plans)))
            steps.extend([len(plans) - 1] * plans[-1].steps)
            continue
        txn, verb, args = words[0], words[1] if len(words) > 1 else "", words[2:]
        if verb == "begin":
            if state.get(txn) == "open":
                raise ValueError(f"{where}: {txn} is already open")
            index[txn] = len(plans)
            plans.append(Plan([], process=len(plans)))
            state[txn] = "open"
            steps.append(index[txn])
            continue
        if state.get(txn) != "open":
            raise ValueError(f"{where}: {txn} is not open")
        i = index[txn]
        op: MicroOp
        if verb in ("commit", "rollback"):
            plans[i].commit = verb == "commit"
            state[txn] = "done"
            steps.append(i)
            continue
        if verb == "r" and len(args) == 1:
            op = ["r", args[0], None]
        elif verb == "append" and len(args) == 1:
            op = ["append", args[0], element(args[0])]
        elif verb == "scan" and len(args) == 2:
            op = ["scan", [bound(args[0]), bound(args[1])], None]
        else:
            raise ValueError(f"{where}: cannot parse")
        plans[i].ops.append(op)
        steps.append(i)
    left = sorted(t for t, s in state.items() if s == "open")
    if left:
        raise ValueError(f"scenario {name}: transactions left open: {', '.join(left)}")
    return plans, steps


_BOTH = {"snapshot": PREVENTED, "serializable": PREVENTED}
_SKEW = {"snapshot": ANOMALY, "serializable": PREVENTED}

CATALOG: tuple[Scenario, ...] = (
    Scenario(
        name="G0",
        title="write cycles (dirty writes)",
        source="Hermitage",
        anomaly_level="read-uncommitted",
        postgres=_BOTH,
        script="""
        init 1 2
        t1 begin
        t2 begin
        t1 append 1
        t2 append 1
        t1 append 2
        t1 commit
        t2 append 2
        t2 commit
        """,
    ),
    Scenario(
        name="G1a",
        title="aborted reads",
        source="Hermitage",
        anomaly_level="read-committed",
        postgres=_BOTH,
        script="""
        init 1 2
        t1 begin
        t2 begin
        t1 append 1
        t2 scan * *
        t1 rollback
        t2 scan * *
        t2 commit
        """,
    ),
    Scenario(
        name="G1b",
        title="intermediate reads",
        source="Hermitage",
        anomaly_level="read-committed",
        postgres=_BOTH,
        script="""
        init 1 2
        t1 begin
        t2 begin
        t1 append 1      # 101
        t2 scan * *
        t1 append 1      # 11
        t1 commit
        t2 scan * *
        t2 commit
        """,
    ),
    Scenario(
        name="G1c",
        title="circular information flow",
        source="Hermitage",
        anomaly_level="read-committed",
        postgres=_BOTH,
        script="""
        init 1 2
        t1 begin
        t2 begin
        t1 append 1
        t2 append 2
        t1 r 2
        t2 r 1
        t1 commit
        t2 commit
        """,
        note="at SNAPSHOT both commit and leave a write-skew cycle, which is not G1c",
    ),
    Scenario(
        name="OTV",
        title="observed transaction vanishes",
        source="Hermitage",
        anomaly_level="snapshot",
        postgres=_BOTH,
        script="""
        init 1 2
        t1 begin
        t2 begin
        t1 append 1
        t1 append 2
        t2 append 1
        t1 commit
        t3 begin
        t3 r 1
        t2 append 2
        t3 r 2
        t2 commit
        t3 r 2
        t3 r 1
        t3 commit
        """,
    ),
    Scenario(
        name="PMP",
        title="predicate-many-preceders (read predicates)",
        source="Hermitage",
        anomaly_level="snapshot",
        postgres=_BOTH,
        script="""
        init 1 2
        t1 begin
        t2 begin
        t1 scan * *
        t2 append 3
        t2 commit
        t1 scan * *
        t1 commit
        """,
    ),
    Scenario(
        name="PMP-write",
        title="predicate-many-preceders (write predicates)",
        source="Hermitage",
        anomaly_level="snapshot",
        postgres=_BOTH,
        script="""
        init 1 2
        t1 begin
        t2 begin
        t1 scan * *
        t1 append 1
        t1 append 2
        t2 scan * *
        t2 append 2      # delete where value = 20
        t1 commit
        t2 commit
        """,
    ),
    Scenario(
        name="P4",
        title="lost update",
        source="Hermitage",
        anomaly_level="snapshot",
        postgres=_BOTH,
        script="""
        init 1 2
        t1 begin
        t2 begin
        t1 r 1
        t2 r 1
        t1 append 1
        t2 append 1
        t1 commit
        t2 commit
        """,
    ),
    Scenario(
        name="G-single",
        title="read skew",
        source="Hermitage",
        anomaly_level="snapshot",
        postgres=_BOTH,
        script="""
        init 1 2
        t1 begin
        t2 begin
        t1 r 1
        t2 r 1
        t2 r 2
        t2 append 1
        t2 append 2
        t2 commit
        t1 r 2
        t1 commit
        """,
    ),
    Scenario(
        name="G-single-predicate",
        title="read skew with predicate dependencies",
        source="Hermitage",
        anomaly_level="snapshot",
        postgres=_BOTH,
        script="""
        init 1 2
        t1 begin
        t2 begin
        t1 scan * *
        t2 scan * *
        t2 append 1
        t2 commit
        t1 scan * *
        t1 commit
        """,
    ),
    Scenario(
        name="G-single-write",
        title="read skew with a write predicate",
        source="Hermitage",
        anomaly_level="snapshot",
        postgres=_BOTH,
        script="""
        init 1 2
        t1 begin
        t2 begin
        t1 r 1
        t2 scan * *
        t2 append 1
        t2 append 2
        t2 commit
        t1 scan * *
        t1 append 2      # delete where value = 20
        t1 commit
        """,
    ),
    Scenario(
        name="G2-item",
        title="write skew",
        source="Hermitage",
        anomaly_level="serializable",
        postgres=_SKEW,
        script="""
        init 1 2
        t1 begin
        t2 begin
        t1 r 1
        t1 r 2
        t2 r 1
        t2 r 2
        t1 append 1
        t2 append 2
        t1 commit
        t2 commit
        """,
    ),
    Scenario(
        name="G2",
        title="anti-dependency cycles with predicates (phantoms)",
        source="Hermitage",
        anomaly_level="serializable",
        postgres=_SKEW,
        script="""
        init 1 2
        t1 begin
        t2 begin
        t1 scan * *
        t2 scan * *
        t1 append 3
        t2 append 4
        t1 commit
        t2 commit
        """,
    ),
    Scenario(
        name="G2-two-edges",
        title="two anti-dependency edges (Fekete et al.)",
        source="Hermitage",
        anomaly_level="serializable",
        postgres=_SKEW,
        script="""
        init 1 2
        t1 begin
        t1 scan * *
        t2 begin
        t2 r 2
        t2 append 2
        t2 commit
        t3 begin
        t3 scan * *
        t3 commit
        t1 append 1
        t1 commit
        """,
    ),
    Scenario(
        name="simple-write-skew",
        title="turn every pear into an apple and vice versa",
        source="PostgreSQL isolation tests",
        anomaly_level="serializable",
        postgres=_SKEW,
        script="""
        init 05 07 11
        t1 begin
        t2 begin
        t1 scan * *
        t1 append 07
        t2 scan * *
        t2 append 05
        t1 commit
        t2 commit
        """,
    ),
    Scenario(
        name="receipt-report",
        title="a day closed while a receipt for it commits",
        source="PostgreSQL isolation tests",
        anomaly_level="serializable",
        postgres=_SKEW,
        script="""
        init ctl receipt/1 receipt/2
        t1 begin
        t2 begin
        t1 r ctl
        t1 append receipt/3
        t2 append ctl
        t2 commit
        t3 begin
        t3 r ctl
        t3 scan receipt/ receipt0
        t3 commit
        t1 commit
        """,
    ),
    Scenario(
        name="two-ids",
        title="an id copied from a row being updated",
        source="PostgreSQL isolation tests",
        anomaly_level="serializable",
        postgres=_SKEW,
        script="""
        init d1 d2
        t1 begin
        t2 begin
        t1 r d1
        t1 append d1
        t2 r d1
        t2 append d2
        t1 commit
        t3 begin
        t3 r d2
        t3 r d1
        t3 commit
        t2 commit
        """,
    ),
    Scenario(
        name="classroom-scheduling",
        title="a room booked twice for one moment",
        source="PostgreSQL isolation tests",
        anomaly_level="serializable",
        postgres=_SKEW,
        script="""
        init room/101/1000
        t1 begin
        t2 begin
        t1 scan room/101/ room/101/1400
        t2 scan room/101/ room/101/1430
        t1 append room/101/1300
        t2 append room/101/1000     # delete Bob's old booking
        t2 append room/101/1330
        t1 commit
        t2 commit
        """,
    ),
    Scenario(
        name="read-only-anomaly",
        title="a read-only transaction sees an impossible state",
        source="PostgreSQL isolation tests",
        anomaly_level="serializable",
        postgres=_SKEW,
        script="""
        init X Y
        t2 begin
        t2 r X
        t2 r Y
        t1 begin
        t1 r Y
        t1 append Y
        t1 commit
        t3 begin
        t3 r X
        t3 r Y
        t2 append X
        t2 commit
        t3 commit
        """,
    ),
    Scenario(
        name="total-cash",
        title="both withdrawals see the full total",
        source="PostgreSQL isolation tests",
        anomaly_level="serializable",
        postgres=_SKEW,
        script="""
        init checking savings
        t1 begin
        t2 begin
        t1 append checking
        t1 scan * *
        t2 append savings
        t2 scan * *
        t1 commit
        t2 commit
        """,
    ),
    Scenario(
        name="ri-trigger",
        title="a child inserted while its parent is deleted",
        source="PostgreSQL isolation tests",
        anomaly_level="serializable",
        postgres=_SKEW,
        script="""
        init parent/0
        t1 begin
        t2 begin
        t1 r parent/0
        t1 append child/0/1
        t2 scan child/0/ child/00
        t2 append parent/0          # delete the parent
        t1 commit
        t2 commit
        """,
    ),
    Scenario(
        name="empty-range-skew",
        title="write skew through empty range scans",
        source="SlateDB #1711",
        anomaly_level="serializable",
        postgres=_SKEW,
        script="""
        init m
        t1 begin
        t2 begin
        t1 scan a/ a0
        t2 scan b/ b0
        t1 append b/1
        t2 append a/1
        t1 commit
        t2 commit
        """,
        note="only tracking the requested range, not the rows returned, catches this",
    ),
)

SCENARIOS: dict[str, Scenario] = {s.name: s for s in CATALOG}
