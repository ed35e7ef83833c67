"""Named anomalies and which isolation levels forbid them, as data.

The checker (:mod:`kvstore.isolation.checker`) reports anomalies by name; this
module says what each name means and which levels proscribe it, so a history
can be judged against a level with a table lookup.

Cycle anomalies are shapes in Adya's direct serialization graph, where an
edge ``Ti -x-> Tj`` says Tj must come after Ti in any serial order:

======  =====================================================================
``ww``  Ti installed a version of a key and Tj installed the next one
``wr``  Tj read a version that Ti installed
``rw``  Ti read a version and Tj installed the next one (an anti-dependency:
        Ti did not see Tj's write)
``rt``  Ti completed before Tj began, in real time (only with ``realtime``)
======  =====================================================================

The shape of a cycle decides its name (Adya 1999; Cerone and Gotsman 2016
for the snapshot-isolation characterisation)::

    G0             ww only                           T1 -ww-> T2 -ww-> T1
    G1c            ww and wr, at least one wr        T1 -wr-> T2 -ww-> T1
    G-single       exactly one rw                    T1 -rw-> T2 -wr-> T1
    G-nonadjacent  two or more rw, no two adjacent   T1 -rw-> T2 -wr-> T3 -rw-> T4 -wr-> T1
    G2-item        two or more rw, some adjacent     T1 -rw-> T2 -rw-> T1   (write skew)
    G2             a G2-item whose rw edges need a predicate read (a scan
                   that did not see a key another transaction created: a phantom)

A cycle that exists only thanks to ``rt`` edges carries a ``-realtime``
suffix (``G-single-realtime``); only strict serializability forbids those.

Snapshot isolation is exactly "every cycle has two adjacent rw edges", so it
forbids G0, G1c, G-single and G-nonadjacent and allows G2-item and G2 (write
skew). Serializability forbids every cycle.

Non-cycle anomalies are found directly in the history: G1a (a committed
transaction read a write of an aborted one), G1b (it read a version its
writer later overwrote in the same transaction), lost update (two committed
transactions read the same version of a key and both wrote it), internal
(a transaction's read disagrees with its own earlier reads and writes),
incompatible order (two reads of a key that no single version order can
explain), duplicate elements and garbage reads (a value nobody wrote).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AnomalyInfo:
    name: str
    title: str
    description: str
    #: "cycle" (a dependency-graph shape) or "direct" (found without a cycle)
    kind: str


_ALL: tuple[AnomalyInfo, ...] = (
    AnomalyInfo("G0", "write cycle", "a cycle of write-write dependencies (dirty writes)", "cycle"),
    AnomalyInfo(
        "G1a", "aborted read", "a committed transaction read a write of an aborted one", "direct"
    ),
    AnomalyInfo(
        "G1b",
        "intermediate read",
        "a transaction read a version its writer overwrote before committing",
        "direct",
    ),
    AnomalyInfo(
        "G1c",
        "circular information flow",
        "a cycle of write-write and write-read dependencies",
        "cycle",
    ),
    AnomalyInfo(
        "G-single",
        "single anti-dependency cycle",
        "a cycle with exactly one read-write anti-dependency (read skew)",
        "cycle",
    ),
    AnomalyInfo(
        "G-nonadjacent",
        "non-adjacent anti-dependency cycle",
        "a cycle with several anti-dependencies, no two of them adjacent",
        "cycle",
    ),
    AnomalyInfo(
        "G2-item",
        "item anti-dependency cycle",
        "a cycle with adjacent read-write anti-dependencies (write skew)",
        "cycle",
    ),
    AnomalyInfo(
        "G2",
        "predicate anti-dependency cycle",
        "a G2-item cycle that needs a predicate read: a scan missed a key another "
        "transaction created (phantom)",
        "cycle",
    ),
    AnomalyInfo(
        "lost-update",
        "lost update",
        "two committed transactions read the same version of a key and both wrote it",
        "direct",
    ),
    AnomalyInfo(
        "internal",
        "internal inconsistency",
        "a read disagrees with the transaction's own earlier reads and writes",
        "direct",
    ),
    AnomalyInfo(
        "incompatible-order",
        "incompatible order",
        "reads of one key that no single version order explains",
        "direct",
    ),
    AnomalyInfo(
        "duplicate-elements",
        "duplicate elements",
        "a read returned the same appended element twice",
        "direct",
    ),
    AnomalyInfo("garbage-read", "garbage read", "a read returned a value nobody wrote", "direct"),
)

CYCLE_NAMES = ("G0", "G1c", "G-single", "G-nonadjacent", "G2-item", "G2")
REALTIME_NAMES = tuple(f"{n}-realtime" for n in CYCLE_NAMES)

ANOMALIES: dict[str, AnomalyInfo] = {a.name: a for a in _ALL}
for _name in CYCLE_NAMES:
    _base = ANOMALIES[_name]
    ANOMALIES[f"{_name}-realtime"] = AnomalyInfo(
        f"{_name}-realtime",
        f"{_base.title} (with real-time order)",
        f"{_base.description}, closed only by real-time order between transactions",
        "cycle",
    )

#: broken bytes rather than isolation: forbidden at every level
_STRUCTURAL = frozenset({"internal", "incompatible-order", "duplicate-elements", "garbage-read"})

#: level -> anomalies it forbids (each level forbids everything the one before does)
FORBIDDEN: dict[str, frozenset[str]] = {}
FORBIDDEN["read-uncommitted"] = _STRUCTURAL - {"internal"} | {"G0"}
FORBIDDEN["read-committed"] = FORBIDDEN["read-uncommitted"] | {"G1a", "G1b", "G1c"}
FORBIDDEN["snapshot"] = FORBIDDEN["read-committed"] | {
    "internal",
    "G-single",
    "G-nonadjacent",
    "lost-update",
}
FORBIDDEN["serializable"] = FORBIDDEN["snapshot"] | {"G2-item", "G2"}
FORBIDDEN["strict-serializable"] = FORBIDDEN["serializable"] | set(REALTIME_NAMES)

LEVELS: tuple[str, ...] = tuple(FORBIDDEN)

#: what other systems call these levels
ALIASES = {
    "repeatable-read": "snapshot",  # PostgreSQL's REPEATABLE READ is snapshot isolation
    "si": "snapshot",
    "ssi": "serializable",
    "serializable-snapshot": "serializable",
    "strict": "strict-serializable",
}


def level_name(level: str) -> str:
    """The canonical name of ``level`` (case, ``_`` and aliases allowed)."""
    name = level.strip().lower().replace("_", "-").replace(" ", "-")
    name = ALIASES.get(name, name)
    if name not in FORBIDDEN:
        raise ValueError(f"unknown isolation level {level!r}; known: {', '.join(LEVELS)}")
    return name


def forbidden(level: str) -> frozenset[str]:
    """The anomaly names ``level`` forbids."""
    return FORBIDDEN[level_name(level)]


def weakest_level_forbidding(name: str) -> str | None:
    """The weakest level that forbids anomaly ``name`` (None: none does)."""
    for level in LEVELS:
        if name in FORBIDDEN[level]:
            return level
    return None
