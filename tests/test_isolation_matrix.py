"""The anomaly matrix: kvstore must match what Hermitage records for PostgreSQL.

PostgreSQL REPEATABLE READ is snapshot isolation, so kvstore SNAPSHOT must
prevent exactly what it prevents and show exactly the write skews and
phantoms it shows; kvstore SERIALIZABLE, like PostgreSQL SERIALIZABLE, must
prevent every scenario.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvstore.isolation.adapters import ENGINES
from kvstore.isolation.matrix import (
    Column,
    abort_curves,
    abort_table_markdown,
    render_markdown,
    render_text,
    run_matrix,
    scenario_cell,
)
from kvstore.isolation.scenarios import CATALOG, SCENARIOS, parse
from kvstore.isolation.workload import Workload

P, A = "prevented", "anomaly"

#: scenario -> (kvstore SNAPSHOT, kvstore SERIALIZABLE), with the anomaly SNAPSHOT shows.
#: Hermitage (ept/hermitage) for PostgreSQL: REPEATABLE READ prevents G0, G1a, G1b,
#: G1c, OTV, PMP, P4 and G-single and shows G2-item and G2; SERIALIZABLE prevents
#: all. The PostgreSQL isolation specs are write skews SERIALIZABLE must abort.
EXPECTED = {
    "G0": (P, P),
    "G1a": (P, P),
    "G1b": (P, P),
    "G1c": (P, P),
    "OTV": (P, P),
    "PMP": (P, P),
    "PMP-write": (P, P),
    "P4": (P, P),
    "G-single": (P, P),
    "G-single-predicate": (P, P),
    "G-single-write": (P, P),
    "G2-item": ("G2-item", P),
    "G2": ("G2", P),
    "G2-two-edges": ("G2-item", P),
    "simple-write-skew": ("G2-item", P),
    "receipt-report": ("G2", P),
    "two-ids": ("G2-item", P),
    "classroom-scheduling": ("G2", P),
    "read-only-anomaly": ("G2-item", P),
    "total-cash": ("G2-item", P),
    "ri-trigger": ("G2", P),
    "empty-range-skew": ("G2", P),
}


@pytest.fixture(scope="module")
def kv_matrix():  # type: ignore[no-untyped-def]
    return run_matrix([Column("kvstore", "snapshot"), Column("kvstore", "serializable")])


def test_catalog_is_the_expected_one() -> None:
    assert [s.name for s in CATALOG] == list(EXPECTED)
    assert {s.source for s in CATALOG} == {
        "Hermitage",
        "PostgreSQL isolation tests",
        "SlateDB #1711",
    }


def test_postgres_column_is_hermitage() -> None:
    for s in CATALOG:
        rr, _ = EXPECTED[s.name]
        assert s.postgres["snapshot"] == (P if rr == P else A), s.name
        assert s.postgres["serializable"] == P


def test_kvstore_matrix_matches_postgres(kv_matrix) -> None:  # type: ignore[no-untyped-def]
    assert kv_matrix.mismatches("kvstore") == []
    for s in CATALOG:
        si = kv_matrix.cell(s.name, Column("kvstore", "snapshot"))
        ser = kv_matrix.cell(s.name, Column("kvstore", "serializable"))
        want_si, want_ser = EXPECTED[s.name]
        assert (si.outcome if want_si == P else ",".join(si.anomalies)) == want_si, s.name
        assert ser.outcome == want_ser, s.name
        if want_si != P:
            assert ser.aborted >= 1  # SERIALIZABLE prevented it by aborting someone


def test_matrix_renders(kv_matrix) -> None:  # type: ignore[no-untyped-def]
    text = kv_matrix.to_text()
    lines = text.splitlines()
    assert lines[0].split()[:2] == ["scenario", "source"]
    assert len(lines) == 2 + len(CATALOG)
    assert "anomaly (G2-item)" in text
    md = kv_matrix.to_markdown()
    assert md.startswith("| scenario | source | PostgreSQL RR | PostgreSQL SER | kvstore SI |")
    assert md.count("\n") == 2 + len(CATALOG)


def test_broken_engines_in_the_matrix() -> None:
    ser = "serializable"
    phantoms = {"G2", "classroom-scheduling", "ri-trigger", "empty-range-skew"}
    for s in CATALOG:
        cell = scenario_cell(s, "broken-scan-keys", ser)
        assert cell.outcome == (A if s.name in phantoms else P), s.name
        fake = scenario_cell(s, "broken-fake-ser", ser)
        assert fake.outcome == (P if EXPECTED[s.name][0] == P else A), s.name


@pytest.mark.parametrize("name", ["sqlite3", "slatedb", "memory"])
def test_other_serializable_engines_prevent_everything(name: str) -> None:
    if not ENGINES[name].available():
        pytest.skip(f"{name} is not installed")
    m = run_matrix([Column(name, "serializable")])
    assert m.mismatches(name) == []


def test_scenario_parser() -> None:
    plans, steps = parse("x", "init a b\nt1 begin\nt1 r a\nt1 append a  # note\nt1 commit\n")
    assert [p.ops for p in plans] == [
        [["append", "a", 1], ["append", "b", 1]],
        [["r", "a", None], ["append", "a", 2]],
    ]
    assert steps == [0, 0, 0, 0, 1, 1, 1, 1]
    assert SCENARIOS["G1a"].plans[1].commit is False  # t1 rolls back
    for bad, msg in [
        ("t1 r a", "not open"),
        ("t1 begin\nt1 begin", "already open"),
        ("t1 begin\nt1 frob a", "cannot parse"),
        ("t1 begin\nt1 r a", "left open"),
        ("init", "needs keys"),
    ]:
        with pytest.raises(ValueError, match=msg):
            parse("bad", bad)


def test_abort_rates_rise_with_contention() -> None:
    cols = [Column("kvstore", "snapshot"), Column("kvstore", "serializable")]
    pts = abort_curves(cols, (1, 4), Workload(txns=200), seeds=1)
    by = {(p.column.level, p.concurrency): p for p in pts}
    assert by[("snapshot", 1)].abort_rate == 0 == by[("serializable", 1)].abort_rate
    assert 0 < by[("snapshot", 4)].abort_rate < by[("serializable", 4)].abort_rate
    assert all(p.forbidden == 0 for p in pts)
    md = abort_table_markdown(pts)
    assert md.splitlines()[0] == "| concurrency | kvstore SI | kvstore SER |"


def test_tables() -> None:
    head, rows = ["a", "bb"], [["1", "x|y"]]
    assert render_text(head, rows) == "a  bb\n-  ---\n1  x|y\n"
    assert render_markdown(head, rows) == "| a | bb |\n|---|---|\n| 1 | x\\|y |\n"


def test_plots(tmp_path: Path, kv_matrix) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("matplotlib")
    from kvstore.isolation.plot import plot_abort_rates, plot_matrix

    pts = abort_curves([Column("kvstore", "snapshot")], (1, 2), Workload(txns=50), seeds=1)
    plot_abort_rates(pts, tmp_path / "abort.png")
    plot_matrix(kv_matrix, tmp_path / "matrix.png")
    for name in ("abort.png", "matrix.png"):
        data = (tmp_path / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5_000
