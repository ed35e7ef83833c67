"""The isolation lab: record transaction histories, find the anomalies in them.

An Elle-style checker in Python, with the drivers and engines to feed it::

    workload.py   seeded single-thread scheduler (reproducible, shrinkable) and
                  a threaded mode; knobs for keys, length, scans, concurrency
    adapters.py   one small engine interface: kvstore, an in-memory twin,
                  sqlite3, SlateDB, and three deliberately broken engines
    history.py    invoke / ok / fail / info events, JSON Lines on disk
    checker/      list-append and read-write register models -> Adya's
                  dependency graph -> cycles (graph.py) -> named anomalies
    anomalies.py  what each anomaly is, and which level forbids it
    scenarios.py  Hermitage and the PostgreSQL isolation specs, as data
    matrix.py     scenario x engine x level, and abort rate versus contention
    plot.py       PNG figures (matplotlib)

Command line: ``python -m kvstore.isolation {run,check,matrix,detect,bench,levels}``.
See ``docs/isolation.md``.
"""

from __future__ import annotations

from kvstore.isolation.adapters import (
    BROKEN,
    ENGINES,
    Aborted,
    Engine,
    EngineTxn,
    open_engine,
)
from kvstore.isolation.anomalies import ANOMALIES, FORBIDDEN, LEVELS, forbidden, level_name
from kvstore.isolation.checker import Anomaly, CheckResult, check
from kvstore.isolation.history import Event, Recorder, Txn, dump_jsonl, load_jsonl, transactions
from kvstore.isolation.scenarios import CATALOG, SCENARIOS, Scenario
from kvstore.isolation.workload import (
    Plan,
    Run,
    Workload,
    generate,
    replay,
    run_seeded,
    run_threaded,
    shrink,
)

__all__ = [
    "ANOMALIES",
    "BROKEN",
    "CATALOG",
    "ENGINES",
    "FORBIDDEN",
    "LEVELS",
    "SCENARIOS",
    "Aborted",
    "Anomaly",
    "CheckResult",
    "Engine",
    "EngineTxn",
    "Event",
    "Plan",
    "Recorder",
    "Run",
    "Scenario",
    "Txn",
    "Workload",
    "check",
    "dump_jsonl",
    "forbidden",
    "generate",
    "level_name",
    "load_jsonl",
    "open_engine",
    "replay",
    "run_seeded",
    "run_threaded",
    "shrink",
    "transactions",
]
