"""lengthlens: does a lossy speculative-decoding rule's longer acceptance length survive longer completions?

The library prints and writes nothing unless asked::

    import lengthlens as ll
    runs = ll.load("runs/")            # raw layout or flat JSONL/CSV/Parquet
    cells = ll.cells(runs)             # per-cell metrics with paired bootstrap intervals
    ll.table3(cells)                   # the study's Table 3 (pandas)
    ll.alpha_selected(cells.to_frame())  # the alpha Table 3 uses per rule and dataset
"""

from typing import TYPE_CHECKING

from lengthlens._version import __version__

# Names are imported on first use (PEP 562), so that ``import lengthlens`` and ``lengthlens --help``
# do not pay for numpy, polars, pandas, scipy, pydantic, matplotlib or Typst before they are needed.
_LAZY = {
    "load": "lengthlens.data.loading", "record": "lengthlens.data.readers.record", "RunSet": "lengthlens.data.loading", "LoadError": "lengthlens.data.loading",
    "cells": "lengthlens.analyses.cells", "Cell": "lengthlens.analyses.cells", "CellTable": "lengthlens.analyses.cells",
    "ConfidenceInterval": "lengthlens.results", "Estimate": "lengthlens.results", "TestResult": "lengthlens.results",
    "AccuracyChange": "lengthlens.results",
    "arms": "lengthlens.analyses.tables", "table3": "lengthlens.analyses.tables", "alpha_selected": "lengthlens.analyses.tables",
    "table3_by_pair": "lengthlens.analyses.tables", "verdicts": "lengthlens.analyses.verdicts",
    "Verdicts": "lengthlens.analyses.verdicts", "table4": "lengthlens.analyses.intervention", "compare": "lengthlens.analyses.compare",
    "Comparison": "lengthlens.analyses.compare", "method_pairs": "lengthlens.analyses.compare",
    "attribution": "lengthlens.analyses.analyse", "censoring_table": "lengthlens.analyses.analyse",
    "analyse": "lengthlens.analyses.analyse", "AnalysisResult": "lengthlens.analyses.analyse",
    "serving_table": "lengthlens.analyses.serving", "rules": "lengthlens.analyses.rules", "plan": "lengthlens.analyses.plan",
    "RuleTable": "lengthlens.analyses.rules",
}

if TYPE_CHECKING:  # what the names are, for type checkers and readers
    from lengthlens.analyses.analyse import AnalysisResult, analyse, attribution, censoring_table
    from lengthlens.analyses.cells import Cell, CellTable, cells
    from lengthlens.analyses.compare import Comparison, compare, method_pairs
    from lengthlens.analyses.intervention import table4
    from lengthlens.analyses.plan import plan
    from lengthlens.analyses.rules import RuleTable, rules
    from lengthlens.analyses.serving import serving_table
    from lengthlens.analyses.tables import alpha_selected, arms, table3, table3_by_pair
    from lengthlens.analyses.verdicts import Verdicts, verdicts
    from lengthlens.data.loading import LoadError, RunSet, load
    from lengthlens.data.readers.record import record
    from lengthlens.results import AccuracyChange, ConfidenceInterval, Estimate, TestResult


def __getattr__(name: str):
    if name == "Analysis":  # the old name of AnalysisResult, kept for one release
        import warnings

        warnings.warn("lengthlens.Analysis is now lengthlens.AnalysisResult (what analyse() returns); the old name goes "
                      "in the next release", DeprecationWarning, stacklevel=2)
        name = "AnalysisResult"
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'lengthlens' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["load", "record", "cells", "arms", "table3", "table3_by_pair", "verdicts", "Verdicts", "rules", "RuleTable", "plan", "alpha_selected", "table4", "compare", "method_pairs", "attribution",
           "censoring_table", "serving_table", "analyse", "AnalysisResult", "RunSet", "LoadError", "Cell", "CellTable", "Comparison",
           "ConfidenceInterval", "Estimate", "TestResult", "AccuracyChange", "__version__"]
