"""The dependency graph: strongly connected components, then shortest cycles.

Nodes are transaction ids; each edge carries a bit mask of dependency kinds
(several kinds can join the same pair). Finding anomalies is two steps:

1. Tarjan's algorithm splits the graph into strongly connected components
   (iteratively: histories have 100,000 transactions and Python's recursion
   limit is 1,000). Every cycle lies inside one component; a history whose
   components are all single transactions is serializable as far as the
   graph can tell, and that is the common, fast case.
2. Inside a component, breadth-first search finds the *shortest* witness of
   each cycle shape: to find a cycle through edge ``u -> v``, search from
   ``v`` back to ``u`` over the kinds the shape allows. Example, G-single
   (exactly one rw) in this component::

        ┌──────────── ww ────────────┐     start at the rw edge T1 -> T2,
        ▼                            │     BFS from T2 back to T1 over
        T1 ── rw ──► T2 ── wr ──► T3 ┘     ww|wr only: T2 -wr-> T3 -ww-> T1
        ▲            │                     cycle: T1 -rw-> T2 -wr-> T3 -ww-> T1
        └──── rw ────┘                     (the shorter T1 <-> T2 ring has two
                                            rw edges: G2-item, a different shape)

   G-nonadjacent (several rw, no two in a row) needs a little state in the
   search: (node, was the last edge rw?, seen a second rw yet?).

Searches try a bounded number of start edges per component and keep the
shortest cycle found, so a huge component costs a bounded number of BFS
passes (Elle does the same with a time limit).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Iterator

WW, WR, RW, RT = 1, 2, 4, 8
ALL = WW | WR | RW | RT
KIND_NAMES = {WW: "ww", WR: "wr", RW: "rw", RT: "rt"}

#: a step of a cycle: (from, to, kind), one kind bit
Step = tuple[int, int, int]


class DepGraph:
    """A directed graph over ``0..n-1`` with a kind mask per edge."""

    def __init__(self, n: int) -> None:
        self.succ: list[dict[int, int]] = [{} for _ in range(n)]

    def __len__(self) -> int:
        return len(self.succ)

    def add(self, a: int, b: int, kind: int) -> None:
        if a == b:
            return
        d = self.succ[a]
        d[b] = d.get(b, 0) | kind

    def kinds(self, a: int, b: int) -> int:
        return self.succ[a].get(b, 0)

    def edges(self, mask: int = ALL) -> Iterator[tuple[int, int, int]]:
        for a, d in enumerate(self.succ):
            for b, m in d.items():
                if m & mask:
                    yield a, b, m & mask

    def edge_counts(self) -> dict[str, int]:
        counts = {name: 0 for name in KIND_NAMES.values()}
        for d in self.succ:
            for m in d.values():
                for bit, name in KIND_NAMES.items():
                    if m & bit:
                        counts[name] += 1
        return counts


def sccs(
    succ: list[dict[int, int]], mask: int = ALL, nodes: Iterable[int] | None = None
) -> list[list[int]]:
    """Strongly connected components with two or more nodes (Tarjan, iterative).

    Only edges whose kinds intersect ``mask`` count; with ``nodes`` only that
    subset (and edges inside it) is considered.
    """
    allowed: Collection[int] | None = None
    if nodes is not None:
        allowed = nodes if isinstance(nodes, (set, frozenset)) else set(nodes)
        roots: Iterable[int] = allowed
    else:
        roots = range(len(succ))
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    out: list[list[int]] = []
    counter = 0
    for root in roots:
        if root in index:
            continue
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        work: list[tuple[int, Iterator[tuple[int, int]]]] = [(root, iter(succ[root].items()))]
        while work:
            node, it = work[-1]
            advanced = False
            for nxt, m in it:
                if not m & mask or (allowed is not None and nxt not in allowed):
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(succ[nxt].items())))
                    advanced = True
                    break
                if nxt in on_stack and index[nxt] < low[node]:
                    low[node] = index[nxt]
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                if low[node] < low[parent]:
                    low[parent] = low[node]
            if low[node] == index[node]:
                comp: list[int] = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    out.append(comp)
    return out


def _pick(mask: int, order: tuple[int, ...]) -> int:
    for bit in order:
        if mask & bit:
            return bit
    raise ValueError("empty edge mask")


#: preference when an edge has several non-rw kinds: the worst-looking first
_NON_RW_ORDER = (WW, WR, RT)


def path(
    succ: list[dict[int, int]], start: int, goal: int, nodes: Collection[int], mask: int
) -> list[Step] | None:
    """Shortest path ``start => goal`` inside ``nodes`` over edges of ``mask`` (BFS)."""
    if start == goal:
        return []
    parent: dict[int, int] = {start: start}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt, m in succ[node].items():
            if not m & mask or nxt in parent or nxt not in nodes:
                continue
            parent[nxt] = node
            if nxt == goal:
                steps: list[Step] = []
                cur = goal
                while cur != start:
                    prev = parent[cur]
                    steps.append((prev, cur, _pick(succ[prev][cur] & mask, (*_NON_RW_ORDER, RW))))
                    cur = prev
                steps.reverse()
                return steps
            queue.append(nxt)
    return None


def cycle_through(
    succ: list[dict[int, int]],
    u: int,
    v: int,
    first_kind: int,
    nodes: Collection[int],
    mask: int,
) -> list[Step] | None:
    """Shortest cycle that starts with edge ``u -first_kind-> v`` and returns over ``mask``."""
    rest = path(succ, v, u, nodes, mask)
    if rest is None:
        return None
    return [(u, v, first_kind), *rest]


def nonadjacent_cycle_through(
    succ: list[dict[int, int]], u: int, v: int, nodes: Collection[int], non_rw: int
) -> list[Step] | None:
    """Shortest cycle starting with rw ``u -> v`` with another rw and no two rw in a row.

    BFS over states (node, last step was rw, a second rw was taken); non-rw
    steps use kinds in ``non_rw``. The step back into ``u`` must not be rw
    (the cycle continues with the rw edge ``u -> v``).
    """
    start = (v, True, False)
    goal = (u, False, True)
    parent: dict[tuple[int, bool, bool], tuple[tuple[int, bool, bool], int]] = {}
    seen = {start}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        node, last_rw, second = state
        on_path = {node}  # a cycle visits each node once: no revisits along this path
        cur = state
        while cur != start:
            cur = parent[cur][0]
            on_path.add(cur[0])
        for nxt, m in succ[node].items():
            if nxt not in nodes or nxt in on_path:
                continue
            moves: list[tuple[tuple[int, bool, bool], int]] = []
            if m & non_rw:
                moves.append(((nxt, False, second), _pick(m & non_rw, _NON_RW_ORDER)))
            if m & RW and not last_rw and nxt != u:
                moves.append(((nxt, True, True), RW))
            for new, kind in moves:
                if new in seen or (nxt == u and new != goal):
                    continue
                seen.add(new)
                parent[new] = (state, kind)
                if new == goal:
                    steps: list[Step] = []
                    cur = new
                    while cur != start:
                        prev, k = parent[cur]
                        steps.append((prev[0], cur[0], k))
                        cur = prev
                    steps.reverse()
                    return [(u, v, RW), *steps]
                queue.append(new)
    return None


def classify(kinds: list[int]) -> str:
    """The cycle shape of a cycle whose steps have these kinds (see anomalies)."""
    n_rw = kinds.count(RW)
    if n_rw == 0:
        name = "G1c" if WR in kinds else "G0"
    elif n_rw == 1:
        name = "G-single"
    else:
        n = len(kinds)
        adjacent = any(kinds[i] == RW and kinds[(i + 1) % n] == RW for i in range(n))
        name = "G2-item" if adjacent else "G-nonadjacent"
    if RT in kinds:
        name += "-realtime"
    return name
