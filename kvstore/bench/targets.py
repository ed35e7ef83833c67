"""kvstore's targets: the goals each report row is judged against.

:func:`evaluate_targets` turns the rows a report has into :class:`Target`
entries: ratios to sqlite3 and SlateDB, durable puts against the raw
overwrite+fdatasync rate (the limit) and the append+fdatasync rate, group
commit (8 threads against 1), peak RSS against the memtable budget plus
:data:`MEMORY_SLACK`, long-open transactions, the slowest overwrite put,
space amplification and gets after ``compact()``.
"""

from __future__ import annotations

from kvstore.bench.model import Report, Target
from kvstore.bench.workloads import MiB
from kvstore.options import Options

#: kvstore's peak RSS during the largest load must stay under the memtable budget plus this
MEMORY_SLACK = 200 * MiB


def memtable_budget() -> int:
    """Bytes kvstore's memtables may hold with default options (active + frozen)."""
    o = Options()
    return o.memtable_bytes * (1 + o.max_immutable_memtables)


def evaluate_targets(report: Report) -> list[Target]:
    """kvstore's goals, on the rows this report has."""
    out: list[Target] = []
    vs_sqlite = {
        "load": 1.5,
        "get": 1.5,
        "scan": 0.75,
        "txn_rmw": 2.0,
        "txn_rmw_durable": 1.2,
        "put_durable": 1.2,
        "overwrite": 1.0,
        "get_after_overwrite": 1.5,
    }
    vs_slatedb = {
        "load",
        "get",
        "scan",
        "put_durable",
        "put_durable_mt",
        "txn_rmw",
        "txn_rmw_durable",
    }

    def kv(w: str) -> float | None:
        return report.value("kvstore", w, None)

    def div(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    for w, n in report.row_keys():
        if w in vs_sqlite:
            out.append(
                Target(
                    w, n, f">= {vs_sqlite[w]}x sqlite3", report.ratio("sqlite3", w, n), vs_sqlite[w]
                )
            )
        if w == "put_durable":
            limit = report.value("kvstore", "raw_overwrite", None) or report.raw_overwrite_ops
            out.append(Target(w, n, ">= 0.9x raw overwrite+fdatasync", div(kv(w), limit), 0.9))
            raw = report.value("kvstore", "raw_fsync", None) or report.raw_fsync_ops
            out.append(Target(w, n, ">= 1.0x raw append+fdatasync", div(kv(w), raw), 1.0))
        if w == "put_durable_mt":
            out.append(
                Target(
                    w, n, ">= 4x kvstore 1-thread durable put", div(kv(w), kv("put_durable")), 4.0
                )
            )
        if w == "memory":
            limit = (memtable_budget() + MEMORY_SLACK) / MiB
            out.append(
                Target(
                    w,
                    n,
                    f"<= {limit:.0f} MiB (memtable budget + 200 MiB)",
                    report.value("kvstore", w, n),
                    limit,
                    at_most=True,
                    unit="MiB",
                )
            )
        if w == "txn_open100":
            out.append(Target(w, n, ">= 0.5x with none open", div(kv(w), kv("txn_open0")), 0.5))
        if w == "overwrite_max_ms":
            out.append(Target(w, n, "< 1000 ms", kv(w), 1000.0, at_most=True, unit="ms"))
        if w == "space_amp":
            out.append(Target(w, n, "<= 1.5x live data", kv(w), 1.5, at_most=True))
        if w == "get_after_compact":
            out.append(
                Target(
                    w,
                    n,
                    "fresh load / this <= 1.25x",
                    div(kv("get_fresh"), kv(w)),
                    1.25,
                    at_most=True,
                )
            )
        if w in vs_slatedb:
            out.append(Target(w, n, ">= 10x slatedb", report.ratio("slatedb", w, n), 10.0))
    return out
