"""Stage 3, analyses: Table 3 and the arms table, censoring, attribution, Table 4 and compare, extra tokens.

``analyse`` (in :mod:`lengthlens.analyses.analyse`) runs them all; modules here import from ``data`` and ``stats``.
"""

#: What a worker process of the report's pass imports when it starts (the jobs' modules). Here, in a module that
#: imports nothing, so that the command line can start the workers before it imports the analysis itself.
WORKER_MODULES = ("lengthlens.analyses.group_pass",)
