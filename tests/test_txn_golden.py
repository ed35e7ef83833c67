"""Golden transaction scripts (the toydb habit): interleavings written as text.

Every ``tests/golden/txn/<name>.txt`` is one scenario (a Hermitage anomaly, a
PostgreSQL isolation spec, a must-commit case). The runner plays it against a
fresh in-memory store twice, once per isolation level, echoes each command
with its result, and compares the transcript with
``<name>.snapshot.out`` / ``<name>.serializable.out``. Run with
``UPDATE_GOLDEN=1`` to rewrite the expected files, then *read them*: they are
reviewed output, checked against what the level must do (SNAPSHOT behaves like
PostgreSQL REPEATABLE READ, SERIALIZABLE like PostgreSQL SERIALIZABLE, except
that our conflicts surface at commit and a read-only transaction never aborts).

Script lines::

    # comment                  echoed as is (so are blank lines)
    put k v | delete k         non-transactional write (a one-write transaction)
    get k                      non-transactional read of the latest value
    scan [start end] [reverse] non-transactional scan; ``*`` is an open bound
    scan_prefix p [reverse]
    flush                      db.flush(): memtable -> SST
    t1: begin [snapshot|serializable]   the level under test unless pinned
    t1: get k | get_for_update k | scan ... | scan_prefix ...
    t1: put k v | delete k | commit | rollback

A leading ``!`` says the line must fail at every level; ``![serializable]``
(or ``![snapshot]``) says it must fail at that level and succeed at the
other. Those statements are checked on every run, whatever the ``.out`` files
say: a marked line that succeeds or an unmarked line that fails is a test
failure. Results print only what is stable across runs: values, ``ok``,
``ok (nothing written)`` for a commit that wrote nothing (``commit()``
returned None; sequence numbers are never printed) and the error class name
(``TransactionConflict``) for a failure.

Keys and values are ASCII words; keys compare as bytes (``"11" < "5"``), so
scripts zero-pad numbers where order matters.
"""

from __future__ import annotations

import os
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import kvstore
from kvstore import Isolation
from kvstore.objstore import MemoryStore

GOLDEN = Path(__file__).parent / "golden" / "txn"
LEVELS = {"snapshot": Isolation.SNAPSHOT, "serializable": Isolation.SERIALIZABLE}
UPDATE = os.environ.get("UPDATE_GOLDEN", "") not in ("", "0")

_MARK = re.compile(r"^!(?:\[(?P<levels>[\w, ]+)\])?\s*(?P<rest>.*)$")
_TXN = re.compile(r"^(?P<name>[A-Za-z]\w*):\s+(?P<rest>.*)$")
_ARITY = {  # op -> allowed argument counts (transactional and plain)
    "begin": (0, 1),
    "get": (1,),
    "get_for_update": (1,),
    "scan": (0, 1, 2, 3),
    "scan_prefix": (1, 2),
    "put": (2,),
    "delete": (1,),
    "commit": (0,),
    "rollback": (0,),
    "flush": (0,),
}
_TXN_ONLY = {"begin", "get_for_update", "commit", "rollback"}
_DB_ONLY = {"flush"}


class ScriptError(Exception):
    """The script itself is malformed (not a store failure)."""


@dataclass(frozen=True)
class Command:
    lineno: int
    text: str  # the line as written, marker included
    must_fail: frozenset[str]  # levels at which the line must fail
    txn: str | None
    op: str
    args: tuple[str, ...]


@dataclass
class Script:
    name: str
    lines: list[Command | str] = field(default_factory=list)  # str: comment or blank

    @property
    def width(self) -> int:
        cmds = [len(c.text) for c in self.lines if isinstance(c, Command)]
        return min(max(cmds, default=0), 44)


def parse(name: str, text: str) -> Script:
    script = Script(name)
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            script.lines.append(line)
            continue
        must_fail: frozenset[str] = frozenset()
        body = line
        m = _MARK.match(line)
        if m:
            spec = m.group("levels")
            names = [s.strip() for s in spec.split(",")] if spec else list(LEVELS)
            unknown = [n for n in names if n not in LEVELS]
            if unknown:
                raise ScriptError(f"{name}:{lineno}: unknown level {unknown[0]!r} in marker")
            must_fail = frozenset(names)
            body = m.group("rest")
        txn = None
        t = _TXN.match(body)
        if t:
            txn, body = t.group("name"), t.group("rest")
        op, *args = body.split()
        if op not in _ARITY or len(args) not in _ARITY[op]:
            raise ScriptError(f"{name}:{lineno}: cannot parse {line!r}")
        if txn is None and op in _TXN_ONLY:
            raise ScriptError(f"{name}:{lineno}: {op} needs a transaction ('t1: {op}')")
        if txn is not None and op in _DB_ONLY:
            raise ScriptError(f"{name}:{lineno}: {op} is not a transaction command")
        script.lines.append(Command(lineno, line, must_fail, txn, op, tuple(args)))
    return script


