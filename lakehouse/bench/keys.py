"""``python -m lakehouse.bench --only keys``: merges by key, keyed appends, small appends.

The workloads of issue 22 (inlined small writes, enforced primary keys,
merges by key), ours against pylance, deltalake and DuckLake, in the same
run, in fresh directories under the bench root (local disk):

* **merge**: a merge of ``--keys-merge-rows`` keyed rows (``id``, ``name``,
  ``amount``; half of them matching existing ids drawn uniformly at random
  over the table, half new) into a table of ``--keys-small-rows`` rows and
  into one of ``--keys-big-rows`` rows. Both tables are built by appending
  batches of ``--keys-batch-rows`` rows with sequential ids (one commit
  each). Ours: ``txn.merge(t, src, on="id")`` on a table created with
  ``primary_key=["id"]``; pylance: ``lance.dataset(uri).merge_insert("id")
  .when_matched_update_all().when_not_matched_insert_all().execute(src)``;
  deltalake: ``DeltaTable(uri).merge(src, "t.id = s.id", ...)
  .when_matched_update_all().when_not_matched_insert_all().execute()``;
  DuckLake: ``MERGE INTO ... ON tgt.id = src.id`` (the seconds of that
  statement, timed inside its process). ``--keys-merges`` merges per table
  and round, a new source each (the round's figure is their median). Every
  merge's row count afterwards is checked (the rows before plus the new ones).
* **keyed append**: ``--keys-pk-appends`` appends of ``--keys-merge-rows``
  new rows (ours) to the big table with ``primary_key=["id"]`` and to a copy
  of it without a primary key, alternating; median ms of each.
* **appends**: ``--keys-appends`` appends of 1,000 rows (the append workload
  of :mod:`lakehouse.bench.data`, its batches and its turn-taking), one
  commit each, commits/s: ours (durable, default table settings), pylance,
  and DuckLake with its data inlining (``ATTACH ... (DATA_INLINING_ROW_LIMIT
  <rows per append>)``: every append kept in its catalog database) and
  without it (``DATA_INLINING_ROW_LIMIT 0``).

Each round (``--keys-rounds``) runs every measurement with the systems
taking turns (the one going first rotating); ratios are taken per round,
then summarised as median (min-max), and the issue's targets are checked
against the median. Only with ``--only keys`` (it builds tables of 10M rows
in four systems: a few minutes); ``--quick`` shrinks the tables to 100k and
1M rows. DuckLake runs in its own virtualenv as
:mod:`lakehouse.bench.scale` does it (:mod:`lakehouse.bench.ducklake_side`);
without it, its columns say so.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import shutil
import statistics
import time
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import lakehouse
from lakehouse.bench import data, scale
from lakehouse.bench.anchors import ANCHORS, System
from lakehouse.bench.report import summary

log = logging.getLogger("lakehouse.bench")
#: the keyed tables: ``id`` is the key, so it is not nullable
SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), ("name", pa.string()), ("amount", pa.float64())]
)
SMALL, BIG, NOPK = "small", "big", "big_nopk"
NEW_BASE = 1 << 40  # ids of the rows a merge inserts (far above every built id)
APPEND_BASE = 1 << 41  # ids of the keyed appends
SYSTEMS = ("ours", "pylance", "deltalake", "ducklake")
DUCK_INLINE, DUCK_PLAIN = "ducklake, inlining", "ducklake, no inlining"
#: the issue's targets: (key, what, bound, "<=" or ">=")
TARGETS = (
    ("merge_vs_lance", "merge of {m} keyed rows into {small} rows: ours / pylance", 0.5, "<="),
    ("merge_vs_ducklake", "merge of {m} keyed rows into {small} rows: ours / DuckLake", 0.5, "<="),
    ("merge_growth", "merge into {big} rows / into {small} rows (ours)", 1.5, "<="),
    ("pk_append", "append of {m} rows to {big} rows: with primary key / without", 2.0, "<="),
    ("append_vs_lance", "{n} appends of {r} rows: ours commits/s / pylance", 3.0, ">="),
    ("append_vs_ducklake", "{n} appends of {r} rows: ours commits/s / DuckLake's best "
     "(with or without its inlining)", 20.0, ">="),
)  # fmt: skip


@dataclass(frozen=True)
class Sizes:
    small_rows: int = 1_000_000
    big_rows: int = 10_000_000
    batch_rows: int = 1_000_000
    merge_rows: int = 1000
    merges: int = 3  # merges per table per round (the round's figure is their median)
    rounds: int = 5
    pk_appends: int = 5
    appends: int = 300
    append_rows: int = 1000
    chunk: int = 25


QUICK = Sizes(small_rows=100_000, big_rows=1_000_000, batch_rows=100_000, rounds=1,
              pk_appends=3, appends=30, chunk=10)  # fmt: skip


def build_batch(k: int, sz: Sizes, stop: int) -> pa.Table:
    """Rows ``k*batch_rows ..`` (up to ``stop``) with sequential ids, deterministic."""
    ids = np.arange(k * sz.batch_rows, min((k + 1) * sz.batch_rows, stop), dtype=np.int64)
    return _rows(ids, "name-", np.random.default_rng(k).uniform(0, 1000, len(ids)))


def _rows(ids: np.ndarray, prefix: str, amount: np.ndarray) -> pa.Table:
    names = pc.binary_join_element_wise(prefix, pc.cast(pa.array(ids), pa.string()), "")
    return pa.table([pa.array(ids), names, pa.array(amount)], schema=SCHEMA)


def merge_source(n: int, sz: Sizes, r: int, which: int) -> pa.Table:
    """Round ``r``'s source for a table of ``n`` built rows: half of ``merge_rows``
    existing ids (uniform over the table), half new ids, shuffled. ``r`` numbers the
    sources (``--keys-merges`` a round); -1 is the warm-up (new ids below the others)."""
    rng = np.random.default_rng(1000 * (r + 1) + which)
    half = sz.merge_rows // 2
    old = rng.choice(n, size=half, replace=False).astype(np.int64)
    start = NEW_BASE + (2 * r + which) * sz.merge_rows
    new = np.arange(start, start + sz.merge_rows - half, dtype=np.int64)
    ids = rng.permutation(np.concatenate([old, new]))
    return _rows(ids, "merged-", rng.uniform(0, 1000, len(ids)))


def append_rows(sz: Sizes, r: int, j: int) -> pa.Table:
    start = APPEND_BASE + (r * sz.pk_appends + j) * sz.merge_rows
    ids = np.arange(start, start + sz.merge_rows, dtype=np.int64)
    return _rows(ids, "appended-", np.full(len(ids), 1.0))


# ---------------------------------------------------------------------------
# the systems (merge and keyed tables)
# ---------------------------------------------------------------------------
class Keyed:
    """Tables of one system under ``path``, named ``small``, ``big``, ``big_nopk``."""

    name = ""

    def __init__(self, path: str) -> None:
        self.path = path
        os.makedirs(path, exist_ok=True)

    def build(self, table: str, batches: list[str], make: Any, pk: bool = True) -> None:
        """Create ``table`` holding ``make(k)`` for each batch ``k`` (one commit each);
        ``batches`` are the same rows as Arrow IPC files (for DuckLake)."""
        for k in range(len(batches)):
            self.add(table, make(k), first=k == 0, pk=pk)

    def add(self, table: str, rows: pa.Table, first: bool, pk: bool) -> None:
        raise NotImplementedError

    def merge(self, table: str, src: pa.Table, src_file: str) -> float:
        """Seconds of one merge of ``src`` on ``id``."""
        raise NotImplementedError

    def count(self, table: str) -> int:
        raise NotImplementedError

    def close(self) -> None:
        pass


class Ours(Keyed):
    """One lakehouse per table, as the anchors keep one dataset per table: a
    table's merges do not pay for another table's key index settling in the
    same kvstore (the 10M-row table's entries are flushed and compacted in the
    background for a while after it is built)."""

    name = "ours"

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.lhs: dict[str, lakehouse.Lakehouse] = {}

    def _lh(self, table: str) -> lakehouse.Lakehouse:
        lh = self.lhs.get(table)
        if lh is None:
            lh = self.lhs[table] = lakehouse.open(os.path.join(self.path, table))
            with lh.begin() as txn:
                txn.create_namespace("bench", if_not_exists=True)
        return lh

    def add(self, table: str, rows: pa.Table, first: bool, pk: bool) -> None:
        with self._lh(table).begin() as txn:
            if first:
                txn.create_table(f"bench.{table}", SCHEMA, primary_key=["id"] if pk else None)
            txn.append(f"bench.{table}", rows)

    def merge(self, table: str, src: pa.Table, src_file: str) -> float:
        lh = self._lh(table)
        t0 = time.perf_counter()
        with lh.begin() as txn:
            txn.merge(f"bench.{table}", src, on="id")
        return time.perf_counter() - t0

    def append(self, table: str, rows: pa.Table) -> float:
        lh = self._lh(table)
        t0 = time.perf_counter()
        with lh.begin() as txn:
            txn.append(f"bench.{table}", rows)
        return time.perf_counter() - t0

    def count(self, table: str) -> int:
        return int(self._lh(table).table_stats(f"bench.{table}").rows)

    def close(self) -> None:
        for lh in self.lhs.values():
            lh.close()


class Lance(Keyed):
    name = "pylance"

    def __init__(self, path: str) -> None:
        import lance

        super().__init__(path)
        self._lance = lance

    def add(self, table: str, rows: pa.Table, first: bool, pk: bool) -> None:
        uri = os.path.join(self.path, table)
        self._lance.write_dataset(rows, uri, mode="create" if first else "append")

    def merge(self, table: str, src: pa.Table, src_file: str) -> float:
        t0 = time.perf_counter()
        ds = self._lance.dataset(os.path.join(self.path, table))
        ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(src)
        return time.perf_counter() - t0

    def count(self, table: str) -> int:
        return int(self._lance.dataset(os.path.join(self.path, table)).count_rows())


class Delta(Keyed):
    name = "deltalake"

    def __init__(self, path: str) -> None:
        import deltalake

        super().__init__(path)
        self._dl = deltalake

    def add(self, table: str, rows: pa.Table, first: bool, pk: bool) -> None:
        uri = os.path.join(self.path, table)
        self._dl.write_deltalake(uri, rows, mode="error" if first else "append")

    def merge(self, table: str, src: pa.Table, src_file: str) -> float:
        t0 = time.perf_counter()
        dt = self._dl.DeltaTable(os.path.join(self.path, table))
        merger = dt.merge(source=src, predicate="t.id = s.id", source_alias="s",
                          target_alias="t")  # fmt: skip
        merger.when_matched_update_all().when_not_matched_insert_all().execute()
        return time.perf_counter() - t0

    def count(self, table: str) -> int:
        return int(self._dl.DeltaTable(os.path.join(self.path, table)).count())


class DuckProcess(scale.DuckLake):
    """The DuckLake process (:mod:`lakehouse.bench.ducklake_side`, its ``k_*`` commands)."""

    def __init__(self, path: str, python: str) -> None:
        super().__init__(path, scale.Sizes(), python)

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        return self._call(op, **args)


class DuckLake(Keyed):
    """DuckLake tables in one catalog (DuckLake's default settings), in ``proc``."""

    name = "ducklake"

    def __init__(self, path: str, proc: DuckProcess) -> None:
        super().__init__(path)
        self.proc = proc
        self.root = os.path.join(path, "lake")
        self.info = proc.call("k_attach", root=self.root, inline=None)

    def build(self, table: str, batches: list[str], make: Any, pk: bool = True) -> None:
        self.proc.call("k_table", root=self.root, table=table, files=batches)

    def merge(self, table: str, src: pa.Table, src_file: str) -> float:
        res = self.proc.call("k_merge", root=self.root, table=table, file=src_file)
        return float(res["seconds"])

    def count(self, table: str) -> int:
        return int(self.proc.call("k_count", root=self.root, table=table)["rows"])


class DuckAppends(System):
    """A DuckLake table for :func:`lakehouse.bench.data.appends` (``inline``: the
    ``DATA_INLINING_ROW_LIMIT`` on its ``ATTACH``). The batches are loaded in the
    DuckLake process up front; an append names its batch, and its time includes one
    line each way through the pipe (~0.1 ms)."""

    def __init__(self, path: str, proc: DuckProcess, batches: list[pa.Table], file: str,
                 inline: int, name: str) -> None:  # fmt: skip
        super().__init__(path)
        self.name, self.proc, self.file, self.inline = name, proc, file, inline
        self.root = os.path.join(path, "lake")
        self.index = {id(b): i for i, b in enumerate(batches)}

    def create(self, rows: pa.Table) -> None:
        self.proc.call("k_attach", root=self.root, inline=self.inline)
        self.proc.call("k_table", root=self.root, table="t", files=[])
        self.append(rows)

    def append(self, rows: pa.Table) -> None:
        self.proc.call("k_insert", root=self.root, table="t", file=self.file,
                       index=self.index[id(rows)])  # fmt: skip

    def count(self) -> int:
        return int(self.proc.call("k_count", root=self.root, table="t")["rows"])

    def files(self) -> int:
        return int(self.proc.call("k_count", root=self.root, table="t")["parquet_files"])


def write_ipc(path: str, tables: list[pa.Table]) -> str:
    """``tables`` into one Arrow IPC file, one record batch each."""
    with pa.OSFile(path, "wb") as f, pa.ipc.new_file(f, tables[0].schema) as w:
        for t in tables:
            w.write_batch(t.combine_chunks().to_batches()[0])
    return path


# ---------------------------------------------------------------------------
# the run
# ---------------------------------------------------------------------------
def _open(args: argparse.Namespace, root: str) -> tuple[list[Keyed], DuckProcess | None,
                                                          dict[str, str]]:  # fmt: skip
    want = [x.strip() for x in args.keys_systems.split(",") if x.strip()]
    for n in want:
        if n not in SYSTEMS:
            raise SystemExit(f"unknown system {n!r} ({', '.join(SYSTEMS)})")
    if "ours" not in want:
        raise SystemExit("--keys-systems must include ours")
    made: list[Keyed] = []
    missing: dict[str, str] = {}
    proc = None
    for n in want:
        path = os.path.join(root, n)
        try:
            if n == "ours":
                made.append(Ours(path))
            elif n == "pylance":
                made.append(Lance(path))
            elif n == "deltalake":
                made.append(Delta(path))
            else:
                py = scale.ducklake_python(args.ducklake_python)
                if py is None or not os.path.exists(py):
                    missing[n] = ("not available: no DuckLake virtualenv (create it with "
                                  "`make .venv-ducklake`, or pass --ducklake-python)")  # fmt: skip
                    continue
                proc = DuckProcess(os.path.join(root, "ducklake-process"), py)
                made.append(DuckLake(path, proc))
        except ImportError as exc:
            missing[n] = f"not installed ({exc})"
    return made, proc, missing


def _build(systems: list[Keyed], root: str, sz: Sizes,
           missing: dict[str, str]) -> tuple[list[Keyed], dict[str, float]]:  # fmt: skip
    """Every system's small and big tables (ours also the big one without a key)."""
    stops = {SMALL: sz.small_rows, BIG: sz.big_rows}
    files: dict[str, list[str]] = {}
    os.makedirs(os.path.join(root, "batches"), exist_ok=True)
    for table, stop in stops.items():
        n = -(-stop // sz.batch_rows)
        files[table] = [os.path.join(root, "batches", f"{table}-{k}.arrow") for k in range(n)]
        if any(isinstance(s, DuckLake) for s in systems):
            for k, f in enumerate(files[table]):
                write_ipc(f, [build_batch(k, sz, stop)])
    spent: dict[str, float] = {}
    ok = []
    for s in systems:
        t0 = time.perf_counter()
        try:
            for table, stop in stops.items():
                s.build(table, files[table], lambda k, stop=stop: build_batch(k, sz, stop))
                if s.count(table) != stop:
                    raise AssertionError(f"{s.name}: {table} has {s.count(table)} rows, not {stop}")
            if isinstance(s, Ours):
                s.build(NOPK, files[BIG], lambda k: build_batch(k, sz, sz.big_rows), pk=False)
            ok.append(s)
        except Exception as exc:
            if isinstance(s, Ours):
                raise
            log.exception("%s: building the tables failed", s.name)
            missing[s.name] = f"failed building its tables: {type(exc).__name__}: {exc}"
            s.close()
        spent[s.name] = time.perf_counter() - t0
        log.info("keys: %s built its tables in %.1f s", s.name, spent[s.name])
    shutil.rmtree(os.path.join(root, "batches"), ignore_errors=True)
    return ok, spent


def _merges(systems: list[Keyed], root: str, sz: Sizes, r: int,
            missing: dict[str, str]) -> dict[str, dict[str, float]]:  # fmt: skip
    times: dict[str, dict[str, list[float]]] = {SMALL: {}, BIG: {}}
    for j in range(sz.merges):  # a new source each time; the round's figure: the median
        k = r * sz.merges + j
        for which, (table, n) in enumerate(((SMALL, sz.small_rows), (BIG, sz.big_rows))):
            src = merge_source(n, sz, k, which)
            new = int(pc.sum(pc.greater_equal(src.column("id"), NEW_BASE)).as_py())
            src_file = write_ipc(os.path.join(root, f"source-{k}-{which}.arrow"), [src])
            for s in data.rotate(list(systems), k + which):
                try:
                    before = s.count(table)
                    times[table].setdefault(s.name, []).append(s.merge(table, src, src_file))
                    after = s.count(table)
                    if after != before + new:
                        raise AssertionError(f"{s.name}: {before} rows, {after} after merging "
                                             f"{len(src)} rows of which {new} new")  # fmt: skip
                except Exception as exc:
                    if isinstance(s, Ours):
                        raise
                    log.exception("%s: merge failed", s.name)
                    missing[s.name] = f"merge failed: {type(exc).__name__}: {exc}"
                    systems.remove(s)
                    s.close()
                    for t in times.values():
                        t.pop(s.name, None)
            os.remove(src_file)
    return {t: {n: statistics.median(v) for n, v in d.items()} for t, d in times.items()}


def _pk_appends(ours: Ours, sz: Sizes, r: int) -> dict[str, float]:
    times: dict[str, list[float]] = {BIG: [], NOPK: []}
    for j in range(sz.pk_appends):
        rows = append_rows(sz, r, j)
        for table in (BIG, NOPK)[:: 1 if j % 2 else -1]:
            times[table].append(ours.append(table, rows))
    return {t: statistics.median(v) for t, v in times.items()}


def _small_appends(
    root: str,
    names: list[str],
    proc: DuckProcess | None,
    batches: list[pa.Table],
    file: str | None,
    sz: Sizes,
    r: int,
) -> dict[str, Any]:
    made: list[System] = []
    for n in names:
        path = os.path.join(root, n)
        os.makedirs(path, exist_ok=True)
        made.append(data.Ours(path) if n == "ours" else ANCHORS[n](path))
    if proc is not None and file is not None:
        for label, inline in ((DUCK_INLINE, sz.append_rows), (DUCK_PLAIN, 0)):
            path = os.path.join(root, label.replace(", ", "-").replace(" ", "-"))
            made.append(DuckAppends(path, proc, batches, file, inline, label))
    dsz = data.Sizes(appends=sz.appends, rows=sz.append_rows, chunk=min(sz.chunk, sz.appends))
    try:
        per_s = data.appends(data.rotate(made, r), batches, dsz)
        files = {s.name: s.files() for s in made if isinstance(s, DuckAppends)}
        # how many of our rows the appends left inlined (0 before issue 22's inlining)
        ours = next(s for s in made if isinstance(s, data.Ours))
        inlined = getattr(ours.lh.table_stats(data.TABLE), "inlined_rows", None)
        for s in made:
            if s.count() != (sz.appends + 1) * sz.append_rows:
                raise AssertionError(f"{s.name}: {s.count()} rows after the appends")
    finally:
        for s in made:
            s.close()
        shutil.rmtree(root, ignore_errors=True)
    return {"per_s": per_s, "ducklake_parquet_files": files, "ours_inlined_rows": inlined}


def run(args: argparse.Namespace, root: str) -> dict[str, Any]:
    sz = sizes_of(args)
    started = time.perf_counter()
    os.makedirs(root, exist_ok=True)
    systems, proc, missing = _open(args, root)
    try:
        systems, build_s = _build(systems, root, sz, missing)
        ours = next(s for s in systems if isinstance(s, Ours))
        # first calls (imports, caches) outside the measurements: a merge of a
        # few rows into each small table (their counts are checked from here on)
        warm = merge_source(sz.small_rows, replace(sz, merge_rows=10), -1, 0)
        warm_file = write_ipc(os.path.join(root, "warm.arrow"), [warm])
        for s in systems:
            s.merge(SMALL, warm, warm_file)
        batches = data.make_batches(sz.appends + 1, sz.append_rows)
        names = ["ours"] + [s.name for s in systems if s.name == "pylance"]
        file = None
        if proc is not None and any(isinstance(s, DuckLake) for s in systems):
            file = write_ipc(os.path.join(root, "appends.arrow"), batches)
            proc.call("k_load", file=file)
        rounds = []
        for r in range(sz.rounds):
            rd: dict[str, Any] = {"merge_s": _merges(systems, root, sz, r, missing)}
            rd["pk_append_s"] = _pk_appends(ours, sz, r)
            duck = proc if any(isinstance(s, DuckLake) for s in systems) else None
            top = os.path.join(root, f"appends{r}")
            rd["appends"] = _small_appends(top, names, duck, batches, file, sz, r)
            rounds.append(rd)
            log.info("keys round %d: %s", r + 1, rd)
        info = next((s.info for s in systems if isinstance(s, DuckLake)), None)
    finally:
        for s in systems:
            s.close()
        if proc is not None:
            proc.close()
        shutil.rmtree(root, ignore_errors=True)
    res: dict[str, Any] = {
        "sizes": asdict(sz),
        "systems": [s.name for s in systems],
        "missing": missing,
        "build_s": build_s,
        "rounds": rounds,
        "ducklake": info,
    }
    res["summary"] = summarise(rounds)
    res["targets"] = targets(res)
    res["elapsed_s"] = time.perf_counter() - started
    return res


# ---------------------------------------------------------------------------
# summaries and the report
# ---------------------------------------------------------------------------
def _per_round(rounds: list[dict[str, Any]], fn: Any) -> dict[str, float] | None:
    """``summary`` of ``fn(round)`` over the rounds where it is defined (not None)."""
    vals = []
    for r in rounds:
        try:
            v = fn(r)
        except KeyError:
            v = None
        if v is not None:
            vals.append(v)
    return summary(vals) if vals else None


def _best_duck(per_s: dict[str, float]) -> float | None:
    v = [per_s[n] for n in (DUCK_INLINE, DUCK_PLAIN) if n in per_s]
    return max(v) if v else None


#: the per-round ratios: key -> (measurement, table, system) over (measurement, table, system)
RATIOS: dict[str, tuple[tuple[str, str, str], tuple[str, str, str]]] = {
    "merge_vs_lance": (("merge_s", SMALL, "ours"), ("merge_s", SMALL, "pylance")),
    "merge_vs_deltalake": (("merge_s", SMALL, "ours"), ("merge_s", SMALL, "deltalake")),
    "merge_vs_ducklake": (("merge_s", SMALL, "ours"), ("merge_s", SMALL, "ducklake")),
    "merge_big_vs_lance": (("merge_s", BIG, "ours"), ("merge_s", BIG, "pylance")),
    "merge_big_vs_deltalake": (("merge_s", BIG, "ours"), ("merge_s", BIG, "deltalake")),
    "merge_big_vs_ducklake": (("merge_s", BIG, "ours"), ("merge_s", BIG, "ducklake")),
    "merge_growth": (("merge_s", BIG, "ours"), ("merge_s", SMALL, "ours")),
    "pk_append": (("pk_append_s", BIG, ""), ("pk_append_s", NOPK, "")),
    "append_vs_lance": (("appends", "per_s", "ours"), ("appends", "per_s", "pylance")),
    "append_vs_ducklake": (("appends", "per_s", "ours"), ("appends", "per_s", "ducklake, best")),
}


def _get(r: dict[str, Any], what: tuple[str, str, str]) -> float | None:
    kind, table, name = what
    v = r[kind][table]
    if not name:
        return float(v)
    if name == "ducklake, best":
        return _best_duck(v)
    return None if name not in v else float(v[name])


def _ratio(key: str, r: dict[str, Any]) -> float | None:
    a, b = (_get(r, w) for w in RATIOS[key])
    return None if a is None or b is None or b == 0 else a / b


def summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    s: dict[str, Any] = {"merge_s": {}, "ratios": {}}
    for table in (SMALL, BIG):
        names = {n for r in rounds for n in r["merge_s"][table]}
        s["merge_s"][table] = {n: _per_round(rounds, lambda r, n=n, t=table: r["merge_s"][t][n])
                               for n in sorted(names)}  # fmt: skip
    s["pk_append_s"] = {t: summary(r["pk_append_s"][t] for r in rounds) for t in (BIG, NOPK)}
    names = {n for r in rounds for n in r["appends"]["per_s"]}
    s["append_per_s"] = {n: _per_round(rounds, lambda r, n=n: r["appends"]["per_s"][n])
                         for n in sorted(names)}  # fmt: skip
    for key in RATIOS:
        s["ratios"][key] = _per_round(rounds, functools.partial(_ratio, key))
    return s


def targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's ratio lines, each with its bound and pass/fail (None: not measured)."""
    sz, ratios = res["sizes"], res["summary"]["ratios"]
    out = []
    for key, what, bound, op in TARGETS:
        r = ratios.get(key)
        v = None if r is None else r["median"]
        ok = None if v is None else (v <= bound if op == "<=" else v >= bound)
        out.append({
            "key": key, "value": v, "spread": r, "target": f"{op} {bound:g}x", "pass": ok,
            "what": what.format(m=f"{sz['merge_rows']:,}", small=f"{sz['small_rows']:,}",
                                big=f"{sz['big_rows']:,}", n=f"{sz['appends']:,}",
                                r=f"{sz['append_rows']:,}"),
        })  # fmt: skip
    return out


def _v(x: dict[str, float] | None, scale_: float = 1.0, fmt: str = ",.1f") -> str:
    if x is None:
        return "n/a"
    m, lo, hi = (x[k] * scale_ for k in ("median", "min", "max"))
    if f"{lo:{fmt}}" == f"{hi:{fmt}}":
        return f"{m:{fmt}}"
    return f"{m:{fmt}} ({lo:{fmt}}-{hi:{fmt}})"


def report(res: dict[str, Any]) -> str:
    sz, s = res["sizes"], res["summary"]
    merges = [n for n in SYSTEMS if n in s["merge_s"][SMALL] or n in s["merge_s"][BIG]]
    lines = [
        f"keys: median of {sz['rounds']} round(s) (min-max); ratios per round. Merge of "
        f"{sz['merge_rows']:,} keyed rows (half matching ids uniform over the table, half new); "
        f"tables built from {sz['batch_rows']:,}-row appends with sequential ids. ours: "
        "primary_key=[id], durable commits",
        "",
        "| workload | " + " | ".join(merges) + " |",
        "|---|" + "---:|" * len(merges),
    ]
    for table, n in ((SMALL, sz["small_rows"]), (BIG, sz["big_rows"])):
        cells = " | ".join(_v(s["merge_s"][table].get(x), 1e3) for x in merges)
        lines.append(f"| merge into {n:,} rows, ms | {cells} |")
    lines += [
        "",
        f"| ours: append of {sz['merge_rows']:,} rows to {sz['big_rows']:,} rows, ms | "
        "with primary_key=[id] | without |",
        "|---|---:|---:|",
        f"| {sz['pk_appends']} appends per round | {_v(s['pk_append_s'][BIG], 1e3, ',.2f')} | "
        f"{_v(s['pk_append_s'][NOPK], 1e3, ',.2f')} |",
        "",
    ]
    aps = s["append_per_s"]
    order = [n for n in ("ours", "pylance", DUCK_INLINE, DUCK_PLAIN) if n in aps]
    lines += [
        f"| {sz['appends']} appends of {sz['append_rows']:,} rows, commits/s | "
        + " | ".join(order)
        + " |",
        "|---|" + "---:|" * len(order),
        "| (ours durable, default table settings) | "
        + " | ".join(_v(aps[n], 1.0, ",.0f") for n in order)
        + " |",
        "",
        "ratios (time ours / anchor; < 1x means ours is faster):",
    ]
    labels = {
        "merge_vs_lance": "merge small: ours / pylance",
        "merge_vs_deltalake": "merge small: ours / deltalake",
        "merge_vs_ducklake": "merge small: ours / ducklake",
        "merge_big_vs_lance": "merge big: ours / pylance",
        "merge_big_vs_deltalake": "merge big: ours / deltalake",
        "merge_big_vs_ducklake": "merge big: ours / ducklake",
    }
    for key, label in labels.items():
        lines.append(f"- {label}: {_v(s['ratios'].get(key), 1.0, '.3g')}x")
    lines.append("\ntargets (issue 22):")
    for t in res["targets"]:
        v = "n/a" if t["spread"] is None else _v(t["spread"], 1.0, ".3g") + "x"
        verdict = {True: "pass", False: "FAIL", None: "not measured"}[t["pass"]]
        lines.append(f"- {t['what']}: {v} (target {t['target']}): {verdict}")
    inlined = res["rounds"][-1]["appends"].get("ours_inlined_rows")
    lines.append(f"\nours: rows left inlined after the appends (last round): {inlined}")
    last = res["rounds"][-1]["appends"].get("ducklake_parquet_files", {})
    if last:
        lines.append("\nDuckLake Parquet files after the appends (last round): "
                     + ", ".join(f"{k}: {v}" for k, v in last.items()))  # fmt: skip
    lines.append("build s: " + ", ".join(f"{k} {v:,.1f}" for k, v in res["build_s"].items()))
    for n, why in res["missing"].items():
        lines.append(f"\n{n}: {why}")
    info = res.get("ducklake")
    if info:
        lines.append(f"\nducklake: duckdb {info['duckdb']}, {os.path.basename(info['extension'])}")
    lines.append(f"\nkeys bench took {res['elapsed_s']:,.0f} s")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
def add_arguments(p: Any) -> None:
    d = Sizes()
    p.add_argument("--keys-systems", default=",".join(SYSTEMS),
                   help="comma-separated: ours, pylance, deltalake, ducklake")  # fmt: skip
    for f in fields(Sizes):
        if f.name == "chunk":
            continue
        p.add_argument(f"--keys-{f.name.replace('_', '-')}", type=int, default=None,
                       help=f"default {getattr(d, f.name):,} ({getattr(QUICK, f.name):,} "
                       "with --quick)")  # fmt: skip


def sizes_of(args: argparse.Namespace) -> Sizes:
    base = QUICK if getattr(args, "quick", False) else Sizes()
    given = {f.name: getattr(args, f"keys_{f.name}", None) for f in fields(Sizes)}
    sz = replace(base, **{k: v for k, v in given.items() if v is not None})
    for f in fields(sz):
        if getattr(sz, f.name) < 1:
            raise SystemExit(f"--keys-{f.name.replace('_', '-')} must be >= 1")
    if sz.small_rows < sz.merge_rows or sz.big_rows < sz.merge_rows:
        raise SystemExit("--keys-small-rows and --keys-big-rows must be >= --keys-merge-rows")
    return replace(sz, chunk=min(sz.chunk, sz.appends))
