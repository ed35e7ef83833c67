"""Histories: what every transaction asked for and what it got, as JSON Lines.

A history is a list of events in the order they happened, in the style of
Jepsen. A transaction is two events on one *process* (a logical client that
runs one transaction at a time): an ``invoke`` when it begins, then one
completion::

    {"index": 0, "type": "invoke", "process": 1, "time": 0,  "f": "txn",
     "value": [["r", 3, null], ["append", 3, 7]]}
    {"index": 1, "type": "ok",     "process": 1, "time": 5,  "f": "txn",
     "value": [["r", 3, [1, 4]], ["append", 3, 7]]}

Completion types: ``ok`` (committed), ``fail`` (definitely did not commit:
aborted, rolled back, conflict), ``info`` (unknown: the client lost track;
its writes may or may not have happened; the process is never reused).

A value is a list of micro-operations:

==============================  ==============================================
``["r", k, v]``                 read key ``k``; ``v`` is a list of elements
                                (list-append) or one value (register); null
                                when the key does not exist or is not yet read
``["append", k, e]``            append element ``e`` to the list at ``k``
``["w", k, v]``                 write value ``v`` to register ``k``
``["scan", [lo, hi], rows]``    read every key in ``[lo, hi)`` (null: open
                                bound); ``rows`` is ``[[k, v], ...]`` in key
                                order, null before it ran
==============================  ==============================================

Keys are ints or strings (one kind per history). ``time`` is any
non-decreasing integer (nanoseconds, or a logical clock for reproducible
runs); only the real-time check uses it. Each line of a ``.jsonl`` file is
one event.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import count
from typing import Any

Key = int | str
MicroOp = list[Any]

INVOKE, OK, FAIL, INFO = "invoke", "ok", "fail", "info"
_COMPLETIONS = (OK, FAIL, INFO)


@dataclass
class Event:
    index: int
    type: str
    process: int
    time: int
    value: list[MicroOp]
    f: str = "txn"
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "index": self.index,
            "type": self.type,
            "process": self.process,
            "time": self.time,
            "f": self.f,
            "value": self.value,
        }
        if self.error is not None:
            d["error"] = self.error
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any], lineno: int = 0) -> Event:
        where = f"line {lineno}: " if lineno else ""
        try:
            kind = d["type"]
            if kind not in (INVOKE, *_COMPLETIONS):
                raise ValueError(f"{where}unknown event type {kind!r}")
            value = d.get("value") or []
            if not isinstance(value, list):
                raise ValueError(f"{where}value must be a list of micro-operations")
            return cls(
                index=int(d.get("index", lineno - 1 if lineno else 0)),
                type=kind,
                process=int(d["process"]),
                time=int(d.get("time", 0)),
                value=value,
                f=str(d.get("f", "txn")),
                error=d.get("error"),
            )
        except KeyError as exc:
            raise ValueError(f"{where}event lacks {exc.args[0]!r}") from None


@dataclass
class Txn:
    """One transaction: an invocation paired with its completion."""

    id: int  # position in invocation order: T0, T1, ...
    process: int
    status: str  # ok | fail | info
    ops: list[MicroOp]  # completion value (ok/fail), else the invocation's
    invoke_index: int
    complete_index: int | None
    invoke_time: int
    complete_time: int | None
    error: str | None = None

    @property
    def name(self) -> str:
        return f"T{self.id}"


@dataclass
class Recorder:
    """Thread-safe history recorder; ``clock`` returns the event time (injected).

    The default clock is a logical counter, so a seeded run writes the same
    bytes every time; the threaded runner passes ``time.monotonic_ns``.
    """

    clock: Callable[[], int] | None = None
    events: list[Event] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._tick = count()

    def _record(
        self, kind: str, process: int, value: list[MicroOp], error: str | None = None
    ) -> Event:
        with self._lock:
            now = self.clock() if self.clock is not None else next(self._tick)
            ev = Event(len(self.events), kind, process, now, _copy_ops(value), error=error)
            self.events.append(ev)
            return ev

    def invoke(self, process: int, value: list[MicroOp]) -> Event:
        return self._record(INVOKE, process, value)

    def complete(
        self, kind: str, process: int, value: list[MicroOp], error: str | None = None
    ) -> Event:
        if kind not in _COMPLETIONS:
            raise ValueError(f"completion type must be one of {_COMPLETIONS}, not {kind!r}")
        return self._record(kind, process, value, error)


def _copy_ops(ops: Iterable[MicroOp]) -> list[MicroOp]:
    out: list[MicroOp] = []
    for op in ops:
        out.append([_copy_value(x) for x in op])
    return out


def _copy_value(x: Any) -> Any:
    if isinstance(x, list):
        return [_copy_value(y) for y in x]
    return x


# ----------------------------------------------------------------------
# JSON Lines
# ----------------------------------------------------------------------
def dump_jsonl(events: Iterable[Event], path: str | os.PathLike[str]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for ev in events:
            f.write(json.dumps(ev.to_json(), separators=(",", ":")))
            f.write("\n")


def iter_jsonl(path: str | os.PathLike[str]) -> Iterator[Event]:
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                d = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"line {lineno}: not JSON: {exc.msg}") from None
            if not isinstance(d, dict):
                raise ValueError(f"line {lineno}: an event must be a JSON object")
            yield Event.from_json(d, lineno)


def load_jsonl(path: str | os.PathLike[str]) -> list[Event]:
    return list(iter_jsonl(path))


# ----------------------------------------------------------------------
# events -> transactions
# ----------------------------------------------------------------------
def transactions(events: Iterable[Event]) -> list[Txn]:
    """Pair each invocation with the next completion on its process.

    An invocation without a completion (the history ended first) becomes an
    ``info`` transaction. Only ``f == "txn"`` events are considered.
    """
    txns: list[Txn] = []
    open_: dict[int, Txn] = {}
    for ev in events:
        if ev.f != "txn":
            continue
        if ev.type == INVOKE:
            if ev.process in open_:
                raise ValueError(
                    f"event {ev.index}: process {ev.process} invoked a transaction while "
                    "its previous one had not completed"
                )
            t = Txn(
                id=len(txns),
                process=ev.process,
                status=INFO,
                ops=ev.value,
                invoke_index=ev.index,
                complete_index=None,
                invoke_time=ev.time,
                complete_time=None,
            )
            txns.append(t)
            open_[ev.process] = t
            continue
        t_open = open_.pop(ev.process, None)
        if t_open is None:
            raise ValueError(f"event {ev.index}: {ev.type} on process {ev.process} without invoke")
        t_open.status = ev.type
        t_open.complete_index = ev.index
        t_open.error = ev.error
        if ev.type != INFO:
            t_open.complete_time = ev.time
            t_open.ops = ev.value
    return txns


def model_of(txns: Iterable[Txn]) -> str:
    """``"list-append"`` if any transaction appends, else ``"rw-register"``."""
    for t in txns:
        for op in t.ops:
            if op[0] == "append":
                return "list-append"
            if op[0] == "w":
                return "rw-register"
    return "list-append"
