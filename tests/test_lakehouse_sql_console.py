"""``python -m lakehouse sql URL``: the console through a pseudo-terminal, and scripts.

One console process (one JVM) serves the interactive tests, which run in
order and type into it as a user would: each line is sent after the prompt
came back, and the text up to the next prompt is what the statement printed.
Then a ``-f`` script and an ``-e`` one run as plain subprocesses on a second
lakehouse (the console holds the first one's writer until it exits). What
the statements did is checked through the Python API.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import lakehouse
from lakehouse.cli.sql import CONTINUATION, PROMPT, PROMPT_TXN, script_statements, split

pytest.importorskip("pyspark")

pytestmark = pytest.mark.spark

#: a guard against a hung console, not a timed assertion (a JVM starts in ~10 s)
WAIT = 180
ANSI = re.compile(r"\x1b(\[[0-9;?]*[A-Za-z]|[=>])")


def _env(tmp: Path) -> dict[str, str]:
    return dict(
        os.environ,
        TERM="dumb",
        COLUMNS="500",
        LAKEHOUSE_SQL_HISTORY=str(tmp / "unused_history"),
        HOME=str(tmp),  # nothing may touch the real home directory
    )


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "lakehouse", "sql", *args]


def _rows(url: str, table: str) -> list[dict[str, object]]:
    with lakehouse.open_reader(url) as r:
        t: pa.Table = r.read(table)
    return sorted(t.to_pylist(), key=lambda row: str(row["id"]))


class Terminal:
    """A process on the slave side of a pseudo-terminal; we type on the master side."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 500, 0, 0))
        self.proc = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd,
            start_new_session=True,  # then the terminal becomes its controlling one (Ctrl-C)
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
        )  # fmt: skip
        os.close(slave)
        self.fd = master
        self.buf = ""

    def expect(self, marker: str) -> str:
        """Everything printed before ``marker`` (consumed with it)."""
        deadline = time.monotonic() + WAIT
        while marker not in self.buf:
            left = deadline - time.monotonic()
            assert left > 0, f"no {marker!r} from the console; it printed {self.buf[-3000:]!r}"
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                continue
            try:
                data = os.read(self.fd, 65536)
            except OSError:  # EIO: the console has exited and closed the terminal
                data = b""
            assert data, f"the console ended before {marker!r}; it printed {self.buf!r}"
            self.buf += ANSI.sub("", data.decode("utf-8", "replace")).replace("\r\n", "\n")
        before, _, self.buf = self.buf.partition(marker)
        return before

    def type(self, line: str, until: str = PROMPT) -> str:
        """Type ``line`` and Enter; what it printed (the echoed line cut off) up to ``until``."""
        os.write(self.fd, line.encode() + b"\n")
        echoed, _, printed = self.expect(until).partition("\n")
        assert echoed.strip() == line.strip(), (echoed, line)
        return printed

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        try:  # the JVM runs in the same process group
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.close(self.fd)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sql_console")


@pytest.fixture(scope="module")
def url(home: Path) -> str:
    path = str(home / "lh")
    lakehouse.open(path, create=True).close()
    return path


@pytest.fixture(scope="module")
def console(home: Path, url: str) -> Iterator[Terminal]:
    history = home / "history"
    term = Terminal(_cli(url, "--history", str(history)), _env(home), home)
    try:
        banner = term.expect(PROMPT)
        assert f"lakehouse {url} at version 0" in banner
        yield term
    finally:
        term.close()


