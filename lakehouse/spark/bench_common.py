"""What the Spark benchmarks share: the orders data, a clock of wall and CPU time, the
timed pairs of each row, the summary of paired timings, the result checks
(``bench``, ``bench_rowops`` and ``bench_sql``)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

#: the filter of the benchmarks' aggregate (paid orders per product)
PAID = "status = 'paid'"

ORDERS_DDL = (
    "order_id long, customer_id long, product_id int, quantity int, "
    "total decimal(12,2), discount double, status string, placed_at timestamp"
)


def orders_frame(spark: Any, rows: int, partitions: int = 4, seed: int = 7) -> Any:
    """``rows`` synthetic orders (deterministic for a seed)."""
    return orders_of(spark.range(0, rows, numPartitions=partitions), seed)


def orders_of(ids: Any, seed: int) -> Any:
    """The orders of :func:`orders_frame` for a DataFrame of ``id`` (long) values."""
    from pyspark.sql import functions as F

    statuses = F.array(*[F.lit(s) for s in ("placed", "paid", "shipped", "delivered", "cancelled")])
    return ids.select(
        F.col("id").alias("order_id"),
        (F.abs(F.hash(F.col("id"), F.lit(seed))) % 200_000).alias("customer_id"),
        (F.abs(F.hash(F.col("id"), F.lit(seed + 1))) % 5_000).cast("int").alias("product_id"),
        (F.abs(F.hash(F.col("id"), F.lit(seed + 2))) % 9 + 1).cast("int").alias("quantity"),
        (F.rand(seed) * 500).cast("decimal(12,2)").alias("total"),
        F.round(F.rand(seed + 3) * 0.3, 2).alias("discount"),
        F.element_at(statuses, (F.abs(F.hash(F.col("id"))) % 5 + 1).cast("int")).alias("status"),
        F.timestamp_seconds(F.lit(1_735_689_600) + F.col("id") % 7_776_000).alias("placed_at"),
    )


class Clock:
    """Wall time, and CPU seconds of the JVM plus this process (psutil, if installed):
    on a shared machine the CPU seconds move much less than the wall time."""

    def __init__(self, spark: Any) -> None:
        self.procs: list[Any] = []
        try:
            import psutil

            pid = spark._jvm.java.lang.ProcessHandle.current().pid()
            self.procs = [psutil.Process(pid), psutil.Process()]
        except Exception:  # no psutil, or not a local JVM
            self.procs = []

    def _cpu(self) -> float:
        return sum(sum(p.cpu_times()[:2]) for p in self.procs)

    def timed(self, fn: Callable[[], Any]) -> tuple[float, float]:
        c, t = self._cpu(), time.perf_counter()
        fn()
        return time.perf_counter() - t, self._cpu() - c

    def pair(
        self, plain: Callable[[], Any], lake: Callable[[], Any], flip: bool
    ) -> tuple[tuple[float, float], tuple[float, float]]:
        """Time both, in the order given (``flip``: the lakehouse variant first)."""
        if flip:
            b = self.timed(lake)
            return self.timed(plain), b
        a = self.timed(plain)
        return a, self.timed(lake)


def summary(plain: list[tuple[float, float]], lake: list[tuple[float, float]]) -> dict[str, Any]:
    wp, wl = [p[0] for p in plain], [q[0] for q in lake]
    cp, cl = [p[1] for p in plain], [q[1] for q in lake]
    ratios = [b / a for a, b in zip(wp, wl)]
    out: dict[str, Any] = {
        "plain_s": {"median": statistics.median(wp), "min": min(wp), "max": max(wp)},
        "lakehouse_s": {"median": statistics.median(wl), "min": min(wl), "max": max(wl)},
        "ratio": statistics.median(wl) / statistics.median(wp),
        "ratio_range": [min(ratios), max(ratios)],
    }
    if statistics.median(cp) > 0:
        out["cpu_plain_s"] = statistics.median(cp)
        out["cpu_lakehouse_s"] = statistics.median(cl)
        out["cpu_ratio"] = statistics.median(cl) / statistics.median(cp)
    return out


def aggregate(frame: Any) -> dict[int, tuple[Any, int]]:
    """Paid orders per product: (sum of total, rows), collected."""
    from pyspark.sql import functions as F

    out = frame.where(PAID).groupBy("product_id").agg(F.sum("total"), F.count("*"))
    return {r[0]: (r[1], r[2]) for r in out.collect()}


def check(what: str, got: Any, want: Any) -> None:
    """A benchmark result that differs from the expected one is an error, not a number."""
    if got != want:
        raise AssertionError(f"{what}: {got!r}, expected {want!r}")


class Pairs:
    """The timed pairs of every row ``keys`` names (after the warm-up round), each
    pair's two results returned for the checks."""

    def __init__(self, clock: Clock, keys: list[str]) -> None:
        self.clock = clock
        self.times: dict[str, tuple[list[tuple[float, float]], list[tuple[float, float]]]] = {
            key: ([], []) for key in keys
        }
        self.flip = self.counted = False

    def round(self, i: int) -> None:
        """Round ``i`` (0: the warm-up, not counted); odd rounds run the second variant first."""
        self.flip, self.counted = i % 2 == 1, i > 0

    def run(self, key: str, first: Callable[[], Any], second: Callable[[], Any]) -> tuple[Any, Any]:
        """Time ``first`` (the reference) and ``second`` (the lakehouse variant) as a pair."""
        got: list[Any] = [None, None]

        def fill(k: int, fn: Callable[[], Any]) -> Callable[[], None]:
            return lambda: got.__setitem__(k, fn())

        tp, tq = self.clock.pair(fill(0, first), fill(1, second), self.flip)
        if self.counted:
            self.times[key][0].append(tp)
            self.times[key][1].append(tq)
        return got[0], got[1]
