"""``lakehouse sql URL``: a Spark SQL console over a lakehouse.

It opens the lakehouse as its single writer, starts a local Spark
(:func:`lakehouse.spark.local_session`) and runs each statement through one
:class:`lakehouse.spark.SqlSession`, so ``BEGIN`` ... ``COMMIT`` spans
statements (and lines). Three ways in:

* interactive (stdin is a terminal): a ``lakehouse> `` prompt
  (``lakehouse*> `` inside a transaction), ``       -> `` while a statement
  goes on; a statement ends with ``;`` outside strings and comments, as
  sqlglot's Spark tokenizer reads it. readline history is kept in
  ``~/.lakehouse_sql_history`` (``--history FILE`` or
  ``$LAKEHOUSE_SQL_HISTORY``; empty: none). A failing statement prints
  ``error: <message>`` and the prompt comes back; ``exit``, ``quit``, ``\\q``
  or Ctrl-D leave, rolling back an open transaction (saying so);
* ``-e "statement; statement"`` and ``-f FILE`` (``-f -``, or stdin that is
  not a terminal: standard input): statements run in order; the first that
  fails stops the script (its error on stderr, exit status 1);
* every result is printed as the other commands print rows (aligned columns
  under a header and a rule, numbers right-aligned, ``null``, long cells cut
  unless ``--wide``) with a row count, at most ``--max-rows`` rows. A
  statement whose result has no columns (DDL, ``BEGIN``) prints ``OK``.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

import pyarrow as pa
from sqlglot import TokenType
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import TokenError

from kvstore.cli.codec import plural
from lakehouse.cli.render import MAX_CELL, cell, table_text
from lakehouse.cli.target import EXIT_FAILURE, EXIT_OK, CliError, Ctx, one_line, usage

log = logging.getLogger(__name__)

PROMPT = "lakehouse> "
PROMPT_TXN = "lakehouse*> "
CONTINUATION = "       -> "
HISTORY_ENV = "LAKEHOUSE_SQL_HISTORY"
DEFAULT_HISTORY = "~/.lakehouse_sql_history"
HISTORY_LENGTH = 1000
EXIT_WORDS = frozenset({"exit", "quit", "\\q"})


# ---------------------------------------------------------------------------
# statements: where they end (sqlglot's Spark tokenizer decides)
# ---------------------------------------------------------------------------
def split(text: str) -> tuple[list[str], str]:
    """The statements ``text`` ends with ``;`` and the text after the last one.

    A ``;`` in a string, a quoted name or a comment ends nothing; pieces that
    hold only comments are dropped. Raises :class:`sqlglot.errors.TokenError`
    on an unterminated string or comment.
    """
    statements: list[str] = []
    start = 0
    seen = False  # a token since the last ';'
    for tok in Dialect.get_or_raise("spark").tokenize(text):
        if tok.token_type == TokenType.SEMICOLON:
            if seen:
                statements.append(text[start : tok.start].strip())
            start, seen = tok.end + 1, False
        else:
            seen = True
    return statements, (text[start:] if seen else "")


def script_statements(text: str) -> list[str]:
    """Every statement of a script; the last one needs no ``;``."""
    statements, rest = split(text)
    if rest.strip():
        statements.append(rest.strip())
    return statements


# ---------------------------------------------------------------------------
# results as text
# ---------------------------------------------------------------------------
def _right(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t))


def result_text(df: Any, *, max_rows: int, width: int | None) -> str:
    """A statement's result: an aligned table and a row count, or ``OK``."""
    if df is None or not df.columns:
        return "OK"
    t: pa.Table = df.limit(max_rows + 1).toArrow()
    more = t.num_rows > max_rows
    t = t.slice(0, max_rows)
    columns = [t.column(i).to_pylist() for i in range(t.num_columns)]  # names may repeat
    rows = [[cell(v, width=width) for v in r] for r in zip(*columns)]
    text = table_text(rows, t.column_names, right=[_right(f.type) for f in t.schema])
    if more:
        return f"{text}\n(first {plural(t.num_rows, 'row')}; more not shown, see --max-rows)"
    return f"{text}\n({plural(t.num_rows, 'row')})"


