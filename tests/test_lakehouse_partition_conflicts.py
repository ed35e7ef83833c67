"""Per-row conflicts on partitioned tables: the data matrix, partition by partition.

tests/test_lakehouse_data_conflicts.py runs every cell of
:data:`lakehouse.conflicts.DATA` on an unpartitioned table. Here the same
protocol (two transactions begun at one version, *mine* runs its operation,
*theirs* runs and commits, then mine commits) runs on a table partitioned by
``p`` for every pair of the operations a pipeline uses on partitions
(append, overwrite where, replace_partitions, delete where, update where,
merge, compact), in three placements:

* ``other``: mine works in partition ``a``, theirs in partition ``b``.
  Writers of different partitions never conflict (issue 21: operations
  restricted to partitions "conflict only with writers of those partitions").
* ``same``: both in partition ``a``, on different rows. The per-row matrix
  still applies inside a partition: only ``replace_partitions`` (which
  replaces every row of the partition) and two compactions of the same files
  collide.
* ``overlap``: both on the same rows of ``a``.

The expected outcome of every cell is written out in :data:`EXPECTED` (a
table, not computed): ``S`` commits with the rows of the serial execution
(theirs, then mine), ``R`` raises RetryableConflict (nothing of mine visible,
its files deleted, and the re-run commits with the serial result), ``E``
commits with mine's row changes applied by position (SNAPSHOT: a delete or
update does not care about rows appended meanwhile); ``E/R`` and ``S/R`` read
SNAPSHOT / SERIALIZABLE.

The matrix runs on two layouts of the same rows: ``flat`` (one spec,
``partition_by=["p"]``) and ``evolved`` (files written under ``["p"]`` and,
after ``alter_table``, under ``["p", "truncate(50, k)"]``), so a partition of
the current spec holds rows of files of both specs. Then: a concurrent
``alter_table(partition_by=...)`` against each operation, and named scenarios
(new partitions, null partitions, rows moving between partitions, bucket
partitions).

The base table ``ns.t`` (``k`` int64, ``v`` int64, ``p`` string) holds
partition ``a``: keys 10..80, ``b``: keys 110..180 (step 10), in six small
files. Regions: R1 = a, keys 10..29; R2 = a, keys 30..49; RB = b, keys
110..129; free (odd) keys inside a region are what appends and merges insert.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest

import lakehouse

SNAP = lakehouse.Isolation.SNAPSHOT
SER = lakehouse.Isolation.SERIALIZABLE
ISOS = pytest.mark.parametrize("iso", [SNAP, SER], ids=["snapshot", "serializable"])

T = "ns.t"
SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.int64()), ("p", pa.string())])
#: compaction target: every file is small, a partition compacts into one file
SMALL_TARGET = 1 << 20
MINE, THEIRS = 1_000_000, 2_000_000

Row = tuple[int, int, str | None]
Rows = list[Row]
PartFn = Callable[[Row], tuple[Any, ...]]

#: the partition of a row under each spec the tests use (the model's own
#: arithmetic: identity and truncate are simple enough to state here)
SPECS: dict[tuple[str, ...], PartFn] = {
    ("p",): lambda r: (r[2],),
    ("p", "truncate(50, k)"): lambda r: (r[2], r[0] - r[0] % 50),
    ("truncate(50, k)",): lambda r: (r[0] - r[0] % 50,),
    (): lambda r: (),
}


def table_of(rows: Rows) -> pa.Table:
    return pa.table(
        {
            "k": [r[0] for r in rows],
            "v": [r[1] for r in rows],
            "p": [r[2] for r in rows],
        },
        schema=SCHEMA,
    )


def rows_of(view: Any, **kw: Any) -> Rows:
    t = view.read(T, columns=["k", "v", "p"], **kw)
    cols = [t.column(c).to_pylist() for c in ("k", "v", "p")]
    return sorted(zip(*cols, strict=True), key=repr)


def srt(rows: Rows) -> Rows:
    return sorted(rows, key=repr)


def data_files(lh: lakehouse.Lakehouse) -> set[str]:
    return set(lh.data_store.list(""))


def part_fn(view: Any) -> PartFn:
    """The model's partition function for the table's current spec."""
    return SPECS[tuple(view.describe_table(T).partition_by)]


def assert_files_hold_one_partition(lh: lakehouse.Lakehouse) -> None:
    """Every live file's rows lie in the file's own partition (from its stats)."""
    for f in lh.list_data_files(T):
        part = f.partition
        if "p" in part:
            s = f.stats["p"]
            assert (s.min, s.max) == (part["p"], part["p"]) or (
                part["p"] is None and s.null_count == f.rows
            ), f"{f.path}: partition {part}, p in [{s.min}, {s.max}]"
        if "k_trunc" in part:
            s = f.stats["k"]
            lo, hi = s.min - s.min % 50, s.max - s.max % 50
            assert lo == hi == part["k_trunc"], f"{f.path}: partition {part}, k {s.min}..{s.max}"


# -- the base lakehouse -------------------------------------------------------------------

#: the base appends, one file each; ``evolved`` changes the spec at the marker
BATCHES: list[tuple[list[int], str] | None] = [
    ([10, 20], "a"),
    ([110, 120], "b"),
    ([30, 40], "a"),
    ([130, 140], "b"),
    None,  # evolved: alter_table(partition_by=EVOLVED) here
    ([50, 60], "a"),
    ([150, 160], "b"),
    ([70, 80], "a"),
    ([170, 180], "b"),
    ([42, 44], "a"),
]
EVOLVED = ["p", "truncate(50, k)"]
#: automatic compaction off: the versions of a pair are exactly the ones it commits
#: (tests/test_lakehouse_partition_crash.py and the scenarios below turn it on)
NO_AUTO = {"compaction.auto": "false"}


def base_rows(keys: list[int], p: str) -> Rows:
    return [(k, k * 10, p) for k in keys]


@dataclass
class Base:
    lh: lakehouse.Lakehouse
    states: dict[int, Rows]

    def __repr__(self) -> str:
        return f"<Base {self.lh!r}>"

    @property
    def head(self) -> Rows:
        return self.states[self.lh.version]


def make_base(lh: lakehouse.Lakehouse, layout: str, properties: dict[str, str] = NO_AUTO) -> Base:
    """``flat``: every file under ``["p"]``. ``evolved``: the first four under
    ``["p"]``, the rest under ``["p", "truncate(50, k)"]``. Every partition of every
    spec holds at least two small files, so a compaction always has work."""
    with lh.begin() as txn:
        txn.create_namespace("ns")
        txn.create_table(T, SCHEMA, properties, partition_by=["p"])
    cur: Rows = []
    for batch in BATCHES:
        if batch is None:
            if layout == "evolved":
                with lh.begin() as txn:
                    txn.alter_table(T, partition_by=EVOLVED)
            continue
        keys, p = batch
        with lh.begin() as txn:
            txn.append(T, table_of(base_rows(keys, p)))
        cur = srt(cur + base_rows(keys, p))
    assert rows_of(lh) == cur
    files = lh.list_data_files(T)
    assert len(files) == len(BATCHES) - 1
    specs = {f.spec_id for f in files}
    assert specs == ({0} if layout == "flat" else {0, 1})
    assert_files_hold_one_partition(lh)
    return Base(lh, {lh.version: cur})


@pytest.fixture
def lh() -> Iterator[lakehouse.Lakehouse]:
    h = lakehouse.open(f"memory://partition-conflicts-{uuid.uuid4().hex}")
    try:
        yield h
    finally:
        h.close()


# -- operations and their serial models ---------------------------------------------------


@dataclass(frozen=True)
class Region:
    p: str
    lo: int
    hi: int

    @property
    def where(self) -> str:
        return f"p = '{self.p}' AND k >= {self.lo} AND k <= {self.hi}"

    def has(self, r: Row) -> bool:
        return r[2] == self.p and self.lo <= r[0] <= self.hi

    @property
    def first(self) -> int:
        """The region's first existing key (every region starts at a base key)."""
        return self.lo

    @property
    def free(self) -> list[int]:
        return [self.lo + 1, self.lo + 3]


