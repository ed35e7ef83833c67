"""What a ``where`` says about single columns: the facts pruning works from.

A :class:`Term` is one fact every row matching a predicate satisfies
(``total > 100``, ``day IN (...)``, ``ts IS NOT NULL``). A predicate's terms
form a conjunction implied by it: a file, or a partition, whose bounds make
any one term false for all its rows holds no matching row and is skipped.
Terms are an over-approximation; the row filter still decides which rows
match. Values are Python values of the column's type (``datetime.date`` for
a date column, ``Decimal`` for a decimal, ...), exactly as
:meth:`pyarrow.Scalar.as_py` gives them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

#: the comparisons a term can make
Op = Literal["=", "<", "<=", ">", ">=", "in", "is_null", "not_null"]


@dataclass(frozen=True)
class Term:
    """``column <op> values``: ``values`` holds one value for a comparison, the
    (non-null) list for ``in``, nothing for ``is_null`` / ``not_null``."""

    column: str
    op: Op
    values: tuple[Any, ...] = ()