# ---------------------------------------------------------------------------
# where a statement ends: sqlglot's tokenizer (no Spark)
# ---------------------------------------------------------------------------
def test_split_ends_statements_at_semicolons_outside_quotes_and_comments() -> None:
    text = "SELECT ';' AS a; -- no ; here\nSELECT `b;c` FROM t /* ; */;\n-- only a comment;\nSELECT"
    done, rest = split(text)
    assert done == ["SELECT ';' AS a", "-- no ; here\nSELECT `b;c` FROM t /* ; */"]
    assert rest.strip() == "-- only a comment;\nSELECT"  # its ; is in the comment
    assert split("SELECT 1; -- trailing") == (["SELECT 1"], "")
    assert script_statements("SELECT 1;\n\nSELECT 2") == ["SELECT 1", "SELECT 2"]
    with pytest.raises(Exception, match="tokeniz"):  # an open string: not complete yet
        split("SELECT 'abc;")


# ---------------------------------------------------------------------------
# interactive, through a pseudo-terminal
# ---------------------------------------------------------------------------
def test_create_insert_select(console: Terminal, url: str) -> None:
    assert console.type("CREATE NAMESPACE sales;") == "OK\n\n"
    out = console.type("CREATE TABLE sales.orders (id BIGINT NOT NULL, name STRING, qty INT);")
    assert out == "OK\n\n"
    out = console.type("INSERT INTO sales.orders VALUES (1, 'alice', 3), (2, 'bob', NULL);")
    assert out == "num_affected_rows\n-----------------\n                2\n(1 row)\n\n"
    assert console.type("INSERT INTO sales.orders VALUES (3, 'carol', 12);").endswith(
        "                1\n(1 row)\n\n"
    )
    out = console.type("SELECT id, name, qty FROM sales.orders ORDER BY id;")
    assert out == (
        "id  name    qty\n"
        "--  -----  ----\n"
        " 1  alice     3\n"
        " 2  bob    null\n"
        " 3  carol    12\n"
        "(3 rows)\n\n"
    )
    assert _rows(url, "sales.orders") == [
        {"id": 1, "name": "alice", "qty": 3},
        {"id": 2, "name": "bob", "qty": None},
        {"id": 3, "name": "carol", "qty": 12},
    ]


def test_statement_over_several_lines(console: Terminal) -> None:
    assert console.type("SELECT name, 'a;b' AS s,", until=CONTINUATION) == ""
    assert console.type("  qty * 2 AS twice -- not the end;", until=CONTINUATION) == ""
    out = console.type("FROM sales.orders WHERE id = 3;")
    assert out == "name   s    twice\n-----  ---  -----\ncarol  a;b     24\n(1 row)\n\n"


@pytest.mark.skip(
    reason="racy: a SIGINT the kernel hands to one of Spark's or the store's threads does not "
    "wake readline until the next key (seen once in CI); the console's Ctrl-C is checked by hand"
)
def test_ctrl_c_drops_the_unfinished_statement(console: Terminal) -> None:
    assert console.type("SELECT 1 AS a,", until=CONTINUATION) == ""
    os.write(console.fd, b"\x03")
    console.expect(PROMPT)
    assert console.type("SELECT 2 AS b;") == "b\n-\n2\n(1 row)\n\n"


def test_an_error_and_the_prompt_comes_back(console: Terminal) -> None:
    out = console.type("SELECT * FROM sales.nope;")
    assert out.startswith("error: ") and "nope" in out, out
    assert out.count("\n") == 1, out  # one line: no traceback, no plan
    out = console.type("SELEC 1;")
    assert out.startswith("error: ") and out.count("\n") == 1, out
    assert console.type("SELECT 1 AS one;") == "one\n---\n  1\n(1 row)\n\n"


def test_more_rows_than_shown(console: Terminal) -> None:
    # the console runs with the default --max-rows 1000
    lines = console.type("SELECT id FROM range(1005);").splitlines()
    assert lines[:3] == [" id", "---", "  0"]  # as wide as the rows shown
    assert lines[-3:] == ["999", "(first 1000 rows; more not shown, see --max-rows)", ""]
    assert len(lines) == 2 + 1000 + 2


