"""The accuracy loss the study flags, in one place: the registry's point rule and the exact loss test both read it."""

from __future__ import annotations

__all__ = ["ACCURACY_DROP_PP"]

#: A cell drops accuracy by at least this many points ("drop_2pp" in the study).
ACCURACY_DROP_PP = 2.0
