"""Concurrent data transactions under SERIALIZABLE, checked against a serial replay.

A seeded single-thread scheduler interleaves transactions on one lakehouse:
it begins several, runs their steps (reads with ``where``, append, delete,
update, merge, overwrite with ``where``, compact) in random order across them, and commits them in
random order. Every transaction is a small deterministic *program*: the
values it writes are computed from what it observed so far (rows its reads
returned, counts its deletes and updates reported, merge results), so a
transaction that saw a different state would write something different.

Versions are the serialization order. The check replays the committed
transactions one by one, in version order, on a fresh lakehouse with the
same initial tables, re-executing each program: every observation must be
the one it made originally, each replayed commit must create the same
version number, and after it both tables must hold exactly the rows the
original lakehouse holds at that version (so the final states are equal
too). Read-only transactions are checked against the replayed state at the
version they began at.

Two variants: ``writes-what-it-reads`` (every transaction also writes each
table it reads) and ``cross-table`` (a transaction may read one table and
write only the other, the write-skew shape that needs data reads tracked on
tables the transaction does not write).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pytest

import lakehouse

SER = lakehouse.Isolation.SERIALIZABLE
TABLES = ("ns.t0", "ns.t1")
SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.int64())])
#: keys merges, deletes, updates and reads work on (appends use unique keys above it)
KEY_SPACE = 48

Rows = tuple[tuple[int, int], ...]


def table_of(rows: list[tuple[int, int]]) -> pa.Table:
    return pa.table({"k": [r[0] for r in rows], "v": [r[1] for r in rows]}, schema=SCHEMA)


def rows_of(view: Any, table: str, where: str | None = None) -> Rows:
    t = view.read(table, columns=["k", "v"], where=where)
    return tuple(sorted(zip(t.column("k").to_pylist(), t.column("v").to_pylist(), strict=True)))


def setup(lh: lakehouse.Lakehouse, max_rows: str | None = None) -> None:
    """Two tables, each with keys 0..29 (v = k) in three data files (automatic
    compaction off: the replay compares version numbers, and its versions would
    interleave with the histories' own); ``max_rows``: their ``inline.max_rows``
    (None: the default, every write here is inlined; see LAYOUTS)."""
    props = {"compaction.auto": "false"}
    if max_rows is not None:
        props["inline.max_rows"] = max_rows
    with lh.begin() as t:
        t.create_namespace("ns")
        for name in TABLES:
            t.create_table(name, SCHEMA, props)
    for start in (0, 10, 20):
        with lh.begin() as t:
            for name in TABLES:
                t.append(name, table_of([(k, k) for k in range(start, start + 10)]))


# -- programs -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    kind: str  # read | append | delete | update | merge | overwrite | compact
    table: str
    where: str = ""
    keys: tuple[int, ...] = ()
    n: int = 0
    when_matched: str = "update"


def random_where(rng: random.Random) -> str:
    r = rng.random()
    lo = rng.randrange(0, KEY_SPACE)
    if r < 0.55:
        return f"k >= {lo} AND k < {lo + rng.randint(1, 8)}"
    if r < 0.75:
        return f"k = {lo}"
    if r < 0.9:
        return f"k >= {lo} AND k < {lo + 12} AND v % 3 = {rng.randrange(3)}"
    return f"v > {rng.randrange(0, 4000)}"


def make_program(rng: random.Random, cross_table: bool) -> list[Step]:
    if rng.random() < 0.08:
        return [Step("compact", rng.choice(TABLES))]
    steps: list[Step] = []
    for _ in range(rng.randint(1, 4)):
        kind = rng.choices(
            ["read", "append", "delete", "update", "merge", "overwrite"], weights=[5, 2, 2, 3, 2, 1]
        )[0]
        table = rng.choice(TABLES)
        if kind == "read":
            steps.append(Step("read", table, random_where(rng)))
        elif kind == "append":
            steps.append(Step("append", table, n=rng.randint(1, 3)))
        elif kind in ("delete", "update"):
            steps.append(Step(kind, table, random_where(rng)))
        elif kind == "overwrite":
            lo = rng.randrange(0, KEY_SPACE - 4)
            hi = lo + rng.randint(1, 6)
            keys = tuple(sorted(rng.sample(range(lo, hi), rng.randint(0, min(2, hi - lo)))))
            steps.append(Step("overwrite", table, f"k >= {lo} AND k < {hi}", keys=keys))
        else:
            keys = tuple(sorted(rng.sample(range(KEY_SPACE), rng.randint(1, 3))))
            wm = rng.choices(["update", "delete", "ignore"], weights=[6, 1, 1])[0]
            steps.append(Step("merge", table, keys=keys, when_matched=wm))
    if not cross_table:
        written = {s.table for s in steps if s.kind != "read"}
        for table in sorted({s.table for s in steps if s.kind == "read"} - written):
            steps.append(Step("append", table, n=1))
    return steps


@dataclass
class Run:
    """One transaction of the history: its program and what it observed."""

    idx: int
    program: list[Step]
    observed: list[Any] = field(default_factory=list)
    begin_version: int = -1
    committed_version: int | None = None
    outcome: str = "open"  # open | committed | read-only | conflict

    def acc(self) -> int:
        """A number derived from every observation so far (feeds the values written)."""
        h = 17 + self.idx
        for o in self.observed:
            h = (h * 31 + hash(o)) % 1_000_003
        return h % 1000


def execute(txn: Any, run: Run, step: Step, j: int) -> Any:
    """Run one step of ``run``'s program on ``txn``; returns the observation."""
    acc = run.acc()
    if step.kind == "read":
        return rows_of(txn, step.table, step.where)
    if step.kind == "append":
        base = 100_000 + run.idx * 100 + j * 10  # unique keys, never in KEY_SPACE
        return txn.append(step.table, table_of([(base + i, acc + i) for i in range(step.n)]))
    if step.kind == "delete":
        return txn.delete(step.table, step.where)
    if step.kind == "update":
        return txn.update(step.table, step.where, {"v": f"v + {acc + 1}"})
    if step.kind == "merge":
        src = table_of([(k, acc * 10 + i) for i, k in enumerate(step.keys)])
        r = txn.merge(step.table, src, on="k", when_matched=step.when_matched)
        return (r.inserted, r.updated, r.deleted)
    if step.kind == "overwrite":
        src = table_of([(k, acc * 10 + i) for i, k in enumerate(step.keys)])
        return txn.overwrite(step.table, src, where=step.where)
    if step.kind == "compact":
        txn.compact(step.table, target_file_bytes=1 << 20)
        return None  # its file counts depend on the layout, not on the rows
    raise AssertionError(step.kind)


# -- the scheduler -------------------------------------------------------------------------


@dataclass
class History:
    runs: list[Run]
    final: dict[str, Rows]
    lh_url: str
    conflicts: int


def run_history(
    lh: lakehouse.Lakehouse, seed: int, n: int, cross_table: bool, max_open: int = 5
) -> History:
    rng = random.Random(seed)
    runs = [Run(i, make_program(random.Random(seed * 1_000 + i), cross_table)) for i in range(n)]
    todo = list(runs)
    open_: list[tuple[Run, Any, int]] = []  # (run, txn, next step)
    conflicts = 0
    while todo or open_:
        choices = []
        if todo and len(open_) < max_open:
            choices += ["begin"] * 2
        if any(i < len(r.program) for r, _, i in open_):
            choices += ["step"] * 4
        if any(i == len(r.program) for r, _, i in open_):
            choices += ["commit"] * 2
        what = rng.choice(choices)
        if what == "begin":
            run = todo.pop(0)
            txn = lh.begin(SER)
            run.begin_version = txn.version
            open_.append((run, txn, 0))
        elif what == "step":
            pos = rng.choice([p for p, (r, _, i) in enumerate(open_) if i < len(r.program)])
            run, txn, i = open_[pos]
            run.observed.append(execute(txn, run, run.program[i], i))
            open_[pos] = (run, txn, i + 1)
        else:
            pos = rng.choice([p for p, (r, _, i) in enumerate(open_) if i == len(r.program)])
            run, txn, _ = open_.pop(pos)
            try:
                txn.commit()
            except lakehouse.RetryableConflict:
                run.outcome = "conflict"
                conflicts += 1
                assert txn.status == "rolled back"
            else:
                run.committed_version = txn.committed_version
                run.outcome = "read-only" if run.committed_version is None else "committed"
    final = {t: rows_of(lh, t) for t in TABLES}
    return History(runs, final, "", conflicts)


def replay_and_check(lh: lakehouse.Lakehouse, replay: lakehouse.Lakehouse, h: History) -> None:
    committed = sorted(
        (r for r in h.runs if r.outcome == "committed"), key=lambda r: r.committed_version or 0
    )
    versions = [r.committed_version for r in committed]
    assert len(set(versions)) == len(versions), "two transactions created one version"
    assert versions == list(range(replay.version + 1, replay.version + 1 + len(versions))), (
        "committed versions are not consecutive after the setup"
    )
    #: a replayed compaction may find nothing to do (another file layout) and create
    #: no version: replay versions then trail the original ones by this much
    lag = 0
    read_only: dict[int, list[Run]] = {}
    for r in h.runs:
        if r.outcome == "read-only":
            read_only.setdefault(r.begin_version, []).append(r)

    def check_read_only(at: int) -> None:
        """Read-only transactions that began at original version ``at``."""
        for r in read_only.pop(at, []):
            again = Run(r.idx, r.program)
            with replay.begin(SER) as txn:
                for j, step in enumerate(r.program):
                    again.observed.append(execute(txn, again, step, j))
            assert again.observed == r.observed, f"read-only transaction {r.idx} at v{at}"

    check_read_only(replay.version)
    for r in committed:
        again = Run(r.idx, r.program)
        txn = replay.begin(SER)
        for j, step in enumerate(r.program):
            again.observed.append(execute(txn, again, step, j))
        for j, (got, want) in enumerate(zip(again.observed, r.observed, strict=True)):
            assert got == want, (
                f"transaction {r.idx} (committed as v{r.committed_version}, began at "
                f"v{r.begin_version}) step {j} {r.program[j]} observed {want!r} but its serial "
                f"replay observes {got!r}: not serializable in version order"
            )
        v = txn.commit()
        if r.program[0].kind == "compact" and txn.committed_version is None:
            lag += 1
        assert v + lag == r.committed_version
        v = r.committed_version
        with lh.at_version(v) as orig:
            for t in sorted({s.table for s in r.program}):
                assert rows_of(replay, t) == rows_of(orig, t), (
                    f"{t} after v{v} (transaction {r.idx}) differs from the serial replay"
                )
        check_read_only(v)
    assert not read_only, f"read-only transactions never checked: {sorted(read_only)}"
    for t in TABLES:
        assert rows_of(replay, t) == h.final[t]


@pytest.fixture
def lakehouses() -> Iterator[tuple[lakehouse.Lakehouse, lakehouse.Lakehouse]]:
    tag = uuid.uuid4().hex
    a = lakehouse.open(f"memory://serial-{tag}-orig")
    b = lakehouse.open(f"memory://serial-{tag}-replay")
    try:
        yield a, b
    finally:
        a.close()
        b.close()


#: 3, 5 and 8 found overwrites beside reads failing with ValueError (fixed in a51e473)
SEEDS = [1, 3, 5]
CROSS_TABLE_SEEDS = [1, 2]
N = 60


#: inline.max_rows of the tables -> which kinds of data file the history must hold
#: (inline files, Parquet files): "0" writes Parquet only; "2" inlines writes of at
#: most 2 rows (appends, merges, overwrites and updates of 1-3 rows) and writes the
#: rest (the setup's 10-row files, larger updates, compactions) as Parquet, so
#: transactions read and change rows of both kinds; None: the default inlines
#: every write of this test (compactions still write Parquet)
LAYOUTS: dict[str | None, tuple[bool, bool]] = {
    "0": (False, True),
    "2": (True, True),
    None: (True, True),
}
LAYOUT = pytest.mark.parametrize(
    "max_rows", list(LAYOUTS), ids=["parquet", "mixed", "default-inline"]
)


def kinds_of_files(lh: lakehouse.Lakehouse, h: History) -> tuple[bool, bool]:
    """Whether any committed version of ``h`` held inline files, Parquet files."""
    inline = parquet = False
    for v in sorted({r.committed_version for r in h.runs if r.committed_version is not None}):
        with lh.at_version(v) as view:
            for t in TABLES:
                for f in view.list_data_files(t):
                    inline |= f.is_inline
                    parquet |= not f.is_inline
    return inline, parquet


def _one(
    lakehouses: tuple[Any, Any], seed: int, cross_table: bool, max_rows: str | None = None
) -> History:
    lh, replay = lakehouses
    setup(lh, max_rows)
    setup(replay, max_rows)
    h = run_history(lh, seed, N, cross_table)
    assert kinds_of_files(lh, h) == LAYOUTS[max_rows], (
        "the history's data files are not the layout's"
    )
    outcomes = {
        o: sum(r.outcome == o for r in h.runs) for o in ("committed", "conflict", "read-only")
    }
    assert outcomes["committed"] >= N // 4, outcomes
    replay_and_check(lh, replay, h)
    return h


@pytest.mark.slow
@LAYOUT
@pytest.mark.parametrize("seed", SEEDS)
def test_serializable_history_equals_serial_replay(
    lakehouses: Any, seed: int, max_rows: str | None
) -> None:
    h = _one(lakehouses, seed, cross_table=False, max_rows=max_rows)
    assert h.conflicts > 0, "the schedule should have produced some conflicts"


@pytest.mark.slow
@LAYOUT
@pytest.mark.parametrize("seed", CROSS_TABLE_SEEDS)
def test_serializable_cross_table_history_equals_serial_replay(
    lakehouses: Any, seed: int, max_rows: str | None
) -> None:
    """Transactions may read one table and write only the other (found: such reads
    were not checked at commit; fixed in bf6a36d)."""
    _one(lakehouses, seed, cross_table=True, max_rows=max_rows)


def test_replay_check_catches_a_lost_update(lakehouses: Any) -> None:
    """The checker itself: a history that is not serializable (two read-modify-write
    transactions on different tables, each reading the other's table) is refused."""
    lh, replay = lakehouses
    setup(lh)
    setup(replay)
    a = Run(0, [Step("read", "ns.t0", "k = 1"), Step("update", "ns.t1", "k = 1")])
    b = Run(1, [Step("read", "ns.t1", "k = 1"), Step("update", "ns.t0", "k = 1")])
    txns = []
    for r in (a, b):
        txn = lh.begin(lakehouse.Isolation.SNAPSHOT)  # SNAPSHOT: the write skew commits
        r.begin_version = txn.version
        txns.append(txn)
    for r, txn in zip((a, b), txns, strict=True):
        for j, step in enumerate(r.program):
            r.observed.append(execute(txn, r, step, j))
    for r, txn in zip((a, b), txns, strict=True):
        txn.commit()
        r.committed_version = txn.committed_version
        r.outcome = "committed"
    h = History([a, b], {t: rows_of(lh, t) for t in TABLES}, "", 0)
    with pytest.raises(AssertionError, match="not serializable"):
        replay_and_check(lh, replay, h)
