"""lengthlens: does a lossy speculative-decoding rule's longer acceptance length survive longer completions?

The library prints and writes nothing unless asked::

    import lengthlens as ll
    runs = ll.load("runs/")            # raw layout or flat JSONL/CSV/Parquet
    cells = ll.cells(runs)             # per-cell metrics with paired bootstrap intervals
    ll.table3(cells)                   # the study's Table 3 (pandas)
    ll.alpha_selected(cells.to_frame())  # the alpha Table 3 uses per rule and dataset
"""

from lengthlens._version import __version__  # noqa: E402
from lengthlens.analyses.analyse import Analysis, analyse  # noqa: E402
from lengthlens.analyses.attribution import attribution  # noqa: E402
from lengthlens.analyses.intervention import compare, table4  # noqa: E402
from lengthlens.analyses.tables import alpha_selected, arms, table3  # noqa: E402
from lengthlens.data.loading import LoadError, RunSet, load  # noqa: E402
from lengthlens.stats.estimate import cells  # noqa: E402
from lengthlens.stats.results import Cell, CellTable, ConfidenceInterval, Estimate  # noqa: E402

__all__ = ["load", "cells", "arms", "table3", "alpha_selected", "table4", "compare", "attribution", "analyse", "Analysis", "RunSet",
           "LoadError", "Cell", "CellTable", "ConfidenceInterval", "Estimate", "__version__"]
