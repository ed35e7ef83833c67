"""The import graph: layered, lowest first, and without cycles.

Every ``.py`` under ``kvstore/`` and ``lakehouse/`` is parsed (never
imported) and ALL its imports are collected: at module level, inside
functions and classes, and under ``if TYPE_CHECKING:`` (a typing-only import
still couples the two modules). ``from pkg import name`` counts as importing
``pkg.name`` when that is a module; relative imports are resolved. Only
imports of project modules matter; a compiled one (``kvstore._speedups``)
is a leaf. Importing ``pkg.mod`` also runs ``pkg/__init__.py``, but that does
not count as importing the package (else every kvstore module would import
the facade ``kvstore``).

The rules, as data (:data:`LAYERS`, lowest first):

* a module may import modules of its own layer or lower, never higher;
* no cycle anywhere, within a layer included.

A module that no row of the table places fails the test: add it to the row
of the layer it belongs to (a new kvstore part usually joins its siblings'
wildcard; a new module with no home means the table needs a thought).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("kvstore", "lakehouse")

#: (layer name, modules), lowest first. ``x.*`` is the package ``x`` and
#: everything below it; a plain name is that module only (``kvstore`` is the
#: package ``__init__``). The most specific entry wins: an exact name over a
#: wildcard, a longer wildcard over a shorter one.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "base",
        (
            "kvstore._validate",
            "kvstore.errors",
            "kvstore.paths",
            "kvstore.ids",
            "kvstore.clock",
            "kvstore.options",
            "kvstore._accel",
            "kvstore.entries",
            "kvstore.cache",
        ),
    ),
    ("objstore", ("kvstore.objstore.*",)),
    ("formats", ("kvstore.format.*",)),
    (
        "journal and sources",
        (
            "kvstore.wal",
            "kvstore.memtable",
            "kvstore.iterators",
            "kvstore.readpath",
            "kvstore.batch",
            "kvstore.manifest_store",
        ),
    ),
    (
        "engine parts",
        ("kvstore.engine.*", "kvstore.compaction", "kvstore.oracle", "kvstore.ownership"),
    ),
    ("views over the engine protocol", ("kvstore.snapshot", "kvstore.txn", "kvstore.reads")),
    ("facades", ("kvstore.db", "kvstore.reader", "kvstore")),
    (
        "kvstore tools",
        (
            "kvstore.cli.*",
            "kvstore.bench.*",
            "kvstore.isolation.*",
            "kvstore.demo",
            "kvstore.__main__",
        ),
    ),
    ("lakehouse core", ("lakehouse.*",)),
    (
        "lakehouse top",
        (
            "lakehouse.spark.*",
            "lakehouse.cli.*",
            "lakehouse.bench.*",
            "lakehouse.spark_demo",
            "lakehouse.demo",
            "lakehouse.__main__",
        ),
    ),
)


# -- reading the imports ----------------------------------------------------------------


@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    line: int

    def __str__(self) -> str:
        return f"{self.src} -> {self.dst} ({module_path(self.src)}:{self.line})"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def module_path(name: str) -> str:
    return _PATHS[name]


def find_modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "__pycache__" not in path.parts:
                found[module_name(path)] = path
    return found


def find_extensions() -> set[str]:
    """Compiled modules (``kvstore._speedups``): leaves that import nothing of ours."""
    found = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*"):
            if path.suffix in (".so", ".pyd", ".pyi"):
                stem = path.with_name(path.name.split(".")[0])
                found.add(module_name(stem.with_suffix(".py")))
    return found


MODULES = find_modules()
EXTENSIONS = find_extensions() - set(MODULES)
_PATHS = {name: str(path.relative_to(ROOT)) for name, path in MODULES.items()}


def _resolve(name: str) -> str | None:
    """The project module ``name`` names: itself, or its longest module prefix."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_in(module: str, source: str, *, is_package: bool = False) -> Iterator[tuple[str, int]]:
    """Every project module ``module`` imports, anywhere in ``source``, with the line."""
    tree = ast.parse(source, module)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in EXTENSIONS:
                    continue
                target = _resolve(alias.name)
                if target is not None:
                    yield target, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = module if is_package else module.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{node.module}" if node.module else package
            else:
                base = node.module or ""
            if base.split(".")[0] not in PACKAGES:
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in EXTENSIONS:
                    continue
                target = sub if sub in MODULES else _resolve(base)
                if target is not None:
                    yield target, node.lineno


