"""``lakehouse.commit.run`` on in-memory inputs: no kvstore, no lakehouse.

The services are a stand-in (:class:`Services`: a counter for a clock, sleeps
recorded, records decoded from the store) and the kvstore transaction is a
dict-backed twin (:class:`MemKtx`) with the kvstore's first-committer-wins
rule on the keys read for update, and failures on chosen commits. Each case
is a row: the versions committed before (through ``run`` itself), the
transaction's intent (built by hand, as ``Transaction._freeze`` would), the
commit options and what must come out: the outcome and the keys written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import pyarrow as pa
import pytest

import kvstore
from kvstore.objstore import MemoryStore
from lakehouse import codec, keys
from lakehouse.commit import run
from lakehouse.data.table import FileState, TableWrite
from lakehouse.errors import IncompatibleConflict, RetryableConflict, TransactionExpired
from lakehouse.intent import CommitOptions, CommitOutcome, DefinitionChange, TxnIntent
from lakehouse.model import (
    Column,
    DataFile,
    Definition,
    Isolation,
    NamespaceDef,
    TableDef,
    VersionInfo,
    ViewDef,
    schema_to_ipc,
)

SNAPSHOT, SERIALIZABLE = Isolation.SNAPSHOT, Isolation.SERIALIZABLE


# -- the in-memory stand-ins ----------------------------------------------------------------
class MemDB:
    """A dict of committed keys and a seq; ``fail`` maps a commit number (1, 2, ...
    over this store's whole life) to the error its kvstore commit raises."""

    def __init__(self) -> None:
        root = VersionInfo(0, 1_000, None, SNAPSHOT, "init", ())
        self.data: dict[bytes, bytes] = {
            keys.HEAD: keys.encode_u64(0),
            keys.OLDEST: keys.encode_u64(0),
            keys.record_key(0): codec.encode_record(root),
        }
        self.seq = 1
        self.opened = 0
        self.commits: list[bool] = []  # the durable flag of each kvstore commit tried
        self.fail: dict[int, Exception] = {}

    def transaction(self, isolation: kvstore.Isolation) -> MemKtx:
        assert isolation is kvstore.Isolation.SNAPSHOT
        self.opened += 1
        return MemKtx(self)

    def set(self, key: bytes, value: bytes) -> None:
        """Another writer's plain put."""
        self.data[key] = value
        self.seq += 1


class MemKtx:
    """A kvstore transaction over :class:`MemDB`: reads see the store as it was at
    begin plus own writes; the commit fails when a key read for update changed."""

    def __init__(self, db: MemDB) -> None:
        self.db = db
        self.view = dict(db.data)
        self.read_seq = db.seq
        self.writes: dict[bytes, bytes | None] = {}
        self.for_update: dict[bytes, bytes | None] = {}
        self.closed = False

    def get(self, key: bytes) -> bytes | None:
        if key in self.writes:
            return self.writes[key]
        return self.view.get(key)

    def get_for_update(self, key: bytes) -> bytes | None:
        self.for_update[key] = self.view.get(key)
        return self.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        self.writes[key] = value

    def put_many(self, items: list[tuple[bytes, bytes]]) -> None:
        for key, value in items:
            self.put(key, value)

    def delete(self, key: bytes) -> None:
        self.writes[key] = None

    def scan_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        merged = {**self.view, **self.writes}
        for k in sorted(merged):
            v = merged[k]
            if k.startswith(prefix) and v is not None:
                yield k, v

    def scan(
        self, start: bytes, end: bytes | None = None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        merged = {**self.view, **self.writes}
        for k in sorted(merged, reverse=reverse):
            v = merged[k]
            if k >= start and (end is None or k < end) and v is not None:
                yield k, v

    def commit(self, durable: bool = True) -> int:
        assert not self.closed
        db = self.db
        db.commits.append(durable)
        self.closed = True
        error = db.fail.get(len(db.commits))
        if error is not None:
            raise error
        for k, seen in self.for_update.items():
            if db.data.get(k) != seen:
                raise kvstore.TransactionConflict(f"{k!r} was written by a later commit")
        for k, v in self.writes.items():
            if v is None:
                db.data.pop(k, None)
            else:
                db.data[k] = v
        db.seq += 1
        return db.seq

    def rollback(self) -> None:
        self.closed = True


@dataclass
class Services:
    """:class:`lakehouse.intent.CommitServices` over a :class:`MemDB`."""

    db: Any = field(default_factory=MemDB)
    data: Any = field(default_factory=lambda: MemoryStore(None))
    transaction_ttl: float = 60.0
    commit_retries: int = 5
    durable: bool = True
    clock: float = 10.0
    ms: int = 5_000
    sleeps: list[float] = field(default_factory=list)
    remembered: list[int] = field(default_factory=list)

    def monotonic(self) -> float:
        return self.clock

    def now_ms(self) -> int:
        return self.ms

    def backoff(self, attempt: int) -> float:
        return attempt / 1000

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)

    def record(self, version: int, get: Callable[[bytes], bytes | None]) -> VersionInfo:
        raw = get(keys.record_key(version))
        assert raw is not None, f"no record {version}"
        return codec.decode_record(raw)

    def remember(self, rec: VersionInfo) -> None:
        self.remembered.append(rec.version)

    # -- what a case checks -------------------------------------------------------------
    @property
    def head(self) -> int:
        return keys.decode_u64(self.db.data[keys.HEAD])

    def stored(self, d: Definition) -> Definition | None:
        kind = "namespace" if isinstance(d, NamespaceDef) else "view"
        ns = d.name if isinstance(d, NamespaceDef) else d.namespace
        name = None if isinstance(d, NamespaceDef) else d.name
        raw = self.db.data.get(keys.object_key(kind, ns, name))
        return None if raw is None else codec.decode_def(raw)

    def stored_record(self, version: int) -> VersionInfo:
        return self.record(version, self.db.data.get)


# -- hand-built intents --------------------------------------------------------------------
def ns(name: str, **props: str) -> NamespaceDef:
    return NamespaceDef(name, props)


def view(qname: str, sql: str = "SELECT 1") -> ViewDef:
    n, v = qname.split(".")
    return ViewDef(n, v, sql)


def touch(base: Definition | None, final: Definition | None) -> DefinitionChange:
    d = final if final is not None else base
    assert d is not None
    if isinstance(d, NamespaceDef):
        kind, n, name = "namespace", d.name, None
    else:
        assert isinstance(d, (ViewDef, TableDef))
        kind = "view" if isinstance(d, ViewDef) else "table"
        n, name = d.namespace, d.name
    base_bytes = None if base is None else codec.encode_def(base)
    return DefinitionChange(kind, n, name, base, base_bytes, final)


def no_files(ns: str, t: str) -> Mapping[str, FileState]:
    return {}


def intent(
    version: int,
    *touched: DefinitionChange,
    isolation: Isolation = SNAPSHOT,
    reads: frozenset[tuple[str, str]] = frozenset(),
    listings: frozenset[tuple[str, str]] = frozenset(),
    app: tuple[str, int] | None = None,
    started: float = 0.0,
    oldest_read: int | None = None,
    txn_id: str = "mine",
    table_writes: Mapping[tuple[str, str], Any] | None = None,
) -> TxnIntent:
    return TxnIntent(
        version=version,
        isolation=isolation,
        txn_id=txn_id,
        started=started,
        oldest_version_read=version if oldest_read is None else oldest_read,
        app=app,
        touched=MappingProxyType({(c.kind, c.qualified): c for c in touched}),
        state_writes=MappingProxyType({}),
        state_tables=frozenset(),
        reads=reads,
        listings=listings,
        table_writes=MappingProxyType(dict(table_writes or {})),
        data_reads=MappingProxyType({}),
        read_tables=MappingProxyType({}),
        base_files=no_files,
    )


OPTS = CommitOptions()
NS, NS2 = ns("ns"), ns("ns2")
A, A2, B, B2 = view("ns.a"), view("ns.a", "SELECT 2"), view("ns.b"), view("ns.b", "SELECT 2")


def committed(svc: Services, i: TxnIntent, options: CommitOptions = OPTS) -> int:
    out = run(svc, i, options)
    assert out.error is None and out.created, out
    return out.version


def base_v1(svc: Services) -> None:
    """Version 1: namespaces ns and ns2 (empty), views ns.a and ns.b."""
    committed(svc, intent(0, touch(None, NS), touch(None, NS2), touch(None, A), touch(None, B)))


def base_v2_alters_a(svc: Services) -> None:
    """Version 1 as :func:`base_v1`; version 2 (by another transaction) alters ns.a."""
    base_v1(svc)
    committed(svc, intent(1, touch(A, A2), txn_id="theirs"))


def base_v2_drops_ns2(svc: Services) -> None:
    base_v1(svc)
    committed(svc, intent(1, touch(NS2, None), txn_id="theirs"))


def base_v2_creates_c(svc: Services) -> None:
    base_v1(svc)
    committed(svc, intent(1, touch(None, view("ns.c")), txn_id="theirs"))


# -- the table ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    name: str
    setup: Callable[[Services], None]
    intent: TxnIntent
    options: CommitOptions = OPTS
    #: expected outcome fields
    version: int = 0
    created: bool = True
    skipped: bool = False
    attempts: int = 1
    rebased_over: tuple[int, ...] = ()
    error: type[Exception] | None = None
    match: str = ""
    #: definitions that must be stored (or absent: None) afterwards
    stored: tuple[tuple[Definition, bool], ...] = ()
    #: kvstore transactions opened
    opened: int | None = None


CASES = [
    Case(
        "read-only: looked at, changed nothing",
        base_v1,
        intent(1, touch(A, A)),
        version=1,
        created=False,
        attempts=0,
        opened=0,
    ),
    Case(
        "plain create",
        lambda svc: None,
        intent(0, touch(None, NS)),
        version=1,
        stored=((NS, True),),
    ),
    Case(
        "SNAPSHOT: a version in between changed an object we change",
        base_v2_alters_a,
        intent(1, touch(A, view("ns.a", "SELECT 3"))),
        error=RetryableConflict,
        version=1,
        created=False,
        stored=((A2, True),),
    ),
    Case(
        "SNAPSHOT: a version in between changed an object we only read",
        base_v2_alters_a,
        intent(1, touch(B, B2), reads=frozenset({("view", "ns.a")})),
        version=3,
        rebased_over=(2,),
        stored=((A2, True), (B2, True)),
    ),
    Case(
        "SERIALIZABLE: a version in between changed an object we read",
        base_v2_alters_a,
        intent(1, touch(B, B2), isolation=SERIALIZABLE, reads=frozenset({("view", "ns.a")})),
        error=RetryableConflict,
        match="ns.a",
        version=1,
        created=False,
        stored=((B, True),),
    ),
    Case(
        "SERIALIZABLE: a phantom in a listing we read",
        base_v2_creates_c,
        intent(1, touch(B, B2), isolation=SERIALIZABLE, listings=frozenset({("views", "ns")})),
        error=RetryableConflict,
        version=1,
        created=False,
        stored=((B, True),),
    ),
    Case(
        "SNAPSHOT: the same listing changed, no conflict",
        base_v2_creates_c,
        intent(1, touch(B, B2)),
        version=3,
        rebased_over=(2,),
        stored=((B2, True),),
    ),
    Case(
        "revalidation: the namespace of a new view was dropped in between",
        base_v2_drops_ns2,
        intent(1, touch(None, view("ns2.x"))),
        error=IncompatibleConflict,
        match="namespace 'ns2' was dropped",
        version=1,
        created=False,
        rebased_over=(2,),  # version 2 passed the record check
        stored=((view("ns2.x"), False),),
    ),
    Case(
        "create vs create of the same name in between",
        base_v2_creates_c,
        intent(1, touch(None, view("ns.c", "SELECT 9"))),
        error=IncompatibleConflict,
        version=1,
        created=False,
        stored=((view("ns.c"), True),),
    ),
    Case(
        "app version recorded already: skipped, nothing written",
        lambda svc: committed(svc, intent(0, touch(None, NS), app=("job", 5))),
        intent(1, touch(None, NS2), app=("job", 5)),
        version=1,
        created=False,
        skipped=True,
        stored=((NS2, False),),
    ),
    Case(
        "an older app version: skipped",
        lambda svc: committed(svc, intent(0, touch(None, NS), app=("job", 5))),
        intent(1, touch(None, NS2), app=("job", 4)),
        version=1,
        created=False,
        skipped=True,
    ),
    Case(
        "a newer app version: committed",
        lambda svc: committed(svc, intent(0, touch(None, NS), app=("job", 5))),
        intent(1, touch(None, NS2), app=("job", 6)),
        version=2,
        stored=((NS2, True),),
    ),
    Case(
        "an app version with no change: one attempt, nothing written",
        base_v1,
        intent(1, app=("job", 1)),
        version=1,
        created=False,
    ),
    Case(
        "the base version has expired",
        lambda svc: (base_v1(svc), svc.db.set(keys.OLDEST, keys.encode_u64(1))),
        intent(0, touch(None, view("ns.x"))),
        error=RetryableConflict,
        match="base version 0 has expired",
        version=0,
        created=False,
    ),
    Case(
        "a version restored from has expired",
        lambda svc: (base_v2_alters_a(svc), svc.db.set(keys.OLDEST, keys.encode_u64(2))),
        intent(2, touch(None, view("ns.x")), oldest_read=1),
        error=RetryableConflict,
        match="version 1, which this transaction restored or cloned",
        version=2,
        created=False,
    ),
    Case(
        "open longer than the TTL",
        base_v1,
        intent(1, touch(B, B2), started=-100.0),
        error=TransactionExpired,
        match="more than 60s ago",
        version=1,
        created=False,
        attempts=0,
        opened=0,
    ),
    Case(
        "force: a version with no change",
        base_v1,
        intent(1),
        options=CommitOptions(force=True, rollback_of=0),
        version=2,
    ),
    Case(
        "exclusive: any version in between conflicts",
        base_v2_alters_a,
        intent(1, touch(B, B2)),
        options=CommitOptions(exclusive=True),
        error=RetryableConflict,
        match="while restoring an old state",
        version=1,
        created=False,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_commit_pipeline(case: Case) -> None:
    svc = Services()
    case.setup(svc)
    head, opened, commits = svc.head, svc.db.opened, len(svc.db.commits)
    out = run(svc, case.intent, case.options)
    assert isinstance(out, CommitOutcome)
    assert (out.version, out.created, out.skipped) == (case.version, case.created, case.skipped)
    assert out.attempts == case.attempts
    assert out.rebased_over == case.rebased_over
    if case.error is None:
        assert out.error is None
    else:
        assert isinstance(out.error, case.error), out.error
        assert case.match in str(out.error)
    if case.opened is not None:
        assert svc.db.opened - opened == case.opened
    for d, present in case.stored:
        assert (svc.stored(d) == d) is present, (d, svc.stored(d))
    if out.created:
        rec = svc.stored_record(out.version)
        assert out.record == rec and out.committed_version == out.version
        assert rec.parent == head and svc.head == head + 1 == out.version
        assert rec.txn_id == case.intent.txn_id and rec.isolation is case.intent.isolation
        assert rec.rollback_of == case.options.rollback_of
        assert rec.app == case.intent.app
        assert svc.remembered[-1] == out.version
        if case.intent.app is not None:
            app_id, app_version = case.intent.app
            raw = svc.db.data[keys.app_key(app_id)]
            assert codec.decode_app(raw) == (app_version, out.version)
    else:
        assert out.record is None and out.committed_version is None
        assert svc.head == head  # nothing written
        assert len(svc.db.commits) == commits  # no kvstore commit even tried
    assert svc.sleeps == []  # no lost race in these rows


def test_the_record_lists_changes_reads_and_time() -> None:
    svc = Services()
    base_v1(svc)
    svc.ms = 123_456
    i = intent(
        1,
        touch(A, A2),
        touch(B, B),  # looked at: a read under SERIALIZABLE
        touch(None, view("ns.z")),
        isolation=SERIALIZABLE,
        reads=frozenset({("namespace", "ns")}),
        listings=frozenset({("views", "ns")}),
    )
    rec = run(svc, i, OPTS).record
    assert rec is not None
    assert [(c.kind, c.name, c.op) for c in rec.changes] == [
        ("view", "ns.a", "alter"),
        ("view", "ns.z", "create"),
    ]
    assert rec.reads == (("namespace", "ns"), ("view", "ns.b"))
    assert rec.listings == (("views", "ns"),)
    assert rec.created_ms == 123_456
    assert rec.base_seq == svc.db.seq - 1  # read just before its own commit
    # creation times never go backwards along the chain
    svc.ms = 1
    rec3 = run(svc, intent(2, touch(A2, A)), OPTS).record
    assert rec3 is not None and rec3.created_ms == 123_456


def test_a_lost_race_then_a_win() -> None:
    """TrinityLake's example: another transaction commits version 2 between our read
    of the head and our kvstore commit; we lose, check version 2, and write 3."""
    svc = Services()
    base_v1(svc)
    calls: list[tuple[str, int]] = []

    def hook(i: TxnIntent, attempt: int) -> None:
        calls.append((i.txn_id, attempt))
        if i.txn_id == "mine" and attempt == 1:
            assert committed(svc, intent(1, touch(A, A2), txn_id="theirs")) == 2

    out = run(svc, intent(1, touch(B, B2)), CommitOptions(hook=hook))
    assert (out.version, out.attempts, out.rebased_over, out.error) == (3, 2, (2,), None)
    assert calls == [("mine", 1), ("mine", 2)]
    assert svc.sleeps == [svc.backoff(1)]
    assert svc.stored(A2) == A2 and svc.stored(B2) == B2
    assert svc.stored_record(3).parent == 2


def test_a_lost_race_then_a_conflict() -> None:
    """The version that won the race changed our object: the retry reports it."""
    svc = Services()
    base_v1(svc)

    def hook(i: TxnIntent, attempt: int) -> None:
        if i.txn_id == "mine":
            committed(svc, intent(svc.head, touch(A, A2), txn_id="theirs"))

    out = run(svc, intent(1, touch(A, view("ns.a", "SELECT 3"))), CommitOptions(hook=hook))
    assert isinstance(out.error, RetryableConflict) and out.error.version == 2
    assert (out.attempts, out.rebased_over, out.created) == (2, (), False)
    assert svc.head == 2 and svc.stored(A2) == A2


def test_retries_exhausted() -> None:
    svc = Services(commit_retries=3)
    base_v1(svc)
    svc.db.fail = {n: kvstore.TransactionConflict("lost") for n in range(1, 100)}
    out = run(svc, intent(1, touch(B, B2)), OPTS)
    assert isinstance(out.error, RetryableConflict)
    assert "gave up after 3 commit attempts" in str(out.error)
    assert out.attempts == 3 and not out.created
    assert svc.sleeps == [svc.backoff(1), svc.backoff(2), svc.backoff(3)]
    assert svc.head == 1 and svc.stored(B) == B


def test_a_kvstore_transaction_expiry_is_a_lost_race() -> None:
    svc = Services()
    base_v1(svc)
    svc.db.fail = {len(svc.db.commits) + 1: kvstore.TransactionExpired("too old")}
    out = run(svc, intent(1, touch(B, B2)), OPTS)
    assert (out.version, out.attempts, out.error) == (2, 2, None)
    assert svc.sleeps == [svc.backoff(1)]


def test_other_errors_stop_the_commit_and_are_returned() -> None:
    """A fenced store (or any storage error) is not retried: the outcome carries it."""
    svc = Services()
    base_v1(svc)
    fenced = kvstore.FencedError("another writer took over")
    svc.db.fail = {len(svc.db.commits) + 1: fenced}
    out = run(svc, intent(1, touch(B, B2)), OPTS)
    assert out.error is fenced and out.attempts == 1 and not out.created
    assert svc.head == 1 and svc.sleeps == []


@pytest.mark.parametrize("durable", [True, False])
def test_the_durable_flag_reaches_the_kvstore_commit(durable: bool) -> None:
    svc = Services(durable=durable)
    committed(svc, intent(0, touch(None, NS)))
    assert svc.db.commits == [durable]


def test_versions_checked_in_a_lost_attempt_are_not_checked_again() -> None:
    """Two versions land during attempt 1 and one more during attempt 2: each is
    checked (and listed in rebased_over) once, in order."""
    svc = Services()
    base_v1(svc)

    def hook(i: TxnIntent, attempt: int) -> None:
        if i.txn_id != "mine" or attempt > 2:
            return
        for k in range(3 - attempt):
            c = view(f"ns.c{attempt}{k}")
            committed(svc, intent(svc.head, touch(None, c), txn_id=f"theirs{attempt}{k}"))

    out = run(svc, intent(1, touch(B, B2)), CommitOptions(hook=hook))
    assert (out.version, out.attempts, out.rebased_over) == (5, 3, (2, 3, 4))


def test_table_rows_are_rebased_from_the_intent() -> None:
    """An append: the table-state key of its file, the record's table change and
    files_added all come from the intent's TableIntent."""
    svc = Services()
    base_v1(svc)
    schema = pa.schema([("id", pa.int64())])
    t = TableDef("ns", "t", "tid1", (Column(1, "id", "int64"),), 1, schema_to_ipc(schema))
    committed(svc, intent(1, touch(None, t)))
    w = TableWrite("ns", "t")
    w.note("append")
    f = DataFile("tid1/f1.parquet", size=100, record_count=3, file_id="f1")
    w.add(f, owned=True)
    out = run(svc, intent(2, touch(t, t), table_writes={("ns", "t"): w.freeze()}), OPTS)
    assert out.error is None and out.version == 3 and out.record is not None
    (change,) = out.record.changes
    assert (change.kind, change.name, change.op) == ("table", "ns.t", "alter")
    assert change.old_id == change.new_id  # rows only
    (tc,) = out.record.data
    assert (tc.table, tc.ops, tc.added, tc.table_id) == ("ns.t", ("append",), ("f1",), "tid1")
    assert out.record.files_added == ("tid1/f1.parquet",)
    raw = svc.db.data[keys.data_file_key("ns", "t", "f1")]
    assert codec.decode_data_file(raw).path == "tid1/f1.parquet"


def test_an_empty_table_write_is_read_only() -> None:
    """A delete that matched nothing: the table is touched, its rows are not; the
    commit takes the read-only shortcut (no attempt, no kvstore transaction)."""
    svc = Services()
    base_v1(svc)
    schema = pa.schema([("id", pa.int64())])
    t = TableDef("ns", "t", "tid1", (Column(1, "id", "int64"),), 1, schema_to_ipc(schema))
    committed(svc, intent(1, touch(None, t)))
    w = TableWrite("ns", "t")
    w.note("delete")
    opened = svc.db.opened
    out = run(svc, intent(2, touch(t, t), table_writes={("ns", "t"): w.freeze()}), OPTS)
    assert (out.version, out.created, out.attempts, out.error) == (2, False, 0, None)
    assert svc.head == 2 and svc.db.opened == opened
