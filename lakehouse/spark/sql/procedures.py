"""``CALL system.<procedure>(...)``: the lakehouse's maintenance calls as Spark SQL.

Runs on the driver. The text after ``CALL`` is parsed by sqlglot as an
expression (``system.rollback(version => 5)`` is a function call with named
arguments); arguments are literals, by position or by name, a ``TIMESTAMP
'...'`` without a zone in the Spark session's time zone.

* ``system.rollback(version)`` -> ``version`` (the new one), ``restored_version``
* ``system.compact(table [, target_file_bytes])`` -> ``files_removed, files_added,
  rows, bytes_before, bytes_after`` (the :class:`~lakehouse.CompactResult`)
* ``system.expire_versions([keep_last] [, older_than] [, grace_seconds])`` ->
  ``expired_versions, oldest_version``

``rollback`` and ``expire_versions`` act on the whole lakehouse and refuse
to run inside a transaction; ``compact`` joins it. ``lakehouse.system.x``
is ``system.x``; anything else is a ValueError listing the procedures.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import sqlglot
from pyspark.sql import DataFrame
from sqlglot import exp

from lakehouse.spark.sql.context import Context
from lakehouse.spark.sql.names import CATALOG, command_text, without_catalog

_PROCEDURES = {
    "rollback": ("version",),
    "compact": ("table", "target_file_bytes"),
    "expire_versions": ("keep_last", "older_than", "grace_seconds"),
}


def call(ctx: Context, tree: exp.Command) -> DataFrame:
    """``CALL system.rollback(version)``, ``CALL system.compact(table [,
    target_file_bytes])``, ``CALL system.expire_versions(keep_last => n [,
    older_than => TIMESTAMP '...'] [, grace_seconds => s])``; arguments by position
    or by name (``name => value``)."""
    rest = command_text(tree)
    try:
        node = sqlglot.parse_one("SELECT " + rest, read="spark").expressions[0]
    except (sqlglot.errors.SqlglotError, IndexError, AttributeError):
        raise ValueError(f"CALL {rest}: not a procedure call") from None
    fn = node.expression if isinstance(node, exp.Dot) else node
    if not isinstance(fn, exp.Anonymous):
        raise ValueError(f"CALL {rest}: not a procedure call")
    path = _dotted(node.this) if isinstance(node, exp.Dot) else []
    if path[:1] == [CATALOG]:
        path = path[1:]
    proc = str(fn.name).lower()
    if path != ["system"] or proc not in _PROCEDURES:
        known = ", ".join(f"system.{p}" for p in _PROCEDURES)
        raise ValueError(f"unknown procedure {'.'.join([*path, proc])}; the lakehouse has {known}")
    args = _arguments(ctx, f"system.{proc}", _PROCEDURES[proc], fn.expressions)
    if proc == "compact":
        return _compact(ctx, args)
    if ctx.txn is not None:
        raise ValueError(
            f"CALL system.{proc} cannot run inside a transaction; COMMIT or ROLLBACK first"
        )
    if proc == "rollback":
        version = _int(args, "version", "system.rollback", required=True)
        assert version is not None
        new = ctx.lh.rollback(version)
        return ctx.result(version=new, restored_version=version)
    return _expire(ctx, args)


def _dotted(node: exp.Expression) -> list[str]:
    """``lakehouse.system`` (nested ``Dot``s of identifiers) as lower-case parts."""
    if isinstance(node, exp.Dot):
        return _dotted(node.this) + _dotted(node.expression)
    return [str(node.name).lower()]


def _arguments(
    ctx: Context, proc: str, names: tuple[str, ...], given: list[exp.Expression]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i, arg in enumerate(given):
        if isinstance(arg, exp.Kwarg):
            key = str(arg.this.name).lower()
            if key not in names:
                raise ValueError(
                    f"{proc} has no argument {key!r}; its arguments are {', '.join(names)}"
                )
            value = arg.expression
        else:
            if out and any(isinstance(a, exp.Kwarg) for a in given[:i]):
                raise ValueError(f"{proc}: a positional argument after a named one")
            if i >= len(names):
                raise ValueError(
                    f"{proc} takes at most {len(names)} arguments ({', '.join(names)})"
                )
            key, value = names[i], arg
        if key in out:
            raise ValueError(f"{proc}: argument {key!r} given twice")
        out[key] = _value(ctx, proc, key, value)
    return out


def _value(ctx: Context, proc: str, key: str, node: exp.Expression) -> Any:
    if isinstance(node, exp.Literal):
        if node.is_string:
            return str(node.this)
        try:
            return int(node.this)
        except ValueError:
            raise ValueError(
                f"{proc}: argument {key} must be a whole number, not {node.this}"
            ) from None
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        return -int(node.this.this)
    if isinstance(node, exp.Cast) and node.to.is_type(*exp.DataType.TEMPORAL_TYPES):
        from lakehouse.spark.sql.query import epoch_ms

        return epoch_ms(ctx, node.this if isinstance(node.this, exp.Literal) else node, proc)
    raise ValueError(f"{proc}: argument {key} must be a literal, not {node.sql(dialect='spark')}")


def _int(args: dict[str, Any], key: str, proc: str, *, required: bool = False) -> int | None:
    v = args.get(key)
    if v is None:
        if required:
            raise ValueError(f"{proc} needs the argument {key}")
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{proc}: argument {key} must be a whole number, not {v!r}")
    return v


def _compact(ctx: Context, args: dict[str, Any]) -> DataFrame:
    table = args.get("table")
    if not isinstance(table, str):
        raise ValueError("system.compact needs the argument table, a string such as 'ns.t'")
    target = _int(args, "target_file_bytes", "system.compact")
    with ctx.writing() as t:
        r = t.compact(without_catalog(table), target_file_bytes=target)
    return ctx.result(
        files_removed=r.files_removed,
        files_added=r.files_added,
        rows=r.rows,
        bytes_before=r.bytes_before,
        bytes_after=r.bytes_after,
    )


def _expire(ctx: Context, args: dict[str, Any]) -> DataFrame:
    keep_last = _int(args, "keep_last", "system.expire_versions")
    older_than = args.get("older_than")
    if isinstance(older_than, str):
        from lakehouse.spark.sql.query import epoch_ms

        older_than = epoch_ms(ctx, exp.Literal.string(older_than), "system.expire_versions")
    grace = _int(args, "grace_seconds", "system.expire_versions")
    if keep_last is None and older_than is None:
        raise ValueError("system.expire_versions needs keep_last, older_than, or both")
    before = min(v.version for v in ctx.lh.history())
    oldest = ctx.lh.expire_versions(
        keep_last=keep_last,
        older_than=older_than,
        grace=None if grace is None else timedelta(seconds=grace),
    )
    return ctx.result(expired_versions=max(0, oldest - before), oldest_version=oldest)