R1 = Region("a", 10, 29)
R2 = Region("a", 30, 49)
RB = Region("b", 110, 129)


@dataclass
class Op:
    name: str
    apply: Callable[[lakehouse.Transaction], Any]
    #: (rows before, partition function of the spec current when it runs) -> rows after
    model: Callable[[Rows, PartFn], Rows]


def compact_op(region: Region) -> Op:
    """A compaction of the region's partition (``where`` over the partition column)."""
    return Op(
        "compact",
        lambda t: t.compact(T, target_file_bytes=SMALL_TARGET, where=f"p = '{region.p}'"),
        lambda s, _: s,
    )


def build_op(name: str, offset: int, r: Region) -> Op:
    """Operation ``name`` on region ``r``; new values carry ``offset``."""
    new: Rows
    if name == "append":
        new = [(k, offset + k, r.p) for k in r.free]
        return Op(name, lambda t: t.append(T, table_of(new)), lambda s, _: srt(s + new))
    if name == "overwrite":
        new = [(r.first, offset + r.first, r.p), (r.free[0], offset + r.free[0], r.p)]
        return Op(
            name,
            lambda t: t.overwrite(T, table_of(new), where=r.where),
            lambda s, _: srt([x for x in s if not r.has(x)] + new),
        )
    if name == "replace_partitions":
        new = [(r.first, offset + r.first, r.p), (r.free[0], offset + r.free[0], r.p)]

        def model_replace(s: Rows, part: PartFn) -> Rows:
            gone = {part(x) for x in new}
            return srt([x for x in s if part(x) not in gone] + new)

        return Op(name, lambda t: t.replace_partitions(T, table_of(new)), model_replace)
    if name == "delete":
        return Op(name, lambda t: t.delete(T, r.where), lambda s, _: [x for x in s if not r.has(x)])
    if name == "update":

        def model_update(s: Rows, _: PartFn) -> Rows:
            return srt([(x[0], x[1] + offset, x[2]) if r.has(x) else x for x in s])

        return Op(name, lambda t: t.update(T, r.where, {"v": f"v + {offset}"}), model_update)
    if name == "merge":
        src: Rows = [(r.first, offset + r.first, r.p), (r.free[0], offset + r.free[0], r.p)]

        def model_merge(s: Rows, _: PartFn) -> Rows:
            keys = {x[0] for x in src}
            return srt([x for x in s if x[0] not in keys] + src)

        return Op(name, lambda t: t.merge(T, table_of(src), on="k"), model_merge)
    if name == "compact":
        return compact_op(r)
    raise AssertionError(f"no builder for {name!r}")


