"""The docs stay true: generated pages current, links that resolve, a short README, documented public functions."""

from __future__ import annotations

import ast
import doctest
import importlib
import inspect
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import lengthlens

REPO = Path(__file__).resolve().parents[1]


def test_generated_docs_are_current():
    done = subprocess.run([sys.executable, str(REPO / "docs" / "make_docs.py"), "--check"], capture_output=True, text=True,
                          cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_readme_is_short_and_its_links_resolve():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode()) <= 12_000
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if target.startswith("http"):
                continue
            assert (page.parent / target).exists(), f"{page.name}: broken link {target}"


def test_the_readme_set_up_commands_are_the_ones_ci_runs():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert 'python -m pip install "torch==2.13.0" -e ".[dev]"' in readme and "lengthlens report --example --out out/example" in readme
    assert '"torch==2.13.0" -e ".[dev]"' in ci and "lengthlens report --example --out out/example" in ci
    assert "\npython -m pytest\n" in ci


PUBLIC_FUNCTIONS = [n for n in lengthlens.__all__ if n != "__version__" and inspect.isfunction(getattr(lengthlens, n))]


@pytest.mark.parametrize("name", PUBLIC_FUNCTIONS)
def test_public_functions_say_what_they_take_return_and_show_an_example(name):
    doc = inspect.getdoc(getattr(lengthlens, name)) or ""
    for section in ("Parameters\n----------", "Returns\n-------", "Examples\n--------"):
        assert section in doc, f"{name}: no {section.splitlines()[0]} section"


STATS_MODULES = sorted(f"lengthlens.stats.{m.name}" for m in pkgutil.iter_modules(importlib.import_module("lengthlens.stats").__path__))


def _stats_public_functions() -> list[tuple[str, str]]:
    """(module, name) of stats/'s public functions: no leading underscore, defined in the module, and in its
    ``__all__`` or imported or called as ``module.name`` outside stats/."""
    short = {m.rsplit(".", 1)[1] for m in STATS_MODULES}
    used: set[str] = set()
    for path in (REPO / "lengthlens").rglob("*.py"):
        if "stats" in path.relative_to(REPO / "lengthlens").parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lengthlens.stats"):
                used |= {a.name for a in node.names}
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in short:
                used.add(node.attr)
    out = []
    for name in STATS_MODULES:
        mod = importlib.import_module(name)
        listed = set(getattr(mod, "__all__", ()))
        for fn, obj in vars(mod).items():
            if (not fn.startswith("_") and inspect.isfunction(inspect.unwrap(obj)) and obj.__module__ == name
                    and (fn in listed or fn in used)):  # unwrap: a cached function is a function
                out.append((name, fn))
    return out


STATS_FUNCTIONS = _stats_public_functions()


@pytest.mark.parametrize("module,name", STATS_FUNCTIONS, ids=[f"{m.rsplit('.', 1)[1]}.{n}" for m, n in STATS_FUNCTIONS])
def test_stats_functions_say_what_they_take_return_and_show_a_running_example(module, name):
    fn = getattr(importlib.import_module(module), name)
    doc = inspect.getdoc(fn) or ""
    takes = bool(inspect.signature(fn).parameters)
    for section in ("Parameters\n----------" if takes else "", "Returns\n-------", "Examples\n--------"):
        assert section in doc, f"{module}.{name}: no {section.splitlines()[0]} section"
    examples = doctest.DocTestParser().get_examples(doc)
    assert examples and not any(doctest.SKIP in e.options for e in examples), f"{module}.{name}: no running example"


@pytest.mark.parametrize("module", ["lengthlens.results", "lengthlens.execution", *STATS_MODULES,
                                    "lengthlens.analyses.censoring", "lengthlens.report.output"])
def test_docstring_examples_run(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0  # a module without public functions may hold no example; the test above wants one each
