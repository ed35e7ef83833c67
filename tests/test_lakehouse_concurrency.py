"""Concurrent lakehouse transactions: rebase, write skew, phantoms, many threads.

The scenarios follow TrinityLake's own example and Hermitage's G2 anomalies,
lifted to lakehouse objects: write skew (T1 reads a and changes b, T2 reads b
and changes a) and phantoms through listings (two transactions each check
"namespace ns has no tables" and then create one).
"""

from __future__ import annotations

import threading
import time
import uuid

import pyarrow as pa
import pytest

import lakehouse
from kvstore.objstore import MemoryStore
from lakehouse import Isolation

SCHEMA = pa.schema([("id", pa.int64())])


class Injected:
    """The testing injection points the ``lh`` fixture opens the lakehouse with
    (options ``commit_hook`` and ``sleep``): a test sets ``hook`` to act inside
    each commit attempt just before its kvstore commit, ``sleep`` to see or skip
    the backoff sleeps."""

    def __init__(self) -> None:
        self.hook = None
        self.sleep = time.sleep

    def options(self) -> dict:
        return {"commit_hook": self._hook, "sleep": self._sleep}

    def _hook(self, intent, attempt) -> None:
        if self.hook is not None:
            self.hook(intent, attempt)

    def _sleep(self, seconds: float) -> None:
        self.sleep(seconds)


@pytest.fixture
def inject() -> Injected:
    return Injected()


@pytest.fixture(params=["memory", "local", pytest.param("s3", marks=pytest.mark.s3)])
def lh(request, tmp_path, inject):
    """The same lakehouse scenarios on every backend, S3 through moto included."""
    if request.param == "memory":
        name = f"lh-conc-{uuid.uuid4().hex}"
        h = lakehouse.open(f"memory://{name}", seed=7, **inject.options())
        yield h
        h.close()
        MemoryStore.drop(f"{name}/meta")
        MemoryStore.drop(f"{name}/data")
    elif request.param == "local":
        h = lakehouse.open(str(tmp_path / "lh"), seed=7, **inject.options())
        yield h
        h.close()
    else:
        url, storage_options = request.getfixturevalue("s3_url")
        h = lakehouse.open(url, seed=7, storage_options=storage_options, **inject.options())
        yield h
        h.close()


def setup(lh, *tables):
    with lh.begin() as txn:
        txn.create_namespace("ns")
        for t in tables:
            txn.create_table(f"ns.{t}", SCHEMA)


def test_trinitylake_example_rebase(lh, inject):
    """T1 changes t1, T2 changes t2, both at version 3; T1 makes 4, T2 rebases to 5."""
    setup(lh, "t1", "t2")  # version 1
    with lh.begin() as txn:
        txn.alter_table("ns.t1", set_properties={"step": "2"})
    with lh.begin() as txn:
        txn.alter_table("ns.t2", set_properties={"step": "3"})
    assert lh.version == 3
    t1 = lh.begin()
    t2 = lh.begin()
    assert t1.version == t2.version == 3
    t1.alter_table("ns.t1", set_properties={"by": "T1"})
    t2.alter_table("ns.t2", set_properties={"by": "T2"})

    # T1 commits version 4 while T2's first attempt is between reading the head
    # (3) and its kvstore commit: T2 loses the race for version 4.
    def race(intent, attempt):
        if intent.txn_id == t2.id and attempt == 1:
            assert t1.commit() == 4

    inject.hook = race
    assert t2.commit() == 5
    inject.hook = None
    assert t2.attempts == 2  # the first attempt lost
    assert t2.rebased_over == [4]  # it checked version 4 only: t1 changed, no conflict
    assert t1.attempts == 1 and t1.rebased_over == []
    (c4,) = lh.version_info(4).changes
    assert (c4.name, c4.op) == ("ns.t1", "alter")
    view = lh.at_version(5)
    assert view.describe_table("ns.t1").properties == {"step": "2", "by": "T1"}
    assert view.describe_table("ns.t2").properties == {"step": "3", "by": "T2"}
    assert lh.version_info(5).parent == 4


