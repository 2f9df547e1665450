"""The ``lengthlens`` command: a thin layer over the Python API."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from lengthlens._version import __version__
from lengthlens.stats.resample import DEFAULT_N_RESAMPLES, DEFAULT_SEED


_CLEAR_LINE = "\r\033[K"  # back to the line's start and clear it: the running stage's line is rewritten


class Progress:
    """One line on stderr per stage of ``lengthlens report`` (load, analyses, figures, HTML, PDF), with its seconds.

    Called with a stage's name as the stage starts; the line ends when the next stage starts or at
    :meth:`close`. On a terminal the stage shows while it runs (``lengthlens: load ...``) and is
    rewritten with its time; elsewhere (``--progress`` into a log) only the finished lines are
    written. Disabled, it only keeps the times.
    """

    def __init__(self, enabled: bool, stream=None):
        self.stream = sys.stderr if stream is None else stream
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.times: dict[str, float] = {}
        self._stage: str | None = None
        self._t0 = 0.0

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Progress:
        """On unless --quiet; by default only when stderr is a terminal, always with --progress."""
        force = getattr(args, "progress", False)
        return cls(enabled=not args.quiet and (force or sys.stderr.isatty()))

    def __call__(self, stage: str) -> None:
        self.close()
        self._stage, self._t0 = stage, time.perf_counter()
        if self.enabled and self.tty:
            self.stream.write(f"lengthlens: {stage} ...")
            self.stream.flush()

    def close(self) -> None:
        if self._stage is None:
            return
        dt = time.perf_counter() - self._t0
        self.times[self._stage] = dt
        if self.enabled:
            self.stream.write(f"{_CLEAR_LINE if self.tty else ''}lengthlens: {self._stage} {dt:.1f} s\n")
            self.stream.flush()
        self._stage = None


#: Fewest bootstrap resamples the command accepts: with 200, a 95 % interval's limits rest on the 5 most extreme
#: replicates on each side; fewer would print "95 % intervals" that are mostly noise.
MIN_RESAMPLES = 200


def _at_least(low: int, what: str) -> Callable[[str], int]:
    """An argparse type: a whole number of at least ``low`` (usage error naming the option otherwise)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a whole number, not {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{what} must be at least {low}, not {value}")
        return value
    return parse


def _add_analysis_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n-resamples", type=_at_least(MIN_RESAMPLES, "--n-resamples"), default=DEFAULT_N_RESAMPLES,
                   help=f"bootstrap resamples (default %(default)s, at least {MIN_RESAMPLES})")
    p.add_argument("--seed", type=_at_least(0, "--seed"), default=DEFAULT_SEED, help="bootstrap seed (default %(default)s)")
    p.add_argument("--ci", choices=("studentized", "percentile", "bca"), default="studentized",
                   help="interval method (default %(default)s: bootstrap-t on the log scale for ratios)")
    p.add_argument("--aft-ci", choices=("sandwich", "bootstrap"), default="sandwich",
                   help="AFT interval: cluster-robust sandwich from one fit, or bootstrap refits (default %(default)s)")
    p.add_argument("--include-small", action="store_true",
                   help="keep cells with fewer than 10 items in Table 3 and the headline (left out by default)")
    p.add_argument("--alphas", choices=("loosest", "all"), default="loosest",
                   help="cells entering Table 3: the loosest alpha per rule and dataset, or all (default %(default)s)")
    p.add_argument("--margin", type=float, default=2.0, metavar="PP",
                   help="non-inferiority margin of the rule verdicts, in accuracy points (default %(default)s)")
    p.add_argument("--grades", action="append", default=[], metavar="FILE",
                   help="grade file(s): the study's format (campaign/grades next to a root are found anyway) or "
                        "item_id[,seed[,turn]],correct as .csv/.jsonl/.parquet, with arm columns (docs/inputs.md)")
    p.add_argument("--aft-resamples", type=_at_least(1, "--aft-resamples"), default=None, metavar="N",
                   help="resamples for the AFT bootstrap (--aft-ci bootstrap), each a likelihood fit (default: lengthlens.analyses.censoring's)")
    p.add_argument("--no-graders", action="store_true", help="do not grade runs that have no verdict from a record or grade file")
    p.add_argument("--problems", metavar="PATH", help="HumanEval problems / LiveCodeBench tests (JSONL) for the execution graders")
    from lengthlens.data.execute import add_execution_flags  # imports nothing: --help stays light

    add_execution_flags(p)
    p.add_argument("--grading", choices=("default", "study"), default="default",
                   help="grading policy for runs without a verdict: lengthlens' (answer part only; a run cut inside its "
                        "thinking is wrong) or the study's grade scripts' rules (default %(default)s)")
    p.add_argument("--no-proposals", action="store_true", help="skip the proposals.jsonl aggregation (extra_tokens.csv)")
    p.add_argument("--workers", type=_at_least(1, "--workers"), default=None, metavar="N",
                   help="worker processes for the analysis of large inputs and the report's figures (default: the cores "
                        "available, or $LENGTHLENS_WORKERS); the numbers and the report do not depend on it")
    p.add_argument("--strict", action="store_true", help="stop with a list of every invalid record instead of skipping them")
    from lengthlens.data.cache import CACHE_DIR_ENV, cache_dir  # imports nothing heavy

    p.add_argument("--no-cache", action="store_true",
                   help=f"re-read raw trees instead of using the normalized-table cache, kept in {cache_dir()} "
                        f"(${CACHE_DIR_ENV}, else $XDG_CACHE_HOME/lengthlens, else ~/.cache/lengthlens; it removes only "
                        f"files it wrote)")


