"""The planning half of :mod:`lakehouse.spark.merge_clauses`: the merge's ``WHEN``
clauses (:class:`MergeClause`) checked, their column names resolved, and the
DataFrame of actions built, all on the driver (Spark analyses the expressions;
no job runs here).

Everything the driver can check is checked before any job: clause shapes
(:func:`checked_clauses`: an action its kind allows, only the last clause of a
kind without a condition), the aliases, column names (:meth:`MergePlan.check_names`,
with sqlglot, so the error names the column: a ``WHEN NOT MATCHED`` clause may
name only the source's columns, a ``WHEN NOT MATCHED BY SOURCE`` clause only
the target's), expressions Spark cannot analyse (analysed together in one
round trip), results that cannot be cast safely to their column's type, and
not-nullable columns an insert leaves out.

:meth:`MergePlan.actions` returns the actions DataFrame: the table's columns
(new values), ``_lh_file`` / ``_lh_row`` (the target row, null for inserts)
and :data:`KIND_COL` (``U``, ``D``, ``I``), which
:mod:`~lakehouse.spark.merge_clauses` runs and records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakehouse.spark import ops
from lakehouse.spark.reader import FILE_COL, ROW_COL
from lakehouse.spark.types import ColumnPlan, match_columns, spark_type
from lakehouse.spark.update import NOT_LITERAL, literal, typed_literal
from lakehouse.spark.writer import prepare, quote_ident

#: the actions' column naming each row's action: ``U``, ``D`` or ``I``
KIND_COL = "_lh_kind"
#: the actions each kind of clause may take
_ACTIONS = {
    "WHEN MATCHED": ("update", "delete"),
    "WHEN NOT MATCHED": ("insert",),
    "WHEN NOT MATCHED BY SOURCE": ("update", "delete"),
}
#: a column marking the source's side of a joined row (null: a target row no
#: source row matched, for WHEN NOT MATCHED BY SOURCE)
_PRESENT = "_lh_source_row"


@dataclass(frozen=True)
class MergeClause:
    """One ``WHEN`` clause of a merge (Delta's grammar):

    * ``matched=True``: ``WHEN MATCHED [AND condition] THEN UPDATE SET ... | DELETE``
      (``action`` ``"update"`` or ``"delete"``);
    * ``matched=False``: ``WHEN NOT MATCHED [BY TARGET] [AND condition] THEN INSERT``
      (``action`` ``"insert"``);
    * ``matched=False, by_source=True``: ``WHEN NOT MATCHED BY SOURCE [AND
      condition] THEN UPDATE SET ... | DELETE``: a target row no source row
      matches (the condition and values see only the target).

    ``condition``: Spark SQL over the target's and the source's columns (qualified
    by their aliases, ``t.qty > s.qty``; a not-matched clause sees only the
    source). ``values``: ``{target column: Spark SQL expression}``; None means
    ``*``, the source's columns of the same names."""

    matched: bool
    action: str
    condition: str | None = None
    values: Mapping[str, str] | None = None
    by_source: bool = False

    @property
    def kind(self) -> str:
        """``WHEN MATCHED``, ``WHEN NOT MATCHED`` or ``WHEN NOT MATCHED BY SOURCE``."""
        if self.by_source:
            return "WHEN NOT MATCHED BY SOURCE"
        return "WHEN MATCHED" if self.matched else "WHEN NOT MATCHED"

    @property
    def sees(self) -> str:
        """Which side's columns the clause may name: ``both``, ``source``, ``target``."""
        if self.by_source:
            return "target"
        return "both" if self.matched else "source"


def checked_clauses(clauses: Sequence[MergeClause]) -> list[MergeClause]:
    """The clauses, their shapes checked (Delta's rules: only the last clause of each
    kind may omit its condition)."""
    if isinstance(clauses, MergeClause) or not isinstance(clauses, Sequence):
        raise TypeError("clauses must be a list of MergeClause")
    out = list(clauses)
    if not out:
        raise ValueError("a merge needs at least one WHEN clause")
    for i, c in enumerate(out):
        if not isinstance(c, MergeClause):
            raise TypeError(f"clauses[{i}] must be a MergeClause, not {type(c).__name__}")
        if c.by_source and c.matched:
            raise ValueError(f"clauses[{i}]: a by_source clause has matched=False")
        what = c.kind
        if c.action not in _ACTIONS[what]:
            allowed = " or ".join(repr(a) for a in _ACTIONS[what])
            raise ValueError(
                f"clauses[{i}]: a {what} clause's action is {allowed}, not {c.action!r}"
            )
        if c.condition is not None and (
            not isinstance(c.condition, str) or not c.condition.strip()
        ):
            raise ValueError(f"clauses[{i}]: condition must be a non-empty Spark SQL str or None")
        if c.action == "delete" and c.values is not None:
            raise ValueError(f"clauses[{i}]: a DELETE clause takes no values")
        if c.by_source and c.action == "update" and c.values is None:
            raise ValueError(
                f"clauses[{i}]: a {what} clause has no source row: UPDATE SET needs the "
                "values ({column: expression over the target}), not *"
            )
        if c.values is not None:
            if not isinstance(c.values, Mapping) or not c.values:
                raise ValueError(
                    f"clauses[{i}]: values must be a non-empty {{column: Spark SQL expression}} "
                    "or None (meaning *)"
                )
            for k, v in c.values.items():
                if not isinstance(k, str) or not isinstance(v, str):
                    raise TypeError(f"clauses[{i}]: values must map column names to SQL str")
    for what in _ACTIONS:
        same = [i for i, c in enumerate(out) if c.kind == what]
        for i in same[:-1]:
            if out[i].condition is None:
                raise ValueError(
                    f"clauses[{i}]: only the last {what} clause may omit its condition "
                    "(a later one could never apply)"
                )
    return out


def checked_aliases(source_alias: str, target_alias: str) -> tuple[str, str]:
    """The aliases, checked: plain identifiers, different from each other."""
    for a in (source_alias, target_alias):
        if not isinstance(a, str) or not a.isidentifier():
            raise ValueError(f"alias {a!r} must be a plain identifier")
    if source_alias.lower() == target_alias.lower():
        raise ValueError(f"the source and the target need different aliases, not {source_alias!r}")
    return source_alias, target_alias


class MergePlan:
    """The driver's half of a merge by clauses: names checked, expressions analysed,
    the actions DataFrame."""

    def __init__(
        self, spark: SparkSession, tbl: ops.Table, df: DataFrame, sa: str, ta: str
    ) -> None:
        self.spark = spark
        self.tbl = tbl
        self.sa, self.ta = sa, ta
        self.src_names = {f.name.lower(): f.name for f in df.schema.fields}
        self.tgt_names = {n.lower(): n for n in tbl.schema.names}
        self.df = df

    # -- names -------------------------------------------------------------------------
    def on_condition(self, on: Sequence[str] | str | None) -> str:
        """``on`` as a condition string (key names become ``t.k = s.k AND ...``)."""
        if on is None:
            keys = list(self.tbl.d.primary_key)
            if not keys:
                raise ValueError(
                    f"{self.tbl.name} has no primary key: give the merge condition with on="
                )
        elif isinstance(on, str):
            if on.lower() in self.tgt_names and on.lower() in self.src_names:
                keys = [on]
            else:
                self.check_names(on, "the merge condition", sees="both")
                return on
        else:
            keys = list(on)
            if not keys or not all(isinstance(k, str) for k in keys):
                raise ValueError("on must be a Spark SQL condition or key column names")
        for k in keys:
            if k.lower() not in self.tgt_names:
                raise ValueError(f"merge key {k!r} is not a column of {self.tbl.name}")
            if k.lower() not in self.src_names:
                raise ValueError(f"merge key {k!r} is not a column of the merge source")
        return " AND ".join(
            f"{self.ta}.{quote_ident(self.tgt_names[k.lower()])} = "
            f"{self.sa}.{quote_ident(self.src_names[k.lower()])}"
            for k in keys
        )

    def check_names(self, text: str, what: str, *, sees: str) -> None:
        """The columns ``text`` names exist on the side its qualifier says (either,
        unqualified); ``sees``: ``"both"``, ``"source"`` (a not-matched clause: none
        of the target's) or ``"target"`` (a not-matched-by-source clause).
        Checked on the driver with sqlglot, so the error names the column; text it
        cannot parse is left to Spark's analysis."""
        import sqlglot
        from sqlglot import exp

        try:
            tree = sqlglot.parse_one(text, read="spark")
        except sqlglot.errors.SqlglotError:
            return
        if tree is None:
            return
        bound = {i.name.lower() for lam in tree.find_all(exp.Lambda) for i in lam.expressions}
        for c in tree.find_all(exp.Column):
            if c.find_ancestor(exp.Select) is not None:  # a subquery's columns are its own
                continue
            parts = [p.name for p in c.parts]
            if not parts or not parts[0]:
                continue
            side = parts[0].lower() if len(parts) >= 2 else ""
            if side == self.ta.lower():
                name = parts[1]
                if sees == "source":
                    raise ValueError(
                        f"bad {what} {text!r}: a WHEN NOT MATCHED clause sees only the "
                        f"source's columns, not the target's ({parts[0]}.{name})"
                    )
                if name.lower() not in self.tgt_names:
                    raise ValueError(
                        f"bad {what} {text!r}: {self.tbl.name} ({self.ta}) has no column "
                        f"{name!r} (its columns: {', '.join(self.tbl.schema.names)})"
                    )
            elif side == self.sa.lower():
                name = parts[1]
                if sees == "target":
                    raise ValueError(
                        f"bad {what} {text!r}: a WHEN NOT MATCHED BY SOURCE clause sees only "
                        f"the target's columns, not the source's ({parts[0]}.{name})"
                    )
                if name.lower() not in self.src_names:
                    raise ValueError(
                        f"bad {what} {text!r}: the merge source ({self.sa}) has no column "
                        f"{name!r} (its columns: {', '.join(self.src_names.values())})"
                    )
            else:
                name = parts[0].lower()
                if name in bound:
                    continue
                if sees == "source" and name not in self.src_names and name in self.tgt_names:
                    raise ValueError(
                        f"bad {what} {text!r}: a WHEN NOT MATCHED clause sees only the "
                        f"source's columns; {parts[0]!r} is the target's"
                    )
                if sees == "target" and name not in self.tgt_names and name in self.src_names:
                    raise ValueError(
                        f"bad {what} {text!r}: a WHEN NOT MATCHED BY SOURCE clause sees only "
                        f"the target's columns; {parts[0]!r} is the source's"
                    )
                if name not in self.src_names and name not in self.tgt_names:
                    raise ValueError(
                        f"bad {what} {text!r}: no column {parts[0]!r} in the merge source "
                        f"({self.sa}) or in {self.tbl.name} ({self.ta})"
                    )

    def one_sided(self, text: str, sees: str) -> str:
        """``text`` of a clause that sees one side, its bare column names that both
        sides have qualified by that side's alias (as Delta resolves such a clause
        against its side alone; Spark would call them ambiguous)."""
        if sees == "both":
            return text
        import sqlglot
        from sqlglot import exp

        mine, other = (
            (self.src_names, self.tgt_names)
            if sees == "source"
            else (self.tgt_names, self.src_names)
        )
        alias = self.sa if sees == "source" else self.ta
        try:
            tree = sqlglot.parse_one(text, read="spark")
        except sqlglot.errors.SqlglotError:
            return text
        if tree is None:
            return text
        bound = {i.name.lower() for lam in tree.find_all(exp.Lambda) for i in lam.expressions}
        changed = False
        for c in list(tree.find_all(exp.Column)):
            if c.table or c.find_ancestor(exp.Select) is not None:
                continue
            name = c.name.lower()
            if name in mine and name in other and name not in bound:
                c.set("table", exp.to_identifier(alias))
                changed = True
        return tree.sql(dialect="spark") if changed else text

    # -- the actions ---------------------------------------------------------------------
    def actions(self, cond: str, clauses: list[MergeClause]) -> tuple[DataFrame, dict[str, str]]:
        """The DataFrame of actions: the table's columns (new values), ``_lh_file`` /
        ``_lh_row`` (the target row, null for inserts) and ``_lh_kind``. Every
        expression is analysed on the driver in one round trip (one by one only to
        name the one Spark refuses)."""
        tbl, ta, sa = self.tbl, self.ta, self.sa
        on = ops.spark_condition(self.spark, cond, "merge condition")
        target, by_name = tbl.frame(self.spark, positions=True)
        src = self.df.select("*", F.lit(True).alias(_PRESENT))
        if any(c.by_source for c in clauses):  # every target row: a full outer join
            matches, how = target, "full"
        else:
            # the target rows the source matches, first (a semi join), so the outer
            # join moves only those
            matches, how = (
                ops.analysed(
                    target.alias(ta),
                    lambda f: f.join(self.df.alias(sa), on, "left_semi"),
                    cond,
                    "merge condition",
                ),
                "left",
            )
        joined = ops.analysed(
            src.alias(sa),
            lambda f: f.join(matches.alias(ta), on, how),
            cond,
            "merge condition",
        )
        # (clause, column or None for the condition) -> (Column, its text, what it is)
        exprs: dict[tuple[int, str | None], tuple[Column, str, str]] = {}
        values: list[dict[str, Column]] = []
        for i, c in enumerate(clauses):
            if c.condition is not None:
                what = f"condition of clauses[{i}]"
                self.check_names(c.condition, what, sees=c.sees)
                text = self.one_sided(c.condition, c.sees)
                exprs[(i, None)] = (ops.spark_condition(self.spark, text, what), text, what)
            literals, texts = self.values(i, c)
            values.append(literals)
            for n, text in texts.items():
                what = f"value for column {n!r} in clauses[{i}]"
                exprs[(i, n)] = (ops.spark_condition(self.spark, text, what), text, what)
        types = self.analyse(joined, exprs)
        for (i, target_col), (col_, text, what) in exprs.items():
            dt = types[(i, target_col)]
            if target_col is None:
                if not isinstance(dt, (T.BooleanType, T.NullType)):
                    raise ValueError(f"bad {what} {text!r}: it is {dt.simpleString()}, not boolean")
                continue
            values[i][target_col] = col_.cast(self.castable(target_col, dt, text, i))
        has_target = F.col(f"{ta}.{FILE_COL}").isNotNull()
        has_source = F.col(f"{sa}.{_PRESENT}").isNotNull()
        rows = {
            "WHEN MATCHED": has_target & has_source,
            "WHEN NOT MATCHED": ~has_target,
            "WHEN NOT MATCHED BY SOURCE": ~has_source,
        }
        conds = []
        for i, c in enumerate(clauses):
            holds = exprs[(i, None)][0] if (i, None) in exprs else F.lit(True)
            conds.append(rows[c.kind] & holds)
        pick = F.when(conds[0], F.lit(0))
        for i in range(1, len(clauses)):
            pick = pick.when(conds[i], F.lit(i))
        kinds = {"update": "U", "delete": "D", "insert": "I"}
        kind: Column = F.lit(None).cast("string")
        cols = {n: self.default(n, clauses, values) for n in tbl.schema.names}
        for i in reversed(range(len(clauses))):  # CASE _clause WHEN i ... ELSE t.c END
            chosen = F.col("_lh_clause") == F.lit(i)
            kind = F.when(chosen, F.lit(kinds[clauses[i].action])).otherwise(kind)
            for n, v in values[i].items():
                cols[n] = F.when(chosen, v).otherwise(cols[n])
        picked = joined.select("*", pick.alias("_lh_clause")).where(F.col("_lh_clause").isNotNull())
        out = picked.select(
            *[cols[n].alias(n) for n in tbl.schema.names],
            F.col(f"{ta}.{FILE_COL}").alias(FILE_COL),
            F.col(f"{ta}.{ROW_COL}").alias(ROW_COL),
            kind.alias(KIND_COL),
        )
        # every column is of its table type already (values cast, defaults the
        # target's or typed nulls): the write's not-null checks remain
        plans = [
            ColumnPlan(f.name, spark_type(f.type, f.name), "keep", not f.nullable)
            for f in tbl.schema
        ]
        plans += [
            ColumnPlan(FILE_COL, T.StringType(), "keep"),
            ColumnPlan(ROW_COL, T.LongType(), "keep"),
            ColumnPlan(KIND_COL, T.StringType(), "keep"),
        ]
        return prepare(out, plans, tbl.name), by_name

    def default(
        self, name: str, clauses: list[MergeClause], values: list[dict[str, Column]]
    ) -> Column:
        """Column ``name`` of a row no clause value sets: the target's value when an
        update may keep it (or the column is not nullable: a deleted row's values
        pass the write's not-null check), else null (an insert's unset column). The
        target's columns no clause needs are then never read (Spark prunes them)."""
        field = self.tbl.schema.field(name)
        kept = any(c.action == "update" and name not in v for c, v in zip(clauses, values))
        if kept or not field.nullable:
            return F.col(f"{self.ta}.{quote_ident(name)}")
        return F.lit(None).cast(spark_type(field.type, name))

    def values(self, i: int, c: MergeClause) -> tuple[dict[str, Column], dict[str, str]]:
        """Clause ``i``'s values per table column it sets: literals as Columns of the
        column's type (checked here), and the other expressions' text (their names
        checked). ``*`` gives the source's columns of the target's names."""
        tbl = self.tbl
        if c.action == "delete":
            return {}, {}
        if c.values is None:
            given = {
                n: f"{self.sa}.{quote_ident(self.src_names[n.lower()])}"
                for n in tbl.schema.names
                if n.lower() in self.src_names
            }
        else:
            given = {}
            for k, v in c.values.items():
                name = self.tgt_names.get(k.lower())
                if name is None:
                    raise ValueError(
                        f"clauses[{i}]: {tbl.name} has no column {k!r} to "
                        f"{c.action} (its columns: {', '.join(tbl.schema.names)})"
                    )
                if name in given:
                    raise ValueError(f"clauses[{i}]: column {name!r} is given twice")
                given[name] = v
        if c.action == "insert":
            for f in tbl.schema:
                if f.name not in given and not f.nullable:
                    raise ValueError(
                        f"clauses[{i}]: the INSERT gives no value for column {f.name!r} of "
                        f"{tbl.name}, which may not be null"
                    )
        literals: dict[str, Column] = {}
        texts: dict[str, str] = {}
        for n, text in given.items():
            what = f"value for column {n!r} in clauses[{i}]"
            lit = literal(text)
            if lit is not NOT_LITERAL:
                literals[n] = typed_literal(tbl, tbl.schema.field(n), lit, what)
                continue
            self.check_names(text, what, sees=c.sees)
            texts[n] = self.one_sided(text, c.sees)
        return literals, texts

    def castable(self, n: str, dt: T.DataType, text: str, i: int) -> T.DataType:
        """The type of column ``n``, which a value of Spark type ``dt`` must cast to
        safely (ValueError otherwise)."""
        field = self.tbl.schema.field(n)
        dst = spark_type(field.type, n)
        try:
            match_columns(T.StructType([T.StructField(n, dt)]), pa.schema([field]), self.tbl.name)
        except ValueError:
            raise ValueError(
                f"bad value for column {n!r} of {self.tbl.name} in clauses[{i}]: "
                f"{text!r} is {dt.simpleString()}, which cannot be cast safely to "
                f"{dst.simpleString()} ({field.type}); cast it "
                f"(CAST(... AS {dst.simpleString()})) if its values fit"
            ) from None
        return dst

    @staticmethod
    def analyse(
        joined: DataFrame, exprs: dict[tuple[int, str | None], tuple[Column, str, str]]
    ) -> dict[tuple[int, str | None], T.DataType]:
        """The Spark type of every expression, analysed together (one round trip); on
        an error, one by one to name the expression Spark refuses."""
        if not exprs:
            return {}
        keys = list(exprs)
        try:
            got = ops.analysed(
                joined,
                lambda f: f.select(*[exprs[k][0].alias(f"_e{j}") for j, k in enumerate(keys)]),
                "; ".join(e[1] for e in exprs.values()),
                "merge clauses",
            )
        except ValueError as exc:
            for col_, text, what in exprs.values():
                ops.analysed(joined, lambda f, c=col_: f.select(c), text, what)
            raise exc from None
        return {k: got.schema[f"_e{j}"].dataType for j, k in enumerate(keys)}
