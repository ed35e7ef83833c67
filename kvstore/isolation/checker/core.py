"""What every checker model shares: results, explanations, the cycle search.

A model (:mod:`.listappend`, :mod:`.register`) turns transactions into an
:class:`Analysis`: a dependency graph, the anomalies found without cycles,
and a way to say *why* an edge exists (looked up lazily, only for the edges
of a reported cycle, so a 100,000-transaction history keeps no strings for
its edges). :func:`find_cycles` then classifies the graph's cycles.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kvstore.isolation import anomalies as an
from kvstore.isolation.graph import (
    RT,
    RW,
    WR,
    WW,
    DepGraph,
    Step,
    classify,
    cycle_through,
    nonadjacent_cycle_through,
    sccs,
)
from kvstore.isolation.history import INFO, OK, Key, Txn

#: start edges tried per component and cycle shape
DEFAULT_BUDGET = 24

_ARROWS = {WW: "-ww->", WR: "-wr->", RW: "-rw->", RT: "-rt->"}


@dataclass(frozen=True)
class Reason:
    """Why ``a -kind-> b``: the key involved and a sentence."""

    kind: int
    key: Key | None
    text: str
    predicate: bool = False


@dataclass(frozen=True)
class Anomaly:
    """One anomaly: its name, the transactions involved and a readable account."""

    name: str
    txns: tuple[int, ...]
    summary: str
    details: tuple[str, ...] = ()
    steps: tuple[Step, ...] = ()

    def explain(self) -> str:
        info = an.ANOMALIES.get(self.name)
        head = f"{self.name}" + (f" ({info.title})" if info else "") + f": {self.summary}"
        return "\n".join([head, *(f"    {line}" for line in self.details)])

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "txns": list(self.txns),
            "summary": self.summary,
            "details": list(self.details),
        }


@dataclass
class Analysis:
    """A model's view of a history; subclasses fill the graph and ``anomalies``."""

    model: str
    txns: list[Txn]
    graph: DepGraph
    anomalies: list[Anomaly] = field(default_factory=list)

    def reason(self, a: int, b: int, kind: int) -> Reason:  # pragma: no cover - overridden
        return Reason(kind, None, "")

    def label(self, t: int) -> str:
        return self.txns[t].name

    def describe(self, t: int) -> str:
        tx = self.txns[t]
        where = f"history line {tx.invoke_index + 1}"
        if tx.complete_index is not None:
            where = f"history lines {tx.invoke_index + 1}-{tx.complete_index + 1}"
        return f"{tx.name} (process {tx.process}, {where})"

    def explain_step(self, a: int, b: int, kind: int) -> Reason:
        if kind == RT:
            ta, tb = self.txns[a], self.txns[b]
            return Reason(
                RT,
                None,
                f"{ta.name} completed (event {ta.complete_index}) before {tb.name} began "
                f"(event {tb.invoke_index}), in real time",
            )
        return self.reason(a, b, kind)


def add_realtime_edges(analysis: Analysis) -> None:
    """``a -rt-> b`` whenever ``a`` committed before ``b`` was invoked.

    Walks the events in history order keeping the *frontier*: committed
    transactions not yet known to precede a later committed one. Linking only
    the frontier gives a transitive reduction of real-time order, so the edge
    count stays proportional to concurrency, not to the square of the history.
    """
    marks: list[tuple[int, int, int]] = []  # (event index, 0 invoke / 1 complete, txn)
    for t in analysis.txns:
        if t.status == OK:
            marks.append((t.invoke_index, 0, t.id))
            assert t.complete_index is not None
            marks.append((t.complete_index, 1, t.id))
        elif t.status == INFO:
            marks.append((t.invoke_index, 0, t.id))
    marks.sort()
    frontier: set[int] = set()
    preds: dict[int, tuple[int, ...]] = {}
    graph = analysis.graph
    for _, kind, tid in marks:
        if kind == 0:
            preds[tid] = tuple(frontier)
            for p in frontier:
                graph.add(p, tid, RT)
        else:
            frontier.difference_update(preds.get(tid, ()))
            frontier.add(tid)