def import_edges() -> list[Edge]:
    edges: dict[tuple[str, str], Edge] = {}
    for module, path in MODULES.items():
        source = path.read_text()
        for target, line in imports_in(module, source, is_package=path.name == "__init__.py"):
            if target != module and (module, target) not in edges:
                edges[module, target] = Edge(module, target, line)
    return sorted(edges.values(), key=lambda e: (e.src, e.dst))


EDGES = import_edges()


# -- layers ----------------------------------------------------------------------------


def layer_of(module: str) -> int | None:
    """The index in :data:`LAYERS` of the most specific entry matching ``module``."""
    best: tuple[int, int] | None = None  # (specificity, layer)
    for index, (_name, patterns) in enumerate(LAYERS):
        for pattern in patterns:
            if pattern.endswith(".*"):
                prefix = pattern[:-2]
                if module == prefix or module.startswith(prefix + "."):
                    rank = len(prefix)
                else:
                    continue
            elif module == pattern:
                rank = 1 << 20  # an exact name beats any wildcard
            else:
                continue
            if best is None or rank > best[0]:
                best = (rank, index)
    return None if best is None else best[1]


def _describe(index: int) -> str:
    return f"{index} {LAYERS[index][0]}"


def _package(module: str) -> str:
    return module.split(".")[0]


# -- cycles ----------------------------------------------------------------------------


def strongly_connected(nodes: list[str], edges: list[Edge]) -> list[list[str]]:
    """Tarjan's components with more than one module (each holds a cycle)."""
    succ: dict[str, list[str]] = {n: [] for n in nodes}
    for e in edges:
        succ[e.src].append(e.dst)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        # iterative DFS: (node, iterator over its successors)
        work: list[tuple[str, Iterator[str]]] = []
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        work.append((root, iter(succ[root])))
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(succ[nxt])))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return sorted(out)


def a_cycle(component: list[str], edges: list[Edge]) -> list[Edge]:
    """One concrete cycle inside a strongly connected component (shortest from its
    first module), as the import edges that make it."""
    members = set(component)
    by_src: dict[str, list[Edge]] = {}
    for e in edges:
        if e.src in members and e.dst in members:
            by_src.setdefault(e.src, []).append(e)
    start = component[0]
    # breadth-first from start back to start
    came: dict[str, Edge] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for e in by_src.get(node, []):
                if e.dst == start:
                    path = [e]
                    while path[0].src != start:
                        path.insert(0, came[path[0].src])
                    return path
                if e.dst not in came:
                    came[e.dst] = e
                    following.append(e.dst)
        frontier = following
    raise AssertionError(f"no cycle in {component}")  # pragma: no cover


def _cycles_report(package: str) -> list[str]:
    report = []
    for component in strongly_connected(sorted(MODULES), EDGES):
        if package not in {_package(m) for m in component}:
            continue
        members = set(component)
        inside = [e for e in EDGES if e.src in members and e.dst in members]
        report.append(
            f"cycle among {len(component)} modules {component}:\n    "
            + "\n    ".join(str(e) for e in a_cycle(component, EDGES))
            + (
                f"\n  all {len(inside)} imports inside it (break enough of them):\n    "
                + "\n    ".join(str(e) for e in inside)
                if len(inside) > 2
                else ""
            )
        )
    return report


# -- the tests -------------------------------------------------------------------------


