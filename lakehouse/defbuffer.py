"""A transaction's definition buffer: what it touched, what it read.

A :class:`~lakehouse.Transaction` owns one :class:`DefinitionBuffer` (and one
:class:`~lakehouse.data.buffer.TableData` for its rows). It keeps, over the
transaction's snapshot at its begin version ``v``:

* per object touched, a :class:`Pending` change: its definition at ``v``
  (looked up once and cached) and now (``final``; None: dropped);
* raw table-state writes (rollback and export apply whole states; a dropped
  table's state keys are cleared);
* under SERIALIZABLE, the read set: every object looked up (found or not) and
  every listing taken.

Reads consult the buffer first, so a transaction sees its own changes. At
commit the buffer is frozen into the definition part of a
:class:`~lakehouse.intent.TxnIntent` (:meth:`DefinitionBuffer.freeze`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

from lakehouse import codec, keys
from lakehouse.intent import DefinitionChange, ObjectNames, frozen_copy
from lakehouse.model import Definition

#: (kind, qualified name) of an object; ("namespaces", "") or (kind + "s", ns) of a listing
Ref = tuple[str, str]


@dataclass
class Pending(ObjectNames):
    """One object this transaction touched: its definition at ``v`` and now (DDL
    calls change ``final``; the commit gets a frozen copy)."""

    kind: str
    ns: str
    name: str | None
    base: Definition | None
    base_bytes: bytes | None
    final: Definition | None

    def freeze(self) -> DefinitionChange:
        return DefinitionChange(
            self.kind, self.ns, self.name, self.base, self.base_bytes, self.final
        )


class FrozenDefinitions(NamedTuple):
    """The definition part of a transaction's intent."""

    touched: Mapping[Ref, DefinitionChange]
    state_writes: Mapping[bytes, bytes | None]
    state_tables: frozenset[tuple[str, str]]
    reads: frozenset[Ref]
    listings: frozenset[Ref]


