"""Thinking/answer split: hand-made edge cases per format, and agreement with the study's logged counts."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pandas as pd
import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lengthlens.data.channels import (
    check_logged_counts,
    detect_format,
    logged_convention,
    split_channels,
    split_channels_many,
)

A = "<|channel|>analysis<|message|>"
F = "<|end|><|start|>assistant<|channel|>final<|message|>"


# --- harmony ------------------------------------------------------------------------------------

def test_harmony_plain_run_counts_content_only():
    s = split_channels(f"{A}Think 2+2.{F}#### 4")
    assert (s.format, s.thinking, s.answer) == ("harmony", "Think 2+2.", "#### 4")
    assert (s.thinking_chars, s.answer_chars, s.thinking_closed, s.reached_answer) == (10, 6, True, True)


def test_harmony_keeps_whitespace_exactly():
    # The generator counts whitespace; message content is delimited by tokens, so nothing is stripped.
    s = split_channels(f"{A}\n x \n{F}\n\n42\n")
    assert (s.thinking_chars, s.answer_chars) == (5, 5)


def test_harmony_cut_inside_analysis_is_unclosed_thinking():
    s = split_channels(f"{A}Let me think about this for a very long")
    assert (s.answer, s.answer_chars, s.thinking_closed, s.reached_answer) == ("", 0, False, False)
    assert s.thinking_chars == len("Let me think about this for a very long")


def test_harmony_cut_inside_final_keeps_thinking_closed():
    s = split_channels(f"{A}ok{F}The answer is")
    assert (s.thinking_closed, s.answer) == (True, "The answer is")


def test_harmony_analysis_closed_but_no_final():
    # <|end|> closed the analysis, then the run stopped: thinking closed, no answer.
    s = split_channels(f"{A}done<|end|>")
    assert (s.thinking_closed, s.reached_answer, s.answer) == (True, False, "")


def test_harmony_reopened_channels_go_to_their_own_part():
    # Real pattern (gsm8k r_fuzzy alpha0.15 case_010): final, re-opened analysis without <|end|>, final.
    t = f"{A}compute{F}#### 470<|channel|>analysis<|message|>Wait, 460.{F}#### 460"
    s = split_channels(t)
    assert [m.channel for m in s.messages] == ["analysis", "final", "analysis", "final"]
    assert s.answer == "#### 470\n#### 460"  # joined by "\n", so the last marker is the model's final word
    assert (s.thinking_chars, s.answer_chars) == (len("compute") + len("Wait, 460."), 16)


def test_harmony_commentary_is_thinking_and_tool_call_closes_it():
    t = (f"{A}x<|end|><|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json"
         "<|message|>{\"a\": 1}<|call|>")
    s = split_channels(t)
    assert [m.channel for m in s.messages] == ["analysis", "commentary"]
    assert (s.thinking, s.thinking_closed, s.reached_answer) == ('x\n{"a": 1}', True, False)


def test_harmony_channel_named_after_the_role():
    # Real (longbench r_fuzzy alpha0.03 case_002): "<|start|>assistant commentary<|message|>" has no <|channel|>.
    s = split_channels(f"{A}a<|end|><|start|>assistant commentary<|message|>b{F}\\boxed{{C}}")
    assert [m.channel for m in s.messages] == ["analysis", "commentary", "final"]
    assert (s.thinking, s.answer) == ("a\nb", "\\boxed{C}")


def test_harmony_malformed_final_headers_still_count_as_final():
    # Real (longbench r_fuzzy alpha0.25 case_007): a header with no message, then "finalfinal".
    t = (f"{A}Choice.<|end|><|start|>assistant<|channel|>final choosing C<|end|>"
         "<|start|>assistant<|channel|>finalfinal<|message|>\\boxed{C}")
    s = split_channels(t)
    assert [(m.channel, m.content) for m in s.messages] == [("analysis", "Choice."), ("final", ""),
                                                            ("final", "\\boxed{C}")]
    assert (s.answer, s.answer_chars) == ("\\boxed{C}", 9)
    # Real (case_010): text between "final" and <|message|> is header, not content.
    s = split_channels(f"{A}a<|end|><|start|>assistant<|channel|>final**Answer**<|message|>Pick C")
    assert s.answer == "Pick C"


def test_harmony_return_token_and_role_prefix():
    s = split_channels("<|start|>assistant<|channel|>final<|message|>hi<|return|>")
    assert (s.thinking_chars, s.answer, s.thinking_closed) == (0, "hi", True)


def test_harmony_unknown_channel_and_leading_text_are_never_answer():
    # Only "final" is an answer: text before any header or in an unknown channel is thinking.
    s = split_channels("stray<|channel|>scratch<|message|>y<|end|>")
    assert (s.answer, s.thinking) == ("", "stray\ny")


def test_harmony_stripped_special_tokens_need_the_model_hint():
    # With skip_special_tokens the markers vanish: "analysis...assistantfinal..." (GPT-OSS only).
    s = split_channels("analysisWe add.assistantfinal42", model="openai/gpt-oss-20b")
    assert (s.format, s.thinking, s.answer) == ("harmony", "We add.", "42")
    assert split_channels("analysisWe add.assistantfinal42").format == "none"


def test_empty_text():
    s = split_channels("")
    assert (s.format, s.thinking_chars, s.answer_chars, s.reached_answer, s.thinking_closed) == (
        "none", 0, 0, False, True)


# --- think tags ------------------------------------------------------------------------------

@pytest.mark.parametrize("text, model, thinking, answer, closed", [
    # Qwen3 layout: the newlines around the tags are template layout, stripped.
    ("<think>\nplan\n</think>\n\nThe answer is 4.", None, "plan", "The answer is 4.", True),
    # Cut at the budget inside the block: all thinking.
    ("<think>\nstill going", None, "still going", "", False),
    # DeepSeek-R1 template puts <think> in the prompt: only the closing tag is in the completion.
    ("plan</think>\n\n42", None, "plan", "42", True),
    # ...and a cut R1 run has no tag at all: the model name says it is thinking.
    ("plan plan plan", "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "plan plan plan", "", False),
    # Text before <think> is shown to the reader: it is answer (decision documented in channels.py).
    ("Sure.<think>x</think>42", None, "x", "Sure.\n42", True),
    # Empty thinking (Qwen3 non-thinking mode).
    ("<think>\n\n</think>\n\nhi", "Qwen/Qwen3-8B", "", "hi", True),
    # A stray closing tag in the answer is markup.
    ("<think>a</think>b</think>c", None, "a", "b\nc", True),
    # Two blocks: both thinking.
    ("<think>a</think>b<think>c</think>d", None, "a\nc", "b\nd", True),
])
def test_think_tags(text, model, thinking, answer, closed):
    s = split_channels(text, model)
    assert (s.format, s.thinking, s.answer, s.thinking_closed) == ("think_tags", thinking, answer, closed)
    # No case has a newline inside a piece, so every "\n" left is a joining one (not counted).
    assert (s.thinking_chars, s.answer_chars) == (len(thinking.replace("\n", "")), len(answer.replace("\n", "")))


def test_none_format_is_all_answer():
    s = split_channels("The answer is 12.", model="meta-llama/Llama-3.1-8B-Instruct")
    assert (s.format, s.thinking_chars, s.answer_chars, s.thinking_closed) == ("none", 0, 17, True)
    # Qwen3 hybrid writes its own <think>, so a tag-free Qwen3 completion has no thinking.
    assert split_channels("just an answer", "Qwen/Qwen3-8B").format == "none"


def test_detect_format_prefers_markers_over_model():
    assert detect_format("<think>x</think>y", "gpt-oss-20b") == "think_tags"
    assert detect_format(f"{A}x", "Qwen3-8B") == "harmony"
    assert detect_format("plain", "QwQ-32B") == "think_tags"
    assert detect_format("plain", None) == "none"


@given(st.lists(st.tuples(st.sampled_from(["analysis", "commentary", "final"]),
                          st.text(alphabet=st.characters(blacklist_characters="<"), max_size=30)),
                min_size=1, max_size=6),
       st.booleans())
def test_harmony_roundtrip(parts, cut):
    """Any rendered message sequence splits back into exactly its contents (cut: last message unterminated)."""
    text = "".join(f"<|start|>assistant<|channel|>{ch}<|message|>{c}<|end|>" for ch, c in parts)
    if cut:
        text = text[: -len("<|end|>")]
    s = split_channels(text)
    assert [(m.channel, m.content) for m in s.messages] == parts
    assert s.thinking_chars == sum(len(c) for ch, c in parts if ch != "final")
    assert s.answer_chars == sum(len(c) for ch, c in parts if ch == "final")
    assert s.thinking_closed == (not cut or parts[-1][0] == "final")


# --- logged counts (hand-made) ------------------------------------------------------------------

def test_logged_convention_includes_markup_and_keeps_only_last_final():
    t = f"{A}abc{F}first<|channel|>analysis<|message|>more{F}last"
    s = split_channels(t)
    # Everything before the first "<|channel|>final", markup included: 30 + 3 + 25.
    assert logged_convention(s) == (58, 4, True)
    assert check_logged_counts(s, 58, 4, True) is None
    assert check_logged_counts(s, 3, 9) == (
        "logged analysis_chars=3 but the text has 58 raw chars before the first final header (markup "
        "included); logged final_chars=9 but the text has 4 content chars of the last final message")
    assert check_logged_counts(s, None, None) is None


def test_logged_counts_flag_whole_text_as_final():
    s = split_channels(f"{A}a<|end|><|start|>assistant<|channel|>final**A**<|message|>C")
    msg = check_logged_counts(s, s.messages[1].start, s.text_chars)
    assert msg is not None and "whole text's length" in msg


def test_logged_counts_for_think_tags_compare_content():
    s = split_channels("<think>ab</think>cde")
    assert check_logged_counts(s, 2, 3, True) is None
    assert check_logged_counts(s, 2, 3, False) == "logged reached_final_channel=False but the text has answer part"


def test_split_channels_many_accepts_lists_and_series():
    texts = [f"{A}ab{F}c", None, "<think>x</think>yz"]
    want = {"channel_format": ["harmony", None, "think_tags"], "thinking_chars": [2, None, 1],
            "answer_chars": [1, None, 2], "thinking_closed": [True, None, True],
            "reached_answer": [True, None, True], "answer": ["c", None, "yz"]}
    assert split_channels_many(texts).to_dict(as_series=False) == want
    assert split_channels_many(pl.Series(texts)).to_dict(as_series=False) == want
    assert split_channels_many(pd.Series(texts)).to_dict(as_series=False) == want
    assert split_channels_many(["plain"], ["QwQ-32B"])["thinking_chars"].to_list() == [5]
    with pytest.raises(ValueError, match="2 texts but 1 model"):
        split_channels_many(["a", "b"], ["m"])


# --- the study's real logs -----------------------------------------------------------------------

def _real_runs(root: Path):
    for sub in ("runs", "old_runs"):
        for rj in sorted((root / sub).glob("*/*/*/case_*/seed_*/run.json")):
            run = json.loads(rj.read_text())
            # newline="" keeps "\r": two outputs contain one and the logged counts include it.
            text = (rj.parent / "output.txt").open(encoding="utf-8", newline="").read()
            yield rj.parent.relative_to(root).as_posix(), run, text


@pytest.mark.shared
def test_split_agrees_with_logged_counts_on_all_real_runs(shared_data):
    """Every real run's logged analysis_chars / final_chars / reached_final_channel, against the text.

    How the generator counted (established here, encoded in ``logged_convention``): analysis_chars
    = raw chars before the first ``<|channel|>final``, markup included, whole text if none;
    final_chars = raw chars after the last ``<|channel|>final<|message|>``; nothing is stripped;
    no ``<|return|>`` appears (vLLM drops stop tokens). Classes of difference from our split:

    * markup: our counts exclude markers, so thinking_chars = analysis_chars - 55 on the 2,388
      analysis->final runs (8 of them cut inside the final) and - 30 on the 78 runs that never
      left their analysis (77 cut at the budget, 1 mtbench run that stopped inside it). Decided
      for ours: counts are of content.
    * more than two messages (29 runs: a final, then a re-opened analysis or commentary, then a
      final again; two finals in a row; two analyses before the final; an empty final header):
      the generator counts the text before the first final header and the last final message
      only; we count every message in its own part. Decided for ours: the interleaved text was
      generated and belongs to one part; graders still see the last final message last.
    * malformed final headers (2 runs, longbench r_fuzzy alpha0.25 case_007 "finalfinal", case_010
      "final**Answer**"): the generator found no exact ``<|channel|>final<|message|>`` and logged
      the whole text as final_chars. Decided for ours (answer ``\\boxed{C}``); these are the only
      two disagreements ``check_logged_counts`` reports.
    * carriage returns (2 runs: aime24 cactus alpha0.03 case_007, livecodebench mentored_dec
      alpha0.15 case_006): read with Python's default newline handling "\\r\\n" becomes "\\n" and
      the counts are off by one; read with newline="" they agree. Loaders must use newline="".
    """
    rows = list(_real_runs(shared_data))
    assert len(rows) == 2495
    flagged, offsets, structures = {}, Counter(), Counter()
    for where, run, text in rows:
        s = split_channels(text, "gpt-oss-20b")
        msg = check_logged_counts(s, run["analysis_chars"], run["final_chars"], run["reached_final_channel"])
        if msg:
            flagged[where] = msg
        chans = tuple(m.channel for m in s.messages)
        structures[chans] += 1
        if chans in (("analysis", "final"), ("analysis",)):
            offsets[run["analysis_chars"] - s.thinking_chars] += 1
            if chans == ("analysis", "final") and where not in flagged:
                assert run["final_chars"] == s.answer_chars
    assert sorted(flagged) == ["runs/longbench_v2/r_fuzzy/alpha0.25/case_007/seed_0",
                               "runs/longbench_v2/r_fuzzy/alpha0.25/case_010/seed_0"]
    assert all("whole text's length" in m for m in flagged.values())
    assert offsets == Counter({55: 2388, 30: 78})  # 2,387 plain + the malformed case_010
    assert structures[("analysis", "final")] == 2388 and structures[("analysis",)] == 78
    assert sum(v for k, v in structures.items() if len(k) > 2) == 29
    # The two "\r" runs disagree when read the default way.
    for where in ("runs/aime24/cactus/alpha0.03/case_007/seed_0",
                  "runs/livecodebench/mentored_dec/alpha0.15/case_006/seed_0"):
        d = shared_data / where
        run = json.loads((d / "run.json").read_text())
        lossy = split_channels((d / "output.txt").read_text(encoding="utf-8"))
        assert check_logged_counts(lossy, run["analysis_chars"], run["final_chars"]) is not None


def test_run_channels_audited_matches_a_plain_loop_on_mixed_runs():
    """Runs with text are split, runs without take their logged counts, runs with neither get nulls: the columns
    built from the logged counts must equal a row-by-row loop (the function's former body) on every kind of row."""
    from lengthlens.data.channel_counts import disagreement_cause, run_channels_audited

    harmony = f"{A}think it over{F}the answer"
    table = pl.DataFrame({
        "text": [None, harmony, None, "<think>abc</think>xyz", None, f"{A}whole{F}ans", None],
        "target": ["gpt-oss-20b", "gpt-oss-20b", "m", "qwen3", "m", "gpt-oss-20b", "m"],
        "analysis_chars": [10, None, None, 3, 7, 1, 4],
        "final_chars": [5, None, 2, 3, 0, 999, 6],
        "reached_final_channel": [True, None, None, True, None, True, False],
        "source": [f"run{i}" for i in range(7)],
    }, schema_overrides={"text": pl.String, "analysis_chars": pl.Int64, "final_chars": pl.Int64,
                         "reached_final_channel": pl.Boolean})
    out, disagreements, causes = run_channels_audited(table)

    expected = {k: [] for k in ("channel_format", "thinking_chars", "answer_chars", "thinking_closed", "chars_source")}
    want_msgs, want_causes = [], []
    for r in table.iter_rows(named=True):
        if isinstance(r["text"], str):
            s = split_channels(r["text"], r["target"])
            for k, v in zip(expected, (s.format, s.thinking_chars, s.answer_chars, s.thinking_closed, "text")):
                expected[k].append(v)
            msg = check_logged_counts(s, r["analysis_chars"], r["final_chars"], r["reached_final_channel"])
            if msg:
                want_msgs.append(f"{r['source']}: {msg}")
                want_causes.append((r["target"], disagreement_cause(s, r["analysis_chars"], r["final_chars"], msg),
                                    r["source"]))
        elif r["analysis_chars"] is not None and r["final_chars"] is not None:
            for k, v in zip(expected, (None, r["analysis_chars"], r["final_chars"], r["reached_final_channel"], "logged")):
                expected[k].append(v)
        else:
            for k in expected:
                expected[k].append(None)
    assert {k: out[k].to_list() for k in expected} == expected
    assert expected["chars_source"] == ["logged", "text", None, "text", "logged", "text", "logged"]
    assert expected["thinking_chars"][0] == 10 and expected["thinking_closed"][6] is False
    assert out.schema["thinking_chars"] == pl.Int64 and out.schema["thinking_closed"] == pl.Boolean
    assert disagreements == want_msgs and causes == want_causes and len(disagreements) == 1  # run5: whole text as final
    assert out.columns[:6] == table.columns
