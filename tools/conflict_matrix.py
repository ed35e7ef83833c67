#!/usr/bin/env python3
"""Regenerate the conflict tables in docs/lakehouse.md from lakehouse/conflicts.py.

    python tools/conflict_matrix.py          # rewrite the doc's generated regions
    python tools/conflict_matrix.py --check  # exit 1 if the doc differs from the code

Each generated region sits between two marker comments naming a table of
:data:`lakehouse.conflicts.GENERATED`::

    <!-- generated from lakehouse/conflicts.py: data matrix -->
    | mine \\ theirs | ...
    <!-- end generated: data matrix -->

``tests/test_lakehouse_conflicts_doc.py`` fails when a region and the code
differ, so the policy and its documentation cannot drift apart. A dev tool:
not part of the package.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "lakehouse.md"

START = "<!-- generated from lakehouse/conflicts.py: {name} -->"
END = "<!-- end generated: {name} -->"


def regenerate(text: str) -> str:
    """``text`` with every generated region replaced by the table the code gives."""
    sys.path.insert(0, str(ROOT))
    from lakehouse.conflicts import GENERATED

    for name, render in GENERATED.items():
        start, end = START.format(name=name), END.format(name=name)
        pattern = re.compile(re.escape(start) + r"\n.*?" + re.escape(end), re.DOTALL)
        m = pattern.search(text)
        if m is None:
            raise SystemExit(f"{DOC}: no generated region {name!r} ({start} ... {end})")
        text = f"{text[: m.start()]}{start}\n{render()}{end}{text[m.end() :]}"
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="only report a difference")
    args = parser.parse_args()
    text = DOC.read_text()
    new = regenerate(text)
    if new == text:
        return 0
    if args.check:
        print(f"{DOC} differs from lakehouse/conflicts.py; run tools/conflict_matrix.py")
        return 1
    DOC.write_text(new)
    print(f"rewrote the generated tables of {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
