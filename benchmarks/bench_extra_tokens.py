"""Throughput and peak memory of the lossy-only token aggregation (lengthlens.analyses.extra_tokens) on big traces.

Generates a synthetic study of proposals.jsonl files with the real trace's schema (34 keys per judged
row, 12 per bonus row, rounds of k = 6 drafts ending in a rejection or a bonus) under --dir (default
/tmp/lengthlens_bench_extra_tokens, never in git), then times ``extra_token_stats`` on it, each
measurement in a fresh interpreter so that ru_maxrss is the aggregation's own peak.

    python benchmarks/bench_extra_tokens.py                      # ~1 GB synthetic, streaming engine
    python benchmarks/bench_extra_tokens.py --size-mb 200 --compare
    python benchmarks/bench_extra_tokens.py --real ../shared/data/lossy-token-eff --size-mb 0

Files are read warm from the page cache (generation just wrote them). Measured on the 2-core dev
machine (polars 2.1, best of 3): gsm8k traces 66.6 MB / 87k rows in 0.22 s (~300 MB/s, ~400k rows/s);
1 GB synthetic / 1.3M rows in 3.0-3.4 s (~300 MB/s, ~400k rows/s), peak RSS ~330-360 MB of which
~170 MB is the interpreter with polars and pandas imported; 3 GB: ~540 MB peak.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

# Run from a checkout without installing: the repository root holds the lengthlens package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

K = 6
METHODS = {
    "strict": ["strict"],
    "cactus": ["alpha0.03", "alpha0.08", "alpha0.18", "alpha0.35"],
    "mentored_dec": ["alpha0.15", "alpha0.35", "alpha0.55", "alpha0.75"],
    "r_fuzzy": ["alpha0.03", "alpha0.08", "alpha0.15", "alpha0.25"],
    "spec_casc_opt": ["alpha0.05", "alphaneg0.02", "alphaneg0.1", "alphaneg0.3"],
    "spec_casc_tok": ["alpha0.15", "alpha0.35", "alpha0.55", "alpha0.8"],
}
ARMS = [(m, p) for m, ps in METHODS.items() for p in ps]
WORDS = [" the", " a", " of", "2", " =", " So", " We", "<|return|>", " total", " \"x\"", "\\n", " é", "18", ".", "\n\n"]


def _trace_lines(rng: np.random.Generator, n_target: int, method: str, alpha: float) -> list[str]:
    """JSON lines of one run: rounds of accepted drafts then one recovered or bonus row, ~n_target rows."""
    # Acceptance per draft position; relaxed arms accept more, some of it lossy-only.
    n_rounds = max(1, n_target // 4)
    acc_len = np.minimum(rng.geometric(0.22, n_rounds) - 1, K)  # accepted drafts per round, 0..K
    lines: list[str] = []
    pos = 0
    n_judged = int((acc_len + (acc_len < K)).sum())
    p = np.round(rng.beta(0.6, 0.4, n_judged), 8)
    q = np.round(np.clip(p + rng.normal(0, 0.1, n_judged), 1e-6, 1), 8)
    u = np.round(rng.random(n_judged), 8)
    rank = np.where(p > 0.5, 0, rng.geometric(0.2, n_judged))
    lossy_only_draw = rng.random(n_judged) < (0.0 if method == "strict" else 0.15)
    tok = rng.integers(0, len(WORDS), n_judged)
    j = 0
    for r in range(n_rounds):
        a = int(acc_len[r])
        for i in range(a + (a < K)):
            accepted = i < a
            strict = bool(accepted and not lossy_only_draw[j])
            lo = bool(accepted and lossy_only_draw[j])
            w = WORDS[tok[j]]
            row = {
                "round": r, "batch": 0, "pos_in_round": i, "output_position": pos,
                "draft_token_id": int(tok[j]) + 100, "emitted_token_id": int(tok[j]) + 100,
                "draft_token_text": w, "emitted_token_text": w,
                "p": float(p[j]), "q": float(q[j]), "p_over_q": round(float(p[j] / q[j]), 6), "u": float(u[j]),
                "relaxation_param": alpha, "relaxation_method": method,
                "strict_would_accept": strict, "lossy_would_accept": accepted, "actually_accepted": accepted,
                "lossy_only_accepted": lo, "window_guard_active": None, "token_marker_guard_active": None,
                "emission_source": "accepted_draft" if accepted else "recovered",
                "target_rank": int(rank[j]), "target_top1_prob": round(float(max(p[j], 0.5)), 6),
                "target_top1_shortfall": round(float(max(0.5 - p[j], 0)), 6),
                "emitted_p": None if accepted else 0.71234567, "emitted_target_rank": None if accepted else 0,
                "emitted_top1_shortfall": None if accepted else 0.0, "trace_anomaly": None,
                "target_entropy": 0.34661, "draft_entropy": 0.20152, "kl_target_draft": 0.04197,
                "kl_draft_target": 0.02059, "tv_distance": 0.04114, "consecutive_accepted_length": i + 1,
            }
            lines.append(json.dumps(row, separators=(",", ":")))
            pos += 1
            j += 1
        if a == K:
            lines.append(json.dumps({
                "round": r, "batch": 0, "pos_in_round": K, "output_position": pos, "draft_token_id": None,
                "emitted_token_id": 25, "draft_token_text": None, "emitted_token_text": ":",
                "emission_source": "bonus", "consecutive_accepted_length": K,
                "relaxation_param": alpha, "relaxation_method": method}, separators=(",", ":")))
            pos += 1
    return lines


def generate(root: Path, size_mb: float, seed: int = 0) -> pl.DataFrame:
    """Write runs/<dataset>/<method>/<params>/case_NNN/seed_0/proposals.jsonl until size_mb; return the runs table."""
    rng = np.random.default_rng(seed)
    budget = size_mb * 1e6
    written, records, case = 0, [], 0
    while written < budget:
        case += 1
        for method, params in ARMS:
            if written >= budget:
                break
            folder = root / "runs" / "synthetic" / method / params / f"case_{case:04d}" / "seed_0"
            folder.mkdir(parents=True, exist_ok=True)
            alpha = 0.0 if params == "strict" else float(params.removeprefix("alpha").replace("neg", "-").split("_")[0])
            # Completion lengths like the study's: 60..2060 tokens.
            lines = _trace_lines(rng, int(rng.integers(60, 2060)), method, alpha)
            data = ("\n".join(lines) + "\n").encode()
            (folder / "proposals.jsonl").write_bytes(data)
            written += len(data)
            records.append({"target": "synthetic-target", "draft": "synthetic-draft", "dataset": "synthetic",
                                "method": method, "params": params, "alpha": None if params == "strict" else alpha,
                                "item_id": f"case_{case:04d}", "seed": 0, "status": "ok",
                                "output_tokens": len(lines), "source": str(folder)})
    runs = pl.DataFrame(records)
    runs.write_parquet(root / "runs.parquet")
    (root / "manifest.json").write_text(json.dumps({"size_mb": size_mb, "seed": seed, "bytes": written,
                                                    "files": len(records)}))
    return runs


def runs_from_layout(data_root: Path, dataset: str = "gsm8k") -> pl.DataFrame:
    """A runs table for the study's raw layout (folder names + config.json), standing in for the loader."""
    rows = []
    for rj in sorted((data_root / "runs" / dataset).glob("*/*/*/seed_*/run.json")):
        folder = rj.parent
        method, params, item = folder.parts[-4:-1]
        cfg, run = json.loads((folder / "config.json").read_text()), json.loads(rj.read_text())
        rows.append({"target": cfg["model"], "draft": cfg["draft_model"], "dataset": dataset, "method": method,
                         "params": params, "item_id": item, "seed": int(folder.name.removeprefix("seed_")),
                         "status": run["status"], "output_tokens": run.get("output_tokens"), "source": str(folder)})
    return pl.DataFrame(rows)


