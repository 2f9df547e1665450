"""Find the run folders of the raw layout under a root, and account for everything there that looks like one but is not.

Layout: ``<dataset>/<method>/<params>/case_NNN/seed_K/``. Every ``seed_K`` folder under a
``case_*`` folder is a run. Each of these is listed with its reason instead of vanishing:
a ``seed_K`` or ``case_*`` that is a file, a folder inside a case folder not named ``seed_K``, a
symlink that cannot be followed (a loop, or dangling), a folder reached twice through symlinks (a
cycle), a folder that cannot be listed (permissions, a path past PATH_MAX), and any run whose path
is not valid UTF-8 (shown with ``\\xNN`` escapes: such a name cannot be put in the table). The walk
uses an explicit stack, so no folder depth can exhaust Python's recursion limit.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from lengthlens.data.safeio import display_path, os_reason

#: Names of case folders and of run (seed) folders.
CASE_PATTERN = re.compile(r"^case_.+$")
SEED_PATTERN = re.compile(r"^seed_(\d+)$")


@dataclass(frozen=True)
class RunDir:
    """A run folder found on disk with the arm coordinates its path gives."""

    path: str
    dataset: str
    method: str
    params: str
    item_id: str
    seed: int


def _utf8(path: str) -> bool:
    try:
        path.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _is_dir(e: os.DirEntry) -> bool | str:
    """True for a folder (symlinks followed), False for anything else, or the reason a symlink cannot be followed."""
    try:
        if e.is_dir(follow_symlinks=True):
            return True
        if e.is_symlink():
            os.stat(e.path)  # raises for a loop or a dangling link
        return False
    except OSError as exc:
        return f"cannot follow symlink: {os_reason(exc)}"


class _Walk:
    """One discovery: the runs found and the entries listed as not readable as runs."""

    def __init__(self) -> None:
        self.found: list[RunDir] = []
        self.unplaced: list[tuple[str, str]] = []
        self.seen: dict[tuple[int, int], str] = {}

    def skip(self, path: str, reason: str) -> None:
        self.unplaced.append((display_path(path), reason))

    def entries(self, d: str) -> list[os.DirEntry] | None:
        try:
            with os.scandir(d) as it:
                return sorted(it, key=lambda e: e.name)
        except OSError as exc:
            self.skip(d, f"cannot list folder: {os_reason(exc)}")
            return None

    def first_visit(self, d: str) -> bool:
        try:
            st = os.stat(d)
        except OSError as exc:
            self.skip(d, f"cannot list folder: {os_reason(exc)}")
            return False
        key = (st.st_dev, st.st_ino)
        if key in self.seen:
            self.skip(d, f"symlink cycle or second link: the same folder as {display_path(self.seen[key])} (read once)")
            return False
        self.seen[key] = d
        return True

    def walk(self, top: str, top_parts: tuple[str, ...]) -> None:
        stack: list[tuple[str, str, tuple[str, ...]]] = [("dir", top, top_parts)]
        while stack:
            kind, d, parts = stack.pop()
            if kind == "case":
                self.case(d, parts)
                continue
            if not self.first_visit(d):
                continue
            todo = []
            for e in self.entries(d) or ():
                if e.name.startswith("."):
                    continue
                is_dir = _is_dir(e)
                if isinstance(is_dir, str):
                    self.skip(e.path, is_dir)
                elif is_dir:
                    todo.append(("case" if CASE_PATTERN.match(e.name) else "dir", e.path, parts + (e.name,)))
                elif CASE_PATTERN.match(e.name):
                    self.skip(e.path, f"{e.name} is a file, not a case folder")
            stack.extend(reversed(todo))  # depth first, in name order

    def case(self, d: str, parts: tuple[str, ...]) -> None:
        for s in self.entries(d) or ():
            if s.name.startswith("."):
                continue
            m = SEED_PATTERN.match(s.name)
            is_dir = _is_dir(s)
            if isinstance(is_dir, str):
                self.skip(s.path, is_dir)
            elif m and not is_dir:
                self.skip(s.path, f"{s.name} is a file, not a run folder")
            elif is_dir and not m:
                self.skip(s.path, "folder inside a case folder that is not named seed_<K>: not a run")
            elif m:
                self.run(s.path, parts, int(m.group(1)))

    def run(self, path: str, parts: tuple[str, ...], seed: int) -> None:
        if len(parts) < 4:
            self.skip(path, "run folder is not under <dataset>/<method>/<params>/")
        elif not _utf8(path):
            self.skip(path, "path is not valid UTF-8 (bytes shown as \\xNN): rename the folder to read this run")
        else:
            self.found.append(RunDir(path, parts[-4], parts[-3], parts[-2], parts[-1], seed))


def discover(root: str | os.PathLike[str]) -> tuple[list[RunDir], list[tuple[str, str]]]:
    """Find every run folder under ``root``; also return (path, reason) of each entry that looks like a run but is not read.

    The dataset/method/params of a run are the three folders above its ``case_*`` folder, so the
    root may sit anywhere above them (``runs/``, one dataset folder, one arm folder, a case folder
    or a single run folder). Runs come in depth-first name order.
    """
    root_path = Path(root).resolve()
    base_parts = root_path.parts
    w = _Walk()
    m = SEED_PATTERN.match(root_path.name)
    if m and CASE_PATTERN.match(root_path.parent.name):
        # A single run folder given as root.
        w.run(str(root_path), base_parts[:-1], int(m.group(1)))
        return w.found, w.unplaced
    if CASE_PATTERN.match(root_path.name):
        w.case(str(root_path), base_parts)
        return w.found, w.unplaced
    w.walk(str(root_path), base_parts)
    return w.found, w.unplaced
