"""List-append histories: the version order is *read off* the reads.

Every write appends a unique element to the list stored at a key, and every
read returns the whole list. Because a list only grows, each committed read
is a prefix of the key's final version order, and the longest read *is* that
order up to its length (Elle's insight, Kingsbury and Alvaro 2020)::

    T1: append 1 to x      reads of x seen in the history:
    T2: append 2 to x          [1]   [1 2]   [1 2 3]
    T3: append 3 to x      -> version order of x: 1, 2, 3 (writers T1, T2, T3)

Reads that are not prefixes of one another (``[1 2]`` and ``[1 3]``) mean no
single order exists: *incompatible order*. With the order known, each
dependency edge follows from one read or one pair of neighbouring elements:

* ``ww``: the writer of element i -> the writer of element i+1;
* ``wr``: the writer of the read's last element -> the reader;
* ``rw``: the reader -> the writer of the element right after the read's
  last one (the first version it did not see).

Only a transaction's *external* reads count for edges: its first read of a
key, taken before it appended to that key; later reads must agree with that
one plus its own appends, or the history shows an *internal* anomaly.

Scans: ``["scan", [lo, hi], rows]`` is a read of every key in the range.
Keys in the range that appear anywhere in the history but not in ``rows``
were read as *absent* (the empty list), so a scan that missed a key another
transaction created gets an ``rw`` edge to its creator. A cycle that needs
such an edge is a phantom, reported as G2.

Direct anomalies: G1a (a read contains an element of an aborted
transaction), G1b (a read ends with an element its writer followed with
another append to the same key), lost update (two committed transactions
read the same version of a key and both appended to it), duplicate elements,
garbage reads (elements nobody appended). Committed appends that no read
ever shows have no known position, except when a single transaction made
all of them: they then follow the longest read. Runs therefore end with a
final read of everything.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any, cast

from kvstore.isolation.checker.core import (
    Analysis,
    Anomaly,
    Reason,
    fmt_key,
    fmt_list,
    fmt_range,
)
from kvstore.isolation.graph import RW, WR, WW, DepGraph
from kvstore.isolation.history import FAIL, INFO, OK, Key, Txn

Elements = tuple[Any, ...]
Range = tuple[Any, Any]
#: an external read: key, value read, the scan range it came from (None: a get)
ExtRead = tuple[Key, Elements, Range | None]


def joined(names: Any) -> str:
    ns = list(names)
    return f"{ns[0]} and {ns[1]} both" if len(ns) == 2 else ", ".join(ns) + " all"


def sort_key(k: Any) -> tuple[int, Any]:
    return (1, k) if isinstance(k, str) else (0, k)


class Universe:
    """Every key written in the history, sorted, for turning scans into reads."""

    def __init__(self, keys: Any) -> None:
        self.keys = sorted(keys, key=sort_key)
        self._sk = [sort_key(k) for k in self.keys]

    def between(self, lo: Any, hi: Any) -> list[Any]:
        i = 0 if lo is None else bisect_left(self._sk, sort_key(lo))
        j = len(self.keys) if hi is None else bisect_left(self._sk, sort_key(hi))
        return self.keys[i:j]


class ListAppendAnalysis(Analysis):
    def __init__(self, txns: list[Txn]) -> None:
        super().__init__("list-append", txns, DepGraph(len(txns)))
        self._writer: dict[Key, dict[Any, int]] = {}
        self._appends: dict[int, dict[Key, list[Any]]] = {}
        self._ext: dict[int, list[ExtRead]] = {}
        self._order: dict[Key, list[Any]] = {}
        self._pos: dict[Key, dict[Any, int]] = {}
        # key -> distinct value read by a committed transaction -> first reader
        self._reads: dict[Key, dict[Elements, int]] = {}
        self._index_appends()
        universe = Universe(self._writer)
        for t in txns:
            if t.status == OK:
                self._walk(t, universe)
        self._infer_orders()
        self._check_reads()
        self._add_edges()
        self._lost_updates()

    # -- 1. who appended what ------------------------------------------------
    def _index_appends(self) -> None:
        for t in self.txns:
            mine: dict[Key, list[Any]] = {}
            for op in t.ops:
                if op[0] == "append":
                    k, e = op[1], op[2]
                    self._writer.setdefault(k, {}).setdefault(e, t.id)
                    mine.setdefault(k, []).append(e)
            if mine:
                self._appends[t.id] = mine

    def _writer_of(self, k: Key, e: Any) -> int | None:
        w = self._writer.get(k)
        return None if w is None else w.get(e)

    def _is_intermediate(self, k: Key, e: Any, w: int) -> bool:
        elems = self._appends[w][k]
        return cast(bool, elems[-1] != e)

    # -- 2. each committed transaction on its own --------------------------------
    def _walk(self, t: Txn, universe: Universe) -> None:
        known: dict[Key, Elements] = {}  # what this transaction must see next
        own: dict[Key, list[Any]] = {}  # own appends before any read of the key
        ext: list[ExtRead] = []

        def read(k: Key, v: Elements, rng: Range | None, absent: bool = False) -> None:
            if k in known:
                if v != known[k]:
                    self._internal(t, k, v, known[k], rng)
            elif k in own:
                mine = tuple(own.pop(k))
                if v[len(v) - len(mine) :] != mine or len(v) < len(mine):
                    self._internal(t, k, v, None, rng, mine)
            else:
                ext.append((k, v, rng))
            known[k] = v
            if len(set(v)) != len(v):
                self.anomalies.append(
                    Anomaly(
                        "duplicate-elements",
                        (t.id,),
                        f"{t.name} read {fmt_key(k)} = {fmt_list(v)}, which repeats an element",
                    )
                )
            if v and not absent:
                self._reads.setdefault(k, {}).setdefault(v, t.id)

        for op in t.ops:
            f = op[0]
            if f == "r":
                read(op[1], tuple(op[2] or ()), None)
            elif f == "append":
                k, e = op[1], op[2]
                if k in known:
                    known[k] = (*known[k], e)
                else:
                    own.setdefault(k, []).append(e)
            elif f == "scan":
                lo, hi = op[1]
                rows = op[2] or []
                rng = (lo, hi)
                seen = set()
                for k, v in rows:
                    seen.add(k)
                    read(k, tuple(v or ()), rng)
                for k in universe.between(lo, hi):
                    if k not in seen:
                        read(k, (), rng, absent=True)
        if ext:
            self._ext[t.id] = ext

    def _internal(
        self,
        t: Txn,
        k: Key,
        got: Elements,
        expected: Elements | None,
        rng: Range | None,
        mine: Elements = (),
    ) -> None:
        how = f"scanned {fmt_range(rng)} and " if rng else ""
        if expected is not None:
            want = f"its earlier reads and appends imply {fmt_list(expected)}"
        else:
            want = f"it had appended {fmt_list(mine)}, so the value must end with that"
        self.anomalies.append(
            Anomaly(
                "internal",
                (t.id,),
                f"{t.name} {how}read {fmt_key(k)} = {fmt_list(got)}, but {want}",
            )
        )

    # -- 3. version orders -----------------------------------------------------
    def _infer_orders(self) -> None:
        for k, reads in self._reads.items():
            longest = max(reads, key=len)
            bad = next((v for v in reads if v != longest[: len(v)]), None)
            if bad is not None:
                self.anomalies.append(
                    Anomaly(
                        "incompatible-order",
                        (reads[bad], reads[longest]),
                        f"{self.label(reads[bad])} read {fmt_key(k)} = {fmt_list(bad)} but "
                        f"{self.label(reads[longest])} read {fmt_list(longest)}: neither is "
                        "a prefix of the other, so no single version order explains both",
                    )
                )
                continue
            self._order[k] = list(longest)
        # committed appends no read shows: placeable only when one transaction made them all
        for k, writers in self._writer.items():
            order = self._order.get(k)
            if order is None and k in self._reads:
                continue  # incompatible
            order = order if order is not None else []
            shown = set(order)
            live = {w for e, w in writers.items() if e not in shown and self.txns[w].status != FAIL}
            if len(live) == 1:
                (w,) = live
                if self.txns[w].status == OK:
                    order.extend(e for e in self._appends[w][k] if e not in shown)
            if order:
                self._order[k] = order
        for k, order in self._order.items():
            self._pos[k] = {e: i for i, e in enumerate(order)}

    # -- 4. reads of aborted, intermediate or unknown elements ---------------
    def _check_reads(self) -> None:
        txns = self.txns
        for k, reads in self._reads.items():
            writers = self._writer.get(k, {})
            reported: set[tuple[str, Any]] = set()
            for v, reader in reads.items():
                for e in v:
                    w = writers.get(e)
                    if w is None:
                        if ("garbage", e) not in reported:
                            reported.add(("garbage", e))
                            self.anomalies.append(
                                Anomaly(
                                    "garbage-read",
                                    (reader,),
                                    f"{self.label(reader)} read {fmt_key(k)} = {fmt_list(v)}; "
                                    f"no transaction appended {e}",
                                )
                            )
                    elif txns[w].status == FAIL and ("g1a", e) not in reported:
                        reported.add(("g1a", e))
                        self.anomalies.append(
                            Anomaly(
                                "G1a",
                                (reader, w),
                                f"{self.label(reader)} read {fmt_key(k)} = {fmt_list(v)}, "
                                f"which holds {e}, appended by {self.label(w)}, which aborted",
                            )
                        )
        for t_id, ext in self._ext.items():
            for k, v, _ in ext:
                if not v:
                    continue
                w = self._writer_of(k, v[-1])
                if w is not None and w != t_id and self._is_intermediate(k, v[-1], w):
                    later = self._appends[w][k][-1]
                    self.anomalies.append(
                        Anomaly(
                            "G1b",
                            (t_id, w),
                            f"{self.label(t_id)} read {fmt_key(k)} = {fmt_list(v)}, ending with "
                            f"{v[-1]}, an intermediate version: {self.label(w)} appended "
                            f"{later} to it before committing",
                        )
                    )

    # -- 5. dependency edges -----------------------------------------------------
    def _add_edges(self) -> None:
        txns = self.txns
        add = self.graph.add
        live = {OK, INFO}
        for k, order in self._order.items():
            writers = self._writer[k]
            prev = None
            for e in order:
                w = writers.get(e)
                if w is None or txns[w].status not in live:
                    prev = None
                    continue
                if prev is not None and prev != w:
                    add(prev, w, WW)
                prev = w
        for t_id, ext in self._ext.items():
            for k, v, _ in ext:
                known = self._order.get(k)
                if known is None:
                    continue
                last_writer = None
                if v:
                    last_writer = self._writer_of(k, v[-1])
                    if last_writer is not None and txns[last_writer].status in live:
                        add(last_writer, t_id, WR)
                if len(v) < len(known) and (not v or known[len(v) - 1] == v[-1]):
                    nxt = self._writer_of(k, known[len(v)])
                    if nxt is not None and nxt != last_writer and txns[nxt].status in live:
                        add(t_id, nxt, RW)

    # -- 6. lost updates -------------------------------------------------------------
    def _lost_updates(self) -> None:
        groups: dict[tuple[Key, Elements], list[int]] = {}
        for t_id, ext in self._ext.items():
            appended = self._appends.get(t_id)
            if not appended:
                continue
            for k, v, _ in ext:
                if k in appended:
                    groups.setdefault((k, v), []).append(t_id)
        for (k, v), ts in groups.items():
            if len(ts) < 2:
                continue
            self.anomalies.append(
                Anomaly(
                    "lost-update",
                    tuple(ts),
                    f"{joined(self.label(t) for t in ts)} read {fmt_key(k)} = {fmt_list(v)} and "
                    "each appended to it, none seeing the others' appends: one update is lost "
                    "in any serial order",
                )
            )

    # -- explanations -----------------------------------------------------------------
    def reason(self, a: int, b: int, kind: int) -> Reason:
        A, B = self.label(a), self.label(b)
        if kind == WW:
            for k, elems in self._appends.get(a, {}).items():
                order, pos = self._order.get(k), self._pos.get(k)
                if not order or pos is None:
                    continue
                for e in elems:
                    i = pos.get(e)
                    if i is None or i + 1 >= len(order):
                        continue
                    if self._writer_of(k, order[i + 1]) == b:
                        return Reason(
                            WW,
                            k,
                            f"{A} appended {e} to {fmt_key(k)} and {B} appended the next "
                            f"element, {order[i + 1]}",
                        )
        elif kind == WR:
            for k, v, rng in self._ext.get(b, []):
                if v and self._writer_of(k, v[-1]) == a:
                    how = f"scanned {fmt_range(rng)} and " if rng else ""
                    return Reason(
                        WR,
                        k,
                        f"{B} {how}read {fmt_key(k)} = {fmt_list(v)}, which ends with {A}'s "
                        f"append of {v[-1]}",
                    )
        elif kind == RW:
            phantom: Reason | None = None
            for k, v, rng in self._ext.get(a, []):
                order = self._order.get(k)
                if not order or len(v) >= len(order):
                    continue
                e = order[len(v)]
                if self._writer_of(k, e) != b:
                    continue
                if rng is not None and not v:
                    phantom = phantom or Reason(
                        RW,
                        k,
                        f"{A} scanned {fmt_range(rng)} and found no {fmt_key(k)}, which {B} "
                        f"created by appending {e}",
                        predicate=True,
                    )
                    continue
                how = f"scanned {fmt_range(rng)} and " if rng else ""
                shown = fmt_list(v) if v else "[] (absent)"
                return Reason(
                    RW,
                    k,
                    f"{A} {how}read {fmt_key(k)} = {shown} and did not see {B}'s append of "
                    f"{e}, the next element",
                )
            if phantom is not None:
                return phantom
        return Reason(kind, None, "(dependency recorded without a reason)")
