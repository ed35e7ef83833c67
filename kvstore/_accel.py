"""The optional C accelerator, :mod:`kvstore._speedups`, or None.

``setup.py`` builds it when a C compiler is available; without it kvstore
runs its pure-Python code paths, which give the same results (the test suite
runs both and compares them). Set ``KVSTORE_PURE_PYTHON=1`` to force the
Python paths.
"""

from __future__ import annotations

import logging
import os
from types import ModuleType

log = logging.getLogger("kvstore")


def _load() -> ModuleType | None:
    if os.environ.get("KVSTORE_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        from kvstore import _speedups
    except ImportError as exc:  # no compiler at install time: the Python paths serve
        log.debug("kvstore._speedups unavailable (%s); using pure Python", exc)
        return None
    return _speedups


speedups: ModuleType | None = _load()