def model(ops: list[Op], state: Rows, part: PartFn) -> Rows:
    for op in ops:
        state = op.model(state, part)
    return srt(state)


def effects(ops: list[Op], before: Rows, on: Rows, part: PartFn) -> Rows:
    """``ops``' changes computed on ``before`` (rows removed, rows added), applied to
    ``on``: what a rebase that keeps positions (not predicates) produces."""
    after = Counter(model(ops, before, part))
    was = Counter(before)
    removed, added = was - after, after - was
    return srt(list(((Counter(on) - removed) + added).elements()))


# -- running a pair -----------------------------------------------------------------------


@dataclass
class PairResult:
    theirs_version: int
    theirs_state: Rows
    mine_files: set[str]
    error: BaseException | None
    mine: lakehouse.Transaction
    before: Rows


def run_pair(
    base: Base,
    mine_ops: list[Op],
    theirs_fn: Callable[[lakehouse.Transaction], Any],
    theirs_model: Callable[[Rows, PartFn], Rows] | None,
    iso: lakehouse.Isolation = SNAP,
) -> PairResult:
    lh = base.lh
    v0 = lh.version
    before = base.head
    part = part_fn(lh)
    mine = lh.begin(iso)
    theirs = lh.begin(iso)
    assert mine.version == theirs.version == v0
    files0 = data_files(lh)
    for op in mine_ops:
        op.apply(mine)
    mine_files = data_files(lh) - files0
    files1 = data_files(lh)
    theirs_fn(theirs)
    vt = theirs.commit()
    assert vt == v0 + 1
    theirs_state = rows_of(lh)
    base.states[vt] = theirs_state
    if theirs_model is not None:
        assert theirs_state == srt(theirs_model(before, part))
    assert not (data_files(lh) - files1) & mine_files
    error: BaseException | None = None
    try:
        vm = mine.commit()
    except lakehouse.CommitConflict as exc:
        error = exc
    else:
        assert vm == vt + 1, "mine changed rows, so it must create a version"
        base.states[vm] = rows_of(lh)
    return PairResult(vt, theirs_state, mine_files, error, mine, before)


def assert_files_live(lh: lakehouse.Lakehouse) -> None:
    """Every file the head references exists (an inline file's rows are in its
    record: it is never a file in storage)."""
    left = data_files(lh)
    for f in lh.list_data_files(T):
        if f.is_inline:
            assert f.path not in left, f"inline file {f.path} is in storage"
            continue
        assert f.path in left, f"live file {f.path} is missing"


