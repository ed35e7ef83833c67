"""The commit protocol: rebase over every version in between, then write w+1.

Versions form a chain 0, 1, 2, ... in the kvstore: the head key ``H`` holds
the latest version number and ``R/<v>`` one record per version (what it
changed, what it read, when, from which parent). A transaction that began at
version ``v`` commits in a short kvstore transaction:

1. read the head ``w`` with ``get_for_update(H)``. Every commit writes ``H``,
   so the kvstore's first-committer-wins rule on that key lets exactly one
   writer turn ``w`` into ``w+1``: a second writer that read the same ``w``
   gets ``kvstore.TransactionConflict`` at its kvstore commit and nothing of
   it becomes visible. (TrinityLake gets the same guarantee from a
   put-if-absent of the next root; here it is one key in one store.) It
   also reads the oldest retained version ``L/oldest`` for update: a
   transaction whose base (or a version it restored from) has expired gets
   ``RetryableConflict``, and an expiry committing meanwhile makes the
   attempt conflict and start over.
2. if ``w > v``: load the records of ``v+1..w`` and check each one against
   this transaction (:mod:`lakehouse.conflicts`): SNAPSHOT conflicts when a
   version in between changed an object we change; SERIALIZABLE also when it
   changed an object we read or created/dropped one inside a listing we read.
   Checking *every* record, not only the latest state, is what makes the
   rebase sound: an object changed and changed back in between still counts.
   Versions already checked in an earlier attempt are not checked again.
3. re-validate the meaning of our changes on the state at ``w`` (the
   namespace of a new table still exists, a dropped namespace is still
   empty, no table/view took the name): a failure here cannot be fixed by
   retrying -> ``IncompatibleConflict``.
4. write our definitions, record ``R/<w+1>`` and ``H = w+1``, and commit the
   kvstore transaction (durable: fsynced, group-committed with concurrent
   commits). On ``kvstore.TransactionConflict`` another writer won ``w+1``:
   back off (jittered, exponential) and go to 1. After ``commit_retries``
   lost races the commit gives up with ``RetryableConflict``.

TrinityLake's example, both transactions begun at version 3::

    T1 ──begin(v3)── alter t1 ────────── commit: H=3 → write R/4, H=4 ✓
    T2 ──begin(v3)── alter t2 ──── commit: H=3 → write R/4 ........ ✗ lost race
                                           H=4 → R/4 changed only t1: compatible
                                                 → write R/5, H=5 ✓ (rebased over [4])

Each record stores ``base_seq``, the kvstore seq at which its commit read the
parent: version ``w`` is exactly the state visible at ``R/<w+1>.base_seq``
(the commit of ``w+1`` came later, and nothing else writes definitions), so
time travel to any version but the head is one record lookup plus a kvstore
snapshot. A record cannot hold its own commit seq: that is assigned inside
the kvstore commit, after the record's bytes are fixed.

``created_at`` is ``max(now, parent.created_at)``, so creation times never go
backwards along the chain and ``at_time`` can binary-search the records.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import kvstore
from lakehouse import codec, keys
from lakehouse.conflicts import INCOMPATIBLE, Conflict, Intent, check
from lakehouse.data import commit as data_commit
from lakehouse.errors import IncompatibleConflict, RetryableConflict, TransactionExpired
from lakehouse.model import Isolation, ObjectChange, VersionInfo

if TYPE_CHECKING:
    from lakehouse.services import LakehouseServices, PendingChange, TransactionState

log = logging.getLogger("lakehouse")


@dataclass(frozen=True)
class CommitOptions:
    """How a commit differs from a plain transaction's (rollback, export)."""

    #: conflict with every version committed meanwhile (the result must equal an old state)
    exclusive: bool = False
    #: write a version even when nothing changed
    force: bool = False
    #: the version a rollback restores
    rollback_of: int | None = None
    #: where an export came from
    source: dict[str, Any] | None = None


@dataclass(frozen=True)
class Prepared:
    """A transaction's buffer turned into what a commit writes and checks."""

    changes: tuple[ObjectChange, ...]
    changed: tuple[PendingChange, ...]
    writes: tuple[tuple[bytes, bytes | None], ...]
    intent: Intent


