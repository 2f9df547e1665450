"""The normalized per-run record: one definition for the reader, the flat-file loader and the JSON Schema.

Every input format (the study's raw folder layout, flat JSONL/CSV/Parquet tables from other
generators) is turned into rows of exactly this record before anything else happens. The JSON
Schema in ``data_schema/run_record.v1.schema.json`` is generated from :class:`RunRecord`
(``python -m lengthlens.data.schema > data_schema/run_record.v1.schema.json``) and a test keeps the two
in sync.
"""

from __future__ import annotations

import json
import math
from typing import Any

import polars as pl
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from lengthlens.data.validation.plausibility import LENGTH_FINISH_REASONS, violations

SCHEMA_VERSION = "1"

#: The value of ``params`` (and ``method``) that marks the lossless baseline arm.
STRICT = "strict"

#: Method names of a plain autoregressive baseline (no draft). Records with one of these methods are
#: normalized to the baseline arm (``method == params == "strict"``) with an empty draft; an empty-draft
#: baseline serves every draft of its target and dataset (see ``validate.share_draftless_baselines``).
AUTOREGRESSIVE_METHODS = frozenset({"autoregressive", "vanilla"})

#: Longest plausible wall time of one request, seconds (11.6 days); beyond it the clock, not the run, is wrong.
MAX_WALL_TIME_S = 1e6
#: Relative tolerance between an alpha logged in a record (or config.json) and the one its params name says.
ALPHA_REL_TOL = 1e-9
_INT64 = 2**63


def _integral(v: Any, field: str) -> Any:
    """Counters are logged as floats by vLLM's metrics (``56.0``); accept them only when integral, never a boolean."""
    if isinstance(v, bool):
        raise ValueError(f"is a boolean ({str(v).lower()}), not a number")
    if isinstance(v, float):
        if not math.isfinite(v) or v != int(v):
            raise ValueError(f"must be a whole number, got {v!r}")
        v = int(v)
    if isinstance(v, int) and not -_INT64 <= v < _INT64:
        raise ValueError(f"{v} is beyond the range of a 64-bit integer")
    return v


def _no_bool(v: Any) -> Any:
    if isinstance(v, bool):
        raise ValueError(f"is a boolean ({str(v).lower()}), not a number")
    return v