def _example_runs(out: Path) -> list[Path]:
    from lengthlens import synth

    # Named as the user would write it (relative below the working folder): the report lists the roots it read.
    cwd = Path.cwd()
    root = (out.relative_to(cwd) if out.is_relative_to(cwd) else out) / "example-runs"
    # Token traces for gsm8k only, as in the study: enough for the extra-tokens table, small on disk.
    synth.write_raw(synth.example(), root, seed=0, proposals=("gsm8k",))
    return [root]


def load_from_args(sources: Sequence[str | Path], args: argparse.Namespace, bar: bool | None = None):
    """lengthlens.load with the shared command-line options (also used by snapshot/check); ``bar``: the raw reader's bar."""
    from lengthlens.data.loading import load

    fmt = getattr(args, "format", None)
    bar = not getattr(args, "quiet", False) if bar is None else bar
    return load(*sources, grades=args.grades, strict=args.strict, cache=not args.no_cache,
                progress=bar, run_graders=not args.no_graders, problems=args.problems,
                grading=getattr(args, "grading", "default"), format=fmt, execute_code=_execute_code(args),
                format_options=_format_options(args) if fmt else None,
                grading_budget_s=getattr(args, "grading_budget", None))


def _execute_code(args: argparse.Namespace) -> str:
    from lengthlens.data.execute import mode_from_args

    return mode_from_args(args)


def _format_options(args: argparse.Namespace) -> dict:
    """Options of the log-format readers given on the command line (only those set)."""
    out = {}
    if getattr(args, "questions", None):
        out["questions"] = args.questions
    if getattr(args, "max_new_tokens", None):
        out["max_new_tokens"] = args.max_new_tokens
    if getattr(args, "arm", None):
        from lengthlens.data.readers.common import parse_arm_items

        out["arm"] = parse_arm_items(args.arm)
    if getattr(args, "method_map", None):
        from lengthlens.data.readers.specbench import parse_method_map

        out["method_map"] = parse_method_map(args.method_map)
    return out


def _add_format_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--questions", metavar="FILE", help="Spec-Bench question.jsonl for every answer folder "
                   "(default: the one beside each model_answer/)")
    p.add_argument("--max-new-tokens", type=_at_least(1, "--max-new-tokens"), metavar="N",
                   help="token budget the runs were generated with, when the logs do not say (Spec-Bench: 1024)")
    p.add_argument("--arm", action="append", metavar="KEY=VALUE",
                   help="engine records (vllm, sglang, aiperf, vllm-bench): an arm field for every file, e.g. "
                        "--arm method=eagle3 --arm concurrency=32 (arm.json beside a file wins; docs/readers.md)")
    p.add_argument("--method-map", action="append", metavar="ID=METHOD|FILE",
                   help="Spec-Bench: the arm of an answer file whose model id lengthlens cannot read (EAGLE's, "
                        "Medusa's, Hydra's own files): ID (or a glob) = METHOD, ID = a JSON object of arm fields, "
                        "or a JSON file mapping ids to either")