def assert_rows(base: Base, expected: Rows) -> None:
    lh = base.lh
    got = rows_of(lh)
    expected = srt(expected)
    assert got == expected, (
        f"\n  missing: {srt(list((Counter(expected) - Counter(got)).elements()))}"
        f"\n  extra:   {srt(list((Counter(got) - Counter(expected)).elements()))}"
    )
    assert lh.table_stats(T).rows == len(expected)
    assert_files_live(lh)
    assert_files_hold_one_partition(lh)


def assert_nothing_of_mine(base: Base, res: PairResult) -> None:
    lh = base.lh
    assert isinstance(res.error, lakehouse.RetryableConflict), res.error
    assert not isinstance(res.error, lakehouse.IncompatibleConflict)
    assert res.mine.status == "rolled back"
    assert lh.version == res.theirs_version
    assert rows_of(lh) == res.theirs_state
    assert not res.mine_files & data_files(lh), "the aborted transaction left files behind"
    assert_files_live(lh)


def rerun(base: Base, ops: list[Op], iso: lakehouse.Isolation, res: PairResult) -> None:
    """Retryable means: re-running on the latest version commits the serial result."""
    lh = base.lh
    with lh.begin(iso) as again:
        for op in ops:
            op.apply(again)
    assert_rows(base, model(ops, res.theirs_state, part_fn(lh)))


# -- the expected outcomes ----------------------------------------------------------------

OPS = ("append", "overwrite", "replace_partitions", "delete", "update", "merge", "compact")

#: mine (rows) x theirs (columns) -> outcome, per placement. S: serial, R: retry,
#: E: mine's effects by position; "x/y": SNAPSHOT x, SERIALIZABLE y.
_GRIDS = {
    # writers of different partitions never conflict
    "other": """
        append             S  S  S  S  S  S  S
        overwrite          S  S  S  S  S  S  S
        replace_partitions S  S  S  S  S  S  S
        delete             S  S  S  S  S  S  S
        update             S  S  S  S  S  S  S
        merge              S  S  S  S  S  S  S
        compact            S  S  S  S  S  S  S
    """,
    # one partition, different rows: replace_partitions covers every row of the
    # partition; two compactions take the same files
    "same": """
        append             S  S  S  S  S  S  S
        overwrite          S  S  R  S  S  S  S
        replace_partitions R  R  R  R  R  R  S
        delete             S  S  R  S  S  S  S
        update             S  S  R  S  S  S  S
        merge              S  S  R  S  S  S  S
        compact            S  S  S  S  S  S  R
    """,
    # the same rows: the unpartitioned matrix's overlap outcomes
    "overlap": """
        append             S    S  S  S    S  S  S
        overwrite          R    R  R  R    R  R  S
        replace_partitions R    R  R  R    R  R  S
        delete             E/R  R  R  S/R  R  R  S
        update             E/R  R  R  R    R  R  S
        merge              R    R  R  R    R  R  S
        compact            S    S  S  S    S  S  R
    """,
}


def _parse(grid: str) -> dict[tuple[str, str], tuple[str, str]]:
    out = {}
    for line in grid.strip().splitlines():
        mine, *cells = line.split()
        assert mine in OPS and len(cells) == len(OPS), line
        for theirs, cell in zip(OPS, cells, strict=True):
            snap, _, ser = cell.partition("/")
            out[(mine, theirs)] = (snap, ser or snap)
    return out


EXPECTED: dict[str, dict[tuple[str, str], tuple[str, str]]] = {
    placement: _parse(grid) for placement, grid in _GRIDS.items()
}

REGIONS = {"other": (R1, RB), "same": (R1, R2), "overlap": (R1, R1)}
CELLS = [
    (placement, mine, theirs)
    for placement in ("other", "same", "overlap")
    for mine in OPS
    for theirs in OPS
]


def test_expectations_cover_every_pair() -> None:
    for placement in REGIONS:
        assert set(EXPECTED[placement]) == {(m, t) for m in OPS for t in OPS}
    # appends never conflict; other partitions never conflict
    assert all(EXPECTED["other"][k] == ("S", "S") for k in EXPECTED["other"])
    assert all(EXPECTED[p][("append", t)] == ("S", "S") for p in REGIONS for t in OPS)