def error_text(exc: BaseException) -> str:
    """One line for a failed statement: Spark's first line (no plan, no JVM trace)."""
    text = str(exc) or type(exc).__name__
    if type(exc).__module__.startswith(("pyspark", "py4j")):
        text = text.strip().split("\n", 1)[0]
    return one_line(text)


# ---------------------------------------------------------------------------
# the console
# ---------------------------------------------------------------------------
class Console:
    """Runs statements through one SqlSession and prints what they return."""

    def __init__(
        self,
        session: Any,
        spark: Any,
        *,
        max_rows: int = 1000,
        width: int | None = MAX_CELL,
        timing: bool = False,
        out: TextIO | None = None,
        err: TextIO | None = None,
    ) -> None:
        self.session = session
        self.spark = spark
        self.max_rows = max_rows
        self.width = width
        self.timing = timing
        self.out = out or sys.stdout
        self.err = err or sys.stderr

    def run(self, statement: str) -> bool:
        """Run one statement and print its result (or its error); True if it worked."""
        started = time.monotonic()
        interrupted: list[bool] = []
        try:
            with self._cancelling(interrupted):
                df = self.session.sql(statement)
                text = result_text(df, max_rows=self.max_rows, width=self.width)
        except (Exception, KeyboardInterrupt) as exc:  # a message, no traceback
            log.debug("statement failed: %s", statement, exc_info=True)
            message = "interrupted" if interrupted else error_text(exc)
            self.out.flush()
            self.err.write(f"error: {message}\n")
            self.err.flush()
            return False
        if self.timing:
            text += f"\nTime: {time.monotonic() - started:.3f} s"
        self.out.write(text + "\n\n")
        self.out.flush()
        return True

    @contextmanager
    def _cancelling(self, interrupted: list[bool]) -> Iterator[None]:
        """Ctrl-C while a statement runs cancels its Spark jobs (the statement then
        fails); a second Ctrl-C stops waiting for it.

        PySpark's own handler calls into the JVM from inside the signal handler,
        on the connection the interrupted call is reading (py4j then logs
        tracebacks); this one cancels from another thread, on another connection.
        """
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def on_sigint(signum: int, frame: Any) -> None:
            if interrupted:
                raise KeyboardInterrupt
            interrupted.append(True)
            threading.Thread(target=self._cancel_jobs, daemon=True).start()

        previous = signal.signal(signal.SIGINT, on_sigint)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

    def _cancel_jobs(self) -> None:
        try:
            self.spark.sparkContext.cancelAllJobs()
        except Exception:  # a session without a context (Connect): nothing to cancel
            log.debug("cancelling Spark jobs failed", exc_info=True)

    def script(self, text: str) -> int:
        """Run a script's statements in order; stop at the first failure (status 1)."""
        try:
            statements = script_statements(text)
        except TokenError as exc:
            self.err.write(f"error: cannot read the script: {one_line(str(exc))}\n")
            return EXIT_FAILURE
        for statement in statements:
            if not self.run(statement):
                return EXIT_FAILURE
        return EXIT_OK

    def prompt(self, continued: bool) -> str:
        if continued:
            return CONTINUATION
        return PROMPT_TXN if self.session.in_transaction else PROMPT

    def interactive(self, history: str | None) -> int:
        """Read statements at a prompt until exit, quit or end of input."""
        rl = _history_start(history)
        pending = ""  # an unfinished statement's lines
        try:
            while True:
                try:
                    line = input(self.prompt(bool(pending)))
                except EOFError:
                    self.out.write("\n")
                    return EXIT_OK
                except KeyboardInterrupt:  # drop what was typed, as shells do
                    self.out.write("\n")
                    pending = ""
                    continue
                if not pending and line.strip().rstrip(";").strip().lower() in EXIT_WORDS:
                    return EXIT_OK
                text = f"{pending}\n{line}" if pending else line
                try:
                    statements, rest = split(text)
                except TokenError:  # an open string or comment: read on
                    pending = text
                    continue
                pending = rest
                if statements:
                    _history_add(rl, text if not rest else text[: len(text) - len(rest)])
                for statement in statements:
                    if not self.run(statement):
                        pending = ""  # as in a script: the rest of the line is not run
                        break
        finally:
            _history_save(rl, history)


