"""Start-up cost: ``import lengthlens`` and ``lengthlens --help`` load no heavy library; each path loads only what it needs.

Each check runs in a fresh interpreter (the test process has imported everything already) and
lists which of the heavy modules ended up in ``sys.modules``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("numpy", "polars", "pandas", "pyarrow", "scipy", "scipy.stats", "pydantic", "jinja2", "matplotlib", "typst",
         "statsmodels")


def imported_after(code: str) -> set[str]:
    """Which of HEAVY a fresh interpreter has imported after running ``code``."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_import_lengthlens_loads_no_heavy_library():
    # Names resolve on first use (lengthlens.__getattr__); the version needs nothing.
    assert imported_after("import lengthlens; lengthlens.__version__") == set()


def test_public_names_still_resolve():
    import lengthlens

    for name in lengthlens.__all__:
        assert getattr(lengthlens, name) is not None, name
    assert "analyse" in dir(lengthlens)
    assert imported_after("import lengthlens; lengthlens.load") >= {"polars"}


def test_help_loads_no_data_stack():
    code = ("import contextlib, io\nfrom lengthlens.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n        main(['--help'])\n    except SystemExit:\n        pass\n"
            "    try:\n        main(['report', '--help'])\n    except SystemExit:\n        pass")
    assert imported_after(code) <= {"numpy"}  # numpy for the resampling defaults shown in the help


def test_cells_path_needs_no_plotting_pdf_or_scipy_stats(example_flat):
    flat = example_flat
    got = imported_after(f"import lengthlens as ll\nll.cells(ll.load({str(flat)!r}, run_graders=False), n_resamples=50)")
    assert {"polars", "numpy"} <= got
    assert not got & {"matplotlib", "typst", "statsmodels", "scipy.stats"}, got


def test_a_group_needs_no_pandas(example_flat):
    """A worker process computes groups (engine.group_results): no pandas there; the frames are built by each
    analysis' collect() in the calling process."""
    flat = example_flat
    code = ("import sys\n"
            "from lengthlens.data.loading import load\n"
            f"runs = load({str(flat)!r}, run_graders=False)\n"
            "for m in [m for m in sys.modules if m == 'pandas' or m.startswith('pandas.')]: sys.modules.pop(m)\n"
            "from lengthlens.analyses import engine\n"
            "from lengthlens.analyses.cells import CellsAnalysis\n"
            "from lengthlens.analyses.censoring import CensoringAnalysis\n"
            "from lengthlens.analyses.attribution import AttributionAnalysis\n"
            "from lengthlens.data.pairing import cell_units\n"
            "from lengthlens.data.channel_counts import run_channels\n"
            "analyses = [CellsAnalysis(), CensoringAnalysis(), AttributionAnalysis()]\n"
            "fields = tuple(f for a in analyses for f in a.fields)\n"
            "units = cell_units(run_channels(runs.paired)[0])\n"
            "groups = engine.groups_of(units, fields, engine.group_items(runs))\n"
            "parts = [engine.group_results(g, analyses, engine.Settings(n_resamples=200)) for g in groups]\n"
            "assert parts and all(p[0] and p[1] and p[2] for p in parts)")
    assert "pandas" not in imported_after(code)


def test_the_console_script_is_main(tmp_path):
    """``lengthlens`` is cli:console_main, which returns main()'s exit code; a missing input is one line and exit 2."""
    import tomllib

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["lengthlens"] == "lengthlens.cli:console_main"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    out = tmp_path / "out"
    bad = subprocess.run([sys.executable, "-m", "lengthlens", "report", str(tmp_path / "missing"), "--out", str(out)],
                         capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert bad.returncode == 2 and "missing" in bad.stderr and "Traceback" not in bad.stderr