def _b(word: str) -> bytes:
    return word.encode()


def _scan_args(args: tuple[str, ...]) -> tuple[bytes | None, bytes | None, bool]:
    reverse = bool(args) and args[-1] == "reverse"
    bounds = args[:-1] if reverse else args
    if len(bounds) not in (0, 2):
        raise ScriptError(f"scan takes no bounds or two (start end, '*' for open): {args}")
    start, end = bounds if bounds else ("*", "*")
    return (None if start == "*" else _b(start)), (None if end == "*" else _b(end)), reverse


def _show_rows(rows: list[tuple[bytes, bytes]]) -> str:
    return " ".join(f"{k.decode()}={v.decode()}" for k, v in rows) or "(empty)"


def _show_value(value: bytes | None) -> str:
    return "None" if value is None else value.decode()


class Runner:
    """Plays one script at one level; collects the transcript and broken expectations."""

    def __init__(self, db: kvstore.DB, level: str) -> None:
        self.db = db
        self.level = level
        self.txns: dict[str, kvstore.Transaction] = {}
        self.broken: list[str] = []

    def execute(self, cmd: Command) -> str:
        """Run one command; returns its printed result (raises on store errors)."""
        if cmd.txn is None:
            return self._plain(cmd)
        if cmd.op == "begin":
            if cmd.txn in self.txns and self.txns[cmd.txn].status == "open":
                raise ScriptError(f"line {cmd.lineno}: {cmd.txn} is already open")
            level = cmd.args[0] if cmd.args else self.level
            if level not in LEVELS:
                raise ScriptError(f"line {cmd.lineno}: unknown level {level!r}")
            self.txns[cmd.txn] = self.db.transaction(LEVELS[level])
            return "ok"
        t = self.txns.get(cmd.txn)
        if t is None:
            raise ScriptError(f"line {cmd.lineno}: {cmd.txn} was never begun")
        a = cmd.args
        if cmd.op == "get":
            return _show_value(t.get(_b(a[0])))
        if cmd.op == "get_for_update":
            return _show_value(t.get_for_update(_b(a[0])))
        if cmd.op == "scan":
            start, end, reverse = _scan_args(a)
            return _show_rows(list(t.scan(start, end, reverse=reverse)))
        if cmd.op == "scan_prefix":
            return _show_rows(list(t.scan_prefix(_b(a[0]), reverse=a[1:] == ("reverse",))))
        if cmd.op == "put":
            t.put(_b(a[0]), _b(a[1]))
            return "ok"
        if cmd.op == "delete":
            t.delete(_b(a[0]))
            return "ok"
        if cmd.op == "commit":
            return "ok" if t.commit() is not None else "ok (nothing written)"
        assert cmd.op == "rollback"
        t.rollback()
        return "ok"

    def _plain(self, cmd: Command) -> str:
        db, a = self.db, cmd.args
        if cmd.op == "put":
            db.put(_b(a[0]), _b(a[1]))
            return "ok"
        if cmd.op == "delete":
            db.delete(_b(a[0]))
            return "ok"
        if cmd.op == "get":
            return _show_value(db.get(_b(a[0])))
        if cmd.op == "scan":
            start, end, reverse = _scan_args(a)
            return _show_rows(list(db.scan(start, end, reverse=reverse)))
        if cmd.op == "scan_prefix":
            return _show_rows(list(db.scan_prefix(_b(a[0]), reverse=a[1:] == ("reverse",))))
        assert cmd.op == "flush"
        db.flush()
        return "ok"

    def run(self, script: Script) -> str:
        out = [f"# {script.name} at {self.level.upper()} (tests/test_txn_golden.py)"]
        width = script.width
        for item in script.lines:
            if isinstance(item, str):
                out.append(item)
                continue
            must_fail = self.level in item.must_fail
            try:
                result = self.execute(item)
                failed = False
            except ScriptError:
                raise
            except Exception as exc:
                result = type(exc).__name__
                failed = True
            if failed and not must_fail:
                self.broken.append(f"line {item.lineno}: {item.text!r} failed: {result}")
            elif must_fail and not failed:
                self.broken.append(
                    f"line {item.lineno}: {item.text!r} must fail at {self.level} "
                    f"but returned {result}"
                )
            out.append(f"{item.text.ljust(width)} → {result}")
        left_open = sorted(n for n, t in self.txns.items() if t.status == "open")
        if left_open:
            raise ScriptError(f"{script.name}: transactions left open: {', '.join(left_open)}")
        return "\n".join(out) + "\n"


