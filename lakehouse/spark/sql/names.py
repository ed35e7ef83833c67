"""Table names in lakehouse SQL, and the error for what the SQL layer does not support.

Runs on the driver only (no Spark call). A lakehouse object is named with two
parts, ``ns.t`` (each part may be quoted: ```sales`.`orders```). A third,
catalog part is accepted only as ``lakehouse`` (``lakehouse.ns.t`` = ``ns.t``):
it is stripped. Any other catalog (``spark_catalog.db.t``, ...) names an object
of that Spark catalog, never a lakehouse one: :func:`table_name` keeps it in
the name (three parts), so :meth:`Context.is_table` answers False and the
reference is left to Spark.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

#: the catalog name that means "the lakehouse" in a three-part name
CATALOG = "lakehouse"


def table_name(t: exp.Table) -> str:
    """``"ns.t"`` for a table reference (quotes removed; ``lakehouse.`` stripped);
    ``"t"`` for a one-part name; ``"cat.ns.t"`` for another catalog's table."""
    parts = [p.name for p in t.parts]
    if len(parts) == 3 and parts[0].lower() == CATALOG:
        parts = parts[1:]
    return ".".join(parts)


def without_catalog(name: str) -> str:
    """``"ns.t"`` for a dotted table name ``"lakehouse.ns.t"``; any other name as given."""
    parts = name.split(".")
    return ".".join(parts[1:]) if len(parts) == 3 and parts[0].lower() == CATALOG else name


def command_text(tree: exp.Command) -> str:
    """The text after a command's first word (``SHOW ...``, ``CALL ...``), which
    sqlglot leaves unparsed."""
    e = tree.expression
    return str(e.name) if isinstance(e, exp.Expression) else str(e or "")


def unsupported(construct: str, hint: str = "") -> ValueError:
    """The ValueError for a construct lakehouse SQL does not support (raised before
    any job runs): ``unsupported in lakehouse SQL: <construct>[; <hint>]``."""
    text = f"unsupported in lakehouse SQL: {construct}"
    if hint:
        text += f"; {hint}"
    return ValueError(text)


def lakehouse_target(ctx: Any, target: Any, verb: str) -> str:
    """The name of the table a ``DELETE`` / ``UPDATE`` / ``MERGE INTO`` (``verb``)
    changes, which must be a lakehouse table at its latest version, named plainly;
    ValueError otherwise. ``ctx``: the statement's Context."""
    if not isinstance(target, exp.Table) or not isinstance(target.this, exp.Identifier):
        raise unsupported(f"{verb} {target.sql(dialect='spark')}")
    name = table_name(target)
    if not ctx.is_table(name):
        if ctx.is_view(name):
            raise ValueError(f"{verb} {name}: {name} is a lakehouse view, not a table")
        raise ValueError(f"{verb} {name}: {name} is not a lakehouse table")
    plain_target(target, name, verb)
    return name


def plain_target(target: exp.Table, name: str, verb: str) -> None:
    """A statement's target table without a version, join, sample or hint."""
    if target.args.get("version") is not None:
        raise unsupported(f"{verb} {name} at a version (VERSION/TIMESTAMP AS OF)")
    for arg in ("joins", "laterals", "pivots", "sample", "hints", "changes", "when"):
        if target.args.get(arg):
            raise unsupported(f"{verb} {target.sql(dialect='spark')}")