def prepare(txn: TransactionState, options: CommitOptions) -> Prepared:
    changes: list[ObjectChange] = []
    changed: list[PendingChange] = []
    writes: list[tuple[bytes, bytes | None]] = []
    reads = set(txn._reads)
    state_tables = {f"{ns}.{t}" for ns, t in txn._state_tables}
    state_tables |= {w.qualified for w in txn._table_writes.values() if not w.is_empty()}
    data_only: dict[tuple[str, str], frozenset[str]] = {}
    for (kind, qname), p in txn._pending.items():
        final = None
        if p.final is not None:
            final = codec.encode_def(p.final)
            codec.remember_def(final, p.final)
        if final == p.base_bytes:
            if kind == "table" and qname in state_tables and final is not None:
                did = codec.def_id(final)
                changes.append(ObjectChange(kind, qname, "alter", did, did))
                w = txn._table_writes.get((p.ns, p.name or ""))
                data_only[(kind, qname)] = frozenset(w.ops if w is not None else ("restore",))
            elif txn._serializable:
                reads.add((kind, qname))  # looked at, left as it was
            continue
        if p.base_bytes is None:
            op = "create"
        elif final is None:
            op = "drop"
        else:
            op = "alter"
        changes.append(
            ObjectChange(
                kind,
                qname,
                op,
                None if p.base_bytes is None else codec.def_id(p.base_bytes),
                None if final is None else codec.def_id(final),
            )
        )
        changed.append(p)
        writes.append((p.key, final))
    writes.extend(txn._state_writes.items())
    serializable = txn.isolation is Isolation.SERIALIZABLE
    intent = Intent(
        isolation=txn.isolation,
        writes={(c.kind, c.name): c.op for c in changes},
        reads=frozenset(reads) if serializable else frozenset(),
        listings=frozenset(txn._listings) if serializable else frozenset(),
        exclusive=options.exclusive,
        data_only=data_only,
    )
    return Prepared(tuple(changes), tuple(changed), tuple(writes), intent)


def _raise(conflict: Conflict) -> None:
    cls = IncompatibleConflict if conflict.outcome == INCOMPATIBLE else RetryableConflict
    raise cls(conflict.reason, version=conflict.version, objects=conflict.objects)


def revalidate(ktx: kvstore.Transaction, txn: TransactionState, prep: Prepared, head: int) -> None:
    """Step 3: our changes still mean the same on the state at ``head``."""
    pending = txn._pending
    for p in prep.changed:
        if ktx.get(p.key) != p.base_bytes:  # defensive: records already cover this
            raise RetryableConflict(
                f"{p.kind} {p.qualified} changed after version {txn.version}",
                version=head,
                objects=((p.kind, p.qualified),),
            )

    def exists_at_head(kind: str, ns: str, name: str | None) -> bool:
        ref = (kind, ns if name is None else f"{ns}.{name}")
        if ref in pending:
            return pending[ref].final is not None
        return ktx.get(keys.object_key(kind, ns, name)) is not None

    for p in prep.changed:
        if p.base is None and p.kind in ("table", "view") and p.final is not None:
            assert p.name is not None
            if not exists_at_head("namespace", p.ns, None):
                raise IncompatibleConflict(
                    f"cannot create {p.kind} {p.qualified}: namespace {p.ns!r} was dropped "
                    f"by a version after {txn.version}",
                    version=head,
                    objects=(("namespace", p.ns),),
                )
            other = "view" if p.kind == "table" else "table"
            if exists_at_head(other, p.ns, p.name):
                raise IncompatibleConflict(
                    f"cannot create {p.kind} {p.qualified}: a {other} of that name was "
                    f"created by a version after {txn.version}",
                    version=head,
                    objects=((other, p.qualified),),
                )
        if p.kind == "namespace" and p.final is None:
            for kind in ("table", "view"):
                prefix = keys.children_prefix(kind, p.ns)
                for k, _ in ktx.scan_prefix(prefix):
                    name = keys.child_name(prefix, k)
                    if exists_at_head(kind, p.ns, name):
                        raise IncompatibleConflict(
                            f"cannot drop namespace {p.ns!r}: {kind} {p.ns}.{name} was "
                            f"created in it by a version after {txn.version}",
                            version=head,
                            objects=((kind, f"{p.ns}.{name}"),),
                        )


