"""Where a command points, how it opens the lakehouse, and how it prints.

Read commands open with :func:`lakehouse.open_reader`: read-only, they never
fence a running writer and work on a read-only directory. Write commands
open with :func:`lakehouse.open` as the single writer: next to a live writer
of a local directory that raises :class:`lakehouse.WriterActive` naming it,
unless ``--takeover`` (which fences it); on object stores, where liveness
cannot be seen, opening a writer always fences the previous one. Nothing but
``init`` creates a lakehouse.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import lakehouse
from kvstore.objstore import local_path
from lakehouse.view import LakehouseView

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_CORRUPTION = 3

PROG = "lakehouse"

T = TypeVar("T")


def one_line(text: str) -> str:
    """``text`` as one printable line (library messages may hold newlines or control bytes)."""
    return " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())


class CliError(Exception):
    """An expected failure: printed as one line, exit status ``code``, JSON type ``kind``."""

    def __init__(self, message: str, code: int = EXIT_FAILURE, kind: str = "error") -> None:
        super().__init__(message)
        self.code = code
        self.kind = kind


@dataclass(frozen=True)
class Target:
    """The lakehouse a command points at, and how to reach it."""

    url: str
    storage_options: dict[str, Any] = field(default_factory=dict)
    takeover: bool = False

    def check_local(self) -> None:
        """A local URL must name an existing directory (say so plainly otherwise)."""
        path = local_path(self.url)
        if path is None:
            return
        if not os.path.exists(path):
            raise CliError(f"no lakehouse at {self.url} (no such directory)")
        if not os.path.isdir(path):
            raise CliError(f"no lakehouse at {self.url} (not a directory)")

    def open_reader(self) -> lakehouse.LakehouseReader:
        """Read-only; never fences a writer, never creates anything."""
        self.check_local()
        return lakehouse.open_reader(self.url, storage_options=self.storage_options)

    def open_writer(self) -> lakehouse.Lakehouse:
        """The single writer of an existing lakehouse (see the module docstring)."""
        self.check_local()
        return lakehouse.open(self.url, create=False, **self.writer_options())

    def writer_options(self) -> dict[str, Any]:
        return {
            "takeover": self.takeover,
            "storage_options": self.storage_options,
            # one-shot: compaction runs only when a command asks for it
            "kv_options": {"background_compaction": False},
        }


@dataclass
class Ctx:
    """What a command handler gets: its arguments, its target, the output mode."""

    args: argparse.Namespace
    target: Target
    json: bool

    def line(self, text: str = "") -> None:
        """Human output (suppressed under --json)."""
        if not self.json:
            sys.stdout.write(text + "\n")

    def doc(self, doc: Any) -> None:
        """The one JSON document (only under --json)."""
        if self.json:
            sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")

    def note(self, text: str) -> None:
        """A remark for the human on stderr (even under --json)."""
        sys.stderr.write(f"{PROG}: {text}\n")

    def view(self, reader: lakehouse.Lakehouse) -> LakehouseView:
        """The version ``--version V`` / ``--at TIME`` selects (default: the latest)."""
        v = getattr(self.args, "version", None)
        at = getattr(self.args, "at", None)
        if at is not None:
            return reader.at_time(at)
        return reader.at_version(reader.version if v is None else v)


def usage(message: str) -> CliError:
    """A usage error found after parsing (exit status 2, JSON type ``usage``)."""
    return CliError(message, EXIT_USAGE, "usage")


def transact(
    lh: lakehouse.Lakehouse,
    work: Callable[[lakehouse.Transaction], T],
    keep: Callable[[T], bool] | None = None,
) -> tuple[int | None, T]:
    """Run ``work`` in one transaction and commit it: ``(version, what work returned)``.

    The version is the one the commit created, or None when nothing was
    committed: the transaction changed nothing, or ``keep(result)`` said it
    is not worth a version (a delete that matched no row)."""
    txn = lh.begin()
    try:
        result = work(txn)
    except BaseException:
        txn.rollback()
        raise
    if keep is not None and not keep(result):
        txn.rollback()
        return None, result
    version = txn.commit()
    return (None if version == txn.version else version), result