def test_the_table_places_every_module() -> None:
    unplaced = [m for m in MODULES if layer_of(m) is None]
    assert not unplaced, (
        "place these modules in a layer of LAYERS in tests/test_architecture.py "
        f"(the row of what they may import and who may import them): {unplaced}"
    )


def test_the_table_names_no_module_twice() -> None:
    seen: dict[str, str] = {}
    for name, patterns in LAYERS:
        for pattern in patterns:
            assert pattern not in seen, f"{pattern} is in both {seen[pattern]} and {name}"
            seen[pattern] = name


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycles(package: str) -> None:
    report = _cycles_report(package)
    assert not report, f"{len(report)} import cycle(s) in {package}:\n" + "\n".join(report)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_runs_up_the_layers(package: str) -> None:
    upward = []
    for e in EDGES:
        if _package(e.src) != package:
            continue
        src, dst = layer_of(e.src), layer_of(e.dst)
        if src is not None and dst is not None and dst > src:
            upward.append(f"{e}: layer {_describe(src)} imports layer {_describe(dst)}")
    assert not upward, f"{len(upward)} upward import(s) in {package}:\n" + "\n".join(upward)


# -- the checker itself ----------------------------------------------------------------


def test_the_reader_finds_every_kind_of_import() -> None:
    source = """
from __future__ import annotations
import os
import kvstore.format.manifest
from typing import TYPE_CHECKING
from kvstore import paths, wal as w
from kvstore._accel import speedups
from kvstore import _speedups
from . import bloom
from .wal import encode_record
from ..objstore.base import ObjectStore
if TYPE_CHECKING:
    from kvstore.db import DB
def later():
    import kvstore.txn
    from lakehouse.lakehouse import Lakehouse
class C:
    from kvstore.oracle import Oracle
"""
    found = {target for target, _ in imports_in("kvstore.format.sst", source)}
    assert found == {
        "kvstore.format.manifest",  # import a.b.c
        "kvstore.paths",  # from package import submodule
        "kvstore.wal",
        "kvstore._accel",  # from module import name
        # kvstore._speedups: compiled, a leaf (ignored)
        "kvstore.format.bloom",  # relative, resolved
        "kvstore.format.wal",
        "kvstore.objstore.base",
        "kvstore.db",  # typing-only
        "kvstore.txn",  # inside a function
        "lakehouse.lakehouse",
        "kvstore.oracle",  # inside a class
    }
    # in a package __init__, "." is the package itself
    assert {
        t
        for t, _ in imports_in("kvstore.objstore", "from .local import LocalStore", is_package=True)
    } == {"kvstore.objstore.local"}
    # the live tree: a graph over known modules, and not an empty one
    assert len(EDGES) > len(MODULES) // 2
    assert all(e.src in MODULES and e.dst in MODULES for e in EDGES)
    assert layer_of("kvstore.objstore") == layer_of("kvstore.objstore.local") == 1
    assert layer_of("kvstore") == 6 and layer_of("kvstore.db") == 6
    assert layer_of("lakehouse") == layer_of("lakehouse.txn") == 8
    assert layer_of("lakehouse.spark") == layer_of("lakehouse.spark.writer") == 9
    assert layer_of("kvstore.nowhere") is None


def test_the_cycle_finder() -> None:
    edges = [Edge("a", "b", 1), Edge("b", "c", 2), Edge("c", "a", 3), Edge("c", "d", 4)]
    edges += [Edge("d", "e", 5), Edge("e", "d", 6), Edge("f", "a", 7)]
    components = strongly_connected(["a", "b", "c", "d", "e", "f"], edges)
    assert components == [["a", "b", "c"], ["d", "e"]]
    assert [(e.src, e.dst) for e in a_cycle(["a", "b", "c"], edges)] == [
        ("a", "b"),
        ("b", "c"),
        ("c", "a"),
    ]


