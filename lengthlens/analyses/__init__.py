"""Stage 3, analyses: the engine and the analyses on it (cells, censoring, attribution, compare), Table 3, Table 4.

``analyse`` (in :mod:`lengthlens.analyses.analyse`) runs them all; modules here import from ``data`` and ``stats``.
"""
