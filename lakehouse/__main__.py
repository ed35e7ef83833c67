"""``python -m lakehouse``: the lakehouse command line (see :mod:`lakehouse.cli`)."""

from __future__ import annotations

import sys

from lakehouse.cli.main import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