def run(lh: LakehouseServices, txn: TransactionState, options: CommitOptions | None = None) -> int:
    """Run the protocol for ``txn``; returns the version it created."""
    options = options or CommitOptions()
    ttl = lh.definition.transaction_ttl
    if lh._monotonic() - txn._started > ttl:
        raise TransactionExpired(
            f"transaction began at version {txn.version} more than {ttl:g}s ago "
            "(the lakehouse's transaction TTL); re-run it"
        )
    prep = prepare(txn, options)
    if not prep.changes and not options.force and txn.app_id is None:
        return txn.version  # read-only: one consistent snapshot, always serializable
    db = lh._db
    checked = txn.version
    records: list[VersionInfo] = []
    retries = lh._options.commit_retries
    for attempt in range(1, retries + 1):
        txn.attempts = attempt
        ktx = db.transaction(kvstore.Isolation.SNAPSHOT)
        try:
            head = keys.decode_u64(_must(ktx.get_for_update(keys.HEAD), "head"))
            if txn.app_id is not None:
                done = _app_done(ktx, txn.app_id, txn.app_version)
                if done is not None:
                    txn.skipped = True
                    return done
            # every attempt, for update: an expiry committed meanwhile makes this
            # attempt conflict (its files may be queued for deletion, and the
            # retention watermark may have passed this attempt's read seq)
            oldest_raw = ktx.get_for_update(keys.OLDEST)
            oldest = 0 if oldest_raw is None else keys.decode_u64(oldest_raw)
            _check_not_expired(txn, oldest)
            if head > checked:
                for u in range(checked + 1, head + 1):
                    rec = lh._record(u, ktx.get)
                    conflict = check(prep.intent, rec)
                    if conflict is not None:
                        _raise(conflict)
                    records.append(rec)
                    txn.rebased_over.append(u)
                checked = head
            if head > txn.version:
                revalidate(ktx, txn, prep, head)
            data_writes, data_changes = data_commit.rebase_all(lh, ktx, txn, records)
            if not prep.changes and not options.force and not data_changes:
                return txn.version
            parent = lh._record(head, ktx.get)
            record = VersionInfo(
                version=head + 1,
                created_ms=max(lh._now_ms(), parent.created_ms),
                parent=head,
                isolation=txn.isolation,
                txn_id=txn.id,
                changes=prep.changes,
                reads=tuple(sorted(prep.intent.reads)),
                listings=tuple(sorted(prep.intent.listings)),
                rollback_of=options.rollback_of,
                base_seq=ktx.read_seq,
                source=options.source,
                files_added=files_added(txn),
                data=tuple(data_changes),
                app=None if txn.app_id is None else (txn.app_id, txn.app_version),
            )
            if txn.app_id is not None:
                ktx.put(keys.app_key(txn.app_id), codec.encode_app(txn.app_version, head + 1))
            for key, value in list(prep.writes) + data_writes:
                if value is None:
                    ktx.delete(key)
                else:
                    ktx.put(key, value)
            ktx.put(keys.record_key(head + 1), codec.encode_record(record))
            ktx.put(keys.HEAD, keys.encode_u64(head + 1))
            hook = lh._before_kv_commit
            if hook is not None:
                hook(txn, attempt)
            ktx.commit(durable=lh._options.durable)
        except (kvstore.TransactionConflict, kvstore.TransactionExpired) as exc:
            delay = lh._backoff(attempt)
            log.debug(
                "commit attempt %d lost the race (%s); retrying in %.4fs", attempt, exc, delay
            )
            lh._sleep(delay)
            continue
        finally:
            ktx.rollback()  # no-op after commit
        lh._remember(record)
        txn.committed_version = head + 1
        if txn.rebased_over:
            log.debug("version %d rebased over %s", head + 1, txn.rebased_over)
        return head + 1
    raise RetryableConflict(
        f"gave up after {retries} commit attempts lost the race for the next version; "
        "the lakehouse is very busy, re-run the transaction"
    )


def _check_not_expired(txn: TransactionState, oldest: int) -> None:
    """A transaction whose base version, or a version it restored or cloned a table
    from, has expired is retried (docs/api.md, "Integrity"): the files it would
    reference may be queued for deletion."""
    if txn.version < oldest:
        raise RetryableConflict(
            f"this transaction's base version {txn.version} has expired (the "
            f"oldest retained version is {oldest}); re-run it",
            version=oldest,
        )
    if txn.oldest_version_read < oldest:
        raise RetryableConflict(
            f"version {txn.oldest_version_read}, which this transaction restored or cloned "
            f"a table from, has expired (the oldest retained version is {oldest}); re-run it",
            version=oldest,
        )


def files_added(txn: TransactionState) -> tuple[str, ...]:
    """The data files (in the data directory) the new version references that its
    record lists: written, adopted, restored or cloned ones, and those a rollback or
    an export brings back. Expiry and orphan removal keep every file a retained
    version's record lists, so a file missing here could be deleted while in use."""
    paths = dict.fromkeys(txn._files_added)
    for w in txn._table_writes.values():
        paths.update(dict.fromkeys(f.path for f in w.added.values()))
    for key, value in txn._state_writes.items():  # a rollback's or an export's state
        if value is not None and keys.is_data_file_key(key):
            f = codec.decode_data_file(value)
            if not f.is_external:
                paths[f.path] = None
    return tuple(paths)


def _app_done(ktx: kvstore.Transaction, app_id: str, app_version: int) -> int | None:
    """The version that recorded ``app_id`` at ``app_version`` or later, if any."""
    raw = ktx.get_for_update(keys.app_key(app_id))
    if raw is None:
        return None
    recorded, version = codec.decode_app(raw)
    return version if recorded >= app_version else None


def _must(value: bytes | None, what: str) -> bytes:
    if value is None:
        from lakehouse.errors import CorruptionError

        raise CorruptionError(f"the lakehouse has no {what} key")
    return value