def scripts() -> list[Path]:
    return sorted(GOLDEN.glob("*.txt"))


def play(path: Path, level: str) -> tuple[str, list[str]]:
    """Run the script at ``level`` on a fresh store: (transcript, broken expectations)."""
    script = parse(path.stem, path.read_text())
    name = f"golden-{uuid.uuid4().hex}"
    db = kvstore.open(f"memory://{name}", fsync=False)
    try:
        runner = Runner(db, level)
        transcript = runner.run(script)
        # with every transaction finished the oracle forgets everything
        db.parts.commit.oracle._check()
        stats = db.stats()
        assert stats["transactions_running"] == 0, stats
        assert stats["oracle_tracked_keys"] == 0, stats
        return transcript, runner.broken
    finally:
        db.close()
        MemoryStore.drop(name)


@pytest.mark.parametrize("level", list(LEVELS))
@pytest.mark.parametrize("path", scripts(), ids=lambda p: p.stem)
def test_golden(path: Path, level: str) -> None:
    transcript, broken = play(path, level)
    expected_path = path.with_name(f"{path.stem}.{level}.out")
    if UPDATE:
        expected_path.write_text(transcript)
    assert not broken, f"{path.name} at {level}: expectations broken:\n" + "\n".join(broken)
    if not expected_path.exists():
        pytest.fail(f"{expected_path.name} is missing; run with UPDATE_GOLDEN=1 and review it")
    assert transcript == expected_path.read_text(), (
        f"{path.name} at {level} differs from {expected_path.name}; if the change is "
        "intended, rerun with UPDATE_GOLDEN=1 and review the diff"
    )


def test_expected_files_match_scripts() -> None:
    stems = {p.stem for p in scripts()}
    assert stems, "no golden scripts found"
    outs = {p.name for p in GOLDEN.glob("*.out")}
    wanted = {f"{s}.{lvl}.out" for s in stems for lvl in LEVELS}
    assert not outs - wanted, f"expected files without a script: {sorted(outs - wanted)}"


# ----------------------------------------------------------------------
# the runner itself
# ----------------------------------------------------------------------
def test_parse_markers_and_prefixes() -> None:
    s = parse("x", "# c\n\nput a 1\n! t1: commit\n![serializable] t2: get a\nt3: begin snapshot\n")
    cmds = [c for c in s.lines if isinstance(c, Command)]
    assert s.lines[:2] == ["# c", ""]
    assert [(c.txn, c.op, c.args) for c in cmds] == [
        (None, "put", ("a", "1")),
        ("t1", "commit", ()),
        ("t2", "get", ("a",)),
        ("t3", "begin", ("snapshot",)),
    ]
    assert [sorted(c.must_fail) for c in cmds] == [
        [],
        ["serializable", "snapshot"],
        ["serializable"],
        [],
    ]


@pytest.mark.parametrize(
    "line",
    ["frobnicate a", "t1: put a", "commit", "t1: flush", "![sometimes] t1: commit", "get"],
)
def test_parse_rejects_malformed_lines(line: str) -> None:
    with pytest.raises(ScriptError):
        parse("bad", line)


def test_runner_reports_broken_expectations(tmp_path: Path) -> None:
    script = tmp_path / "broken.txt"
    script.write_text("put a 1\n! get a\nt1: begin\nt1: put a 2\nt1: commit\n")
    _, broken = play(script, "snapshot")
    assert len(broken) == 1 and "must fail" in broken[0]
    script.write_text("t1: begin\nt1: put a 1\nt1: commit\nt1: get a\n")
    _, broken = play(script, "snapshot")
    assert len(broken) == 1 and "ClosedError" in broken[0]


def test_runner_rejects_open_transactions(tmp_path: Path) -> None:
    script = tmp_path / "open.txt"
    script.write_text("t1: begin\nt1: get a\n")
    with pytest.raises(ScriptError, match="left open"):
        play(script, "serializable")