def _nothing_to_analyse(runs) -> str | None:
    """Why no cell can be formed (one line), or None."""
    import polars as pl

    if runs.table.height == 0:
        return "nothing was loaded: every run was skipped (see the reasons above or use --strict)"
    if not runs.table.select((pl.col("paired") & (pl.col("method") != "strict")).any()).item():
        top = runs.skipped.group_by("reason").len().sort("len", descending=True).head(1)
        why = f"; most common reason: {top['reason'][0]} ({top['len'][0]} runs)" if top.height else ""
        return f"no cell could be formed (no arm has ok runs paired with a baseline){why}"
    return None


def analyse_from_args(runs, args: argparse.Namespace, progress=None, pool=None):
    """lengthlens.analyses.analyse.analyse with the shared command-line options (worker processes: the cores, by default;
    ``pool``: processes already started, which the resampling then uses)."""
    from lengthlens.analyses.analyse import analyse
    from lengthlens.execution import resolve_workers

    extra = {} if args.aft_resamples is None else {"n_resamples_aft": args.aft_resamples}
    return analyse(runs, n_resamples=args.n_resamples, seed=args.seed, ci=args.ci, alphas=args.alphas,
                   proposals=not args.no_proposals, aft_ci=args.aft_ci, include_small=args.include_small,
                   progress=progress, workers=resolve_workers(args.workers), margin_pp=getattr(args, "margin", 2.0),
                   pool=pool, **extra)


