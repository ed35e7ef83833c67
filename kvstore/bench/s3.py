"""``python -m kvstore.bench.s3``: kvstore on an S3 endpoint - latency, group commit, cost.

Starts its own moto S3 server in a child process on 127.0.0.1 (port 0; see
:mod:`kvstore.bench.s3_endpoint`, which also counts the requests), or
uses ``--endpoint URL`` (with ``--bucket``; credentials from ``--key`` /
``--secret`` or the usual AWS environment). Measures, against that endpoint:

* durable put latency from one thread (p50 / p99) and its rate;
* durable puts from 8 threads (group commit: one WAL object PUT carries every
  write buffered meanwhile), the rate and its ratio to one thread (target
  >= 4x);
* S3 requests per commit, counted on the wire (botocore ``before-send``
  events: every HTTP attempt, retries included) - PUT / GET / HEAD / LIST /
  DELETE - for durable puts (1 and 8 threads), transactions, with the
  memtable flushes amortised in, for non-durable puts, with the WAL on a
  local disk (``wal_dir``), and for opening a store (recovery).

Prints two tables, or one JSON document with ``--json``. From Python::

    from kvstore.bench.s3 import main
    main(["--ops", "100", "--json"])

``python -m kvstore.bench --store s3`` calls :func:`main` with the remaining
arguments.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import kvstore
from kvstore.bench.s3_endpoint import VERBS, WireCounter, boto_client, drop_bucket, moto_server
from kvstore.objstore import FaultyStore, FsspecStore

log = logging.getLogger("kvstore.bench.s3")

TARGET_GROUP_COMMIT_RATIO = 4.0


@dataclass
class Cost:
    """S3 requests per commit for one workload."""

    workload: str
    commits: int
    requests: dict[str, int]
    per_commit: dict[str, float] = field(default_factory=dict)
    note: str = ""

    def __post_init__(self) -> None:
        n = max(1, self.commits)
        self.per_commit = {v: round(self.requests.get(v, 0) / n, 3) for v in VERBS}


# ---------------------------------------------------------------------------
# the benchmark
# ---------------------------------------------------------------------------
@dataclass
class Result:
    endpoint: str
    server: str
    ops: int
    threads: int
    value_bytes: int
    single_p50_ms: float = 0.0
    single_p99_ms: float = 0.0
    single_mean_ms: float = 0.0
    single_ops_s: float = 0.0
    multi_ops_s: float = 0.0
    multi_p50_ms: float = 0.0
    multi_p99_ms: float = 0.0
    multi_ratio: float = 0.0
    multi_commits_per_put: float = 0.0
    txn_multi_ops_s: float = 0.0
    wal_dir_p50_ms: float = 0.0
    wal_dir_ops_s: float = 0.0
    costs: list[Cost] = field(default_factory=list)
    target_ratio: float = TARGET_GROUP_COMMIT_RATIO

    @property
    def meets_target(self) -> bool:
        return self.multi_ratio >= self.target_ratio


class Bench:
    def __init__(
        self,
        endpoint: str,
        bucket: str,
        storage_options: dict[str, Any],
        *,
        value_bytes: int,
        seed: int = 0,
    ) -> None:
        self.endpoint = endpoint
        self.bucket = bucket
        self.options = storage_options
        self.value = os.urandom(value_bytes)
        self.run_id = uuid.uuid4().hex[:8]
        self._n = 0
        self.roots: list[str] = []

    def cleanup(self) -> None:
        """Delete every object the benchmark wrote (for a bucket that stays)."""
        for root in self.roots:
            st = FsspecStore("s3", root, self.options)
            for name in st.list(""):
                st.delete(name)

    def store(self, counter: WireCounter | None = None) -> tuple[FsspecStore, str]:
        """A fresh prefix: (its store, its s3:// URL)."""
        self._n += 1
        root = f"{self.bucket}/bench-{self.run_id}-{self._n:02d}"
        self.roots.append(root)
        st = FsspecStore("s3", root, self.options)
        if counter is not None:
            counter.attach(st)
        return st, f"s3://{root}"

    # -- timed workloads --------------------------------------------------------
    def single(self, ops: int, **db_opts: Any) -> tuple[list[float], float, kvstore.DB, Any]:
        counter = WireCounter()
        st, _ = self.store(counter)
        db = kvstore.open(st, **db_opts)
        db.put(b"warmup", self.value)
        lat = []
        start = time.perf_counter()
        for i in range(ops):
            t0 = time.perf_counter()
            db.put(b"k%08d" % i, self.value)
            lat.append(time.perf_counter() - t0)
        elapsed = time.perf_counter() - start
        return lat, elapsed, db, counter

    def threaded(
        self, threads: int, per_thread: int, body: Callable[[kvstore.DB, int, int], None]
    ) -> tuple[list[float], float, kvstore.DB, WireCounter, int]:
        counter = WireCounter()
        st, _ = self.store(counter)
        db = kvstore.open(st)
        db.put(b"warmup", self.value)
        syncs0 = db.stats()["wal_syncs"]
        lats: list[list[float]] = [[] for _ in range(threads)]
        barrier = threading.Barrier(threads + 1)
        errors: list[BaseException] = []

        def work(t: int) -> None:
            barrier.wait()
            try:
                for i in range(per_thread):
                    t0 = time.perf_counter()
                    body(db, t, i)
                    lats[t].append(time.perf_counter() - t0)
            except BaseException as exc:  # reported below
                errors.append(exc)

        ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for t in ts:
            t.start()
        barrier.wait()
        start = time.perf_counter()
        for t in ts:
            t.join()
        elapsed = time.perf_counter() - start
        if errors:
            raise errors[0]
        syncs = db.stats()["wal_syncs"] - syncs0
        return [x for lat in lats for x in lat], elapsed, db, counter, syncs

    # -- costs --------------------------------------------------------------------
    @staticmethod
    def _cost(
        name: str, counter: WireCounter, before: Counter[str], commits: int, note: str
    ) -> Cost:
        after = counter.snapshot()
        return Cost(name, commits, {v: after[v] - before[v] for v in VERBS}, note=note)

    def cost_flushes(self, ops: int) -> Cost:
        """Durable puts with a 32 KiB memtable: WAL PUTs plus the amortised cost of
        flushes (SST PUT, manifest PUT, WAL DELETEs, fence checks) and compaction."""
        counter = WireCounter()
        st, _ = self.store(counter)
        db = kvstore.open(st, memtable_bytes=32 << 10)
        before = counter.snapshot()
        for i in range(ops):
            db.put(b"f%08d" % i, self.value)
        db.flush()
        flushes = db.stats()["flushes"]
        compactions = db.stats()["compactions"]
        cost = self._cost(
            "durable put, flushes amortised",
            counter,
            before,
            ops,
            f"memtable 32 KiB: {flushes} flushes, {compactions} compactions",
        )
        db.close()
        return cost

    def cost_nondurable(self, ops: int) -> Cost:
        counter = WireCounter()
        st, _ = self.store(counter)
        db = kvstore.open(st, wal_buffer_bytes=64 << 10)
        before = counter.snapshot()
        t0 = time.perf_counter()
        for i in range(ops):
            db.put(b"n%08d" % i, self.value, durable=False)
        elapsed = time.perf_counter() - t0
        cost = self._cost(
            "non-durable put",
            counter,
            before,
            ops,
            f"WAL written out per 64 KiB (wal_buffer_bytes); fence check <= 1/s; "
            f"{ops / elapsed:,.0f} ops/s",
        )
        db.close()
        return cost

    def wal_dir(self, ops: int) -> tuple[list[float], float, Cost]:
        counter = WireCounter()
        st, _ = self.store(counter)
        with tempfile.TemporaryDirectory(prefix="kvstore-bench-wal-") as wal_dir:
            db = kvstore.open(st, wal_dir=wal_dir)
            db.put(b"warmup", self.value)
            before = counter.snapshot()
            lat = []
            start = time.perf_counter()
            for i in range(ops):
                t0 = time.perf_counter()
                db.put(b"w%08d" % i, self.value)
                lat.append(time.perf_counter() - t0)
            elapsed = time.perf_counter() - start
            cost = self._cost(
                "durable put, wal_dir (local WAL)",
                counter,
                before,
                ops,
                "journal fdatasync locally; after each sync the writer checks S3 for a "
                "newer manifest (fencing)",
            )
            db.close()
        return lat, elapsed, cost

    def cost_open(self, wal_objects: int) -> Cost:
        """Opening a store whose last writer left ``wal_objects`` WAL objects unflushed."""
        st, url = self.store()
        faulty = FaultyStore(st)
        db = kvstore.open(faulty)
        for i in range(wal_objects):
            db.put(b"o%08d" % i, self.value)
        faulty.crashed = True  # the writer dies: no flush (its WAL objects stay)
        try:
            db.close()
        except BaseException:
            pass
        counter = WireCounter()
        st2 = FsspecStore("s3", url.split("://", 1)[1], self.options)
        counter.attach(st2)
        t0 = time.perf_counter()
        db2 = kvstore.open(st2)
        elapsed = time.perf_counter() - t0
        cost = Cost(
            f"open (recover {wal_objects} WAL objects)",
            1,
            {v: counter.snapshot()[v] for v in VERBS},
            note=f"{elapsed * 1000:,.0f} ms; per open, not per commit",
        )
        db2.close()
        return cost


def pct(values: Sequence[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return 0.0
    return s[min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))]


def run(
    endpoint: str,
    bucket: str,
    storage_options: dict[str, Any],
    *,
    server: str,
    ops: int = 200,
    threads: int = 8,
    value_bytes: int = 100,
    cleanup: bool = False,
) -> Result:
    b = Bench(endpoint, bucket, storage_options, value_bytes=value_bytes)
    try:
        return _run(b, Result(endpoint, server, ops, threads, value_bytes))
    finally:
        if cleanup:
            b.cleanup()


def _run(b: Bench, res: Result) -> Result:
    ops, threads = res.ops, res.threads

    log.info("durable puts, 1 thread (%d ops)", ops)
    lat, elapsed, db, counter = b.single(ops)
    res.single_p50_ms = pct(lat, 50) * 1000
    res.single_p99_ms = pct(lat, 99) * 1000
    res.single_mean_ms = statistics.fmean(lat) * 1000
    res.single_ops_s = ops / elapsed
    db.close()
    # re-measure the cost cleanly on a fresh store (open and close excluded)
    counter = WireCounter()
    st, _ = b.store(counter)
    db = kvstore.open(st)
    db.put(b"warmup", b.value)
    before = counter.snapshot()
    n_cost = min(ops, 100)
    for i in range(n_cost):
        db.put(b"c%08d" % i, b.value)
    res.costs.append(
        Bench._cost("durable put, 1 thread", counter, before, n_cost, "one WAL object each")
    )
    db.close()

    per_thread = max(1, (ops * 2) // threads)
    log.info("durable puts, %d threads (%d ops each)", threads, per_thread)
    value = b.value

    def put(db: kvstore.DB, t: int, i: int) -> None:
        db.put(b"t%02d-%08d" % (t, i), value)

    lat, elapsed, db, counter, syncs = b.threaded(threads, per_thread, put)
    total = threads * per_thread
    res.multi_ops_s = total / elapsed
    res.multi_p50_ms = pct(lat, 50) * 1000
    res.multi_p99_ms = pct(lat, 99) * 1000
    res.multi_ratio = res.multi_ops_s / res.single_ops_s if res.single_ops_s else 0.0
    res.multi_commits_per_put = syncs / total
    wire = counter.snapshot()
    res.costs.append(
        Cost(
            f"durable put, {threads} threads",
            total,
            {v: wire[v] for v in VERBS},
            note=f"{total / max(1, syncs):.1f} writes per WAL object (group commit); "
            "includes open and warmup",
        )
    )
    db.close()

    log.info("transactions, %d threads", threads)

    def txn(db: kvstore.DB, t: int, i: int) -> None:
        while True:
            tx = db.transaction()
            tx.get(b"x%02d-%08d" % (t, i))
            tx.put(b"x%02d-%08d" % (t, i), value)
            try:
                tx.commit()
                return
            except kvstore.TransactionConflict:
                continue

    per_txn = max(1, ops // threads)
    _lat, elapsed, db, counter, syncs = b.threaded(threads, per_txn, txn)
    res.txn_multi_ops_s = threads * per_txn / elapsed
    wire = counter.snapshot()
    res.costs.append(
        Cost(
            f"transaction commit, {threads} threads",
            threads * per_txn,
            {v: wire[v] for v in VERBS},
            note="reads come from memory; includes open and warmup",
        )
    )
    db.close()

    log.info("costs: flushes, non-durable, wal_dir, open")
    res.costs.append(b.cost_flushes(max(ops, 400)))
    res.costs.append(b.cost_nondurable(max(ops * 5, 1000)))
    lat, elapsed, cost = b.wal_dir(ops)
    res.wal_dir_p50_ms = pct(lat, 50) * 1000
    res.wal_dir_ops_s = ops / elapsed
    res.costs.append(cost)
    res.costs.append(b.cost_open(50))
    return res


# ---------------------------------------------------------------------------
# output
# ---------------------------------------------------------------------------
def render(res: Result) -> str:
    lines = [
        f"kvstore on S3 - endpoint {res.endpoint} ({res.server})",
        f"{res.value_bytes}-byte values, {res.ops} single-thread ops, {res.threads} threads",
        "",
        f"{'metric':<46} {'value':>14}",
        f"{'-' * 46} {'-' * 14}",
    ]

    def row(name: str, value: str) -> None:
        lines.append(f"{name:<46} {value:>14}")

    row("durable put, 1 thread: p50 latency", f"{res.single_p50_ms:.1f} ms")
    row("durable put, 1 thread: p99 latency", f"{res.single_p99_ms:.1f} ms")
    row("durable put, 1 thread: rate", f"{res.single_ops_s:,.0f} ops/s")
    row(f"durable put, {res.threads} threads: rate", f"{res.multi_ops_s:,.0f} ops/s")
    row(
        f"durable put, {res.threads} threads: p50 / p99",
        f"{res.multi_p50_ms:.0f} / {res.multi_p99_ms:.0f} ms",
    )
    row(
        f"group commit ratio ({res.threads} threads / 1)",
        f"{res.multi_ratio:.1f}x {'ok' if res.meets_target else 'MISS'} (>= {res.target_ratio:g}x)",
    )
    row(f"WAL object PUTs per put, {res.threads} threads", f"{res.multi_commits_per_put:.3f}")
    row(f"transaction commit, {res.threads} threads: rate", f"{res.txn_multi_ops_s:,.0f} ops/s")
    row("durable put, wal_dir (local WAL): p50", f"{res.wal_dir_p50_ms:.1f} ms")
    row("durable put, wal_dir (local WAL): rate", f"{res.wal_dir_ops_s:,.0f} ops/s")
    lines += [
        "",
        "S3 requests per commit (counted on the wire, retries included)",
        f"{'workload':<40} {'commits':>7} " + " ".join(f"{v:>6}" for v in VERBS) + "  note",
        f"{'-' * 40} {'-' * 7} " + " ".join("-" * 6 for _ in VERBS) + "  ----",
    ]
    for c in res.costs:
        lines.append(
            f"{c.workload:<40} {c.commits:>7} "
            + " ".join(f"{c.per_commit[v]:>6.3g}" for v in VERBS)
            + f"  {c.note}"
        )
    return "\n".join(lines)


def to_json(res: Result) -> dict[str, Any]:
    d = asdict(res)
    d["meets_target"] = res.meets_target
    return d


# ---------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m kvstore.bench.s3",
        description="kvstore on S3: durable put latency, group commit, requests per commit.",
    )
    p.add_argument("--endpoint", help="S3 endpoint URL (default: start a moto server)")
    p.add_argument("--bucket", help="bucket to use (default: create one); required with --endpoint")
    p.add_argument("--key", default=None, help="access key (default: 'testing' on moto, else env)")
    p.add_argument("--secret", default=None, help="secret key")
    p.add_argument("--ops", type=int, default=200, help="single-thread durable puts (default 200)")
    p.add_argument("--threads", type=int, default=8, help="writer threads (default 8)")
    p.add_argument("--value-bytes", type=int, default=100, help="value size (default 100)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument(
        "--check", action="store_true", help="exit 1 if the group-commit target is missed"
    )
    p.add_argument("-v", "--verbose", action="store_true", help="progress on stderr")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("kvstore").setLevel(logging.WARNING)
    if args.ops <= 0 or args.threads <= 0 or args.value_bytes <= 0:
        print("--ops, --threads and --value-bytes must be positive", file=sys.stderr)
        return 2
    if args.endpoint and not args.bucket:
        print("--endpoint needs --bucket", file=sys.stderr)
        return 2

    def go(endpoint: str, server: str, key: str | None, secret: str | None) -> Result:
        opts: dict[str, Any] = {"endpoint_url": endpoint}
        if key is not None:
            opts.update(key=key, secret=secret)
        bucket = args.bucket
        created = None
        if bucket is None:
            client = boto_client(endpoint, key, secret)
            bucket = created = f"kvstore-bench-{uuid.uuid4().hex[:12]}"
            client.create_bucket(Bucket=bucket)
        try:
            return run(
                endpoint,
                bucket,
                opts,
                server=server,
                ops=args.ops,
                threads=args.threads,
                value_bytes=args.value_bytes,
                cleanup=created is None,  # a bucket we made is dropped whole below
            )
        finally:
            if created is not None and args.endpoint:
                drop_bucket(boto_client(endpoint, key, secret), created)

    if args.endpoint:
        res = go(args.endpoint, "given endpoint", args.key, args.secret)
    else:
        import moto

        with moto_server() as endpoint:
            res = go(
                endpoint,
                f"moto {moto.__version__}, child process",
                args.key or "testing",
                args.secret or "testing",
            )
    if args.json:
        print(json.dumps(to_json(res), indent=2))
    else:
        print(render(res))
    if args.check and not res.meets_target:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
