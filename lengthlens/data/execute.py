"""Whether generated code may be executed: ``execute_code``, ``--execute-code`` and ``LENGTHLENS_EXECUTE_CODE``.

In a module that imports nothing, so that the command line can offer the flags without loading the data
stack; :mod:`lengthlens.data.grading.sandbox` decides what a choice means on this machine.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["ENV_VAR", "add_execution_flags", "execution_mode", "mode_from_args", "mode_from_env"]

#: The environment variable the command line reads when neither ``--execute-code`` nor
#: ``--execute-code-unsafe`` is given: ``1``/``true``/``yes``/``sandbox`` (execute, isolated), ``unsafe``
#: (execute, isolated where possible), ``0``/``false``/``no``/``off`` or unset (do not execute).
ENV_VAR = "LENGTHLENS_EXECUTE_CODE"

_ON = {"1", "true", "yes", "on", "sandbox"}
_OFF = {"", "0", "false", "no", "off"}


def execution_mode(value: Any) -> str:
    """``off``, ``sandbox`` or ``unsafe`` from an ``execute_code`` argument (False/True/"unsafe" or those names).

    Examples
    --------
    >>> execution_mode(False), execution_mode(True), execution_mode("unsafe")
    ('off', 'sandbox', 'unsafe')
    """
    if value is None or value is False:
        return "off"
    if value is True:
        return "sandbox"
    if isinstance(value, str):
        v = value.strip().lower()
        if v in _OFF:
            return "off"
        if v in _ON:
            return "sandbox"
        if v == "unsafe":
            return "unsafe"
    raise ValueError(f"execute_code must be False, True or 'unsafe', not {value!r}")


def mode_from_env(environ: Any = None) -> str:
    """The execution mode :data:`ENV_VAR` asks for (``off`` when unset); a value it does not know is an error."""
    raw = (os.environ if environ is None else environ).get(ENV_VAR, "")
    try:
        return execution_mode(raw)
    except ValueError:
        raise ValueError(f"{ENV_VAR}={raw!r} is not understood: use 1 (execute, isolated), unsafe "
                         f"(isolated where possible) or 0") from None


def add_execution_flags(parser: Any) -> None:
    """``--execute-code``, ``--execute-code-unsafe`` and ``--grading-budget`` on an argparse parser (report, snapshot,
    check)."""
    parser.add_argument("--execute-code", dest="execute_code", action="store_const", const="sandbox", default=None,
                        help="grade HumanEval/LiveCodeBench runs by running their code, isolated by bubblewrap (refused "
                             f"where it cannot run). Default: off, or ${ENV_VAR} (1, unsafe, 0); see docs/execution.md")
    parser.add_argument("--execute-code-unsafe", dest="execute_code", action="store_const", const="unsafe",
                        help="as --execute-code, but where the sandbox cannot run, run the code with resource limits "
                             "only (no isolation; a warning says so)")
    parser.add_argument("--grading-budget", dest="grading_budget", type=float, default=None, metavar="SECONDS",
                        help="the most seconds all executed programs may take together (default: "
                             "$LENGTHLENS_GRADING_BUDGET_S, else 600); runs not graded by then stay ungraded, counted "
                             "in a warning")


def mode_from_args(args: Any) -> str:
    """A command's execution mode: its flag, else :data:`ENV_VAR`, else ``off``."""
    return getattr(args, "execute_code", None) or mode_from_env()