def _cmd_report(args: argparse.Namespace) -> int:
    from lengthlens.execution import Pool, resolve_workers
    from lengthlens.report import REPORT_FILES, wording, write_report
    from lengthlens.report.model import warm_up
    from lengthlens.report.output import check_out

    sources: list[Path] = [Path(s) for s in args.runs]
    if args.example and args.format:
        print("lengthlens report: --example is in the raw layout; it cannot be read with --format", file=sys.stderr)
        return 2
    # Before any work: an --out that holds the inputs or files no report wrote stops here, not after the analysis.
    out = check_out(args.out, sources, REPORT_FILES, into_subfolder=args.into_subfolder)
    progress = Progress.from_args(args)
    if args.example:
        progress("writing the example's runs")
        sources = _example_runs(out) + sources
    if not sources:
        print("lengthlens report: give RUNS (raw-layout folders or flat files) or --example", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    progress("load")
    runs = load_from_args(sources, args, bar=progress.enabled and progress.tty)
    progress.close()
    t_load = time.perf_counter() - t0
    empty = _nothing_to_analyse(runs)
    if empty:
        if not args.quiet:
            print(printable(runs.summary()), file=sys.stderr)
        print(f"lengthlens report: {printable(empty)}", file=sys.stderr)
        return EXIT_INPUT
    # The workers start now, their imports paid while the pairs are made; the resampling runs on them and this
    # process, then the figures do (no second set of processes is started).
    with Pool(resolve_workers(args.workers), warm=None if args.no_figures else warm_up) as pool:
        analysis = analyse_from_args(runs, args, progress=progress, pool=pool)
        written = write_report(analysis, out, pdf=not args.no_pdf, latex=args.latex, figures=not args.no_figures,
                               progress=progress, workers=pool)
    progress.close()
    for name, why in written.failed.items():  # the rest of the report stands
        print(f"lengthlens report: {name} not written: {printable(why)}", file=sys.stderr)
    if not args.quiet:
        verdict_lines = wording.rule_verdict_lines(analysis.tables.get("rules"))
        for line in verdict_lines:  # first: the answer per rule
            print(printable(line))
        if verdict_lines:
            print()
        print(printable(runs.summary()))
        print()
        print(printable(wording.headline(analysis)))
        t3 = analysis.tables["table3"]
        if not t3.empty:
            cols = ["method", "n_cells", "gain_mean", "lambda_mean", "rounds_ratio_mean", "rounds_ratio_median",
                    "time_ratio_mean", "n_lambda_lo_gt_1", "n_graded", "n_drop_2pp", "n_drop_2pp_point"]
            cols = ["serving", *cols] if "serving" in t3 else cols  # one row per serving condition and rule
            print()
            print(printable(t3[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}")))
        for line in wording.summary_lines(analysis):
            print(printable(line))
        print(f"\nloaded in {t_load:.1f}s, {time.perf_counter() - t0:.1f}s in all; wrote {len(written)} files to {out}:")
        print("  " + " ".join(p.name for p in written))
        if written.dropped:
            print(f"  removed the earlier report's {', '.join(written.dropped)} (not part of this report)")
    return EXIT_OK


def _cmd_plan(args: argparse.Namespace) -> int:
    """lengthlens plan: how many items, seeds and datasets a rule-level verdict needs (lengthlens.plan)."""
    import tempfile

    from lengthlens.analyses.cells import cells
    from lengthlens.analyses.plan import plan
    from lengthlens.report import wording

    with tempfile.TemporaryDirectory(prefix="lengthlens-plan-") as tmp:
        sources = (_example_runs(Path(tmp)) if args.example else []) + [Path(s) for s in args.runs]
        if not sources:
            print("lengthlens plan: give RUNS (the pilot's logs) or --example", file=sys.stderr)
            return EXIT_INPUT
        runs = load_from_args(sources, args, bar=False)
        empty = _nothing_to_analyse(runs)
        if empty:
            print(f"lengthlens plan: {printable(empty)}", file=sys.stderr)
            return EXIT_INPUT
        # The plan reads the cells' delta-method standard errors and 2×2 counts: no resample enters it.
        result = plan(cells(runs, n_resamples=MIN_RESAMPLES, seed=args.seed), accuracy_losses_pp=tuple(args.accuracy_loss),
                      rounds_changes=tuple(x / 100 for x in args.rounds_change), power=args.power,
                      seed_correlation=args.seed_correlation, check=not args.no_check, seed=args.seed)
    for line in wording.plan_lines(result):
        print(printable(line))
    if args.out:
        result.to_frame().to_csv(args.out, index=False, float_format="%.10g")
        print(f"every design considered: {args.out}")
    return EXIT_OK


def _format_names() -> list[str]:
    from lengthlens.data.readers import names

    return names()


def _cmd_import(args: argparse.Namespace) -> int:
    from lengthlens.data.loading import read_format
    from lengthlens.report.output import check_file_out, write_file

    suffix = Path(args.out).suffix.lower()
    if suffix not in (".parquet", ".jsonl", ".csv"):
        print(f"lengthlens import: --out must end in .parquet, .jsonl or .csv, not {Path(args.out).name!r}", file=sys.stderr)
        return 2
    out = check_file_out(args.out, [args.path])  # before reading: a link, a FIFO, a folder or the input itself
    table, failures, _, warnings = read_format(args.path, args.format, **_format_options(args))
    writer = {".parquet": table.write_parquet, ".jsonl": table.write_ndjson, ".csv": table.write_csv}[suffix]
    write_file(out, writer)  # beside the target, then renamed: a full disk leaves the old file as it was
    for w in warnings:
        print(f"warning: {printable(w)}", file=sys.stderr)
    for f in failures:
        print(f"skipped: {printable(f['path'])}: {printable(f['reason'])}", file=sys.stderr)
    print(f"{table.height} run records written to {printable(out)}; {len(failures)} skipped")
    return EXIT_INPUT if table.height == 0 else EXIT_OK


def _cmd_grades(args: argparse.Namespace) -> int:
    from lengthlens.data.grading.harness import lm_eval_grades
    from lengthlens.data.readers.common import parse_arm_items
    from lengthlens.report.output import check_file_out, write_file

    suffix = Path(args.out).suffix.lower()
    if suffix not in (".csv", ".jsonl", ".parquet"):
        print(f"lengthlens grades: --out must end in .csv, .jsonl or .parquet, not {Path(args.out).name!r}", file=sys.stderr)
        return EXIT_INPUT
    # Before reading: a link, a FIFO, a folder or one of the samples files is refused, as for import.
    out = check_file_out(args.out, args.samples, command="lengthlens grades")
    try:
        arm = parse_arm_items(args.arm or [])
        frames = [lm_eval_grades(f, metric=args.metric, filter=args.filter, arm=arm) for f in args.samples]
    except (ValueError, OSError, UnicodeDecodeError) as exc:
        print(f"lengthlens grades: {printable(exc)}", file=sys.stderr)
        return EXIT_INPUT
    import pandas as pd

    table = pd.concat(frames, ignore_index=True)
    writer = {".csv": lambda p: table.to_csv(p, index=False),
              ".jsonl": lambda p: table.to_json(p, orient="records", lines=True),
              ".parquet": lambda p: table.to_parquet(p, index=False)}[suffix]
    write_file(out, writer)  # beside the target, then renamed: a full disk leaves the old file as it was
    print(f"{len(table)} grades written to {printable(out)} (use it with --grades {printable(out)})")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lengthlens", description="Paired, censoring-aware evaluation of lossy speculative decoding.",
                                     epilog="Exit codes: 0 success, 1 `check` found numbers that moved, 2 bad input or "
                                            "usage, 3 internal error. --debug (anywhere) shows an internal error's traceback.")
    parser.add_argument("--version", action="version", version=f"lengthlens {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    rep = sub.add_parser("report", help="analyse run logs and write tables and the report")
    rep.add_argument("runs", nargs="*", help="raw-layout folders (runs/, old_runs/, a dataset folder) or flat .jsonl/.csv/.parquet files")
    rep.add_argument("--out", "-o", required=True, help="output folder (its files that no earlier report wrote are never "
                     "replaced: a name clash stops the run before any work)")
    rep.add_argument("--into-subfolder", action="store_true",
                     help="where OUT holds files with a report's names that no earlier report wrote, write the report "
                          "into OUT/lengthlens-report/ instead of stopping")
    rep.add_argument("--example", action="store_true", help="analyse the embedded synthetic example (written to OUT/example-runs)")
    rep.add_argument("--quiet", "-q", action="store_true", help="print nothing")
    rep.add_argument("--progress", action="store_true",
                     help="a line on stderr per stage with its seconds even when stderr is not a terminal (default: only on a terminal)")
    rep.add_argument("--latex", action="store_true", help="also write booktabs tables (table3.tex, table4.tex, attribution.tex)")
    rep.add_argument("--no-pdf", action="store_true", help="skip report.pdf (typeset by Typst)")
    rep.add_argument("--no-figures", action="store_true", help="leave the figures out of the report")
    rep.add_argument("--format", choices=_format_names(), help="read RUNS with this log-format reader "
                     "(specbench: Spec-Bench answer folders, no converter needed)")
    _add_format_options(rep)
    _add_analysis_options(rep)
    rep.set_defaults(func=_cmd_report)

    pl_ = sub.add_parser("plan", help="how many items, seeds and datasets a rule-level verdict needs, from a pilot's logs")
    pl_.add_argument("runs", nargs="*", help="the pilot's logs (as for report)")
    pl_.add_argument("--example", action="store_true", help="plan from the embedded synthetic example")
    pl_.add_argument("--accuracy-loss", type=float, nargs="+", default=[2.0, 5.0], metavar="PP",
                     help="rule-level accuracy losses to detect, in points (default 2 5)")
    pl_.add_argument("--rounds-change", type=float, nargs="+", default=[5.0], metavar="PCT",
                     help="R/R* changes to detect, in percent (default 5)")
    pl_.add_argument("--power", type=float, default=0.8, help="power to reach (default %(default)s)")
    pl_.add_argument("--seed-correlation", type=float, default=None, metavar="RHO",
                     help="how alike an item's seeds are, 0-1 (default 0.5: a pilot with one seed per item cannot tell)")
    pl_.add_argument("--no-check", action="store_true", help="skip the simulation of the proposed designs")
    pl_.add_argument("--out", "-o", help="write every design considered to this CSV")
    pl_.add_argument("--seed", type=_at_least(0, "--seed"), default=DEFAULT_SEED, help="seed of the simulations")
    pl_.add_argument("--grades", action="append", default=[], metavar="FILE", help="grade file(s) in the study's format")
    pl_.add_argument("--no-graders", action="store_true", help="do not grade runs that have no verdict")
    pl_.add_argument("--problems", metavar="PATH", help="HumanEval problems / LiveCodeBench tests for the graders")
    pl_.add_argument("--strict", action="store_true", help="stop at the first invalid record")
    pl_.add_argument("--no-cache", action="store_true", help="re-read raw trees instead of using the cache")
    pl_.add_argument("--format", choices=_format_names(), help="read RUNS with this log-format reader")
    pl_.set_defaults(func=_cmd_plan)

    imp = sub.add_parser("import", help="convert logs of another format to normalized run records (.parquet, .jsonl, .csv)")
    imp.add_argument("format", choices=_format_names(), help="log format")
    imp.add_argument("path", help="what the reader reads (specbench: a data folder, a task folder or an answer file)")
    imp.add_argument("--out", "-o", required=True, help="output file: .parquet, .jsonl or .csv")
    _add_format_options(imp)
    imp.set_defaults(func=_cmd_import)

    gr = sub.add_parser("grades", help="turn an evaluation harness's per-sample verdicts into a grades file for --grades")
    gr.add_argument("harness", choices=["lm-eval"], help="lm-eval: lm_eval --log_samples files (samples_<task>_<date>.jsonl)")
    gr.add_argument("samples", nargs="+", help="the harness's samples file(s)")
    gr.add_argument("--out", "-o", required=True, help="grades file to write (.csv, .jsonl or .parquet)")
    gr.add_argument("--arm", action="append", metavar="KEY=VALUE",
                    help="the arm the verdicts grade (method=, params=, dataset=, ...), one column each")
    gr.add_argument("--metric", help="the metric that decides (default: exact_match, acc, pass@1, acc_norm or em)")
    gr.add_argument("--filter", help="the lm-eval filter whose answers count (needed where a task has several)")
    gr.set_defaults(func=_cmd_grades)

    try:
        from lengthlens.generate.cli import add_parser as add_generate
    except ImportError:  # the generation module is optional at import time
        add_generate = None
    if add_generate is not None:
        add_generate(sub)
    from lengthlens.report.snapshot_cli import add_parsers as add_snapshot

    add_snapshot(sub)
    return parser


#: Exit codes: success; `check` found numbers that moved; bad input or usage; an internal error (a bug).
EXIT_OK, EXIT_DIFFERENCES, EXIT_INPUT, EXIT_INTERNAL = 0, 1, 2, 3
EXIT_INTERRUPTED = 130


def printable(text: object) -> str:
    """``text`` without control characters (escape sequences in names from the logs), newlines and tabs kept."""
    return "".join(ch for ch in str(text) if ch in "\n\t" or (ch.isprintable() and not 0x7F <= ord(ch) <= 0x9F))


@contextlib.contextmanager
def _printable_library_output():
    """Warnings and log records of libraries (matplotlib's, polars') printed through :func:`printable` while the
    command runs: a font or file name from the logs cannot send escape sequences to the terminal."""
    import logging
    import warnings

    def show(message, category, filename, lineno, file=None, line=None):
        stream = sys.stderr if file is None else file
        try:
            stream.write(printable(warnings.formatwarning(message, category, filename, lineno, line)))
        except (OSError, ValueError):
            pass

    class Printable(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            return printable(super().format(record))

    last = logging.lastResort
    saved_show, saved_format = warnings.showwarning, getattr(last, "formatter", None)
    warnings.showwarning = show
    if last is not None:
        last.setFormatter(Printable())
    try:
        yield
    finally:
        warnings.showwarning = saved_show
        if last is not None:
            last.setFormatter(saved_format)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script: one clear line for bad input (exit 2), for an interruption (130) and for a
    bug (exit 3; the traceback with ``--debug``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    parser = build_parser()
    args = parser.parse_args(argv)  # --help and usage errors end here (exit 2), before the data stack is imported
    from lengthlens.data.errors import InputError  # light: the command imports the data stack when it needs it

    try:
        with _printable_library_output():
            return int(args.func(args) or 0)
    except InputError as exc:
        print(f"lengthlens: {printable(exc)}", file=sys.stderr)
        return EXIT_INPUT
    except OSError as exc:  # a file that cannot be read or written (missing, read-only, disk full)
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"lengthlens: {printable(where)}{printable(exc.strerror or exc)}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print("lengthlens: interrupted; nothing was written (an earlier report is left as it was)", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - a bug: said as one, the traceback on request
        if debug:
            raise
        print(f"lengthlens: internal error (a bug; rerun with --debug for the traceback): {type(exc).__name__}: "
              f"{printable(exc)}", file=sys.stderr)
        return EXIT_INTERNAL


def console_main() -> int:
    """The ``lengthlens`` command."""
    return main()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(console_main())
