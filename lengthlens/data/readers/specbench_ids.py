"""The arm of a Spec-Bench answer file from its model id, as Spec-Bench's and the methods' own scripts write it.

Forms read without help (``evaluation/inference_*.py`` and ``eval.sh`` of Spec-Bench, commit
fd2c1cd; Medusa's ``llm_judge/gen_model_answer_medusa.py``, commit e2a5d20; Hydra's
``llm_judge/gen_model_answer_hydra.py``, commit 3f39fbd):

- ``<model>-<method>[-<extra>]-<dtype>[-temp(erature)-<T>]``: ``vicuna-7b-v1.3-sps-68m-float16-temp-0.0``,
  ``vicuna-7b-v1.3-eagle-float16-temperature-0.0``, ``vicuna-7b-v1.3-lade-level-5-win-7-guess-7-float16``;
- ``<model>-<method>`` without a dtype, as eval.sh names ``recycling`` and ``samd``;
- Medusa's and Hydra's own ``<method>-<model>[-<run>]-temperature-<T>-posterior_threshold-<x>-posterior_alpha-<y>[...]``.

Medusa and Hydra verify with *typical acceptance* (a relaxed, lossy rule: ``posterior_threshold``,
``posterior_alpha``) whenever the temperature is above 0; such arms are named ``medusa_typical`` /
``hydra_typical``, so they are analysed as relaxed arms, not as lossless ones. Medusa's own script
ignores the temperature in its id and takes FastChat's per-category temperatures, so its files are
``medusa_typical`` whatever the id says. Anything else (EAGLE's own ``<model-id>-temperature-<T>``
ids are free-form) needs ``method_map``: an id (or a glob) to a method, or to a mapping of
``target``, ``draft``, ``method``, ``params``, ``temperature``.
"""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path
from typing import Any

#: Method names that Spec-Bench's inference scripts put in the model id (eval.sh), and their variants.
KNOWN_METHODS = frozenset({"vanilla", "sps", "eagle", "eagle2", "eagle3", "hydra", "medusa", "pld", "lade", "lookahead",
                           "rest", "space", "recycling", "samd", "baseline"})
_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64", "fp16", "bf16", "fp32"})
_AUTOREGRESSIVE = frozenset({"vanilla", "baseline", "autoregressive"})
_TEMP = ("temp", "temperature")
#: Methods that verify with typical acceptance above temperature 0 (their ``evaluate_posterior``).
TYPICAL_ACCEPTANCE = frozenset({"medusa", "hydra"})
_MAP_KEYS = frozenset({"target", "draft", "method", "params", "temperature"})


def _temperature(tokens: list[str]) -> tuple[float | None, int | None]:
    """The temperature after a ``temp``/``temperature`` token, and that token's index."""
    for i, t in enumerate(tokens[:-1]):
        if t in _TEMP:
            try:
                return float(tokens[i + 1]), i
            except ValueError:
                return None, None
    return None, None


def _arm(target: str, method: str, draft: str, params: str, temperature: float | None) -> dict[str, Any]:
    auto = method in _AUTOREGRESSIVE
    return {"target": target, "method": "autoregressive" if auto else method, "draft": "" if auto else draft,
            "params": params, "temperature": temperature}


def _own_typical(tokens: list[str], model_id: str) -> dict[str, Any] | None:
    """Medusa's / Hydra's own ids: ``<method>-<model>[-<run>]-temperature-<T>-posterior_threshold-<x>-...``."""
    if tokens[0] not in TYPICAL_ACCEPTANCE or "posterior_threshold" not in tokens:
        return None
    temp, ti = _temperature(tokens)
    if ti is None:
        return None
    model = tokens[1:ti]
    run = None
    if len(model) > 1 and model[-1].isdigit():
        run = int(model.pop())  # Medusa's repeated runs: medusa-vicuna-7b-v1.3-1-temperature-...
    settings = dict(zip(tokens[ti + 2::2], tokens[ti + 3::2]))
    typical = tokens[0] == "medusa" or (temp or 0) > 0
    method = f"{tokens[0]}_typical" if typical else tokens[0]
    params = f"pt{settings.get('posterior_threshold')}_pa{settings.get('posterior_alpha')}" + (
        f"_{settings['sampling']}" if "sampling" in settings else "")
    out = _arm("-".join(model), method, tokens[0] + "-" + "-".join(model), params if typical else f"temp{temp}",
               None if tokens[0] == "medusa" else temp)
    out["run"] = run
    return out


