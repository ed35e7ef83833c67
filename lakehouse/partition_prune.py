"""Pruning by partition: which partitions a ``where`` can touch, as a yes/no per
partition (:func:`may_match`) and as file-id ranges (:func:`key_ranges`).

Both project the where's terms onto each partition field the way Iceberg's
inclusive projection does, into a :class:`_Bound` on the field's key text
(partition_encoding.enc, whose byte order is value order):

    term on column c        field t(c), t order-preserving     field bucket(N, c)
    ─────────────────────   ─────────────────────────────────  ──────────────────
    c = v, c in (v, ...)    key in {enc(t(v)), ...}             the same
    c < v, c <= v           key <= enc(t(v))  (identity: <)     key not null
    c > v, c >= v           key >= enc(t(v))  (identity: >)     key not null
    c is null               key = "0"                           the same
    c is not null           key != "0"                          the same

A term that cannot be projected (a value of another type, NaN, a column the
spec does not partition by) restricts nothing: a partition is pruned only
when no row in it can satisfy every term. ``<`` through ``day`` keeps the
boundary day; the row filter drops its rows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import pyarrow as pa

from lakehouse import partition_encoding as pe
from lakehouse.partition_encoding import enc
from lakehouse.terms import Term


# what this module needs of lakehouse.partition's classes (that module imports this one)
class Transform(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def order_preserving(self) -> bool: ...
    def result_type(self, source: pa.DataType) -> pa.DataType: ...
    def apply_py(self, value: Any, source: pa.DataType) -> Any: ...


class PartitionField(Protocol):
    @property
    def source_id(self) -> int: ...
    @property
    def transform(self) -> Transform: ...


class PartitionSpec(Protocol):
    @property
    def spec_id(self) -> int: ...
    @property
    def fields(self) -> Sequence[PartitionField]: ...
    @property
    def is_unpartitioned(self) -> bool: ...


_RANGE = ("<", "<=", ">", ">=")


@dataclass
class _Bound:
    """What the terms allow of one field's key text."""

    values: set[str] | None = None  # allowed keys (None: any)
    lo: str | None = None
    lo_incl: bool = True
    hi: str | None = None
    hi_incl: bool = True
    nonnull: bool = False

    def admits(self, e: str) -> bool:
        if self.values is not None and e not in self.values:
            return False
        if e == "0":
            return not (self.nonnull or self.lo is not None or self.hi is not None)
        if self.lo is not None and (e < self.lo or (e == self.lo and not self.lo_incl)):
            return False
        return not (self.hi is not None and (e > self.hi or (e == self.hi and not self.hi_incl)))

    def only(self, keys: set[str]) -> None:
        self.values = keys if self.values is None else self.values & keys

    def above(self, e: str, incl: bool) -> None:
        if self.lo is None or e > self.lo or (e == self.lo and not incl):
            self.lo, self.lo_incl = e, incl

    def below(self, e: str, incl: bool) -> None:
        if self.hi is None or e < self.hi or (e == self.hi and not incl):
            self.hi, self.hi_incl = e, incl

    @property
    def empty(self) -> bool:
        if self.lo is None or self.hi is None:
            return False
        return self.lo > self.hi or (self.lo == self.hi and not (self.lo_incl and self.hi_incl))


def _keys(t: Transform, source: pa.DataType, rt: pa.DataType, v: Any) -> set[str]:
    """The key texts of the partition value(s) rows equal to ``v`` have."""
    pv = t.apply_py(v, source)
    out = {enc(pv, rt)}
    if pe.kind(rt) == "float" and pv == 0:  # -0.0 = 0.0, but the keys differ
        out |= {enc(-0.0, rt), enc(0.0, rt)}
    return out