class DefinitionBuffer:
    """See the module docstring."""

    def __init__(
        self,
        get: Callable[[bytes], bytes | None],
        scan_prefix: Callable[[bytes], Iterator[tuple[bytes, bytes]]],
        *,
        serializable: bool,
    ) -> None:
        self._get = get
        self._scan_prefix = scan_prefix
        self._serializable = serializable
        self._pending: dict[Ref, Pending] = {}
        self._base_bytes: dict[Ref, bytes | None] = {}
        self._state_writes: dict[bytes, bytes | None] = {}
        self._state_tables: set[tuple[str, str]] = set()
        self._reads: set[Ref] = set()
        self._listings: set[Ref] = set()

    def __len__(self) -> int:
        """Objects touched."""
        return len(self._pending)

    # -- reads -----------------------------------------------------------------------
    def lookup(self, kind: str, ns: str, name: str | None) -> Definition | None:
        """The object's definition as the transaction sees it (a read, recorded)."""
        ref = (kind, ns if name is None else f"{ns}.{name}")
        p = self._pending.get(ref)
        if p is not None:
            return p.final
        if self._serializable:
            self._reads.add(ref)
        data = self.base(kind, ns, name)
        return None if data is None else codec.decode_def(data)

    def base(self, kind: str, ns: str, name: str | None) -> bytes | None:
        """The stored definition at ``v`` (cached: the snapshot does not change)."""
        ref = (kind, ns if name is None else f"{ns}.{name}")
        try:
            return self._base_bytes[ref]
        except KeyError:
            data = self._base_bytes[ref] = self._get(keys.object_key(kind, ns, name))
            return data

    def names(self, kind: str, ns: str | None, stored: Iterable[str]) -> list[str]:
        """Names of ``kind`` (in ``ns``; namespaces when None): ``stored`` (at ``v``)
        with the transaction's creates and drops (a listing, recorded)."""
        if self._serializable:
            self._listings.add(("namespaces", "") if ns is None else (kind + "s", ns))
        names = set(stored)
        for p in self._pending.values():
            if p.kind != kind or (ns is not None and p.ns != ns):
                continue
            plain = p.ns if ns is None else p.name
            assert plain is not None
            if p.final is None:
                names.discard(plain)
            else:
                names.add(plain)
        return sorted(names)

    def state_items(self, ns: str, table: str) -> list[tuple[bytes, bytes]]:
        """A table's state keys at ``v`` with the transaction's raw state writes."""
        prefix = keys.table_state_prefix(ns, table)
        items = dict(self._scan_prefix(prefix))
        for k, v in self._state_writes.items():
            if k.startswith(prefix):
                if v is None:
                    items.pop(k, None)
                else:
                    items[k] = v
        return sorted(items.items())

    # -- changes ---------------------------------------------------------------------
    def touch(self, kind: str, ns: str, name: str | None) -> Pending:
        """The buffered change of one object (created on first touch)."""
        ref = (kind, ns if name is None else f"{ns}.{name}")
        p = self._pending.get(ref)
        if p is None:
            data = self.base(kind, ns, name)
            base = None if data is None else codec.decode_def(data)
            p = self._pending[ref] = Pending(kind, ns, name, base, data, base)
        return p

    def has_state_writes(self, ns: str, table: str) -> bool:
        """Whether the transaction changes raw state keys of the table (then reads
        of its state go through :meth:`state_items`)."""
        prefix = keys.table_state_prefix(ns, table)
        return any(k.startswith(prefix) for k in self._state_writes)

    def clear_state(self, state_keys: Iterable[bytes]) -> None:
        """Delete raw state keys at commit (a dropped table's)."""
        for k in state_keys:
            self._state_writes[k] = None

    def apply_state(self, current: Mapping[bytes, bytes], target: Mapping[bytes, bytes]) -> int:
        """Buffer the raw changes that turn state ``current`` into ``target``
        (see :meth:`lakehouse.Transaction.apply_state`); how many keys differ."""
        changed = 0
        for key in sorted(set(current) | set(target)):
            old, new = current.get(key), target.get(key)
            if old == new:
                continue
            changed += 1
            if key.startswith(keys.KEY_INDEX_PREFIX):  # a key index entry: no object
                self._state_writes[key] = new
                continue
            if key.startswith(keys.STATE_PREFIX):
                ns, table, _ = keys.parse_state_key(key)
                self._state_writes[key] = new
                self._state_tables.add((ns, table))
                ref = ("table", f"{ns}.{table}")
                if ref not in self._pending:
                    base = current.get(keys.table_key(ns, table))
                    d = None if base is None else codec.decode_def(base)
                    self._pending[ref] = Pending("table", ns, table, d, base, d)
                continue
            kind, ns, name = _kind_of(key)
            ref = (kind, ns if name is None else f"{ns}.{name}")
            prev = self._pending.get(ref)
            base_def = None if old is None else codec.decode_def(old)
            final = None if new is None else codec.decode_def(new)
            if prev is not None:  # created above for a state key: keep its base
                prev.final = final
            else:
                self._pending[ref] = Pending(kind, ns, name, base_def, old, final)
        return changed

    # -- commit ----------------------------------------------------------------------
    def freeze(self) -> FrozenDefinitions:
        serializable = self._serializable
        writes = self._state_writes
        return FrozenDefinitions(
            touched=MappingProxyType({ref: p.freeze() for ref, p in self._pending.items()}),
            state_writes=frozen_copy(writes),
            state_tables=frozenset(self._state_tables),
            reads=frozenset(self._reads) if serializable else frozenset(),
            listings=frozenset(self._listings) if serializable else frozenset(),
        )


def _kind_of(key: bytes) -> tuple[str, str, str | None]:
    if key.startswith(keys.NAMESPACE_PREFIX):
        return "namespace", keys.parse_namespace_key(key), None
    ns, name = keys.parse_child_key(key)
    return ("table" if key.startswith(keys.TABLE_PREFIX) else "view"), ns, name