class RunRecord(BaseModel):
    """One generation run of one item under one arm, normalized.

    An *arm* is (target, draft, dataset, method, params). ``method == params == "strict"`` is the
    lossless baseline of the same (target, draft, dataset); with an empty draft (method
    ``autoregressive`` or ``vanilla`` on input) it serves every draft of its target and dataset.
    Only the identity fields and ``status`` are required: each metric is computed where its inputs
    are logged (``stats.metrics.METRIC_INPUTS``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=False)

    # --- identity -------------------------------------------------------------------------
    target: str = Field(min_length=1, description="Target (verifier) model name, e.g. config.json `model`.")
    draft: str = Field(
        description="Draft model name, e.g. config.json `draft_model`; empty only for a baseline without a draft "
        "(plain autoregressive decoding), which then serves every draft of its target and dataset."
    )
    dataset: str = Field(min_length=1, description="Dataset name (the folder under the runs root).")
    method: str = Field(
        min_length=1,
        description="Verification rule: `strict` for the lossless baseline, else the relaxed rule "
        "(`mentored_dec`, `cactus`, `spec_casc_opt`, `spec_casc_tok`, `r_fuzzy`, or any other name).",
    )
    params: str = Field(
        min_length=1,
        description="Parameter folder name: `strict`, `alpha0.35`, `alphaneg0.3`, with optional "
        "suffixes such as `_k8` or `_t28000`.",
    )
    alpha: float | None = Field(
        default=None, allow_inf_nan=False,
        description="Relaxation parameter: the number in params (`alpha0.35` -> 0.35; a logged alpha must agree "
        "with it), else as logged for other params names; null for strict."
    )
    item_id: str = Field(min_length=1, description="Item (prompt) identifier, e.g. `case_001`.")
    seed: int = Field(ge=0, description="Sampling seed of the run.")
    turn: int | None = Field(
        default=None, ge=1, description="Turn of a multi-turn conversation (1, 2, ...); null for single-turn items. "
        "The conversation (item) is the resampling unit; lengths are summed over its turns, budgets and "
        "censoring apply per turn.",
    )

    # --- outcome --------------------------------------------------------------------------
    status: str = Field(min_length=1, description="`ok` for a finished run; anything else is skipped.")
    output_tokens: int | None = Field(default=None, ge=0, description="Completion length in tokens.")
    finish_reason: str | None = Field(
        default=None, description="`stop` (EOS) or `length` (hit the token budget), as the engine reported."
    )
    max_new_tokens: int | None = Field(default=None, gt=0, description="Token budget of the run.")
    draft_rounds: int | None = Field(default=None, ge=0, description="Verifier rounds (target forward passes).")
    accepted_tokens: int | None = Field(
        default=None, ge=0, description="Draft tokens accepted over the run (bonus tokens excluded)."
    )
    draft_tokens: int | None = Field(default=None, ge=0, description="Draft tokens proposed over the run.")
    wall_time_s: float | None = Field(default=None, ge=0, le=MAX_WALL_TIME_S, allow_inf_nan=False,
                                      description="Wall-clock time of the request, seconds.")

    # --- optional -------------------------------------------------------------------------
    correct: bool | None = Field(default=None, description="Graded correctness, when known.")
    temperature: float | None = Field(default=None, ge=0, allow_inf_nan=False, description="Sampling temperature.")
    top_p: float | None = Field(default=None, gt=0, le=1, allow_inf_nan=False, description="Nucleus sampling threshold.")
    input_tokens: int | None = Field(default=None, ge=0, description="Prompt length in tokens.")
    l_bar_logged: float | None = Field(
        default=None, ge=0, allow_inf_nan=False, description="Per-run l_bar as the generator logged it (checked, never trusted)."
    )
    analysis_chars: int | None = Field(
        default=None, ge=0, description="Thinking-channel characters as the generator logged them."
    )
    final_chars: int | None = Field(
        default=None, ge=0, description="Answer-channel characters as the generator logged them."
    )
    reached_final_channel: bool | None = Field(
        default=None, description="Whether the run opened its answer channel (generator's own flag)."
    )
    reference_answer: str | None = Field(default=None, description="Reference answer of the item, if any.")
    prompt_source_id: str | None = Field(default=None, description="Source id of the prompt (dataset:split:index).")
    backend: str | None = Field(default=None, description="Generation backend (`vllm`, `reference`, ...).")
    engine_version: str | None = Field(default=None, description="Engine version, e.g. the vLLM version.")
    force_commit_fired: bool | None = Field(
        default=None, description="Intervention runs only: whether forcing the thinking closed actually fired."
    )
    # --- logged by engines and benchmarks (the readers of lengthlens.data.readers fill them) --
    reasoning_tokens: int | None = Field(
        default=None, ge=0, description="Completion tokens in the thinking (reasoning) channel, as the engine counted "
        "them (vLLM/SGLang `usage.completion_tokens_details.reasoning_tokens`); the thinking/answer split in tokens "
        "where the text is not kept.",
    )
    category: str | None = Field(
        default=None, description="A finer grouping within the dataset, e.g. Spec-Bench's question category "
        "(`writing`, `translation`, ...) of a task.",
    )
    concurrency: int | None = Field(
        default=None, ge=1, description="Serving condition: requests in flight at once (the client's max concurrency).",
    )
    request_rate: float | None = Field(
        default=None, ge=0, description="Serving condition: requests sent per second (`inf`: all at once).",
    )
    batch_size: int | None = Field(
        default=None, ge=1, description="Serving condition: the engine's batch bound (vLLM `max_num_seqs`; 1 for a "
        "generator that runs one sequence at a time).",
    )
    gpu: str | None = Field(default=None, description="Serving condition: the accelerator's name, e.g. `NVIDIA H200`.")
    text: str | None = Field(default=None, description="The raw completion text (output.txt).")
    source: str | None = Field(default=None, description="Where the record came from (run folder, or file:line).")

    @field_validator("draft_rounds", "accepted_tokens", "draft_tokens", "output_tokens", "max_new_tokens",
                     "input_tokens", "analysis_chars", "final_chars", "reasoning_tokens", "concurrency", "batch_size",
                     "turn", "seed", mode="before")
    @classmethod
    def _whole(cls, v: Any, info: Any) -> Any:
        return _integral(v, info.field_name)

    @field_validator("draft_rounds", "accepted_tokens", "draft_tokens", "output_tokens", "max_new_tokens",
                     "input_tokens", "analysis_chars", "final_chars", "reasoning_tokens", "concurrency", "batch_size",
                     "turn", "seed", mode="after")
    @classmethod
    def _int64(cls, v: Any, info: Any) -> Any:
        # Text ("123...") is converted by pydantic after the check above; the range holds for it too.
        return _integral(v, info.field_name)

    @field_validator("temperature", "top_p", "l_bar_logged", mode="before")
    @classmethod
    def _number(cls, v: Any) -> Any:
        return _no_bool(v)

    @field_validator("alpha", mode="before")
    @classmethod
    def _alpha(cls, v: Any, info: Any) -> Any:
        # The baseline has no alpha: a NaN there (pandas' missing value) is a missing value.
        if isinstance(v, float) and math.isnan(v) and info.data.get("params") == STRICT:
            return None
        return _no_bool(v)

    @field_validator("wall_time_s", mode="before")
    @classmethod
    def _nan_time(cls, v: Any, info: Any) -> Any:
        # Failed runs often log NaN time (Spec-Bench's ERROR turns): no time, not a bad one.
        if isinstance(v, float) and math.isnan(v):
            if info.data.get("status") != "ok":
                return None
            raise ValueError("is NaN (not a number): give the time in seconds, or leave the field out")
        return _no_bool(v)

    @field_validator("item_id", mode="before")
    @classmethod
    def _item_str(cls, v: Any) -> Any:
        # Flat files often store numeric ids; ids are labels, not numbers.
        return str(v) if isinstance(v, int) and not isinstance(v, bool) else v

    @model_validator(mode="before")
    @classmethod
    def _autoregressive_is_baseline(cls, data: Any) -> Any:
        # `autoregressive` / `vanilla` (no draft) is the baseline arm under its usual name.
        if isinstance(data, dict) and data.get("method") in AUTOREGRESSIVE_METHODS:
            data = {**data, "method": STRICT, "params": STRICT, "draft": data.get("draft") or ""}
        if isinstance(data, dict) and data.get("method") == STRICT and data.get("draft") is None:
            data = {**data, "draft": ""}  # an empty CSV cell reads as null: a baseline without a draft
        return data

    @model_validator(mode="after")
    def _identity_rules(self) -> "RunRecord":
        if (self.method == STRICT) != (self.params == STRICT):
            raise ValueError(f"method {self.method!r} with params {self.params!r}: `strict` must be both or neither")
        if not self.draft and self.method != STRICT:
            raise ValueError(f"draft is empty but method is {self.method!r}: only a baseline "
                             "(`strict`, `autoregressive`, `vanilla`) may have no draft")
        try:
            alpha = check_params(self.params, self.alpha)
        except ValueError as exc:
            raise PydanticCustomError("implausible", "{reasons}", {"reasons": [("params", str(exc))]}) from None
        bad = violations(self.__dict__)
        if bad:
            raise PydanticCustomError("implausible", "{reasons}", {"reasons": bad})
        return self if alpha == self.alpha else self.model_copy(update={"alpha": alpha})


#: Column order and dtypes of the normalized table, derived from the record (one place).
_PL_TYPES: dict[str, pl.DataType] = {
    "target": pl.String, "draft": pl.String, "dataset": pl.String, "method": pl.String,
    "params": pl.String, "alpha": pl.Float64, "item_id": pl.String, "seed": pl.Int64, "turn": pl.Int64,
    "status": pl.String, "output_tokens": pl.Int64, "finish_reason": pl.String,
    "max_new_tokens": pl.Int64, "draft_rounds": pl.Int64, "accepted_tokens": pl.Int64,
    "draft_tokens": pl.Int64, "wall_time_s": pl.Float64, "correct": pl.Boolean,
    "temperature": pl.Float64, "top_p": pl.Float64, "input_tokens": pl.Int64,
    "l_bar_logged": pl.Float64, "analysis_chars": pl.Int64, "final_chars": pl.Int64,
    "reached_final_channel": pl.Boolean, "reference_answer": pl.String,
    "prompt_source_id": pl.String, "backend": pl.String, "engine_version": pl.String,
    "force_commit_fired": pl.Boolean,
    "reasoning_tokens": pl.Int64, "category": pl.String, "concurrency": pl.Int64, "request_rate": pl.Float64,
    "batch_size": pl.Int64, "gpu": pl.String,
    "text": pl.String, "source": pl.String,
}
assert list(_PL_TYPES) == list(RunRecord.model_fields), "polars schema out of sync with RunRecord"
POLARS_SCHEMA = pl.Schema(_PL_TYPES)

REQUIRED_FIELDS = tuple(n for n, f in RunRecord.model_fields.items() if f.is_required())
#: The logged fields that make a serving condition (the load a run was served under).
SERVING_FIELDS = ("concurrency", "request_rate", "batch_size", "gpu")
#: ``serving`` is derived from SERVING_FIELDS (:func:`lengthlens.data.serving.with_serving`): "c=8, gpu=H100", or
#: "" when none is logged. It is part of every arm and group, so that cells are formed, and relaxed arms
#: paired with their baseline, within one serving condition.
ARM_KEY = ("target", "draft", "dataset", "method", "params", "serving")
GROUP_KEY = ("target", "draft", "dataset", "serving")
#: A run's place within its arm. ``turn`` is null for single-turn items (joins treat nulls as equal).
UNIT_KEY = ("item_id", "seed", "turn")


class FieldError(BaseModel):
    """One problem with one field of one record, located in its file."""

    model_config = ConfigDict(frozen=True)
    file: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: field '{self.field}': {self.message}"


def validate_record(data: dict[str, Any], file: str, line: int | None = None) -> tuple[RunRecord | None, list[FieldError]]:
    """Validate one raw mapping; return the record or every field error with its location."""
    try:
        return RunRecord.model_validate(data), []
    except ValidationError as exc:
        errors = []
        for e in exc.errors():
            if e["type"] == "implausible":  # plausibility rules and the params rule name their own fields
                errors += [FieldError(file=file, line=line, field=f, message=m) for f, m in e["ctx"]["reasons"]]
                continue
            field = ".".join(str(p) for p in e["loc"]) or "(record)"
            msg = e["msg"]
            if e["type"] == "extra_forbidden":
                msg = "unknown field (not in the run record schema v" + SCHEMA_VERSION + ")"
            errors.append(FieldError(file=file, line=line, field=field, message=msg))
        return None, errors


def json_schema() -> dict[str, Any]:
    """The versioned JSON Schema of the normalized record (the file in data_schema/)."""
    schema = RunRecord.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"https://lengthlens.dev/schema/run_record.v{SCHEMA_VERSION}.schema.json"
    schema["title"] = f"lengthlens normalized run record, version {SCHEMA_VERSION}"
    schema["x-schema-version"] = SCHEMA_VERSION
    return schema


def parse_alpha(params: str) -> float | None:
    """Alpha from a params folder name: ``alpha0.35`` -> 0.35, ``alphaneg0.3_k8`` -> -0.3, ``strict`` -> None.

    Raises ValueError for a name that is neither ``strict`` nor starts with ``alpha<number>``.
    """
    if params == STRICT:
        return None
    head = params.split("_", 1)[0]
    if not head.startswith("alpha"):
        raise ValueError(f"params {params!r}: expected 'strict' or 'alpha<number>[_suffix]'")
    num = head[len("alpha"):]
    sign = 1.0
    if num.startswith("neg"):
        sign, num = -1.0, num[3:]
    elif num.startswith("-"):
        sign, num = -1.0, num[1:]
    try:
        value = float(num)
    except ValueError:
        raise ValueError(f"params {params!r}: cannot read a number after 'alpha'") from None
    if not math.isfinite(value):
        raise ValueError(f"params {params!r}: alpha must be finite")
    return sign * value


def check_params(params: str, alpha: float | None) -> float | None:
    """The alpha of a run, from its params name and its logged alpha checked against each other: one rule for every reader.

    ``strict``: the alpha as logged (none). A name starting with ``alpha`` must give a finite number
    (:func:`parse_alpha`); a logged alpha must agree with it within :data:`ALPHA_REL_TOL`, and the
    name's number is the run's alpha (so an arm has one alpha). Any other name (Spec-Bench's
    ``float16``) is a label: the logged alpha, if any, is the alpha. Raises ValueError naming the
    contradiction.

    Examples
    --------
    >>> check_params("alpha0.3_k8", None), check_params("alphaneg0.3", -0.3), check_params("float16", None)
    (0.3, -0.3, None)
    """
    if params == STRICT or not params.startswith("alpha"):
        return alpha
    parsed = parse_alpha(params)
    if alpha is not None and not math.isclose(alpha, parsed, rel_tol=ALPHA_REL_TOL, abs_tol=1e-12):
        raise ValueError(f"alpha {alpha!r} contradicts params {params!r}, whose number is {parsed!r}")
    return parsed


def is_censored(output_tokens: int, max_new_tokens: int, finish_reason: str | None) -> bool:
    """A run is right-censored when it stopped at the token budget."""
    return (finish_reason in LENGTH_FINISH_REASONS) or output_tokens >= max_new_tokens


if __name__ == "__main__":  # pragma: no cover - regenerates the committed schema file
    print(json.dumps(json_schema(), indent=2))
