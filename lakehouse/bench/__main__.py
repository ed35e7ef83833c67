"""``python -m lakehouse.bench [--only meta|data] [--quick]``: see :mod:`lakehouse.bench`."""

from lakehouse.bench import main

raise SystemExit(main())