def check_cell(
    base: Base, placement: str, mine_name: str, theirs_name: str, iso: lakehouse.Isolation
) -> None:
    rm, rt = REGIONS[placement]
    mine_ops = [build_op(mine_name, MINE, rm)]
    theirs_op = build_op(theirs_name, THEIRS, rt)
    res = run_pair(base, mine_ops, theirs_op.apply, theirs_op.model, iso)
    snap, ser = EXPECTED[placement][(mine_name, theirs_name)]
    expect = snap if iso is SNAP else ser
    what = f"{mine_name} vs {theirs_name} ({placement}, {iso.value})"
    if expect == "R":
        assert res.error is not None, f"{what} should retry, but it committed"
        assert_nothing_of_mine(base, res)
        rerun(base, mine_ops, iso, res)
        return
    assert res.error is None, f"{what} should commit: {res.error!r}"
    part = part_fn(base.lh)
    if expect == "S":
        assert_rows(base, model(mine_ops, res.theirs_state, part))
    else:
        assert_rows(base, effects(mine_ops, res.before, res.theirs_state, part))
    with base.lh.at_version(res.theirs_version) as view:
        assert rows_of(view) == res.theirs_state


def cell_id(c: tuple[str, str, str]) -> str:
    return f"{c[0]}-{c[1]}-vs-{c[2]}"


@ISOS
@pytest.mark.parametrize("cell", CELLS, ids=[cell_id(c) for c in CELLS])
def test_partition_cell(lh: lakehouse.Lakehouse, cell: tuple[str, str, str], iso: Any) -> None:
    """Every cell on the flat layout (one spec), both isolation levels."""
    check_cell(make_base(lh, "flat"), *cell, iso)


@pytest.mark.parametrize("cell", CELLS, ids=[cell_id(c) for c in CELLS])
def test_partition_cell_across_specs(lh: lakehouse.Lakehouse, cell: tuple[str, str, str]) -> None:
    """Every cell on the evolved layout: a partition's rows in files of two specs."""
    check_cell(make_base(lh, "evolved"), *cell, SNAP)


# -- a concurrent alter_table(partition_by=...) --------------------------------------------

#: my operation vs a concurrent change of the partition spec: writers of rows
#: (split by the spec they began with) retry; deletes and compactions go on
EVOLUTION_EXPECTED = {
    "append": "R",
    "overwrite": "R",
    "replace_partitions": "R",
    "delete": "S",
    "update": "R",
    "merge": "R",
    "compact": "S",
}
EVOLUTIONS = {
    "add-truncate": EVOLVED,
    "truncate-only": ["truncate(50, k)"],
    "unpartitioned": [],
}


@pytest.mark.parametrize("evolution", sorted(EVOLUTIONS))
@pytest.mark.parametrize("mine_name", OPS)
def test_operation_vs_concurrent_partition_evolution(
    lh: lakehouse.Lakehouse, mine_name: str, evolution: str
) -> None:
    base = make_base(lh, "flat")
    spec = EVOLUTIONS[evolution]
    mine_ops = [build_op(mine_name, MINE, R1)]
    res = run_pair(
        base,
        mine_ops,
        lambda t: t.alter_table(T, partition_by=spec),
        lambda s, _: s,
    )
    assert tuple(lh.describe_table(T).partition_by) == tuple(spec)
    before_files = {f.path for f in lh.list_data_files(T)}
    if EVOLUTION_EXPECTED[mine_name] == "R":
        assert res.error is not None, f"{mine_name} vs a new spec should retry"
        assert_nothing_of_mine(base, res)
        rerun(base, mine_ops, SNAP, res)
        # the re-run wrote under the new spec
        new = [f for f in lh.list_data_files(T) if f.path not in before_files]
        assert new and {f.spec_id for f in new} == {1}
    else:
        assert res.error is None, f"{mine_name} vs a new spec should commit: {res.error!r}"
        assert_rows(base, model(mine_ops, res.theirs_state, SPECS[("p",)]))
    assert tuple(lh.describe_table(T).partition_by) == tuple(spec)
    # time travel across the evolution
    with lh.at_version(res.theirs_version - 1) as view:
        assert rows_of(view) == res.before
        assert tuple(view.describe_table(T).partition_by) == ("p",)


