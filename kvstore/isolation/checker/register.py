"""Read-write register histories: the version order must be *inferred*.

A register read returns one value, so, unlike list-append, a read says
nothing about which versions came before it. Writes carry values unique per
key, so a read names the write it saw; the version order of each key is
inferred from what must hold in any history worth checking (Elle's rw-register
with "writes follow reads"):

* the initial state (absent, ``null``) precedes every written version;
* a transaction's successive writes to one key are ordered;
* a transaction that read version ``a`` of a key and then wrote ``b`` to it
  installed ``b`` after ``a``.

::

    T1: r x=null  w x=1          inferred order of x:  null -> 1 -> 2
    T2: r x=1     w x=2                                 null -> 3
    T3:           w x=3 (blind)   (3 is unordered against 1 and 2)

Each inferred pair ``a -> b`` gives ``ww`` (writer of a -> writer of b) and
``rw`` (every reader of a -> writer of b) edges; every read gives a ``wr``
edge from its writer. The order is partial, so this checker sees fewer
cycles than list-append (blind writes have no ordered predecessor but the
initial state); a cycle in the inferred order itself is reported as
incompatible order. Direct anomalies: G1a, G1b, lost update (two committed
transactions read the same version and both wrote the key), internal,
garbage reads. Scans read every key in their range, as in list-append.
"""

from __future__ import annotations

from typing import Any

from kvstore.isolation.checker.core import Analysis, Anomaly, Reason, fmt_key, fmt_range
from kvstore.isolation.checker.listappend import Range, Universe, joined
from kvstore.isolation.graph import RW, WR, WW, DepGraph, sccs
from kvstore.isolation.history import FAIL, INFO, OK, Key, Txn

_MISSING = object()
#: an external read: key, value (None: absent), scan range (None: a get)
ExtRead = tuple[Key, Any, Range | None]


def _show(v: Any) -> str:
    return "null (absent)" if v is None else repr(v)


