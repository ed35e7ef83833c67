"""What snapshots and transactions may call: the narrow engine protocol.

:class:`kvstore.snapshot.Snapshot` and :class:`kvstore.txn.Transaction`
hold an :class:`Engine` (the commit path implements it), never the DB. They
read the current :class:`~kvstore.readpath.State` at their own seq, ask
whether that seq is still readable, commit through one call, and end.
"""

from __future__ import annotations

from typing import Protocol

from kvstore import readpath as rp
from kvstore.engine.commit import Committing
from kvstore.engine.health import Health


class Engine(Protocol):
    health: Health
    state: rp.State

    def check_readable(self, seq: int) -> None:
        """Raise if a read at ``seq`` is refused (closed; fenced past what is durable)."""
        ...

    def release(self, seq: int) -> None:
        """Unpin a snapshot's seq."""
        ...

    def commit(
        self,
        keys: list[bytes],
        values: list[bytes | None],
        durable: bool,
        txn: Committing | None = None,
    ) -> int: ...

    def end_transaction(self, txn_id: int, read_seq: int) -> None: ...

    def transaction_dropped(self, txn_id: int, read_seq: int) -> None: ...
