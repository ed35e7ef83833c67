"""Running Spark jobs for the lakehouse: typed errors instead of Py4J traces.

A job can fail for two kinds of reasons, and the caller must do different
things about them:

* the *data* is wrong for the table (a null in a non-nullable column, a row
  outside an overwrite's ``where``, a value a cast cannot hold): the check
  runs inside the job (Spark's ``raise_error`` or a Python task) with a
  message wrapped in a marker, and :func:`spark_job` re-raises it as
  :class:`ValueError` with just that message: fix the input;
* anything else (an executor lost, storage unreachable, a bug): the job's
  exception becomes :class:`SparkJobError`, with the original as
  ``__cause__``: look at the cause, then run the operation again.

Either way nothing was committed, and the files the job wrote are deleted
by the caller before the error leaves :mod:`lakehouse.spark`.

Analysis errors (an unknown column in a condition, a syntax error) happen
on the driver before any job and become :class:`ValueError` through
:func:`bad_condition`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from lakehouse.data.literals import first_line as first_line  # the one way to shorten an error
from lakehouse.errors import LakehouseError

_MARK_OPEN = "LAKEHOUSE_BAD_DATA<<"
_MARK_CLOSE = ">>"
_MARKED = re.compile(re.escape(_MARK_OPEN) + r"(.*?)" + re.escape(_MARK_CLOSE), re.S)


class SparkJobError(LakehouseError, RuntimeError):
    """A Spark job run by :mod:`lakehouse.spark` failed; nothing was committed.

    The data files the job wrote were deleted. ``__cause__`` holds Spark's
    exception; fix what it names and run the operation again.
    """


def bad_data(message: str) -> str:
    """Wrap a bad-data message so :func:`spark_job` turns the job failure into ValueError."""
    return f"{_MARK_OPEN}{message}{_MARK_CLOSE}"


def _is_spark_error(exc: BaseException) -> bool:
    """An error of Spark: pyspark's (classic, and Spark Connect's
    ``pyspark.errors.exceptions.connect.*``, which subclass the same bases) or
    Py4J's (classic only; a Connect-only client may lack py4j)."""
    from pyspark.errors import PySparkException

    if isinstance(exc, PySparkException):
        return True
    try:
        from py4j.protocol import Py4JError
    except ImportError:  # pragma: no cover - a Connect-only pyspark
        return False
    return isinstance(exc, Py4JError)


@contextmanager
def spark_job(what: str) -> Iterator[None]:
    """Translate a failing Spark job (see module doc); ``what`` names the operation."""
    try:
        yield
    except Exception as exc:
        text = str(exc)
        m = _MARKED.search(text)
        if m is not None:
            raise ValueError(m.group(1)) from None
        if _is_spark_error(exc):
            raise SparkJobError(
                f"the Spark job {what} failed; nothing was committed: {first_line(exc)[:500]}"
            ) from exc
        raise


def bad_condition(exc: Exception, condition: Any, what: str) -> ValueError:
    """A ValueError for a condition Spark could not parse or resolve."""
    return ValueError(f"bad {what} {condition!r}: {first_line(exc)[:400]}")


def is_analysis_error(exc: BaseException) -> bool:
    """Spark rejected an expression on the driver (parse or analysis error; under
    Spark Connect the server's, raised when the plan is analysed)."""
    from pyspark.errors import AnalysisException, ParseException

    return isinstance(exc, (AnalysisException, ParseException))