def _component_cycles(
    succ: list[dict[int, int]], comp: set[int], non_rw: int, budget: int
) -> Iterator[list[Step]]:
    """The shortest cycle found for each shape inside one component."""

    def shortest(cands: Iterator[list[Step] | None]) -> list[Step] | None:
        best: list[Step] | None = None
        for i, c in enumerate(cands):
            if c is not None and (best is None or len(c) < len(best)):
                best = c
                if len(best) == 2:
                    break
            if i + 1 >= budget:
                break
        return best

    ww_mask = WW | (non_rw & RT)
    for sub in sccs(succ, ww_mask, comp):
        s = set(sub)
        c = shortest(
            cycle_through(succ, u, v, _first(succ[u][v] & ww_mask), s, ww_mask)
            for u, v in _edges_in(succ, s, ww_mask)
        )
        if c:
            yield c
    for sub in sccs(succ, non_rw, comp):
        s = set(sub)
        c = shortest(cycle_through(succ, u, v, WR, s, non_rw) for u, v in _edges_in(succ, s, WR))
        if c:
            yield c
    rw_edges = list(_edges_in(succ, comp, RW, limit=budget))
    c = shortest(cycle_through(succ, u, v, RW, comp, non_rw) for u, v in rw_edges)
    if c:
        yield c
    c = shortest(nonadjacent_cycle_through(succ, u, v, comp, non_rw) for u, v in rw_edges)
    if c:
        yield c
    c = shortest(cycle_through(succ, u, v, RW, comp, non_rw | RW) for u, v in rw_edges)
    if c:
        yield c


def _first(mask: int) -> int:
    for bit in (WW, WR, RT, RW):
        if mask & bit:
            return bit
    raise ValueError("empty mask")


def _edges_in(
    succ: list[dict[int, int]], nodes: set[int], mask: int, limit: int | None = None
) -> Iterator[tuple[int, int]]:
    n = 0
    for u in sorted(nodes):
        for v, m in succ[u].items():
            if m & mask and v in nodes:
                yield u, v
                n += 1
                if limit is not None and n >= limit:
                    return


def find_cycles(analysis: Analysis, *, realtime: bool, budget: int = DEFAULT_BUDGET) -> None:
    """Append one anomaly per cycle shape per strongly connected component."""
    succ = analysis.graph.succ
    passes = [(WW | WR | RW, WW | WR, False)]
    if realtime:
        passes.append((WW | WR | RW | RT, WW | WR | RT, True))
    seen: set[tuple[str, frozenset[int]]] = set()
    for mask, non_rw, rt_pass in passes:
        for comp in sccs(succ, mask):
            comp_set = set(comp)
            for cycle in _component_cycles(succ, comp_set, non_rw, budget):
                kinds = [k for _, _, k in cycle]
                if rt_pass and RT not in kinds:
                    continue
                name = classify(kinds)
                reasons = [analysis.explain_step(a, b, k) for a, b, k in cycle]
                if name.startswith("G2-item") and any(r.predicate for r in reasons):
                    name = "G2" + name[len("G2-item") :]
                key = (name, frozenset(a for a, _, _ in cycle))
                if key in seen:
                    continue
                seen.add(key)
                analysis.anomalies.append(_cycle_anomaly(analysis, name, cycle, reasons))


def _cycle_anomaly(
    analysis: Analysis, name: str, cycle: list[Step], reasons: list[Reason]
) -> Anomaly:
    label = analysis.label
    ring = " ".join(f"{label(a)} {_ARROWS[k]}" for a, _, k in cycle) + f" {label(cycle[0][0])}"
    details = [
        f"{label(a)} {_ARROWS[k]} {label(b)}: {r.text}" for (a, b, k), r in zip(cycle, reasons)
    ]
    who = ", ".join(analysis.describe(a) for a, _, _ in cycle)
    details.append(f"where {who}")
    details.append(_moral(name))
    return Anomaly(
        name=name,
        txns=tuple(a for a, _, _ in cycle),
        summary=ring,
        details=tuple(details),
        steps=tuple(cycle),
    )


