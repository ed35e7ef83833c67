"""The anomaly matrix and the abort-rate curves.

The matrix runs every catalog scenario (:mod:`kvstore.isolation.scenarios`)
against each engine at each of its levels, checks each history, and records
per cell whether the scenario's anomaly was prevented; PostgreSQL's results
(from Hermitage and the PostgreSQL isolation specs) sit beside them. The
abort-rate curves run the generated workload at rising concurrency and
report the share of transactions each engine and level aborted: the price
of the anomalies it prevents.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from kvstore.isolation import anomalies as an
from kvstore.isolation.adapters import ENGINES, engine_spec
from kvstore.isolation.checker import check
from kvstore.isolation.scenarios import ANOMALY, CATALOG, PREVENTED, Scenario
from kvstore.isolation.workload import Workload, run_seeded

log = logging.getLogger(__name__)

LEVEL_LABEL = {"snapshot": "SI", "serializable": "SER"}
POSTGRES_COLUMNS = (("PostgreSQL RR", "snapshot"), ("PostgreSQL SER", "serializable"))


@dataclass(frozen=True)
class Column:
    engine: str
    level: str

    @property
    def label(self) -> str:
        return f"{self.engine} {LEVEL_LABEL.get(self.level, self.level)}"


@dataclass(frozen=True)
class Cell:
    outcome: str  # prevented | anomaly
    anomalies: tuple[str, ...]  # the names that made it an anomaly
    aborted: int  # transactions the engine aborted (rollbacks excluded)

    def text(self) -> str:
        if self.outcome == PREVENTED:
            return PREVENTED
        return f"{ANOMALY} ({', '.join(self.anomalies)})"


@dataclass
class Matrix:
    scenarios: list[Scenario]
    columns: list[Column]
    cells: dict[tuple[str, Column], Cell] = field(default_factory=dict)

    def cell(self, scenario: str, column: Column) -> Cell:
        return self.cells[(scenario, column)]

    def mismatches(self, engine: str) -> list[str]:
        """Where ``engine`` differs from PostgreSQL (RR ~ snapshot, SER ~ serializable)."""
        out = []
        for col in self.columns:
            if col.engine != engine:
                continue
            for s in self.scenarios:
                want = s.postgres.get(col.level)
                got = self.cell(s.name, col).outcome
                if want is not None and got != want:
                    out.append(f"{s.name} at {col.level}: {got}, PostgreSQL: {want}")
        return out

    def _rows(self) -> tuple[list[str], list[list[str]]]:
        head = ["scenario", "source", *(p for p, _ in POSTGRES_COLUMNS)]
        head += [c.label for c in self.columns]
        rows = []
        for s in self.scenarios:
            row = [s.name, s.source, *(s.postgres.get(lv, "") for _, lv in POSTGRES_COLUMNS)]
            row += [self.cell(s.name, c).text() for c in self.columns]
            rows.append(row)
        return head, rows

    def to_text(self) -> str:
        head, rows = self._rows()
        return render_text(head, rows)

    def to_markdown(self) -> str:
        head, rows = self._rows()
        return render_markdown(head, rows)


def scenario_cell(scenario: Scenario, engine_name: str, level: str) -> Cell:
    """Run one scenario on a fresh engine and judge its history."""
    engine = engine_spec(engine_name).factory()
    try:
        run = scenario.run(engine, level)
    finally:
        engine.close()
    result = check(run.events)
    bad = sorted({a.name for a in result.forbidden(scenario.anomaly_level)})
    aborted = sum(1 for e in run.events if e.type == "fail" and e.error != "rolled back")
    return Cell(ANOMALY if bad else PREVENTED, tuple(bad), aborted)


def default_columns(engines: Iterable[str] | None = None) -> list[Column]:
    names = (
        list(engines)
        if engines is not None
        else [n for n, s in ENGINES.items() if s.available() and n != "memory"]
    )
    cols: list[Column] = []
    for n in names:
        spec = engine_spec(n)
        cols.extend(Column(n, lv) for lv in spec.levels)
    return cols


def run_matrix(columns: Sequence[Column], scenarios: Sequence[Scenario] = CATALOG) -> Matrix:
    m = Matrix(list(scenarios), list(columns))
    for col in columns:
        for s in scenarios:
            m.cells[(s.name, col)] = scenario_cell(s, col.engine, col.level)
        log.info("matrix column %s done", col.label)
    return m


# ----------------------------------------------------------------------
# abort rate versus contention
# ----------------------------------------------------------------------
@dataclass(frozen=True)
class AbortPoint:
    column: Column
    concurrency: int
    abort_rate: float
    txns: int
    forbidden: int  # histories (of the seeds) with an anomaly the level forbids


def abort_curves(
    columns: Sequence[Column],
    concurrencies: Sequence[int] = (1, 2, 4, 8, 16),
    workload: Workload | None = None,
    seeds: int = 3,
) -> list[AbortPoint]:
    base = workload or Workload(txns=300)
    points = []
    for col in columns:
        spec = engine_spec(col.engine)
        for c in concurrencies:
            aborted = done = bad = 0
            for seed in range(seeds):
                w = replace(base, concurrency=c, seed=seed)
                engine = spec.factory()
                try:
                    run = run_seeded(engine, col.level, w)
                finally:
                    engine.close()
                aborted += run.aborted
                done += run.aborted + run.committed
                if not check(run.events).valid(col.level):
                    bad += 1
            points.append(AbortPoint(col, c, aborted / done if done else 0.0, done, bad))
        log.info("abort curve %s done", col.label)
    return points


def _abort_rows(points: Sequence[AbortPoint]) -> tuple[list[str], list[list[str]]]:
    cols: list[Column] = []
    for p in points:
        if p.column not in cols:
            cols.append(p.column)
    concs = sorted({p.concurrency for p in points})
    by = {(p.column, p.concurrency): p for p in points}
    head = ["concurrency", *(c.label for c in cols)]
    rows = []
    for c in concs:
        row = [str(c)]
        for col in cols:
            point = by.get((col, c))
            row.append("" if point is None else f"{100 * point.abort_rate:.1f}%")
        rows.append(row)
    return head, rows


def abort_table_text(points: Sequence[AbortPoint]) -> str:
    return render_text(*_abort_rows(points))


def abort_table_markdown(points: Sequence[AbortPoint]) -> str:
    return render_markdown(*_abort_rows(points))


# ----------------------------------------------------------------------
# tables
# ----------------------------------------------------------------------
def render_text(head: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    line = "  ".join("-" * w for w in widths)

    def fmt(r: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()

    return "\n".join([fmt(head), line, *(fmt(r) for r in rows)]) + "\n"


def render_markdown(head: list[str], rows: list[list[str]]) -> str:
    def fmt(r: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in r) + " |"

    return "\n".join([fmt(head), "|" + "|".join("---" for _ in head) + "|", *map(fmt, rows)]) + "\n"


def levels_table() -> tuple[list[str], list[list[str]]]:
    """Which anomaly each level forbids (rows: anomalies, columns: levels)."""
    head = ["anomaly", *an.LEVELS]
    rows = []
    for name, info in an.ANOMALIES.items():
        rows.append([name, *("forbidden" if name in an.FORBIDDEN[lv] else "" for lv in an.LEVELS)])
        del info
    return head, rows