def test_rebase_without_a_lost_race(lh):
    """Committed one after the other, the second sees head 4 on its first attempt."""
    setup(lh, "t1", "t2")
    t1, t2 = lh.begin(), lh.begin()
    t1.alter_table("ns.t1", set_properties={"x": "1"})
    t2.alter_table("ns.t2", set_properties={"x": "2"})
    assert t1.commit() == 2
    assert t2.commit() == 3
    assert t2.attempts == 1 and t2.rebased_over == [2]


def test_same_object_conflicts_and_loser_is_absent(lh):
    setup(lh, "t")
    t1, t2 = lh.begin(), lh.begin()
    t1.alter_table("ns.t", set_properties={"who": "t1"})
    t2.alter_table("ns.t", set_properties={"who": "t2", "only_t2": "yes"})
    t1.commit()
    with pytest.raises(lakehouse.RetryableConflict) as info:
        t2.commit()
    assert info.value.version == 2 and ("table", "ns.t") in info.value.objects
    assert t2.status == "rolled back"
    assert lh.at_version(lh.version).describe_table("ns.t").properties == {"who": "t1"}
    assert lh.version == 2


@pytest.mark.parametrize(
    ("first", "second", "error"),
    [
        (("create_table", "ns.n"), ("create_table", "ns.n"), lakehouse.IncompatibleConflict),
        (("drop_table", "ns.t"), ("alter_table", "ns.t"), lakehouse.IncompatibleConflict),
        (("drop_table", "ns.t"), ("drop_table", "ns.t"), lakehouse.IncompatibleConflict),
        (("create_view", "ns.n"), ("create_table", "ns.n"), lakehouse.IncompatibleConflict),
        (("drop_namespace", "e"), ("create_table", "e.x"), lakehouse.IncompatibleConflict),
        (("create_table", "e.x"), ("drop_namespace", "e"), lakehouse.IncompatibleConflict),
        (("alter_table", "ns.t"), ("drop_table", "ns.t"), lakehouse.RetryableConflict),
    ],
)
def test_incompatible_vs_retryable(lh, first, second, error):
    setup(lh, "t")
    with lh.begin() as txn:
        txn.create_namespace("e")

    def do(txn, op, name):
        if op in ("create_table",):
            txn.create_table(name, SCHEMA)
        elif op == "create_view":
            txn.create_view(name, "SELECT 1")
        elif op == "alter_table":
            txn.alter_table(name, set_properties={"a": "b"})
        else:
            getattr(txn, op)(name)

    a, b = lh.begin(), lh.begin()
    do(a, *first)
    do(b, *second)
    a.commit()
    before = lh.version
    with pytest.raises(error):
        b.commit()
    assert lh.version == before


@pytest.mark.parametrize("isolation", [Isolation.SNAPSHOT, Isolation.SERIALIZABLE])
def test_write_skew(lh, isolation):
    """T1 reads a, changes b; T2 reads b, changes a. Invariant: not both marked 'off'."""
    setup(lh, "a", "b")
    t1, t2 = lh.begin(isolation), lh.begin(isolation)
    if t1.describe_table("ns.a").properties.get("state") != "off":
        t1.alter_table("ns.b", set_properties={"state": "off"})
    if t2.describe_table("ns.b").properties.get("state") != "off":
        t2.alter_table("ns.a", set_properties={"state": "off"})
    t1.commit()
    if isolation is Isolation.SERIALIZABLE:
        with pytest.raises(lakehouse.RetryableConflict, match="read"):
            t2.commit()
        off = [
            t for t in ("a", "b") if lh.at_version(lh.version).describe_table(f"ns.{t}").properties
        ]
        assert off == ["b"]
    else:
        t2.commit()  # SNAPSHOT allows the skew: both end up off
        view = lh.at_version(lh.version)
        assert all(view.describe_table(f"ns.{t}").properties == {"state": "off"} for t in "ab")


@pytest.mark.parametrize("isolation", [Isolation.SNAPSHOT, Isolation.SERIALIZABLE])
def test_phantom_through_listing(lh, isolation):
    """Each transaction creates a table only if the namespace has none."""
    setup(lh)
    t1, t2 = lh.begin(isolation), lh.begin(isolation)
    assert t1.list_tables("ns") == [] and t2.list_tables("ns") == []
    t1.create_table("ns.x", SCHEMA)
    t2.create_table("ns.y", SCHEMA)
    t1.commit()
    if isolation is Isolation.SERIALIZABLE:
        with pytest.raises(lakehouse.RetryableConflict, match="phantom"):
            t2.commit()
        assert lh.at_version(lh.version).list_tables("ns") == ["x"]
    else:
        t2.commit()
        assert lh.at_version(lh.version).list_tables("ns") == ["x", "y"]