def parse_model_id(model_id: str) -> dict[str, Any]:
    """target, method, draft, params and temperature from a Spec-Bench model id (ValueError if unreadable).

    Examples
    --------
    >>> parse_model_id("vicuna-7b-v1.3-sps-68m-float16-temp-0.0")["draft"]
    'sps-68m'
    >>> parse_model_id("vicuna-7b-v1.3-samd")["method"]
    'samd'
    >>> parse_model_id("medusa-vicuna-7b-v1.3-temperature-0.0-posterior_threshold-0.09-posterior_alpha-0.3")["method"]
    'medusa_typical'
    """
    tokens = model_id.split("-")
    own = _own_typical(tokens, model_id)
    if own is not None:
        return own
    temp, ti = _temperature(tokens)
    di = next((i for i, t in enumerate(tokens) if t in _DTYPES), None)
    end = di if di is not None else (ti if ti is not None else len(tokens))
    mi = next((i for i, t in enumerate(tokens[:end]) if i > 0 and t in KNOWN_METHODS), None)
    if mi is None:
        raise ValueError(f"cannot read {model_id!r} as <model>-<method>[-<extra>][-<dtype>][-temp-<T>] "
                         f"(methods known: {', '.join(sorted(KNOWN_METHODS))}; dtypes: {', '.join(sorted(_DTYPES))}); "
                         "give its arm with --method-map ID=METHOD")
    method = tokens[mi]
    if method in TYPICAL_ACCEPTANCE and (temp or 0) > 0:
        method += "_typical"  # Spec-Bench's medusa / hydra at T > 0: typical acceptance
    params = "-".join(([tokens[di]] if di is not None else []) + ([f"temp{tokens[ti + 1]}"] if temp is not None else []))
    return _arm("-".join(tokens[:mi]), method, "-".join(tokens[mi:end]), params or "default",
                temp)


def parse_method_map(items: list[str]) -> dict[str, Any]:
    """The command line's ``--method-map`` values (``ID=METHOD``, ``ID={json}``, or a JSON file) as one mapping."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item and Path(item).is_file():
            from lengthlens.data.safeio import decode_json, read_input

            try:  # read as every input is: a regular file under the size cap; a duplicated key is an error
                data = decode_json(read_input(item))
            except (OSError, ValueError) as exc:
                raise ValueError(f"--method-map {item}: unreadable JSON file ({exc})") from None
            if not isinstance(data, dict):
                raise ValueError(f"--method-map {item}: expected a JSON object mapping model ids to arms")
            out.update(data)
            continue
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise ValueError(f"--method-map {item!r}: expected ID=METHOD, ID={{json}} or a JSON file")
        if value.startswith("{"):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"--method-map {item!r}: bad JSON ({exc.msg})") from None
        out[key] = value
    return check_method_map(out)


def check_method_map(method_map: dict[str, Any] | None) -> dict[str, Any]:
    """``method_map`` with each value checked: a method name, or a mapping of :data:`_MAP_KEYS`."""
    for key, value in (method_map or {}).items():
        if isinstance(value, dict):
            bad = sorted(set(value) - _MAP_KEYS)
            if bad or "method" not in value:
                raise ValueError(f"method_map[{key!r}]: needs 'method' and only {', '.join(sorted(_MAP_KEYS))}"
                                 + (f" (not {', '.join(bad)})" if bad else ""))
        elif not isinstance(value, str) or not value:
            raise ValueError(f"method_map[{key!r}]: expected a method name or a mapping, got {value!r}")
    return dict(method_map or {})


def _settings_suffix(model_id: str) -> tuple[str, str, float | None]:
    """(the id before its decoding settings, the settings as params, the temperature) of a free-form id."""
    tokens = model_id.split("-")
    temp, ti = _temperature(tokens)
    if ti is None:
        return model_id, "default", None
    return "-".join(tokens[:ti]), f"temp{tokens[ti + 1]}", temp


def resolve_id(model_id: str, method_map: dict[str, Any] | None) -> dict[str, Any]:
    """The arm of an answer file: ``method_map``'s entry for the id (exact, then the first matching glob), else parsed.

    A method name alone keeps what can be parsed from the id; for a free-form id the target is the id
    before its ``-temperature-<T>`` part and the params are ``temp<T>``.
    """
    mm = method_map or {}
    entry = mm.get(model_id)
    if entry is None:
        entry = next((v for k, v in mm.items() if any(c in k for c in "*?[") and fnmatch.fnmatchcase(model_id, k)), None)
    if entry is None:
        return parse_model_id(model_id)
    fields = {"method": entry} if isinstance(entry, str) else dict(entry)
    try:
        base = parse_model_id(model_id)
    except ValueError:
        head, params, temp = _settings_suffix(model_id)
        base = {"target": head, "draft": fields["method"], "params": params, "temperature": temp}
    method = fields["method"]
    base.setdefault("draft", method)
    arm = _arm(fields.get("target", base["target"]), method, fields.get("draft", base["draft"] or method),
               fields.get("params", base["params"]), fields.get("temperature", base.get("temperature")))
    arm["run"] = base.get("run")
    return arm
