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
HEAVY = ("numpy", "polars", "pandas", "pyarrow", "scipy", "scipy.stats", "pydantic", "jinja2", "matplotlib", "weasyprint",
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


def test_cells_path_needs_no_plotting_pdf_or_scipy_stats(tmp_path):
    from lengthlens import synth

    flat = synth.write_flat(synth.example(), tmp_path / "ex.parquet")
    got = imported_after(f"import lengthlens as ll\nll.cells(ll.load({str(flat)!r}, run_graders=False), n_resamples=50)")
    assert {"polars", "numpy"} <= got
    assert not got & {"matplotlib", "weasyprint", "statsmodels", "scipy.stats"}, got


def test_report_starts_its_workers_before_importing_the_data_stack(tmp_path, monkeypatch):
    """``lengthlens report`` on a large input starts its worker processes first, so that their imports overlap the
    command's own (the constant naming their modules and the error main() catches live in modules that import nothing)."""
    assert imported_after("import lengthlens.analyses, lengthlens.data.errors") == set()
    from lengthlens import cli
    from lengthlens.analyses import WORKER_MODULES
    from lengthlens.analyses.group_pass import WORKER_MODULES as from_pass
    from lengthlens.data.errors import LoadError
    from lengthlens.data.loading import LoadError as from_loading

    assert WORKER_MODULES == from_pass == ("lengthlens.analyses.group_pass",) and LoadError is from_loading
    started = []
    monkeypatch.setattr("lengthlens.stats.parallel.start_processes", lambda workers, modules: started.append(modules))
    big = tmp_path / "big.parquet"
    big.write_bytes(b"\0" * cli._PRESTART_BYTES)
    cli._start_workers(cli.build_parser().parse_args(["report", str(big), "--out", str(tmp_path / "out")]), [big])
    assert started == [WORKER_MODULES]


def test_a_group_job_needs_no_pandas(tmp_path):
    """A worker process imports WORKER_MODULES and runs group jobs: neither needs pandas (0.55 s of each worker's
    start-up on the 2-core machine); the frames are built in the main process."""
    from lengthlens import synth

    flat = synth.write_flat(synth.example(), tmp_path / "ex.parquet")
    code = ("import sys, lengthlens.analyses.group_pass as gp\n"
            "from lengthlens.data.loading import load\n"
            f"runs = load({str(flat)!r}, run_graders=False)\n"
            "sys.modules.pop('pandas', None)\n"  # loading may use pandas; a worker does not load
            "for m in [m for m in sys.modules if m.startswith('pandas.')]: sys.modules.pop(m)\n"
            "from lengthlens.analyses.attribution import channel_units\n"
            "ch = channel_units(runs)\n"
            "jobs = [(g, f, gp.all_group_items(runs)[g], {'n_resamples': 200, 'seed': 0, 'ci': 'studentized', 'level': 0.95,\n"
            "         'censoring': gp.censoring_options(200, 50, 'sandwich')}) for g, f in gp.group_frames(ch[0].select(gp.PASS_COLUMNS))]\n"
            "parts = [gp.group_job(j) for j in jobs]\n"
            "assert parts and all(p[0] for p in parts)")
    assert "pandas" not in imported_after(code)
    assert "pandas" not in imported_after("import lengthlens.analyses.group_pass")
    # analyse() imports pandas and the tables' modules while its pass runs (analyses.analyse._AFTER_PASS), not before
    assert "pandas" not in imported_after("import lengthlens.analyses.analyse")


def test_the_console_script_exits_without_collecting_what_the_report_left(tmp_path):
    """``lengthlens`` runs main() and then freezes the collector (the last collection of a report's reference cycles
    took 0.6-0.7 s at paper scale); its exit code and the files it wrote are main()'s."""
    import tomllib

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["lengthlens"] == "lengthlens.cli:console_main"
    out = tmp_path / "out"
    code = (f"import gc, sys\nsys.argv = ['lengthlens', 'report', '--example', '--out', {str(out)!r}, '--no-pdf', "
            "'--no-figures', '--quiet', '--n-resamples', '200']\n"
            "from lengthlens.cli import console_main\nrc = console_main()\n"
            "assert gc.get_freeze_count() > 1000, gc.get_freeze_count()\nsys.exit(rc)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (out / "cells.csv").stat().st_size > 1000 and (out / "report.html").is_file()
    bad = subprocess.run([sys.executable, "-m", "lengthlens", "report", str(tmp_path / "missing"), "--out", str(out)],
                         capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert bad.returncode == 2 and "missing" in bad.stderr
