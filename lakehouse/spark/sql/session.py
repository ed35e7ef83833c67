"""SQL transactions across statements: :class:`SqlSession`.

Runs on the driver. ``BEGIN [TRANSACTION] [ISOLATION LEVEL SNAPSHOT |
SERIALIZABLE]`` (also ``START TRANSACTION``) opens one lakehouse transaction
(``lh.begin``); every statement until ``COMMIT`` (``COMMIT WORK``, ``END``) or
``ROLLBACK`` joins it: queries read through it (its own writes seen; a
SERIALIZABLE read recorded), writes are buffered in it, and ``COMMIT`` makes
them one version. Without ``BEGIN`` each statement commits on its own.

Failures, as in PostgreSQL: a statement that may write (DML, MERGE, DDL,
``CALL``) failing inside a transaction rolls the transaction back at once (its
data files deleted) and leaves the session in an *aborted* transaction, where
every statement but ``ROLLBACK``/``COMMIT`` raises ValueError; ``COMMIT`` then
raises ValueError too (nothing was committed) and ends it. A failing query,
``SHOW`` or ``DESCRIBE`` (which change nothing) leaves the transaction usable.
A conflict at ``COMMIT`` raises :class:`lakehouse.RetryableConflict` (or
``IncompatibleConflict``) and the session is outside a transaction again.

A session closed (``close()``, the ``with`` block's end) or garbage collected
with a transaction open rolls it back; data files Spark jobs wrote for it are
deleted by the transaction's rollback. A driver killed mid-transaction commits
nothing (the lakehouse commits only at ``COMMIT``).
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from sqlglot import exp

from lakehouse.model import Isolation
from lakehouse.spark.sql.context import Context
from lakehouse.spark.sql.names import unsupported
from lakehouse.spark.sql.statements import QUERIES, TRANSACTIONS, original, run, split

log = logging.getLogger("lakehouse.spark")

#: statements that change nothing: their failure does not abort a transaction
_READ_ONLY = (*QUERIES, exp.Describe)


def _read_only(tree: exp.Expression) -> bool:
    if isinstance(tree, exp.Command):
        return str(tree.this).upper() == "SHOW"
    return isinstance(tree, _READ_ONLY)


class _State:
    """What the finalizer needs (never the session itself)."""

    def __init__(self) -> None:
        self.txn: Any = None
        self.aborted: str | None = None  # why the open transaction was rolled back

    def rollback(self) -> None:
        txn, self.txn, self.aborted = self.txn, None, None
        if txn is not None:
            try:
                txn.rollback()
            except Exception:  # a closed lakehouse: nothing of it was committed anyway
                log.warning("rolling back an SQL session's transaction failed", exc_info=True)


def isolation_of(tree: exp.Transaction) -> Isolation | None:
    """The isolation ``BEGIN`` asks for (None: the lakehouse's default)."""
    if tree.this:
        raise unsupported(f"BEGIN {tree.this}")
    level: Isolation | None = None
    for mode in tree.args.get("modes") or []:
        words = " ".join(str(mode).upper().split())
        if words == "READ WRITE":
            continue
        if words.startswith("ISOLATION LEVEL "):
            name = words.removeprefix("ISOLATION LEVEL ")
            if name in ("SNAPSHOT", "SERIALIZABLE"):
                level = Isolation[name]
                continue
        raise unsupported(
            f"BEGIN ... {words}", "the levels are ISOLATION LEVEL SNAPSHOT or SERIALIZABLE"
        )
    return level


def check_transactions(trees: list[exp.Expression], open_at_start: bool) -> bool:
    """Check the BEGIN/COMMIT/ROLLBACK of ``trees`` pair up (given whether a
    transaction is open before them), before any statement runs; returns
    whether one is open after them."""
    is_open = open_at_start
    for tree in trees:
        if isinstance(tree, exp.Transaction):
            if is_open:
                raise ValueError(f"{original(tree)!r}: a transaction is already open")
            isolation_of(tree)
            is_open = True
        elif isinstance(tree, (exp.Commit, exp.Rollback)):
            if tree.args.get("chain"):
                raise unsupported("COMMIT AND CHAIN")
            if tree.args.get("savepoint"):
                raise unsupported("ROLLBACK TO SAVEPOINT")
            if not is_open:
                raise ValueError(f"{original(tree)!r}: no transaction is open (BEGIN first)")
            is_open = False
    return is_open


class SqlSession:
    """Spark SQL over ``lh`` with ``BEGIN`` / ``COMMIT`` / ``ROLLBACK`` (module doc).

    >>> with SqlSession(lh, spark) as s:                             # doctest: +SKIP
    ...     s.sql("BEGIN")
    ...     s.sql("INSERT INTO sales.orders SELECT * FROM staged")
    ...     s.sql("DELETE FROM sales.stock WHERE qty = 0")
    ...     s.sql("COMMIT")                                          # one version
    """

    def __init__(self, lh: Any, spark: SparkSession) -> None:
        self._lh = lh
        self._spark = spark
        self._lock = threading.RLock()
        self._closed = False
        self._state = _State()
        self._finalizer = weakref.finalize(self, _State.rollback, self._state)

    @property
    def in_transaction(self) -> bool:
        """True between ``BEGIN`` and ``COMMIT``/``ROLLBACK`` (aborted or not)."""
        return self._state.txn is not None or self._state.aborted is not None

    @property
    def isolation(self) -> Isolation | None:
        """The open transaction's isolation level (None outside a transaction)."""
        txn = self._state.txn
        return None if txn is None else txn.isolation

    @property
    def transaction(self) -> Any:
        """The open lakehouse Transaction (None outside one, or once aborted)."""
        return self._state.txn

    def sql(self, text: str) -> DataFrame:
        """Run the statements of ``text`` (``;``-separated; all parsed first) and
        return the last one's result."""
        with self._lock:
            if self._closed:
                raise ValueError("this SqlSession is closed")
            trees = split(text)
            check_transactions(trees, self.in_transaction)
            out: DataFrame | None = None
            for tree in trees:
                out = self._one(tree)
            assert out is not None
            return out

    def _one(self, tree: exp.Expression) -> DataFrame:
        ctx = Context(self._lh, self._spark)
        state = self._state
        if isinstance(tree, exp.Transaction):
            state.txn = self._lh.begin(isolation_of(tree))
            return ctx.empty()
        if isinstance(tree, exp.Rollback):
            state.rollback()
            return ctx.empty()
        if isinstance(tree, exp.Commit):
            if state.aborted is not None:
                why, state.aborted = state.aborted, None
                raise ValueError(
                    f"COMMIT: nothing committed; the transaction was rolled back ({why})"
                )
            txn, state.txn = state.txn, None
            txn.commit()  # a conflict: raised, the transaction closed, nothing visible
            return ctx.empty()
        if state.aborted is not None:
            raise ValueError(
                f"the transaction was rolled back ({state.aborted}); "
                "end it with ROLLBACK before running other statements"
            )
        if state.txn is None:
            return run(ctx, tree)
        ctx.txn = state.txn
        try:
            return run(ctx, tree)
        except BaseException as exc:
            if not _read_only(tree):
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                state.rollback()
                state.aborted = f"{type(exc).__name__} in {original(tree)[:80]!r}: {first[:200]}"
            raise

    def close(self) -> None:
        """Roll back an open transaction; the session cannot be used again."""
        with self._lock:
            self._closed = True
            self._finalizer()

    def __enter__(self) -> SqlSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._closed:
            what = "closed"
        elif self._state.aborted is not None:
            what = "in an aborted transaction"
        elif self._state.txn is not None:
            what = f"in a {self._state.txn.isolation.name} transaction"
        else:
            what = "outside a transaction"
        return f"<lakehouse.spark.SqlSession {what}>"


def run_text(lh: Any, spark: SparkSession, text: str, *, txn: Any = None) -> DataFrame:
    """:func:`lakehouse.spark.sql`: every statement of ``text``, parsed first; the last
    result. With ``txn``: inside that transaction (no BEGIN/COMMIT allowed). Without
    it, a complete ``BEGIN ... COMMIT`` inside ``text`` is allowed; a lone ``BEGIN``,
    ``COMMIT`` or ``ROLLBACK`` needs a :class:`SqlSession`."""
    trees = split(text)
    has_txn = [t for t in trees if isinstance(t, TRANSACTIONS)]
    if txn is not None:
        if has_txn:
            raise ValueError(
                f"{original(has_txn[0])!r} in sql(..., txn=...): the transaction is "
                "the caller's; commit or roll it back with the Python API"
            )
        ctx = Context(lh, spark, txn)
        out: DataFrame | None = None
        for tree in trees:
            out = run(ctx, tree)
        assert out is not None
        return out
    if has_txn:
        try:
            still_open = check_transactions(trees, False)
        except ValueError as exc:
            raise ValueError(f"{exc}; use lakehouse.spark.SqlSession for transactions") from None
        if still_open:
            raise ValueError(
                "BEGIN without COMMIT or ROLLBACK in one sql() call: use "
                "lakehouse.spark.SqlSession for a transaction spanning calls"
            )
        with SqlSession(lh, spark) as session:
            out = None
            for tree in trees:
                out = session._one(tree)
            assert out is not None
            return out
    ctx = Context(lh, spark)
    out = None
    for tree in trees:
        out = run(ctx, tree)
    assert out is not None
    return out
