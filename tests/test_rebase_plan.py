"""The rebase planner (lakehouse/data/rebase_plan.py) on in-memory inputs.

Each case hands :func:`plan` a table write (a frozen ``TableIntent``), the
table's files at the head (a dict) and the concurrent versions' changes
(hand-built ``TableChange``/``Rewrite`` values), and states the plan exactly:
the deletion vectors written, the files removed, the record entry, or the
conflict. No kvstore, no object store, no Parquet file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pytest
from pyroaring import BitMap, FrozenBitMap

from lakehouse import conflicts, keys
from lakehouse.data import dv as dvfmt
from lakehouse.data import record
from lakehouse.data.predicate import parse_where
from lakehouse.data.rebase import kv_writes
from lakehouse.data.rebase_plan import (
    Conflict,
    Rebased,
    VersionRows,
    changes_to,
    plan,
    plan_reads,
    translate,
    untranslate,
)
from lakehouse.data.table import FileState, TableIntent, TableWrite
from lakehouse.model import DataFile, Isolation, Rewrite, TableChange, VersionInfo

NS, NAME = "ns", "t"
TABLE = f"{NS}.{NAME}"
AGAIN = "; re-run this transaction on the latest version"


def file(fid: str, rows: int = 10) -> DataFile:
    return DataFile(path=f"{fid}.parquet", record_count=rows, file_id=fid)


def bm(*positions: int) -> BitMap:
    return BitMap(positions)


def enc(*positions: int) -> bytes:
    return dvfmt.encode(BitMap(positions))


def rewrite(new_id: str, *sources: tuple[str, int, Iterable[int]]) -> Rewrite:
    """A compaction output: ``(source, rows, positions deleted at planning)``."""
    return Rewrite(new_id, tuple((s, n, dvfmt.encode(BitMap(dv))) for s, n, dv in sources))


def intent(
    *ops: str,
    deletes: Mapping[str, Iterable[int]] = {},
    updated: Mapping[str, Iterable[int]] = {},
    removed: Iterable[str] = (),
    added: Iterable[str] = (),
    added_dvs: Mapping[str, Iterable[int]] = {},
    rewrites: Sequence[Rewrite] = (),
    post: Iterable[str] = (),
) -> TableIntent:
    w = TableWrite(NS, NAME, ops=list(ops))
    w.added = {fid: file(fid) for fid in added}
    w.added_dvs = {fid: BitMap(p) for fid, p in added_dvs.items()}
    w.removed = {fid: file(fid) for fid in removed}
    w.deletes = {fid: BitMap(p) for fid, p in deletes.items()}
    w.updated = {fid: BitMap(p) for fid, p in updated.items()}
    w.rewrites = list(rewrites)
    w.post = set(post)
    return w.freeze()


def change(
    *ops: str,
    deleted: Mapping[str, Iterable[int]] = {},
    removed: Iterable[str] = (),
    added: Iterable[str] = (),
    rewrites: Sequence[Rewrite] = (),
) -> TableChange:
    return TableChange(
        table=TABLE,
        ops=ops,
        added=tuple(added),
        removed=tuple(removed),
        deleted={fid: dvfmt.encode(BitMap(p)) for fid, p in deleted.items()},
        rewrites=tuple(rewrites),
    )


def head(**files: Iterable[int] | tuple[int, Iterable[int]]) -> dict[str, FileState]:
    """``a=[1, 2]``: file a (10 rows) with positions 1, 2 deleted; ``x=(6, [])``: 6 rows."""
    out: dict[str, FileState] = {}
    for fid, spec in files.items():
        rows, dv = spec if isinstance(spec, tuple) else (10, spec)
        out[fid] = (file(fid, rows), BitMap(dv))
    return out


def rows_conflict(u: int, fid: str, ops: str) -> Conflict:
    return Conflict(
        u,
        f"version {u} also changed rows of {TABLE} (data file {fid}) that this transaction "
        f"({ops}) changed; re-run it on the latest version",
    )


def matrix_conflict(u: int, mine: str, theirs: str) -> Conflict:
    return Conflict(
        u,
        f"version {u} changed the rows of {TABLE} ({theirs}) in a way this transaction "
        f"({mine}) cannot be rebased over; re-run it",
    )


@dataclass(frozen=True)
class Expect:
    """A rebased plan, stated as plain sets (positions) and sorted ids."""

    dvs: Mapping[str, set[int]] = field(default_factory=dict)
    removed: tuple[str, ...] = ()
    added_dvs: Mapping[str, set[int]] = field(default_factory=dict)
    cleared: frozenset[str] = frozenset()
    #: the record entry: positions newly deleted, files removed, updates
    deleted: Mapping[str, set[int]] = field(default_factory=dict)
    record_removed: tuple[str, ...] = ()
    record_updated: Mapping[str, set[int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Case:
    name: str
    w: TableIntent
    head: dict[str, FileState]
    theirs: list[tuple[int, TableChange]]
    expect: Expect | Conflict


def _sets(m: Mapping[str, Any]) -> dict[str, set[int]]:
    return {k: set(v) for k, v in m.items()}


def _decoded(m: Mapping[str, bytes]) -> dict[str, set[int]]:
    return {k: set(dvfmt.decode(v)) for k, v in m.items()}


CASES = [
    Case(
        "disjoint deletes rebase: the head's DV and ours unioned",
        intent("delete", deletes={"a": [1, 2]}),
        head(a=[5]),
        [(2, change("delete", deleted={"a": [5]}))],
        Expect(dvs={"a": {1, 2, 5}}, deleted={"a": {1, 2}}),
    ),
    Case(
        "no concurrent version: our deletes over the base DV",
        intent("delete", deletes={"a": [1]}),
        head(a=[0], b=[]),
        [],
        Expect(dvs={"a": {0, 1}}, deleted={"a": {1}}),
    ),
    Case(
        "overlapping delete + delete unions; the record keeps only rows new at the head",
        intent("delete", deletes={"a": [1, 2]}),
        head(a=[2, 3]),
        [(2, change("delete", deleted={"a": [2, 3]}))],
        Expect(dvs={"a": {1, 2, 3}}, deleted={"a": {1}}),
    ),
    Case(
        "the same rows deleted by both: nothing new to write",
        intent("delete", deletes={"a": [2]}),
        head(a=[2]),
        [(2, change("delete", deleted={"a": [2]}))],
        Expect(),
    ),
    Case(
        "update vs delete of the same row: lost update",
        intent("update", deletes={"a": [2]}, updated={"a": [2]}, added=["n"], post=["n"]),
        head(a=[2, 3], n=[]),
        [(7, change("delete", deleted={"a": [2, 3]}))],
        rows_conflict(7, "a", "update"),
    ),
    Case(
        "delete vs update of the same row: lost update",
        intent("delete", deletes={"a": [4]}),
        head(a=[4]),
        [(3, change("update", deleted={"a": [4]}, added=["n"]))],
        rows_conflict(3, "a", "delete"),
    ),
    Case(
        "update vs delete of other rows rebases; the record keeps the update",
        intent("update", deletes={"a": [1]}, updated={"a": [1]}, added=["n"], post=["n"]),
        head(a=[3]),
        [(7, change("delete", deleted={"a": [3]}))],
        Expect(dvs={"a": {1, 3}}, deleted={"a": {1}}, record_updated={"a": {1}}),
    ),
    Case(
        "delete in a file a concurrent overwrite removed",
        intent("delete", deletes={"a": [1]}),
        head(n=[]),
        [(4, change("overwrite", removed=["a"], added=["n"]))],
        rows_conflict(4, "a", "delete"),
    ),
    Case(
        "overwrite removing a file a concurrent delete changed",
        intent("overwrite", removed=["a"], added=["n"]),
        head(a=[1]),
        [(4, change("delete", deleted={"a": [1]}))],
        rows_conflict(4, "a", "overwrite"),
    ),
    Case(
        "a file gone from the head that no concurrent version compacted",
        intent("delete", deletes={"a": [1]}),
        head(),
        [(3, change("append", added=["z"]))],
        Conflict(3, f"version 3 removed data file a{AGAIN}"),
    ),
    Case(
        "follow a concurrent compaction: source positions translated into its output",
        # a: 4 rows, row 0 deleted at planning -> rows 1, 2, 3 are x's 0, 1, 2
        intent("delete", deletes={"a": [1, 3], "b": [0]}),
        head(x=(6, [])),
        [
            (
                5,
                change(
                    "compact",
                    removed=["a", "b"],
                    added=["x"],
                    rewrites=[rewrite("x", ("a", 4, [0]), ("b", 3, []))],
                ),
            )
        ],
        Expect(dvs={"x": {0, 2, 3}}, deleted={"x": {0, 2, 3}}),
    ),
    Case(
        "an update followed through a compaction keeps its pre-images",
        intent("update", deletes={"a": [3]}, updated={"a": [3]}, added=["n"], post=["n"]),
        head(x=(3, [])),
        [
            (
                5,
                change(
                    "compact", removed=["a"], added=["x"], rewrites=[rewrite("x", ("a", 4, [0]))]
                ),
            )
        ],
        Expect(dvs={"x": {2}}, deleted={"x": {2}}, record_updated={"x": {2}}),
    ),
    Case(
        "followed through a compaction onto a row deleted after it: pure deletes union",
        intent("delete", deletes={"a": [1]}),
        head(x=(4, [1])),
        [
            (
                5,
                change(
                    "compact", removed=["a"], added=["x"], rewrites=[rewrite("x", ("a", 4, []))]
                ),
            ),
            (6, change("delete", deleted={"x": [1]})),
        ],
        Expect(),
    ),
    Case(
        "followed through a compaction onto a row updated after it: lost update",
        intent("delete", deletes={"a": [1]}),
        head(x=(4, [1])),
        [
            (
                5,
                change(
                    "compact", removed=["a"], added=["x"], rewrites=[rewrite("x", ("a", 4, []))]
                ),
            ),
            (6, change("update", deleted={"x": [1]}, added=["n"])),
        ],
        rows_conflict(6, "x", "delete"),
    ),
    Case(
        "rows a compaction dropped whole (output ''): nothing left to delete",
        intent("delete", deletes={"a": [1]}),
        head(),
        [(5, change("compact", removed=["a"], rewrites=[rewrite("", ("a", 2, [0, 1]))]))],
        Expect(),
    ),
    Case(
        "own compaction over a concurrent delete: the row stays deleted in our output",
        # a: 4 rows, row 0 deleted at planning -> live 1, 2, 3 are x's 0, 1, 2; b's are 3, 4
        intent(
            "compact",
            removed=["a", "b"],
            added=["x"],
            rewrites=[rewrite("x", ("a", 4, [0]), ("b", 2, []))],
        ),
        head(a=(4, [0, 2]), b=(2, [])),
        [(3, change("delete", deleted={"a": [2]}))],
        Expect(removed=("a", "b"), added_dvs={"x": {1}}, record_removed=("a", "b")),
    ),
    Case(
        "own compaction of a file a concurrent overwrite removed: all its rows deleted",
        intent(
            "compact",
            removed=["a", "b"],
            added=["x"],
            rewrites=[rewrite("x", ("a", 3, [1]), ("b", 2, []))],
        ),
        head(b=(2, []), n=[]),
        [(3, change("overwrite", removed=["a"], added=["n"]))],
        Expect(removed=("b",), added_dvs={"x": {0, 1}}, record_removed=("a", "b")),
    ),
    Case(
        "own compaction of a file another compaction took: retry",
        intent(
            "compact",
            removed=["a", "b"],
            added=["x"],
            rewrites=[rewrite("x", ("a", 2, []), ("b", 2, []))],
        ),
        head(b=(2, []), y=(2, [])),
        [
            (
                4,
                change(
                    "compact", removed=["a"], added=["y"], rewrites=[rewrite("y", ("a", 2, []))]
                ),
            )
        ],
        Conflict(4, f"version 4 compacted data file a as well{AGAIN}"),
    ),
    Case(
        "own compaction plus a delete in its output, a concurrent pure delete of that row",
        intent(
            "compact",
            "delete",
            removed=["a"],
            added=["x"],
            deletes={"x": [1]},
            rewrites=[rewrite("x", ("a", 4, []))],
        ),
        head(a=(4, [1])),
        [(3, change("delete", deleted={"a": [1]}))],
        Expect(removed=("a",), added_dvs={"x": {1}}, record_removed=("a",)),
    ),
    Case(
        "own compaction plus an update in its output, a concurrent delete of that row",
        intent(
            "compact",
            "update",
            removed=["a"],
            added=["x", "n"],
            deletes={"x": [1]},
            rewrites=[rewrite("x", ("a", 4, []))],
        ),
        head(a=(4, [1])),
        [(3, change("delete", deleted={"a": [1]}))],
        rows_conflict(3, "a", "compact/update"),
    ),
    Case(
        "overwrite removes the output of a concurrent compaction of only files it removes",
        intent("overwrite", removed=["a", "b"], added=["n"]),
        head(x=(4, [])),
        [
            (
                4,
                change(
                    "compact",
                    removed=["a", "b"],
                    added=["x"],
                    rewrites=[rewrite("x", ("a", 2, []), ("b", 2, []))],
                ),
            )
        ],
        Expect(removed=("x",), record_removed=("a", "b", "x")),
    ),
    Case(
        "overwrite vs a compaction that also took a file the overwrite keeps",
        intent("overwrite", removed=["a"], added=["n"]),
        head(x=(4, [])),
        [
            (
                4,
                change(
                    "compact",
                    removed=["a", "c"],
                    added=["x"],
                    rewrites=[rewrite("x", ("a", 2, []), ("c", 2, []))],
                ),
            )
        ],
        Conflict(
            4, f"version 4 compacted data file a together with files this overwrite keeps{AGAIN}"
        ),
    ),
    Case(
        "restore re-adding a file whole clears its deletion vector at the head",
        intent("restore", added=["a", "b"], added_dvs={"b": [7]}, removed=["c"]),
        head(a=[3], b=[], c=[]),
        [],
        Expect(
            removed=("c",), added_dvs={"b": {7}}, cleared=frozenset({"a"}), record_removed=("c",)
        ),
    ),
    Case(
        "restore vs a concurrent append: the old state must be exact",
        intent("restore", added=["a"]),
        head(a=[], z=[]),
        [(2, change("append", added=["z"]))],
        matrix_conflict(2, "restore", "append"),
    ),
    Case(
        "delete vs a concurrent restore",
        intent("delete", deletes={"a": [1]}),
        head(a=[]),
        [(2, change("restore", added=["a"]))],
        matrix_conflict(2, "delete", "restore"),
    ),
    Case(
        "the matrix is checked before the rows: first version wins",
        intent("update", deletes={"a": [1]}, updated={"a": [1]}, added=["n"]),
        head(a=[1]),
        [(2, change("update", deleted={"a": [1]}, added=["m"])), (3, change("restore"))],
        matrix_conflict(3, "update", "restore"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_plan(case: Case) -> None:
    got = plan(case.w, case.head, case.theirs).result
    if isinstance(case.expect, Conflict):
        assert got == case.expect
        return
    assert isinstance(got, Rebased), got
    e = case.expect
    assert _sets(got.dvs) == e.dvs
    assert got.removed == e.removed
    assert _sets(got.added_dvs) == e.added_dvs
    assert got.cleared == e.cleared
    assert got.added == case.w.added
    rec = got.change
    assert rec.table == TABLE and rec.ops == case.w.ops
    assert rec.added == tuple(sorted(case.w.added))
    assert _decoded(rec.deleted) == e.deleted
    assert rec.removed == e.record_removed
    assert _decoded(rec.updated) == e.record_updated
    assert rec.rewrites == case.w.rewrites


def test_plan_outputs_are_frozen() -> None:
    got = plan(intent("delete", deletes={"a": [1]}), head(a=[0]), []).result
    assert isinstance(got, Rebased)
    assert all(isinstance(v, FrozenBitMap) for v in got.dvs.values())
    with pytest.raises(TypeError):
        got.dvs["b"] = FrozenBitMap()  # type: ignore[index]


@pytest.mark.parametrize("mine", conflicts.DATA_OPS)
@pytest.mark.parametrize("theirs", conflicts.DATA_OPS)
def test_matrix_pairs(mine: str, theirs: str) -> None:
    """Every (mine, theirs) pair on rows that do not meet: the matrix alone decides."""
    got = plan(intent(mine), head(), [(9, change(theirs))]).result
    outcome = conflicts.data_outcome([mine], [theirs])
    if outcome in (conflicts.COMPATIBLE, conflicts.REBASE):
        assert isinstance(got, Rebased)
    else:
        assert got == matrix_conflict(9, mine, theirs)


# -- the rows that must be read ----------------------------------------------------

SCHEMA = pa.schema([("id", pa.int64())])
GUARD = parse_where("id > 5", SCHEMA)
READ = parse_where("id < 3", SCHEMA)


def test_row_checks_name_inserted_and_deleted_rows() -> None:
    w = intent("delete", deletes={"a": [1]})
    theirs = [
        (2, change("append", added=["n1"])),
        (3, change("delete", deleted={"b": [4, 5]})),
        (4, change("overwrite", removed=["c"], added=["n2"])),
        (5, change("compact", removed=["d"], added=["x"], rewrites=[rewrite("x", ("d", 2, []))])),
    ]
    p = plan(w, head(a=[], b=[4, 5], n1=[], n2=[], x=(2, [])), theirs, [READ])
    assert isinstance(p.result, Rebased)
    assert p.checks.reads == (READ,) and p.checks.guards == ()
    assert p.checks.versions == (
        VersionRows(2, ("n1",)),
        VersionRows(3, (), (("b", FrozenBitMap([4, 5])),)),
        VersionRows(4, ("n2",), (), ("c",)),
        # a compaction inserts and deletes no row: nothing to read
    )


def test_row_checks_without_reads_look_at_inserts_only() -> None:
    w = TableWrite(NS, NAME, ops=["overwrite"], guards=[GUARD])
    w.removed = {"a": file("a")}
    theirs = [(2, change("delete", deleted={"b": [1]})), (3, change("append", added=["n"]))]
    p = plan(w.freeze(), head(a=[], b=[1], n=[]), theirs)
    assert p.checks.guards == (GUARD,)
    assert p.checks.versions == (VersionRows(3, ("n",)),)


def test_merge_keys_travel_with_the_checks() -> None:
    keys_table = pa.table({"id": [1, 2]})
    w = TableWrite(NS, NAME, ops=["merge"], keys=("id",), inserted=[keys_table])
    w.added = {"m": file("m")}
    p = plan(w.freeze(), head(m=[], n=[]), [(2, change("append", added=["n"]))])
    assert p.checks.keys == ("id",) and p.checks.key_rows == (keys_table,)
    assert p.checks.versions == (VersionRows(2, ("n",)),)


def test_nothing_to_read_without_predicates_or_keys() -> None:
    p = plan(
        intent("delete", deletes={"a": [1]}), head(a=[], n=[]), [(2, change("append", added=["n"]))]
    )
    assert p.checks.versions == ()


def test_checks_of_earlier_versions_come_before_a_later_conflict() -> None:
    """A conflict found by planning at version 3 is raised only after the rows of
    version 2 were checked (the order the checks ran in before the split)."""
    w = TableWrite(NS, NAME, ops=["overwrite"], guards=[GUARD])
    w.removed = {"a": file("a")}
    theirs = [(2, change("append", added=["n"])), (3, change("restore", added=["a"]))]
    p = plan(w.freeze(), head(a=[], n=[]), theirs)
    assert p.checks.versions == (VersionRows(2, ("n",)),)
    assert p.result == matrix_conflict(3, "overwrite", "restore")


def test_plan_reads_of_a_table_not_written() -> None:
    theirs = [(2, change("append", added=["n"])), (3, change("delete", deleted={"b": [0]}))]
    checks = plan_reads(NS, NAME, theirs, [READ])
    assert checks.qualified == TABLE and checks.reads == (READ,)
    assert checks.versions == (
        VersionRows(2, ("n",)),
        VersionRows(3, (), (("b", FrozenBitMap([0])),)),
    )
    assert plan_reads(NS, NAME, theirs, []).versions == ()


def test_changes_to_picks_the_table_in_version_order() -> None:
    mine, other = change("delete"), TableChange(table="ns.other", ops=("append",))

    def version(v: int, *data: TableChange) -> VersionInfo:
        return VersionInfo(v, 0, v - 1, Isolation.SNAPSHOT, f"t{v}", (), data=data)

    records = [version(2, other, mine), version(3, other), version(4, mine)]
    assert changes_to(TABLE, records) == [(2, mine), (4, mine)]


# -- compaction positions ----------------------------------------------------------

R = rewrite("x", ("a", 5, [0, 3]), ("b", 3, [1]))  # x = a's 1, 2, 4 then b's 0, 2


@pytest.mark.parametrize(
    ("src", "positions", "out"),
    [
        ("a", [1, 2, 4], {0, 1, 2}),
        ("a", [0, 3], set()),  # deleted at planning: not in the output
        ("b", [0, 2], {3, 4}),
        ("b", [1], set()),
    ],
)
def test_translate(src: str, positions: list[int], out: set[int]) -> None:
    assert set(translate(R, src, bm(*positions))) == out


def test_untranslate_is_translate_backwards() -> None:
    assert _sets(untranslate(R, bm(0, 2, 4))) == {"a": {1, 4}, "b": {2}}
    for src, pos in untranslate(R, bm(0, 1, 2, 3, 4)).items():
        assert set(untranslate(R, translate(R, src, pos))[src]) == set(pos)
    with pytest.raises(KeyError):
        translate(R, "c", bm(0))


# -- the keys a plan writes --------------------------------------------------------


def test_kv_writes_of_a_plan() -> None:
    w = intent("restore", added=["a", "n"], added_dvs={"n": [2]}, removed=["c"])
    got = plan(w, head(a=[3], c=[], d=[1]), []).result
    assert isinstance(got, Rebased)
    assert kv_writes(NS, NAME, got) == [
        (keys.data_file_key(NS, NAME, "c"), None),
        (keys.dv_key(NS, NAME, "c"), None),
        (keys.data_file_key(NS, NAME, "a"), record.encode_file(file("a"))),
        (keys.dv_key(NS, NAME, "a"), None),  # re-added whole: its old DV is cleared
        (keys.data_file_key(NS, NAME, "n"), record.encode_file(file("n"))),
        (keys.dv_key(NS, NAME, "n"), enc(2)),
    ]
    d = plan(intent("delete", deletes={"d": [0]}), head(d=[1]), []).result
    assert isinstance(d, Rebased)
    assert kv_writes(NS, NAME, d) == [(keys.dv_key(NS, NAME, "d"), enc(0, 1))]
