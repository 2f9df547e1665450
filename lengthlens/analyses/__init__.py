"""Stage 3, analyses: Table 3 and the arms table, censoring, attribution, Table 4 and compare, extra tokens.

``analyse`` (in :mod:`lengthlens.analyses.analyse`) runs them all; modules here import from ``data`` and ``stats``.
"""
