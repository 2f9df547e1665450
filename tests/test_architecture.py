"""The package layout is the data flow: no stage imports a later one, no import cycle, statistics free of frames and
execution, no private name used outside its module.

Stages, in the order data flows: ``data`` (read, validate, pair) → ``stats`` (resample, estimate) →
``analyses`` → ``report`` → the top-level API and CLI. ``synth`` and ``generate`` write logs and
may use ``data`` only. Every import counts, lazy ones inside functions included, because a lazy
import of a later stage is the same dependency, only hidden.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "lengthlens"

#: Rank of each stage: a module may import modules of its own rank or lower.
RANKS = {
    "lengthlens._version": 0,
    "lengthlens.results": 0,
    "lengthlens.execution": 0,
    "lengthlens.data": 1,
    "lengthlens.stats": 2,
    "lengthlens.synth": 2,
    "lengthlens.generate": 2,
    "lengthlens.analyses": 3,
    "lengthlens.report": 4,
    "lengthlens": 5,  # the package root, cli, testing, __main__
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def rank(module: str) -> int:
    best = max((k for k in RANKS if module == k or module.startswith(k + ".")), key=len)
    return RANKS[best]


def imports_of(path: Path, name: str) -> set[str]:
    """Every lengthlens module ``path`` imports, resolving ``from pkg import sub`` to the submodule."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "lengthlens"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_pkg else 0)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.split(".")[0] != "lengthlens":
                continue
            for a in node.names:
                sub = f"{mod}.{a.name}"
                out.add(sub if (PACKAGE.parent / (sub.replace(".", "/") + ".py")).exists()
                        or (PACKAGE.parent / sub.replace(".", "/") / "__init__.py").exists() else mod)
    out.discard(name)
    return out


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p, module_name(p)) for p in sorted(PACKAGE.rglob("*.py"))}


def test_rank_function_on_known_modules():
    assert rank("lengthlens.data.loading") == 1
    assert rank("lengthlens.report.plots") == 4
    assert rank("lengthlens.cli") == 5
    assert rank("lengthlens.stats.aft") == 2


def test_no_stage_imports_a_later_stage():
    bad = [f"{m} (stage {rank(m)}) imports {d} (stage {rank(d)})"
           for m, deps in graph().items() for d in sorted(deps) if rank(d) > rank(m)]
    assert not bad, "\n".join(bad)


def find_cycle(g: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``g`` (as a path that returns to its start), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for d in sorted(g.get(m, ())):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state and (c := visit(d)):
                return c
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(g):
        if m not in state and (c := visit(m)):
            return c
    return None


def test_cycle_finder_finds_a_planted_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles():
    # A package's __init__ re-exporting its own submodules is not a cycle unless a submodule imports
    # the package root back, which the graph shows as an edge to the package name itself.
    cycle = find_cycle(graph())
    assert cycle is None, " -> ".join(cycle)


#: The third-party packages the statistics may import: numbers only, no data frames, no execution.
STATS_MAY_IMPORT = {"numpy", "scipy"}


def third_party_imports(path: Path) -> set[str]:
    """Top-level names of every non-lengthlens, non-standard-library module ``path`` imports (lazy imports too)."""
    import sys

    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and _is_type_checking(node.test)
                   for stmt in node.body for n in ast.walk(stmt)}
    out = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:  # an annotation's import: not a dependency at run time
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        for n in names:
            top = n.split(".")[0]
            if top and top != "lengthlens" and top not in sys.stdlib_module_names and top != "__future__":
                out.add(top)
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def test_stats_imports_only_numpy_and_scipy():
    bad = {p.name: sorted(third_party_imports(p) - STATS_MAY_IMPORT) for p in sorted((PACKAGE / "stats").glob("*.py"))}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, f"stats/ modules import more than numpy and scipy: {bad}"


def test_the_import_check_sees_lazy_imports():
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "m.py"
        f.write_text("from typing import TYPE_CHECKING\nimport numpy as np\nif TYPE_CHECKING:\n    import jinja2\n\n"
                     "def g():\n    import polars as pl\n    from pandas import DataFrame\n")
        assert third_party_imports(f) == {"numpy", "polars", "pandas"}


def private_imports() -> list[str]:
    """``from lengthlens.x import _name``: a private name used outside its module."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("lengthlens")):
                out += [f"{path.relative_to(PACKAGE).as_posix()}: {node.module}.{a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    return out


def test_no_private_name_is_imported_across_modules():
    found = private_imports()
    assert not found, "private names imported from other modules:\n" + "\n".join(found)


def test_only_one_module_knows_how_work_is_executed():
    """Process pools, threads, forks and BLAS thread limits live in lengthlens/execution.py alone."""
    words = ("ProcessPoolExecutor", "multiprocessing", "os.fork", "threadpoolctl", "ThreadPoolExecutor", "mallopt",
             "threading")
    found = [f"{p.relative_to(PACKAGE).as_posix()}: {w}" for p in sorted(PACKAGE.rglob("*.py"))
             if p.relative_to(PACKAGE).as_posix() != "execution.py"
             for w in words if w in p.read_text(encoding="utf-8")]
    assert not found, found