# -- private members ---------------------------------------------------------------------
#
# No module reads or writes a private member (``x._name``, and ``from m import
# _name``) of an object defined in another module: each part owns its state
# and offers what others need under a public name. Parsed with ``ast``: an
# access ``x._name`` where ``x`` is not ``self``/``cls`` is private access
# unless the module itself defines ``_name`` (a method, a class, a ``self._name``
# attribute or a module-level name): then ``x`` is an object of that module
# (another instance of its own class). Dunders are not private.

#: (module, the access as written) -> why it is allowed
PRIVATE_ACCESS_ALLOWED: dict[tuple[str, str], str] = {
    ("lakehouse.cli.parser", "parser._actions"): (
        "argparse has no public way to walk a parser's subcommands (docs/cli.md is "
        "checked against the parser with it)"
    ),
    ("lakehouse.cli.parser", "argparse._SubParsersAction"): "the same: argparse's subparser type",
    ("lakehouse.spark.bench_common", "spark._jvm"): (
        "PySpark offers no public call for the driver JVM's process id (the bench "
        "reports its memory)"
    ),
    ("lakehouse.spark.ops", "df._jdf"): (
        "PySpark offers no public call for the row bound of a DataFrame's optimized "
        "plan; it only lets a small write be inlined without a job, and any failure "
        "(Spark Connect) writes files as usual"
    ),
    ("lakehouse.spark.counted", "frame._jdf"): (
        "PySpark offers no public way to make a DataFrame of another class over the same "
        "plan; the read's DataFrame answers its own count() from the scan plan"
    ),
    ("lakehouse.spark.partitions", "df._jdf"): (
        "PySpark offers no public call for a DataFrame's physical output partitioning; "
        "it only lets a partitioned write skip a shuffle, and any failure shuffles"
    ),
}

#: members named with an underscore that are public API of the standard library
PUBLIC_BY_CONVENTION = frozenset({"_replace", "_asdict", "_fields", "_make"})


def _defined_names(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                names.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in PUBLIC_BY_CONVENTION


def private_accesses(module: str, source: str) -> Iterator[tuple[str, int]]:
    """``(the access as written, line)`` for each private member ``module`` reaches."""
    tree = ast.parse(source, module)
    own = _defined_names(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if node.attr not in own:
                yield ast.unparse(node), node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module:
            base = node.module if not node.level else None
            for alias in node.names:
                if not _is_private(alias.name):
                    continue
                if base is not None and f"{base}.{alias.name}" in set(MODULES) | EXTENSIONS:
                    continue  # a private module of the package, not a member
                if node.level and alias.name not in own:
                    yield f"from .{node.module} import {alias.name}", node.lineno
                elif base is not None and base.split(".")[0] in PACKAGES:
                    yield f"from {base} import {alias.name}", node.lineno


def test_no_module_reaches_into_another_modules_private_members() -> None:
    found = []
    for module, path in MODULES.items():
        for access, line in private_accesses(module, path.read_text()):
            if (module, access) not in PRIVATE_ACCESS_ALLOWED:
                found.append(f"{_PATHS[module]}:{line}: {access}")
    assert not found, "private members reached from another module:\n" + "\n".join(found)


def test_every_allowed_private_access_still_exists() -> None:
    seen = {
        (module, access)
        for module, path in MODULES.items()
        for access, _ in private_accesses(module, path.read_text())
    }
    stale = set(PRIVATE_ACCESS_ALLOWED) - seen
    assert not stale, f"allowed exceptions no longer needed: {sorted(stale)}"


def test_the_private_access_finder() -> None:
    source = """
from kvstore.paths import _hidden
from kvstore import _validate
class C:
    def __init__(self):
        self._mine = 1
    def same(self, other):
        return other._mine + self._x + other.__class__.__name__ + other._replace()
def f(txn, scan):
    txn._buffer.append(1)
    scan._one()
    txn._ctx = None
"""
    found = {access for access, _ in private_accesses("kvstore.fake", source)}
    assert found == {
        "from kvstore.paths import _hidden",
        "txn._buffer",
        "scan._one",
        "txn._ctx",
    }