def _moral(name: str) -> str:
    base = name.removesuffix("-realtime")
    text = {
        "G0": "each overwrote the other: no serial order has both orders of the writes",
        "G1c": "information flowed in a circle: each saw the other's effects",
        "G-single": "one read missed a write that the rest of the cycle shows happened before it",
        "G-nonadjacent": "anti-dependencies separated by other edges: snapshot isolation "
        "forbids this, serializability too",
        "G2-item": "each read state the other overwrote (write skew): snapshot isolation "
        "allows it, serializability forbids it",
        "G2": "a scan missed a key another transaction created (phantom): snapshot isolation "
        "allows it, serializability forbids it",
    }[base]
    if name.endswith("-realtime"):
        text += "; the cycle closes through real-time order (strict serializability only)"
    return text


@dataclass
class CheckResult:
    """The outcome of checking one history."""

    model: str
    txns: int
    ok: int
    failed: int
    info: int
    edges: dict[str, int]
    anomalies: list[Anomaly]
    seconds: float
    realtime: bool = False

    def names(self) -> set[str]:
        return {a.name for a in self.anomalies}

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for a in self.anomalies:
            out[a.name] = out.get(a.name, 0) + 1
        return dict(sorted(out.items()))

    def forbidden(self, level: str) -> list[Anomaly]:
        """The anomalies found that ``level`` forbids."""
        bad = an.forbidden(level)
        return [a for a in self.anomalies if a.name in bad]

    def valid(self, level: str) -> bool:
        """No anomaly ``level`` forbids was found (see :meth:`unchecked` for whether
        the check could have found them all)."""
        return not self.forbidden(level)

    def unchecked(self, level: str) -> str | None:
        """Why this check cannot vouch for ``level`` (None: it can).

        An empty history proves nothing, and strict serializability is about
        real-time order: without real-time edges its extra anomalies were
        never looked for."""
        if self.txns == 0:
            return "the history is empty: nothing was checked"
        if an.level_name(level) == "strict-serializable" and not self.realtime:
            return "strict serializability needs real-time edges (--realtime), not checked"
        return None

    def holds(self, level: str) -> bool:
        """``level`` was checked and no anomaly it forbids was found."""
        return self.valid(level) and self.unchecked(level) is None

    def strongest_level(self) -> str | None:
        """The strongest level this check shows the history satisfies (None: none,
        or nothing was checked). Strict serializability only with real-time edges."""
        best = None
        for level in an.LEVELS:
            if self.holds(level):
                best = level
        return best

    def to_json(self, level: str | None = None) -> dict[str, Any]:
        d: dict[str, Any] = {
            "model": self.model,
            "txns": self.txns,
            "ok": self.ok,
            "fail": self.failed,
            "info": self.info,
            "edges": self.edges,
            "anomaly_counts": self.counts(),
            "anomalies": [a.to_json() for a in self.anomalies],
            "seconds": round(self.seconds, 3),
            "realtime": self.realtime,
            "strongest_level": self.strongest_level(),
        }
        if level is not None:
            d["level"] = an.level_name(level)
            d["valid"] = self.holds(level)
            d["unchecked"] = self.unchecked(level)
        return d


def fmt_key(k: Key | None) -> str:
    return f"key {k}" if not isinstance(k, str) else f"key {k!r}"


def fmt_list(v: tuple[Any, ...] | list[Any]) -> str:
    return "[" + " ".join(str(x) for x in v) + "]"


def fmt_range(rng: tuple[Any, Any]) -> str:
    lo, hi = rng
    return f"[{'-inf' if lo is None else lo!r}, {'+inf' if hi is None else hi!r})"