@pytest.mark.parametrize("theirs_name", OPS)
def test_partition_evolution_commits_over_concurrent_data_change(
    lh: lakehouse.Lakehouse, theirs_name: str
) -> None:
    """The reverse: my alter_table(partition_by=...) never conflicts with a version
    that changed only rows; the rows are theirs, the spec mine."""
    base = make_base(lh, "flat")
    theirs_op = build_op(theirs_name, THEIRS, R1)
    alter = Op("alter", lambda t: t.alter_table(T, partition_by=EVOLVED), lambda s, _: s)
    res = run_pair(base, [alter], theirs_op.apply, theirs_op.model)
    assert res.error is None, res.error
    assert rows_of(lh) == res.theirs_state
    assert tuple(lh.describe_table(T).partition_by) == tuple(EVOLVED)
    # new writes go to the new spec and keep one partition per file
    lh.append(T, table_of([(31, 7, "a"), (77, 7, "a"), (111, 7, "b")]))
    new = [f for f in lh.list_data_files(T) if f.spec_id == 1]
    assert {(f.partition["p"], f.partition["k_trunc"]) for f in new} >= {
        ("a", 0),
        ("a", 50),
        ("b", 100),
    }
    assert_files_hold_one_partition(lh)


# -- named scenarios ----------------------------------------------------------------------


def two(lh: lakehouse.Lakehouse, iso: Any = SNAP) -> tuple[Any, Any]:
    a, b = lh.begin(iso), lh.begin(iso)
    assert a.version == b.version
    return a, b


ORDERS = pytest.mark.parametrize("a_first", [True, False], ids=["a-first", "b-first"])


@ORDERS
def test_two_replace_partitions_of_a_new_partition(lh: lakehouse.Lakehouse, a_first: bool) -> None:
    """Both fill partition ``c``, empty when they began: a serial execution keeps
    one writer's rows only, so the second must retry (no phantom partition)."""
    base = make_base(lh, "flat")
    a, b = two(lh)
    a.replace_partitions(T, table_of([(300, 1, "c"), (301, 1, "c")]))
    b.replace_partitions(T, table_of([(302, 2, "c")]))
    first, second = (a, b) if a_first else (b, a)
    first.commit()
    with pytest.raises(lakehouse.RetryableConflict):
        second.commit()
    want: Rows = [(300, 1, "c"), (301, 1, "c")] if a_first else [(302, 2, "c")]
    assert_rows(base, base.states[lh.version - 1] + want)


@ORDERS
def test_append_to_a_new_partition_vs_its_replacement(
    lh: lakehouse.Lakehouse, a_first: bool
) -> None:
    """An append into partition ``c`` and a replace_partitions of ``c``: the append
    always commits; the replacement retries when the append came first."""
    base = make_base(lh, "flat")
    before = base.head
    a, b = two(lh)
    a.append(T, table_of([(300, 1, "c")]))
    b.replace_partitions(T, table_of([(302, 2, "c")]))
    if a_first:
        a.commit()
        with pytest.raises(lakehouse.RetryableConflict):
            b.commit()
        assert_rows(base, [*before, (300, 1, "c")])
    else:
        b.commit()
        a.commit()
        assert_rows(base, [*before, (300, 1, "c"), (302, 2, "c")])


@pytest.mark.parametrize("into", ["replaced", "other"])
def test_replace_of_several_partitions_vs_append(lh: lakehouse.Lakehouse, into: str) -> None:
    """One replace_partitions over partitions a and c; a concurrent append into one
    of them makes it retry, into another partition (b) not."""
    base = make_base(lh, "flat")
    before = base.head
    a, b = two(lh)
    a.replace_partitions(T, table_of([(1, 1, "a"), (301, 1, "c")]))
    p = "c" if into == "replaced" else "b"
    b.append(T, table_of([(5, 5, p)]))
    b.commit()
    if into == "replaced":
        with pytest.raises(lakehouse.RetryableConflict):
            a.commit()
        assert_rows(base, [*before, (5, 5, "c")])
    else:
        a.commit()
        kept = [r for r in before if r[2] != "a"]
        assert_rows(base, [*kept, (5, 5, "b"), (1, 1, "a"), (301, 1, "c")])


@pytest.mark.parametrize("theirs_p", [None, "a"], ids=["null", "a"])
def test_null_partition_is_a_partition(lh: lakehouse.Lakehouse, theirs_p: str | None) -> None:
    """replace_partitions of the null partition conflicts with inserts of nulls only."""
    base = make_base(lh, "flat")
    lh.append(T, table_of([(900, 0, None), (901, 0, None)]))
    before = rows_of(lh)
    base.states[lh.version] = before
    a, b = two(lh)
    a.replace_partitions(T, table_of([(902, 1, None)]))
    b.append(T, table_of([(903, 2, theirs_p)]))
    b.commit()
    if theirs_p is None:
        with pytest.raises(lakehouse.RetryableConflict):
            a.commit()
        assert_rows(base, [*before, (903, 2, None)])
    else:
        a.commit()
        kept = [r for r in before if r[2] is not None]
        assert_rows(base, [*kept, (903, 2, "a"), (902, 1, None)])


