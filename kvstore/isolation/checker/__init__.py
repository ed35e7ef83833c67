"""Elle-style isolation checking of recorded histories.

:func:`check` takes events (or transactions), builds Adya's dependency graph
with the list-append or the read-write register model, finds the anomalies
that need no cycle, then the cycles (see :mod:`kvstore.isolation.graph` and
:mod:`kvstore.isolation.anomalies`), and returns a :class:`CheckResult` that
can be judged against any level::

    result = check(load_jsonl("history.jsonl"))
    result.valid("serializable")          # False if write skew was seen
    for a in result.forbidden("snapshot"):
        print(a.explain())
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from kvstore.isolation.checker.core import (
    DEFAULT_BUDGET,
    Analysis,
    Anomaly,
    CheckResult,
    Reason,
    add_realtime_edges,
    find_cycles,
)
from kvstore.isolation.checker.listappend import ListAppendAnalysis
from kvstore.isolation.checker.register import RegisterAnalysis
from kvstore.isolation.history import FAIL, INFO, OK, Event, Txn, model_of, transactions

__all__ = [
    "MODELS",
    "Analysis",
    "Anomaly",
    "CheckResult",
    "Reason",
    "analyze",
    "check",
]

log = logging.getLogger(__name__)

MODELS = ("list-append", "rw-register")


def analyze(txns: list[Txn], model: str) -> Analysis:
    """The model's analysis (graph and direct anomalies), before cycle search."""
    if model == "list-append":
        return ListAppendAnalysis(txns)
    if model == "rw-register":
        return RegisterAnalysis(txns)
    raise ValueError(f"unknown model {model!r}; known: {', '.join(MODELS)}")


def check(
    history: Sequence[Event] | Sequence[Txn],
    *,
    model: str | None = None,
    realtime: bool = False,
    budget: int = DEFAULT_BUDGET,
) -> CheckResult:
    """Check a history; ``model`` is detected from the operations when None.

    ``realtime`` adds real-time edges (a transaction that committed before
    another began precedes it), needed to judge strict serializability.
    ``budget`` bounds the start edges tried per component and cycle shape.
    """
    started = time.perf_counter()
    if history and isinstance(history[0], Event):
        txns = transactions(history)  # type: ignore[arg-type]
    else:
        txns = list(history)  # type: ignore[arg-type]
    model = model or model_of(txns)
    analysis = analyze(txns, model)
    built = time.perf_counter()
    if realtime:
        add_realtime_edges(analysis)
    find_cycles(analysis, realtime=realtime, budget=budget)
    done = time.perf_counter()
    log.info(
        "checked %d transactions (%s): graph %.2fs, cycles %.2fs, %d anomalies",
        len(txns),
        model,
        built - started,
        done - built,
        len(analysis.anomalies),
    )
    return CheckResult(
        model=model,
        txns=len(txns),
        ok=sum(1 for t in txns if t.status == OK),
        failed=sum(1 for t in txns if t.status == FAIL),
        info=sum(1 for t in txns if t.status == INFO),
        edges=analysis.graph.edge_counts(),
        anomalies=analysis.anomalies,
        seconds=done - started,
        realtime=realtime,
    )
