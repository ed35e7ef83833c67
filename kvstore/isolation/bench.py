"""Measurements: how fast the checker is, and how often it catches broken engines.

:func:`checker_benchmark` records a large history with the seeded scheduler
(on the in-memory twin by default, so the recording is quick), writes it as
JSON Lines, then times loading and checking it, the way ``check`` would on
a history recorded elsewhere. :func:`detection` runs the default workload
over many seeds and counts the histories with an anomaly the claimed level
forbids.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, replace

from kvstore.isolation.adapters import engine_spec
from kvstore.isolation.checker import check
from kvstore.isolation.history import dump_jsonl, load_jsonl
from kvstore.isolation.workload import Workload, run_seeded

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BenchResult:
    engine: str
    level: str
    txns: int
    events: int
    file_bytes: int
    record_seconds: float
    load_seconds: float
    check_seconds: float
    anomalies: dict[str, int]
    edges: dict[str, int]

    @property
    def txns_per_second(self) -> float:
        total = self.load_seconds + self.check_seconds
        return self.txns / total if total else 0.0


def checker_benchmark(
    txns: int = 100_000,
    *,
    engine: str = "memory",
    level: str = "serializable",
    concurrency: int = 8,
    seed: int = 0,
    realtime: bool = False,
    keep: str | None = None,
) -> BenchResult:
    """Record ``txns`` transactions, write them, then time load + check."""
    w = Workload(txns=txns, concurrency=concurrency, keys=16, seed=seed)
    eng = engine_spec(engine).factory()
    t0 = time.perf_counter()
    try:
        run = run_seeded(eng, level, w)
    finally:
        eng.close()
    recorded = time.perf_counter()
    log.info("recorded %d events in %.1fs", len(run.events), recorded - t0)
    with tempfile.TemporaryDirectory() as tmp:
        path = keep or os.path.join(tmp, "history.jsonl")
        dump_jsonl(run.events, path)
        size = os.path.getsize(path)
        t1 = time.perf_counter()
        events = load_jsonl(path)
        t2 = time.perf_counter()
        result = check(events, realtime=realtime)
        t3 = time.perf_counter()
    return BenchResult(
        engine=engine,
        level=level,
        txns=result.txns,
        events=len(events),
        file_bytes=size,
        record_seconds=recorded - t0,
        load_seconds=t2 - t1,
        check_seconds=t3 - t2,
        anomalies=result.counts(),
        edges=result.edges,
    )


@dataclass(frozen=True)
class Detection:
    engine: str
    level: str
    seeds: int
    caught: int
    anomalies: dict[str, int]  # forbidden anomaly name -> histories showing it
    seconds: float

    @property
    def rate(self) -> float:
        return self.caught / self.seeds if self.seeds else 0.0


def detection(
    engine: str,
    level: str,
    *,
    seeds: int = 100,
    first_seed: int = 0,
    workload: Workload | None = None,
) -> Detection:
    """In how many of ``seeds`` default-budget runs the checker flags ``engine``."""
    spec = engine_spec(engine)
    base = workload or Workload()
    started = time.perf_counter()
    caught = 0
    names: Counter[str] = Counter()
    for seed in range(first_seed, first_seed + seeds):
        eng = spec.factory()
        try:
            run = run_seeded(eng, level, replace(base, seed=seed))
        finally:
            eng.close()
        bad = check(run.events).forbidden(level)
        if bad:
            caught += 1
            names.update({a.name for a in bad})
    return Detection(
        engine, level, seeds, caught, dict(sorted(names.items())), time.perf_counter() - started
    )
