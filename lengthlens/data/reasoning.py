"""Thinking/answer split in tokens from the engines' logged ``reasoning_tokens``, where the texts are not kept."""

from __future__ import annotations

import polars as pl

from lengthlens.data.schema import ARM_KEY, UNIT_KEY
from lengthlens.data.serving import with_serving


def reasoning_split(runs) -> pl.DataFrame:
    """Per ok run with a logged ``reasoning_tokens``: thinking and answer tokens.

    The engines count the completion's reasoning-channel tokens with their reasoning parser (vLLM,
    SGLang: ``usage.completion_tokens_details.reasoning_tokens``; AIPerf: ``usage_reasoning_tokens``);
    the answer is the rest of the completion. Runs without the count are left out (the character
    split from the text is :mod:`lengthlens.data.channels`'s).

    Parameters
    ----------
    runs : a :class:`~lengthlens.data.runset.RunSet` (its table) or a polars DataFrame of run records.

    Returns
    -------
    polars.DataFrame with the arm and unit keys, ``output_tokens``, ``thinking_tokens`` and
    ``answer_tokens`` (= output - thinking; ``reasoning_tokens`` above ``output_tokens`` is an engine
    inconsistency and raises ValueError naming the run).

    Examples
    --------
    >>> t = pl.DataFrame({"target": ["t"], "draft": ["d"], "dataset": ["x"], "method": ["m"], "params": ["p"],
    ...                   "item_id": ["1"], "seed": [0], "turn": [None], "status": ["ok"], "output_tokens": [50],
    ...                   "reasoning_tokens": [35], "source": ["f:1"]})
    >>> reasoning_split(t)["answer_tokens"].to_list()
    [15]
    """
    t = with_serving(runs.table if hasattr(runs, "table") else runs)
    if "shared_baseline" in t.columns:  # a shared baseline's copies are the same runs
        t = t.filter(~pl.col("shared_baseline"))
    t = t.filter((pl.col("status") == "ok") & pl.col("reasoning_tokens").is_not_null() & pl.col("output_tokens").is_not_null())
    bad = t.filter(pl.col("reasoning_tokens") > pl.col("output_tokens"))
    if bad.height:
        r = bad.row(0, named=True)
        raise ValueError(f"{r.get('source')}: reasoning_tokens {r['reasoning_tokens']} > output_tokens {r['output_tokens']} "
                         f"({bad.height} run(s))")
    return t.select(*ARM_KEY, *UNIT_KEY, "output_tokens", pl.col("reasoning_tokens").alias("thinking_tokens"),
                    (pl.col("output_tokens") - pl.col("reasoning_tokens")).alias("answer_tokens"))
