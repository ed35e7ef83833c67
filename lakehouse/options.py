"""Options of :func:`lakehouse.open`, with their defaults.

The first group only matters when the lakehouse is created: it is stored in
the lakehouse definition and read back from there on every later open.
Unknown option names raise :class:`TypeError`; bad values :class:`ValueError`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvstore.clock import Clock
from kvstore.objstore import ObjectStore
from kvstore.options import reject_unknown
from lakehouse.model import DEFAULT_MAX_NAME_LENGTH, Isolation, check_properties


@dataclass(frozen=True)
class Options:
    # -- stored in the lakehouse definition at creation -----------------------------
    #: isolation of ``lh.begin()`` when none is given
    default_isolation: Isolation | str = Isolation.SNAPSHOT
    #: longest namespace, table, view or column name, in characters
    max_name_length: int = DEFAULT_MAX_NAME_LENGTH
    #: seconds a transaction may stay open; older ones fail at commit
    transaction_ttl: float = 3600.0
    #: free-form lakehouse properties
    properties: dict[str, str] | None = None
    # -- per open ------------------------------------------------------------------
    #: create the lakehouse if there is none at the URL (False: NotFound instead)
    create: bool = True
    #: commits return after the version is on stable storage (fsync / completed PUT)
    durable: bool = True
    #: commit attempts when other writers keep winning the race for the next version
    commit_retries: int = 20
    #: first backoff delay after a lost race (seconds); doubles, jittered, up to max
    retry_base_delay: float = 0.0002
    retry_max_delay: float = 0.05
    #: seed for transaction ids, table ids and backoff jitter (None: system randomness)
    seed: int | None = None
    #: a :class:`kvstore.clock.Clock` (e.g. a ``FakeClock``): version creation
    #: times, transaction ages, backoff sleeps and random bits all come from it
    #: (then leave ``seed`` unset: seed the Clock). A plain callable returning
    #: epoch seconds replaces only the wall clock (version creation times).
    clock: Clock | Callable[[], float] | None = None
    #: sleep function used for backoff (default: the clock's); injectable for tests
    sleep: Callable[[float], None] | None = None
    #: testing injection point: ``commit_hook(intent, attempt)`` is called inside
    #: each commit attempt just before its kvstore commit (``intent``: the
    #: committing transaction's :class:`lakehouse.intent.TxnIntent`, whose
    #: ``txn_id`` is the transaction's ``id``; ``attempt``: 1, 2, ...). Tests use it
    #: to make a race or a crash happen at exactly that point; None in production
    commit_hook: Callable[[Any, int], None] | None = None
    #: fence a live writer of this (local) lakehouse instead of raising WriterActive
    takeover: bool = False
    #: where data files live (default: <url>/data)
    data_store: ObjectStore | None = None
    #: fsspec options for s3:// and other remote URLs
    storage_options: dict[str, Any] = field(default_factory=dict)
    #: options passed on to kvstore.open (retention is always "all")
    kv_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        iso = self.default_isolation
        if isinstance(iso, str):
            try:
                object.__setattr__(self, "default_isolation", Isolation(iso.lower()))
            except ValueError:
                raise ValueError(
                    f"option default_isolation must be 'snapshot' or 'serializable', not {iso!r}"
                ) from None
        elif not isinstance(iso, Isolation):
            raise TypeError("option default_isolation must be a lakehouse.Isolation")
        _int(self.max_name_length, "max_name_length", 1)
        _int(self.commit_retries, "commit_retries", 1)
        for name in ("transaction_ttl", "retry_base_delay", "retry_max_delay"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"option {name} must be a number, not {type(v).__name__}")
            if v < 0 or (name == "transaction_ttl" and v == 0):
                raise ValueError(f"option {name} must be positive, got {v}")
        check_properties(self.properties, "option properties")
        for name in ("durable", "create", "takeover"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"option {name} must be a bool")
        if self.seed is not None:
            _int(self.seed, "seed", None)
        if isinstance(self.clock, Clock):
            if self.seed is not None:
                raise ValueError(
                    "option seed cannot be combined with a kvstore Clock: seed the Clock"
                )
        elif self.clock is not None and not callable(self.clock):
            raise TypeError("option clock must be a kvstore Clock or a callable")
        for name in ("sleep", "commit_hook"):
            if getattr(self, name) is not None and not callable(getattr(self, name)):
                raise TypeError(f"option {name} must be callable")
        if self.data_store is not None and not isinstance(self.data_store, ObjectStore):
            raise TypeError("option data_store must be a kvstore ObjectStore")
        for name in ("storage_options", "kv_options"):
            if not isinstance(getattr(self, name), dict):
                raise TypeError(f"option {name} must be a dict")
        if "retention" in self.kv_options:
            raise ValueError(
                "kv_options may not set retention: the lakehouse keeps every version "
                "until expire_versions() (it opens the kvstore with retention='all')"
            )

    @classmethod
    def from_kwargs(cls, kwargs: dict[str, Any]) -> Options:
        reject_unknown(cls, kwargs)
        return cls(**kwargs)


def _int(v: Any, name: str, minimum: int | None) -> None:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"option {name} must be an int, not {type(v).__name__}")
    if minimum is not None and v < minimum:
        raise ValueError(f"option {name} must be >= {minimum}, got {v}")
