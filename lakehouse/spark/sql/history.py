"""``DESCRIBE HISTORY ns.t``: a table's committed versions in Delta's words.

Runs on the driver; no Spark job runs (the rows are a local relation,
:func:`~lakehouse.spark.sql.values.local_frame`). One row per version that
changed the table, newest first, back to the version that created it:

==========================  ==================================================
column                      value
==========================  ==================================================
``version``                 the lakehouse version
``timestamp``               when it was committed
``operation``               Delta's name for what it did to the table
                            (``WRITE``, ``MERGE``, ``OPTIMIZE``, ``RESTORE``,
                            ``ADD COLUMNS``, ... :data:`OPERATIONS`)
``operationParameters``     e.g. ``{mode: Append}``, ``{version: 3}``,
                            ``{columns: a, b}``
``isolationLevel``          the transaction's isolation, upper case
==========================  ==================================================

An ``alter`` is named by comparing the table's definitions before and after
it (``ADD COLUMNS``, ``DROP COLUMNS``, ``RENAME COLUMN``, ``CHANGE COLUMN``,
``SET TBLPROPERTIES``, ``UNSET TBLPROPERTIES``); ``ALTER TABLE`` when the
version before has expired or the change is something else.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from lakehouse.spark.sql.context import Context
from lakehouse.spark.sql.values import local_frame

_S = T.StringType()

#: DataOp -> the operation name Delta's DESCRIBE HISTORY uses for it
OPERATIONS = {
    "create": "CREATE TABLE",
    "drop": "DROP TABLE",
    "alter": "ALTER TABLE",
    "append": "WRITE",
    "overwrite": "WRITE",
    "delete": "DELETE",
    "update": "UPDATE",
    "merge": "MERGE",
    "compact": "OPTIMIZE",
    "restore": "RESTORE",
}

HISTORY_SCHEMA = T.StructType(
    [
        T.StructField("version", T.LongType(), False),
        T.StructField("timestamp", T.TimestampType(), False),
        T.StructField("operation", _S, False),
        T.StructField("operationParameters", T.MapType(_S, _S), True),
        T.StructField("isolationLevel", _S, True),
    ]
)


def history(ctx: Context, name: str) -> DataFrame:
    """One row per committed version that changed table ``name``, newest first, back
    to the version that created it (an earlier table of that name is not its history)."""
    ctx.reads.describe_table(name)  # NotFound names it
    rows: list[tuple[Any, ...]] = []
    for v in ctx.lh.history():
        ops = [str(c.op) for c in v.changes if c.kind == "table" and c.name == name]
        if not ops:
            continue
        operation, params = _operation(ops, v.rollback_of)
        if operation == "ALTER TABLE":
            operation, params = _alteration(ctx.lh, name, v.version)
        rows.append((v.version, v.created_at, operation, params, str(v.isolation.value).upper()))
        if "create" in ops:
            break
    return local_frame(ctx, HISTORY_SCHEMA, rows)


def _alteration(lh: Any, name: str, version: int) -> tuple[str, dict[str, str]]:
    """What an ``alter`` of table ``name`` at ``version`` changed, in Delta's words
    (``ADD COLUMNS``, ``DROP COLUMNS``, ``RENAME COLUMN``, ``CHANGE COLUMN``, ``SET
    TBLPROPERTIES``, ``UNSET TBLPROPERTIES``), from its definitions before and
    after; ``ALTER TABLE`` when that is something else or the version before
    has expired."""
    from lakehouse.errors import LakehouseError

    try:
        with lh.at_version(version - 1) as view:
            before = view.describe_table(name)
        with lh.at_version(version) as view:
            after = view.describe_table(name)
    except LakehouseError:
        return "ALTER TABLE", {}
    old = {c.id: c for c in before.columns}
    new = {c.id: c for c in after.columns}
    old_fields = {f.name: f for f in before.schema}
    new_fields = {f.name: f for f in after.schema}
    added = [new[i].name for i in new if i not in old]
    dropped = [old[i].name for i in old if i not in new]
    renamed = [
        f"{old[i].name} -> {new[i].name}" for i in new if i in old and old[i].name != new[i].name
    ]
    changed = [
        new[i].name
        for i in new
        if i in old
        and not old_fields[old[i].name].equals(new_fields[new[i].name], check_metadata=True)
        and old[i].name == new[i].name
    ]
    props_before, props_after = dict(before.properties), dict(after.properties)
    set_keys = sorted(k for k, v in props_after.items() if props_before.get(k) != v)
    unset_keys = sorted(k for k in props_before if k not in props_after)
    for operation, key, found in (
        ("ADD COLUMNS", "columns", added),
        ("DROP COLUMNS", "columns", dropped),
        ("RENAME COLUMN", "columns", renamed),
        ("CHANGE COLUMN", "columns", changed),
        ("SET TBLPROPERTIES", "properties", set_keys),
        ("UNSET TBLPROPERTIES", "properties", unset_keys),
    ):
        if found:
            return operation, {key: ", ".join(found)}
    return "ALTER TABLE", {}


def _operation(ops: list[str], rollback_of: int | None) -> tuple[str, dict[str, str]]:
    """Delta's operation name for a version's changes of one table, with its parameters."""
    if rollback_of is not None:
        return "RESTORE", {"version": str(rollback_of)}
    if "create" in ops and any(o in ("append", "overwrite") for o in ops):
        return "CREATE TABLE AS SELECT", {}
    names = list(dict.fromkeys(OPERATIONS.get(o, o.upper()) for o in ops))
    params: dict[str, str] = {}
    if names == ["WRITE"]:
        params["mode"] = "Overwrite" if "overwrite" in ops else "Append"
    return ", ".join(names), params