@pytest.mark.parametrize("isolation", [Isolation.SNAPSHOT, Isolation.SERIALIZABLE])
def test_phantom_through_namespace_listing(lh, isolation):
    t1, t2 = lh.begin(isolation), lh.begin(isolation)
    if not t1.list_namespaces():
        t1.create_namespace("first")
    if not t2.list_namespaces():
        t2.create_namespace("second")
    t1.commit()
    if isolation is Isolation.SERIALIZABLE:
        with pytest.raises(lakehouse.RetryableConflict):
            t2.commit()
    else:
        t2.commit()
        assert lh.at_version(lh.version).list_namespaces() == ["first", "second"]


def test_serializable_read_of_missing_object(lh):
    """A read that found nothing conflicts with a concurrent create of it."""
    setup(lh, "t")
    t1, t2 = lh.begin(Isolation.SERIALIZABLE), lh.begin(Isolation.SERIALIZABLE)
    assert not t2.table_exists("ns.new")
    t2.alter_table("ns.t", set_properties={"saw_new": "no"})
    t1.create_table("ns.new", SCHEMA)
    t1.commit()
    with pytest.raises(lakehouse.RetryableConflict):
        t2.commit()


def test_serializable_unrelated_changes_commit(lh):
    setup(lh, "a", "b", "c")
    t1, t2 = lh.begin(Isolation.SERIALIZABLE), lh.begin(Isolation.SERIALIZABLE)
    t1.describe_table("ns.a")
    t1.alter_table("ns.b", set_properties={"k": "1"})
    t2.describe_table("ns.a")  # both read a: reads never conflict with reads
    t2.alter_table("ns.c", set_properties={"k": "2"})
    t1.commit()
    assert t2.commit() == 3 and t2.rebased_over == [2]


def test_eight_threads_on_different_tables(lh):
    n_threads, per_thread = 8, 25
    setup(lh, *[f"t{i}" for i in range(n_threads)])
    start = threading.Barrier(n_threads)
    errors: list[BaseException] = []
    committed: list[list[int]] = [[] for _ in range(n_threads)]

    def worker(i):
        try:
            start.wait()
            for j in range(per_thread):
                with lh.begin() as txn:
                    txn.alter_table(f"ns.t{i}", set_properties={f"k{j}": str(j)})
                committed[i].append(txn.committed_version)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    allv = sorted(v for vs in committed for v in vs)
    assert allv == list(range(2, 2 + n_threads * per_thread))  # consecutive, none lost
    history = lh.history()
    assert [h.version for h in history] == list(range(lh.version, -1, -1))
    view = lh.at_version(lh.version)
    for i in range(n_threads):
        props = view.describe_table(f"ns.t{i}").properties
        assert props == {f"k{j}": str(j) for j in range(per_thread)}


def test_eight_threads_on_the_same_table(lh):
    n_threads = 8
    setup(lh, "hot")
    start = threading.Barrier(n_threads)
    outcome: dict[int, object] = {}

    def worker(i):
        txn = lh.begin()
        txn.alter_table("ns.hot", set_properties={"winner": str(i), f"t{i}": "yes"})
        start.wait()  # all began at the same version before anyone commits
        try:
            outcome[i] = txn.commit()
        except lakehouse.CommitConflict as exc:
            outcome[i] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [i for i, o in outcome.items() if isinstance(o, int)]
    losers = [i for i, o in outcome.items() if not isinstance(o, int)]
    assert len(winners) == 1 and len(losers) == n_threads - 1
    assert all(isinstance(outcome[i], lakehouse.RetryableConflict) for i in losers)
    props = lh.at_version(lh.version).describe_table("ns.hot").properties
    (w,) = winners
    assert props == {"winner": str(w), f"t{w}": "yes"}  # no loser's change is present
    assert lh.version == 2


