"""The isolation checker on hand-built histories: one per anomaly, and clean ones.

Each history is written the way a client would record it (invoke, then ok /
fail / info on the same process); the checker must name exactly the anomaly
the history was built to show, explain it with the keys involved, and judge
levels accordingly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvstore.isolation import anomalies as an
from kvstore.isolation.checker import check
from kvstore.isolation.graph import RT, RW, WR, WW, DepGraph, classify, sccs
from kvstore.isolation.history import (
    Event,
    Recorder,
    dump_jsonl,
    load_jsonl,
    model_of,
    transactions,
)


class H:
    """A history builder: ``txn`` records a whole transaction; begin/end interleave."""

    def __init__(self) -> None:
        self.rec = Recorder()
        self._next = 100

    def txn(self, ops: list[list[Any]], status: str = "ok") -> None:
        p = self._next
        self._next += 1
        self.rec.invoke(p, ops)
        self.rec.complete(status, p, ops)

    def begin(self, process: int) -> None:
        self.rec.invoke(process, [])

    def end(self, process: int, ops: list[list[Any]], status: str = "ok") -> None:
        self.rec.complete(status, process, ops)

    def check(self, **kw: Any) -> Any:
        return check(self.rec.events, **kw)


def names(result: Any) -> set[str]:
    return result.names()


# ----------------------------------------------------------------------
# list-append: clean histories
# ----------------------------------------------------------------------
def test_serial_history_is_clean_at_every_level() -> None:
    h = H()
    h.txn([["append", "x", 1], ["append", "y", 1]])
    h.txn([["r", "x", [1]], ["append", "x", 2]])
    h.txn([["r", "x", [1, 2]], ["r", "y", [1]], ["append", "y", 2]])
    h.txn([["scan", [None, None], [["x", [1, 2]], ["y", [1, 2]]]]])
    r = h.check(realtime=True)
    assert r.anomalies == []
    assert all(r.valid(level) for level in an.LEVELS)
    assert r.strongest_level() == "strict-serializable"
    assert r.ok == 4 and r.failed == 0


def test_aborted_and_unknown_transactions_are_not_anomalies_when_unseen() -> None:
    h = H()
    h.txn([["append", "x", 1]])
    h.txn([["r", "x", [1]], ["append", "x", 2]], status="fail")
    h.txn([["append", "x", 3]], status="info")
    h.txn([["r", "x", [1, 3]]])  # the info transaction did commit: fine
    assert h.check().anomalies == []


def test_concurrent_snapshot_reads_are_clean() -> None:
    # T1 reads x before T2's append, although T2 commits first: T1 -rw-> T2 only
    h = H()
    h.txn([["append", "x", 1]])
    h.begin(1)
    h.txn([["r", "x", [1]], ["append", "x", 2]])
    h.end(1, [["r", "x", [1]]])
    h.txn([["r", "x", [1, 2]]])
    r = h.check()
    assert r.anomalies == [] and r.edges["rw"] >= 1


# ----------------------------------------------------------------------
# list-append: each anomaly
# ----------------------------------------------------------------------
def test_g0_write_cycle() -> None:
    h = H()
    h.txn([["append", "x", 1], ["append", "y", 1]])
    h.txn([["append", "x", 2], ["append", "y", 2]])
    h.txn([["r", "x", [1, 2]], ["r", "y", [2, 1]]])
    r = h.check()
    assert names(r) == {"G0"}
    (a,) = r.anomalies
    assert "-ww->" in a.summary and "key 'y'" in a.explain()
    assert not r.valid("read-uncommitted")


def test_g1a_aborted_read() -> None:
    h = H()
    h.txn([["append", "x", 1]], status="fail")
    h.txn([["r", "x", [1]]])
    r = h.check()
    assert names(r) == {"G1a"}
    assert "aborted" in r.anomalies[0].summary
    assert r.valid("read-uncommitted") and not r.valid("read-committed")


def test_g1b_intermediate_read() -> None:
    h = H()
    h.txn([["append", "x", 1], ["append", "x", 2]])
    h.txn([["r", "x", [1]]])
    r = h.check()
    assert "G1b" in names(r)
    assert "intermediate" in next(a for a in r.anomalies if a.name == "G1b").summary


def test_g1c_circular_information_flow() -> None:
    h = H()
    h.begin(1)
    h.begin(2)
    h.end(1, [["append", "x", 1], ["r", "y", [1]]])
    h.end(2, [["append", "y", 1], ["r", "x", [1]]])
    r = h.check()
    assert names(r) == {"G1c"}
    assert r.valid("read-uncommitted") and not r.valid("read-committed")


def test_g_single_read_skew() -> None:
    h = H()
    h.txn([["append", "x", 1], ["append", "y", 1]])
    h.begin(1)
    h.txn([["r", "x", [1]], ["append", "x", 2], ["r", "y", [1]], ["append", "y", 2]])
    h.end(1, [["r", "x", [1]], ["r", "y", [1, 2]]])
    r = h.check()
    assert names(r) == {"G-single"}
    text = r.anomalies[0].explain()
    assert "-rw->" in text and "-wr->" in text and "did not see" in text
    assert r.valid("read-committed") and not r.valid("snapshot")


def test_g_nonadjacent() -> None:
    # T1 -rw-> T2 -wr-> T3 -rw-> T4 -wr-> T1
    h = H()
    h.txn([["append", k, 0] for k in "abcd"])
    h.begin(1)
    h.begin(2)
    h.begin(3)
    h.begin(4)
    h.end(2, [["append", "a", 2], ["append", "b", 2]])
    h.end(4, [["append", "c", 4], ["append", "d", 4]])
    h.end(1, [["r", "a", [0]], ["r", "d", [0, 4]]])
    h.end(3, [["r", "b", [0, 2]], ["r", "c", [0]]])
    h.txn([["scan", [None, None], [[k, [0, 2 if k in "ab" else 4]] for k in "abcd"]]])
    r = h.check()
    assert names(r) == {"G-nonadjacent"}
    assert len(r.anomalies[0].txns) == 4
    assert not r.valid("snapshot")


def test_g2_item_write_skew_allowed_by_snapshot_only() -> None:
    h = H()
    h.txn([["append", "x", 1], ["append", "y", 1]])
    h.begin(1)
    h.begin(2)
    h.end(1, [["r", "x", [1]], ["r", "y", [1]], ["append", "x", 2]])
    h.end(2, [["r", "x", [1]], ["r", "y", [1]], ["append", "y", 2]])
    h.txn([["r", "x", [1, 2]], ["r", "y", [1, 2]]])
    r = h.check()
    assert names(r) == {"G2-item"}
    assert r.valid("snapshot") and not r.valid("serializable")
    assert r.strongest_level() == "snapshot"


def test_g2_phantom_through_empty_scans() -> None:
    # each scans a range that holds nothing, then inserts into the other's range
    h = H()
    h.txn([["append", "m", 1]])
    h.begin(1)
    h.begin(2)
    h.end(1, [["scan", ["a", "b"], []], ["append", "b1", 1]])
    h.end(2, [["scan", ["b", "c"], []], ["append", "a1", 1]])
    h.txn([["scan", [None, None], [["a1", [1]], ["b1", [1]], ["m", [1]]]]])
    r = h.check()
    assert names(r) == {"G2"}
    text = r.anomalies[0].explain()
    assert "found no key 'a1'" in text or "found no key 'b1'" in text
    assert r.valid("snapshot") and not r.valid("serializable")


def test_lost_update() -> None:
    h = H()
    h.txn([["append", "x", 1]])
    h.begin(1)
    h.begin(2)
    h.end(1, [["r", "x", [1]], ["append", "x", 2]])
    h.end(2, [["r", "x", [1]], ["append", "x", 3]])
    h.txn([["r", "x", [1, 2, 3]]])
    r = h.check()
    assert "lost-update" in names(r)
    assert (
        "both read key 'x' = [1]" in next(a for a in r.anomalies if a.name == "lost-update").summary
    )
    assert not r.valid("snapshot") and r.valid("read-committed")


def test_internal_inconsistency() -> None:
    h = H()
    h.txn([["append", "x", 1]])
    h.txn([["r", "x", [1]], ["append", "x", 2], ["r", "x", [1]]])  # own append vanished
    h.txn([["append", "y", 1], ["r", "y", None]])  # read after own append must show it
    r = h.check()
    assert [a.name for a in r.anomalies].count("internal") == 2
    assert not r.valid("snapshot") and r.valid("read-committed")


def test_incompatible_order() -> None:
    h = H()
    h.txn([["append", "x", 1]])
    h.txn([["append", "x", 2]])
    h.txn([["append", "x", 3]])
    h.txn([["r", "x", [1, 2]]])
    h.txn([["r", "x", [1, 3]]])
    r = h.check()
    assert names(r) == {"incompatible-order"}
    assert "neither is a prefix" in r.anomalies[0].summary
    assert not r.valid("read-uncommitted")


def test_duplicate_and_garbage_reads() -> None:
    h = H()
    h.txn([["append", "x", 1]])
    h.txn([["r", "x", [1, 1]]])
    h.txn([["append", "y", 1]])
    h.txn([["r", "y", [1, 9]]])
    assert {"duplicate-elements", "garbage-read"} <= names(h.check())


def test_unread_final_appends_of_one_transaction_are_ordered() -> None:
    # T2's append of 2 is never read, but it is the only unread one: it follows [1]
    h = H()
    h.txn([["append", "x", 1], ["append", "y", 1]])
    h.begin(1)
    h.begin(2)
    h.end(1, [["r", "x", [1]], ["r", "y", [1]], ["append", "y", 2]])
    h.end(2, [["r", "x", [1]], ["r", "y", [1]], ["append", "x", 2]])
    assert names(h.check()) == {"G2-item"}


# ----------------------------------------------------------------------
# real-time edges
# ----------------------------------------------------------------------
def test_stale_read_is_only_a_realtime_anomaly() -> None:
    h = H()
    h.txn([["append", "x", 1]])  # completes ...
    h.txn([["r", "x", None]])  # ... before this begins, which still reads nothing
    plain = h.check()
    assert plain.anomalies == [] and plain.valid("serializable")
    rt = h.check(realtime=True)
    assert names(rt) == {"G-single-realtime"}
    assert "-rt->" in rt.anomalies[0].summary
    assert rt.valid("serializable") and not rt.valid("strict-serializable")


def test_realtime_edges_stay_sparse() -> None:
    h = H()
    for i in range(200):
        h.txn([["append", "x", i]])
    h.txn([["r", "x", list(range(200))]])
    r = h.check(realtime=True)
    assert r.anomalies == []
    assert r.edges["rt"] == 200  # a chain, not 200 * 199 / 2 edges


# ----------------------------------------------------------------------
# rw-register
# ----------------------------------------------------------------------
def test_register_clean_and_write_skew() -> None:
    h = H()
    h.txn([["w", "x", 1], ["w", "y", 1]])
    h.txn([["r", "x", 1], ["w", "x", 2]])
    assert check(h.rec.events, model="rw-register").anomalies == []
    h.begin(1)
    h.begin(2)
    h.end(1, [["r", "x", 2], ["r", "y", 1], ["w", "x", 3]])
    h.end(2, [["r", "x", 2], ["r", "y", 1], ["w", "y", 3]])
    r = h.check()
    assert r.model == "rw-register"
    assert names(r) == {"G2-item"}
    assert "did not see" in r.anomalies[0].explain()


@pytest.mark.parametrize(
    ("txns", "expected"),
    [
        ([([["w", "x", 1]], "fail"), ([["r", "x", 1]], "ok")], "G1a"),
        ([([["w", "x", 1], ["w", "x", 2]], "ok"), ([["r", "x", 1]], "ok")], "G1b"),
        ([([["r", "x", 7]], "ok"), ([["w", "y", 1]], "ok")], "garbage-read"),
        ([([["w", "x", 1], ["r", "x", 2]], "ok"), ([["w", "x", 2]], "ok")], "internal"),
        (
            [
                ([["w", "x", 1]], "ok"),
                ([["r", "x", 1], ["w", "x", 2]], "ok"),
                ([["r", "x", 1], ["w", "x", 3]], "ok"),
            ],
            "lost-update",
        ),
        (
            [
                ([["w", "x", 1]], "ok"),
                ([["r", "x", 2], ["w", "x", 3]], "ok"),
                ([["r", "x", 3], ["w", "x", 2]], "ok"),
            ],
            "incompatible-order",
        ),
    ],
)
def test_register_direct_anomalies(txns: list[tuple[list[Any], str]], expected: str) -> None:
    h = H()
    for ops, status in txns:
        h.txn(ops, status)
    assert expected in names(check(h.rec.events, model="rw-register"))


def test_register_phantom() -> None:
    h = H()
    h.txn([["w", "m", 1]])
    h.begin(1)
    h.begin(2)
    h.end(1, [["scan", ["a", "b"], []], ["w", "b1", 1]])
    h.end(2, [["scan", ["b", "c"], []], ["w", "a1", 1]])
    assert names(check(h.rec.events, model="rw-register")) == {"G2"}


# ----------------------------------------------------------------------
# the graph, the level table, the history format
# ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kinds", "name"),
    [
        ([WW, WW], "G0"),
        ([WW, WR], "G1c"),
        ([RW, WR], "G-single"),
        ([RW, WW, WR], "G-single"),
        ([RW, WR, RW, WR], "G-nonadjacent"),
        ([RW, RW], "G2-item"),
        ([RW, WR, RW], "G2-item"),  # the last and first rw are adjacent around the ring
        ([RW, RT], "G-single-realtime"),
        ([WW, RT], "G0-realtime"),
    ],
)
def test_classify(kinds: list[int], name: str) -> None:
    assert classify(kinds) == name


def test_sccs_on_a_long_chain_and_a_ring() -> None:
    n = 50_000
    g = DepGraph(n)
    for i in range(n - 1):
        g.add(i, i + 1, WW)
    assert sccs(g.succ) == []  # no recursion limit, no component
    g.add(n - 1, 0, WR)
    (comp,) = sccs(g.succ)
    assert len(comp) == n
    assert sccs(g.succ, mask=WW) == []


def test_sccs_separates_components() -> None:
    g = DepGraph(6)
    for a, b in [(0, 1), (1, 0), (2, 3), (3, 4), (4, 2), (4, 5)]:
        g.add(a, b, RW)
    assert sorted(sorted(c) for c in sccs(g.succ)) == [[0, 1], [2, 3, 4]]
    assert g.edge_counts()["rw"] == 6


def test_levels_are_nested_and_aliases_resolve() -> None:
    levels = list(an.LEVELS)
    for weaker, stronger in zip(levels, levels[1:]):
        assert an.FORBIDDEN[weaker] < an.FORBIDDEN[stronger]
    assert an.level_name("REPEATABLE_READ") == "snapshot"
    assert an.level_name("Serializable") == "serializable"
    assert "G2-item" not in an.forbidden("snapshot") and "G2-item" in an.forbidden("ssi")
    assert an.weakest_level_forbidding("lost-update") == "snapshot"
    assert set(an.ANOMALIES) >= set().union(*an.FORBIDDEN.values())
    with pytest.raises(ValueError, match="unknown isolation level"):
        an.level_name("chaos")


def test_jsonl_round_trip(tmp_path: Path) -> None:
    h = H()
    h.txn([["append", 1, 1], ["scan", [0, None], [[1, [1]]]]])
    h.txn([["r", 1, [1]]], status="info")
    path = tmp_path / "h.jsonl"
    dump_jsonl(h.rec.events, path)
    back = load_jsonl(path)
    assert [e.to_json() for e in back] == [e.to_json() for e in h.rec.events]
    first = json.loads(path.read_text().splitlines()[0])
    assert first == {
        "index": 0,
        "type": "invoke",
        "process": 100,
        "time": 0,
        "f": "txn",
        "value": [["append", 1, 1], ["scan", [0, None], [[1, [1]]]]],
    }


def test_transactions_pairing() -> None:
    evs = [
        Event(0, "invoke", 1, 0, [["r", "x", None]]),
        Event(1, "invoke", 2, 1, [["append", "x", 1]]),
        Event(2, "ok", 1, 2, [["r", "x", None]]),
    ]
    t = transactions(evs)
    assert [(x.process, x.status) for x in t] == [(1, "ok"), (2, "info")]
    assert t[1].complete_index is None and model_of(t) == "list-append"
    with pytest.raises(ValueError, match="without invoke"):
        transactions([Event(0, "ok", 1, 0, [])])
    with pytest.raises(ValueError, match="had not completed"):
        transactions([Event(0, "invoke", 1, 0, []), Event(1, "invoke", 1, 1, [])])


def test_bad_jsonl_lines_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"type": "invoke", "process": 1, "value": []}\nnot json\n')
    with pytest.raises(ValueError, match="line 2"):
        load_jsonl(path)
    path.write_text('{"type": "begin", "process": 1}\n')
    with pytest.raises(ValueError, match="unknown event type"):
        load_jsonl(path)