def _rss_mb() -> float:
    """Peak resident set size of this process, MB (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(runs_path: Path, engine: str, scan: str, repeat: int) -> dict:
    """Time extra_token_stats (or a per-file-scan variant) in this process; report MB/s, rows/s and peak RSS."""
    from lengthlens.analyses import extra_tokens as et

    runs = pl.read_parquet(runs_path)
    files = et.proposal_files(runs).filter("has_proposals")
    n_bytes = sum(os.path.getsize(p) for p in files[et.PATH_COL])
    rss0 = _rss_mb()
    times, stats = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        if scan == "multi":
            stats = et.extra_token_stats(runs, engine=engine)
        else:  # one scan per file, concatenated: the alternative the module does not use
            stats = et._compute(runs, None, False, engine, per_file=True)[0]
        times.append(time.perf_counter() - t0)
    best = min(times)
    n_rows = int(stats["n_rows"].sum())
    return {"engine": engine, "scan": scan, "files": files.height, "MB": n_bytes / 1e6, "rows": n_rows,
            "seconds_best": best, "seconds_all": [round(t, 3) for t in times],
            "MB_per_s": n_bytes / 1e6 / best, "rows_per_s": n_rows / best,
            "rss_after_imports_MB": rss0, "peak_rss_MB": _rss_mb()}


def _run_child(runs_path: Path, engine: str, scan: str, repeat: int) -> dict:
    """Measure in a fresh interpreter so that the peak RSS excludes generation and earlier runs."""
    out = subprocess.run([sys.executable, __file__, "--_measure", str(runs_path), "--engine", engine,
                          "--scan", scan, "--repeat", str(repeat)], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _print(label: str, r: dict) -> None:
    print(f"{label}: {r['files']} files, {r['MB']:.1f} MB, {r['rows']:,} rows; engine={r['engine']} scan={r['scan']}: "
          f"best {r['seconds_best']:.2f} s of {r['seconds_all']} -> {r['MB_per_s']:.0f} MB/s, "
          f"{r['rows_per_s']:,.0f} rows/s; peak RSS {r['peak_rss_MB']:.0f} MB "
          f"(after imports {r['rss_after_imports_MB']:.0f} MB)", flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=float, default=1000.0, help="synthetic set size (0: skip synthetic)")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/lengthlens_bench_extra_tokens"))
    ap.add_argument("--real", type=Path, default=None, help="also measure runs/gsm8k under this study root")
    ap.add_argument("--engine", default="streaming", choices=["streaming", "in-memory"])
    ap.add_argument("--scan", default="multi", choices=["multi", "per-file"])
    ap.add_argument("--compare", action="store_true", help="also measure the in-memory engine and per-file scans")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--_measure", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args._measure is not None:
        print(json.dumps(measure(args._measure, args.engine, args.scan, args.repeat)))
        return

    configs = [(args.engine, args.scan)]
    if args.compare:
        configs += [c for c in [("in-memory", "multi"), ("streaming", "per-file")] if c not in configs]
    print(f"polars {pl.__version__}, {os.cpu_count()} CPUs; files read warm from the page cache")
    if args.real is not None:
        runs_path = args.dir / "real_runs.parquet"
        args.dir.mkdir(parents=True, exist_ok=True)
        runs_from_layout(args.real).write_parquet(runs_path)
        for engine, scan in configs:
            _print("real gsm8k", _run_child(runs_path, engine, scan, args.repeat))
    if args.size_mb > 0:
        manifest = args.dir / "manifest.json"
        fresh = manifest.is_file() and json.loads(manifest.read_text()).get("size_mb") == args.size_mb
        if not fresh:
            if args.dir.exists() and (args.dir / "runs").exists():
                sys.exit(f"{args.dir} holds a synthetic set of another size; remove it or pass --dir")
            t0 = time.perf_counter()
            generate(args.dir, args.size_mb)
            print(f"generated {json.loads(manifest.read_text())} in {time.perf_counter() - t0:.0f} s")
        for engine, scan in configs:
            _print("synthetic", _run_child(args.dir / "runs.parquet", engine, scan, args.repeat))


if __name__ == "__main__":
    main()
