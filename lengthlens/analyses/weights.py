"""The user's workload: how much each dataset weighs in "on my workload", the estimand more items settle.

A rule's *workload* effect is the weighted mean of its datasets' effects (ratios on the log scale, so
the workload R/R* is the weighted geometric mean of the datasets' R/R*; the accuracy change in
points). The weights are the user's traffic mix: equal by default, or given as ``dataset=w,…`` on the
command line (``--weights``), as a file (JSON object, YAML mapping, or CSV with ``dataset`` and
``weight`` columns), or as a mapping in the API. They are normalised to sum to 1 over the datasets
that are present; a dataset the data lacks is an error (its effect is unknown, so the workload's is
too), and a dataset the weights leave out gets weight 0 and is named in :attr:`Weights.unweighted`.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lengthlens.data.errors import InputError

__all__ = ["EQUAL", "Weights", "parse_weights"]


@dataclass(frozen=True)
class Weights:
    """Dataset weights of the workload estimand: ``given`` (None: equal weights) and where they came from.

    Examples
    --------
    >>> w = parse_weights("gsm8k=3,aime24=1")
    >>> w.normalised(["aime24", "gsm8k", "mtbench"])
    {'aime24': 0.25, 'gsm8k': 0.75, 'mtbench': 0.0}
    >>> EQUAL.normalised(["a", "b"])
    {'a': 0.5, 'b': 0.5}
    """

    given: Mapping[str, float] | None = None
    source: str = "equal weights"
    #: Where the weights came from, for messages (the file or the option's text).
    origin: str = field(default="", compare=False)

    @property
    def equal(self) -> bool:
        return self.given is None

    def normalised(self, datasets: Sequence[str]) -> dict[str, float]:
        """Each of ``datasets``' weight, summing to 1 (in the order given).

        Raises
        ------
        InputError
            When the weights name a dataset not among ``datasets`` with a positive weight, or give every one of
            ``datasets`` weight 0.
        """
        names = list(dict.fromkeys(datasets))
        if not names:
            return {}
        if self.given is None:
            return {d: 1.0 / len(names) for d in names}
        missing = sorted(d for d, w in self.given.items() if w > 0 and d not in names)
        if missing:
            raise InputError(f"{self.origin or 'the weights'}: weight given to dataset(s) {', '.join(missing)} that the "
                             f"runs do not have (datasets here: {', '.join(names)}); a workload effect needs every "
                             "weighted dataset's own effect")
        total = sum(self.given.get(d, 0.0) for d in names)
        if not total > 0:
            raise InputError(f"{self.origin or 'the weights'}: every dataset here ({', '.join(names)}) has weight 0")
        return {d: self.given.get(d, 0.0) / total for d in names}

    def unweighted(self, datasets: Sequence[str]) -> tuple[str, ...]:
        """The datasets present that the weights leave out (weight 0), for the reader."""
        if self.given is None:
            return ()
        return tuple(d for d in dict.fromkeys(datasets) if self.given.get(d, 0.0) == 0.0)

    def describe(self) -> str:
        """One phrase for the report: ``equal weights`` or the weights as given."""
        if self.given is None:
            return "equal weights"
        return "weights " + ", ".join(f"{d}={w:g}" for d, w in self.given.items())


#: Equal weights over the datasets present (the default).
EQUAL = Weights()


def _number(text: object, where: str, name: str) -> float:
    try:
        w = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError(f"{where}: weight of {name!r} is {text!r}, not a number") from None
    if not math.isfinite(w) or w < 0:
        raise InputError(f"{where}: weight of {name!r} is {w:g}; weights are finite and at least 0")
    return w


def _from_mapping(values: Mapping, where: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, w in values.items():
        name = str(name).strip()
        if not name:
            raise InputError(f"{where}: a weight with an empty dataset name")
        if name in out:
            raise InputError(f"{where}: dataset {name!r} is weighted twice")
        out[name] = _number(w, where, name)
    if not out:
        raise InputError(f"{where}: no weights given")
    return out


def _from_file(path: Path) -> dict[str, float]:
    where = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{where}: cannot read the weights file ({e})") from None
    suffix = path.suffix.lower()
    if suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise InputError(f"{where}, line {e.lineno}: not JSON ({e.msg})") from None
    elif suffix in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise InputError(f"{where}: not YAML ({e})") from None
    elif suffix == ".csv":
        rows = list(csv.DictReader(text.splitlines()))
        if not rows or not {"dataset", "weight"} <= set(rows[0]):
            raise InputError(f"{where}, line 1: a weights CSV has the columns dataset and weight")
        data = {}
        for line, row in enumerate(rows, start=2):
            name = (row["dataset"] or "").strip()
            if name in data:
                raise InputError(f"{where}, line {line}: dataset {name!r} is weighted twice")
            data[name] = _number(row["weight"], f"{where}, line {line}, field weight", name)
    else:
        raise InputError(f"{where}: a weights file is .json, .yaml or .csv, not {suffix or 'without a suffix'}")
    if not isinstance(data, Mapping):
        raise InputError(f"{where}: the weights are a mapping of dataset to weight, not {type(data).__name__}")
    return _from_mapping(data, where)


def parse_weights(spec: str | Path | Mapping[str, float] | Weights | None) -> Weights:
    """The workload weights from what a user gives: None (equal), ``dataset=w,…``, a file's path, or a mapping.

    Parameters
    ----------
    spec : None or ``"equal"`` for equal weights; ``"gsm8k=0.6,aime24=0.4"``; the path of a .json, .yaml or .csv
        file (CSV columns ``dataset`` and ``weight``); a mapping of dataset to weight; or :class:`Weights` as is.

    Returns
    -------
    Weights
        Not yet normalised: :meth:`Weights.normalised` does that against the datasets present.

    Examples
    --------
    >>> parse_weights(None).equal
    True
    >>> parse_weights({"gsm8k": 2, "mtbench": 1}).normalised(["gsm8k", "mtbench"])["gsm8k"]
    0.6666666666666666
    """
    if spec is None or isinstance(spec, Weights):
        return spec or EQUAL
    if isinstance(spec, Mapping):
        given = _from_mapping(spec, "weights")
        return Weights(given, "given", "weights")
    text = str(spec).strip()
    if text.lower() == "equal":
        return EQUAL
    path = Path(text)
    if isinstance(spec, Path) or (path.suffix.lower() in (".json", ".yaml", ".yml", ".csv") and "=" not in text):
        return Weights(_from_file(path), f"from {path.name}", str(path))
    if "=" not in text:
        raise InputError(f"--weights {text!r}: give dataset=weight pairs separated by commas (gsm8k=0.6,aime24=0.4), "
                         "a .json/.yaml/.csv file, or 'equal'")
    pairs: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, w = part.rpartition("=")
        if not sep or not name.strip():
            raise InputError(f"--weights {text!r}: {part!r} is not dataset=weight")
        if name.strip() in pairs:
            raise InputError(f"--weights {text!r}: dataset {name.strip()!r} is weighted twice")
        pairs[name.strip()] = w
    return Weights(_from_mapping(pairs, f"--weights {text!r}"), "given", f"--weights {text!r}")