def test_begin_insert_rollback(console: Terminal, url: str) -> None:
    assert console.type("BEGIN;", until=PROMPT_TXN) == "OK\n\n"
    out = console.type("INSERT INTO sales.orders VALUES (4, 'dave', 1);", until=PROMPT_TXN)
    assert out.endswith("                1\n(1 row)\n\n")
    out = console.type("SELECT count(*) AS n FROM sales.orders;", until=PROMPT_TXN)
    assert out == "n\n-\n4\n(1 row)\n\n"  # the transaction sees its own row
    assert len(_rows(url, "sales.orders")) == 3  # nobody else does
    assert console.type("ROLLBACK;") == "OK\n\n"
    assert [r["id"] for r in _rows(url, "sales.orders")] == [1, 2, 3]


def test_begin_commit_is_one_version(console: Terminal, url: str) -> None:
    with lakehouse.open_reader(url) as r:
        before = r.version
    console.type("BEGIN;", until=PROMPT_TXN)
    console.type("INSERT INTO sales.orders VALUES (5, 'erin', 5);", until=PROMPT_TXN)
    console.type("DELETE FROM sales.orders WHERE id = 1;", until=PROMPT_TXN)
    assert console.type("COMMIT;") == "OK\n\n"
    with lakehouse.open_reader(url) as r:
        assert r.version == before + 1
    assert [r["id"] for r in _rows(url, "sales.orders")] == [2, 3, 5]


def test_exit_rolls_back_an_open_transaction(console: Terminal, url: str, home: Path) -> None:
    console.type("BEGIN;", until=PROMPT_TXN)
    console.type("INSERT INTO sales.orders VALUES (6, 'frank', 6);", until=PROMPT_TXN)
    os.write(console.fd, b"\x04")  # Ctrl-D
    console.expect("lakehouse: the open transaction was rolled back\n")
    assert console.proc.wait(WAIT) == 0
    assert [r["id"] for r in _rows(url, "sales.orders")] == [2, 3, 5]
    history = (home / "history").read_text()
    assert "SELECT id, name, qty FROM sales.orders ORDER BY id;" in history
    # a statement typed over several lines is one entry
    assert "SELECT name, 'a;b' AS s," in history
    assert not (home / ".lakehouse_sql_history").exists()


# ---------------------------------------------------------------------------
# scripts: -f and -e
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def script_url(home: Path) -> str:
    path = str(home / "lh_scripts")
    lakehouse.open(path, create=True).close()
    return path


def _run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _cli(*args), env=_env(home), cwd=home, capture_output=True, text=True, timeout=WAIT,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_file_script(home: Path, script_url: str) -> None:
    script = home / "setup.sql"
    script.write_text(
        "-- a namespace and a table\n"
        "CREATE NAMESPACE shop;\n"
        "CREATE TABLE shop.items (id BIGINT NOT NULL, label STRING);\n"
        "/* two rows; then a look */\n"
        "INSERT INTO shop.items VALUES (1, 'pen'), (2, 'ink; blue');\n"
        "SELECT * FROM shop.items ORDER BY id\n"
    )
    done = _run(home, script_url, "-f", str(script))
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "OK\n\n"
        "OK\n\n"
        "num_affected_rows\n-----------------\n                2\n(1 row)\n\n"
        "id  label\n--  ---------\n 1  pen\n 2  ink; blue\n(2 rows)\n\n"
    )
    assert not [line for line in done.stderr.splitlines() if line.startswith("error: ")]


def test_script_stops_at_the_first_failure(home: Path, script_url: str) -> None:
    done = _run(
        home,
        script_url,
        "-e",
        "INSERT INTO shop.items VALUES (3, 'cap'); INSERT INTO shop.missing VALUES (4, 'never');"
        " INSERT INTO shop.items VALUES (5, 'not run'); SELECT 1 AS not_run",
    )
    assert done.returncode == 1
    assert done.stdout == "num_affected_rows\n-----------------\n                1\n(1 row)\n\n"
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "shop.missing" in errors[0], done.stderr
    assert [r["id"] for r in _rows(script_url, "shop.items")] == [1, 2, 3]
