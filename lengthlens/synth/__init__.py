"""Synthetic run logs with planted, known effects, in the study's raw layout or as a flat record table.

Used by the embedded example (``lengthlens report --example``), by tests that need known truth,
and by paper-scale benchmarks. Nothing here is real data: every config.json says so in its
``synthetic`` field.

Generative model (per target-draft pair, dataset and arm; all draws from numpy ``Generator``\\ s
seeded by ``SeedSequence`` keyed on names, so the same spec and seed give the same bytes):

* item i has a log-length mean ``mu_i = m + tau * z_i`` (z_i standard normal, shared by all arms
  and pairs: the same prompts), with ``m = log(mean_len) - log_sd**2 / 2``,
  ``tau**2 = item_share * log_sd**2``, ``sigma**2 = (1 - item_share) * log_sd**2``;
* each run draws its uncensored length ``L = lambda_ * exp(mu_i + sigma * eps)`` independently
  per arm (strict has ``lambda_ = 1``), so the population ratio of mean lengths is exactly
  ``lambda_``; ``L`` is rounded to whole tokens (at least 4);
* a run with ``L >= budget`` is censored: ``output_tokens = budget``, ``finish_reason = "length"``,
  all of it thinking, no answer (graded as ``no_answer``, i.e. incorrect);
* an uncensored run puts ``F = round(L * phi)`` tokens in its answer and the rest in its thinking,
  with ``phi = final_frac`` for strict and ``(final_frac + (1 - think_share) * (lambda_ - 1)) /
  lambda_`` for a relaxed arm, so a ``think_share`` of the extra length lands in thinking;
* rounds ``R = round(L_obs / (l_bar + 1) * w)`` with ``w = 1 + rounds_sd * sqrt(3) * U(-1, 1)``
  (mean 1, bounded, so ``sum(L) / sum(R) -> l_bar + 1`` exactly and no clipping is needed);
  ``accepted = L_obs - R`` (accepted + rounds = output_tokens exactly), ``draft_tokens = k * R``;
* ``wall_time = R * time_per_round * exp(time_sd * N - time_sd**2 / 2)``;
* an answered run is correct when ``rho * a_i + sqrt(1 - rho**2) * N < Phi^-1(accuracy)`` (a_i an
  item difficulty shared by all arms), so P(correct | answered) is exactly the planted accuracy
  and correctness is paired across arms through the items.

Force-commit arms (the study's Table 4 intervention) rerun a relaxed base arm on the same items
and seeds: where the base run's thinking reached ``threshold`` tokens (censored runs always did),
the intervention run closes its thinking at the threshold and answers (correct with probability
``accuracy_after``); elsewhere it is the base run, byte for byte. Their run.json carries
``force_commit_fired`` (the record's field of that name).

Layout written by :func:`write_raw`: one tree per target-draft pair, because the study's folders
do not name the pair::

    <root>/<pair_slug>/runs/<dataset>/<method>/<params>/case_NNN/seed_K/{run.json, config.json, output.txt[, proposals.jsonl]}
    <root>/<pair_slug>/campaign/grades/<dataset>.json      (graded datasets)
    <root>/<pair_slug>/.lengthlens-synth                     (marker: a rewrite may replace the tree)

Counting conventions follow the study's logs: ``analysis_chars`` of harmony text is everything
before the final header, markup included (``final_chars`` the final message); for ``<think>`` text
they are the thinking and answer content lengths. proposals.jsonl has one row per emitted token
(accepted drafts, then a recovered or bonus token per round), as the study logs it.

``lengthlens.load(root)`` reads all pairs (the pair comes from config.json); :func:`raw_roots`
lists the per-pair ``runs`` folders for readers that want them one by one.
"""

from __future__ import annotations

from lengthlens.synth.flat import simulate, write_flat
from lengthlens.synth.raw import raw_roots, write_raw
from lengthlens.synth.spec import (
    ENGINE_VERSION,
    FIXED_TIMESTAMP,
    METHODS,
    MIN_LEN,
    SYNTH_MARKER,
    Arm,
    CellEffect,
    Dataset,
    Effect,
    ForceCommit,
    Kind,
    Pair,
    Style,
    SynthSpec,
    alpha_params,
    example,
    paper_scale,
)
from lengthlens.synth.truth import truth

__all__ = ['Arm', 'CellEffect', 'Dataset', 'ENGINE_VERSION', 'Effect', 'FIXED_TIMESTAMP', 'ForceCommit', 'Kind', 'METHODS', 'MIN_LEN', 'Pair', 'SYNTH_MARKER', 'Style', 'SynthSpec', 'alpha_params', 'example', 'paper_scale', 'simulate', 'write_flat', 'raw_roots', 'write_raw', 'truth']