def _restrict(b: _Bound, t: Transform, source: pa.DataType, rt: pa.DataType, term: Term) -> None:
    op, vals = term.op, term.values
    if op == "is_null":
        b.only({"0"})
        return
    if op == "not_null":
        b.nonnull = True
        return
    if not vals or any(v is None or (isinstance(v, float) and math.isnan(v)) for v in vals):
        return
    if op == "in" or (op == "=" and len(vals) == 1):
        keys: set[str] = set()
        for v in vals:
            keys |= _keys(t, source, rt, v)
        b.only(keys)
    elif op in _RANGE and len(vals) == 1 and not t.order_preserving:
        b.nonnull = True
    elif op in _RANGE and len(vals) == 1:
        v, lower = vals[0], op in (">", ">=")
        if pe.kind(rt) == "float" and v == 0:
            v = -0.0 if lower else 0.0  # the bound that keeps both zeros
        e = enc(t.apply_py(v, source), rt)
        incl = op in ("<=", ">=") or t.name != "identity"
        b.above(e, incl) if lower else b.below(e, incl)
        b.nonnull = True


def _field(f: PartitionField, types: Mapping[int, pa.DataType]) -> pa.DataType | None:
    """The field's result type (None: its column is gone or changed beyond the transform)."""
    src = types.get(f.source_id)
    try:
        return None if src is None else f.transform.result_type(src)
    except ValueError:
        return None


def _bounds(
    spec: PartitionSpec,
    types: Mapping[int, pa.DataType],
    names: Mapping[int, str],
    terms: Sequence[Term],
) -> list[_Bound]:
    out = []
    for f in spec.fields:
        b = _Bound()
        rt, col = _field(f, types), names.get(f.source_id)
        if rt is not None and col is not None:
            for term in terms:
                if term.column != col:
                    continue
                trial = replace(b, values=None if b.values is None else set(b.values))
                try:
                    _restrict(trial, f.transform, types[f.source_id], rt, term)
                except (ValueError, TypeError, ArithmeticError, OverflowError):
                    continue  # not understood: restricts nothing
                b = trial
        out.append(b)
    return out


def may_match(
    spec: PartitionSpec,
    types_by_id: Mapping[int, pa.DataType],
    names: Mapping[int, str],
    values: Sequence[Any],
    terms: Sequence[Term],
) -> bool:
    """False only when no row of the partition ``values`` can satisfy every term."""
    if not terms or len(values) != len(spec.fields):
        return True
    for f, b, v in zip(spec.fields, _bounds(spec, types_by_id, names, terms), values):
        rt = _field(f, types_by_id)
        if rt is None:
            continue
        try:
            e = enc(v, rt)
        except ValueError:
            continue
        if not b.admits(e):
            return False
    return True


def key_ranges(
    spec: PartitionSpec,
    types_by_id: Mapping[int, pa.DataType],
    names: Mapping[int, str],
    terms: Sequence[Term],
    limit: int = 4096,
) -> list[tuple[str, str]] | None:
    """File-id ranges ``[start, end)`` holding every partition of ``spec`` that may
    match the terms (sorted, disjoint; None: the whole spec)."""
    if spec.is_unpartitioned or not terms:
        return None
    prefixes = [f"p{spec.spec_id:04x}"]
    rng: tuple[str | None, bool, str | None, bool, bool] | None = None
    for b in _bounds(spec, types_by_id, names, terms):
        if b.empty:
            return []
        if b.values is not None:
            keys = sorted(e for e in b.values if b.admits(e))
            if not keys:
                return []
            if len(prefixes) * len(keys) <= limit:
                prefixes = [p + "/" + e for p in prefixes for e in keys]
                continue
            rng = (keys[0], True, keys[-1], True, False)
        elif b.lo is not None or b.hi is not None or b.nonnull:
            rng = (b.lo, b.lo_incl, b.hi, b.hi_incl, True)
        break
    if rng is None and len(prefixes) == 1 and "/" not in prefixes[0]:
        return None
    out = []
    for p in prefixes:
        if rng is None:
            out.append((p + "/", p + "0"))
            continue
        lo, lo_incl, hi, hi_incl, nonnull = rng
        start = p + "/" + ("1" if nonnull else "") if lo is None else f"{p}/{lo}"
        start += "" if lo is None or lo_incl else "0"
        end = p + "/2" if hi is None else f"{p}/{hi}" + ("0" if hi_incl else "")
        out.append((start, end))
    return sorted(out)
