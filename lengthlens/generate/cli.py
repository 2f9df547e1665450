"""The ``lengthlens generate`` subcommand: registered on the main parser by ``add_parser``."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def add_parser(subparsers) -> None:
    """Register ``generate`` on an argparse subparsers object; the handler is :func:`run_generate`."""
    p = subparsers.add_parser(
        "generate",
        help="produce raw run logs (reference CPU sampler or vLLM) for target-draft pairs and rules",
        description=(
            "Run a generation campaign (YAML/TOML) and write the raw layout "
            "OUT/runs/<dataset>/<method>/<params>/case_NNN/seed_K/. Finished runs are skipped, never "
            "overwritten. With --example OUT, write a small toy campaign (strict + five rules) on a CPU."
        ),
    )
    p.add_argument("config", nargs="?", help="campaign file (.yaml/.yml/.toml)")
    p.add_argument("out", nargs="?", default=None, help="output root (default: the current folder)")
    p.add_argument("--backend", choices=("reference", "vllm", "vllm-batched"), default=None,
                   help="override the campaign's backend")
    p.add_argument("--example", metavar="OUT", default=None,
                   help="write and run the built-in toy campaign into OUT (reference backend)")
    p.add_argument("--example-items", type=int, default=4, help="items in the example (default 4)")
    p.add_argument("--example-seeds", type=int, default=1, help="seeds per item in the example (default 1)")
    p.add_argument("--example-force-commit", type=int, default=None, metavar="T",
                   help="add a spec_casc_tok force-commit arm with threshold T to the example")
    p.add_argument("--max-items", type=int, default=None, help="only the first N items of each dataset")
    p.add_argument("--shard", metavar="K/N", default=None,
                   help="run only shard K of N (1-based): the (dataset, item, seed) units dealt round-robin, every "
                        "arm of a unit in the same shard; shards are disjoint parts of the raw layout that "
                        "`lengthlens report` reads together (one OUT on shared storage, or several OUTs)")
    p.add_argument("--dry-run", action="store_true", help="list the planned runs and whether each is done")
    p.add_argument("--fail-fast", action="store_true", help="stop at the first failed run")
    p.add_argument("--quiet", action="store_true", help="no per-run progress lines")
    p.set_defaults(func=run_generate)


def _campaign_source(args: argparse.Namespace, log) -> tuple[Path, Path] | int:
    """The campaign file and output folder ``generate`` works on (writing the example's first), or an exit code."""
    if args.example is not None:
        if args.config is not None:
            print("generate: give either CONFIG or --example OUT, not both", file=sys.stderr)
            return 2
        if args.backend not in (None, "reference"):
            print("generate: the example runs on the reference backend only", file=sys.stderr)
            return 2
        from lengthlens.generate.example import write_example_campaign

        out = Path(args.example)
        cfg_path = write_example_campaign(out, n_items=args.example_items,
                                          seeds=tuple(range(args.example_seeds)),
                                          force_commit=args.example_force_commit)
        log(f"example campaign written to {cfg_path}")
    else:
        if args.config is None:
            print("generate: CONFIG is required (or use --example OUT)", file=sys.stderr)
            return 2
        cfg_path = Path(args.config)
        out = Path(args.out) if args.out is not None else Path.cwd()
    return cfg_path, out


def run_generate(args: argparse.Namespace) -> int:
    """Handler of ``lengthlens generate``; returns the process exit code."""
    from lengthlens.generate.config import load_config
    from lengthlens.generate.layout import is_finished
    from lengthlens.generate.runner import parse_shard, plan, run_campaign
    from lengthlens.generate.vllm_plugin import UnsupportedVLLM

    log = (lambda s: None) if args.quiet else (lambda s: print(s, file=sys.stderr))
    shard = None
    if args.shard is not None:
        try:
            shard = parse_shard(args.shard)
        except ValueError as exc:
            print(f"generate: --shard: {exc}", file=sys.stderr)
            return 2
    where_from = _campaign_source(args, log)
    if isinstance(where_from, int):
        return where_from
    cfg_path, out = where_from
    try:
        cfg = load_config(cfg_path)
    except (OSError, ValueError) as exc:
        print(f"generate: {cfg_path}: {exc}", file=sys.stderr)
        return 2
    if args.max_items is not None:
        cfg.max_items = args.max_items
    if args.backend is not None:
        cfg.backend = args.backend
    if args.dry_run:
        for r in plan(cfg, out, shard):
            print(f"{'done' if is_finished(r.path) else 'todo'}\t{r.path}")
        return 0
    t0 = time.perf_counter()
    try:
        s = run_campaign(cfg, out, log=log, fail_fast=args.fail_fast, shard=shard)
    except ImportError as exc:
        extra = "vllm" if cfg.backend.startswith("vllm") else "reference"
        print(f"generate: the {cfg.backend} backend needs `pip install lengthlens[{extra}]` ({exc})", file=sys.stderr)
        return 3
    except UnsupportedVLLM as exc:
        print(f"generate: {exc}", file=sys.stderr)
        return 3
    where = "" if shard is None else f" (shard {shard[0]}/{shard[1]})"
    log(f"{s.written} written, {s.skipped} already finished, {s.failed} failed, of {s.planned} planned{where} "
        f"under {out / 'runs'} in {time.perf_counter() - t0:.1f}s")
    return 1 if s.failed else 0