# ---------------------------------------------------------------------------
# readline history
# ---------------------------------------------------------------------------
def history_path(option: str | None) -> str | None:
    """``--history``, else ``$LAKEHOUSE_SQL_HISTORY``, else the default; "" = none."""
    path = option if option is not None else os.environ.get(HISTORY_ENV, DEFAULT_HISTORY)
    return os.path.expanduser(path) if path else None


def _history_start(path: str | None) -> Any:
    try:
        import readline
    except ImportError:  # no readline on this platform: plain input()
        return None
    readline.set_auto_history(False)  # one entry per statement, not per line
    readline.set_history_length(HISTORY_LENGTH)
    if path and os.path.exists(path):
        try:
            readline.read_history_file(path)
        except OSError as exc:
            log.warning("cannot read the history file %s: %s", path, exc)
    return readline


def _history_add(rl: Any, text: str) -> None:
    text = text.strip()
    if rl is None or not text:
        return
    if "--" not in text:  # a line comment would swallow the lines joined after it
        text = " ".join(part.strip() for part in text.splitlines())
    rl.add_history(text)


def _history_save(rl: Any, path: str | None) -> None:
    if rl is None or not path:
        return
    try:
        rl.write_history_file(path)
    except OSError as exc:
        log.warning("cannot write the history file %s: %s", path, exc)


# ---------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------
def _spark_conf(pairs: list[tuple[str, str]] | None) -> dict[str, str]:
    return {k: v for k, v in pairs or []}


def _quiet_pyspark(verbose: bool) -> None:
    """PySpark logs every failed query with its JVM trace to stderr; the console says
    ``error: <message>`` instead (``-v`` keeps PySpark's log)."""
    if verbose:
        return
    try:
        from pyspark.logger import PySparkLogger
    except ImportError:  # an older PySpark: no such loggers
        return
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)


def cmd_sql(ctx: Ctx) -> int:
    """``sql URL [-e TEXT | -f FILE]``: the console, or a script."""
    a = ctx.args
    if ctx.json:
        raise usage("sql prints tables; --json is not supported")
    script: str | None = a.execute
    if a.file is not None:
        try:
            if a.file == "-":
                script = sys.stdin.read()
            else:
                with open(a.file, encoding="utf-8") as f:
                    script = f.read()
        except OSError as exc:
            raise CliError(f"cannot read {a.file}: {exc.strerror or exc}") from exc
    elif script is None and not sys.stdin.isatty():
        script = sys.stdin.read()
    try:
        import lakehouse.spark as lhs
    except ImportError as exc:
        raise CliError(f"sql needs pyspark (the spark extra): {exc}") from exc

    _quiet_pyspark(bool(getattr(a, "verbose", False)))
    lh = ctx.target.open_writer()
    try:
        log.info("starting Spark (%s)", a.master)
        spark = lhs.local_session("lakehouse-sql", master=a.master, conf=_spark_conf(a.conf))
        session = lhs.SqlSession(lh, spark)
        console = Console(
            session,
            spark,
            max_rows=a.max_rows,
            width=None if a.wide else MAX_CELL,
            timing=a.timing,
        )
        try:
            if script is not None:
                code = console.script(script)
            else:
                ctx.line(
                    f"lakehouse {ctx.target.url} at version {lh.version}, Spark {a.master}. "
                    "End statements with ';'; exit, quit or Ctrl-D to leave."
                )
                code = console.interactive(history_path(a.history))
        finally:
            if session.in_transaction:
                ctx.note("the open transaction was rolled back")
            session.close()
            spark.stop()
    finally:
        lh.close()
    return code