class RegisterAnalysis(Analysis):
    def __init__(self, txns: list[Txn]) -> None:
        super().__init__("rw-register", txns, DepGraph(len(txns)))
        self._writer: dict[Key, dict[Any, int]] = {}
        self._writes: dict[int, dict[Key, list[Any]]] = {}
        self._ext: dict[int, list[ExtRead]] = {}
        # key -> version -> external readers (committed)
        self._readers: dict[Key, dict[Any, list[int]]] = {}
        # key -> inferred pairs (a, b): a precedes b
        self._succ: dict[Key, dict[Any, set[Any]]] = {}
        self._index_writes()
        universe = Universe(self._writer)
        for t in txns:
            if t.status == OK:
                self._walk(t, universe)
        self._check_reads()
        self._infer_orders()
        self._add_edges()
        self._lost_updates()

    def _index_writes(self) -> None:
        for t in self.txns:
            mine: dict[Key, list[Any]] = {}
            for op in t.ops:
                if op[0] == "w":
                    k, v = op[1], op[2]
                    self._writer.setdefault(k, {}).setdefault(v, t.id)
                    mine.setdefault(k, []).append(v)
            if mine:
                self._writes[t.id] = mine

    def _writer_of(self, k: Key, v: Any) -> int | None:
        w = self._writer.get(k)
        return None if w is None or v is None else w.get(v)

    def _walk(self, t: Txn, universe: Universe) -> None:
        known: dict[Key, Any] = {}
        written: set[Key] = set()
        ext: list[ExtRead] = []

        def read(k: Key, v: Any, rng: Range | None) -> None:
            expected = known.get(k, _MISSING)
            if expected is not _MISSING:
                if v != expected:
                    how = f"scanned {fmt_range(rng)} and " if rng else ""
                    self.anomalies.append(
                        Anomaly(
                            "internal",
                            (t.id,),
                            f"{t.name} {how}read {fmt_key(k)} = {_show(v)}, but its own "
                            f"earlier reads and writes imply {_show(expected)}",
                        )
                    )
            elif k not in written:
                ext.append((k, v, rng))
                self._readers.setdefault(k, {}).setdefault(v, []).append(t.id)
            known[k] = v

        for op in t.ops:
            f = op[0]
            if f == "r":
                read(op[1], op[2], None)
            elif f == "w":
                known[op[1]] = op[2]
                written.add(op[1])
            elif f == "scan":
                lo, hi = op[1]
                rows = op[2] or []
                seen = set()
                for k, v in rows:
                    seen.add(k)
                    read(k, v, (lo, hi))
                for k in universe.between(lo, hi):
                    if k not in seen:
                        read(k, None, (lo, hi))
        if ext:
            self._ext[t.id] = ext

    def _check_reads(self) -> None:
        txns = self.txns
        for k, versions in self._readers.items():
            for v, readers in versions.items():
                if v is None:
                    continue
                w = self._writer_of(k, v)
                r = readers[0]
                if w is None:
                    self.anomalies.append(
                        Anomaly(
                            "garbage-read",
                            (r,),
                            f"{self.label(r)} read {fmt_key(k)} = {v!r}; no transaction wrote it",
                        )
                    )
                elif txns[w].status == FAIL:
                    self.anomalies.append(
                        Anomaly(
                            "G1a",
                            (r, w),
                            f"{self.label(r)} read {fmt_key(k)} = {v!r}, written by "
                            f"{self.label(w)}, which aborted",
                        )
                    )
                elif self._writes[w][k][-1] != v:
                    for r in readers:
                        if r != w:
                            self.anomalies.append(
                                Anomaly(
                                    "G1b",
                                    (r, w),
                                    f"{self.label(r)} read {fmt_key(k)} = {v!r}, an intermediate "
                                    f"version: {self.label(w)} overwrote it with "
                                    f"{self._writes[w][k][-1]!r} before committing",
                                )
                            )
                            break

    def _infer_orders(self) -> None:
        live = {OK, INFO}
        has_pred: dict[Key, set[Any]] = {}

        def order(k: Key, a: Any, b: Any) -> None:
            if a == b:
                return
            self._succ.setdefault(k, {}).setdefault(a, set()).add(b)
            has_pred.setdefault(k, set()).add(b)

        for t_id, writes in self._writes.items():
            if self.txns[t_id].status not in live:
                continue
            for k, vs in writes.items():
                for a, b in zip(vs, vs[1:]):
                    order(k, a, b)
        for t_id, ext in self._ext.items():
            mine = self._writes.get(t_id)
            if not mine:
                continue
            for k, v, _ in ext:
                if k in mine:
                    order(k, v, mine[k][0])
        for k, versions in self._writer.items():
            preds = has_pred.get(k, set())
            for v, w in versions.items():
                if self.txns[w].status in live and v not in preds:
                    order(k, None, v)
        for k, succ in self._succ.items():
            ids = {v: i for i, v in enumerate({*succ, *(b for bs in succ.values() for b in bs)})}
            g: list[dict[int, int]] = [{} for _ in ids]
            for a, bs in succ.items():
                for b in bs:
                    g[ids[a]][ids[b]] = 1
            cyc = sccs(g)
            if cyc:
                back = {i: v for v, i in ids.items()}
                shown = ", ".join(_show(back[i]) for i in sorted(cyc[0]))
                self.anomalies.append(
                    Anomaly(
                        "incompatible-order",
                        tuple(
                            sorted(
                                {
                                    self._writer[k][back[i]]
                                    for i in cyc[0]
                                    if back[i] is not None and back[i] in self._writer[k]
                                }
                            )
                        ),
                        f"the versions of {fmt_key(k)} that reads and writes imply are cyclic: "
                        f"{shown}",
                    )
                )

    def _add_edges(self) -> None:
        txns = self.txns
        add = self.graph.add
        live = {OK, INFO}
        for k, succ in self._succ.items():
            readers = self._readers.get(k, {})
            for a, bs in succ.items():
                wa = self._writer_of(k, a)
                for b in bs:
                    wb = self._writer_of(k, b)
                    if wb is None or txns[wb].status not in live:
                        continue
                    if wa is not None and txns[wa].status in live:
                        add(wa, wb, WW)
                    for r in readers.get(a, ()):
                        if r != wa:
                            add(r, wb, RW)
        for k, versions in self._readers.items():
            for v, rs in versions.items():
                w = self._writer_of(k, v)
                if w is not None and txns[w].status in live:
                    for r in rs:
                        add(w, r, WR)

    def _lost_updates(self) -> None:
        groups: dict[tuple[Key, Any], list[int]] = {}
        for t_id, ext in self._ext.items():
            writes = self._writes.get(t_id)
            if not writes:
                continue
            for k, v, _ in ext:
                if k in writes:
                    groups.setdefault((k, v), []).append(t_id)
        for (k, v), ts in groups.items():
            if len(ts) > 1:
                self.anomalies.append(
                    Anomaly(
                        "lost-update",
                        tuple(ts),
                        f"{joined(self.label(t) for t in ts)} read {fmt_key(k)} = {_show(v)} and "
                        "each wrote it, none seeing the others' writes: one update is lost in "
                        "any serial order",
                    )
                )

    def reason(self, a: int, b: int, kind: int) -> Reason:
        A, B = self.label(a), self.label(b)
        if kind == WW:
            for k, vs in self._writes.get(a, {}).items():
                succ = self._succ.get(k, {})
                for v in vs:
                    for nxt in succ.get(v, ()):
                        if self._writer_of(k, nxt) == b:
                            return Reason(
                                WW,
                                k,
                                f"{A} wrote {fmt_key(k)} = {v!r} and {B} wrote a later version, "
                                f"{nxt!r}",
                            )
        elif kind == WR:
            for k, v, rng in self._ext.get(b, []):
                if self._writer_of(k, v) == a:
                    how = f"scanned {fmt_range(rng)} and " if rng else ""
                    return Reason(WR, k, f"{B} {how}read {fmt_key(k)} = {v!r}, written by {A}")
        elif kind == RW:
            phantom: Reason | None = None
            for k, v, rng in self._ext.get(a, []):
                for nxt in self._succ.get(k, {}).get(v, ()):
                    if self._writer_of(k, nxt) != b:
                        continue
                    if rng is not None and v is None:
                        phantom = phantom or Reason(
                            RW,
                            k,
                            f"{A} scanned {fmt_range(rng)} and found no {fmt_key(k)}, which {B} "
                            f"created with value {nxt!r}",
                            predicate=True,
                        )
                        continue
                    how = f"scanned {fmt_range(rng)} and " if rng else ""
                    return Reason(
                        RW,
                        k,
                        f"{A} {how}read {fmt_key(k)} = {_show(v)} and did not see {B}'s later "
                        f"write of {nxt!r}",
                    )
            if phantom is not None:
                return phantom
        return Reason(kind, None, "(dependency recorded without a reason)")
