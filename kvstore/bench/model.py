"""The benchmark's dataclasses: what to run and what came out.

:class:`Config` is one run's choice of sizes, stores and workloads with every
workload's bounds (:meth:`Config.quick` for a smoke run); :class:`Row` is one
measurement, :class:`Target` one of kvstore's goals judged on a row, and
:class:`Report` collects a run's rows, skipped stores, n/a rows, errors and
targets, answers the lookups the rendering needs (values, kvstore's ratio to a
store) and converts itself to the ``--json`` document. :meth:`Report.add` is
how every workload records a row (and logs it as progress).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from kvstore.bench.stores import STORES
from kvstore.bench.workloads import ROW_ORDER, UNITS, WORKLOADS, human

log = logging.getLogger("kvstore.bench")


@dataclass(frozen=True)
class Config:
    """What to run and each workload's bounds (defaults: the full run)."""

    sizes: tuple[int, ...] = (100_000, 1_000_000)
    stores: tuple[str, ...] = tuple(STORES)
    workloads: tuple[str, ...] = WORKLOADS
    #: directory to create the run's temporary data directory in (None: system temp)
    root: str | None = None
    batch: int = 1000
    threads: int = 8
    load_seconds: float = 150.0
    get_ops: int = 100_000
    get_seconds: float = 10.0
    scan_seconds: float = 30.0
    put_ops: int = 5_000
    put_seconds: float = 5.0
    fsync_seconds: float = 3.0
    #: txn_rmw / txn_open100: keys, transactions per run at most, seconds per run
    txn_keys: int = 10_000
    txn_ops: int = 1_000_000
    txn_seconds: float = 5.0
    #: contended txn_rmw: threads and hot keys
    hot_threads: int = 4
    hot_keys: int = 100
    #: overwrite: random puts over how many keys, and its time bound
    overwrite_puts: int = 1_000_000
    overwrite_keys: int = 100_000
    overwrite_seconds: float = 120.0
    seed: int = 1

    @classmethod
    def quick(cls, **overrides: Any) -> Config:
        """Small sizes and short bounds: a smoke run of every workload in seconds."""
        small = cls(
            sizes=(2_000, 10_000),
            load_seconds=20.0,
            get_ops=5_000,
            get_seconds=2.0,
            scan_seconds=5.0,
            put_ops=300,
            put_seconds=1.0,
            fsync_seconds=0.5,
            txn_keys=1_000,
            txn_seconds=1.0,
            overwrite_puts=20_000,
            overwrite_keys=2_000,
            overwrite_seconds=20.0,
        )
        return replace(small, **overrides)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.stores) - set(STORES))
        if unknown:
            raise ValueError(f"stores: unknown {', '.join(unknown)} (known: {', '.join(STORES)})")
        unknown = sorted(set(self.workloads) - set(WORKLOADS))
        if unknown:
            raise ValueError(
                f"workloads: unknown {', '.join(unknown)} (known: {', '.join(WORKLOADS)})"
            )
        if not self.sizes or any(n <= 0 for n in self.sizes):
            raise ValueError(f"sizes must be positive key counts, got {self.sizes}")
        if self.batch <= 0 or self.threads <= 0:
            raise ValueError("batch and threads must be positive")
        if self.txn_keys < 2 or self.hot_keys < 2 or self.hot_threads <= 0:
            raise ValueError("txn_keys and hot_keys must be >= 2, hot_threads positive")
        if self.overwrite_keys <= 0 or self.overwrite_puts <= 0:
            raise ValueError("overwrite_keys and overwrite_puts must be positive")


@dataclass
class Row:
    """One measurement: ``value`` is ops/s, or MiB for ``memory``."""

    store: str
    workload: str
    size: int | None
    value: float
    ops: int
    seconds: float
    note: str = ""

    @property
    def unit(self) -> str:
        return UNITS.get(self.workload, "ops/s")


@dataclass(frozen=True)
class Target:
    """A goal for kvstore on one table row; ``actual`` is a ratio (or MiB for memory)."""

    workload: str
    size: int | None
    text: str
    actual: float | None
    bound: float
    at_most: bool = False
    #: what ``actual`` is: "x" (a ratio), "MiB" or "ms"
    unit: str = "x"

    @property
    def passed(self) -> bool | None:
        if self.actual is None:
            return None
        return self.actual <= self.bound if self.at_most else self.actual >= self.bound


@dataclass
class Report:
    config: Config
    machine: dict[str, Any]
    raw_fsync_ops: float | None = None
    raw_overwrite_ops: float | None = None
    rows: list[Row] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    #: (store, row workload) -> why that store does not run that row ("n/a")
    not_applicable: dict[tuple[str, str], str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)

    def add(self, row: Row) -> None:
        """Record one measurement (and log it as progress)."""
        log.info(
            "%-8s %-27s %-6s %12.1f %s  (%d ops, %.2fs)%s",
            row.store,
            row.workload,
            human(row.size) if row.size else "",
            row.value,
            row.unit,
            row.ops,
            row.seconds,
            f"  [{row.note}]" if row.note else "",
        )
        self.rows.append(row)

    @property
    def stores(self) -> list[str]:
        """Stores with at least one row, in table order."""
        seen = {r.store for r in self.rows} | {s for s, _ in self.not_applicable}
        return [s for s in STORES if s in seen]

    def row_keys(self) -> list[tuple[str, int | None]]:
        """The distinct (workload, size) rows, in table order."""
        keys = {(r.workload, r.size) for r in self.rows}
        keys |= {(w, None) for _, w in self.not_applicable}
        return sorted(keys, key=lambda k: (ROW_ORDER.index(k[0]), k[1] or 0))

    def value(self, store: str, workload: str, size: int | None) -> float | None:
        for r in self.rows:
            if (r.store, r.workload, r.size) == (store, workload, size):
                return r.value
        return None

    def row(self, store: str, workload: str, size: int | None) -> Row | None:
        for r in self.rows:
            if (r.store, r.workload, r.size) == (store, workload, size):
                return r
        return None

    def ratio(self, other: str, workload: str, size: int | None) -> float | None:
        """kvstore's value divided by ``other``'s on one row (None for raw_fsync, %, x rows)."""
        if workload in ("raw_fsync", "raw_overwrite") or UNITS.get(workload) in ("%", "x"):
            return None
        mine = self.value("kvstore", workload, size)
        theirs = self.value(other, workload, size)
        if mine is None or not theirs:
            return None
        return mine / theirs

    def to_json(self) -> dict[str, Any]:
        return {
            "machine": self.machine,
            "config": asdict(self.config),
            "raw_append_fdatasync_ops_per_s": self.raw_fsync_ops,
            "raw_overwrite_fdatasync_ops_per_s": self.raw_overwrite_ops,
            "rows": [asdict(r) | {"unit": r.unit} for r in self.rows],
            "ratios": [
                {
                    "workload": w,
                    "size": n,
                    **{f"kvstore/{s}": self.ratio(s, w, n) for s in self.stores if s != "kvstore"},
                }
                for w, n in self.row_keys()
            ],
            "targets": [asdict(t) | {"passed": t.passed} for t in self.targets],
            "skipped": self.skipped,
            "not_applicable": [
                {"store": s, "workload": w, "why": why}
                for (s, w), why in self.not_applicable.items()
            ],
            "errors": self.errors,
        }