def test_lost_races_are_retried(lh, inject):
    """Force kvstore-level lost races on every first attempt: commits still land."""
    setup(lh, "a", "b")
    sleeps: list[float] = []
    inject.sleep = sleeps.append
    calls = {"n": 0}
    victims: set[str] = set()

    def interfere(intent, attempt):
        if intent.txn_id in victims and attempt == 1:
            calls["n"] += 1
            with lh.begin() as other:
                other.alter_table("ns.b", set_properties={"n": str(calls["n"])})

    inject.hook = interfere
    for i in range(5):
        txn = lh.begin()
        victims.add(txn.id)
        txn.alter_table("ns.a", set_properties={"i": str(i)})
        txn.commit()
        assert txn.attempts == 2 and len(txn.rebased_over) == 1
    inject.hook = None
    assert len(sleeps) == 5 and all(0 < s < 0.01 for s in sleeps)
    assert lh.version == 11


def test_bounded_retries(lh, inject):
    setup(lh, "a", "b")
    inject.sleep = lambda s: None

    def always_interfere(intent, attempt):
        if intent.isolation is Isolation.SERIALIZABLE:  # only the victim
            with lh.begin() as other:
                other.alter_table("ns.b", set_properties={"a": str(attempt)})

    inject.hook = always_interfere
    txn = lh.begin(Isolation.SERIALIZABLE)
    txn.alter_table("ns.a", set_properties={"x": "y"})
    with pytest.raises(lakehouse.RetryableConflict, match="gave up after 20"):
        txn.commit()
    assert txn.attempts == 20
    assert "x" not in lh.at_version(lh.version).describe_table("ns.a").properties


def run_interleaved(lh, isolation, seed, steps=400):
    """A seeded scheduler interleaving up to 4 open transactions.

    Each transaction reads the property "v" of two tables and sets the "v" of
    a third to their sum + 1 (its logic runs at begin; it commits later).
    Returns the committed (version, reads, write) triples and the final state.
    """
    import random

    rng = random.Random(seed)
    tables = [f"t{i}" for i in range(5)]
    with lh.begin() as txn:
        txn.create_namespace("ns")
        for t in tables:
            txn.create_table(f"ns.{t}", SCHEMA, {"v": "0"})
    open_txns: list[tuple[lakehouse.Transaction, tuple[str, str], str]] = []
    committed: list[tuple[int, tuple[str, str], str]] = []
    for _ in range(steps):
        if open_txns and (len(open_txns) >= 4 or rng.random() < 0.5):
            txn, reads, write = open_txns.pop(rng.randrange(len(open_txns)))
            try:
                txn.commit()
            except lakehouse.RetryableConflict:
                continue
            if txn.committed_version is not None:  # None: its write changed nothing
                committed.append((txn.committed_version, reads, write))
        else:
            txn = lh.begin(isolation)
            a, b, w = rng.sample(tables, 3)
            total = sum(int(txn.describe_table(f"ns.{t}").properties["v"]) for t in (a, b))
            txn.alter_table(f"ns.{w}", set_properties={"v": str(total + 1)})
            open_txns.append((txn, (a, b), w))
    for txn, _, _ in open_txns:
        txn.rollback()
    view = lh.at_version(lh.version)
    final = {t: int(view.describe_table(f"ns.{t}").properties["v"]) for t in tables}
    return sorted(committed), final


def replay(committed):
    model = {f"t{i}": 0 for i in range(5)}
    for _, (a, b), w in committed:
        model[w] = model[a] + model[b] + 1
    return model


@pytest.mark.parametrize("seed", range(5))
def test_serializable_histories_equal_a_serial_order(lh, seed):
    """Under SERIALIZABLE the result equals running the committed transactions
    one by one in version order."""
    committed, final = run_interleaved(lh, Isolation.SERIALIZABLE, seed)
    assert len(committed) > 20
    assert [v for v, _, _ in committed] == list(range(2, 2 + len(committed)))
    assert final == replay(committed)


def test_snapshot_histories_can_diverge_from_serial_order(lh):
    """The same workload under SNAPSHOT shows write skew: no serial replay matches."""
    committed, final = run_interleaved(lh, Isolation.SNAPSHOT, seed=0)
    assert final != replay(committed)