@ORDERS
def test_update_moving_rows_into_a_replaced_partition(
    lh: lakehouse.Lakehouse, a_first: bool
) -> None:
    """a: an update moves rows 10, 20 from partition a to b; b: replace_partitions of
    b. b after a: the rows a moved into b are inserts b's replacement should have
    covered, so b retries. a after b: a read partition a only, b changed partition b
    only: both commit, as the serial order b, a."""
    base = make_base(lh, "flat")
    before = base.head
    a, b = two(lh)
    assert a.update(T, "p = 'a' AND k < 30", {"p": "'b'"}) == 2
    b.replace_partitions(T, table_of([(500, 5, "b")]))
    moved: Rows = [(k, v, "b") for k, v, p in before if p == "a" and k < 30]
    if a_first:
        a.commit()
        with pytest.raises(lakehouse.RetryableConflict):
            b.commit()
        assert_rows(base, [r for r in before if not (r[2] == "a" and r[0] < 30)] + moved)
    else:
        b.commit()
        a.commit()
        kept = [r for r in before if r[2] == "a" and r[0] >= 30]
        assert_rows(base, [*kept, (500, 5, "b"), *moved])


@ISOS
@pytest.mark.parametrize("where_has_p", [True, False], ids=["where-p", "where-k-only"])
def test_delete_of_one_partition_vs_append_to_another(
    lh: lakehouse.Lakehouse, iso: Any, where_has_p: bool
) -> None:
    """The rows decide, not how the where is written: a delete of partition a's rows
    (by p or by k only) and an append to b commit in both isolation levels."""
    base = make_base(lh, "flat")
    before = base.head
    a, b = two(lh, iso)
    a.delete(T, "p = 'a'" if where_has_p else "k < 100")
    b.append(T, table_of([(5000, 1, "b")]))
    b.commit()
    a.commit()
    assert_rows(base, [r for r in before if r[2] != "a"] + [(5000, 1, "b")])


def test_bucket_partitions_conflict_by_bucket(lh: lakehouse.Lakehouse) -> None:
    """replace_partitions on ``bucket(4, k)``: two writers of different buckets both
    commit; of the same bucket the second retries. The buckets are read back from
    the files (black-box)."""
    with lh.begin() as txn:
        txn.create_namespace("ns")
        txn.create_table(T, SCHEMA, partition_by=["bucket(4, k)"])
    for k in range(16):  # one file per key: its bucket is the file's partition
        lh.append(T, table_of([(k, 0, "x")]))
    by_bucket: dict[int, list[int]] = {}
    for f in lh.list_data_files(T):
        assert f.stats["k"].min == f.stats["k"].max
        by_bucket.setdefault(f.partition["k_bucket"], []).append(f.stats["k"].min)
    assert len(by_bucket) >= 2 and sum(map(len, by_bucket.values())) == 16
    by_bucket = {b: sorted(ks) for b, ks in by_bucket.items() if len(ks) >= 2}
    assert len(by_bucket) >= 2
    (_, keys0), (_, keys1) = sorted(by_bucket.items())[:2]
    # different buckets: both commit
    a, b = two(lh)
    a.replace_partitions(T, table_of([(keys0[0], 1, "a")]))
    b.replace_partitions(T, table_of([(keys1[0], 2, "b")]))
    b.commit()
    a.commit()
    got = {r[0]: r for r in rows_of(lh)}
    assert got[keys0[0]] == (keys0[0], 1, "a") and got[keys1[0]] == (keys1[0], 2, "b")
    assert not set(keys0[1:]) & set(got) and not set(keys1[1:]) & set(got)
    # the same bucket (different keys): the second retries
    a, b = two(lh)
    a.replace_partitions(T, table_of([(keys0[0], 3, "a")]))
    b.replace_partitions(T, table_of([(keys0[1], 4, "b")]))
    before = rows_of(lh)
    b.commit()
    with pytest.raises(lakehouse.RetryableConflict):
        a.commit()
    assert rows_of(lh) == srt([r for r in before if r[0] != keys0[0]] + [(keys0[1], 4, "b")])


