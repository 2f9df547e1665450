"""The vectorised screen of flat tables: the rows that certainly pass :class:`~lengthlens.data.schema.RunRecord`, in bulk.

Derived from the record model (field types and constraints), the plausibility rules' own polars
expressions and the params rule's own function, so that the bulk path and the record-by-record
path agree by construction (tests/core/test_screen.py checks it on random tables).
"""

from __future__ import annotations

import polars as pl

from lengthlens.data.validation.plausibility import violated
from lengthlens.data.schema import (
    AUTOREGRESSIVE_METHODS,
    POLARS_SCHEMA,
    REQUIRED_FIELDS,
    STRICT,
    RunRecord,
    check_params,
)


def _bounds(field: str) -> list[pl.Expr]:
    """Violations of the field's pydantic constraints (Ge, Gt, Le, MinLen), as polars expressions."""
    col = pl.col(field)
    out = []
    for m in RunRecord.model_fields[field].metadata:
        name = type(m).__name__
        if name == "MinLen":
            out.append(col.str.len_chars() < m.min_length)
        elif name in ("Ge", "Gt", "Le"):
            bound = getattr(m, name.lower())
            bad = {"Ge": col < bound, "Gt": col <= bound, "Le": col > bound}[name]
            if POLARS_SCHEMA[field] == pl.Float64:
                bad = bad | col.is_nan()  # NaN satisfies no bound (polars would order it above all numbers)
            out.append(bad)
        elif name == "AllowInfNan" and not m.allow_inf_nan:
            out.append(~col.is_finite())
    return out


def _cast(df: pl.DataFrame) -> tuple[pl.DataFrame, pl.Series]:
    """``df`` cast to :data:`POLARS_SCHEMA`, and a mask of the rows whose values are not all of their field's native type."""
    n = df.height
    needs = pl.Series("needs_model", [False] * n, dtype=pl.Boolean)
    cols: dict[str, pl.Series] = {}
    for field, target in POLARS_SCHEMA.items():
        if field not in df.columns:
            cols[field] = pl.Series(field, [None] * n, dtype=target)
            continue
        s = df.get_column(field)
        d = s.dtype
        present = s.is_not_null()
        if d == pl.Null:
            cast = pl.Series(field, [None] * n, dtype=target)
        elif target == pl.String and (d == pl.String or (field == "item_id" and d.is_integer())):
            cast = s.cast(pl.String)
        elif target == pl.Int64 and d.is_integer():
            cast = s.cast(pl.Int64, strict=False)  # beyond int64 (an i128 or u64 column): null, so the model decides
            needs = needs | (present & cast.is_null())
        elif target == pl.Int64 and d.is_float():
            whole = s.is_finite() & (s == s.floor()) & (s.abs() < 2**53)
            needs = needs | (present & ~whole.fill_null(False))
            cast = pl.select(pl.when(whole.fill_null(False)).then(s).otherwise(None).cast(pl.Int64)).to_series()
        elif target == pl.Float64 and (d.is_float() or d.is_integer()):
            cast = s.cast(pl.Float64)
        elif target == pl.Boolean and d == pl.Boolean:
            cast = s
        else:
            needs = needs | present
            cast = pl.Series(field, [None] * n, dtype=target)
        cols[field] = cast.alias(field)
    return pl.DataFrame(cols, schema=POLARS_SCHEMA), needs


def _params_alphas(table: pl.DataFrame) -> pl.DataFrame:
    """:func:`check_params` on each distinct (params, alpha) of a table: the alpha it gives, or a failure flag."""
    pairs = table.select("params", pl.col("alpha").fill_nan(None)).unique().filter(pl.col("params").is_not_null())
    out = []
    for params, alpha in pairs.iter_rows():
        try:
            out.append((params, alpha, check_params(params, alpha), False))
        except ValueError:
            out.append((params, alpha, None, True))
    return pl.DataFrame(out, schema={"params": pl.String, "alpha": pl.Float64, "_alpha": pl.Float64, "_bad_params": pl.Boolean},
                        orient="row")


def screen_frame(df: pl.DataFrame) -> tuple[pl.DataFrame, pl.Series]:
    """Vectorised validation of a flat table: the rows that certainly pass RunRecord, and a mask of the rest.

    Returns ``(table, needs_model)``: ``table`` is ``df`` cast to :data:`POLARS_SCHEMA`, valid on
    every row where ``needs_model`` is False. A row is screened only when each value already has
    its field's native type (or an integral float for an integer field) and meets the field's
    constraints and the record's rules; anything else (strings to convert, violations) goes to
    :class:`RunRecord` row by row, which decides and names the field. The screen is derived from
    the model's own field types and constraints, the plausibility rules' own expressions and the
    params rule's own function (:func:`check_params`, run on each distinct params and alpha), so
    the two cannot drift apart silently (a property test checks that every screened row validates
    to the same values).
    """
    table, needs = _cast(df)
    checked = _params_alphas(table)
    table = (table.with_row_index("_r").with_columns(pl.col("alpha").fill_nan(None).alias("_key"))
             .join(checked.rename({"alpha": "_key"}), on=["params", "_key"], how="left", nulls_equal=True).sort("_r"))
    rules = [pl.col(f).is_null() for f in REQUIRED_FIELDS]
    for f in POLARS_SCHEMA:
        rules += _bounds(f)
    rules.append((pl.col("method") == STRICT) != (pl.col("params") == STRICT))
    rules.append(pl.col("method").is_in(list(AUTOREGRESSIVE_METHODS)))  # renamed by the model
    rules.append((pl.col("draft") == "") & (pl.col("method") != STRICT))
    rules.append(pl.col("_bad_params"))
    bad = table.select(violated(pl.any_horizontal([r.fill_null(False) for r in rules])).alias("v")).get_column("v")
    table = table.with_columns(pl.when(pl.col("_bad_params").fill_null(True)).then(pl.col("alpha"))
                               .otherwise(pl.col("_alpha")).alias("alpha")).select(POLARS_SCHEMA.names())
    return table, (needs | bad).alias("needs_model")
