"""Stage 2, statistics: item-level resampling, metric definitions, per-cell estimates and small exact tests.

Modules here import only from ``lengthlens.data`` and each other.
"""
