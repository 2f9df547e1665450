"""Stage 1, data: read logs (raw layout, flat records), validate each record, resolve correctness, pair arms.

Modules here import nothing from the later stages (``stats``, ``analyses``, ``report``).
"""
