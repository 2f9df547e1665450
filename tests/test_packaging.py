"""The package's dependencies are what it imports: nothing listed that no module uses, nothing used that is not listed."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: Import name -> distribution name, where they differ.
DIST_OF = {"yaml": "pyyaml", "pydantic_core": "pydantic"}
#: Listed though no module imports it by name, and why.
INDIRECT = {"pyarrow": "polars' DataFrame.to_pandas() needs it"}
#: Imported by the optional generation module only, from the extras that install them.
OPTIONAL = {"torch", "transformers", "tokenizers", "vllm"}


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].strip().lower() for r in requirements}


def _imported() -> set[str]:
    out = set()
    for path in (REPO / "lengthlens").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            out |= {n.split(".")[0] for n in names}
    return {DIST_OF.get(n, n).lower() for n in out if n and n != "lengthlens" and n not in sys.stdlib_module_names
            and n != "__future__"}


def test_runtime_dependencies_are_what_the_package_imports():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    listed = _names(project["dependencies"])
    used = _imported() - OPTIONAL
    assert used <= listed, f"imported but not listed: {sorted(used - listed)}"
    assert listed - used <= set(INDIRECT), f"listed but never imported: {sorted(listed - used - set(INDIRECT))}"
    extras = {name: _names(reqs) for name, reqs in project["optional-dependencies"].items()}
    assert OPTIONAL - {"tokenizers"} <= extras["reference"] | extras["vllm"]


def test_the_package_ships_its_type_marker_and_templates():
    assert (REPO / "lengthlens" / "py.typed").is_file()
    data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["lengthlens"]
    assert "py.typed" in data and any(d.startswith("templates") for d in data)
