"""The ``lengthlens`` command: a thin layer over the Python API."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Sequence

from lengthlens._version import __version__
from lengthlens.stats.resample import DEFAULT_N_RESAMPLES, DEFAULT_SEED


def _add_analysis_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n-resamples", type=int, default=DEFAULT_N_RESAMPLES, help="bootstrap resamples (default %(default)s)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="bootstrap seed (default %(default)s)")
    p.add_argument("--ci", choices=("studentized", "percentile", "bca"), default="studentized",
                   help="interval method (default %(default)s: bootstrap-t on the log scale for ratios)")
    p.add_argument("--aft-ci", choices=("sandwich", "bootstrap"), default="sandwich",
                   help="AFT interval: cluster-robust sandwich from one fit, or bootstrap refits (default %(default)s)")
    p.add_argument("--include-small", action="store_true",
                   help="keep cells with fewer than 10 items in Table 3 and the headline (left out by default)")
    p.add_argument("--alphas", choices=("loosest", "all"), default="loosest",
                   help="cells entering Table 3: the loosest alpha per rule and dataset, or all (default %(default)s)")
    p.add_argument("--grades", action="append", default=[], metavar="FILE",
                   help="grade file(s) in the study's format (campaign/grades next to a root are found anyway)")
    p.add_argument("--aft-resamples", type=int, default=None, metavar="N",
                   help="resamples for the AFT bootstrap (--aft-ci bootstrap), each a likelihood fit (default: lengthlens.analyses.censoring's)")
    p.add_argument("--no-graders", action="store_true", help="do not grade runs that have no verdict from a record or grade file")
    p.add_argument("--problems", metavar="PATH", help="HumanEval problems / LiveCodeBench tests (JSONL) for the execution graders")
    p.add_argument("--grading", choices=("default", "study"), default="default",
                   help="grading policy for runs without a verdict: lengthlens' (answer part only; a run cut inside its "
                        "thinking is wrong) or the study's grade scripts' rules (default %(default)s)")
    p.add_argument("--no-proposals", action="store_true", help="skip the proposals.jsonl aggregation (extra_tokens.csv)")
    p.add_argument("--strict", action="store_true", help="stop with a list of every invalid record instead of skipping them")
    p.add_argument("--no-cache", action="store_true", help="re-read raw trees instead of using the normalized-table cache")


def _example_runs(out: Path) -> list[Path]:
    from lengthlens import synth

    root = out / "example-runs"
    # Token traces for gsm8k only, as in the study: enough for the extra-tokens table, small on disk.
    synth.write_raw(synth.example(), root, seed=0, proposals=("gsm8k",))
    return [root]


def load_from_args(sources: Sequence[str | Path], args: argparse.Namespace):
    """lengthlens.load with the shared command-line options (also used by snapshot/check)."""
    from lengthlens.data.loading import load

    return load(*sources, grades=args.grades, strict=args.strict, cache=not args.no_cache,
                progress=not getattr(args, "quiet", False), run_graders=not args.no_graders, problems=args.problems,
                grading=getattr(args, "grading", "default"))


def analyse_from_args(runs, args: argparse.Namespace):
    """lengthlens.analyses.analyse.analyse with the shared command-line options."""
    from lengthlens.analyses.analyse import analyse

    extra = {} if args.aft_resamples is None else {"n_resamples_aft": args.aft_resamples}
    return analyse(runs, n_resamples=args.n_resamples, seed=args.seed, ci=args.ci, alphas=args.alphas,
                   proposals=not args.no_proposals, aft_ci=args.aft_ci, include_small=args.include_small, **extra)


def _cmd_report(args: argparse.Namespace) -> int:
    from lengthlens.report import write_report

    out = Path(args.out)
    sources: list[Path] = [Path(s) for s in args.runs]
    if args.example:
        sources = _example_runs(out) + sources
    if not sources:
        print("lengthlens report: give RUNS (raw-layout folders or flat files) or --example", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    runs = load_from_args(sources, args)
    t_load = time.perf_counter() - t0
    analysis = analyse_from_args(runs, args)
    written = write_report(analysis, out, pdf=not args.no_pdf, latex=args.latex, figures=not args.no_figures)
    if not args.quiet:
        print(runs.summary())
        print()
        print(analysis.headline())
        t3 = analysis.tables["table3"]
        if not t3.empty:
            cols = ["method", "n_cells", "gain_mean", "lambda_mean", "rounds_ratio_mean", "rounds_ratio_median",
                    "time_ratio_mean", "n_lambda_lo_gt_1", "n_graded", "n_drop_2pp", "n_drop_2pp_point"]
            print()
            print(t3[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        for line in analysis.summary_lines():
            print(line)
        print(f"\nloaded in {t_load:.1f}s, {time.perf_counter() - t0:.1f}s in all; wrote {len(written)} files to {out}:")
        print("  " + " ".join(p.name for p in written))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lengthlens", description="Paired, censoring-aware evaluation of lossy speculative decoding.")
    parser.add_argument("--version", action="version", version=f"lengthlens {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    rep = sub.add_parser("report", help="analyse run logs and write tables and the report")
    rep.add_argument("runs", nargs="*", help="raw-layout folders (runs/, old_runs/, a dataset folder) or flat .jsonl/.csv/.parquet files")
    rep.add_argument("--out", "-o", required=True, help="output folder")
    rep.add_argument("--example", action="store_true", help="analyse the embedded synthetic example (written to OUT/example-runs)")
    rep.add_argument("--quiet", "-q", action="store_true", help="print nothing")
    rep.add_argument("--latex", action="store_true", help="also write booktabs tables (table3.tex, table4.tex, attribution.tex)")
    rep.add_argument("--no-pdf", action="store_true", help="skip report.pdf (WeasyPrint)")
    rep.add_argument("--no-figures", action="store_true", help="leave the figures out of the report")
    _add_analysis_options(rep)
    rep.set_defaults(func=_cmd_report)

    try:
        from lengthlens.generate.cli import add_parser as add_generate
    except ImportError:  # the generation module is optional at import time
        add_generate = None
    if add_generate is not None:
        add_generate(sub)
    from lengthlens.report.snapshot_cli import add_parsers as add_snapshot

    add_snapshot(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; errors in the input end with one clear line, not a traceback."""
    from lengthlens.data.loading import LoadError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except LoadError as exc:
        print(f"lengthlens: {exc}", file=sys.stderr)
        return 2
    except (FileNotFoundError, IsADirectoryError, PermissionError, ValueError) as exc:
        # Unusable input (a snapshot, a campaign file, a grade file): one line, not a traceback.
        print(f"lengthlens: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