@ORDERS
def test_compactions_of_different_partitions_both_commit(
    lh: lakehouse.Lakehouse, a_first: bool
) -> None:
    """Per-partition compaction scope (``partition=`` and ``where=``): compactions of
    a and of b never collide; a third compaction of a, begun with them, retries."""
    base = make_base(lh, "flat")
    before = base.head
    a, b = two(lh)
    c = lh.begin()
    assert a.compact(T, target_file_bytes=SMALL_TARGET, partition={"p": "a"}).files_removed == 5
    assert b.compact(T, target_file_bytes=SMALL_TARGET, where="p = 'b'").files_removed == 4
    assert c.compact(T, target_file_bytes=SMALL_TARGET, where="p = 'a'").files_removed == 5
    first, second = (a, b) if a_first else (b, a)
    first.commit()
    second.commit()
    assert_rows(base, before)
    parts = Counter(f.partition["p"] for f in lh.list_data_files(T))
    assert parts == {"a": 1, "b": 1}
    with pytest.raises(lakehouse.RetryableConflict):
        c.commit()
    assert_rows(base, before)


# -- background compaction ----------------------------------------------------------------

AUTO = {"compaction.auto": "true", "compaction.min-files": "2"}


def enable_auto(lh: lakehouse.Lakehouse) -> None:
    with lh.begin() as txn:
        txn.alter_table(T, set_properties=AUTO)


def compactions_since(lh: lakehouse.Lakehouse, version: int) -> list[int]:
    """The versions after ``version`` that compacted (only the compactor ran one)."""
    return [
        h.version
        for h in lh.history()
        if h.version > version and any(c.op == "compact" for c in h.changes)
    ]


#: an overwrite, merge or SERIALIZABLE read checks the rows the append inserted where
#: the compaction moved them (before 2038afb: "added data file ..., since removed")
BACKGROUND_CASES = [
    pytest.param(name, iso, id=f"{name}-{iso.value}")
    for name in ("append", "overwrite", "delete", "update", "merge")
    for iso in (SNAP, SER)
]


@pytest.mark.parametrize(("mine_name", "iso"), BACKGROUND_CASES)
def test_writer_commits_over_background_compaction(
    lh: lakehouse.Lakehouse, mine_name: str, iso: Any
) -> None:
    """Mine changes rows 10..29 of partition a; meanwhile an append to a (another key)
    makes the writer compact the table's partitions with small files in the background
    (the first commit of a writer queues a sweep of the table), rewriting the files mine
    changes. Compaction never fails a writer: mine commits, its changes following the
    rows into the compacted file, with the serial result."""
    base = make_base(lh, "flat")
    enable_auto(lh)
    before = rows_of(lh)
    mine_ops = [build_op(mine_name, MINE, R1)]
    mine = lh.begin(iso)
    for op in mine_ops:
        op.apply(mine)
    extra: Rows = [(61, 1, "a")]
    for r in extra:
        lh.append(T, table_of([r]))
    assert lh.wait_for_compaction(timeout=120)
    assert compactions_since(lh, mine.version), "no background compaction ran"
    a_files = [f for f in lh.list_data_files(T) if f.partition["p"] == "a"]
    assert len(a_files) == 1, "the background compaction did not take partition a"
    theirs_state = srt(before + extra)
    assert rows_of(lh) == theirs_state
    mine.commit()
    assert lh.wait_for_compaction(timeout=120)
    base.states[lh.version] = rows_of(lh)
    assert_rows(base, model(mine_ops, theirs_state, part_fn(lh)))


def test_replace_partitions_commits_over_background_compaction(lh: lakehouse.Lakehouse) -> None:
    """An append to partition a queues a background compaction; mine begins right
    after it and replaces partition a. Whether the compaction commits before mine
    began or while mine runs, mine commits and partition a holds its rows only."""
    base = make_base(lh, "flat")
    before = base.head
    enable_auto(lh)
    v0 = lh.version
    extra: Rows = [(61, 1, "a")]
    for r in extra:
        lh.append(T, table_of([r]))
    mine = lh.begin()
    mine.replace_partitions(T, table_of([(999, 9, "a")]))
    assert lh.wait_for_compaction(timeout=120)
    assert compactions_since(lh, v0)
    mine.commit()
    assert lh.wait_for_compaction(timeout=120)
    want = [r for r in srt(before + extra) if r[2] != "a"] + [(999, 9, "a")]
    base.states[lh.version] = rows_of(lh)
    assert_rows(base, want)
