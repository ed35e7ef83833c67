"""``python -m kvstore``: the admin command line (see :mod:`kvstore.cli`)."""

from __future__ import annotations

import sys

from kvstore.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
