"""`lengthlens snapshot` and `lengthlens check`: the command-line layer over :mod:`lengthlens.report.snapshot`."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from typing import Any

__all__ = ["add_parsers", "main"]


def _load_runs(args: argparse.Namespace):
    from lengthlens.data.execute import mode_from_args
    from lengthlens.data.loading import load

    return load(*args.runs, grades=args.grades, strict=args.strict, cache=not args.no_cache,
                run_graders=not args.no_graders, problems=args.problems, execute_code=mode_from_args(args),
                grading_budget_s=getattr(args, "grading_budget", None))


def _cmd_snapshot(args: argparse.Namespace) -> int:
    from lengthlens.report.snapshot import save_snapshot
    from lengthlens.stats.resample import (
        DEFAULT_CONFIDENCE,
        DEFAULT_N_RESAMPLES,
        DEFAULT_SEED,
    )

    runs = _load_runs(args)
    settings = {"n_resamples": args.n_resamples or DEFAULT_N_RESAMPLES,
                "seed": DEFAULT_SEED if args.seed is None else args.seed,
                "ci": args.ci or "studentized", "confidence_level": DEFAULT_CONFIDENCE}
    path = save_snapshot(runs, args.output, settings=settings)
    n = len(json.loads(path.read_text())["cells"])
    print(f"wrote {n} cells to {path}")
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    from lengthlens.report.snapshot import check, load_snapshot

    try:
        exp = load_snapshot(args.against)
    except (OSError, ValueError) as exc:  # a missing or foreign file is a usage error, not a moved number
        print(f"lengthlens check: cannot read the snapshot: {exc}", file=sys.stderr)
        return 2
    settings = dict(exp.get("settings", {}))
    for k in ("n_resamples", "seed", "ci"):
        v = getattr(args, k)
        if v is not None:
            settings[k] = v
    exp = {**exp, "settings": settings}
    runs = _load_runs(args)
    result = check(runs, exp)
    print(result.report(limit=None if args.all else 200))
    return 0 if result.ok else 1


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", help="raw-layout folders or flat .jsonl/.csv/.parquet files")
    p.add_argument("--grades", action="append", default=[], metavar="FILE", help="grade file(s) in the study's format")
    p.add_argument("--strict", action="store_true", help="stop on invalid records instead of skipping them")
    p.add_argument("--no-cache", action="store_true", help="re-read raw trees instead of using the cache")
    p.add_argument("--no-graders", action="store_true", help="do not grade runs that have no verdict from a record or grade file")
    p.add_argument("--problems", metavar="PATH", help="HumanEval problems / LiveCodeBench tests (JSONL) for the execution graders")
    from lengthlens.data.execute import add_execution_flags

    add_execution_flags(p)
    p.add_argument("--n-resamples", type=int, default=None, help="bootstrap resamples (snapshot: default 10000; check: the snapshot's)")
    p.add_argument("--seed", type=int, default=None, help="bootstrap seed (check: the snapshot's unless given)")
    p.add_argument("--ci", choices=("studentized", "percentile", "bca"), default=None, help="interval method (check: the snapshot's)")


def add_parsers(subparsers: Any) -> None:
    """Register ``snapshot`` and ``check`` on the ``lengthlens`` command's subparsers (each sets ``func``)."""
    p = subparsers.add_parser("snapshot", help="save every cell's numbers as a regression fixture (JSON)",
                              description="Save every cell's numbers and the bootstrap settings to a JSON snapshot.")
    _common(p)
    p.add_argument("--output", "-o", required=True, help="snapshot file to write, e.g. expected.json")
    p.set_defaults(func=_cmd_snapshot)

    c = subparsers.add_parser("check", help="recompute the cells and compare them with a snapshot (exit 1 if any moved)",
                              description="Recompute the cells with the snapshot's settings and name every number that "
                                          "moved beyond its tolerance (exact for point estimates and counts; for interval "
                                          "limits, a Monte-Carlo tolerance from the interval's width). Exit 0 when all "
                                          "match, 1 when any moved, 2 on unreadable input.")
    _common(c)
    c.add_argument("--against", required=True, help="snapshot file written by `lengthlens snapshot`")
    c.add_argument("--all", action="store_true", help="list every difference (default: the first 200)")
    c.set_defaults(func=_cmd_check)


def main(argv: Iterable[str] | None = None) -> int:
    """Run ``snapshot``/``check`` without the main CLI (``python -m lengthlens.report.snapshot check ...``)."""
    parser = argparse.ArgumentParser(prog="lengthlens")
    add_parsers(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv) if argv is not None else None)
    from lengthlens.data.errors import InputError

    try:
        return int(args.func(args))
    except (InputError, OSError) as exc:
        print(f"lengthlens {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
